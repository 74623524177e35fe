/* ps/server.h — kfac-ps, the parameter server: one ROUTER socket on one
 * libuv loop that owns the model (parameters with version t, momentum,
 * Polyak average, running factors, versioned inverses), runs the
 * synchronous gradient rounds, folds statistics, schedules inversion jobs
 * and writes the metrics. docs/architecture.md describes the message flow,
 * the scheduling and the staleness accounting; proto/msg.h the messages.
 *
 * Threads: the loop thread owns all state and runs the step math
 * (kfac_opt_step: one preconditioned update, milliseconds for the models in
 * models/); evaluation runs on its own thread (ps/eval.h) on copies.
 *
 * Ownership: the server borrows the configuration (it must outlive the
 * server) and owns everything else.
 */
#ifndef KFAC_PS_SERVER_H
#define KFAC_PS_SERVER_H

#include <stddef.h>

#include "common/run/runcfg.h"
#include "common/base/version.h"

/* The build this server speaks for is KFAC_BUILD_ID (common/base/version.h),
 * the same string the clients send in Hello; the first two words ("kfac" and
 * the release) must match, the rest is informational (the protocol version
 * is checked separately, from the envelope). */

typedef struct ps_server ps_server_t;

/* Checks across options that only the PS cares about, for a usage error
 * before anything starts: with [kfac] stats = sync, statistics exist only
 * every stats_every versions, so a staleness bound k >= 0 needs
 * k >= stats_every - 1 (else step t would wait forever). Returns 0 or
 * -EINVAL with the reason in err. */
int ps_config_check(const runcfg_t *cfg, char *err, size_t err_len);

/* Build the server: load the model and initialize the parameters from
 * [run] seed, the optimizer state, the test set and the evaluation thread,
 * the metrics files in [run] out_dir, and bind [ps] bind (port 0 picks a
 * free port; the endpoint bound is logged and written to out_dir/endpoint).
 * cfg is borrowed and must outlive the server; an empty [run] out_dir in it
 * is replaced by the run's folder (common/run/runpick.h: a new one, taken
 * only once everything else has started; with --resume, runs/latest's).
 * Returns NULL with the reason in err (a missing model or data file, a busy
 * port, ...) and, when rc_out is not NULL, the failure as a negative errno
 * in *rc_out for config_exit_status() (-ENOENT/-EINVAL: the model or data
 * files or their shapes, exit 78; -EADDRINUSE, -ENOMEM, ...: exit 1). */
ps_server_t *ps_server_new(runcfg_t *cfg, int *rc_out, char *err, size_t err_len);

/* Run until the run is over (all steps, the target accuracy, SIGINT or
 * SIGTERM) or a fatal error. Returns the process exit code: 0 clean, 1
 * fatal. */
int ps_server_run(ps_server_t *s);

/* Free everything (closes what is still open first). NULLs *s_p; NULL is a
 * no-op. */
void ps_server_free(ps_server_t **s_p);

#endif
