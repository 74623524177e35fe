/* tests/ps/test_ps_member.c — the parameter server's round decisions
 * (ps/member.c), driven without sockets the way tests/ps/test_ps_sched.c
 * drives the scheduler: which workers are members of a round, the start-up
 * gate before the first step (through ps_round_state_decide, as the server
 * asks it), what happens to late, early, duplicate and
 * rejected pushes, a worker leaving mid-round, and the rank order in which
 * the round is summed. Peer tables are random (roles, presence, ranks,
 * arrival order) from a fresh seed printed on failure; each decision is
 * checked against the rule written out directly in the test. */
#include <check.h>
#include <inttypes.h>
#include <math.h>
#include <stdlib.h>
#include <stdint.h>
#include <stdio.h>
#include <string.h>

#include "common/base/rng.h"
#include "ps/member.h"
#include "ps/peers.h"
#include "ps/round_int.h"
#include "tests/lib/seed.h"

#define ROUNDS 200

static ps_peer_t *s_add(ps_peers_t *t, int k, msg_role_t role) {
    zloop_peer_t r;
    memset(&r, 0, sizeof r);
    r.len = (size_t)snprintf((char *)r.id, sizeof r.id, "peer-%d", k);
    ps_peer_t *p = ps_peers_add(t, &r);
    ck_assert_ptr_nonnull(p);
    p->role = role;
    p->id = (uint32_t)k + 1;
    p->present = 1;
    p->has_params = 1;
    return p;
}

/* A random table: n peers, roughly 2/3 gradient workers, random presence,
 * Params held, ranks (with ties). */
static void s_random_table(rng_t *r, ps_peers_t *t, int n) {
    ck_assert_int_eq(ps_peers_init(t, 64), 0);
    for (int k = 0; k < n; k++) {
        uint32_t u = rng_below(r, 6);
        msg_role_t role = u < 4 ? MSG_ROLE_WORKER : (u == 4 ? MSG_ROLE_INVERTD : MSG_ROLE_STATSD);
        ps_peer_t *p = s_add(t, k, role);
        p->present = rng_below(r, 5) != 0;
        p->has_params = rng_below(r, 4) != 0;
        p->rank = (int)rng_below(r, 4);
        p->mb.pushed = (int)rng_below(r, 2); /* leftovers of the last round */
        p->mb.skipped = (int)rng_below(r, 2);
        p->mb.committed = (int)rng_below(r, 2);
    }
}

START_TEST(test_ps_member_push_decisions) {
    uint64_t seed = test_seed();
    rng_t r;
    rng_seed(&r, seed);
    ps_peers_t t;
    ck_assert_int_eq(ps_peers_init(&t, 4), 0);
    ps_peer_t *p = s_add(&t, 0, MSG_ROLE_WORKER);
    for (int i = 0; i < ROUNDS; i++) {
        long cur = 1 + (long)rng_below(&r, 1000);
        uint64_t v = (uint64_t)(cur - 2 + (long)rng_below(&r, 5)); /* t-2 .. t+2 */
        int running = rng_below(&r, 4) != 0;
        int stale = (int)rng_below(&r, 3); /* [ps] gradient_staleness 0..2 */
        p->mb.pushed = (int)rng_below(&r, 2);
        ps_push_t want = !running                         ? PS_PUSH_RUN_OVER
                         : v > (uint64_t)cur              ? PS_PUSH_AHEAD
                         : (long)v < cur - (long)stale    ? PS_PUSH_STALE
                         : p->mb.pushed                      ? PS_PUSH_DUPLICATE
                                                          : PS_PUSH_ACCEPT;
        ck_assert_msg(ps_member_check_push(p, running, cur, v, stale) == want,
                      "seed %" PRIu64 ": push of version %" PRIu64 " at t=%ld (running %d, pushed %d, staleness %d): got "
                      "%d, want %d",
                      seed, v, cur, running, p->mb.pushed, stale, ps_member_check_push(p, running, cur, v, stale), want);
    }
    ps_peers_release(&t);
}
END_TEST

