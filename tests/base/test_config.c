/* tests/base/test_config.c — the declarative configuration (common/base/config.h):
 * precedence defaults < file < command line, every error kind with its
 * exact message, "did you mean" suggestions, sections owned / shared /
 * skipped, --help generated from the table, and dump -> parse round trips
 * of random values (exact: numbers are written in a form that reads back to
 * the same double).
 */
#include <check.h>
#include <errno.h>
#include <limits.h>
#include <math.h>
#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#include "common/base/config.h"
#include "common/base/version.h"
#include "common/base/rng.h"
#include "tests/lib/tmpdir.h"

typedef struct tcfg {
    char *name;
    uint64_t run_seed;
    double lr;
    double momentum;
    bool polyak;
    int method;
    int threads;
    int batch_size;
    char *dir;
    uint64_t data_seed;
    double damping;
} tcfg_t;

static const char *const s_methods[] = {"cholesky", "eigen", NULL};

static const config_option_t s_opts[] = {
    {"run", "name", OPT_STRING, offsetof(tcfg_t, name), "run", 1, 64, "name of the run", NULL},
    {"run", "seed", OPT_UINT64, offsetof(tcfg_t, run_seed), "42", 0, 0, "seed of everything random", NULL},
    {"optimizer", "lr", OPT_DOUBLE, offsetof(tcfg_t, lr), "0.1", 0, 10, "learning rate", NULL},
    {"optimizer", "momentum", OPT_DOUBLE, offsetof(tcfg_t, momentum), "0.9", 0, 1, "momentum", NULL},
    {"optimizer", "polyak", OPT_BOOL, offsetof(tcfg_t, polyak), "false", 0, 0, "Polyak averaging", NULL},
    CONFIG_ENUM("kfac", "method", tcfg_t, method, "cholesky", s_methods, "how inverses are computed"),
    {"kfac", "damping", OPT_DOUBLE, offsetof(tcfg_t, damping), "1e-3", 1e-8, INFINITY, "Tikhonov damping", NULL},
    CONFIG_OPT("worker", "threads", OPT_INT, tcfg_t, threads, "1", 1, 256, "compute threads"),
    {"data", "batch_size", OPT_INT, offsetof(tcfg_t, batch_size), "128", 1, INT_MAX, "examples per batch", NULL},
    {"data", "dir", OPT_STRING, offsetof(tcfg_t, dir), "", 0, 0, "data directory", NULL},
    {"data", "seed", OPT_UINT64, offsetof(tcfg_t, data_seed), "7", 0, 0, "shuffling seed", NULL},
};

static const config_spec_t s_spec = {
    .program = "kfac-test",
    .summary = "a test daemon",
    .opts = s_opts,
    .n_opts = CONFIG_COUNT(s_opts),
};

/* Load with the given argv (program name added); err filled. */
static int s_load(tcfg_t *c, char *err, size_t err_len, int argc, const char *const *argv) {
    char *av[32];
    av[0] = "kfac-test";
    for (int i = 0; i < argc; i++) av[i + 1] = (char *)argv[i];
    err[0] = 0;
    return config_load(&s_spec, c, argc + 1, av, stdout, err, err_len);
}

static int s_text(tcfg_t *c, const char *text, char *err, size_t err_len) {
    char e[512];
    int rc = config_defaults(&s_spec, c, e, sizeof e);
    ck_assert_msg(rc == 0, "%s", e);
    err[0] = 0;
    return config_parse_text(&s_spec, c, text, "run.ini", err, err_len);
}

START_TEST(test_config_defaults_from_table) {
    tcfg_t c = {0};
    char err[512];
    ck_assert_int_eq(s_load(&c, err, sizeof err, 0, NULL), 0);
    ck_assert_str_eq(c.name, "run");
    ck_assert_uint_eq(c.run_seed, 42);
    ck_assert(c.lr == 0.1);
    ck_assert(c.momentum == 0.9);
    ck_assert(!c.polyak);
    ck_assert_int_eq(c.method, 0);
    ck_assert(c.damping == 1e-3);
    ck_assert_int_eq(c.threads, 1);
    ck_assert_int_eq(c.batch_size, 128);
    ck_assert_str_eq(c.dir, "");
    ck_assert_uint_eq(c.data_seed, 7);
    config_release(&s_spec, &c);
    ck_assert_ptr_null(c.name);
    config_release(&s_spec, &c); /* twice is fine */
}
END_TEST

