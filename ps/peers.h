/* ps/peers.h — the parameter server's table of clients, keyed by their
 * ZeroMQ routing id: role, assigned id, liveness, the long-poll request each
 * one is waiting on, and a worker's place in the synchronous round.
 *
 * A peer enters the table with an accepted Hello and leaves it with Bye,
 * when it has not asked for work within [ps] handshake_timeout_ms of its
 * Hello, or when a new client needs its slot (ps_peers_victim: never a
 * present member). Peers are heap objects: pointers stay valid until
 * ps_peers_remove() (or ps_peers_release()).
 *
 * Threads: the PS's loop thread only.
 */
#ifndef KFAC_PS_PEERS_H
#define KFAC_PS_PEERS_H

#include <stddef.h>
#include <stdint.h>

#include "common/kfac/kfac_lowrank.h"
#include "common/kfac/kfac_stats.h"
#include "common/net/auth_keys.h"
#include "common/net/zloop.h"
#include "proto/msg.h"
#include "ps/ident.h"

/* What a peer's outstanding long poll asks for. */
typedef enum {
    PS_WAIT_NONE = 0,
    PS_WAIT_PARAMS, /* Params with version >= min_version (GetParams, GradPush, StatsPush) */
    PS_WAIT_JOB,    /* a Job with n <= max_n (JobRequest, JobResult) */
} ps_wait_t;

/* A peer's outstanding request and its part in the synchronous rounds.
 * One owner: ps/member.c writes these fields, through the named
 * transitions of ps/member.h (waiting for Params, waiting for a job,
 * answered, pushed, refused, summed, stalled, left); every other
 * unit reads them (tools/check-fields.sh holds the rule). */
typedef struct ps_member_rec {
    ps_wait_t wait;
    uint64_t min_version;    /* PS_WAIT_PARAMS */
    uint32_t max_n;          /* PS_WAIT_JOB (0: any), kept from its last JobRequest */
    uint64_t wait_seq;       /* PS_WAIT_JOB: arrival order, served first come first served */
    /* gradient workers */
    int member;              /* the current round waits for its gradient */
    int pushed;              /* its gradient of the current version is in */
    int skipped;             /* its push for the current round was rejected */
    int committed;           /* already added to the round's sums (it left mid-round) */
    int stalled;             /* dropped for not pushing ([ps] stall_timeout_ms): no member until it pushes */
    int has_stats;           /* stats = sync: its held push of this round carries statistics (peer.stats) */
    int has_state;           /* its held push of this round carries batch-norm state (peer.state) */
    /* the Params last sent on this connection: a push answers those */
    int has_sent;            /* it was sent Params ... */
    uint64_t sent_version;   /* ... of this version ... */
    int stats_asked;         /* ... that asked for statistics (want_stats, or a statsd's layers) */
} ps_member_rec_t;

typedef struct ps_peer {
    zloop_peer_t route;      /* ROUTER identity */
    msg_role_t role;
    uint32_t id;             /* assigned at Welcome, never reused */
    uint32_t asked_id;       /* sender_id of its Hello (the daemon's --id) */
    uint32_t pid;
    char host[64];
    char key[AUTH_KEY_Z85_LEN + 1]; /* CURVE public key (Z85) of its connection; "" without CURVE */
    int rank, n_ranks;       /* shard given in Welcome */
    int present;             /* heard from within worker_timeout_ms */
    uint64_t last_ns;        /* when its last accepted message came (clock_now_ns) */
    uint64_t echo_ns;        /* mono_ns of its last heartbeat, echoed back */
    uint64_t hello_ns;       /* when its Hello was accepted */
    int engaged;             /* it has asked for work since (GetParams, a push, a job request or result) */
    ps_member_rec_t mb;      /* its request and its part in the rounds: written by ps/member.c only */
    /* gradient workers */
    int has_params;          /* has been sent Params at least once */
    uint64_t params_ns;      /* when it was last sent Params (clock_now_ns) */
    /* its gradient of the current round, held until the step so that the
     * PS sums the round in rank order whatever the arrival order (floating
     * point addition is not associative: with three or more workers the
     * arrival order would otherwise change the step) */
    float *grad;             /* (n_params) owned, NULL until the first push; zeros in the weights of
                                layers held factored in lowrank */
    kfac_lowrank_set_t lowrank; /* its factored fc weight gradients of this round (rows > 0), owned;
                                   entries made at its first factored push */
    float *state;            /* (n_state) owned, NULL until a push carries state */
    double loss;             /* mean loss of its batch */
    uint64_t grad_version;   /* the version its held gradient was computed on */
    uint64_t n_examples, n_correct;
    kfac_stats_t *stats;     /* stats = sync: its statistics of this round (owned, NULL until needed) */
    /* what it has done, kept by its identity beyond this connection:
     * stalls and demotion, pushes of the round, statistics version, bad
     * inverses and distrust, the request tokens (ps/ident.h); attached at
     * Hello, never NULL for a peer that was welcomed */
    ps_ident_t *ident;
    zloop_track_t *params_track; /* its Params sends ZeroMQ has not written out (owned; NULL until the first) */
    /* counters */
    uint64_t n_accepted;     /* gradients / statistics / results accepted */
    uint64_t n_clipped;      /* layer gradients clipped ([ps] grad_clip_ratio) */
    uint64_t n_rejected;
} ps_peer_t;

