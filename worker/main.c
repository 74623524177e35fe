/* worker/main.c — kfac-worker: gradients of one data shard for kfac-ps.
 *
 *   kfac-worker --config run.ini --id 1
 *   kfac-worker --ps tcp://10.0.0.5:5555 --id 2 --threads 2
 *
 *   KFAC_PS=tcp://10.0.0.5:5555 KFAC_ID=3 kfac-worker --config run.ini
 *
 * Environment: KFAC_PS ([cluster] ps), KFAC_DATA_DIR ([data] dir), KFAC_ID
 * ([worker] id), between the --config file and the command line.
 *
 * Exit codes (common/base/config.h): 0 clean (Shutdown, SIGINT/SIGTERM), 1
 * runtime failure (e.g. refused by kfac-ps), 2 usage error, 78 configuration
 * error (EX_CONFIG): after kfac-ps's Welcome, a training data file under
 * [data] dir is missing, unreadable or malformed, or does not fit the
 * model; the message names the file. The model itself comes from kfac-ps,
 * so [model] file is not read here. Also 78: kfac-ps still refuses its
 * CURVE key after [cluster] admit_wait_s of retries (common/net/admit.h).
 */
#include "common/net/daemon.h"
#include "worker/worker.h"

int main(int argc, char **argv) { return client_daemon_main(worker_role(), argc, argv); }
