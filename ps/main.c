/* ps/main.c — kfac-ps: configuration, logging, OpenBLAS threads, then the
 * server (ps/server.h) until the run is over.
 *
 *   kfac-ps --config deploy/examples/mnist-cnn.ini [--key value ...]
 *
 * Exit codes: 0 clean (all steps, target accuracy, SIGINT/SIGTERM), 1 fatal
 * (model or data missing, port busy, diverged), 2 usage (bad option), 78
 * security configuration refused (a non-loopback bind without CURVE keys,
 * an unreadable key file or allowlist; common/net/auth.h). */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "common/base/affinity.h"
#include "common/base/blas.h"
#include "common/base/log.h"
#include "common/net/auth.h"
#include "common/run/runcfg.h"
#include "ps/server.h"

int main(int argc, char **argv) {
    blas_restart_if_generic(argv);
    runcfg_t cfg;
    char err[1024] = "";
    int rc = runcfg_load(&cfg, RUNCFG_ROLE_PS, argc, argv, err, sizeof err);
    if (rc == CONFIG_HELP || rc == CONFIG_DUMP) {
        runcfg_release(&cfg);
        return 0;
    }
    if (rc == 0) rc = ps_config_check(&cfg, err, sizeof err);
    if (rc < 0) {
        fprintf(stderr, "kfac-ps: %s\n%s", err, strstr(err, "--help") ? "" : "(see kfac-ps --help)\n");
        runcfg_release(&cfg);
        return 2;
    }
    log_level_t level = LOG_LEVEL_INFO;
    if (log_level_parse(cfg.log_level, &level) < 0) {
        fprintf(stderr, "kfac-ps: [run] log_level: expected error, warn, info or debug, got '%s'\n", cfg.log_level);
        runcfg_release(&cfg);
        return 2;
    }
    log_init(level, "kfac-ps");
    if (log_level_now >= LOG_LEVEL_DEBUG) {
        char *text = config_to_text(runcfg_spec(RUNCFG_ROLE_PS), &cfg, NULL, 0);
        log_debug("configuration:\n%s", text ? text : "(out of memory)");
        free(text);
    }
    const char *what = NULL, *cpus = runcfg_cpus(&cfg, RUNCFG_ROLE_PS, &what);
    if (affinity_apply(cpus, what, err, sizeof err) < 0) {
        log_error("%s", err);
        runcfg_release(&cfg);
        return 2;
    }
    if (auth_server_check(&cfg, err, sizeof err) < 0) { /* keys, or a loopback bind (docs/security.md) */
        log_error("%s", err);
        runcfg_release(&cfg);
        return AUTH_EXIT_CONFIG;
    }
    blas_set_threads(cfg.ps_threads);
    ps_server_t *s = ps_server_new(&cfg, err, sizeof err);
    if (!s) {
        log_error("%s", err);
        runcfg_release(&cfg);
        return 1;
    }
    rc = ps_server_run(s);
    ps_server_free(&s);
    runcfg_release(&cfg);
    return rc;
}