START_TEST(test_config_precedence_defaults_file_cli) {
    char *path = test_tmpfile("test-config",
                              "# a run file\n[optimizer]\nlr = 0.5\nmomentum = 0.8\n[worker]\nthreads = 4\n"
                              "[ps]\nport = 5555\n");
    tcfg_t c = {0};
    char err[512];
    char cfgarg[300];
    snprintf(cfgarg, sizeof cfgarg, "--config=%s", path);
    /* the override comes first on the line and still wins over the file */
    const char *argv[] = {"--threads", "8", cfgarg, "--optimizer.momentum=0.7"};
    ck_assert_msg(s_load(&c, err, sizeof err, 4, argv) == 0, "%s", err);
    ck_assert(c.lr == 0.5);        /* file over default */
    ck_assert(c.momentum == 0.7);  /* command line over file */
    ck_assert_int_eq(c.threads, 8);
    ck_assert_int_eq(c.batch_size, 128); /* default */
    config_release(&s_spec, &c);

    const char *argv2[] = {"--config", path};
    ck_assert_msg(s_load(&c, err, sizeof err, 2, argv2) == 0, "%s", err);
    ck_assert_int_eq(c.threads, 4);
    config_release(&s_spec, &c);

    const char *argv3[] = {"--config", path, "--config", path};
    ck_assert_int_eq(s_load(&c, err, sizeof err, 4, argv3), -EINVAL);
    ck_assert_msg(strstr(err, "command line: --config given twice") == err, "%s", err);
    config_release(&s_spec, &c);
    unlink(path);

    const char *argv4[] = {"--config", path};
    ck_assert_int_eq(s_load(&c, err, sizeof err, 2, argv4), -ENOENT);
    char want[512];
    snprintf(want, sizeof want, "cannot read config file '%s': No such file or directory", path);
    ck_assert_str_eq(err, want);
    config_release(&s_spec, &c);
    free(path);
}
END_TEST

