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
 * Threads: the libuv loop and one compute thread (see worker/worker.h).
 * Ownership: the server borrows the configuration and owns the rest.
 */
#ifndef KFAC_STATSD_H
#define KFAC_STATSD_H

#include "common/run/runcfg.h"

typedef struct statsd_server statsd_server_t;

/* A stats worker for cfg (borrowed); sets the OpenBLAS threads. NULL on
 * failure (logged). */
statsd_server_t *statsd_server_new(const runcfg_t *cfg);

/* Run until Shutdown, a signal or a fatal error; returns the exit code. */
int statsd_server_run(statsd_server_t *s);

/* Free everything; NULLs *sp; NULL is a no-op. */
void statsd_server_free(statsd_server_t **sp);

#endif
