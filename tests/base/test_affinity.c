/* tests/base/test_affinity.c — CPU lists and pinning (common/base/affinity.h):
 * parsing against a brute-force oracle on random sets (format -> parse
 * round trip, and random lists written item by item), every rejection
 * with its message, and pinning the test process (each Check test runs in
 * its own forked child, so pinning does not leak) to one CPU it may use,
 * read back with sched_getaffinity from every thread.
 */
#include <check.h>
#include <dirent.h>
#include <errno.h>
#include <pthread.h>
#include <sched.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/syscall.h>
#include <time.h>
#include <unistd.h>

#include "common/base/affinity.h"
#include "common/base/rng.h"
#include "tests/lib/seed.h"

START_TEST(test_affinity_parse_forms) {
    cpu_set_t set;
    char err[256];
    ck_assert_int_eq(affinity_parse("0", &set, err, sizeof err), 0);
    ck_assert_int_eq(CPU_COUNT(&set), 1);
    ck_assert(CPU_ISSET(0, &set));
    ck_assert_int_eq(affinity_parse(" 0-1 ", &set, err, sizeof err), 0);
    ck_assert_int_eq(CPU_COUNT(&set), 2);
    ck_assert(CPU_ISSET(0, &set) && CPU_ISSET(1, &set));
    ck_assert_int_eq(affinity_parse("3, 0 - 1,7,2-2", &set, err, sizeof err), 0);
    ck_assert_int_eq(CPU_COUNT(&set), 5);
    for (int c = 0; c < 8; c++) ck_assert_int_eq(!!CPU_ISSET(c, &set), c <= 3 || c == 7);
    /* empty and blank lists: no CPUs, no error */
    ck_assert_int_eq(affinity_parse("", &set, err, sizeof err), 0);
    ck_assert_int_eq(CPU_COUNT(&set), 0);
    ck_assert_int_eq(affinity_parse("  ", &set, err, sizeof err), 0);
    ck_assert_int_eq(CPU_COUNT(&set), 0);
    ck_assert_int_eq(affinity_parse(NULL, &set, err, sizeof err), 0);
    ck_assert_int_eq(CPU_COUNT(&set), 0);
    /* the largest CPU number there is */
    char big[32];
    snprintf(big, sizeof big, "%d", CPU_SETSIZE - 1);
    ck_assert_int_eq(affinity_parse(big, &set, err, sizeof err), 0);
    ck_assert(CPU_ISSET(CPU_SETSIZE - 1, &set));
}
END_TEST

START_TEST(test_affinity_parse_rejects) {
    static const struct {
        const char *list, *msg;
    } bad[] = {
        {"a", "bad item 'a'"},
        {"0,", "ends with a comma"},
        {",0", "bad item ''"},
        {"1-", "bad item '1-'"},
        {"-1", "bad item '-1'"},
        {"0;1", "bad item '0;1'"},
        {"0 1", "bad item '0 1'"},
        {"3-1", "range 3-1 ends below its start"},
        {"0,x-2", "bad item 'x-2'"},
        {"99999", "must be below"},
        {"0-99999999999999999999", "must be below"},
    };
    for (size_t i = 0; i < sizeof bad / sizeof bad[0]; i++) {
        cpu_set_t set;
        char err[256] = "";
        int rc = affinity_parse(bad[i].list, &set, err, sizeof err);
        ck_assert_msg(rc == -EINVAL, "'%s' accepted (rc %d)", bad[i].list, rc);
        ck_assert_msg(strstr(err, bad[i].msg) != NULL, "'%s': message '%s' lacks '%s'", bad[i].list, err, bad[i].msg);
    }
}
END_TEST

/* Random sets: the formatted list parses back to the same set, and a list
 * written item by item in random order (singles and ranges, overlapping)
 * parses to the union the oracle computes. */
START_TEST(test_affinity_parse_random_oracle) {
    uint64_t seed = test_seed();
    rng_t r;
    rng_seed(&r, seed);
    for (int trial = 0; trial < 300; trial++) {
        int oracle[256] = {0};
        cpu_set_t want;
        CPU_ZERO(&want);
        char list[4096] = "";
        size_t off = 0;
        int items = 1 + (int)rng_below(&r, 8);
        for (int i = 0; i < items; i++) {
            int lo = (int)rng_below(&r, 256), hi = lo;
            if (rng_below(&r, 2)) hi = lo + (int)rng_below(&r, (uint32_t)(256 - lo));
            for (int c = lo; c <= hi; c++) {
                oracle[c] = 1;
                CPU_SET(c, &want);
            }
            off += (size_t)snprintf(list + off, sizeof list - off, "%s%d", i ? "," : "", lo);
            if (hi != lo) off += (size_t)snprintf(list + off, sizeof list - off, "-%d", hi);
        }
        cpu_set_t got;
        char err[256];
        ck_assert_msg(affinity_parse(list, &got, err, sizeof err) == 0, "seed %llu: '%s': %s",
                      (unsigned long long)seed, list, err);
        for (int c = 0; c < 256; c++)
            ck_assert_msg(!!CPU_ISSET(c, &got) == oracle[c], "seed %llu: '%s': CPU %d", (unsigned long long)seed,
                          list, c);
        ck_assert_int_eq(CPU_COUNT(&got), CPU_COUNT(&want));
        char text[4096];
        int need = affinity_format(&got, text, sizeof text);
        ck_assert_int_eq(need, (int)strlen(text));
        cpu_set_t back;
        ck_assert_msg(affinity_parse(text, &back, err, sizeof err) == 0, "seed %llu: '%s' -> '%s': %s",
                      (unsigned long long)seed, list, text, err);
        ck_assert_msg(CPU_EQUAL(&back, &got), "seed %llu: '%s' -> '%s' does not read back", (unsigned long long)seed,
                      list, text);
    }
}
END_TEST