START_TEST(test_config_cli_forms) {
    tcfg_t c = {0};
    char err[512];
    const char *a1[] = {"--lr", "0.25", "--batch-size=64", "--polyak", "--kfac.method", "eigen", "--run.seed=5"};
    ck_assert_msg(s_load(&c, err, sizeof err, 7, a1) == 0, "%s", err);
    ck_assert(c.lr == 0.25);
    ck_assert_int_eq(c.batch_size, 64);
    ck_assert(c.polyak);
    ck_assert_int_eq(c.method, 1);
    ck_assert_uint_eq(c.run_seed, 5);
    config_release(&s_spec, &c);

    const char *a2[] = {"--polyak", "no", "--optimizer.lr", "3", "--data.batch_size", "9"};
    ck_assert_msg(s_load(&c, err, sizeof err, 6, a2) == 0, "%s", err);
    ck_assert(!c.polyak);
    ck_assert(c.lr == 3);
    ck_assert_int_eq(c.batch_size, 9);
    config_release(&s_spec, &c);

    /* a flag followed by another option is true */
    const char *a3[] = {"--polyak", "--lr=1"};
    ck_assert_msg(s_load(&c, err, sizeof err, 2, a3) == 0, "%s", err);
    ck_assert(c.polyak);
    config_release(&s_spec, &c);

    /* ... and so is one last on the line; --flag=false and --flag false are false */
    const char *a3b[] = {"--lr=1", "--optimizer.polyak"};
    ck_assert_msg(s_load(&c, err, sizeof err, 2, a3b) == 0, "%s", err);
    ck_assert(c.polyak);
    config_release(&s_spec, &c);
    const char *a3c[] = {"--polyak", "--polyak=false"};
    ck_assert_msg(s_load(&c, err, sizeof err, 2, a3c) == 0, "%s", err);
    ck_assert(!c.polyak);
    config_release(&s_spec, &c);
    const char *a3d[] = {"--polyak", "false", "--lr", "2"};
    ck_assert_msg(s_load(&c, err, sizeof err, 4, a3d) == 0, "%s", err);
    ck_assert(!c.polyak);
    ck_assert(c.lr == 2);
    config_release(&s_spec, &c);
    /* a bare option that is not a boolean still needs its value */
    const char *a3e[] = {"--lr"};
    ck_assert_int_eq(s_load(&c, err, sizeof err, 1, a3e), -EINVAL);
    ck_assert_msg(strstr(err, "'--lr' needs a value") != NULL, "%s", err);
    config_release(&s_spec, &c);

    /* errors */
    const char *a4[] = {"--seed=3"};
    ck_assert_int_eq(s_load(&c, err, sizeof err, 1, a4), -EINVAL);
    ck_assert_str_eq(err, "command line: option '--seed' is ambiguous: say --run.seed or --data.seed");
    config_release(&s_spec, &c);
    const char *a5[] = {"--lr"};
    ck_assert_int_eq(s_load(&c, err, sizeof err, 1, a5), -EINVAL);
    ck_assert_str_eq(err, "command line: option '--lr' needs a value: a number between 0 and 10");
    config_release(&s_spec, &c);
    const char *a6[] = {"lr=3"};
    ck_assert_int_eq(s_load(&c, err, sizeof err, 1, a6), -EINVAL);
    ck_assert_str_eq(err, "command line: unexpected argument 'lr=3' (options look like --section.key=value)");
    config_release(&s_spec, &c);
    const char *a7[] = {"--lr=abc"};
    ck_assert_int_eq(s_load(&c, err, sizeof err, 1, a7), -EINVAL);
    ck_assert_str_eq(err, "command line: option '--lr': expected a number between 0 and 10, got 'abc'");
    config_release(&s_spec, &c);
    const char *a8[] = {"--lrr=1"};
    ck_assert_int_eq(s_load(&c, err, sizeof err, 1, a8), -ENOENT);
    ck_assert_str_eq(err, "command line: unknown option '--lrr' (did you mean '--lr'?)");
    config_release(&s_spec, &c);
    const char *a9[] = {"--optimizer.lrr=1"};
    ck_assert_int_eq(s_load(&c, err, sizeof err, 1, a9), -ENOENT);
    ck_assert_str_eq(err, "command line: unknown option '--optimizer.lrr' (did you mean '--optimizer.lr'?)");
    config_release(&s_spec, &c);
    const char *a10[] = {"--sed=1"}; /* closest bare key is not unique: suggest the full name */
    ck_assert_int_eq(s_load(&c, err, sizeof err, 1, a10), -ENOENT);
    ck_assert_str_eq(err, "command line: unknown option '--sed' (did you mean '--run.seed'?)");
    config_release(&s_spec, &c);
    const char *a11[] = {"--ps.port=5"}; /* another daemon's section is not ours */
    ck_assert_int_eq(s_load(&c, err, sizeof err, 1, a11), -ENOENT);
    ck_assert_str_eq(err, "command line: unknown option '--ps.port' (see --help)");
    config_release(&s_spec, &c);

    /* config_set, the programmatic form */
    config_defaults(&s_spec, &c, err, sizeof err);
    ck_assert_int_eq(config_set(&s_spec, &c, "worker.threads", "16", "test", err, sizeof err), 0);
    ck_assert_int_eq(c.threads, 16);
    ck_assert_int_eq(config_set(&s_spec, &c, "threads", "0", "test", err, sizeof err), -EINVAL);
    ck_assert_str_eq(err, "test: option 'threads': expected an integer between 1 and 256, got '0'");
    ck_assert_int_eq(c.threads, 16); /* unchanged */
    config_release(&s_spec, &c);
}
END_TEST

/* Every kind of bad value, with the exact message. */
START_TEST(test_config_value_errors) {
    static const struct {
        const char *text, *want;
    } cases[] = {
        {"[run]\nname = x\n\n[optimizer]\n# comment\nlr = abc\n",
         "run.ini:6: key 'lr': expected a number between 0 and 10, got 'abc'"},
        {"[optimizer]\nlr = 11\n", "run.ini:2: key 'lr': expected a number between 0 and 10, got '11'"},
        {"[optimizer]\nlr = nan\n", "run.ini:2: key 'lr': expected a number between 0 and 10, got 'nan'"},
        {"[optimizer]\nlr = 1e999\n", "run.ini:2: key 'lr': expected a number between 0 and 10, got '1e999'"},
        {"[optimizer]\nlr = 0.5x\n", "run.ini:2: key 'lr': expected a number between 0 and 10, got '0.5x'"},
        {"[optimizer]\nlr =\n", "run.ini:2: key 'lr': expected a number between 0 and 10, got ''"},
        {"[kfac]\ndamping = 0\n", "run.ini:2: key 'damping': expected a number >= 1e-08, got '0'"},
        {"[worker]\nthreads = 1.5\n", "run.ini:2: key 'threads': expected an integer between 1 and 256, got '1.5'"},
        {"[worker]\nthreads = 99999999999\n",
         "run.ini:2: key 'threads': expected an integer between 1 and 256, got '99999999999'"},
        {"[data]\nbatch_size = 0\n", "run.ini:2: key 'batch_size': expected an integer >= 1, got '0'"},
        {"[data]\nseed = -1\n", "run.ini:2: key 'seed': expected a non-negative integer, got '-1'"},
        {"[data]\nseed = 18446744073709551616\n",
         "run.ini:2: key 'seed': expected a non-negative integer, got '18446744073709551616'"},
        {"[optimizer]\npolyak = maybe\n",
         "run.ini:2: key 'polyak': expected true or false (or yes/no, on/off, 1/0), got 'maybe'"},
        {"[kfac]\nmethod = cholesk\n",
         "run.ini:2: key 'method': expected one of cholesky, eigen, got 'cholesk' (did you mean 'cholesky'?)"},
        {"[kfac]\nmethod = qr\n", "run.ini:2: key 'method': expected one of cholesky, eigen, got 'qr'"},
        {"[run]\nname = \"\"\n", "run.ini:2: key 'name': expected a string of 1 to 64 bytes, got ''"},
    };
    for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++) {
        tcfg_t c = {0};
        char err[512];
        ck_assert_int_eq(s_text(&c, cases[i].text, err, sizeof err), -EINVAL);
        ck_assert_msg(strcmp(err, cases[i].want) == 0, "case %zu: got '%s'", i, err);
        config_release(&s_spec, &c);
    }
    /* a bad value leaves the old one */
    tcfg_t c = {0};
    char err[512];
    ck_assert_int_eq(s_text(&c, "[optimizer]\nlr = 2\nmomentum = 7\n", err, sizeof err), -EINVAL);
    ck_assert(c.lr == 2);
    ck_assert(c.momentum == 0.9);
    config_release(&s_spec, &c);
}
END_TEST

