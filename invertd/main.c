/* invertd/main.c — kfac-invertd: damped inverses of K-FAC factors for kfac-ps.
 *
 *   kfac-invertd --config run.ini --id 3
 *   kfac-invertd --ps tcp://10.0.0.5:5555 --id 4 --threads 4 --delay-ms 200
 *
 * Environment: KFAC_PS ([cluster] ps), KFAC_ID ([invertd] id), between the
 * --config file and the command line (KFAC_DATA_DIR is accepted and unused).
 *
 * Exit codes (common/base/config.h): 0 clean (Shutdown, SIGINT/SIGTERM), 1
 * runtime failure, 2 usage error, 78 only when kfac-ps still refuses its
 * CURVE key after [cluster] admit_wait_s of retries (common/net/admit.h; 0:
 * at the first refusal). kfac-invertd reads no model or data file
 * (factors arrive from kfac-ps in jobs), so a missing one is not its error.
 */
#include "common/net/daemon.h"
#include "invertd/invertd.h"

int main(int argc, char **argv) { return client_daemon_main(invertd_role(), argc, argv); }
