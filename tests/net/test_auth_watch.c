/* tests/net/test_auth_watch.c — the allowlist folder watch of kfac-ps
 * (common/net/auth_watch.h) on a real loop and a fresh temporary folder:
 *   - a burst of five files written 60 ms apart (300 ms: longer than the
 *     200 ms debounce, so a timer not pushed back by each event would fire
 *     within it) gives one callback, naming the folder, and none before
 *     the burst is quiet. "Within the debounce" is measured, not assumed:
 *     a burst in which this process was held off the CPU for so long that
 *     the window from one write to the check after the next reached 200 ms
 *     (a busy machine) proves nothing and is made again (at most 10
 *     times);
 *   - for a key *file* the folder that holds it is watched (a file replaced
 *     by rename still raises the callback);
 *   - a file removed raises it too;
 *   - a folder removed and made again is watched again after the callback.
 * The loop is pumped with UV_RUN_NOWAIT in bounded loops (at most 5 s x
 * CK_TIMEOUT_MULTIPLIER per wait for a callback). */
#include <check.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <time.h>
#include <unistd.h>
#include <uv.h>

#include "common/base/log.h"
#include "common/net/auth_watch.h"
#include "tests/lib/check_main.h"
#include "tests/lib/tmpdir.h"

typedef struct {
    int n;
    char what[4200];
} s_seen_t;

static void s_on_change(const char *what, void *user) {
    s_seen_t *s = user;
    s->n++;
    snprintf(s->what, sizeof s->what, "%s", what);
}

static uint64_t s_now_ms(void) {
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (uint64_t)ts.tv_sec * 1000u + (uint64_t)ts.tv_nsec / 1000000u;
}

static void s_sleep_ms(long ms) {
    struct timespec ts = {ms / 1000, (ms % 1000) * 1000000L};
    nanosleep(&ts, NULL);
}

/* The watch's handles do not keep a loop alive (kfac-ps's socket does), and
 * uv_run does not poll a loop with nothing alive: this timer plays the
 * socket. */
static uv_timer_t s_alive;

static void s_on_alive(uv_timer_t *t) { (void)t; }

/* The bound on a wait for a callback: 5 s x CK_TIMEOUT_MULTIPLIER, so that
 * on a loaded machine Check's timeout (which scales the same way), not
 * this guard, is what a hang runs into. */
static long s_wait_ms(void) { return (long)check_scaled_ms(5000); }

/* Pump the loop until seen->n reaches n or max_ms pass. */
static void s_pump(uv_loop_t *loop, s_seen_t *seen, int n, long max_ms) {
    for (long t = 0; t < max_ms && seen->n < n; t += 5) {
        uv_run(loop, UV_RUN_NOWAIT);
        s_sleep_ms(5);
    }
    uv_run(loop, UV_RUN_NOWAIT);
}

static void s_write(const char *dir, const char *name) {
    char p[600];
    snprintf(p, sizeof p, "%s/%s", dir, name);
    FILE *f = fopen(p, "w");
    ck_assert_ptr_nonnull(f);
    fputs("# a key\n", f);
    fclose(f);
}

static char s_dir[256];

static void s_setup(void) {
    test_tmpdir_make(s_dir, sizeof s_dir, "watch");
    log_init(LOG_LEVEL_ERROR, "test_auth_watch");
}

static void s_teardown(void) {
    if (test_tmpdir_remove(s_dir) != 0) fprintf(stderr, "could not remove %s\n", s_dir);
}

static void s_open(uv_loop_t *loop) {
    uv_loop_init(loop);
    uv_timer_init(loop, &s_alive);
    uv_timer_start(&s_alive, s_on_alive, 3600000, 0);
}

static void s_close(uv_loop_t *loop, auth_watch_t **w) {
    uv_close((uv_handle_t *)&s_alive, NULL);
    auth_watch_free(w);
    ck_assert_ptr_null(*w);
    uv_run(loop, UV_RUN_DEFAULT);
    ck_assert_int_eq(uv_loop_close(loop), 0);
}

