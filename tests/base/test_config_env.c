/* tests/base/test_config_env.c — the environment layer of the configuration
 * (common/base/config.h: defaults < file < environment < command line), its
 * errors, its --help lines, the spec check of the variable list, and the
 * exit status of a start-up failure (config_exit_status).
 *
 * Check forks every test, so setenv() in one test never reaches another.
 */
#include <check.h>
#include <errno.h>
#include <inttypes.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "common/base/config.h"
#include "common/base/rng.h"
#include "tests/lib/seed.h"
#include "tests/lib/tmpdir.h"

typedef struct ecfg {
    char *ps;
    char *dir;
    int id;
    double lr;
} ecfg_t;

static const config_option_t s_opts[] = {
    CONFIG_OPT("cluster", "ps", OPT_STRING, ecfg_t, ps, "tcp://127.0.0.1:5555", 1, 256, "PS endpoint"),
    CONFIG_OPT("data", "dir", OPT_STRING, ecfg_t, dir, "data", 1, 4096, "data folder"),
    CONFIG_OPT("worker", "id", OPT_INT, ecfg_t, id, "0", 0, 1000, "worker id"),
    CONFIG_OPT("optimizer", "lr", OPT_DOUBLE, ecfg_t, lr, "0.1", 0, 10, "learning rate"),
};
static const config_env_t s_env[] = {{"KFACT_PS", "cluster.ps"}, {"KFACT_DATA_DIR", "data.dir"}, {"KFACT_ID", "worker.id"}};
static const config_spec_t s_spec = {
    .program = "kfac-envtest",
    .summary = "environment test",
    .opts = s_opts,
    .n_opts = CONFIG_COUNT(s_opts),
    .env = s_env,
    .n_env = CONFIG_COUNT(s_env),
    .epilogue = "Exit status: 0 fine, 78 configuration error.\n",
};

static int s_load(ecfg_t *c, int argc, const char *const *argv, FILE *out, char *err, size_t err_len) {
    char *av[16];
    av[0] = "kfac-envtest";
    for (int i = 0; i < argc; i++) av[i + 1] = (char *)argv[i];
    memset(c, 0, sizeof *c);
    err[0] = 0;
    return config_load(&s_spec, c, argc + 1, av, out, err, err_len);
}

