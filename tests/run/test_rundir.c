/* tests/run/test_rundir.c — a run's output folder (common/run/rundir.h):
 * a new run refuses a folder holding a previous one (each of steps.csv,
 * eval.csv, manifest.json marks it), overwrite starts the CSVs afresh and
 * drops the old weights, append keeps the rows and writes no second header,
 * and files written whole leave no temporary behind. Each test works in its
 * own mkdtemp folder under TMPDIR (default /tmp) and removes it.
 */
#include <check.h>
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "common/run/rundir.h"
#include "tests/lib/check_main.h"
#include "tests/lib/tmpdir.h"

static char s_dir[512];

static void s_setup(void) {
    test_tmpdir_make(s_dir, sizeof s_dir, "rundir");
}

static void s_teardown(void) {
    if (test_tmpdir_remove(s_dir) != 0) fprintf(stderr, "could not remove %s\n", s_dir);
}

/* Lines in dir/name (-1: no file). */
static int s_lines(const char *name) {
    char path[700];
    snprintf(path, sizeof path, "%s/%s", s_dir, name);
    FILE *f = fopen(path, "r");
    if (!f) return -1;
    int n = 0, c;
    while ((c = fgetc(f)) != EOF) n += c == '\n';
    fclose(f);
    return n;
}

static int s_exists(const char *name) {
    char path[700];
    snprintf(path, sizeof path, "%s/%s", s_dir, name);
    return access(path, F_OK) == 0;
}

static void s_one_run(rundir_mode_t mode, int rows) {
    rundir_t *d = NULL;
    char err[600] = "";
    ck_assert_msg(rundir_open(s_dir, mode, &d, err, sizeof err) == 0, "%s", err);
    rundir_step_row_t r = {.step = 1, .inv_age_max = -1, .workers = 1};
    for (int i = 0; i < rows; i++) {
        r.step = (uint64_t)i + 1;
        ck_assert_int_eq(rundir_step(d, &r), 0);
        ck_assert_int_eq(rundir_eval(d, r.step, 0.1, 1.0, 0.5, 1.0, 0.5), 0);
    }
    rundir_free(&d);
    ck_assert_ptr_null(d);
}

START_TEST(test_rundir_create_refuses_previous_run) {
    char sub[700];
    snprintf(sub, sizeof sub, "%s/a/b", s_dir);
    rundir_t *d = NULL;
    char err[600] = "";
    /* parents are created; an empty folder (or one with only logs) is free */
    ck_assert_int_eq(rundir_open(sub, RUNDIR_CREATE, &d, err, sizeof err), 0);
    rundir_free(&d);
    s_one_run(RUNDIR_CREATE, 0); /* s_dir holds only a/ so far */
    static const char *const marks[] = {"steps.csv", "eval.csv", "manifest.json"};
    for (int i = 0; i < 3; i++) {
        s_teardown();
        s_setup();
        char path[700];
        snprintf(path, sizeof path, "%s/%s", s_dir, marks[i]);
        FILE *f = fopen(path, "w");
        ck_assert_ptr_nonnull(f);
        fclose(f);
        ck_assert_int_eq(rundir_check_free(s_dir, err, sizeof err), -EEXIST);
        ck_assert_int_eq(rundir_open(s_dir, RUNDIR_CREATE, &d, err, sizeof err), -EEXIST);
        ck_assert_ptr_null(d);
        char want[900];
        snprintf(want, sizeof want,
                 "out_dir %s holds a previous run (%s); use --force to overwrite it or choose another --run.out_dir",
                 s_dir, marks[i]);
        ck_assert_str_eq(err, want);
    }
}
END_TEST

START_TEST(test_rundir_overwrite_starts_afresh) {
    s_one_run(RUNDIR_CREATE, 5);
    ck_assert_int_eq(s_lines("steps.csv"), 6);
    rundir_t *d = NULL;
    char err[600] = "";
    ck_assert_int_eq(rundir_open(s_dir, RUNDIR_CREATE, &d, err, sizeof err), 0 - EEXIST);
    ck_assert_int_eq(rundir_open(s_dir, RUNDIR_OVERWRITE, &d, err, sizeof err), 0);
    /* the old weights belong to another run */
    ck_assert_int_eq(rundir_write_text(d, "manifest.json", "{}\n"), 0);
    rundir_free(&d);
    ck_assert(s_exists("manifest.json"));
    s_one_run(RUNDIR_OVERWRITE, 2);
    ck_assert(!s_exists("manifest.json"));
    ck_assert_int_eq(s_lines("steps.csv"), 3);
    ck_assert_int_eq(s_lines("eval.csv"), 3);
}
END_TEST

