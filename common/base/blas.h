/* common/base/blas.h — OpenBLAS set-up shared by every program.
 *
 * OpenBLAS 0.3.21 (Debian 12) does not recognise some CPUs (virtual CPUs
 * with a generic model name, and CPUs newer than the library) and falls back
 * to its generic "Prescott" kernels: several times slower, and its
 * single-threaded strtri (inside spotri, so every Cholesky inverse) crashes in
 * strsm_kernel_RT for odd n from about 400 on. OpenBLAS reads
 * OPENBLAS_CORETYPE only when it loads, so blas_init() restarts the program
 * once with OPENBLAS_CORETYPE=SkylakeX (AVX-512 CPUs) or Haswell (AVX2 + FMA)
 * when the library chose Prescott on a CPU that has them. An explicit
 * OPENBLAS_CORETYPE is respected.
 */
#ifndef KFAC_BLAS_H
#define KFAC_BLAS_H

/* Call first thing in main(): may execv() the program with the same argv
 * (returns normally when no restart is needed or the restart failed). */
void blas_restart_if_generic(char **argv);

/* Set the OpenBLAS thread count (>= 1) and log it with the kernel family,
 * and why the program restarted if it did. */
void blas_set_threads(int n);

#endif
