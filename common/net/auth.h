/* common/net/auth.h — ZeroMQ CURVE authentication of the kfac sockets
 * (docs/security.md has the threat model and the operator's commands).
 *
 * kfac-ps (auth_server_*). With `[security] server_secret_key` set, its
 * ROUTER is a CURVE server and a ZAP handler (RFC 27) on the PS's own loop,
 * bound at inproc://zeromq.zap.01 in the PS's ZeroMQ context, answers every
 * handshake: a client key found in `allow_workers`, `allow_statsd` or
 * `allow_invertd` is accepted and its connection labelled with its role
 * (ZAP user id "<role> <key>", which ZeroMQ attaches to every message of the
 * connection as the "User-Id" property); any other key is refused before a
 * single message of it reaches the PS. auth_server_check_role() then stops a
 * listed key from speaking as another role (a worker key saying Hello as
 * kfac-invertd). Without keys the ROUTER may bind only loopback endpoints
 * (auth_endpoint_is_loopback()) unless `[security] insecure = true`.
 * Refusals are logged at most once a second with running counts. The
 * allowlist folders are watched (common/net/auth_watch.h): a key file added
 * or removed takes effect within AUTH_WATCH_DEBOUNCE_MS, no signal needed;
 * SIGHUP re-reads them too (auth_server_reload()). Either way, a message
 * from a connection whose key has been removed since its handshake is
 * refused (auth_server_check_role()), and the server is told to let go of
 * those clients (auth_server_on_reload()).
 *
 * Clients (auth_client_secure()). With `client_secret_key` and
 * `server_public_key` set, the DEALER is a CURVE client that trusts only
 * that kfac-ps key; a monitor on the socket reports handshakes the PS
 * refuses, so a client with an unlisted key says so (and connects again
 * while its key may yet be listed) instead of waiting silently.
 *
 * Threads: everything runs on the loop thread of the socket it serves.
 * Errors: negative errno values with a one-line message in err naming the
 * setting, the file and the fix; constructors return NULL.
 */
#ifndef KFAC_NET_AUTH_H
#define KFAC_NET_AUTH_H

#include <stddef.h>
#include <stdint.h>
#include <uv.h>

#include "common/net/auth_keys.h"
#include "common/run/runcfg.h"
#include "proto/msg.h"

/* kfac-ps's exit status for a configuration it refuses to serve (a
 * non-loopback bind without keys, unreadable keys): sysexits' EX_CONFIG. */
#define AUTH_EXIT_CONFIG 78

/* The ZAP endpoint libzmq asks (RFC 27). */
#define AUTH_ZAP_ENDPOINT "inproc://zeromq.zap.01"

/* Requests answered per loop turn; the rest wait for the next turn. */
#define AUTH_ZAP_BATCH 32

/* Interval of the refusal log lines. */
#define AUTH_LOG_EVERY_MS 1000

/* ---- kfac-ps ---------------------------------------------------------------- */

typedef struct auth_server auth_server_t;

/* Can kfac-ps serve with this configuration? Checks the policy (keys, or a
 * loopback [ps] bind, or insecure = true) and reads every key file and
 * allowlist once. Returns 0, -EPERM (a non-loopback bind without keys:
 * the message names the three fixes), or the -errno of a key file or
 * setting (message in err). Exit with AUTH_EXIT_CONFIG on failure. */
int auth_server_check(const runcfg_t *cfg, char *err, size_t err_len);

/* The PS's authenticator on loop and zctx (both borrowed; zctx is the
 * context of the ROUTER it will secure). With CURVE configured it loads
 * the keys and allowlists, binds the ZAP handler and watches the allowlist
 * folders (cfg is borrowed for that and must outlive the authenticator);
 * without, it only applies the bind policy. Returns NULL with the message
 * in err. */
auth_server_t *auth_server_new(uv_loop_t *loop, void *zctx, const runcfg_t *cfg, char *err, size_t err_len);

/* Make zsock (the PS's ROUTER, before it binds) a CURVE server with the
 * PS's secret key and the ZAP domain "kfac", and watch its handshakes (a
 * client without keys fails before ZAP: logged, rate-limited, counted);
 * nothing without CURVE. Call once.
 * Returns 0 or -errno from zmq_setsockopt. */
int auth_server_secure(auth_server_t *a, void *zsock, char *err, size_t err_len);