START_TEST(test_config_syntax_errors) {
    static const struct {
        const char *text, *want;
    } cases[] = {
        {"[optimizer\nlr = 1\n", "run.ini:1: section header without ']'"},
        {"[optimizer] x\n", "run.ini:1: text after the section header"},
        {"[]\n", "run.ini:1: bad section name []"},
        {"lr = 1\n", "run.ini:1: key 'lr' is outside any [section]"},
        {"[optimizer]\njust some words\n", "run.ini:2: expected 'key = value' or '[section]', got 'just some words'"},
        {"[optimizer]\n = 3\n", "run.ini:2: bad key name ''"},
        {"[run]\nname = \"abc\n", "run.ini:2: key 'name': unterminated quoted value"},
        {"[run]\nname = \"a\\qb\"\n", "run.ini:2: key 'name': unknown escape '\\q' in quoted value (use \\\" \\\\ \\n \\t \\r)"},
        {"[run]\nname = \"ab\" c\n", "run.ini:2: key 'name': text after the closing quote"},
        {"[optimizer]\nlr = 1\nmomentum = 0.5\n\n[optimizer]\nlr = 2\n",
         "run.ini:6: key 'lr' in [optimizer] is already set on line 2"},
    };
    for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++) {
        tcfg_t c = {0};
        char err[512];
        ck_assert_int_eq(s_text(&c, cases[i].text, err, sizeof err), -EINVAL);
        ck_assert_msg(strcmp(err, cases[i].want) == 0, "case %zu: got '%s'", i, err);
        config_release(&s_spec, &c);
    }
}
END_TEST

START_TEST(test_config_unknown_key_suggestion) {
    static const struct {
        const char *text, *want;
    } cases[] = {
        {"[optimizer]\nlrr = 1\n", "run.ini:2: unknown key 'lrr' in [optimizer] (did you mean 'lr'?)"},
        {"[optimizer]\nmomentun = 1\n", "run.ini:2: unknown key 'momentun' in [optimizer] (did you mean 'momentum'?)"},
        {"[data]\nbatch-size = 3\n", "run.ini:2: unknown key 'batch-size' in [data] (did you mean 'batch_size'?)"},
        {"[kfac]\nlr = 1\n", "run.ini:2: unknown key 'lr' in [kfac] (did you mean 'lr' in [optimizer]?)"},
        {"[optimizer]\nzzzzzz = 1\n", "run.ini:2: unknown key 'zzzzzz' in [optimizer]"},
        {"[optimzer]\nlr = 1\n", "run.ini:1: unknown section [optimzer] (did you mean [optimizer]?)"},
        {"[invertdd]\n", "run.ini:1: unknown section [invertdd] (did you mean [invertd]?)"},
        {"[bogus]\n", "run.ini:1: unknown section [bogus]"},
    };
    for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++) {
        tcfg_t c = {0};
        char err[512];
        ck_assert_int_eq(s_text(&c, cases[i].text, err, sizeof err), -EINVAL);
        ck_assert_msg(strcmp(err, cases[i].want) == 0, "case %zu: got '%s'", i, err);
        config_release(&s_spec, &c);
    }
}
END_TEST

