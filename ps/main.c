/* ps/main.c — kfac-ps: configuration, logging, OpenBLAS threads, then the
 * server (ps/server.h) until the run is over.
 *
 *   kfac-ps --config deploy/examples/mnist-cnn.ini [--key value ...]
 *
 * Exit codes: 0 clean (all steps, target accuracy, SIGINT/SIGTERM), 1 fatal
 * (model or data missing, port busy, diverged), 2 usage (bad option). */
#include <cblas.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>
#include <unistd.h>

#include "common/log.h"
#include "common/runcfg.h"
#include "ps/server.h"

/* OpenBLAS 0.3.21 does not recognise some virtual CPUs and falls back to its
 * generic "Prescott" kernels: three times slower updates here, and crashes
 * in other daemons' Cholesky inverses. OPENBLAS_CORETYPE is read only when
 * the library loads, so on an AVX2 + FMA CPU the program restarts itself
 * once with OPENBLAS_CORETYPE=Haswell. An explicit setting is respected. */
static void s_blas_core_check(char **argv) {
    if (getenv("OPENBLAS_CORETYPE") || !argv || !argv[0]) return;
    const char *core = openblas_get_corename();
    if (!core || strcasecmp(core, "Prescott") != 0) return;
    __builtin_cpu_init();
    if (!__builtin_cpu_supports("avx2") || !__builtin_cpu_supports("fma")) return;
    if (setenv("OPENBLAS_CORETYPE", "Haswell", 1) != 0) return;
    setenv("KFAC_BLAS_RESTARTED", core, 1);
    execv("/proc/self/exe", argv);
    unsetenv("OPENBLAS_CORETYPE"); /* the restart failed: go on with what we have */
    unsetenv("KFAC_BLAS_RESTARTED");
}

int main(int argc, char **argv) {
    s_blas_core_check(argv);
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
    openblas_set_num_threads(cfg.ps_threads);
    if (getenv("KFAC_BLAS_RESTARTED"))
        log_info("OpenBLAS had chosen its %s kernels on this AVX2 CPU: restarted with OPENBLAS_CORETYPE=Haswell",
                 getenv("KFAC_BLAS_RESTARTED"));
    log_info("OpenBLAS threads: %d ([ps] threads = %d, core %s)", openblas_get_num_threads(), cfg.ps_threads,
             openblas_get_corename());
    ps_server_t *s = ps_server_new(&cfg, err, sizeof err);
    if (!s) {
        log_error("%s", err);
        runcfg_release(&cfg);
        return 1;
    }
    rc = ps_server_run(s);
    ps_server_destroy(&s);
    runcfg_release(&cfg);
    return rc;
}