START_TEST(test_ps_member_open_round_membership) {
    uint64_t seed = test_seed();
    rng_t r;
    rng_seed(&r, seed);
    for (int round = 0; round < ROUNDS; round++) {
        ps_peers_t t;
        s_random_table(&r, &t, 1 + (int)rng_below(&r, 12));
        int member_before[64];
        for (int i = 0; i < t.n; i++) member_before[i] = t.v[i]->mb.member = (int)rng_below(&r, 2);
        ps_member_open_round(&t);
        int members = 0, waiting_want = 0;
        for (int i = 0; i < t.n; i++) {
            const ps_peer_t *p = t.v[i];
            if (p->role == MSG_ROLE_WORKER) {
                ck_assert_msg(p->mb.member == (p->present && p->has_params), "seed %" PRIu64 ": worker membership", seed);
                ck_assert_msg(!p->mb.pushed && !p->mb.skipped && !p->mb.committed, "seed %" PRIu64 ": flags not cleared", seed);
                if (p->mb.member && p->present) members++, waiting_want++;
            } else {
                ck_assert_msg(p->mb.member == member_before[i], "seed %" PRIu64 ": a non-worker was touched", seed);
            }
        }
        int n_members = -1;
        ck_assert_int_eq(ps_member_waiting(&t, &n_members), waiting_want);
        ck_assert_int_eq(n_members, members);
        ps_peers_release(&t);
    }
}
END_TEST

/* The round's verdict from peer table t, built as ps_round_try_step builds
 * it (ps/round_state.h): n_grads gradients in, the first step or not,
 * workers configured, waited ns since the first worker; an opening gate is
 * recorded in r. Without curvature: PS_ROUND_WAIT or PS_ROUND_STEP. */
static ps_round_action_t s_round(const ps_peers_t *t, ps_round_t *r, int n_grads, int first_step, int workers,
                                 uint64_t waited, uint64_t timeout, ps_gate_t *gate) {
    ps_round_view_t v;
    memset(&v, 0, sizeof v);
    v.running = 1;
    v.first_step = first_step;
    v.n_waiting = ps_member_waiting(t, &v.n_members);
    v.all_refused = ps_member_all_refused(t);
    v.workers = workers;
    v.now_ns = 1000000000000ULL;
    v.timeout_ns = timeout;
    r->n_grads = n_grads;
    r->first_worker_ns = v.now_ns - waited;
    ps_round_verdict_t d = ps_round_state_decide(r, &v);
    if (d.gate_opens) ps_round_state_open_gate(r);
    if (gate) *gate = d.gate;
    return d.action;
}

/* The first step waits for [cluster] workers members or the timeout; later
 * steps never look at the gate; a rejected push does not hold the round. */