/* A worker reads the PS's run file: sections it does not own are skipped,
 * its own stay strict; a shared (partial) section reads what it knows. */
START_TEST(test_config_sections_not_owned_ignored) {
    const char *text = "[run]\nname = exp1\n"
                       "[ps]\nport = 5555\nanything = at all\n"
                       "[statsd]\nwhatever = 1\n"
                       "[model]\nfile = models/mnist_cnn.model\n"
                       "[worker]\nthreads = 3\n";
    tcfg_t c = {0};
    char err[512];
    ck_assert_msg(s_text(&c, text, err, sizeof err) == 0, "%s", err);
    ck_assert_str_eq(c.name, "exp1");
    ck_assert_int_eq(c.threads, 3);
    /* the same file with a typo inside an owned section fails */
    ck_assert_int_eq(s_text(&c, "[ps]\nport = 1\n[worker]\nthread = 3\n", err, sizeof err), -EINVAL);
    ck_assert_str_eq(err, "run.ini:4: unknown key 'thread' in [worker] (did you mean 'threads'?)");
    config_release(&s_spec, &c);

    /* partial: [data] keys this table knows are read, others skipped */
    static const char *const partial[] = {"data", "ps", NULL};
    config_spec_t sp = s_spec;
    sp.partial_sections = partial;
    config_defaults(&sp, &c, err, sizeof err);
    ck_assert_msg(config_parse_text(&sp, &c, "[data]\nbatch_size = 32\naugment = true\n[ps]\nx = 1\n", "w",
                                    err, sizeof err) == 0, "%s", err);
    ck_assert_int_eq(c.batch_size, 32);
    config_release(&sp, &c);

    /* a custom list of known sections replaces the run-file list */
    static const char *const known[] = {"other", NULL};
    sp = s_spec;
    sp.known_sections = known;
    config_defaults(&sp, &c, err, sizeof err);
    ck_assert_int_eq(config_parse_text(&sp, &c, "[other]\nz = 1\n", "w", err, sizeof err), 0);
    ck_assert_int_eq(config_parse_text(&sp, &c, "[ps]\nz = 1\n", "w", err, sizeof err), -EINVAL);
    ck_assert_str_eq(err, "w:1: unknown section [ps]");
    config_release(&sp, &c);
}
END_TEST

START_TEST(test_config_comments_and_quotes) {
    const char *text = "; leading comment\n"
                       "[run]   # trailing comment\n"
                       "  name   =   my run   # comment after a value\n"
                       "[data]\r\n"
                       "dir = \"/tmp/a #b; c\"  ; comment\r\n"
                       "[optimizer]\n"
                       "lr=0.5;not a comment\n";
    tcfg_t c = {0};
    char err[512];
    ck_assert_int_eq(s_text(&c, text, err, sizeof err), -EINVAL); /* '0.5;not' is one bare value */
    ck_assert_str_eq(err, "run.ini:7: key 'lr': expected a number between 0 and 10, got '0.5;not a comment'");
    ck_assert_str_eq(c.name, "my run");
    ck_assert_str_eq(c.dir, "/tmp/a #b; c");
    config_release(&s_spec, &c);
}
END_TEST

/* --help is generated from the table: every option appears with its type,
 * bounds, default and help text, and nothing else does. */
