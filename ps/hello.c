/* ps/hello.c — a client's Hello on kfac-ps's loop thread: the protocol
 * and build checks, room in the per-role client table, a member id that
 * rejoins (or is still held by a live predecessor), the data shard a worker
 * gets, and the Welcome. Declared in ps/server_int.h.
 */
#include "ps/server_int.h"
#include "ps/hello.h"
#include "ps/round.h"
#include "ps/io.h"
#include "ps/greet.h"
#include "ps/member.h"

#include <errno.h>
#include <inttypes.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "common/base/clock.h"
#include "common/base/log.h"
#include "common/base/ratelimit.h"

/* ---- state ------------------------------------------------------------------- */

struct ps_hello {
    uint32_t next_peer_id;         /* the last client id handed out */
    ps_owners_t owners;            /* member ids bound to CURVE keys (ps/owner.h) */
    ps_idents_t idents;            /* what each member identity has done, beyond its connections (ps/ident.h) */
    ratelimit_t rl_key, rl_dup, rl_full; /* refusal lines: key, member id taken, table full */
    ratelimit_t rl_join[MSG_ROLE_COUNT]; /* join and leave lines, per role (ps_join_log_ok) */
};

ps_hello_t *ps_hello_new(void) { return calloc(1, sizeof(ps_hello_t)); }

void ps_hello_free(ps_hello_t **h_p) {
    if (!h_p || !*h_p) return;
    ps_owners_release(&(*h_p)->owners);
    ps_idents_release(&(*h_p)->idents);
    free(*h_p);
    *h_p = NULL;
}

void ps_hello_forget_key(ps_server_t *s, const char *key) { ps_owners_forget_key(&s->hello->owners, key); }

ps_owners_t *ps_hello_owners(ps_server_t *s) { return &s->hello->owners; }

ps_idents_t *ps_hello_idents(ps_server_t *s) { return &s->hello->idents; }

int ps_hello_keep_listed(ps_server_t *s) {
    ps_owners_t *o = &s->hello->owners;
    int enabled = s->auth && auth_server_enabled(s->auth), dropped = 0;
    for (int i = 0; i < ps_owners_count(o);) {
        const ps_owner_t *b = ps_owners_at(o, i);
        if (enabled && auth_server_key_role(s->auth, b->key) == b->role) {
            i++;
            continue;
        }
        ps_owners_forget_id(o, b->role, b->id); /* moves another binding to i */
        dropped++;
    }
    if (dropped > 0)
        log_info("%d member id%s no longer bound to a CURVE key (%s)", dropped, dropped == 1 ? "" : "s",
                 enabled ? "the key is no longer listed for its role: the id is free again"
                         : "this run has no CURVE keys: nothing is bound");
    return dropped;
}

/* ---- small helpers -------------------------------------------------------- */

/* A Hello asks for an id whose holder was heard lately: a restarted daemon
 * whose predecessor was killed often says Hello before the next heartbeat
 * would have found the old connection closed. Probe the holder now with a
 * heartbeat: a closed connection fails at once (EHOSTUNREACH), and the
 * holder is then gone, as at the heartbeat, so that the new one takes its
 * place without waiting for its retry. Returns 1 when the holder was gone. */
static int s_holder_gone(ps_server_t *s, ps_peer_t *old) {
    if (!old || !old->present) return 0;
    msg_t hb;
    msg_init(&hb, MSG_HEARTBEAT, MSG_ROLE_PS, 0);
    hb.heartbeat.mono_ns = clock_now_ns();
    hb.heartbeat.echo_ns = old->echo_ns;
    if (ps_io_send(s, &old->route, &hb) != -EHOSTUNREACH) return 0;
    old->present = 0;
    ps_round_peer_gone(s, old, "connection closed");
    return 1;
}

/* Shard of a new worker or stats worker (ps_greet_rank), said in the log
 * when it must share one. */