START_TEST(test_ps_member_startup_gate) {
    ps_peers_t t;
    ck_assert_int_eq(ps_peers_init(&t, 8), 0);
    ps_peer_t *w[3];
    for (int k = 0; k < 2; k++) w[k] = s_add(&t, k, MSG_ROLE_WORKER);
    ps_member_open_round(&t);
    ps_round_t rs;
    memset(&rs, 0, sizeof rs);
    ps_gate_t gate;
    const uint64_t timeout = 10000000000ULL;
    /* no gradient yet */
    ck_assert_int_eq(s_round(&t, &rs, 0, 1, 3, 0, timeout, &gate), PS_ROUND_WAIT);
    /* one of two members pushed */
    w[0]->mb.pushed = 1;
    ck_assert_int_eq(s_round(&t, &rs, 1, 1, 3, 1000, timeout, &gate), PS_ROUND_WAIT);
    /* both pushed, but 2 < 3 workers configured and no timeout: the gate holds */
    w[1]->mb.pushed = 1;
    ck_assert_int_eq(s_round(&t, &rs, 2, 1, 3, timeout - 1, timeout, &gate), PS_ROUND_WAIT);
    ck_assert_int_eq(gate, PS_GATE_CLOSED);
    ck_assert_int_eq(rs.gate_open, 0);
    /* ... until the timeout: it opens with the members there are */
    ck_assert_int_eq(s_round(&t, &rs, 2, 1, 3, timeout, timeout, &gate), PS_ROUND_STEP);
    ck_assert_int_eq(gate, PS_GATE_OPEN_TIMEOUT);
    ck_assert_int_eq(rs.gate_open, 1);
    /* once open it stays open */
    ck_assert_int_eq(s_round(&t, &rs, 2, 1, 3, 0, timeout, &gate), PS_ROUND_STEP);
    /* a third worker joins: with 3 members the gate opens without waiting */
    w[2] = s_add(&t, 2, MSG_ROLE_WORKER);
    ps_member_open_round(&t);
    rs.gate_open = 0;
    for (int k = 0; k < 3; k++) w[k]->mb.pushed = 1;
    ck_assert_int_eq(s_round(&t, &rs, 3, 1, 3, 0, timeout, &gate), PS_ROUND_STEP);
    ck_assert_int_eq(gate, PS_GATE_OPEN);
    /* later steps: the gate is not consulted */
    rs.gate_open = 0;
    ck_assert_int_eq(s_round(&t, &rs, 3, 0, 5, 0, timeout, &gate), PS_ROUND_STEP);
    ck_assert_int_eq(rs.gate_open, 0);
    /* a member whose push was rejected does not hold the round */
    ps_member_open_round(&t);
    w[0]->mb.pushed = w[1]->mb.pushed = 1;
    ck_assert_int_eq(s_round(&t, &rs, 2, 0, 3, 0, timeout, &gate), PS_ROUND_WAIT);
    w[2]->mb.skipped = 1;
    ck_assert_int_eq(s_round(&t, &rs, 2, 0, 3, 0, timeout, &gate), PS_ROUND_STEP);
    /* an absent member does not hold it either */
    ps_member_open_round(&t);
    w[0]->mb.pushed = w[1]->mb.pushed = 1;
    w[2]->present = 0;
    ck_assert_int_eq(s_round(&t, &rs, 2, 0, 3, 0, timeout, &gate), PS_ROUND_STEP);
    ps_peers_release(&t);
}
END_TEST

/* A worker leaving mid-round: a member that had not pushed was blocking the
 * round and is dropped (the rest complete it); one that had pushed is
 * summed now; one that is not a member changes nothing. */
START_TEST(test_ps_member_worker_leaves_mid_round) {
    ps_peers_t t;
    ck_assert_int_eq(ps_peers_init(&t, 8), 0);
    ps_peer_t *a = s_add(&t, 0, MSG_ROLE_WORKER), *b = s_add(&t, 1, MSG_ROLE_WORKER), *c = s_add(&t, 2, MSG_ROLE_WORKER);
    ps_peer_t *inv = s_add(&t, 3, MSG_ROLE_INVERTD);
    ps_member_open_round(&t);
    ps_round_t rs;
    memset(&rs, 0, sizeof rs);
    rs.gate_open = 1;
    a->mb.pushed = 1;
    ck_assert_int_eq(s_round(&t, &rs, 1, 0, 3, 0, 1, NULL), PS_ROUND_WAIT);
    ps_leave_t l = ps_member_leave(b); /* b had not pushed: it was blocking */
    ck_assert_int_eq(l.blocking, 1);
    ck_assert_int_eq(l.sum_now, 0);
    ck_assert_int_eq(b->mb.member, 0);
    ck_assert_int_eq(s_round(&t, &rs, 1, 0, 3, 0, 1, NULL), PS_ROUND_WAIT);
    l = ps_member_leave(a); /* a had pushed: its gradient is summed before it is forgotten */
    ck_assert_int_eq(l.blocking, 0);
    ck_assert_int_eq(l.sum_now, 1);
    c->mb.pushed = 1;
    ck_assert_int_eq(s_round(&t, &rs, 2, 0, 3, 0, 1, NULL), PS_ROUND_STEP);
    l = ps_member_leave(b); /* not a member any more */
    ck_assert_int_eq(l.blocking, 0);
    ck_assert_int_eq(l.sum_now, 0);
    l = ps_member_leave(inv); /* not a gradient worker */
    ck_assert_int_eq(l.blocking + l.sum_now, 0);
    a->mb.committed = 1; /* summed: a second leave does not sum it twice */
    l = ps_member_leave(a);
    ck_assert_int_eq(l.sum_now, 0);
    ps_peers_release(&t);
}
END_TEST