START_TEST(test_config_help_lists_every_option) {
    char *buf = NULL;
    size_t len = 0;
    FILE *f = open_memstream(&buf, &len);
    config_help(&s_spec, f);
    fclose(f);
    ck_assert_msg(strstr(buf, "Usage: kfac-test [--config FILE]") == buf, "%s", buf);
    ck_assert_ptr_nonnull(strstr(buf, "a test daemon"));
    static const char *const types[] = {"int", "uint64", "double", "bool", "string", "enum"};
    size_t n_opt_lines = 0;
    for (const char *p = buf; (p = strstr(p, "\n  --")) != NULL; p++)
        if (strchr(p + 5, '.') && strchr(p + 5, '.') < strchr(p + 5, '\n')) n_opt_lines++;
    ck_assert_uint_eq(n_opt_lines, s_spec.n_opts);
    for (size_t i = 0; i < s_spec.n_opts; i++) {
        const config_option_t *o = &s_opts[i];
        char head[128], want[512];
        snprintf(head, sizeof head, "  --%s.%s=", o->section, o->key);
        const char *line = strstr(buf, head);
        ck_assert_msg(line != NULL, "no line for %s.%s", o->section, o->key);
        const char *eol = strchr(line, '\n');
        const char *next = strchr(eol + 1, '\n');
        size_t n = (size_t)(next - line);
        char entry[1024];
        snprintf(entry, sizeof entry, "%.*s", (int)n, line);
        if (o->type == OPT_ENUM) {
            ck_assert_ptr_nonnull(strstr(entry, "cholesky|eigen"));
        } else if (o->type == OPT_STRING && o->max > 0) {
            ck_assert_ptr_nonnull(strstr(entry, "(string, at most 64 bytes"));
        } else {
            snprintf(want, sizeof want, "(%s", types[o->type]);
            ck_assert_msg(strstr(entry, want) != NULL, "%s: no type in '%s'", o->key, entry);
        }
        snprintf(want, sizeof want, "default %s)", *o->def ? o->def : "\"\"");
        ck_assert_msg(strstr(entry, want) != NULL, "%s: no '%s' in '%s'", o->key, want, entry);
        snprintf(want, sizeof want, "\n      %s", o->help);
        ck_assert_msg(strstr(entry, want) != NULL, "%s: no help in '%s'", o->key, entry);
    }
    ck_assert_ptr_nonnull(strstr(buf, "--optimizer.lr=NUMBER  (double, between 0 and 10, default 0.1)"));
    ck_assert_ptr_nonnull(strstr(buf, "--data.batch_size=INT  (int, >= 1, default 128)"));
    ck_assert_ptr_nonnull(strstr(buf, "\n[kfac]\n"));
    free(buf);

    /* config_load prints it for --help and says so */
    tcfg_t c = {0};
    char err[512];
    buf = NULL;
    f = open_memstream(&buf, &len);
    char *av[] = {"kfac-test", "--lr=0.3", "--help"};
    ck_assert_int_eq(config_load(&s_spec, &c, 3, av, f, err, sizeof err), CONFIG_HELP);
    fclose(f);
    ck_assert_ptr_nonnull(strstr(buf, "--optimizer.momentum=NUMBER"));
    free(buf);
    config_release(&s_spec, &c);
}
END_TEST

/* --version prints the program and the one build id, wherever it stands,
 * and --help lists it. */
START_TEST(test_config_version) {
    char err[512], *buf = NULL;
    size_t len = 0;
    tcfg_t c = {0};
    FILE *f = open_memstream(&buf, &len);
    char *av[] = {"kfac-test", "--lr=0.3", "--version", "--batch_size", "7"};
    ck_assert_int_eq(config_load(&s_spec, &c, 5, av, f, err, sizeof err), CONFIG_HELP);
    fclose(f);
    char want[256];
    snprintf(want, sizeof want, "%s %s\n", s_spec.program, KFAC_BUILD_ID);
    ck_assert_str_eq(buf, want);
    free(buf);
    config_release(&s_spec, &c);
    buf = NULL;
    f = open_memstream(&buf, &len);
    config_help(&s_spec, f);
    fclose(f);
    ck_assert_ptr_nonnull(strstr(buf, "  --version\n"));
    free(buf);
}
END_TEST

static double s_rand_in(rng_t *r, double lo, double hi) {
    double u = rng_uniform(r);
    switch (rng_below(r, 3)) {
    case 0: return lo + (hi - lo) * u;
    case 1: return lo + (hi - lo) * u * 1e-6; /* small values print with exponents */
    default: return lo + (double)rng_below(r, 100) / 100.0 * (hi - lo);
    }
}

static char *s_rand_text(rng_t *r, int min_len) {
    static const char alphabet[] = "abc XYZ019_-./#;\"\\\t\n=[]'";
    int n = min_len + (int)rng_below(r, 20);
    char *s = malloc((size_t)n + 1);
    for (int i = 0; i < n; i++) s[i] = alphabet[rng_below(r, sizeof alphabet - 1)];
    s[n] = 0;
    return s;
}