static void s_assign_rank(ps_server_t *s, ps_peer_t *p) {
    ps_greet_rank_t r = ps_greet_rank(&s->peers, p, s->cfg->workers, s->cfg->statsd);
    ps_peer_set_rank(p, r.rank, r.n_ranks);
    if (!r.shared) return;
    char name[160];
    log_warn("%s: more %ss than [cluster] %s = %d; it shares shard %d", ps_peer_name(p, name, sizeof name),
             msg_role_name(p->role), p->role == MSG_ROLE_WORKER ? "workers" : "statsd", r.n_ranks, p->rank);
}

/* "Not now" to a Hello: Error INTERNAL (the code that means "may retry"),
 * after which a client tries again with growing pauses, instead of Refuse,
 * after which it exits. */
static void s_busy(ps_server_t *s, const zloop_peer_t *route, const char *text) {
    msg_t e;
    msg_init(&e, MSG_ERROR, MSG_ROLE_PS, 0);
    e.error.code = MSG_ERR_INTERNAL;
    e.error.text = (char *)text;
    ps_io_send(s, route, &e);
}

/* Room for one more client of role: under its role's cap and the table's,
 * by forgetting an absent or never engaged client of that role (then of
 * any role) if need be; never a member. Returns 0, or -ENOSPC with the
 * reason in err (err stays empty when the run ended meanwhile). */
static int s_make_room(ps_server_t *s, msg_role_t role, char *err, size_t err_len) {
    err[0] = 0;
    int cap = ps_greet_role_cap(role, s->cfg->workers, s->cfg->statsd, PS_MAX_PEERS);
    for (int pass = 0; pass < 2; pass++) {
        int full = pass == 0 ? ps_peers_count(&s->peers, role, 0) >= cap : s->peers.n >= s->peers.cap;
        if (!full) continue;
        ps_peer_t *v = ps_peers_victim(&s->peers, pass == 0 ? role : MSG_ROLE_NONE);
        if (!v) {
            if (pass == 0)
                snprintf(err, err_len,
                         "kfac-ps already holds %d %s connections, the most it takes, all of them active: stop some, "
                         "or raise [cluster] %s",
                         cap, msg_role_program(role), role == MSG_ROLE_STATSD ? "statsd" : "workers");
            else
                snprintf(err, err_len, "kfac-ps already holds %d clients, all of them active; no room for another",
                         s->peers.n);
            return -ENOSPC;
        }
        char name[160];
        log_info("%s forgotten to make room for a new %s (%s)", ps_peer_name(v, name, sizeof name),
                 msg_role_program(role), v->present ? "it never asked for work" : "silent");
        ps_round_peer_gone(s, v, "forgotten to make room");
        ps_peers_remove(&s->peers, v);
        if (s->life.phase != PS_PHASE_RUNNING) return -ENOSPC;
    }
    return 0;
}

/* Whether a refusal line of this cause may be logged now (one a second per
 * cause, docs/architecture.md section 3); more: " [N more like it not
 * logged]" when lines were held back since the last one, else "". */
/* The CURVE public key (Z85) of the connection whose message is being
 * handled, from its ZAP user id "<role> <key>" (common/net/auth.h), into
 * key; "" without CURVE. */
static void s_sender_key(const ps_server_t *s, char *key, size_t key_len) {
    const char *uid = zloop_socket_property(s->sock, "User-Id");
    const char *sp = uid ? strchr(uid, ' ') : NULL;
    snprintf(key, key_len, "%s", sp ? sp + 1 : "");
}

/* Refuse a Hello for its key (ps/owner.h): counted with the Hello
 * refusals and in n_refused_key, logged at most once a second. */
