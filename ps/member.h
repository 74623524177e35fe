/* ps/member.h — who takes part in the synchronous gradient round, and what
 * to do with each push: the parameter server's round decisions, apart from
 * any I/O (STYLE 8a). Every function reads or updates the peer table and
 * returns a decision; ps/round.c acts on it (sends, sums, steps).
 *
 * The round of version t: the gradient workers that are present and have
 * been sent Params when the round opens are its members; the step waits
 * until every present member has pushed a gradient of version t (or had its
 * push rejected). The first step also waits for the start-up gate: until
 * [cluster] workers members are in, or worker_timeout_ms have passed since
 * the first worker joined. A member that leaves mid-round is dropped from
 * it; a gradient it already pushed still counts.
 *
 * Threads: the loop thread only. Peers are borrowed. */
#ifndef KFAC_PS_MEMBER_H
#define KFAC_PS_MEMBER_H

#include <stdint.h>

#include "ps/peers.h"

/* What to do with a GradPush of version `version` from worker p. */
typedef enum {
    PS_PUSH_ACCEPT = 0, /* hold it for the step */
    PS_PUSH_RUN_OVER,   /* the run is finishing: keep the worker waiting for Shutdown */
    PS_PUSH_AHEAD,      /* version > t: an invalid message (Error) */
    PS_PUSH_STALE,      /* version < t - staleness: discard, send the worker the current Params */
    PS_PUSH_DUPLICATE,  /* a second gradient for t from the same worker (Error) */
} ps_push_t;

/* Decide on a push. running: the run still takes steps; staleness: [ps]
 * gradient_staleness, the most versions a gradient may lag t and still go
 * into the round of t (0: only gradients of t). */
ps_push_t ps_member_check_push(const ps_peer_t *p, int running, long t, uint64_t version, int staleness);

/* Whether a round that has n_grads gradients may step without waiting for
 * the members still computing: [ps] quorum > 0 gradients are in. */
int ps_member_quorum_met(int n_grads, int quorum);

/* Open the round of a new version: every gradient worker that is present,
 * has had Params and is not marked stalled becomes a member; every
 * worker's per-round flags are cleared. */
void ps_member_open_round(ps_peers_t *peers);

/* Present members whose gradient of this round is still awaited; *n_members
 * (may be NULL) gets the number of present members. */
int ps_member_waiting(const ps_peers_t *peers, int *n_members);

/* The start-up gate before the first step. */
typedef enum {
    PS_GATE_CLOSED = 0,    /* keep waiting for workers */
    PS_GATE_OPEN,          /* [cluster] workers members are in */
    PS_GATE_OPEN_TIMEOUT,  /* fewer, but the wait is over: start with those */
} ps_gate_t;

/* 1 when the round has members and every one of them was refused this
 * round (skipped, none pushed): nothing to step with, and nobody to wait
 * for. */
int ps_member_all_refused(const ps_peers_t *peers);

/* n_members present members of the round, `workers` configured; waited_ns
 * since the first worker joined (0: none yet); timeout_ns the longest wait. */
ps_gate_t ps_member_gate(int n_members, int workers, uint64_t waited_ns, uint64_t timeout_ns);

/* The workers whose gradient of this round is held and not yet summed, in
 * rank order (then id): the order of the round's sum, so that the step does
 * not depend on the order gradients arrived in. Returns their number (at
 * most cap). */
int ps_member_order(const ps_peers_t *peers, ps_peer_t **order, int cap);

/* A gradient worker p leaves or goes silent. Returns what it means for the
 * round: whether its held gradient must be summed now (before it is
 * forgotten) and whether the round was waiting for it. It is no member
 * of the round after. */
typedef struct ps_leave {
    int sum_now;  /* its gradient of this round is held and not summed */
    int blocking; /* the round was waiting for its gradient */
} ps_leave_t;
ps_leave_t ps_member_leave(ps_peer_t *p);

/* A Hello from a new connection of a worker or stats worker with member id
 * asked_id (its --id). Another connection may hold that id already. */
typedef enum {
    PS_REJOIN_NEW = 0,    /* nobody holds the id: a new member */
    PS_REJOIN_TAKEOVER,   /* the holder is gone or silent: the new connection takes its place and shard */
    PS_REJOIN_DUPLICATE,  /* the holder is alive (heard within live_ns): refuse the new one */
} ps_rejoin_t;

/* Decide for a Hello of role with asked_id at now_ns; *holder (may be
 * NULL) gets the peer holding the id (NULL when none). Only gradient
 * workers and stats workers have member ids; other roles are always NEW.
 * A holder is alive when present and heard within live_ns. */
ps_rejoin_t ps_member_rejoin(const ps_peers_t *peers, msg_role_t role, uint32_t asked_id, uint64_t now_ns,
                             uint64_t live_ns, ps_peer_t **holder);

/* A restarted member takes over its old record p (PS_REJOIN_TAKEOVER): it
 * keeps p's shard and its membership of the round; a gradient of this
 * round that p pushed and that is not summed yet is dropped, since the new
 * process computes the same batch again (its data position follows the
 * version). Returns 1 when a held gradient was dropped (the round has one
 * gradient less), else 0. */
