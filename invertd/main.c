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
#include "common/net/client.h"
#include "common/run/runcfg.h"
#include "invertd/invertd.h"

int main(int argc, char **argv) {
    runcfg_t cfg;
    int code = 0;
    if (client_config_load(&cfg, RUNCFG_ROLE_INVERTD, argc, argv, &code)) {
        runcfg_release(&cfg);
        return code;
    }
    invertd_server_t *s = invertd_server_new(&cfg);
    code = s ? invertd_server_run(s) : 1;
    invertd_server_free(&s);
    runcfg_release(&cfg);
    return code;
}