START_TEST(test_affinity_format_compact) {
    cpu_set_t set;
    CPU_ZERO(&set);
    char buf[64];
    ck_assert_int_eq(affinity_format(&set, buf, sizeof buf), 0);
    ck_assert_str_eq(buf, "");
    CPU_SET(0, &set);
    CPU_SET(1, &set);
    CPU_SET(2, &set);
    CPU_SET(5, &set);
    CPU_SET(7, &set);
    CPU_SET(8, &set);
    ck_assert_int_eq(affinity_format(&set, buf, sizeof buf), 9);
    ck_assert_str_eq(buf, "0-2,5,7-8");
    /* too small a buffer: terminated, whole items only, the length needed returned */
    char small[5];
    ck_assert_int_eq(affinity_format(&set, small, sizeof small), 9);
    ck_assert_str_eq(small, "0-2");
}
END_TEST

static void *s_spin(void *arg) {
    volatile int *stop = arg;
    while (!*stop) sched_yield();
    return NULL;
}

/* Pin the process to one CPU it may use (a thread started before the call
 * must follow too), and check every thread's mask. */
START_TEST(test_affinity_apply_pins_every_thread) {
    cpu_set_t allowed;
    ck_assert_int_eq(sched_getaffinity(0, sizeof allowed, &allowed), 0);
    int cpu = -1;
    for (int c = CPU_SETSIZE - 1; c >= 0; c--)
        if (CPU_ISSET(c, &allowed)) { cpu = c; break; }
    ck_assert_int_ge(cpu, 0);
    volatile int stop = 0;
    pthread_t th;
    ck_assert_int_eq(pthread_create(&th, NULL, s_spin, (void *)&stop), 0);
    char list[16], err[256] = "";
    snprintf(list, sizeof list, "%d", cpu);
    ck_assert_msg(affinity_apply(list, "[test] cpus", err, sizeof err) == 0, "%s", err);
    int n_threads = 0;
    DIR *d = opendir("/proc/self/task");
    ck_assert_ptr_nonnull(d);
    struct dirent *e;
    while ((e = readdir(d))) {
        if (e->d_name[0] == '.') continue;
        cpu_set_t got;
        ck_assert_int_eq(sched_getaffinity((pid_t)atoi(e->d_name), sizeof got, &got), 0);
        ck_assert_int_eq(CPU_COUNT(&got), 1);
        ck_assert(CPU_ISSET(cpu, &got));
        n_threads++;
    }
    closedir(d);
    ck_assert_int_ge(n_threads, 2);
    stop = 1;
    pthread_join(th, NULL);
    /* empty list: nothing changes */
    ck_assert_int_eq(affinity_apply("", "[test] cpus", err, sizeof err), 0);
    cpu_set_t now;
    ck_assert_int_eq(sched_getaffinity(0, sizeof now, &now), 0);
    ck_assert_int_eq(CPU_COUNT(&now), 1);
}
END_TEST

/* A CPU outside the allowed set is refused and nothing changes. */
START_TEST(test_affinity_apply_rejects_unavailable) {
    cpu_set_t before;
    ck_assert_int_eq(sched_getaffinity(0, sizeof before, &before), 0);
    int cpu = -1;
    for (int c = 0; c < CPU_SETSIZE; c++)
        if (!CPU_ISSET(c, &before)) { cpu = c; break; }
    ck_assert_int_ge(cpu, 0);
    char list[16], err[256] = "";
    snprintf(list, sizeof list, "%d", cpu);
    ck_assert_int_eq(affinity_apply(list, "[invertd] cpus", err, sizeof err), -EINVAL);
    ck_assert_msg(strstr(err, "[invertd] cpus") && strstr(err, "not available"), "%s", err);
    cpu_set_t after;
    ck_assert_int_eq(sched_getaffinity(0, sizeof after, &after), 0);
    ck_assert(CPU_EQUAL(&before, &after));
    ck_assert_int_eq(affinity_apply("1-0", "[ps] cpus", err, sizeof err), -EINVAL);
    ck_assert_msg(strstr(err, "[ps] cpus") && strstr(err, "ends below"), "%s", err);
}
END_TEST

Suite *make_suite(void) {
    Suite *s = suite_create("affinity");
    TCase *tc = tcase_create("core");
    tcase_add_test(tc, test_affinity_parse_forms);
    tcase_add_test(tc, test_affinity_parse_rejects);
    tcase_add_test(tc, test_affinity_parse_random_oracle);
    tcase_add_test(tc, test_affinity_format_compact);
    tcase_add_test(tc, test_affinity_apply_pins_every_thread);
    tcase_add_test(tc, test_affinity_apply_rejects_unavailable);
    suite_add_tcase(s, tc);
    return s;
}
