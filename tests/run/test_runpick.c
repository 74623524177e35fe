/* tests/run/test_runpick.c — the folder of a run that names none
 * (common/run/runpick.h): a new folder per run named after the UTC time,
 * -2, -3 when the second is taken, base/latest a link moved to the newest,
 * a real base/latest folder never touched, --resume following the link, and
 * a named out_dir left alone. Each test works in its own mkdtemp folder
 * under TMPDIR (default /tmp) and removes it.
 */
#include <check.h>
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "common/run/runpick.h"
#include "tests/lib/check_main.h"
#include "tests/lib/tmpdir.h"

static char s_dir[512];
static char s_base[600];

static void s_setup(void) {
    test_tmpdir_make(s_dir, sizeof s_dir, "runpick");
    snprintf(s_base, sizeof s_base, "%s/runs", s_dir); /* not there yet: runpick_new makes it */
}

static void s_teardown(void) {
    if (test_tmpdir_remove(s_dir) != 0) fprintf(stderr, "could not remove %s\n", s_dir);
}

static void s_link_target(char *out, size_t len) {
    char link[700];
    snprintf(link, sizeof link, "%s/latest", s_base);
    ssize_t n = readlink(link, out, len - 1);
    ck_assert_msg(n > 0, "%s is not a link", link);
    out[n] = '\0';
}

/* 2026-11-26 08:00:12 UTC */
#define T0 ((time_t)1795680012)

START_TEST(test_runpick_new_names_and_suffixes) {
    char a[800], b[800], c[800], want[800], err[600] = "";
    ck_assert_msg(runpick_new(s_base, T0, a, sizeof a, err, sizeof err) == 0, "%s", err);
    ck_assert_msg(runpick_new(s_base, T0, b, sizeof b, err, sizeof err) == 0, "%s", err);
    ck_assert_msg(runpick_new(s_base, T0, c, sizeof c, err, sizeof err) == 0, "%s", err);
    snprintf(want, sizeof want, "%s/20261126-080012", s_base);
    ck_assert_str_eq(a, want);
    snprintf(want, sizeof want, "%s/20261126-080012-2", s_base);
    ck_assert_str_eq(b, want);
    snprintf(want, sizeof want, "%s/20261126-080012-3", s_base);
    ck_assert_str_eq(c, want);
    struct stat st;
    ck_assert(stat(c, &st) == 0 && S_ISDIR(st.st_mode));
}
END_TEST

START_TEST(test_runpick_latest_follows_newest) {
    char a[800], b[800], target[800], got[800], err[600] = "";
    ck_assert_int_eq(runpick_latest(s_base, got, sizeof got, err, sizeof err), -ENOENT);
    ck_assert_str_eq(err, ""); /* none yet is not an error */
    ck_assert_msg(runpick_new(s_base, T0, a, sizeof a, err, sizeof err) == 0, "%s", err);
    ck_assert_int_eq(runpick_link_latest(s_base, "20261126-080012"), 0);
    ck_assert_msg(runpick_new(s_base, T0 + 1, b, sizeof b, err, sizeof err) == 0, "%s", err);
    ck_assert_int_eq(runpick_link_latest(s_base, "20261126-080013"), 0);
    s_link_target(target, sizeof target);
    ck_assert_str_eq(target, "20261126-080013"); /* relative: the tree may move */
    ck_assert_msg(runpick_latest(s_base, got, sizeof got, err, sizeof err) == 0, "%s", err);
    ck_assert_str_eq(got, b);
    char tmp[800];
    snprintf(tmp, sizeof tmp, "%s/.latest.%ld.tmp", s_base, (long)getpid());
    ck_assert_int_ne(access(tmp, F_OK), 0); /* no temporary left behind */
}
END_TEST

START_TEST(test_runpick_old_latest_folder_untouched) {
    char link[700], file[800], got[800], err[600] = "";
    snprintf(link, sizeof link, "%s/latest", s_base);
    ck_assert_int_eq(mkdir(s_base, 0777), 0);
    ck_assert_int_eq(mkdir(link, 0777), 0);
    snprintf(file, sizeof file, "%s/steps.csv", link);
    FILE *f = fopen(file, "w");
    ck_assert_ptr_nonnull(f);
    fclose(f);
    ck_assert_int_eq(runpick_link_latest(s_base, "20261126-080012"), -EEXIST);
    struct stat st;
    ck_assert(lstat(link, &st) == 0 && S_ISDIR(st.st_mode));
    ck_assert_int_eq(access(file, F_OK), 0);
    /* --resume goes on in it: it is the previous run of an older version */
    ck_assert_msg(runpick_latest(s_base, got, sizeof got, err, sizeof err) == 0, "%s", err);
    ck_assert_str_eq(got, link);
}
END_TEST

START_TEST(test_runpick_dangling_latest_refused) {
    char link[700], got[800], err[600] = "";
    snprintf(link, sizeof link, "%s/latest", s_base);
    ck_assert_int_eq(mkdir(s_base, 0777), 0);
    ck_assert_int_eq(symlink("gone", link), 0);
    ck_assert_int_eq(runpick_latest(s_base, got, sizeof got, err, sizeof err), -ENOENT);
    ck_assert_msg(strstr(err, "which is not a folder") && strstr(err, "--run.out_dir"), "%s", err);
}
END_TEST

START_TEST(test_runpick_choose_rules) {
    runcfg_t c;
    memset(&c, 0, sizeof c);
    char err[600] = "";
    /* a named folder is left alone, and nothing is created */
    c.out_dir = strdup("named");
    ck_assert_int_eq(runpick_choose(&c, s_base, err, sizeof err), 0);
    ck_assert_str_eq(c.out_dir, "named");
    ck_assert_int_ne(access(s_base, F_OK), 0);
    /* empty: a new folder, and latest names it */
    free(c.out_dir);
    c.out_dir = strdup("");
    ck_assert_msg(runpick_choose(&c, s_base, err, sizeof err) == 0, "%s", err);
    char first[800], target[800];
    snprintf(first, sizeof first, "%s", c.out_dir);
    s_link_target(target, sizeof target);
    ck_assert_str_eq(strrchr(first, '/') + 1, target);
    /* empty with resume: the folder latest names, no new one */
    free(c.out_dir);
    c.out_dir = strdup("");
    c.ckpt_resume = true;
    ck_assert_msg(runpick_choose(&c, s_base, err, sizeof err) == 0, "%s", err);
    ck_assert_str_eq(c.out_dir, first);
    free(c.out_dir);
}
END_TEST

Suite *make_suite(void) {
    Suite *s = suite_create("runpick");
    TCase *tc = tcase_create("core");
    tcase_add_checked_fixture(tc, s_setup, s_teardown);
    tcase_add_test(tc, test_runpick_new_names_and_suffixes);
    tcase_add_test(tc, test_runpick_latest_follows_newest);
    tcase_add_test(tc, test_runpick_old_latest_folder_untouched);
    tcase_add_test(tc, test_runpick_dangling_latest_refused);
    tcase_add_test(tc, test_runpick_choose_rules);
    suite_add_tcase(s, tc);
    return s;
}