/* Each source in turn wins over the ones before it, for random values. */
START_TEST(test_config_env_precedence) {
    uint64_t seed = test_seed();
    printf("test_config_env_precedence: seed %" PRIu64 "\n", seed);
    rng_t r;
    rng_seed(&r, seed);
    int id_file = (int)rng_below(&r, 300), id_env = 300 + (int)rng_below(&r, 300),
        id_cli = 600 + (int)rng_below(&r, 300);
    char text[256], env_id[16], cli_id[16];
    snprintf(text, sizeof text, "[cluster]\nps = tcp://file:1\n[data]\ndir = /file\n[worker]\nid = %d\n", id_file);
    snprintf(env_id, sizeof env_id, "%d", id_env);
    snprintf(cli_id, sizeof cli_id, "%d", id_cli);
    char *path = test_tmpfile("test-config-env", text);
    char err[512];
    ecfg_t c;
    unsetenv("KFACT_PS");
    unsetenv("KFACT_DATA_DIR");
    unsetenv("KFACT_ID");

    /* defaults */
    ck_assert_int_eq(s_load(&c, 0, NULL, stdout, err, sizeof err), 0);
    ck_assert_str_eq(c.ps, "tcp://127.0.0.1:5555");
    ck_assert_str_eq(c.dir, "data");
    ck_assert_int_eq(c.id, 0);
    config_release(&s_spec, &c);
    /* environment over defaults (no file) */
    setenv("KFACT_ID", env_id, 1);
    ck_assert_int_eq(s_load(&c, 0, NULL, stdout, err, sizeof err), 0);
    ck_assert_int_eq(c.id, id_env);
    ck_assert_str_eq(c.dir, "data");
    config_release(&s_spec, &c);
    unsetenv("KFACT_ID");
    /* file over defaults */
    const char *a_file[] = {"--config", path};
    ck_assert_int_eq(s_load(&c, 2, a_file, stdout, err, sizeof err), 0);
    ck_assert_str_eq(c.ps, "tcp://file:1");
    ck_assert_str_eq(c.dir, "/file");
    ck_assert_int_eq(c.id, id_file);
    config_release(&s_spec, &c);
    /* environment over the file; an option without a variable keeps the file's */
    setenv("KFACT_PS", "tcp://env:2", 1);
    setenv("KFACT_DATA_DIR", "/env", 1);
    setenv("KFACT_ID", env_id, 1);
    ck_assert_int_eq(s_load(&c, 2, a_file, stdout, err, sizeof err), 0);
    ck_assert_str_eq(c.ps, "tcp://env:2");
    ck_assert_str_eq(c.dir, "/env");
    ck_assert_int_eq(c.id, id_env);
    config_release(&s_spec, &c);
    /* the command line over the environment, whatever the order of the arguments */
    const char *a_cli[] = {"--worker.id", cli_id, "--config", path, "--dir=/cli"};
    ck_assert_int_eq(s_load(&c, 5, a_cli, stdout, err, sizeof err), 0);
    ck_assert_str_eq(c.ps, "tcp://env:2");
    ck_assert_str_eq(c.dir, "/cli");
    ck_assert_int_eq(c.id, id_cli);
    config_release(&s_spec, &c);
    /* --dump-config prints the effective values: the environment's where it won */
    char *buf = NULL;
    size_t len = 0;
    FILE *f = open_memstream(&buf, &len);
    const char *a_dump[] = {"--config", path, "--dump-config", "--dir", "/cli"};
    ck_assert_int_eq(s_load(&c, 5, a_dump, f, err, sizeof err), CONFIG_DUMP);
    fclose(f);
    ck_assert_msg(strstr(buf, "ps = tcp://env:2\n") != NULL, "%s", buf);
    ck_assert_msg(strstr(buf, "dir = /cli\n") != NULL, "%s", buf);
    char want[32];
    snprintf(want, sizeof want, "id = %d\n", id_env);
    ck_assert_msg(strstr(buf, want) != NULL, "want '%s' in %s", want, buf);
    free(buf);
    config_release(&s_spec, &c);
    unlink(path);
    free(path);
}
END_TEST

/* An empty variable is unset (systemd's Environment=KFAC_ID= clears it). */
START_TEST(test_config_env_empty_is_unset) {
    setenv("KFACT_PS", "", 1);
    setenv("KFACT_ID", "", 1);
    ecfg_t c;
    char err[512];
    ck_assert_int_eq(s_load(&c, 0, NULL, stdout, err, sizeof err), 0);
    ck_assert_str_eq(c.ps, "tcp://127.0.0.1:5555");
    ck_assert_int_eq(c.id, 0);
    config_release(&s_spec, &c);
}
END_TEST

/* A bad value names the variable and the option, and is -EINVAL. */
START_TEST(test_config_env_bad_value_named) {
    setenv("KFACT_ID", "2000", 1);
    ecfg_t c;
    char err[512];
    ck_assert_int_eq(s_load(&c, 0, NULL, stdout, err, sizeof err), -EINVAL);
    ck_assert_msg(strstr(err, "environment variable KFACT_ID") && strstr(err, "worker.id") && strstr(err, "2000"),
                  "%s", err);
    config_release(&s_spec, &c);
    setenv("KFACT_ID", "seven", 1);
    ck_assert_int_eq(s_load(&c, 0, NULL, stdout, err, sizeof err), -EINVAL);
    ck_assert_msg(strstr(err, "KFACT_ID") && strstr(err, "seven"), "%s", err);
    config_release(&s_spec, &c);
    /* config_apply_env alone, on defaults */
    ck_assert_int_eq(config_defaults(&s_spec, &c, err, sizeof err), 0);
    ck_assert_int_eq(config_apply_env(&s_spec, &c, err, sizeof err), -EINVAL);
    ck_assert_int_eq(c.id, 0);
    config_release(&s_spec, &c);
}
END_TEST