/* The round is summed in rank order (then id), over the workers whose
 * gradient is held and not yet summed, whatever the order of the table. */
START_TEST(test_ps_member_order_is_rank_order) {
    uint64_t seed = test_seed();
    rng_t r;
    rng_seed(&r, seed);
    for (int round = 0; round < ROUNDS; round++) {
        ps_peers_t t;
        s_random_table(&r, &t, 1 + (int)rng_below(&r, 20));
        ps_peer_t *order[64];
        int n = ps_member_order(&t, order, 64);
        int want = 0;
        for (int i = 0; i < t.n; i++) want += t.v[i]->role == MSG_ROLE_WORKER && t.v[i]->mb.pushed && !t.v[i]->mb.committed;
        ck_assert_msg(n == want, "seed %" PRIu64 ": %d in the order, want %d", seed, n, want);
        for (int i = 0; i < n; i++) {
            ck_assert(order[i]->role == MSG_ROLE_WORKER && order[i]->mb.pushed && !order[i]->mb.committed);
            if (i > 0) {
                const ps_peer_t *x = order[i - 1], *y = order[i];
                ck_assert_msg(x->rank < y->rank || (x->rank == y->rank && x->id < y->id),
                              "seed %" PRIu64 ": (rank %d, id %u) before (rank %d, id %u)", seed, x->rank, x->id, y->rank,
                              y->id);
            }
        }
        /* the cap is honoured */
        if (want > 1) ck_assert_int_le(ps_member_order(&t, order, 1), 1);
        ps_peers_release(&t);
    }
}
END_TEST


/* A Hello with a member id: new, a take-over of a silent or absent
 * holder, or a duplicate of a live one (worker and stats worker ids are
 * separate; inverse daemons have none). */
START_TEST(test_ps_member_rejoin_by_id) {
    uint64_t seed = test_seed();
    rng_t r;
    rng_seed(&r, seed);
    const uint64_t live = 3000000000ULL;
    for (int round = 0; round < ROUNDS; round++) {
        ps_peers_t t;
        s_random_table(&r, &t, 1 + (int)rng_below(&r, 12));
        uint64_t now = 100000000000ULL;
        for (int i = 0; i < t.n; i++) {
            t.v[i]->asked_id = rng_below(&r, 6);
            t.v[i]->last_ns = now - (uint64_t)rng_below(&r, 6) * 1000000000ULL;
        }
        uint32_t u = rng_below(&r, 3);
        msg_role_t role = u == 0 ? MSG_ROLE_WORKER : u == 1 ? MSG_ROLE_STATSD : MSG_ROLE_INVERTD;
        uint32_t id = rng_below(&r, 6);
        ps_peer_t *want_h = NULL;
        for (int i = 0; i < t.n && !want_h; i++)
            if (t.v[i]->role == role && t.v[i]->asked_id == id) want_h = t.v[i];
        ps_rejoin_t want = PS_REJOIN_NEW;
        if (role == MSG_ROLE_INVERTD) want_h = NULL;
        if (want_h) want = want_h->present && now - want_h->last_ns < live ? PS_REJOIN_DUPLICATE : PS_REJOIN_TAKEOVER;
        ps_peer_t *h = (ps_peer_t *)&r; /* must be overwritten */
        ps_rejoin_t got = ps_member_rejoin(&t, role, id, now, live, &h);
        ck_assert_msg(got == want, "seed %" PRIu64 " round %d: %s id %u: got %d, want %d", seed, round,
                      msg_role_name(role), id, got, want);
        ck_assert_ptr_eq(h, want_h);
        ps_peers_release(&t);
    }
}
END_TEST

/* A restarted member takes over its record: shard and membership stay; a
 * held, unsummed gradient is dropped (the new process pushes it again); a
 * summed one stays summed. */
