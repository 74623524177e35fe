/* invertd/main.c — kfac-invertd: damped inverses of K-FAC factors for kfac-ps.
 *
 *   kfac-invertd --config run.ini --id 3
 *   kfac-invertd --ps tcp://10.0.0.5:5555 --id 4 --threads 4 --delay-ms 200
 *
 * Exit codes: 0 clean (Shutdown, SIGINT/SIGTERM), 1 fatal, 2 usage error.
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