START_TEST(test_rundir_append_keeps_rows) {
    s_one_run(RUNDIR_APPEND, 3); /* a new folder: headers written */
    s_one_run(RUNDIR_APPEND, 4);
    ck_assert_int_eq(s_lines("steps.csv"), 1 + 7);
    ck_assert_int_eq(s_lines("eval.csv"), 1 + 7);
    char path[700], line[512];
    snprintf(path, sizeof path, "%s/steps.csv", s_dir);
    FILE *f = fopen(path, "r");
    ck_assert_ptr_nonnull(f);
    int headers = 0;
    while (fgets(line, sizeof line, f)) headers += strncmp(line, "step,", 5) == 0;
    fclose(f);
    ck_assert_int_eq(headers, 1);
}
END_TEST

START_TEST(test_rundir_write_file_whole) {
    rundir_t *d = NULL;
    char err[600] = "";
    ck_assert_int_eq(rundir_open(s_dir, RUNDIR_CREATE, &d, err, sizeof err), 0);
    ck_assert_int_eq(rundir_write_text(d, "config.ini", "[run]\nsteps = 3\n"), 0);
    ck_assert_int_eq(rundir_write_text(d, "config.ini", "[run]\n"), 0);
    ck_assert_int_eq(s_lines("config.ini"), 1);
    ck_assert(!s_exists("config.ini.tmp"));
    ck_assert_int_lt(rundir_write_text(d, "no/such/folder/x", "x"), 0);
    ck_assert_str_eq(rundir_path(d), s_dir);
    rundir_free(&d);
    rundir_free(&d); /* NULL: a no-op */
}
END_TEST

/* A symbolic link planted in the run folder does not redirect a write:
 * the file it names stays as it was, and the open fails naming the link. */
START_TEST(test_rundir_links_not_followed) {
    char target[700], link[700], err[600] = "";
    snprintf(target, sizeof target, "%s/elsewhere.txt", s_dir);
    FILE *f = fopen(target, "w");
    ck_assert_ptr_nonnull(f);
    fputs("keep\n", f);
    fclose(f);
    snprintf(link, sizeof link, "%s/steps.csv", s_dir);
    ck_assert_int_eq(symlink(target, link), 0);
    rundir_t *d = NULL;
    ck_assert_int_lt(rundir_open(s_dir, RUNDIR_OVERWRITE, &d, err, sizeof err), 0);
    ck_assert_msg(strstr(err, "symbolic link") != NULL, "%s", err);
    ck_assert_int_eq(s_lines("elsewhere.txt"), 1);
    unlink(link);
    ck_assert_msg(rundir_open(s_dir, RUNDIR_OVERWRITE, &d, err, sizeof err) == 0, "%s", err);
    char tmp[700];
    snprintf(tmp, sizeof tmp, "%s/config.ini.tmp", s_dir);
    ck_assert_int_eq(symlink(target, tmp), 0);
    ck_assert_int_lt(rundir_write_text(d, "config.ini", "[run]\n"), 0);
    ck_assert_int_eq(s_lines("elsewhere.txt"), 1);
    rundir_free(&d);
}
END_TEST

Suite *make_suite(void) {
    Suite *s = suite_create("rundir");
    TCase *tc = tcase_create("core");
    tcase_add_checked_fixture(tc, s_setup, s_teardown);
    tcase_add_test(tc, test_rundir_create_refuses_previous_run);
    tcase_add_test(tc, test_rundir_overwrite_starts_afresh);
    tcase_add_test(tc, test_rundir_append_keeps_rows);
    tcase_add_test(tc, test_rundir_write_file_whole);
    tcase_add_test(tc, test_rundir_links_not_followed);
    suite_add_tcase(s, tc);
    return s;
}