START_TEST(test_ps_member_takeover_keeps_place) {
    uint64_t seed = test_seed();
    rng_t r;
    rng_seed(&r, seed);
    for (int round = 0; round < ROUNDS; round++) {
        ps_peers_t t;
        s_random_table(&r, &t, 1 + (int)rng_below(&r, 8));
        ps_peer_t *p = t.v[rng_below(&r, (uint32_t)t.n)];
        p->mb.member = (int)rng_below(&r, 2);
        p->mb.wait = PS_WAIT_PARAMS;
        ps_peer_t before = *p;
        int want = p->role == MSG_ROLE_WORKER && p->mb.pushed && !p->mb.committed;
        int waiting_before = ps_member_waiting(&t, NULL);
        ck_assert_int_eq(ps_member_takeover(p), want);
        ck_assert_int_eq(p->rank, before.rank);
        ck_assert_int_eq(p->mb.member, before.mb.member);
        ck_assert_int_eq(p->mb.committed, before.mb.committed);
        ck_assert_int_eq(p->mb.skipped, 0);
        ck_assert_int_eq(p->mb.wait, PS_WAIT_NONE);
        ck_assert_int_eq(p->mb.pushed, want ? 0 : before.mb.pushed);
        /* a present member whose gradient was dropped (or whose rejected push was forgiven) is awaited again */
        int again = p->role == MSG_ROLE_WORKER && p->mb.member && p->present &&
                    (want || (before.mb.skipped && !before.mb.pushed));
        ck_assert_int_eq(ps_member_waiting(&t, NULL), waiting_before + again);
        ps_peers_release(&t);
    }
}
END_TEST

/* Median of the recent norms against a sort in the test; the verdict on a
 * gradient against the rule written out: more examples than the batch,
 * then a non-finite norm, then (with enough history and a ratio) a norm
 * more than ratio times the median (small norms pass). */
static int s_dcmp(const void *a, const void *b) {
    double x = *(const double *)a, y = *(const double *)b;
    return x < y ? -1 : x > y;
}

START_TEST(test_ps_member_grad_verdicts) {
    uint64_t seed = test_seed();
    rng_t r;
    rng_seed(&r, seed);
    for (int round = 0; round < ROUNDS; round++) {
        ps_norm_hist_t h;
        memset(&h, 0, sizeof h);
        int n_add = (int)rng_below(&r, 3 * PS_NORM_HISTORY);
        double all[3 * PS_NORM_HISTORY];
        for (int i = 0; i < n_add; i++) {
            all[i] = exp(4.0 * rng_normal(&r));
            ps_norm_hist_add(&h, all[i]);
        }
        /* the last PS_NORM_HISTORY added, sorted */
        int k = n_add < PS_NORM_HISTORY ? n_add : PS_NORM_HISTORY;
        double last[PS_NORM_HISTORY];
        for (int i = 0; i < k; i++) last[i] = all[n_add - k + i];
        qsort(last, (size_t)k, sizeof *last, s_dcmp);
        double med = k < PS_NORM_MIN_HISTORY ? 0.0 : k % 2 ? last[k / 2] : 0.5 * (last[k / 2 - 1] + last[k / 2]);
        ck_assert_msg(ps_norm_hist_median(&h) == med, "seed %" PRIu64 ": median of %d norms", seed, k);
        int batch = 1 + (int)rng_below(&r, 256);
        uint64_t n_ex = 1 + rng_below(&r, 2 * (uint32_t)batch);
        double ratio = rng_below(&r, 4) == 0 ? 0.0 : 1.0 + 200.0 * rng_uniform(&r);
        double norm = rng_below(&r, 10) == 0 ? INFINITY : (med > 0 ? med : 1.0) * exp(6.0 * rng_normal(&r));
        ps_grad_verdict_t want = PS_GRAD_OK;
        if (n_ex > (uint64_t)batch) want = PS_GRAD_TOO_MANY_EXAMPLES;
        else if (!isfinite(norm)) want = PS_GRAD_NORM_OUTLIER;
        else if (ratio > 0 && med > 0 && norm > ratio * med) want = PS_GRAD_NORM_OUTLIER;
        ck_assert_msg(ps_member_check_grad(n_ex, batch, norm, &h, ratio) == want,
                      "seed %" PRIu64 ": n_examples %" PRIu64 " batch %d norm %g median %g ratio %g: want %d", seed,
                      n_ex, batch, norm, med, ratio, want);
    }
}
END_TEST

/* Stalled members: present members, not pushed nor skipped, silent on the
 * gradient for stall_ns since the later of the round's opening and their
 * last Params. */
