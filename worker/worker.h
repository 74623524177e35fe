/* worker/worker.h — kfac-worker: a gradient worker.
 *
 * Protocol (docs/protocol.md): Hello -> Welcome (model, configuration, shard
 * rank/n_ranks) -> GetParams(0) -> Params(t) -> gradient of the shard's next
 * mini-batch at version t -> GradPush(t), which kfac-ps answers with
 * Params(t+1) once step t is done. With Params.want_stats (kfac stats=sync)
 * the batch's K-FAC statistics travel in the same GradPush.
 *
 * A role of the client skeleton (common/net/daemon.h): the setup from
 * Welcome builds the model and this worker's shard (on the compute thread),
 * the work is one gradient, the result one GradPush. Threads: the libuv
 * loop (socket, heartbeats, signals) and the skeleton's compute thread,
 * which owns the network while a job runs; the GradPush is encoded on the
 * compute thread and sent by the loop. Ownership: the role's state is the
 * daemon's.
 */
#ifndef KFAC_WORKER_H
#define KFAC_WORKER_H

#include "common/net/daemon.h"

/* The worker role of the client skeleton, for client_daemon_main()
 * (static; never NULL). */
const client_daemon_role_t *worker_role(void);

#endif