/* dump -> parse gives back exactly the same values. */
START_TEST(test_config_dump_parse_roundtrip) {
    uint64_t seed = (uint64_t)time(NULL) ^ ((uint64_t)getpid() << 32);
    rng_t r;
    rng_seed(&r, seed);
    for (int rep = 0; rep < 300; rep++) {
        tcfg_t a = {0}, b = {0};
        char err[512];
        config_defaults(&s_spec, &a, err, sizeof err);
        free(a.name);
        a.name = s_rand_text(&r, 1);
        free(a.dir);
        a.dir = rng_below(&r, 4) ? s_rand_text(&r, 0) : strdup("");
        a.run_seed = rng_u64(&r);
        a.lr = s_rand_in(&r, 0, 10);
        a.momentum = s_rand_in(&r, 0, 1);
        a.polyak = rng_below(&r, 2);
        a.method = (int)rng_below(&r, 2);
        a.damping = 1e-8 + s_rand_in(&r, 0, 1e3);
        a.threads = 1 + (int)rng_below(&r, 256);
        a.batch_size = 1 + (int)rng_below(&r, 1u << 30);
        a.data_seed = rng_u64(&r) >> rng_below(&r, 64);
        char *text = config_to_text(&s_spec, &a, NULL, rep % 2 ? CONFIG_TEXT_COMMENTS : 0);
        ck_assert_ptr_nonnull(text);
        config_defaults(&s_spec, &b, err, sizeof err);
        int rc = config_parse_text(&s_spec, &b, text, "dump", err, sizeof err);
        ck_assert_msg(rc == 0, "seed %llu: %s\n%s", (unsigned long long)seed, err, text);
        ck_assert_msg(strcmp(a.name, b.name) == 0 && strcmp(a.dir, b.dir) == 0, "seed %llu: strings\n%s",
                      (unsigned long long)seed, text);
        ck_assert_msg(a.run_seed == b.run_seed && a.data_seed == b.data_seed && a.lr == b.lr &&
                          a.momentum == b.momentum && a.polyak == b.polyak && a.method == b.method &&
                          a.damping == b.damping && a.threads == b.threads && a.batch_size == b.batch_size,
                      "seed %llu: values differ\n%s", (unsigned long long)seed, text);
        free(text);
        config_release(&s_spec, &a);
        config_release(&s_spec, &b);
    }
}
END_TEST

/* The PS sends some sections in Welcome; the client parses them with its own
 * table. The dump has the documented shape. */
START_TEST(test_config_to_text_sections) {
    tcfg_t a = {0};
    char err[512];
    config_defaults(&s_spec, &a, err, sizeof err);
    a.lr = 0.05;
    static const char *const want_sections[] = {"optimizer", "kfac", NULL};
    char *text = config_to_text(&s_spec, &a, want_sections, 0);
    ck_assert_str_eq(text, "[optimizer]\nlr = 0.05\nmomentum = 0.9\npolyak = false\n\n"
                           "[kfac]\nmethod = cholesky\ndamping = 0.001\n");

    typedef struct client { double lr; int method; } client_t;
    static const config_option_t copts[] = {
        {"optimizer", "lr", OPT_DOUBLE, offsetof(client_t, lr), "1", 0, 10, "learning rate", NULL},
        {"kfac", "method", OPT_ENUM, offsetof(client_t, method), "eigen", 0, 0, "inverses", s_methods},
    };
    static const char *const shared[] = {"optimizer", "kfac", NULL};
    config_spec_t cs = {.program = "client", .opts = copts, .n_opts = 2, .partial_sections = shared};
    client_t cl = {0};
    ck_assert_int_eq(config_defaults(&cs, &cl, err, sizeof err), 0);
    ck_assert_msg(config_parse_text(&cs, &cl, text, "welcome", err, sizeof err) == 0, "%s", err);
    ck_assert(cl.lr == 0.05);
    ck_assert_int_eq(cl.method, 0);
    free(text);

    char *dump = NULL;
    size_t len = 0;
    FILE *f = open_memstream(&dump, &len);
    ck_assert_int_eq(config_dump(&s_spec, &a, f), 0);
    fclose(f);
    ck_assert_msg(strstr(dump, "# kfac-test configuration\n") == dump, "%s", dump);
    ck_assert_ptr_nonnull(strstr(dump, "\n[optimizer]\n# learning rate (double, between 0 and 10, default 0.1)\nlr = 0.05\n"));
    free(dump);

    /* --dump-config prints the effective configuration */
    dump = NULL;
    f = open_memstream(&dump, &len);
    char *av[] = {"kfac-test", "--dump-config", "--threads=5"};
    config_release(&s_spec, &a);
    ck_assert_int_eq(config_load(&s_spec, &a, 3, av, f, err, sizeof err), CONFIG_DUMP);
    fclose(f);
    ck_assert_ptr_nonnull(strstr(dump, "\nthreads = 5\n"));
    free(dump);
    config_release(&s_spec, &a);

    /* config_read: the same sources, the dump left to the caller (who checks first) */
    dump = NULL;
    f = open_memstream(&dump, &len);
    int want_dump = 0;
    ck_assert_int_eq(config_read(&s_spec, &a, 3, av, f, &want_dump, err, sizeof err), 0);
    fclose(f);
    ck_assert_int_eq(want_dump, 1);
    ck_assert_int_eq(a.threads, 5);
    ck_assert_msg(len == 0, "config_read printed: %s", dump);
    free(dump);
    config_release(&s_spec, &a);
    char *av_plain[] = {"kfac-test", "--threads=6"};
    ck_assert_int_eq(config_read(&s_spec, &a, 2, av_plain, stdout, &want_dump, err, sizeof err), 0);
    ck_assert_int_eq(want_dump, 0);
    ck_assert_int_eq(a.threads, 6);
    config_release(&s_spec, &a);

    char v[8];
    const config_option_t *o = config_find(&s_spec, "run", "name");
    ck_assert_ptr_nonnull(o);
    ck_assert_ptr_null(config_find(&s_spec, "run", "nope"));
    tcfg_t z = {0};
    z.name = "a long name";
    ck_assert_int_eq(config_format_value(o, &z, v, sizeof v), -ENOSPC);
    z.name = "short";
    ck_assert_int_eq(config_format_value(o, &z, v, sizeof v), 5);
}
END_TEST