START_TEST(test_ps_member_stalled) {
    uint64_t seed = test_seed();
    rng_t r;
    rng_seed(&r, seed);
    const uint64_t s_ns = 1000000000ULL;
    for (int round = 0; round < ROUNDS; round++) {
        ps_peers_t t;
        s_random_table(&r, &t, 1 + (int)rng_below(&r, 12));
        uint64_t now = 1000 * s_ns, open = now - rng_below(&r, 120) * s_ns;
        uint64_t stall = rng_below(&r, 4) == 0 ? 0 : (1 + rng_below(&r, 60)) * s_ns;
        for (int i = 0; i < t.n; i++) {
            t.v[i]->mb.member = (int)rng_below(&r, 2);
            t.v[i]->params_ns = now - rng_below(&r, 120) * s_ns;
        }
        ps_peer_t *out[64];
        int n = ps_member_stalled(&t, now, open, stall, out, 64);
        int want = 0;
        for (int i = 0; i < t.n; i++) {
            const ps_peer_t *p = t.v[i];
            uint64_t since = p->params_ns > open ? p->params_ns : open;
            int st = stall > 0 && p->role == MSG_ROLE_WORKER && p->mb.member && p->present && !p->mb.pushed &&
                     !p->mb.skipped && now - since >= stall;
            int found = 0;
            for (int j = 0; j < n; j++) found |= out[j] == p;
            ck_assert_msg(found == st, "seed %" PRIu64 ": peer %d stalled %d, reported %d", seed, i, st, found);
            want += st;
        }
        ck_assert_int_eq(n, want);
        /* dropped: out of this round and the next ones until it pushes */
        for (int j = 0; j < n; j++) ps_member_drop_stalled(out[j]);
        for (int j = 0; j < n; j++) ck_assert_int_eq(out[j]->mb.member, 0);
        ps_member_open_round(&t);
        for (int j = 0; j < n; j++) ck_assert_int_eq(out[j]->mb.member, 0);
        for (int i = 0; i < t.n; i++)
            if (t.v[i]->role == MSG_ROLE_WORKER)
                ck_assert_int_eq(t.v[i]->mb.member, t.v[i]->present && t.v[i]->has_params && !t.v[i]->mb.stalled);
        ps_peers_release(&t);
    }
}
END_TEST

/* Making room: the victim for a new client of a role is the longest-silent
 * absent peer of that role, else the oldest never-engaged one, never a
 * present engaged peer; clients that said Hello and never asked for work
 * expire after the timeout. */
START_TEST(test_ps_member_peer_slots) {
    uint64_t seed = test_seed();
    rng_t r;
    rng_seed(&r, seed);
    for (int round = 0; round < ROUNDS; round++) {
        ps_peers_t t;
        s_random_table(&r, &t, 1 + (int)rng_below(&r, 12));
        uint64_t now = 1000000000000ULL;
        for (int i = 0; i < t.n; i++) {
            t.v[i]->engaged = (int)rng_below(&r, 2);
            t.v[i]->last_ns = now - rng_below(&r, 1000000) * 1000ULL;
            t.v[i]->hello_ns = now - rng_below(&r, 1000000) * 1000ULL;
        }
        uint32_t u = rng_below(&r, 4);
        msg_role_t role = u == 0 ? MSG_ROLE_NONE : u == 1 ? MSG_ROLE_WORKER : u == 2 ? MSG_ROLE_STATSD : MSG_ROLE_INVERTD;
        ps_peer_t *want = NULL;
        for (int i = 0; i < t.n; i++) { /* absent ones first, the longest silent */
            ps_peer_t *p = t.v[i];
            if ((role == MSG_ROLE_NONE || p->role == role) && !p->present && (!want || p->last_ns < want->last_ns))
                want = p;
        }
        if (!want)
            for (int i = 0; i < t.n; i++) {
                ps_peer_t *p = t.v[i];
                if ((role == MSG_ROLE_NONE || p->role == role) && p->present && !p->engaged &&
                    (!want || p->hello_ns < want->hello_ns))
                    want = p;
            }
        ps_peer_t *v = ps_peers_victim(&t, role);
        ck_assert_msg(v == want, "seed %" PRIu64 " round %d: wrong victim", seed, round);
        if (v) ck_assert(!(v->present && v->engaged));
        uint64_t timeout = rng_below(&r, 1000000) * 1000ULL;
        ps_peer_t *out[64];
        int n = ps_peers_unengaged(&t, now, timeout, out, 64), cnt = 0;
        for (int i = 0; i < t.n; i++) {
            int exp = !t.v[i]->engaged && now - t.v[i]->hello_ns >= timeout, found = 0;
            for (int j = 0; j < n; j++) found |= out[j] == t.v[i];
            ck_assert_int_eq(found, exp);
            cnt += exp;
        }
        ck_assert_int_eq(n, cnt);
        /* a full table takes nobody until room is made */
        ps_peers_t f;
        ck_assert_int_eq(ps_peers_init(&f, 2), 0);
        s_add(&f, 100, MSG_ROLE_WORKER);
        s_add(&f, 101, MSG_ROLE_WORKER);
        zloop_peer_t rt;
        memset(&rt, 0, sizeof rt);
        rt.len = 3;
        memcpy(rt.id, "new", 3);
        ck_assert_ptr_null(ps_peers_add(&f, &rt));
        ps_peers_release(&f);
        ps_peers_release(&t);
    }
}
END_TEST