static void s_refuse_key(ps_server_t *s, const zloop_peer_t *route, const msg_t *m, const char *err) {
    ps_counters_reject(&s->ctr, MSG_HELLO, MSG_ERR_UNEXPECTED);
    ps_counters_bump(&s->ctr, PS_CTR_REFUSED_KEY);
    char more[64], host[96];
    if (ps_refusal_log_ok(&s->hello->rl_key, more, sizeof more))
        log_warn("refused a %s (pid %u on %s): %s (%" PRIu64 " refused for their key so far)%s",
                 msg_role_program(m->role), m->hello.pid, log_escape(m->hello.host, host, sizeof host), err,
                 ps_counter(&s->ctr, PS_CTR_REFUSED_KEY), more);
    ps_io_send_text(s, route, MSG_REFUSE, err);
}

/* Under CURVE: may key say this Hello (a member id of another key, a key
 * at [security] members_per_key)? Returns 0 to go on (after forgetting a
 * silent record of the same key when that makes room), -1 when refused. */
static int s_key_admits(ps_server_t *s, const zloop_peer_t *route, const msg_t *m, const char *key) {
    uint64_t now = clock_now_ns(), live_ns = 3 * s->cfg->heartbeat_ms * 1000000ULL;
    int per_key = s->cfg->members_per_key;
    ps_peer_t *h = NULL;
    char err[600], name[160];
    switch (ps_owners_check(&s->hello->owners, &s->peers, m->role, m->sender_id, key, per_key, now, live_ns, &h)) {
    case PS_OWNER_ADMIT: return 0;
    case PS_OWNER_OTHER_KEY:
        snprintf(err, sizeof err,
                 "%s id %u belongs to another CURVE key (%.8s...), not to this one (%.8s...): a member id stays with "
                 "the key that first held it; give this daemon its own --id, or remove the other key from the "
                 "allowlist",
                 msg_role_name(m->role), m->sender_id, ps_owners_find(&s->hello->owners, m->role, m->sender_id), key);
        s_refuse_key(s, route, m, err);
        return -1;
    case PS_OWNER_KEY_REUSE:
        log_info("%s forgotten: its CURVE key (%.8s...) says hello again as %s id %u and holds [security] "
                 "members_per_key = %d",
                 ps_peer_name(h, name, sizeof name), key, msg_role_name(m->role), m->sender_id, per_key);
        ps_round_peer_gone(s, h, "its key said hello again");
        ps_peers_remove(&s->peers, h);
        return s->life.phase == PS_PHASE_RUNNING ? 0 : -1;
    case PS_OWNER_KEY_FULL:
    default:
        snprintf(err, sizeof err,
                 "this CURVE key (%.8s...) already holds %d client%s (%s, heard %.1fs ago), [security] "
                 "members_per_key = %d: give every daemon its own key pair (kfac-keygen), or raise members_per_key "
                 "on kfac-ps",
                 key, per_key, per_key == 1 ? "" : "s", h ? ps_peer_name(h, name, sizeof name) : "?",
                 h ? (double)(now - h->last_ns) * 1e-9 : 0.0, per_key);
        s_refuse_key(s, route, m, err);
        return -1;
    }
}

int ps_join_log_ok(ps_server_t *s, msg_role_t role, char *more, size_t more_len) {
    uint64_t skipped = 0;
    more[0] = '\0';
    if ((unsigned)role >= MSG_ROLE_COUNT) role = MSG_ROLE_NONE;
    if (!ratelimit_burst_ok(&s->hello->rl_join[role], clock_now_ns(), PS_JOIN_LOG_WINDOW_MS, PS_JOIN_LOG_BURST, &skipped))
        return 0;
    if (skipped)
        snprintf(more, more_len, " [%" PRIu64 " more %s joins and leaves not logged]", skipped, msg_role_name(role));
    return 1;
}

