/* common/base/blas.c — see blas.h. */
#include "common/base/blas.h"

#include <cblas.h>
#include <stdlib.h>
#include <strings.h>
#include <unistd.h>

#include "common/base/log.h"

void blas_restart_if_generic(char **argv) {
    if (getenv("OPENBLAS_CORETYPE") || !argv || !argv[0]) return;
    const char *core = openblas_get_corename();
    if (!core || strcasecmp(core, "Prescott") != 0) return;
    __builtin_cpu_init();
    if (!__builtin_cpu_supports("avx2") || !__builtin_cpu_supports("fma")) return;
    /* The newest kernel family the CPU can run: SkylakeX (AVX-512) measured
     * 1.8x Haswell's sgemm and 5x Prescott's on a Sapphire Rapids VM. */
    int avx512 = __builtin_cpu_supports("avx512f") && __builtin_cpu_supports("avx512dq") &&
                 __builtin_cpu_supports("avx512bw") && __builtin_cpu_supports("avx512vl");
    if (setenv("OPENBLAS_CORETYPE", avx512 ? "SkylakeX" : "Haswell", 1) != 0) return;
    setenv("KFAC_BLAS_RESTARTED", core, 1);
    execv("/proc/self/exe", argv);
    unsetenv("OPENBLAS_CORETYPE"); /* the restart failed: go on as we are */
    unsetenv("KFAC_BLAS_RESTARTED");
}

void blas_set_threads(int n) {
    openblas_set_num_threads(n > 0 ? n : 1);
    const char *why = getenv("KFAC_BLAS_RESTARTED");
    if (why)
        log_info("OpenBLAS had chosen its %s kernels on this AVX2 CPU (slow; their strtri crashes): "
                 "restarted with OPENBLAS_CORETYPE=%s", why, getenv("OPENBLAS_CORETYPE"));
    log_info("OpenBLAS threads: %d (core %s)", openblas_get_num_threads(), openblas_get_corename());
}
