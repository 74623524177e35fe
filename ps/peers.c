/* ps/peers.c — see peers.h. A linear table: a run has a handful to a few
 * hundred clients, and a scan of routing ids is cheaper than the message
 * decode that precedes it. */
#include "ps/peers.h"

#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "common/base/clock.h"

int ps_peers_init(ps_peers_t *t, int cap) {
    memset(t, 0, sizeof *t);
    if (cap < 1) cap = 1;
    t->v = calloc((size_t)cap, sizeof *t->v);
    if (!t->v) return -ENOMEM;
    t->cap = cap;
    return 0;
}

/* A peer and the round buffers it owns. */
static void s_peer_free(ps_peer_t *p) {
    if (!p) return;
    free(p->grad);
    kfac_lowrank_set_release(&p->lowrank);
    free(p->state);
    kfac_stats_free(&p->stats);
    zloop_track_free(&p->params_track);
    free(p);
}

void ps_peers_release(ps_peers_t *t) {
    if (!t) return;
    for (int i = 0; i < t->n; i++) s_peer_free(t->v[i]);
    free(t->v);
    memset(t, 0, sizeof *t);
}

ps_peer_t *ps_peers_find(const ps_peers_t *t, const zloop_peer_t *r) {
    for (int i = 0; i < t->n; i++) {
        const zloop_peer_t *q = &t->v[i]->route;
        if (q->len == r->len && memcmp(q->id, r->id, r->len) == 0) return t->v[i];
    }
    return NULL;
}

ps_peer_t *ps_peers_victim(const ps_peers_t *t, msg_role_t role) {
    ps_peer_t *absent = NULL, *idle = NULL;
    for (int i = 0; i < t->n; i++) {
        ps_peer_t *p = t->v[i];
        if (role != MSG_ROLE_NONE && p->role != role) continue;
        if (!p->present) {
            if (!absent || p->last_ns < absent->last_ns) absent = p;
        } else if (!p->engaged) {
            if (!idle || p->hello_ns < idle->hello_ns) idle = p;
        }
    }
    return absent ? absent : idle;
}

int ps_peers_unengaged(const ps_peers_t *t, uint64_t now_ns, uint64_t timeout_ns, ps_peer_t **out, int cap) {
    int n = 0;
    for (int i = 0; i < t->n && n < cap; i++) {
        ps_peer_t *p = t->v[i];
        if (!p->engaged && now_ns > p->hello_ns && now_ns - p->hello_ns >= timeout_ns) out[n++] = p;
    }
    return n;
}

ps_peer_t *ps_peers_by_id(const ps_peers_t *t, uint32_t id) {
    if (id == 0) return NULL;
    for (int i = 0; i < t->n; i++)
        if (t->v[i]->id == id) return t->v[i];
    return NULL;
}

ps_peer_t *ps_peers_add(ps_peers_t *t, const zloop_peer_t *r) {
    if (t->n >= t->cap) return NULL;
    ps_peer_t *p = calloc(1, sizeof *p);
    if (!p) return NULL;
    p->route = *r;
    p->rank = -1;
    t->v[t->n++] = p;
    return p;
}

void ps_peers_remove(ps_peers_t *t, ps_peer_t *p) {
    if (!p) return;
    for (int i = 0; i < t->n; i++) {
        if (t->v[i] != p) continue;
        t->v[i] = t->v[t->n - 1];
        t->n--;
        ps_ident_detach(p->ident, clock_now_ns()); /* what it did stays with its identity */
        s_peer_free(p);
        return;
    }
}

int ps_peers_count(const ps_peers_t *t, msg_role_t role, int present_only) {
    int n = 0;
    for (int i = 0; i < t->n; i++) {
        const ps_peer_t *p = t->v[i];
        if ((role == MSG_ROLE_NONE || p->role == role) && (!present_only || p->present)) n++;
    }
    return n;
}

int ps_peers_rank_taken(const ps_peers_t *t, msg_role_t role, int rank, const ps_peer_t *except) {
    for (int i = 0; i < t->n; i++) {
        const ps_peer_t *p = t->v[i];
        if (p != except && p->role == role && p->rank == rank) return 1;
    }
    return 0;
}


const char *ps_peer_name(const ps_peer_t *p, char *buf, size_t len) {
    snprintf(buf, len, "%s#%u (pid %u on %s)", msg_role_name(p->role), p->id, p->pid,
             p->host[0] ? p->host : "?");
    return buf;
}

void ps_peer_admitted(ps_peer_t *p, uint64_t now_ns) {
    p->present = 1;
    p->last_ns = p->hello_ns = now_ns;
    p->engaged = 0;
}

int ps_peer_heard(ps_peer_t *p, uint64_t now_ns) {
    p->last_ns = now_ns;
    if (p->present) return 0;
    p->present = 1;
    return 1;
}

void ps_peer_engaged(ps_peer_t *p) { p->engaged = 1; }

void ps_peer_echo(ps_peer_t *p, uint64_t mono_ns) { p->echo_ns = mono_ns; }

void ps_peer_absent(ps_peer_t *p) { p->present = 0; }

void ps_peer_reroute(ps_peer_t *p, const zloop_peer_t *r) {
    p->route = *r;
    p->echo_ns = 0;
}

void ps_peer_set_rank(ps_peer_t *p, int rank, int n_ranks) {
    p->rank = rank;
    p->n_ranks = n_ranks;
}

void ps_peer_accepted(ps_peer_t *p) { p->n_accepted++; }

void ps_peer_rejected(ps_peer_t *p) { p->n_rejected++; }
