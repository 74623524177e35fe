/* common/net/client.h — the client side shared by kfac-worker, kfac-statsd and
 * kfac-invertd: start-up (configuration, logging, OpenBLAS threads), the
 * DEALER connection to kfac-ps with the Hello/Welcome handshake, heartbeats,
 * reconnection, Refuse/Shutdown/Bye handling and signals, all on one libuv
 * loop (common/net/zloop.h), and the effective configuration a Welcome
 * gives. What a message means for the model is common/net/wire.h; the
 * worker's and the stats worker's model, data and backend are
 * common/net/compute.h.
 *
 * The connection (client_t)
 *   client_start() connects the DEALER to [cluster] ps and sends Hello
 *   (role, build id, host, pid, sender_id = the --id). Hello is re-sent every
 *   CLIENT_HELLO_RETRY_MS until a Welcome comes, and "waiting for kfac-ps at
 *   ..." is logged once per CLIENT_WAIT_LOG_MS. The socket does not use
 *   ZMQ_IMMEDIATE (with it, the Shutdown a PS sends just before it exits can
 *   be discarded with the connection): messages sent while no PS is
 *   connected wait in a bounded queue and leave in order once it is, so
 *   every repeated Hello reaches the PS before any request that followed
 *   the first Welcome.
 *   Welcome: the config text is parsed into the effective configuration (the
 *   PS's shared sections, with this host's [data] dir and [run] log_level and
 *   the daemon's own section kept from the local configuration), the
 *   assigned id is used as sender_id from then on, and on_welcome runs. A
 *   Welcome while already welcomed is the answer to a repeated Hello that
 *   was queued before the daemon's first request, so it is ignored.
 *   Refuse: logged, the client stops with exit code 1.
 *   CURVE key refused in the handshake (kfac-ps's ZAP handler; seen by the
 *   socket's monitor, common/net/auth.h): ZeroMQ does not retry, so the
 *   client drops that connection and makes a new one after 1 s, 2 s, 4 s,
 *   ... at most 30 s apart (common/net/admit.h), one warning per try with
 *   the pause and the time left, for at most [cluster] admit_wait_s from
 *   the first refusal (its key may be listed meanwhile: kfac-ps watches its
 *   allowlist folders); then, or at once with admit_wait_s = 0, it stops
 *   with exit code 78 (AUTH_EXIT_CONFIG). A Welcome ends the window.
 *   Error INTERNAL in answer to Hello (kfac-ps cannot take it now: its id
 *   still held by a predecessor, no free slot): logged, Hello again after
 *   1 s, 2 s, 4 s, ... at most 30 s between tries.
 *   Shutdown: logged, the client stops with exit code 0 (no Bye).
 *   Error NOT_WELCOMED (the PS restarted and forgot us): Hello again; the
 *   next Welcome runs on_welcome again, and the daemon re-issues its
 *   request. Other Errors go to on_message.
 *   Heartbeat: answered at once (echo_ns = its mono_ns); besides, a Heartbeat
 *   is sent whenever nothing was sent for the heartbeat interval (1 s, or
 *   the PS's own interval when shorter), so a client busy computing stays in
 *   the round. If the PS is silent for CLIENT_SILENCE_MS (and ten of its
 *   heartbeat intervals), the client logs it and says Hello again.
 *   SIGINT/SIGTERM: the client stops with exit code 0 and sends Bye.
 *   Every other message from the PS (Params, Job, Error) is decoded, checked
 *   for protocol version, sender role and type, and handed to on_message;
 *   the daemon runs msg_validate() against the model (it knows the shapes).
 *   Undecodable frames are counted, logged (rate-limited) and dropped.
 *
 * Stopping: client_stop() (or Refuse/Shutdown/a signal) calls on_stop once,
 * where the daemon closes its own handles (pool, mailbox, timers), then
 * sends Bye when asked and closes the socket, timer and signal watchers; the
 * loop then runs out and uv_run() returns. Call client_free() after that.
 *
 * Threads: everything here runs on the loop thread, except
 * client_config_from_text(), which is reentrant.
 *
 * Ownership: the client borrows the loop and the local configuration (both
 * must outlive it) and owns its ZeroMQ context, socket and the effective
 * configuration. Errors are negative errno values; constructors return NULL.
 */
#ifndef KFAC_CLIENT_H
#define KFAC_CLIENT_H

#include <stddef.h>
#include <stdint.h>
#include <uv.h>

#include "common/run/runcfg.h"
#include "proto/msg.h"
#include "common/base/version.h"

/* Hello carries KFAC_BUILD_ID (common/base/version.h); the protocol version
 * is what peers must share. */

/* Heartbeat interval used until the PS's own interval is known (ms). */
#define CLIENT_HEARTBEAT_MS 1000
/* Hello is re-sent this often while no Welcome has come (ms); while no PS
 * is connected at all it is retried every 100 ms. */
#define CLIENT_HELLO_RETRY_MS 3000
/* "waiting for kfac-ps" is logged at most this often (ms). */
#define CLIENT_WAIT_LOG_MS 5000
/* A welcomed client that hears nothing for this long says Hello again (ms). */
#define CLIENT_SILENCE_MS 15000

