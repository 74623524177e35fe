/* worker/main.c — kfac-worker: gradients of one data shard for kfac-ps.
 *
 *   kfac-worker --config run.ini --id 1
 *   kfac-worker --ps tcp://10.0.0.5:5555 --id 2 --threads 2
 *
 * Exit codes: 0 clean (Shutdown, SIGINT/SIGTERM), 1 fatal (e.g. refused by
 * kfac-ps), 2 usage error.
 */
#include "common/net/client.h"
#include "common/run/runcfg.h"
#include "worker/worker.h"

int main(int argc, char **argv) {
    runcfg_t cfg;
    int code = 0;
    if (client_config_load(&cfg, RUNCFG_ROLE_WORKER, argc, argv, &code)) {
        runcfg_release(&cfg);
        return code;
    }
    worker_server_t *s = worker_server_new(&cfg);
    code = s ? worker_server_run(s) : 1;
    worker_server_free(&s);
    runcfg_release(&cfg);
    return code;
}