/* The stall timeout in force: the configured one until pushes are timed,
 * then factor x the median push time within [min, configured]. */
/* The member record's transitions (ps/member.h), a random walk over them
 * on a random table, each step checked against the rule written out here:
 * what a transition sets, and what the round's readers (waiting, order,
 * all refused) make of the record after it. */
START_TEST(test_ps_member_transitions) {
    uint64_t seed = test_seed();
    rng_t r;
    rng_seed(&r, seed);
    for (int round = 0; round < ROUNDS; round++) {
        ps_peers_t t;
        s_random_table(&r, &t, 1 + (int)rng_below(&r, 12));
        for (int i = 0; i < t.n; i++) t.v[i]->mb.stalled = (int)rng_below(&r, 3) == 0;
        ps_member_open_round(&t);
        for (int step = 0; step < 40; step++) {
            ps_peer_t *p = t.v[rng_below(&r, (uint32_t)t.n)];
            const ps_member_rec_t before = p->mb;
            const uint64_t v = rng_u64(&r) >> 8;
            switch (rng_below(&r, 10)) {
            case 0:
                ps_member_wait_params(p, v);
                ck_assert_msg(p->mb.wait == PS_WAIT_PARAMS && p->mb.min_version == v, "seed %" PRIu64, seed);
                break;
            case 1: {
                uint32_t n = rng_below(&r, 5000);
                ps_member_wait_job(p, n, v);
                ck_assert_msg(p->mb.wait == PS_WAIT_JOB && p->mb.max_n == n && p->mb.wait_seq == v, "seed %" PRIu64,
                              seed);
                break;
            }
            case 2:
                ps_member_answered(p);
                ck_assert_int_eq(p->mb.wait, PS_WAIT_NONE);
                ck_assert_uint_eq(p->mb.min_version, before.min_version); /* only the request ends */
                break;
            case 3: {
                int hs = (int)rng_below(&r, 2), hst = (int)rng_below(&r, 2);
                ps_member_pushed(p, hs, hst, v);
                ck_assert_msg(p->mb.pushed && !p->mb.committed && !p->mb.stalled && p->mb.has_stats == hs &&
                                  p->mb.has_state == hst && p->mb.wait == PS_WAIT_PARAMS && p->mb.min_version == v,
                              "seed %" PRIu64, seed);
                ck_assert_int_eq(p->mb.member, before.member); /* membership changes at a round's opening */
                break;
            }
            case 4:
                ps_member_refused(p, v);
                ck_assert_msg(p->mb.skipped && p->mb.pushed == before.pushed && p->mb.wait == PS_WAIT_PARAMS &&
                                  p->mb.min_version == v, "seed %" PRIu64, seed);
                break;
            case 5:
                ps_member_drop_held(p);
                ck_assert_msg(!p->mb.pushed && !p->mb.has_stats && !p->mb.has_state, "seed %" PRIu64, seed);
                break;
            case 6:
                ps_member_summed(p);
                ck_assert_int_eq(p->mb.committed, 1);
                ps_member_stats_folded(p);
                ck_assert_int_eq(p->mb.has_stats, 0);
                break;
            case 7:
                ps_member_join_first(p);
                ck_assert_int_eq(p->mb.member, p->role == MSG_ROLE_WORKER ? 1 : before.member);
                break;
            case 8:
                ps_member_drop_stalled(p);
                ck_assert_msg(p->mb.stalled && !p->mb.member, "seed %" PRIu64, seed);
                ps_member_pushes_again(p);
                ck_assert_int_eq(p->mb.stalled, 0);
                break;
            default:
                ps_member_enlist(&t);
                for (int i = 0; i < t.n; i++) {
                    const ps_peer_t *q = t.v[i];
                    if (q->role == MSG_ROLE_WORKER)
                        ck_assert_msg(q->mb.member == (q->present && q->has_params && !q->mb.stalled),
                                      "seed %" PRIu64 ": peer %d", seed, i);
                }
                break;
            }
            /* The readers agree with the record. */
            ps_peer_t *order[64];
            int n_order = ps_member_order(&t, order, 64), want_order = 0, want_waiting = 0, n_members = 0;
            for (int i = 0; i < t.n; i++) {
                const ps_peer_t *q = t.v[i];
                if (q->role != MSG_ROLE_WORKER) continue;
                want_order += q->mb.pushed && !q->mb.committed;
                if (q->mb.member && q->present) {
                    n_members++;
                    want_waiting += !q->mb.pushed && !q->mb.skipped;
                }
            }
            int got_members = -1;
            ck_assert_int_eq(n_order, want_order);
            ck_assert_int_eq(ps_member_waiting(&t, &got_members), want_waiting);
            ck_assert_int_eq(got_members, n_members);
        }
        ps_peers_release(&t);
    }
}
END_TEST