/* 1 when CURVE is on. */
int auth_server_enabled(const auth_server_t *a);

/* May a message of type, claiming role, come from a connection whose ZAP
 * user id is user_id (the "User-Id" property of the message; NULL when the
 * PS runs without CURVE), its key still listed for that role? 0: yes
 * (always, without CURVE); -EACCES: no,
 * with the reason for the client in why; the refusal is counted and logged
 * (rate-limited). */
int auth_server_check_role(auth_server_t *a, const char *user_id, msg_role_t role, msg_type_t type, char *why,
                           size_t why_len);

/* Read the allowlists of cfg again (SIGHUP; a change in a watched folder
 * does the same by itself): new handshakes, and every later message of a
 * connection made before, are checked against them; the reload callback
 * runs (auth_server_on_reload). One log line names the keys added and removed per list.
 * On an error the old lists stay in force and the error is logged. Also
 * starts again the watch of a folder that could not be watched. Returns 0
 * (also without CURVE) or -errno. */
int auth_server_reload(auth_server_t *a, const runcfg_t *cfg);

/* The role key (Z85 text) is listed for now, or MSG_ROLE_NONE (also
 * without CURVE, or for text that is no key). */
msg_role_t auth_server_key_role(const auth_server_t *a, const char *z85);

/* Called on the loop thread after every reload that read the allowlists
 * (SIGHUP or a change in a watched folder; not when a reload failed and
 * the old lists stay): the server lets go of the clients whose key is no
 * longer listed (auth_server_key_role). One callback; NULL removes it. */
typedef void (*auth_reload_fn)(void *user);
void auth_server_on_reload(auth_server_t *a, auth_reload_fn fn, void *user);

/* Counts so far, for the final summary. */
typedef struct auth_server_stats {
    uint64_t n_accepted;       /* handshakes with a listed key */
    uint64_t n_refused_key;    /* handshakes with an unlisted key */
    uint64_t n_refused_role;   /* messages of a listed key claiming another role */
    uint64_t n_bad_requests;   /* malformed ZAP requests (a libzmq bug if ever non-zero) */
    uint64_t n_failed_handshakes; /* failed before ZAP: no keys, or trusting another PS key */
    uint64_t n_refused_revoked;   /* messages of a connection whose key was removed from the allowlists since */
} auth_server_stats_t;
void auth_server_stats(const auth_server_t *a, auth_server_stats_t *out);

/* Log the counts once (at shutdown), when CURVE is on. */
void auth_server_log_summary(const auth_server_t *a);

/* Stop the ZAP handler and close its socket at once; memory goes in the
 * loop's close callbacks (run the loop before uv_loop_close and
 * zmq_ctx_term). NULLs *ap; NULL is a no-op. */
void auth_server_free(auth_server_t **ap);

/* ---- clients ---------------------------------------------------------------- */

typedef struct auth_client auth_client_t;

/* Secure zsock (a DEALER of context zctx, before it connects to endpoint)
 * with the client keys of cfg. Without client keys: nothing (a warning
 * when endpoint is not loopback), *out = NULL, returns 0. With them: sets
 * the CURVE options, starts a handshake monitor on loop (logs refusals by
 * the PS), stores it in *out (free with auth_client_free before closing
 * zsock's context). Returns 0 or -errno with the message in err (a key
 * file, a missing server_public_key, mismatched key pair). */
int auth_client_secure(uv_loop_t *loop, void *zctx, void *zsock, const runcfg_t *cfg, const char *endpoint,
                       auth_client_t **out, char *err, size_t err_len);

/* Called (on the loop thread) when kfac-ps refuses this client's key in
 * the handshake. ZeroMQ does not retry a connection its peer refused: the
 * client connects again itself while its key may yet be listed
 * (common/net/admit.h), or stops (AUTH_EXIT_CONFIG). With a callback set,
 * the monitor leaves the log line to it; without, it logs the refusal. */
typedef void (*auth_refused_fn)(void *user);
void auth_client_on_refused(auth_client_t *c, auth_refused_fn fn, void *user);

/* Handshakes the PS refused so far. */
uint64_t auth_client_refusals(const auth_client_t *c);

/* This client's public key in Z85 ("" for NULL), for messages; borrowed. */
const char *auth_client_public_key(const auth_client_t *c);

/* As auth_server_free. NULLs *cp; NULL is a no-op. */
void auth_client_free(auth_client_t **cp);

#endif
