/* statsd/statsd.h — kfac-statsd: a stats worker.
 *
 * Protocol (docs/protocol.md): Hello -> Welcome -> GetParams(0) -> Params(t)
 * -> on its own mini-batch of the training split (own seed stream per --id):
 * forward, labels sampled from the model (true Fisher) or the data labels
 * (empirical), backward with them, kfac_stats_compute, pack ->
 * StatsPush(params_version t), which kfac-ps answers at once with its newest
 * Params, so the statistics always come from fresh parameters. With
 * optimizer sgd or kfac stats=sync there is nothing to do: the daemon stays
 * connected and idle until Shutdown.
 *
 * A role of the client skeleton (common/net/daemon.h): setup from Welcome
 * (its own stream, or idle), the statistics of one batch, one StatsPush.
 * Threads: the libuv loop and the skeleton's compute thread.
 */
#ifndef KFAC_STATSD_H
#define KFAC_STATSD_H

#include "common/net/daemon.h"

/* The statsd role of the client skeleton, for client_daemon_main()
 * (static; never NULL). */
const client_daemon_role_t *statsd_role(void);

#endif