/* Mistakes in the table itself are reported, not crashed on. */
START_TEST(test_config_check_spec) {
    char err[512];
    ck_assert_int_eq(config_check_spec(&s_spec, err, sizeof err), 0);
    static const config_option_t dup[] = {
        {"run", "seed", OPT_UINT64, offsetof(tcfg_t, run_seed), "1", 0, 0, "a", NULL},
        {"run", "seed", OPT_UINT64, offsetof(tcfg_t, data_seed), "1", 0, 0, "b", NULL},
    };
    config_spec_t sp = {.program = "x", .opts = dup, .n_opts = 2};
    ck_assert_int_eq(config_check_spec(&sp, err, sizeof err), -EINVAL);
    ck_assert_str_eq(err, "config table: [run] seed appears twice");
    static const config_option_t shared_field[] = {
        {"run", "a", OPT_INT, offsetof(tcfg_t, threads), "1", 0, 0, "a", NULL},
        {"run", "b", OPT_INT, offsetof(tcfg_t, threads), "1", 0, 0, "b", NULL},
    };
    sp.opts = shared_field;
    ck_assert_int_eq(config_check_spec(&sp, err, sizeof err), -EINVAL);
    ck_assert_str_eq(err, "config table: [run] a and [run] b share a field");
    static const config_option_t bad_default[] = {
        {"run", "a", OPT_INT, offsetof(tcfg_t, threads), "0", 1, 8, "a", NULL},
    };
    sp.opts = bad_default;
    sp.n_opts = 1;
    ck_assert_int_eq(config_check_spec(&sp, err, sizeof err), -EINVAL);
    ck_assert_str_eq(err, "config table: [run] a: default: expected an integer between 1 and 8, got '0'");
    static const config_option_t no_names[] = {
        {"run", "a", OPT_ENUM, offsetof(tcfg_t, method), "x", 0, 0, "a", NULL},
    };
    sp.opts = no_names;
    ck_assert_int_eq(config_check_spec(&sp, err, sizeof err), -EINVAL);
    ck_assert_str_eq(err, "config table: [run] a: an enum needs names");
    static const config_option_t bad_name[] = {
        {"run", "a.b", OPT_INT, offsetof(tcfg_t, threads), "0", 0, 0, "a", NULL},
    };
    sp.opts = bad_name;
    ck_assert_int_eq(config_check_spec(&sp, err, sizeof err), -EINVAL);
    /* config_load refuses a broken table before touching anything */
    tcfg_t c = {0};
    char *av[] = {"x"};
    ck_assert_int_eq(config_load(&sp, &c, 1, av, stdout, err, sizeof err), -EINVAL);
}
END_TEST

Suite *make_suite(void) {
    Suite *s = suite_create("config");
    TCase *tc = tcase_create("core");
    tcase_add_test(tc, test_config_defaults_from_table);
    tcase_add_test(tc, test_config_precedence_defaults_file_cli);
    tcase_add_test(tc, test_config_cli_forms);
    tcase_add_test(tc, test_config_value_errors);
    tcase_add_test(tc, test_config_syntax_errors);
    tcase_add_test(tc, test_config_unknown_key_suggestion);
    tcase_add_test(tc, test_config_sections_not_owned_ignored);
    tcase_add_test(tc, test_config_comments_and_quotes);
    tcase_add_test(tc, test_config_help_lists_every_option);
    tcase_add_test(tc, test_config_dump_parse_roundtrip);
    tcase_add_test(tc, test_config_to_text_sections);
    tcase_add_test(tc, test_config_check_spec);
    tcase_add_test(tc, test_config_version);
    suite_add_tcase(s, tc);
    return s;
}