void ps_hello_handle(ps_server_t *s, const zloop_peer_t *route, ps_peer_t *p, const msg_t *m) {
    char err[600];
    ps_greet_t verdict = ps_greet_hello(m, &s->shape.limits, s->life.phase == PS_PHASE_RUNNING, err, sizeof err);
    switch (verdict) {
    case PS_GREET_REFUSE_VERSION:
    case PS_GREET_REFUSE_BUILD: {
        char rmore[64];
        ps_counters_reject(&s->ctr, MSG_HELLO, MSG_ERR_VERSION);
        if (ps_io_reject_log_ok(s, MSG_HELLO, MSG_ERR_VERSION, rmore, sizeof rmore)) {
            if (verdict == PS_GREET_REFUSE_VERSION) log_warn("refused a %s: %s%s", msg_role_program(m->role), err, rmore);
            else log_warn("refused a %s (pid %u): %s%s", msg_role_program(m->role), m->hello.pid, err, rmore);
        }
        ps_io_send_text(s, route, MSG_REFUSE, err);
        return;
    }
    case PS_GREET_INVALID:
        ps_io_reject(s, route, p, MSG_HELLO, MSG_ERR_INVALID, "%s", err);
        return;
    case PS_GREET_RUN_OVER:
        ps_io_send_text(s, route, MSG_SHUTDOWN, s->reason[0] ? s->reason : "the run is over");
        return;
    case PS_GREET_GO:
        break;
    }
    char name[160];
    if (p && p->role != m->role) {
        /* The same connection now says it is something else: forget the old one. */
        ps_round_peer_gone(s, p, "said hello again in another role");
        ps_peers_remove(&s->peers, p);
        p = NULL;
    }
    char key[AUTH_KEY_Z85_LEN + 1];
    s_sender_key(s, key, sizeof key);
    if (!p && s_key_admits(s, route, m, key) < 0) return;
    int again = p != NULL;
    if (again) {
        /* A client that restarted its session (or re-sent Hello): same id,
         * same shard; its outstanding request is void, it will send it again. */
        ps_round_peer_gone(s, p, "said hello again");
        ps_member_answered(p);
    } else {
        /* A member id in use: a restarted daemon takes its old place and
         * shard back; a second live one is refused. */
        ps_peer_t *old = NULL;
        uint64_t now = clock_now_ns(), live_ns = 3 * s->cfg->heartbeat_ms * 1000000ULL;
        ps_rejoin_t rj = ps_member_rejoin(&s->peers, m->role, m->sender_id, now, live_ns, &old);
        if (rj == PS_REJOIN_DUPLICATE && s_holder_gone(s, old))
            rj = ps_member_rejoin(&s->peers, m->role, m->sender_id, now, live_ns, &old);
        if (rj == PS_REJOIN_DUPLICATE) {
            snprintf(err, sizeof err,
                     "%s id %u is in use by %s, heard %.1fs ago: give every %s its own --id (a restarted one gets "
                     "its shard back once the old one has been silent for %.1fs)",
                     msg_role_name(m->role), m->sender_id, ps_peer_name(old, name, sizeof name),
                     (double)(now - old->last_ns) * 1e-9, msg_role_program(m->role), (double)live_ns * 1e-9);
            ps_counters_reject(&s->ctr, MSG_HELLO, MSG_ERR_NONE);
            uint64_t skipped = 0;
            char host[96];
            if (ratelimit_ok(&s->hello->rl_dup, now, PS_LOG_EVERY_MS, &skipped))
                log_warn("refused a %s (pid %u on %s) for now: %s%s", msg_role_program(m->role), m->hello.pid,
                         log_escape(m->hello.host, host, sizeof host), err,
                         skipped ? " [more like it not logged]" : "");
            s_busy(s, route, err); /* it tries again later: the holder may be a predecessor about to fall silent */
            return;
        }
        if (rj == PS_REJOIN_TAKEOVER) {
            /* The same member in a new process: its record (shard, place in
             * the round) goes on under the new connection. */
            char host[96];
            log_info("%s id %u rejoins (pid %u on %s): it takes over shard %d and the place in the round of %s",
                     msg_role_name(m->role), m->sender_id, m->hello.pid, log_escape(m->hello.host, host, sizeof host),
                     old->rank, ps_peer_name(old, name, sizeof name));
            p = old;
            if (ps_member_takeover(p)) { /* it pushes the same batch again */
                ps_round_state_grad_out(s->round);
                ps_ident_unpush(p->ident, ps_round_version(s->round));
            }
            ps_peer_reroute(p, route);
            p->pid = m->hello.pid;
            log_escape(m->hello.host, p->host, sizeof p->host); /* logged with its name: made safe once */
            again = 1;
        } else {
            if (s_make_room(s, m->role, err, sizeof err) < 0 || !(p = ps_peers_add(&s->peers, route))) {
                if (err[0] || s->life.phase == PS_PHASE_RUNNING) {
                    if (!err[0]) snprintf(err, sizeof err, "kfac-ps is out of memory for another client");
                    ps_counters_reject(&s->ctr, MSG_HELLO, MSG_ERR_NONE);
                    uint64_t skipped = 0;
                    char host[96];
                    if (ratelimit_ok(&s->hello->rl_full, clock_now_ns(), PS_LOG_EVERY_MS, &skipped))
                        log_warn("refused a %s (pid %u on %s) for now: %s%s", msg_role_program(m->role), m->hello.pid,
                                 log_escape(m->hello.host, host, sizeof host), err,
                                 skipped ? " [more like it not logged]" : "");
                    s_busy(s, route, err);
                }
                return;
            }
            /* What it has done so far stays with its identity, whichever
             * connection it comes on (ps/ident.h). */
            if (!(p->ident = ps_ident_attach(&s->hello->idents, m->role, key, m->sender_id, clock_now_ns()))) {
                ps_peers_remove(&s->peers, p);
                ps_counters_reject(&s->ctr, MSG_HELLO, MSG_ERR_NONE);
                s_busy(s, route, "kfac-ps holds as many client identities as it can (out of memory, or every one "
                                 "in use): try again later");
                return;
            }
            p->role = m->role;
            p->id = ++s->hello->next_peer_id;
            p->asked_id = m->sender_id;
            p->pid = m->hello.pid;
            log_escape(m->hello.host, p->host, sizeof p->host); /* logged with its name: made safe once */
            snprintf(p->key, sizeof p->key, "%s", key);
            s_assign_rank(s, p);
            if (ps_owners_bind(&s->hello->owners, &s->peers, p->role, p->asked_id, key) < 0)
                log_warn("%s: out of memory to bind its id to its CURVE key", ps_peer_name(p, name, sizeof name));
        }
    }
    ps_peer_admitted(p, clock_now_ns()); /* not engaged until it asks for work */
    char build[96];
    log_escape(m->hello.build_id, build, sizeof build);
    msg_t w;
    msg_init(&w, MSG_WELCOME, MSG_ROLE_PS, 0);
    w.welcome.model_text = s->model.net->source;
    w.welcome.config_text = s->config_text;
    w.welcome.params_version = (uint64_t)ps_round_version(s->round);
    w.welcome.n_params = s->model.net->n_params;
    w.welcome.n_state = s->model.net->n_state;
    w.welcome.rank = p->rank >= 0 ? (uint32_t)p->rank : 0;
    w.welcome.n_ranks = (uint32_t)p->n_ranks;
    w.welcome.assigned_id = p->id;
    ps_io_send(s, route, &w);
    char more[96];
    int log_it = ps_join_log_ok(s, p->role, more, sizeof more);
    if (log_it && p->n_ranks > 0)
        log_info("%s %s (asked for id %u; shard %d of %d; build '%s')%s", ps_peer_name(p, name, sizeof name),
                 again ? "said hello again" : "joined", p->asked_id, p->rank, p->n_ranks, build, more);
    else if (log_it)
        log_info("%s %s (asked for id %u; build '%s')%s", ps_peer_name(p, name, sizeof name),
                 again ? "said hello again" : "joined", p->asked_id, build, more);
    if (!again) ps_round_peer_joined(s, p);
}

