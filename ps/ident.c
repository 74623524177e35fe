/* ps/ident.c — see ident.h. */
#include "ps/ident.h"

#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

void ps_idents_release(ps_idents_t *t) {
    if (!t) return;
    for (int i = 0; i < t->n; i++) free(t->v[i]);
    free(t->v);
    memset(t, 0, sizeof *t);
}

static int s_same(const ps_ident_t *x, msg_role_t role, const char *key, uint32_t id) {
    if (x->role != role) return 0;
    if (key[0]) return strcmp(x->key, key) == 0;
    return !x->key[0] && x->id == id;
}

static int s_penalized(const ps_ident_t *x) {
    return x->n_stalls > 0 || x->demoted || x->n_bad_inverses > 0 || x->distrusted;
}

/* The record to replace when the table is full: unattached, unpenalized
 * first, then unattached; the one heard from longest ago. -1: none. */
static int s_victim(const ps_idents_t *t) {
    int best = -1;
    for (int pass = 0; pass < 2 && best < 0; pass++)
        for (int i = 0; i < t->n; i++) {
            const ps_ident_t *x = t->v[i];
            if (x->attached > 0 || (pass == 0 && s_penalized(x))) continue;
            if (best < 0 || x->seen_ns < t->v[best]->seen_ns) best = i;
        }
    return best;
}

static ps_ident_t *s_new(ps_idents_t *t, msg_role_t role, const char *key, uint32_t id) {
    ps_ident_t *x = calloc(1, sizeof *x);
    if (!x) return NULL;
    x->role = role;
    x->id = key[0] ? 0 : id;
    snprintf(x->key, sizeof x->key, "%s", key);
    x->push_round = -1;
    if (t->n == t->cap) {
        if (t->cap >= PS_IDENT_MAX) {
            int v = s_victim(t);
            if (v < 0) {
                free(x);
                return NULL;
            }
            free(t->v[v]);
            t->v[v] = x;
            return x;
        }
        int cap = t->cap ? 2 * t->cap : 16;
        if (cap > PS_IDENT_MAX) cap = PS_IDENT_MAX;
        ps_ident_t **nv = realloc(t->v, (size_t)cap * sizeof *nv);
        if (!nv) {
            free(x);
            return NULL;
        }
        t->v = nv;
        t->cap = cap;
    }
    t->v[t->n++] = x;
    return x;
}

ps_ident_t *ps_ident_attach(ps_idents_t *t, msg_role_t role, const char *key, uint32_t id, uint64_t now_ns) {
    if (!key) key = "";
    ps_ident_t *x = NULL;
    for (int i = 0; i < t->n && !x; i++)
        if (s_same(t->v[i], role, key, id)) x = t->v[i];
    if (!x && !(x = s_new(t, role, key, id))) return NULL;
    x->attached++;
    x->seen_ns = now_ns;
    return x;
}

void ps_ident_detach(ps_ident_t *x, uint64_t now_ns) {
    if (!x) return;
    if (x->attached > 0) x->attached--;
    x->seen_ns = now_ns;
}

int ps_ident_may_push(const ps_ident_t *x, long t, int limit) {
    if (limit <= 0 || x->push_round != t) return 1;
    return x->n_pushed < limit;
}

void ps_ident_pushed(ps_ident_t *x, long t) {
    if (x->push_round != t) {
        x->push_round = t;
        x->n_pushed = 0;
    }
    x->n_pushed++;
}

void ps_ident_unpush(ps_ident_t *x, long t) {
    if (x->push_round == t && x->n_pushed > 0) x->n_pushed--;
}

int ps_ident_stalled(ps_ident_t *x) { return ++x->n_stalls; }

int ps_ident_demote(ps_ident_t *x) {
    if (x->demoted) return 0;
    x->demoted = 1;
    return 1;
}

int ps_ident_bad_inverse(ps_ident_t *x) { return ++x->n_bad_inverses; }

int ps_ident_distrust(ps_ident_t *x) {
    if (x->distrusted) return 0;
    x->distrusted = 1;
    return 1;
}

int ps_ident_stats_version(ps_ident_t *x, uint64_t v) {
    if (x->has_stats_version && v <= x->stats_version) return -1;
    x->has_stats_version = 1;
    x->stats_version = v;
    return 0;
}

