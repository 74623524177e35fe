/* tests/ps/test_ps_round_decide.c — when kfac-ps steps
 * (ps_round_state_decide, ps/round_state.h), without sockets or peers: a
 * round waits for a gradient and for every present member; the start-up
 * gate holds the first step until [cluster] workers are members or the
 * wait is over, and only the first; [ps] quorum lets a round step without
 * the members still computing, but only after the gate; a round whose
 * members were all refused recovers; with curvature a complete round folds
 * once, marks once, and waits while the staleness bound does not hold; a
 * finished run never steps; the decision does not change the round. The
 * gradients' ages ([ps] gradient_staleness) are recorded as they come in.
 * A randomized test compares every verdict with the rules written out
 * once more, from a fresh seed printed on failure. */
#include <check.h>
#include <inttypes.h>
#include <string.h>

#include "common/base/rng.h"
#include "ps/round_int.h"
#include "tests/lib/seed.h"

#define SEC 1000000000ULL

static ps_round_view_t s_view(void) {
    ps_round_view_t v;
    memset(&v, 0, sizeof v);
    v.running = 1;
    v.workers = 3;
    v.n_members = 3;
    v.now_ns = 100 * SEC;
    v.timeout_ns = 10 * SEC;
    return v;
}

static ps_round_action_t s_decide(ps_round_t *r, const ps_round_view_t *v) {
    ps_round_t before = *r;
    ps_round_verdict_t d = ps_round_state_decide(r, v);
    ck_assert_int_eq(memcmp(&before, r, sizeof before), 0); /* a decision changes nothing */
    if (d.gate_opens) ps_round_state_open_gate(r);
    return d.action;
}

START_TEST(test_ps_round_decide_waits_for_members) {
    ps_round_t r;
    memset(&r, 0, sizeof r);
    r.gate_open = 1;
    ps_round_view_t v = s_view();
    v.n_waiting = 3;
    ck_assert_int_eq(s_decide(&r, &v), PS_ROUND_WAIT); /* no gradient yet */
    r.n_grads = 2;
    v.n_waiting = 1;
    ck_assert_int_eq(s_decide(&r, &v), PS_ROUND_WAIT); /* one member still computing */
    v.n_waiting = 0;
    ck_assert_int_eq(s_decide(&r, &v), PS_ROUND_STEP);
    v.running = 0;
    ck_assert_int_eq(s_decide(&r, &v), PS_ROUND_WAIT); /* the run is finishing */
    /* every member gone: nothing awaited, but no gradient either */
    v.running = 1;
    r.n_grads = 0;
    v.n_members = 0;
    ck_assert_int_eq(s_decide(&r, &v), PS_ROUND_WAIT);
}
END_TEST

START_TEST(test_ps_round_decide_startup_gate) {
    ps_round_t r;
    memset(&r, 0, sizeof r);
    ps_round_view_t v = s_view();
    v.first_step = 1;
    v.n_members = 2; /* of workers = 3 */
    r.n_grads = 2;
    r.first_worker_ns = v.now_ns - v.timeout_ns + 1;
    ps_round_verdict_t d = ps_round_state_decide(&r, &v);
    ck_assert_int_eq(d.action, PS_ROUND_WAIT);
    ck_assert_int_eq(d.gate, PS_GATE_CLOSED);
    ck_assert_int_eq(d.gate_opens, 0);
    /* [ps] quorum does not open the gate */
    v.quorum = 1;
    ck_assert_int_eq(s_decide(&r, &v), PS_ROUND_WAIT);
    ck_assert_int_eq(r.gate_open, 0);
    v.quorum = 0;
    /* the wait is over: start with the two */
    r.first_worker_ns = v.now_ns - v.timeout_ns;
    d = ps_round_state_decide(&r, &v);
    ck_assert_int_eq(d.action, PS_ROUND_STEP);
    ck_assert_int_eq(d.gate, PS_GATE_OPEN_TIMEOUT);
    ck_assert_int_eq(d.gate_opens, 1);
    /* no worker joined yet (first_worker_ns 0): no wait has passed */
    r.first_worker_ns = 0;
    ck_assert_int_eq(ps_round_state_decide(&r, &v).action, PS_ROUND_WAIT);
    /* three members: open at once */
    v.n_members = 3;
    r.n_grads = 3;
    d = ps_round_state_decide(&r, &v);
    ck_assert_int_eq(d.action, PS_ROUND_STEP);
    ck_assert_int_eq(d.gate, PS_GATE_OPEN);
    ck_assert_int_eq(d.gate_opens, 1);
    ps_round_state_open_gate(&r);
    /* once open, fewer members do not close it */
    v.n_members = 1;
    r.n_grads = 1;
    d = ps_round_state_decide(&r, &v);
    ck_assert_int_eq(d.action, PS_ROUND_STEP);
    ck_assert_int_eq(d.gate_opens, 0);
    /* after the first step the gate is not looked at */
    memset(&r, 0, sizeof r);
    r.n_grads = 1;
    v.first_step = 0;
    ck_assert_int_eq(s_decide(&r, &v), PS_ROUND_STEP);
    ck_assert_int_eq(r.gate_open, 0);
}
END_TEST