typedef struct ps_peers {
    ps_peer_t **v;           /* (n) owned */
    int n, cap;              /* cap: most peers held at once */
} ps_peers_t;

/* An empty table for at most cap peers. Returns 0 or -ENOMEM. */
int ps_peers_init(ps_peers_t *t, int cap);
void ps_peers_release(ps_peers_t *t);

/* The peer with routing id r, or NULL. */
ps_peer_t *ps_peers_find(const ps_peers_t *t, const zloop_peer_t *r);

/* The peer with assigned id `id` (ps_peer_t.id), or NULL. */
ps_peer_t *ps_peers_by_id(const ps_peers_t *t, uint32_t id);

/* A new zeroed peer for routing id r (caller fills it). Returns NULL when
 * the table is full (make room with ps_peers_victim) or out of memory. */
ps_peer_t *ps_peers_add(ps_peers_t *t, const zloop_peer_t *r);

/* The peer to forget so that a new client of role fits under a limit:
 * among the peers of that role (MSG_ROLE_NONE: any role), the one silent
 * the longest of those not present, else the oldest of those that never
 * asked for work after Hello (not engaged); never a present, engaged peer
 * (a member). NULL when there is none. */
ps_peer_t *ps_peers_victim(const ps_peers_t *t, msg_role_t role);

/* Peers that said Hello at least timeout_ns before now_ns and have not
 * asked for work since: up to cap into out, returns their number. */
int ps_peers_unengaged(const ps_peers_t *t, uint64_t now_ns, uint64_t timeout_ns, ps_peer_t **out, int cap);

/* Remove and free p (NULL: no-op); its identity (ps/ident.h) stays. */
void ps_peers_remove(ps_peers_t *t, ps_peer_t *p);

/* Peers of a role (MSG_ROLE_NONE: any), present ones only if present_only. */
int ps_peers_count(const ps_peers_t *t, msg_role_t role, int present_only);

/* Is shard `rank` of role held by a peer other than except? */
int ps_peers_rank_taken(const ps_peers_t *t, msg_role_t role, int rank, const ps_peer_t *except);

/* ---- one peer's liveness, place and counts ---------------------------------
 * The fields below are written here only (tools/check-fields.sh): the
 * other units say what happened. */

/* Its Hello was accepted at now_ns: present, heard now, not engaged until
 * it asks for work. */
void ps_peer_admitted(ps_peer_t *p, uint64_t now_ns);

/* An accepted message from p at now_ns. Returns 1 when it was absent
 * before (it is back), else 0. */
int ps_peer_heard(ps_peer_t *p, uint64_t now_ns);

/* It asked for work (GetParams, a push, a job request or result). */
void ps_peer_engaged(ps_peer_t *p);

/* Its heartbeat's clock (mono_ns), echoed in the PS's next heartbeat. */
void ps_peer_echo(ps_peer_t *p, uint64_t mono_ns);

/* It is gone: silent past the timeout, its connection closed, let go. */
void ps_peer_absent(ps_peer_t *p);

/* A restarted member's new connection r takes over record p. */
void ps_peer_reroute(ps_peer_t *p, const zloop_peer_t *r);

/* Its shard: rank of n_ranks. */
void ps_peer_set_rank(ps_peer_t *p, int rank, int n_ranks);

/* One of its messages was accepted / refused. */
void ps_peer_accepted(ps_peer_t *p);
void ps_peer_rejected(ps_peer_t *p);

/* "worker#3 (pid 4242 on host1)" into buf; returns buf. */
const char *ps_peer_name(const ps_peer_t *p, char *buf, size_t len);

#endif