int ps_ident_take_token(ps_ident_t *x, uint64_t now_ns, double per_s, double burst) {
    if (!x->req_ns) x->req_tokens = burst;
    else if (now_ns > x->req_ns) x->req_tokens += (double)(now_ns - x->req_ns) * 1e-9 * per_s;
    if (x->req_tokens > burst) x->req_tokens = burst;
    if (now_ns > x->req_ns || !x->req_ns) x->req_ns = now_ns ? now_ns : 1;
    if (x->req_tokens < 1.0) return 0;
    x->req_tokens -= 1.0;
    return 1;
}

/* ---- the checkpoint --------------------------------------------------------- */

int ps_idents_save(const ps_idents_t *t, ps_ident_saved_t *out, int cap) {
    int n = 0;
    for (int i = 0; i < t->n; i++) {
        const ps_ident_t *x = t->v[i];
        if (!s_penalized(x) && !x->has_stats_version) continue;
        if (n < cap && out) {
            ps_ident_saved_t *o = &out[n];
            memset(o, 0, sizeof *o);
            o->role = x->role;
            o->id = x->id;
            snprintf(o->key, sizeof o->key, "%s", x->key);
            o->n_stalls = (uint32_t)x->n_stalls;
            o->n_bad_inverses = (uint32_t)x->n_bad_inverses;
            o->demoted = x->demoted;
            o->distrusted = x->distrusted;
            o->has_stats_version = x->has_stats_version;
            o->stats_version = x->stats_version;
        }
        n++;
    }
    return n;
}

int ps_idents_validate(const ps_ident_saved_t *v, int n, char *why, size_t why_len) {
    if (n < 0 || n > PS_IDENT_MAX) {
        snprintf(why, why_len, "%d identities, more than %d", n, PS_IDENT_MAX);
        return -1;
    }
    for (int i = 0; i < n; i++) {
        const ps_ident_saved_t *x = &v[i];
        if (x->role != MSG_ROLE_WORKER && x->role != MSG_ROLE_STATSD && x->role != MSG_ROLE_INVERTD) {
            snprintf(why, why_len, "identity %d has role code %d (1: worker, 2: statsd, 3: invertd)", i, (int)x->role);
            return -1;
        }
        size_t kl = strnlen(x->key, sizeof x->key);
        if (kl != 0 && kl != AUTH_KEY_Z85_LEN) {
            snprintf(why, why_len, "identity %d has a key of %zu characters (a Z85 key has %d)", i, kl,
                     AUTH_KEY_Z85_LEN);
            return -1;
        }
        if (x->n_stalls > 1000000000u || x->n_bad_inverses > 1000000000u || (x->demoted & ~1) ||
            (x->distrusted & ~1) || (x->has_stats_version & ~1)) {
            snprintf(why, why_len, "identity %d has counts or flags out of range", i);
            return -1;
        }
        for (int j = 0; j < i; j++)
            if (v[j].role == x->role && strcmp(v[j].key, x->key) == 0 && (x->key[0] || v[j].id == x->id)) {
                snprintf(why, why_len, "identities %d and %d are the same", j, i);
                return -1;
            }
    }
    return 0;
}

int ps_idents_load(ps_idents_t *t, const ps_ident_saved_t *v, int n, char *why, size_t why_len) {
    if (ps_idents_validate(v, n, why, why_len) < 0) return -EINVAL;
    ps_idents_t nt = {0};
    for (int i = 0; i < n; i++) {
        ps_ident_t *x = s_new(&nt, v[i].role, v[i].key, v[i].id);
        if (!x) {
            ps_idents_release(&nt);
            snprintf(why, why_len, "out of memory");
            return -ENOMEM;
        }
        x->n_stalls = (int)v[i].n_stalls;
        x->n_bad_inverses = (int)v[i].n_bad_inverses;
        x->demoted = v[i].demoted;
        x->distrusted = v[i].distrusted;
        x->has_stats_version = v[i].has_stats_version;
        x->stats_version = v[i].stats_version;
    }
    /* Peers attached now stay attached to records of the old table: a
     * checkpoint is loaded at start-up, before any Hello. */
    ps_idents_release(t);
    *t = nt;
    return 0;
}