START_TEST(test_ps_round_decide_quorum) {
    ps_round_t r;
    memset(&r, 0, sizeof r);
    r.gate_open = 1;
    ps_round_view_t v = s_view();
    v.quorum = 2;
    v.n_waiting = 2;
    r.n_grads = 1;
    ck_assert_int_eq(s_decide(&r, &v), PS_ROUND_WAIT);
    r.n_grads = 2;
    ck_assert_int_eq(s_decide(&r, &v), PS_ROUND_STEP); /* without the members still computing */
    v.quorum = 0; /* 0: every member */
    ck_assert_int_eq(s_decide(&r, &v), PS_ROUND_WAIT);
}
END_TEST

START_TEST(test_ps_round_decide_recover) {
    ps_round_t r;
    memset(&r, 0, sizeof r);
    r.gate_open = 1;
    ps_round_view_t v = s_view();
    v.all_refused = 1;
    ck_assert_int_eq(s_decide(&r, &v), PS_ROUND_RECOVER);
    r.n_grads = 1; /* a gradient is in: a round, not a recovery */
    ck_assert_int_eq(s_decide(&r, &v), PS_ROUND_STEP);
    v.running = 0;
    r.n_grads = 0;
    ck_assert_int_eq(s_decide(&r, &v), PS_ROUND_WAIT);
}
END_TEST

START_TEST(test_ps_round_decide_fold_once_and_bound) {
    ps_round_t r;
    memset(&r, 0, sizeof r);
    r.gate_open = 1;
    r.n_grads = 3;
    ps_round_view_t v = s_view();
    v.curvature = 1;
    v.bounded = 1;
    v.bound_ok = 0;
    ck_assert_int_eq(s_decide(&r, &v), PS_ROUND_FOLD);
    ck_assert_int_eq(s_decide(&r, &v), PS_ROUND_FOLD); /* until the fold is recorded */
    ps_round_state_set_folded(&r);
    ck_assert_int_eq(s_decide(&r, &v), PS_ROUND_MARK);
    ps_round_state_set_marked(&r);
    ck_assert_int_eq(s_decide(&r, &v), PS_ROUND_WAIT_INVERSES);
    v.bound_ok = 1;
    ck_assert_int_eq(s_decide(&r, &v), PS_ROUND_STEP);
    v.bounded = 0;
    v.bound_ok = 0; /* no bound: its state does not matter */
    ck_assert_int_eq(s_decide(&r, &v), PS_ROUND_STEP);
    /* an incomplete round neither folds nor marks */
    memset(&r, 0, sizeof r);
    r.gate_open = 1;
    r.n_grads = 1;
    v.n_waiting = 1;
    ck_assert_int_eq(s_decide(&r, &v), PS_ROUND_WAIT);
    /* the next round folds again (ps_round_state_clear resets it) */
    ck_assert_int_eq(r.folded, 0);
}
END_TEST

START_TEST(test_ps_round_decide_grad_ages) {
    ps_round_t r;
    memset(&r, 0, sizeof r);
    ps_round_state_restore(&r, 10, 10, 0);
    ps_round_state_grad_in(&r, 10);
    ps_round_state_grad_in(&r, 8); /* 2 behind ([ps] gradient_staleness >= 2) */
    ps_round_state_grad_in(&r, 9);
    ck_assert_int_eq(r.n_grads, 3);
    ck_assert_int_eq(r.grad_age_max, 2);
    ck_assert(r.grad_age_sum == 3.0);
    ps_round_state_grad_out(&r);
    ck_assert_int_eq(r.n_grads, 2);
    ps_round_state_advance(&r, 5);
    ck_assert_int_eq(r.t, 11);
    ck_assert_uint_eq(r.steps_done, 11);
    ck_assert_uint_eq(r.last_step_ns, 5);
}
END_TEST

