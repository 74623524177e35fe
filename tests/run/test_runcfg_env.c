/* tests/run/test_runcfg_env.c — the per-host environment variables of the
 * run configuration (common/run/runcfg.c): KFAC_PS sets [cluster] ps,
 * KFAC_DATA_DIR sets [data] dir, KFAC_ID sets the daemon's own id
 * ([worker] id, [statsd] id, [invertd] id); a --config file is below them
 * and the command line above them, for every role; kfac-ps and kfac-train
 * have no id to set.
 *
 * Check forks every test, so setenv() in one test never reaches another.
 */
#include <check.h>
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "common/run/runcfg.h"
#include "tests/lib/tmpdir.h"

static int s_load(runcfg_t *c, runcfg_role_t role, int argc, const char *const *argv, char *err, size_t err_len) {
    char *av[16];
    av[0] = "kfac-test";
    for (int i = 0; i < argc; i++) av[i + 1] = (char *)argv[i];
    return runcfg_load(c, role, argc + 1, av, err, err_len);
}

/* The id field of a role, or NULL for kfac-ps and kfac-train. */
static int *s_id(runcfg_t *c, runcfg_role_t role) {
    switch (role) {
    case RUNCFG_ROLE_WORKER:
    case RUNCFG_ROLE_STATSD:
    case RUNCFG_ROLE_INVERTD: return &c->daemon[role].id;
    default: return NULL;
    }
}

START_TEST(test_runcfg_env_precedence_every_role) {
    char *path = test_tmpfile("test-runcfg-env", "[cluster]\nps = tcp://10.0.0.1:5555\n[data]\ndir = /file/data\n"
                                                 "[worker]\nid = 1\n[statsd]\nid = 2\n[invertd]\nid = 3\n");
    char err[1024];
    for (int r = 0; r < RUNCFG_ROLE_COUNT; r++) {
        runcfg_role_t role = (runcfg_role_t)r;
        unsetenv("KFAC_PS");
        unsetenv("KFAC_DATA_DIR");
        unsetenv("KFAC_ID");
        runcfg_t c;
        const char *a_file[] = {"--config", path};
        ck_assert_msg(s_load(&c, role, 2, a_file, err, sizeof err) == 0, "%s", err);
        ck_assert_str_eq(c.ps, "tcp://10.0.0.1:5555");
        ck_assert_str_eq(c.data_dir, "/file/data");
        int *id = s_id(&c, role);
        int file_id = id ? *id : -1;
        if (id) ck_assert_int_eq(file_id, r); /* worker 1, statsd 2, invertd 3 */
        runcfg_release(&c);

        setenv("KFAC_PS", "tcp://10.0.0.9:6000", 1);
        setenv("KFAC_DATA_DIR", "/env/data", 1);
        setenv("KFAC_ID", "41", 1);
        ck_assert_msg(s_load(&c, role, 2, a_file, err, sizeof err) == 0, "%s", err);
        ck_assert_str_eq(c.ps, "tcp://10.0.0.9:6000");
        ck_assert_str_eq(c.data_dir, "/env/data");
        if ((id = s_id(&c, role))) ck_assert_int_eq(*id, 41);
        /* the ids of the other roles are not touched */
        if (role != RUNCFG_ROLE_WORKER && role != RUNCFG_ROLE_PS && role != RUNCFG_ROLE_TRAIN)
            ck_assert_int_eq(c.daemon[RUNCFG_ROLE_WORKER].id, 0);
        runcfg_release(&c);

        const char *a_cli[] = {"--config", path, "--cluster.ps", "tcp://10.0.0.7:7000", "--data.dir", "/cli"};
        ck_assert_msg(s_load(&c, role, 6, a_cli, err, sizeof err) == 0, "%s", err);
        ck_assert_str_eq(c.ps, "tcp://10.0.0.7:7000");
        ck_assert_str_eq(c.data_dir, "/cli");
        if ((id = s_id(&c, role))) ck_assert_int_eq(*id, 41);
        runcfg_release(&c);
    }
    unlink(path);
    free(path);
}
END_TEST

/* A bad KFAC_ID is a usage error naming the variable, only for the roles that have an id. */
START_TEST(test_runcfg_env_bad_id) {
    setenv("KFAC_ID", "-3", 1);
    char err[1024];
    for (int r = 0; r < RUNCFG_ROLE_COUNT; r++) {
        runcfg_t c;
        int rc = s_load(&c, (runcfg_role_t)r, 0, NULL, err, sizeof err);
        if (r == RUNCFG_ROLE_PS || r == RUNCFG_ROLE_TRAIN) {
            ck_assert_msg(rc == 0, "role %d: %s", r, err);
        } else {
            ck_assert_int_eq(rc, -EINVAL);
            ck_assert_msg(strstr(err, "KFAC_ID") != NULL, "%s", err);
        }
        runcfg_release(&c);
    }
}
END_TEST

/* --help names the variables and the exit statuses. */
START_TEST(test_runcfg_env_help) {
    for (int r = 0; r < RUNCFG_ROLE_COUNT; r++) {
        char *buf = NULL;
        size_t len = 0;
        FILE *f = open_memstream(&buf, &len);
        config_help(runcfg_spec((runcfg_role_t)r), f);
        fclose(f);
        ck_assert_msg(strstr(buf, "KFAC_PS") && strstr(buf, "KFAC_DATA_DIR"), "role %d", r);
        int has_id = r == RUNCFG_ROLE_WORKER || r == RUNCFG_ROLE_STATSD || r == RUNCFG_ROLE_INVERTD;
        ck_assert_int_eq(strstr(buf, "KFAC_ID") != NULL, has_id);
        ck_assert_msg(strstr(buf, "Exit status:") && strstr(buf, "2 usage error"), "role %d", r);
        ck_assert_int_eq(strstr(buf, "78 configuration error") != NULL, r != RUNCFG_ROLE_INVERTD);
        free(buf);
    }
}
END_TEST

Suite *make_suite(void) {
    Suite *s = suite_create("runcfg_env");
    TCase *tc = tcase_create("env");
    tcase_add_test(tc, test_runcfg_env_precedence_every_role);
    tcase_add_test(tc, test_runcfg_env_bad_id);
    tcase_add_test(tc, test_runcfg_env_help);
    suite_add_tcase(s, tc);
    return s;
}
