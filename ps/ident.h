/* ps/ident.h — what a member has done, kept by its identity rather than
 * by its connection: the pushes of the current round, the stalls and the
 * demotion, an inverse daemon's bad results and distrust, the request
 * token bucket, a statistics worker's last pushed version.
 *
 * A peer's record (ps/peers.h) lives as long as its connection: Bye, a
 * handshake timeout or an eviction forget it, and a new Hello starts a new
 * one. A member that leaves and comes back must not start afresh, or one
 * key could push k gradients into a round (push, Bye, Hello, push again)
 * and shed its penalties the same way. So every admitted peer is attached
 * to an identity, which outlives it:
 *   - with CURVE, its role and public key (a key is the principal the
 *     operator listed; under [security] members_per_key = k, its k members
 *     share one identity, and it may put k gradients into a round);
 *   - without CURVE, its role and member id (Hello's sender_id, the
 *     daemon's --id). Anyone who can connect may then claim any id: the
 *     identity only stops a member from shedding its own history, not a
 *     newcomer from using another id (docs/security.md).
 *
 * The table holds at most PS_IDENT_MAX identities; a new one replaces the
 * one heard from longest ago among those with no peer attached, preferring
 * those with no penalty. Records are heap objects: a pointer stays valid
 * while a peer is attached to it. The table is in the checkpoint
 * (ps/ckpt.h, record IDNT), so a restarted kfac-ps keeps the penalties.
 *
 * Fields are read directly and written only here (tools/check-fields.sh,
 * `p->ident->X`). Threads: the loop thread only. */
#ifndef KFAC_PS_IDENT_H
#define KFAC_PS_IDENT_H

#include <stddef.h>
#include <stdint.h>

#include "common/net/auth_keys.h"
#include "proto/msg.h"

#define PS_IDENT_MAX 4096

typedef struct ps_ident {
    msg_role_t role;
    uint32_t id;                    /* member id (without CURVE); 0 with CURVE */
    char key[AUTH_KEY_Z85_LEN + 1]; /* CURVE public key (Z85); "" without CURVE */
    int attached;                   /* peers attached now */
    uint64_t seen_ns;               /* when a peer was last attached or detached (clock_now_ns) */
    /* gradient workers */
    long push_round;                /* the round (version t) its pushes below were of; -1: none */
    int n_pushed;                   /* gradients it put into that round */
    int n_stalls;                   /* times one of its members was dropped for not pushing */
    int demoted;                    /* [ps] stall_max_drops reached: no member again, its pushes refused */
    /* statistics workers */
    int has_stats_version;          /* it pushed statistics before ... */
    uint64_t stats_version;         /* ... of this parameter version (one push per version) */
    /* inverse daemons */
    int n_bad_inverses;             /* results that failed verification or answered another daemon's job */
    int distrusted;                 /* PS_BAD_INVERSES_MAX reached: no more jobs, its results refused */
    /* requests that cost kfac-ps work (GetParams, JobRequest) */
    double req_tokens;              /* token bucket (ps_ident_take_token) */
    uint64_t req_ns;                /* when the bucket was last filled (0: never: full) */
} ps_ident_t;

typedef struct ps_idents {
    ps_ident_t **v; /* (n) owned */
    int n, cap;
} ps_idents_t;

/* Free every record; a zeroed table is a valid empty one. */
void ps_idents_release(ps_idents_t *t);

/* The identity of a peer of role with CURVE key `key` ("" without CURVE)
 * and member id `id`, found or made, with one more peer attached. NULL
 * when out of memory, or when the table is full of identities with peers
 * attached (refuse the Hello). */
ps_ident_t *ps_ident_attach(ps_idents_t *t, msg_role_t role, const char *key, uint32_t id, uint64_t now_ns);

/* A peer attached to x is gone (its record forgotten). NULL: no-op. */
void ps_ident_detach(ps_ident_t *x, uint64_t now_ns);

/* May identity x put another gradient into the round of version t? limit:
 * the gradients one identity may put into a round (members_per_key under
 * CURVE, 1 without; 0: any number). */
int ps_ident_may_push(const ps_ident_t *x, long t, int limit);

/* x put a gradient into the round of version t. */
void ps_ident_pushed(ps_ident_t *x, long t);

/* A gradient x put into the round of version t was dropped unused (a
 * restarted member computes it again; a robust rule forgets the gradient
 * of a member that left): it may put one in again. */
void ps_ident_unpush(ps_ident_t *x, long t);

/* One of x's members was dropped for stalling: returns its stalls so far. */
int ps_ident_stalled(ps_ident_t *x);

/* x reached [ps] stall_max_drops: returns 1 when it was not demoted
 * before (count and log it once), else 0. */
int ps_ident_demote(ps_ident_t *x);

/* A result of x failed verification: returns its bad results so far. */
int ps_ident_bad_inverse(ps_ident_t *x);

/* x is distrusted: returns 1 when it was not before, else 0. */
int ps_ident_distrust(ps_ident_t *x);

/* A statistics push of parameter version v from x: returns 0 and records
 * v when v is newer than x's last one, else -1 (one push per version). */
int ps_ident_stats_version(ps_ident_t *x, uint64_t v);

/* A token bucket per identity for requests that cost the PS work
 * (GetParams, JobRequest): it holds at most burst tokens, refilled at
 * per_s a second (the first call finds it full). Takes one token and
 * returns 1 when one was there, else returns 0 (refuse the request). */
int ps_ident_take_token(ps_ident_t *x, uint64_t now_ns, double per_s, double burst);

/* ---- the checkpoint (ps/ckpt.h, record IDNT) ------------------------------ */

/* What of an identity a checkpoint keeps: its name and its penalties (not
 * the round's pushes, which a resumed run redoes, nor the tokens). */
typedef struct ps_ident_saved {
    msg_role_t role;
    uint32_t id;
    char key[AUTH_KEY_Z85_LEN + 1];
    uint32_t n_stalls, n_bad_inverses;
    int demoted, distrusted;
    int has_stats_version;
    uint64_t stats_version;
} ps_ident_saved_t;

/* Identities worth keeping (some penalty or a statistics version): up to
 * cap into out (may be NULL with cap 0), returns their number. */
int ps_idents_save(const ps_idents_t *t, ps_ident_saved_t *out, int cap);

/* Check saved identities (roles, keys): 0, or -1 with the reason in why. */
int ps_idents_validate(const ps_ident_saved_t *v, int n, char *why, size_t why_len);

/* Replace t's records by saved ones (none attached). Returns 0, -ENOMEM,
 * or -EINVAL (validate first) with t unchanged. */
int ps_idents_load(ps_idents_t *t, const ps_ident_saved_t *v, int n, char *why, size_t why_len);

#endif