/* The rules once more, written as the documentation states them. */
static ps_round_action_t s_oracle(const ps_round_t *r, const ps_round_view_t *v, int *opens) {
    *opens = 0;
    if (!v->running) return PS_ROUND_WAIT;
    int all_in = r->n_grads > 0 && v->n_waiting == 0;
    int gate = r->gate_open;
    if (!gate && all_in && v->first_step) {
        uint64_t waited = r->first_worker_ns ? v->now_ns - r->first_worker_ns : 0;
        if (v->n_members >= v->workers || waited >= v->timeout_ns) *opens = gate = 1;
        else return PS_ROUND_WAIT;
    }
    int quorum = gate && v->quorum > 0 && r->n_grads >= v->quorum;
    if (!all_in && !quorum) return r->n_grads == 0 && v->all_refused ? PS_ROUND_RECOVER : PS_ROUND_WAIT;
    if (!v->curvature) return PS_ROUND_STEP;
    if (!r->folded) return PS_ROUND_FOLD;
    if (!r->marked) return PS_ROUND_MARK;
    return v->bounded && !v->bound_ok ? PS_ROUND_WAIT_INVERSES : PS_ROUND_STEP;
}

START_TEST(test_ps_round_decide_random) {
    uint64_t seed = test_seed();
    rng_t g;
    rng_seed(&g, seed);
    for (int i = 0; i < 20000; i++) {
        ps_round_t r;
        memset(&r, 0, sizeof r);
        ps_round_view_t v = s_view();
        r.n_grads = (int)rng_below(&g, 4);
        r.gate_open = (int)rng_below(&g, 2);
        r.folded = (int)rng_below(&g, 2);
        r.marked = r.folded && rng_below(&g, 2);
        r.first_worker_ns = rng_below(&g, 3) ? v.now_ns - rng_below(&g, 2 * v.timeout_ns) : 0;
        v.running = rng_below(&g, 8) != 0;
        v.first_step = (int)rng_below(&g, 2);
        v.n_members = (int)rng_below(&g, 5);
        v.n_waiting = (int)rng_below(&g, (uint64_t)v.n_members + 1);
        v.all_refused = v.n_members > 0 && rng_below(&g, 3) == 0;
        v.workers = 1 + (int)rng_below(&g, 4);
        v.quorum = (int)rng_below(&g, 4);
        v.curvature = (int)rng_below(&g, 2);
        v.bounded = (int)rng_below(&g, 2);
        v.bound_ok = (int)rng_below(&g, 2);
        int opens = 0;
        ps_round_action_t want = s_oracle(&r, &v, &opens);
        ps_round_verdict_t d = ps_round_state_decide(&r, &v);
        ck_assert_msg(d.action == want && d.gate_opens == opens,
                      "seed %" PRIu64 " case %d: n_grads %d gate %d folded %d marked %d running %d first %d members %d "
                      "waiting %d refused %d workers %d quorum %d curvature %d bounded %d ok %d: got %d/%d, want %d/%d",
                      seed, i, r.n_grads, r.gate_open, r.folded, r.marked, v.running, v.first_step, v.n_members,
                      v.n_waiting, v.all_refused, v.workers, v.quorum, v.curvature, v.bounded, v.bound_ok, d.action,
                      d.gate_opens, want, opens);
    }
}
END_TEST

Suite *make_suite(void) {
    Suite *s = suite_create("ps_round_decide");
    TCase *tc = tcase_create("core");
    tcase_add_test(tc, test_ps_round_decide_waits_for_members);
    tcase_add_test(tc, test_ps_round_decide_startup_gate);
    tcase_add_test(tc, test_ps_round_decide_quorum);
    tcase_add_test(tc, test_ps_round_decide_recover);
    tcase_add_test(tc, test_ps_round_decide_fold_once_and_bound);
    tcase_add_test(tc, test_ps_round_decide_grad_ages);
    tcase_add_test(tc, test_ps_round_decide_random);
    suite_add_tcase(s, tc);
    return s;
}
