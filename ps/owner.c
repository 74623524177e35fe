/* ps/owner.c — see owner.h. Linear scans: a table as small as the
 * allowlists, read once per Hello. */
#include "ps/owner.h"

#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

void ps_owners_release(ps_owners_t *o) {
    if (!o) return;
    free(o->v);
    memset(o, 0, sizeof *o);
}

static int s_has_ids(msg_role_t role) { return role == MSG_ROLE_WORKER || role == MSG_ROLE_STATSD; }

const char *ps_owners_find(const ps_owners_t *o, msg_role_t role, uint32_t id) {
    for (int i = 0; i < o->n; i++)
        if (o->v[i].role == role && o->v[i].id == id) return o->v[i].key;
    return NULL;
}

/* Has peers a record of role with member id `id`? */
static int s_held(const ps_peers_t *peers, msg_role_t role, uint32_t id) {
    for (int i = 0; i < peers->n; i++)
        if (peers->v[i]->role == role && peers->v[i]->asked_id == id) return 1;
    return 0;
}

int ps_owners_bind(ps_owners_t *o, const ps_peers_t *peers, msg_role_t role, uint32_t id, const char *key) {
    if (!key || !key[0] || !s_has_ids(role)) return 0;
    const char *k = ps_owners_find(o, role, id);
    if (k && strcmp(k, key) == 0) return 0;
    int j = 0;
    for (int i = 0; i < o->n; i++) /* the key's ids that nobody holds any more */
        if (strcmp(o->v[i].key, key) != 0 || s_held(peers, o->v[i].role, o->v[i].id)) o->v[j++] = o->v[i];
    o->n = j;
    if (o->n == o->cap) {
        int cap = o->cap ? 2 * o->cap : 16;
        ps_owner_t *v = realloc(o->v, (size_t)cap * sizeof *v);
        if (!v) return -ENOMEM;
        o->v = v;
        o->cap = cap;
    }
    ps_owner_t *e = &o->v[o->n++];
    e->role = role;
    e->id = id;
    snprintf(e->key, sizeof e->key, "%s", key);
    return 0;
}

int ps_owners_forget_key(ps_owners_t *o, const char *key) {
    int j = 0, n = o->n;
    for (int i = 0; i < n; i++)
        if (strcmp(o->v[i].key, key) != 0) o->v[j++] = o->v[i];
    o->n = j;
    return n - j;
}

int ps_owners_forget_id(ps_owners_t *o, msg_role_t role, uint32_t id) {
    for (int i = 0; i < o->n; i++)
        if (o->v[i].role == role && o->v[i].id == id) {
            o->v[i] = o->v[--o->n];
            return 1;
        }
    return 0;
}

int ps_owners_count(const ps_owners_t *o) { return o ? o->n : 0; }

const ps_owner_t *ps_owners_at(const ps_owners_t *o, int i) { return o && i >= 0 && i < o->n ? &o->v[i] : NULL; }

/* Is key 40 characters of the Z85 alphabet (ZeroMQ RFC 32), NUL-terminated? */
static int s_z85_key(const char *key) {
    static const char alphabet[] = "0123456789abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ.-:+=^!/*?&<>()[]{}@%$#";
    for (int i = 0; i < AUTH_KEY_Z85_LEN; i++)
        if (!key[i] || !strchr(alphabet, key[i])) return 0;
    return key[AUTH_KEY_Z85_LEN] == 0;
}

/* Order of (role, id), for finding a member id saved twice. */
static int s_cmp_member(const void *a, const void *b) {
    const ps_owner_t *x = *(const ps_owner_t *const *)a, *y = *(const ps_owner_t *const *)b;
    if (x->role != y->role) return x->role < y->role ? -1 : 1;
    return x->id < y->id ? -1 : x->id > y->id;
}

int ps_owners_validate(const ps_owner_t *v, int n, char *why, size_t why_len) {
    if (n < 0 || n > PS_OWNERS_MAX) {
        snprintf(why, why_len, "%d bindings, more than the %d a table holds", n, PS_OWNERS_MAX);
        return -EINVAL;
    }
    for (int i = 0; i < n; i++) {
        if (!s_has_ids(v[i].role)) {
            snprintf(why, why_len, "binding %d (id %u) is of role %d, not a worker or statsd", i, v[i].id,
                     (int)v[i].role);
            return -EINVAL;
        }
        if (!s_z85_key(v[i].key)) {
            snprintf(why, why_len, "binding %d (%s id %u) has a key that is not %d characters of Z85", i,
                     msg_role_name(v[i].role), v[i].id, AUTH_KEY_Z85_LEN);
            return -EINVAL;
        }
    }
    if (n < 2) return 0;
    const ps_owner_t **by = malloc((size_t)n * sizeof *by);
    if (!by) {
        snprintf(why, why_len, "out of memory checking %d bindings", n);
        return -ENOMEM;
    }
    for (int i = 0; i < n; i++) by[i] = &v[i];
    qsort(by, (size_t)n, sizeof *by, s_cmp_member);
    int rc = 0;
    for (int i = 1; i < n && rc == 0; i++)
        if (s_cmp_member(&by[i - 1], &by[i]) == 0) {
            snprintf(why, why_len, "binding %d (%s id %u) binds a member id bound already", (int)(by[i] - v),
                     msg_role_name(by[i]->role), by[i]->id);
            rc = -EINVAL;
        }
    free(by);
    return rc;
}

int ps_owners_load(ps_owners_t *o, const ps_owner_t *v, int n, char *why, size_t why_len) {
    int rc = ps_owners_validate(v, n, why, why_len);
    if (rc < 0) return rc;
    ps_owner_t *nv = NULL;
    int cap = n > 16 ? n : 16;
    if (!(nv = malloc((size_t)cap * sizeof *nv))) {
        snprintf(why, why_len, "out of memory loading %d bindings", n);
        return -ENOMEM;
    }
    if (n > 0) memcpy(nv, v, (size_t)n * sizeof *nv);
    free(o->v);
    o->v = nv;
    o->n = n;
    o->cap = cap;
    return 0;
}

ps_owner_verdict_t ps_owners_check(const ps_owners_t *o, const ps_peers_t *peers, msg_role_t role, uint32_t id,
                                   const char *key, int per_key, uint64_t now_ns, uint64_t live_ns,
                                   ps_peer_t **holder) {
    if (holder) *holder = NULL;
    if (!key || !key[0]) return PS_OWNER_ADMIT;
    const char *k = s_has_ids(role) ? ps_owners_find(o, role, id) : NULL;
    if (k && strcmp(k, key) != 0) return PS_OWNER_OTHER_KEY;
    if (per_key <= 0) return PS_OWNER_ADMIT;
    int n = 0;
    ps_peer_t *live = NULL, *silent = NULL;
    for (int i = 0; i < peers->n; i++) {
        ps_peer_t *p = peers->v[i];
        if (strcmp(p->key, key) != 0) continue;
        if (s_has_ids(role) && p->role == role && p->asked_id == id) continue; /* the record it would rejoin */
        n++;
        int alive = p->present && now_ns >= p->last_ns && now_ns - p->last_ns < live_ns;
        if (alive && !live) live = p;
        if (!alive && (!silent || p->last_ns < silent->last_ns)) silent = p;
    }
    if (n < per_key) return PS_OWNER_ADMIT;
    if (n == per_key && silent) {
        if (holder) *holder = silent;
        return PS_OWNER_KEY_REUSE;
    }
    if (holder) *holder = live ? live : silent;
    return PS_OWNER_KEY_FULL;
}
