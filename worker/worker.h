/* worker/worker.h — kfac-worker: a gradient worker.
 *
 * Protocol (docs/protocol.md): Hello -> Welcome (model, configuration, shard
 * rank/n_ranks) -> GetParams(0) -> Params(t) -> gradient of the shard's next
 * mini-batch at version t -> GradPush(t), which kfac-ps answers with
 * Params(t+1) once step t is done. With Params.want_stats (kfac stats=sync)
 * the batch's K-FAC statistics travel in the same GradPush.
 *
 * Threads: the libuv loop (socket, heartbeats, signals) and one compute
 * thread (common/net/zloop.h pool) that owns the network while a job runs; the
 * GradPush is encoded on the compute thread and sent by the loop.
 *
 * Ownership: the server borrows the configuration (it must outlive it) and
 * owns everything else.
 */
#ifndef KFAC_WORKER_H
#define KFAC_WORKER_H

#include "common/run/runcfg.h"

typedef struct worker_server worker_server_t;

/* A worker for configuration cfg (borrowed). Resolves [worker] device
 * (auto: the CPU, logged; cuda: an error in a build without CUDA) and sets
 * the OpenBLAS threads. Returns NULL on failure (logged). */
worker_server_t *worker_server_new(const runcfg_t *cfg);

/* Connect and run until Shutdown, a signal or a fatal error. Returns the
 * exit code: 0 clean, 1 fatal. */
int worker_server_run(worker_server_t *s);

/* Free everything; NULLs *sp; NULL is a no-op. */
void worker_server_free(worker_server_t **sp);

#endif
