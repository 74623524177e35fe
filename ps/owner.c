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
