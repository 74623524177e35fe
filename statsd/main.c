/* statsd/main.c — kfac-statsd: K-FAC factor statistics for kfac-ps.
 *
 *   kfac-statsd --config run.ini --id 1
 *   kfac-statsd --ps tcp://10.0.0.5:5555 --id 2 --statsd.batch 256
 *
 * Environment: KFAC_PS ([cluster] ps), KFAC_DATA_DIR ([data] dir), KFAC_ID
 * ([statsd] id), between the --config file and the command line.
 *
 * Exit codes (common/base/config.h): 0 clean (Shutdown, SIGINT/SIGTERM), 1
 * runtime failure, 2 usage error, 78 configuration error (EX_CONFIG): after
 * kfac-ps's Welcome, a training data file under [data] dir is missing,
 * unreadable or malformed, or does not fit the model; the message names the
 * file. The model itself comes from kfac-ps ([model] file is not read here).
 * Also 78: kfac-ps still refuses its CURVE key after [cluster] admit_wait_s
 * of retries (common/net/admit.h).
 */
#include "common/net/daemon.h"
#include "statsd/statsd.h"

int main(int argc, char **argv) { return client_daemon_main(statsd_role(), argc, argv); }