START_TEST(test_member_stall_timeout) {
    const uint64_t ms = 1000000ULL;
    ck_assert_uint_eq(ps_member_stall_ns(0, 5e6, 10.0, 2000 * ms), 0);                /* off */
    ck_assert_uint_eq(ps_member_stall_ns(60000 * ms, 0.0, 10.0, 2000 * ms), 60000 * ms); /* not known yet */
    ck_assert_uint_eq(ps_member_stall_ns(60000 * ms, 5e6, 0.0, 2000 * ms), 60000 * ms);  /* factor 0: off */
    ck_assert_uint_eq(ps_member_stall_ns(60000 * ms, 5e6, 10.0, 2000 * ms), 2000 * ms);  /* 50 ms < the floor */
    ck_assert_uint_eq(ps_member_stall_ns(60000 * ms, 500e6, 10.0, 2000 * ms), 5000 * ms); /* 10 x 500 ms */
    ck_assert_uint_eq(ps_member_stall_ns(1500 * ms, 500e6, 10.0, 2000 * ms), 1500 * ms);  /* never above the set one */
    ck_assert_uint_eq(ps_member_stall_ns(60000 * ms, 30e9, 10.0, 2000 * ms), 60000 * ms);
}
END_TEST

Suite *make_suite(void) {
    Suite *s = suite_create("ps_member");
    TCase *tc = tcase_create("core");
    tcase_add_test(tc, test_ps_member_push_decisions);
    tcase_add_test(tc, test_ps_member_open_round_membership);
    tcase_add_test(tc, test_ps_member_startup_gate);
    tcase_add_test(tc, test_ps_member_worker_leaves_mid_round);
    tcase_add_test(tc, test_ps_member_order_is_rank_order);
    tcase_add_test(tc, test_ps_member_rejoin_by_id);
    tcase_add_test(tc, test_ps_member_takeover_keeps_place);
    tcase_add_test(tc, test_ps_member_grad_verdicts);
    tcase_add_test(tc, test_ps_member_stalled);
    tcase_add_test(tc, test_ps_member_peer_slots);
    tcase_add_test(tc, test_member_stall_timeout);
    tcase_add_test(tc, test_ps_member_transitions);
    suite_add_tcase(s, tc);
    return s;
}
