/* ps/owner.h — which CURVE key owns which member id, and how many members
 * one key may hold: the admission decisions of a Hello under CURVE, apart
 * from any I/O (STYLE 8a; ps/hello.c acts on them).
 *
 * A member id (the --id of a gradient or statistics worker, which decides
 * its shard and its place in the round) is bound to the CURVE public key
 * whose connection first held it: a later Hello with that id from another
 * key is refused, so a second listed key cannot take a silent member's
 * record. A key holds at most [security] members_per_key records at once
 * (0: any number); a record of that key silent for the liveness window may
 * be forgotten to make room (the same daemon, restarted with another --id).
 * A binding lasts for the run, until its key leaves the allowlists
 * (ps_owners_forget_key) or the key takes a new id while the old one has
 * no record left (each key holds at most as many bindings as records, plus
 * one, so the table stays as small as the allowlists).
 *
 * Keys are Z85 text (40 characters); "" means no CURVE: then nothing is
 * bound and nothing refused. Threads: the loop thread only. Peers are
 * borrowed.
 */
#ifndef KFAC_PS_OWNER_H
#define KFAC_PS_OWNER_H

#include <stdint.h>

#include "ps/peers.h"

typedef struct ps_owner {
    msg_role_t role;
    uint32_t id;                     /* the member id (Hello's sender_id) */
    char key[AUTH_KEY_Z85_LEN + 1];  /* the key that first held it */
} ps_owner_t;

typedef struct ps_owners {
    ps_owner_t *v; /* (n) owned */
    int n, cap;
} ps_owners_t;

/* Free the table's memory and empty it; NULL is a no-op. A zeroed table
 * is a valid empty one. */
void ps_owners_release(ps_owners_t *o);

/* The key that owns member id `id` of role, or NULL (borrowed: valid
 * until the table changes). */
const char *ps_owners_find(const ps_owners_t *o, msg_role_t role, uint32_t id);

/* Bind id of role to key (no-op for "" and for roles without member ids,
 * i.e. other than worker and statsd, and when already bound to key).
 * First drops the bindings of key whose id has no record in peers. The
 * caller has checked that id is not bound to another key.
 * Returns 0 or -ENOMEM. */
int ps_owners_bind(ps_owners_t *o, const ps_peers_t *peers, msg_role_t role, uint32_t id, const char *key);

/* Drop every binding of key (it left the allowlists). Returns how many. */
int ps_owners_forget_key(ps_owners_t *o, const char *key);

/* The decision on a Hello of role with member id `id` from key. */
typedef enum {
    PS_OWNER_ADMIT = 0,  /* go on (rejoin, takeover or a new record) */
    PS_OWNER_OTHER_KEY,  /* the id belongs to another key: Refuse */
    PS_OWNER_KEY_FULL,   /* the key holds members_per_key live records: Refuse */
    PS_OWNER_KEY_REUSE,  /* the key is at its limit, but *holder is silent: forget it, then admit */
} ps_owner_verdict_t;

/* Decide on a Hello: id bound to another key (OTHER_KEY), else the
 * records of key other than the one this Hello would rejoin (same role and
 * id) compared with per_key (0: no limit). A record is live when present
 * and heard within live_ns before now_ns. *holder (may be NULL) gets, for
 * KEY_FULL a live record of key, for KEY_REUSE the silent one to forget.
 * ADMIT when key is "". */
ps_owner_verdict_t ps_owners_check(const ps_owners_t *o, const ps_peers_t *peers, msg_role_t role, uint32_t id,
                                   const char *key, int per_key, uint64_t now_ns, uint64_t live_ns,
                                   ps_peer_t **holder);

#endif
