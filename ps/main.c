/* ps/main.c — kfac-ps: configuration, logging, OpenBLAS threads, then the
 * server (ps/server.h) until the run is over.
 *
 *   kfac-ps --config deploy/examples/mnist-cnn.ini [--key value ...]
 *
 * Environment: KFAC_PS ([cluster] ps, passed on to the clients in Welcome)
 * and KFAC_DATA_DIR ([data] dir), between the --config file and the
 * command line.
 *
 * Exit codes (common/base/config.h):
 *   0   clean: all steps, the target accuracy, SIGINT/SIGTERM;
 *   1   runtime failure: port busy, out of memory, diverged;
 *   2   usage error: a bad option or value (command line or --config file);
 *   78  configuration error found at start-up (EX_CONFIG): the model file or
 *       a data file is missing, unreadable or malformed, or the data do not
 *       fit the model (the message names the file), or [run] out_dir holds
 *       a previous run and [run] force is off (an empty out_dir is a new
 *       folder under runs/: common/run/runpick.h), or the security configuration
 *       is refused (a non-loopback bind without CURVE keys, an unreadable key
 *       file or allowlist; common/net/auth.h). systemd does not restart on
 *       2 or 78 (RestartPreventExitStatus=2 78). */
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "common/base/affinity.h"
#include "common/base/blas.h"
#include "common/base/log.h"
#include "common/net/auth.h"
#include "common/run/rundir.h"
#include "common/run/runcfg.h"
#include "ps/server.h"

int main(int argc, char **argv) {
    /* SIGHUP asks for a reload of the allowlists; until the loop's watcher
     * is installed (ps_server_new) there is nothing to reload, and the
     * default action would kill the daemon (systemctl reload at start-up). */
    signal(SIGHUP, SIG_IGN);
    blas_restart_if_generic(argv);
    runcfg_t cfg;
    char err[1024] = "";
    int status = 0;
    int rc = runcfg_load_checked(&cfg, RUNCFG_ROLE_PS, argc, argv, ps_config_check, err, sizeof err);
    if (rc == CONFIG_HELP || rc == CONFIG_DUMP) goto done;
    if (rc < 0) {
        fprintf(stderr, "kfac-ps: %s\n%s", err, strstr(err, "--help") ? "" : "(see kfac-ps --help)\n");
        status = 2;
        goto done;
    }
    log_level_t level = LOG_LEVEL_INFO;
    if (log_level_parse(cfg.log_level, &level) < 0) {
        fprintf(stderr, "kfac-ps: [run] log_level: expected error, warn, info or debug, got '%s'\n", cfg.log_level);
        status = 2;
        goto done;
    }
    /* With --resume the folder may hold this very run: the server appends to
     * it when a checkpoint is there, and refuses it (EEXIST, exit 78) when
     * none is and the folder is not free. */
    if (cfg.out_dir[0] && !cfg.force && !cfg.ckpt_resume && rundir_check_free(cfg.out_dir, err, sizeof err) < 0) {
        fprintf(stderr, "kfac-ps: %s\n", err);
        status = CONFIG_EXIT_CONFIG;
        goto done;
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
        status = 2;
        goto done;
    }
    if (auth_server_check(&cfg, err, sizeof err) < 0) { /* keys, or a loopback bind (docs/security.md) */
        log_error("%s", err);
        status = AUTH_EXIT_CONFIG;
        goto done;
    }
    blas_set_threads(cfg.daemon[RUNCFG_ROLE_PS].threads);
    int new_rc = runcfg_data_prepare(&cfg, err, sizeof err); /* idx | npy normalization, sent in Welcome */
    ps_server_t *s = new_rc < 0 ? NULL : ps_server_new(&cfg, &new_rc, err, sizeof err);
    if (!s) {
        status = config_exit_status(new_rc);
        log_error("%s%s", err, status == CONFIG_EXIT_CONFIG ? " (configuration error: exit 78)" : "");
        goto done;
    }
    status = ps_server_run(s);
    ps_server_free(&s);
done:
    runcfg_release(&cfg);
    return status;
}