START_TEST(test_auth_watch_debounces_a_burst) {
    s_setup();
    uv_loop_t loop;
    s_open(&loop);
    s_seen_t seen = {0};
    char folder[300];
    snprintf(folder, sizeof folder, "%s/invertd", s_dir);
    ck_assert_int_eq(mkdir(folder, 0755), 0);
    const char *paths[3] = {"", folder, NULL};
    auth_watch_t *w = auth_watch_new(&loop, paths, 3, 200, s_on_change, &seen);
    ck_assert_ptr_nonnull(w);
    ck_assert_int_eq(auth_watch_count(w), 1);
    const uint64_t debounce_ms = 200;
    int whole = 0, tries = 0;
    for (; tries < 10 && !whole; tries++) {
        /* the last burst's callbacks (when it was broken off) come first */
        if (tries > 0) s_pump(&loop, &seen, 1000, 3 * (long)debounce_ms);
        seen.n = 0;
        whole = 1;
        uint64_t prev_ms = 0;
        for (int i = 0; i < 5 && whole; i++) {
            char name[32];
            snprintf(name, sizeof name, "k%d-%d.pub", tries, i);
            uint64_t t_ms = s_now_ms();
            s_write(folder, name);
            uv_run(&loop, UV_RUN_NOWAIT);
            s_sleep_ms(60);
            uv_run(&loop, UV_RUN_NOWAIT);
            /* The timer of the previous write (started after prev_ms) is
             * due no sooner than prev_ms + debounce: before that, a
             * callback is a debounce that did not wait. */
            if (s_now_ms() - (i ? prev_ms : t_ms) >= debounce_ms) whole = 0;
            else ck_assert_int_eq(seen.n, 0); /* still within the burst */
            prev_ms = t_ms;
        }
    }
    ck_assert_msg(whole, "no burst of 5 writes within the 200 ms debounce in %d tries (this machine is too busy)",
                  tries);
    s_pump(&loop, &seen, 1, s_wait_ms());
    ck_assert_int_eq(seen.n, 1);
    ck_assert_str_eq(seen.what, folder);
    s_pump(&loop, &seen, 2, 600); /* nothing more comes */
    ck_assert_int_eq(seen.n, 1);
    /* A removed key is a change too. */
    char p[400];
    snprintf(p, sizeof p, "%s/k%d-3.pub", folder, tries - 1);
    ck_assert_int_eq(unlink(p), 0);
    s_pump(&loop, &seen, 2, s_wait_ms());
    ck_assert_int_eq(seen.n, 2);
    s_close(&loop, &w);
    s_teardown();
}
END_TEST

START_TEST(test_auth_watch_file_means_its_folder) {
    s_setup();
    uv_loop_t loop;
    s_open(&loop);
    s_seen_t seen = {0};
    s_write(s_dir, "workers.pub");
    char file[300];
    snprintf(file, sizeof file, "%s/workers.pub", s_dir);
    const char *paths[2] = {file, s_dir}; /* the same folder twice: watched once */
    auth_watch_t *w = auth_watch_new(&loop, paths, 2, 50, s_on_change, &seen);
    ck_assert_int_eq(auth_watch_count(w), 1);
    /* Replaced by rename, as editors and config tools do. */
    s_write(s_dir, "workers.pub.new");
    char tmp[320];
    snprintf(tmp, sizeof tmp, "%s/workers.pub.new", s_dir);
    ck_assert_int_eq(rename(tmp, file), 0);
    s_pump(&loop, &seen, 1, s_wait_ms());
    ck_assert_int_eq(seen.n, 1);
    ck_assert_str_eq(seen.what, s_dir);
    s_close(&loop, &w);
    s_teardown();
}
END_TEST

START_TEST(test_auth_watch_folder_made_again) {
    s_setup();
    uv_loop_t loop;
    s_open(&loop);
    s_seen_t seen = {0};
    char folder[300];
    snprintf(folder, sizeof folder, "%s/statsd", s_dir);
    ck_assert_int_eq(mkdir(folder, 0755), 0);
    const char *paths[1] = {folder};
    auth_watch_t *w = auth_watch_new(&loop, paths, 1, 50, s_on_change, &seen);
    ck_assert_int_eq(auth_watch_count(w), 1);
    ck_assert_int_eq(rmdir(folder), 0);
    ck_assert_int_eq(mkdir(folder, 0755), 0);
    s_pump(&loop, &seen, 1, s_wait_ms());
    ck_assert_int_eq(seen.n, 1);
    ck_assert_int_eq(auth_watch_count(w), 1); /* the new folder is watched */
    s_write(folder, "s1.pub");
    s_pump(&loop, &seen, 2, s_wait_ms());
    ck_assert_int_eq(seen.n, 2);
    s_close(&loop, &w);
    s_teardown();
}
END_TEST

Suite *make_suite(void) {
    Suite *s = suite_create("auth_watch");
    TCase *tc = tcase_create("auth_watch");
    tcase_set_timeout(tc, 30);
    tcase_add_test(tc, test_auth_watch_debounces_a_burst);
    tcase_add_test(tc, test_auth_watch_file_means_its_folder);
    tcase_add_test(tc, test_auth_watch_folder_made_again);
    suite_add_tcase(s, tc);
    return s;
}