/* ---- start-up -------------------------------------------------------------- */

/* What every client main() does first: runcfg_load(role) from argv (defaults
 * < --config FILE < --key value), then log_init at [run] log_level with the
 * tag "<program>[<id>]", then the configuration dumped at debug level.
 * First of all blas_restart_if_generic(argv) (common/base/blas.h): where OpenBLAS
 * chose its generic Prescott kernels on an AVX2 CPU the program restarts once
 * with OPENBLAS_CORETYPE=Haswell.
 * Returns 0 to go on, or 1 with *exit_code set: 0 after --help or
 * --dump-config, 2 for a usage error (the message and a "see --help" hint go
 * to stderr). cfg is filled in every case; runcfg_release() it. */
int client_config_load(runcfg_t *cfg, runcfg_role_t role, int argc, char **argv, int *exit_code);

/* blas_set_threads(n): set and log the OpenBLAS thread count and kernels. */
void client_blas_threads(int n);

/* The id of this daemon in its own section ([worker] id, ...). */
int client_local_id(const runcfg_t *cfg, runcfg_role_t role);

/* ---- the connection ------------------------------------------------------- */

typedef struct client client_t;

typedef struct client_handlers {
    /* A Welcome was accepted. w is borrowed for the call; cfg is the
     * effective configuration (owned by the client, valid until the next
     * Welcome or client_free()). Return 0, or a negative errno to stop the
     * client with exit code 1 (log why first). Runs again after every
     * re-Hello. */
    int (*on_welcome)(client_t *c, const msg_welcome_t *w, const runcfg_t *cfg, void *user);
    /* Params, Job or Error from the PS, decoded but not validated against the
     * model. m is the client's; the handler may take arrays out of it (set
     * the field to NULL and its count to 0), the rest is freed after the
     * call. */
    void (*on_message)(client_t *c, msg_t *m, void *user);
    /* The client is stopping (exit_code 0 clean, 1 fatal): close every handle
     * of the daemon so the loop can end. Called once. */
    void (*on_stop)(client_t *c, int exit_code, const char *reason, void *user);
} client_handlers_t;

/* A client of role `role` (worker, statsd or invertd) that will read its
 * configuration view cfg_role. local is the daemon's own configuration
 * (borrowed; [cluster] ps is the endpoint, the role's id the requested
 * sender_id). h and user are borrowed. Nothing is sent before
 * client_start(). Returns NULL on failure (logged). */
client_t *client_new(uv_loop_t *loop, msg_role_t role, runcfg_role_t cfg_role, const runcfg_t *local,
                     const client_handlers_t *h, void *user);

/* Watch signals, start the timer, connect and send Hello. Returns 0 or a
 * negative errno (e.g. -EINVAL for a malformed endpoint; logged). */
int client_start(client_t *c);

/* Fill m's envelope (protocol version, role, the current sender id) and
 * zero its body, for a message of type t. */
void client_msg_init(const client_t *c, msg_t *m, msg_type_t t);

/* Encode m (only read) and send it. Returns 0, -EAGAIN (no PS connected or
 * high-water mark; logged rate-limited), -EPIPE (stopping), or another
 * negative errno. */
int client_send(client_t *c, const msg_t *m);

/* Send an already encoded message, taking over *buf (set to NULL). Returns
 * as client_send. */
int client_send_take(client_t *c, uint8_t **buf, size_t len);

/* Stop: on_stop, then Bye (when say_bye and welcomed), then close. A second
 * call only raises the exit code. */
void client_stop(client_t *c, int exit_code, const char *reason, int say_bye);

/* 1 once welcomed (and not since asked to say Hello again). */
int client_welcomed(const client_t *c);

/* 1 once client_stop() ran. */
int client_stopping(const client_t *c);

/* Exit code for main(): 0 clean, 1 fatal, 78 CURVE key refused (above). */
int client_exit_code(const client_t *c);

/* The sender id in use (the PS's assigned id after Welcome). */
uint32_t client_id(const client_t *c);

/* The PS endpoint, for messages. */
const char *client_endpoint(const client_t *c);

/* Release everything once uv_run() has returned (client_stop() ran). The
 * signal watchers stay open until here, so a second signal during the
 * shutdown is only logged; this closes them and runs the loop once more for
 * their close callbacks, and leaves SIGINT and SIGTERM ignored (the process
 * is on its way out). NULLs *cp; NULL is a no-op. */
void client_free(client_t **cp);

/* ---- the effective configuration ---------------------------------------- */

/* The effective configuration from a Welcome's config text: the defaults of
 * cfg_role's view, then text (the PS's shared sections), then from local
 * the host-local [data] dir and [run] log_level and the daemon's own section.
 * out is filled in every case (runcfg_release() it). Returns 0, or -EINVAL
 * with "welcome: ..." in err. */
int client_config_from_text(const runcfg_t *local, runcfg_role_t cfg_role, const char *text, runcfg_t *out,
                            char *err, size_t err_len);

#endif
