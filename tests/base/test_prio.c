/* tests/base/test_prio.c — common/base/prio.h: prio_idle_self lowers the
 * calling thread only (SCHED_IDLE, or nice 19 where refused), and threads it
 * creates afterwards inherit the lower priority; prio_nice_self sets the
 * calling thread's nice value only and rejects values outside 1..19;
 * prio_can_lift agrees with the kernel's verdict on prio_boost_idle, with
 * CAP_SYS_NICE as the test runs and without it under RLIMIT_NICE 0. */
#include <check.h>
#include <errno.h>
#include <linux/capability.h>
#include <pthread.h>
#include <sys/resource.h>
#include <sys/syscall.h>
#include <unistd.h>
#include <stdio.h>
#include <string.h>

#include "common/base/prio.h"

typedef struct {
    int rc, idle_after, child_idle;
    char what[160];
} s_result_t;

static void *s_child(void *arg) {
    *(int *)arg = prio_self_is_idle();
    return NULL;
}

static void *s_lower(void *arg) {
    s_result_t *r = arg;
    r->rc = prio_idle_self(r->what, sizeof r->what);
    r->idle_after = prio_self_is_idle();
    pthread_t t;
    if (pthread_create(&t, NULL, s_child, &r->child_idle) == 0) pthread_join(t, NULL);
    else r->child_idle = -1;
    return NULL;
}

START_TEST(test_prio_idle_self_lowers_the_calling_thread_only) {
    ck_assert_int_eq(prio_self_is_idle(), 0); /* a test starts at normal priority */
    s_result_t r;
    memset(&r, 0, sizeof r);
    pthread_t t;
    ck_assert_int_eq(pthread_create(&t, NULL, s_lower, &r), 0);
    pthread_join(t, NULL);
    ck_assert_msg(r.rc == 0, "prio_idle_self: %s", r.what);
    ck_assert_msg(strcmp(r.what, "SCHED_IDLE") == 0 || strncmp(r.what, "nice 19", 7) == 0, "what: %s", r.what);
    ck_assert_int_eq(r.idle_after, 1);
    ck_assert_int_eq(r.child_idle, 1);           /* inherited */
    ck_assert_int_eq(prio_self_is_idle(), 0);    /* the main thread is untouched */
}
END_TEST

static void *s_nice10(void *arg) {
    s_result_t *r = arg;
    r->rc = prio_nice_self(10, r->what, sizeof r->what);
    errno = 0;
    r->idle_after = getpriority(PRIO_PROCESS, (id_t)syscall(SYS_gettid));
    return NULL;
}

START_TEST(test_prio_nice_self_raises_the_calling_thread_only) {
    errno = 0;
    int before = getpriority(PRIO_PROCESS, (id_t)syscall(SYS_gettid));
    ck_assert_int_lt(before, 10);
    s_result_t r;
    memset(&r, 0, sizeof r);
    pthread_t t;
    ck_assert_int_eq(pthread_create(&t, NULL, s_nice10, &r), 0);
    pthread_join(t, NULL);
    ck_assert_msg(r.rc == 0, "prio_nice_self: %s", r.what);
    ck_assert_str_eq(r.what, "nice 10");
    ck_assert_int_eq(r.idle_after, 10); /* the thread's nice value */
    errno = 0;
    ck_assert_int_eq(getpriority(PRIO_PROCESS, (id_t)syscall(SYS_gettid)), before); /* the caller's is untouched */
    char what[64];
    ck_assert_int_eq(prio_nice_self(0, what, sizeof what), -EINVAL);
    ck_assert_int_eq(prio_nice_self(20, what, sizeof what), -EINVAL);
}
END_TEST

typedef struct {
    int drop;              /* drop CAP_SYS_NICE and RLIMIT_NICE to 0 first */
    int can, rc, n, setup;
    char why[200];
} s_lift_t;

/* Drop CAP_SYS_NICE from the calling thread's effective set (capabilities
 * are per thread; the test process is Check's fork, so nothing leaks). */
static int s_drop_cap_sys_nice(void) {
    struct __user_cap_header_struct h = {_LINUX_CAPABILITY_VERSION_3, 0};
    struct __user_cap_data_struct d[2];
    memset(d, 0, sizeof d);
    if (syscall(SYS_capget, &h, d) != 0) return -1;
    d[0].effective &= ~(1u << CAP_SYS_NICE);
    return (int)syscall(SYS_capset, &h, d);
}

static void *s_lift(void *arg) {
    s_lift_t *r = arg;
    char what[160];
    if (r->drop) {
        struct rlimit rl = {0, 0};
        if (s_drop_cap_sys_nice() != 0 || setrlimit(RLIMIT_NICE, &rl) != 0) r->setup = -1;
    }
    if (prio_yield_self(10, what, sizeof what) != 0 || !prio_self_is_idle()) r->setup = -2;
    r->can = prio_can_lift(10, r->why, sizeof r->why);
    int tids[8];
    r->rc = prio_boost_idle(tids, 8, &r->n);
    prio_unboost(tids, r->n);
    return NULL;
}

START_TEST(test_prio_can_lift_agrees_with_the_kernel) {
    for (int drop = 0; drop <= 1; drop++) {
        s_lift_t r;
        memset(&r, 0, sizeof r);
        r.drop = drop;
        pthread_t t;
        ck_assert_int_eq(pthread_create(&t, NULL, s_lift, &r), 0);
        pthread_join(t, NULL);
        ck_assert_msg(r.setup == 0, "drop %d: setting up the thread failed (%d)", drop, r.setup);
        int lifted = r.rc == 0 && r.n == 1;
        ck_assert_msg(r.can == lifted, "drop %d: prio_can_lift says %d (%s), prio_boost_idle rc %d n %d", drop, r.can,
                      r.why, r.rc, r.n);
        if (drop) {
            ck_assert_int_eq(r.can, 0); /* no CAP_SYS_NICE and RLIMIT_NICE 0: refused, and said why */
            ck_assert_int_eq(r.rc, -EPERM);
            ck_assert_ptr_nonnull(strstr(r.why, "RLIMIT_NICE is 0"));
        }
    }
}
END_TEST

Suite *make_suite(void) {
    Suite *s = suite_create("prio");
    TCase *tc = tcase_create("core");
    tcase_add_test(tc, test_prio_idle_self_lowers_the_calling_thread_only);
    tcase_add_test(tc, test_prio_nice_self_raises_the_calling_thread_only);
    tcase_add_test(tc, test_prio_can_lift_agrees_with_the_kernel);
    suite_add_tcase(s, tc);
    return s;
}
