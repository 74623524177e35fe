/* tests/ps/test_ps_counters.c — kfac-ps's counter table (ps/counters.c):
 * a bump adds one to its own counter only, rejections count by type and
 * by code (an out-of-range type as undecodable, no code as none), and a
 * checkpoint's slots map to the same counters as ps/ckpt.h names them,
 * round trip included, counters without a slot left alone. */
#include <check.h>
#include <string.h>

#include "ps/ckpt.h"
#include "ps/counters.h"

START_TEST(test_ps_counters_bump_one_counter) {
    ps_counters_t c;
    memset(&c, 0, sizeof c);
    ck_assert_uint_eq(ps_counters_bump(&c, PS_CTR_INSTALLED), 1);
    ck_assert_uint_eq(ps_counters_bump(&c, PS_CTR_INSTALLED), 2);
    ck_assert_uint_eq(ps_counters_bump(&c, PS_CTR_CKPT_FAILED), 1);
    for (int i = 0; i < PS_CTR_COUNT; i++)
        if (i != PS_CTR_INSTALLED && i != PS_CTR_CKPT_FAILED) ck_assert_uint_eq(ps_counter(&c, (ps_counter_t)i), 0);
    ck_assert_uint_eq(ps_counter(&c, PS_CTR_INSTALLED), 2);
    /* out of range: nothing changes */
    ck_assert_uint_eq(ps_counters_bump(&c, PS_CTR_COUNT), 0);
    ck_assert_uint_eq(ps_counter(&c, PS_CTR_COUNT), 0);
}
END_TEST

START_TEST(test_ps_counters_reject_by_type_and_code) {
    ps_counters_t c;
    memset(&c, 0, sizeof c);
    ps_counters_reject(&c, MSG_HELLO, MSG_ERR_VERSION);
    ps_counters_reject(&c, MSG_HELLO, MSG_ERR_NONE);
    ps_counters_reject(&c, MSG_GRAD_PUSH, MSG_ERR_INVALID);
    ps_counters_reject(&c, (msg_type_t)MSG_TYPE_COUNT, MSG_ERR_BAD_MESSAGE);
    ck_assert_uint_eq(ps_counters_rejected(&c, MSG_HELLO), 2);
    ck_assert_uint_eq(ps_counters_rejected(&c, MSG_GRAD_PUSH), 1);
    ck_assert_uint_eq(ps_counters_rejected(&c, MSG_NONE), 1);
    ck_assert_uint_eq(ps_counters_rejected_total(&c), 4);
    ck_assert_uint_eq(ps_counters_rejected_code(&c, MSG_ERR_VERSION), 1);
    ck_assert_uint_eq(ps_counters_rejected_code(&c, MSG_ERR_NONE), 0);
    ck_assert_uint_eq(ps_counters_rejected_code(&c, MSG_ERR_INVALID), 1);
    ck_assert_uint_eq(ps_counters_rejected_code(&c, MSG_ERR_BAD_MESSAGE), 1);
}
END_TEST

START_TEST(test_ps_counters_checkpoint_slots) {
    /* the slots are ps/ckpt.h's: a checkpoint file's order may not move */
    ck_assert_int_eq(ps_counters_of_slot(PS_CKPT_N_INSTALLED), PS_CTR_INSTALLED);
    ck_assert_int_eq(ps_counters_of_slot(PS_CKPT_N_IGNORED_OLD), PS_CTR_IGNORED_OLD);
    ck_assert_int_eq(ps_counters_of_slot(PS_CKPT_N_INV_FAILED), PS_CTR_INV_FAILED);
    ck_assert_int_eq(ps_counters_of_slot(PS_CKPT_N_FOLDS), PS_CTR_FOLDS);
    ck_assert_int_eq(ps_counters_of_slot(PS_CKPT_N_STALE_GRADS), PS_CTR_STALE_GRADS);
    ck_assert_int_eq(ps_counters_of_slot(PS_CKPT_N_GRADS_TOTAL), PS_CTR_GRADS_TOTAL);
    ck_assert_int_eq(ps_counters_of_slot(PS_CKPT_N_DROPPED), PS_CTR_DROPPED);
    ck_assert_int_eq(ps_counters_of_slot(PS_CKPT_N_STEP_FAILURES), PS_CTR_STEP_FAILURES);
    ck_assert_int_eq(ps_counters_of_slot(PS_CKPT_N_JOBS_SENT), PS_CTR_JOBS_SENT);
    ck_assert_int_eq(ps_counters_of_slot(PS_CKPT_N_REJECTED_GRADS), -1); /* the GradPush rejections */
    ck_assert_int_eq(ps_counters_of_slot(PS_CKPT_COUNTERS), -1);

    ps_counters_t a, b;
    memset(&a, 0, sizeof a);
    for (int i = 0; i < PS_CTR_COUNT; i++) a.v[i] = 100 + (uint64_t)i;
    a.rejected[MSG_GRAD_PUSH] = 7;
    a.rejected[MSG_HELLO] = 9;
    uint64_t slots[PS_CKPT_COUNTERS];
    ps_counters_save(&a, slots, PS_CKPT_COUNTERS, PS_CKPT_N_REJECTED_GRADS);
    ck_assert_uint_eq(slots[PS_CKPT_N_FOLDS], 100 + PS_CTR_FOLDS);
    ck_assert_uint_eq(slots[PS_CKPT_N_REJECTED_GRADS], 7);
    memset(&b, 0, sizeof b);
    b.v[PS_CTR_CLIPPED] = 5; /* no slot: kept */
    ps_counters_restore(&b, slots, PS_CKPT_COUNTERS, PS_CKPT_N_REJECTED_GRADS);
    for (int i = 0; i < PS_CTR_COUNT; i++) {
        int stored = 0;
        for (int k = 0; k < PS_CKPT_COUNTERS; k++) stored |= ps_counters_of_slot(k) == i;
        if (stored) ck_assert_uint_eq(b.v[i], a.v[i]);
        else ck_assert_uint_eq(b.v[i], i == PS_CTR_CLIPPED ? 5 : 0);
    }
    ck_assert_uint_eq(b.rejected[MSG_GRAD_PUSH], 7);
    ck_assert_uint_eq(b.rejected[MSG_HELLO], 0);
    /* an older checkpoint with fewer slots restores only those */
    memset(&b, 0, sizeof b);
    ps_counters_restore(&b, slots, 3, PS_CKPT_N_REJECTED_GRADS);
    ck_assert_uint_eq(b.v[PS_CTR_INV_FAILED], a.v[PS_CTR_INV_FAILED]);
    ck_assert_uint_eq(b.v[PS_CTR_FOLDS], 0);
    ck_assert_uint_eq(b.rejected[MSG_GRAD_PUSH], 0);
}
END_TEST

Suite *make_suite(void) {
    Suite *s = suite_create("ps_counters");
    TCase *tc = tcase_create("core");
    tcase_add_test(tc, test_ps_counters_bump_one_counter);
    tcase_add_test(tc, test_ps_counters_reject_by_type_and_code);
    tcase_add_test(tc, test_ps_counters_checkpoint_slots);
    suite_add_tcase(s, tc);
    return s;
}
