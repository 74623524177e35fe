/* invertd/invertd.h — kfac-invertd: an inverse daemon.
 *
 * Protocol (docs/protocol.md): Hello -> Welcome -> JobRequest(max_n) -> Job
 * (held by kfac-ps until one exists) -> on the compute thread: unpack the
 * packed upper triangle, kfac_inverse_compute(F, n, damping, method) ->
 * JobResult (cholesky: packed upper triangle of (F + d I)^-1 and the damping
 * actually used; eigen: Q (n x n, column j = eigenvector j) and the
 * eigenvalues), which kfac-ps answers with the next Job. A job that fails
 * numerically is answered with Error(INTERNAL) naming the job, so the PS
 * hands it out again, and the daemon asks for work again. Any number of
 * daemons may run; they may start and stop at any time.
 *
 * [invertd] delay_ms holds every result back until that long after its job
 * arrived (staleness studies); max_n is sent with every JobRequest.
 *
 * Threads: the libuv loop and one compute thread (LAPACK through
 * common/kfac/kfac_inverse.h, with [invertd] threads OpenBLAS threads).
 * Ownership: the server borrows the configuration and owns the rest.
 */
#ifndef KFAC_INVERTD_H
#define KFAC_INVERTD_H

#include "common/run/runcfg.h"

typedef struct invertd_server invertd_server_t;

/* An inverse daemon for cfg (borrowed); sets the OpenBLAS threads. NULL on
 * failure (logged). */
invertd_server_t *invertd_server_new(const runcfg_t *cfg);

/* Run until Shutdown, a signal or a fatal error; returns the exit code. */
int invertd_server_run(invertd_server_t *s);

/* Free everything; NULLs *sp; NULL is a no-op. */
void invertd_server_free(invertd_server_t **sp);

#endif