int ps_member_takeover(ps_peer_t *p);

/* ---- transitions of a peer's member record ----------------------------------
 *
 * ps_member_rec_t (ps/peers.h) is written here only: the other units say
 * what happened and these functions change the record. */

/* Its request waits for Params of version >= min_version (a GetParams held,
 * a push answered later, a statistics worker with nothing due). */
void ps_member_wait_params(ps_peer_t *p, uint64_t min_version);

/* It was sent Params of version v (asking for statistics when
 * stats_asked): the pushes of this connection answer those. */
void ps_member_sent_params(ps_peer_t *p, uint64_t v, int stats_asked);

/* Its JobRequest waits for a job of n <= max_n (0: any); seq is its place
 * in the queue (first come, first served). */
void ps_member_wait_job(ps_peer_t *p, uint32_t max_n, uint64_t seq);

/* Its request is answered (Params or a job sent), or void (it said Hello
 * again, it is distrusted, its push was refused): it waits for nothing. */
void ps_member_answered(ps_peer_t *p);

/* Before the first step every worker that is sent Params is a member of
 * round 0. */
void ps_member_join_first(ps_peer_t *p);

/* After a step's Params went out: the workers present that hold
 * parameters and are not marked stalled are the members of the new round
 * (its per-round flags were cleared by ps_member_open_round). */
void ps_member_enlist(ps_peers_t *peers);

/* Worker p's gradient of this round is accepted and held: pushed, not yet
 * summed, with statistics and batch-norm state as given; its request then
 * waits for Params of next_version. A push also ends a stall mark: it is a
 * member again from the next round. */
void ps_member_pushed(ps_peer_t *p, int has_stats, int has_state, uint64_t next_version);

/* A push of worker p reached the PS (before any verdict on it): a worker
 * marked stalled is a member again from the next round. */
void ps_member_pushes_again(ps_peer_t *p);

/* Worker p's push for the current round was refused: the round no longer
 * waits for it, and its request waits for Params of next_version. */
void ps_member_refused(ps_peer_t *p, uint64_t next_version);

/* Worker p's held gradient is dropped unsummed (it left before the step
 * under a robust aggregation rule): the round has one gradient less. */
void ps_member_drop_held(ps_peer_t *p);

/* Worker p's held push went into the round's sums. */
void ps_member_summed(ps_peer_t *p);

/* Worker p's held statistics went into the round's statistics. */
void ps_member_stats_folded(ps_peer_t *p);

/* ---- what a gradient may be ------------------------------------------------ */

/* Norms of recently accepted gradients (a ring), for the outlier rule. */
#define PS_NORM_HISTORY 32
/* Fewer norms than this: no outlier rule yet. */
#define PS_NORM_MIN_HISTORY 8
typedef struct ps_norm_hist {
    double v[PS_NORM_HISTORY];
    int n, next;
} ps_norm_hist_t;

/* Record an accepted gradient's norm. */
void ps_norm_hist_add(ps_norm_hist_t *h, double norm);

/* The median of the recorded norms; 0 while fewer than
 * PS_NORM_MIN_HISTORY are recorded. */
double ps_norm_hist_median(const ps_norm_hist_t *h);

typedef enum {
    PS_GRAD_OK = 0,
    PS_GRAD_TOO_MANY_EXAMPLES, /* n_examples > [data] batch: it would outweigh the honest workers */
    PS_GRAD_NORM_OUTLIER,      /* norm > max_ratio * median (a small norm can only dilute the mean by at most
                                  a batch's weight, and honest batches near a minimum have them) */
} ps_grad_verdict_t;

/* May a gradient of n_examples examples and L2 norm `norm` enter the
 * round? batch: the configured per-worker batch; h: recent norms;
 * max_ratio: [ps] grad_norm_max_ratio (0: no norm rule). A norm that is not
 * finite is an outlier. */
ps_grad_verdict_t ps_member_check_grad(uint64_t n_examples, int batch, double norm, const ps_norm_hist_t *h,
                                       double max_ratio);

/* Members of the round that are present (they heartbeat) but have not
 * pushed their gradient stall_ns after the later of the round's opening
 * and the Params they were last sent: up to cap of them into out, returns
 * their number. stall_ns 0: none. */
int ps_member_stalled(const ps_peers_t *peers, uint64_t now_ns, uint64_t round_open_ns, uint64_t stall_ns,
                      ps_peer_t **out, int cap);

/* A stalled member (ps_member_stalled) leaves the round and is no member
 * of the following ones until it pushes again (the caller clears
 * p->mb.stalled then): one that never pushes holds up one round, not all. */
void ps_member_drop_stalled(ps_peer_t *p);

/* The stall timeout in force (ns): cfg_ns ([ps] stall_timeout_ms; 0: no
 * stall rule), or, once median_push_ns (the median time members took to
 * push their gradients lately; 0: not known yet) is known and factor > 0,
 * max(min_ns, factor x median_push_ns) if that is shorter. A member that
 * heartbeats and never pushes then costs a few step periods, not a minute. */
uint64_t ps_member_stall_ns(uint64_t cfg_ns, double median_push_ns, double factor, uint64_t min_ns);

#endif
