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
 * A role of the client skeleton (common/net/daemon.h) without a setup: the
 * work is one inverse, the result one JobResult, and the skeleton's pending
 * list keeps every Job, in order. Threads: the libuv loop and the
 * skeleton's compute thread (LAPACK through common/kfac/kfac_inverse.h,
 * with [invertd] threads OpenBLAS threads).
 */
#ifndef KFAC_INVERTD_H
#define KFAC_INVERTD_H

#include "common/net/daemon.h"

/* The invertd role of the client skeleton, for client_daemon_main()
 * (static; never NULL). */
const client_daemon_role_t *invertd_role(void);

#endif
