/* statsd/main.c — kfac-statsd: K-FAC factor statistics for kfac-ps.
 *
 *   kfac-statsd --config run.ini --id 1
 *   kfac-statsd --ps tcp://10.0.0.5:5555 --id 2 --statsd.batch 256
 *
 * Exit codes: 0 clean (Shutdown, SIGINT/SIGTERM), 1 fatal, 2 usage error.
 */
#include "common/net/client.h"
#include "common/run/runcfg.h"
#include "statsd/statsd.h"

int main(int argc, char **argv) {
    runcfg_t cfg;
    int code = 0;
    if (client_config_load(&cfg, RUNCFG_ROLE_STATSD, argc, argv, &code)) {
        runcfg_release(&cfg);
        return code;
    }
    statsd_server_t *s = statsd_server_new(&cfg);
    code = s ? statsd_server_run(s) : 1;
    statsd_server_free(&s);
    runcfg_release(&cfg);
    return code;
}
