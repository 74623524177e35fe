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
 * The bindings outlive a restart: a checkpoint stores them (ps/ckpt.h,
 * record OWNR, through ps_owners_count/ps_owners_at) and a resumed kfac-ps
 * loads them back (ps_owners_load), so the first key to say Hello after a
 * restart cannot take another key's id.
 *
 * Keys are Z85 text (40 characters); "" means no CURVE: then nothing is
 * bound and nothing refused. Threads: the loop thread only. Peers are
 * borrowed.
 */
#ifndef KFAC_PS_OWNER_H
#define KFAC_PS_OWNER_H

#include <stddef.h>
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

/* Drop the binding of id of role, if any. Returns 1 when there was one,
 * else 0. */
int ps_owners_forget_id(ps_owners_t *o, msg_role_t role, uint32_t id);

/* The number of bindings, and binding i (0 <= i < count; borrowed: valid
 * until the table changes), in no particular order: what a checkpoint
 * saves. */
int ps_owners_count(const ps_owners_t *o);
const ps_owner_t *ps_owners_at(const ps_owners_t *o, int i);

/* Most bindings a table loads (a checkpoint's record holds at most these). */
#define PS_OWNERS_MAX 65536

/* Check n saved bindings v (as a checkpoint holds them) without loading
 * them: each of role worker or statsd, with a key of AUTH_KEY_Z85_LEN
 * characters of the Z85 alphabet, no (role, id) twice, n <= PS_OWNERS_MAX.
 * Returns 0, or -EINVAL with the first fault in why (naming the binding by
 * its index, role and id). */
int ps_owners_validate(const ps_owner_t *v, int n, char *why, size_t why_len);

/* Replace the table's bindings with the n saved ones of v (a resume from
 * a checkpoint), after ps_owners_validate: either all of them or none (the
 * table is unchanged on error). v is borrowed (copied). Returns 0, -EINVAL
 * (with why) or -ENOMEM. */
int ps_owners_load(ps_owners_t *o, const ps_owner_t *v, int n, char *why, size_t why_len);

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