/* The spec check refuses a variable naming no option, or no name at all. */
START_TEST(test_config_env_spec_checked) {
    char err[512];
    config_spec_t sp = s_spec;
    static const config_env_t bad[] = {{"KFACT_X", "cluster.nope"}};
    sp.env = bad;
    sp.n_env = 1;
    ck_assert_int_eq(config_check_spec(&sp, err, sizeof err), -EINVAL);
    ck_assert_msg(strstr(err, "KFACT_X") && strstr(err, "cluster.nope"), "%s", err);
    static const config_env_t nodot[] = {{"KFACT_X", "ps"}};
    sp.env = nodot;
    ck_assert_int_eq(config_check_spec(&sp, err, sizeof err), -EINVAL);
    static const config_env_t novar[] = {{"", "cluster.ps"}};
    sp.env = novar;
    ck_assert_int_eq(config_check_spec(&sp, err, sizeof err), -EINVAL);
    ck_assert_int_eq(config_check_spec(&s_spec, err, sizeof err), 0);
}
END_TEST

/* --help lists every variable with its option, then the epilogue. */
START_TEST(test_config_env_help_lists_variables) {
    char *buf = NULL;
    size_t len = 0;
    FILE *f = open_memstream(&buf, &len);
    config_help(&s_spec, f);
    fclose(f);
    for (size_t i = 0; i < CONFIG_COUNT(s_env); i++) {
        const char *line = strstr(buf, s_env[i].var);
        ck_assert_msg(line != NULL, "%s missing from --help", s_env[i].var);
        const char *eol = strchr(line, '\n');
        char want[64];
        snprintf(want, sizeof want, "--%s", s_env[i].name);
        const char *hit = strstr(line, want);
        ck_assert_msg(hit && hit < eol, "%s: its line does not name %s", s_env[i].var, want);
    }
    const char *epi = strstr(buf, "Exit status: 0 fine, 78 configuration error.\n");
    ck_assert_msg(epi && epi > strstr(buf, "KFACT_ID"), "the epilogue is missing or not last:\n%s", buf);
    free(buf);
}
END_TEST

START_TEST(test_config_exit_status_map) {
    const int config_errs[] = {-ENOENT, -EACCES, -EPERM, -ENOTDIR, -EISDIR, -ELOOP, -ENAMETOOLONG, -EINVAL};
    const int runtime_errs[] = {-ENOMEM, -EIO, -EADDRINUSE, -EAGAIN, -EPIPE, 0, 1};
    for (size_t i = 0; i < sizeof config_errs / sizeof config_errs[0]; i++)
        ck_assert_int_eq(config_exit_status(config_errs[i]), CONFIG_EXIT_CONFIG);
    for (size_t i = 0; i < sizeof runtime_errs / sizeof runtime_errs[0]; i++)
        ck_assert_int_eq(config_exit_status(runtime_errs[i]), CONFIG_EXIT_FAILURE);
    ck_assert_int_eq(CONFIG_EXIT_CONFIG, 78);
    ck_assert_int_eq(CONFIG_EXIT_USAGE, 2);
}
END_TEST

Suite *make_suite(void) {
    Suite *s = suite_create("config_env");
    TCase *tc = tcase_create("env");
    tcase_add_test(tc, test_config_env_precedence);
    tcase_add_test(tc, test_config_env_empty_is_unset);
    tcase_add_test(tc, test_config_env_bad_value_named);
    tcase_add_test(tc, test_config_env_spec_checked);
    tcase_add_test(tc, test_config_env_help_lists_variables);
    tcase_add_test(tc, test_config_exit_status_map);
    suite_add_tcase(s, tc);
    return s;
}
