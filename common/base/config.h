/* common/base/config.h — declarative configuration: one option table per daemon
 * drives parsing, --help and the configuration dump.
 *
 * Sources, later wins: the table's defaults < an INI file (--config PATH) <
 * environment variables named in the spec's `env` list (the settings that
 * differ per host, e.g. KFAC_PS for [cluster] ps; an empty variable counts
 * as unset) < command-line overrides (--key value, --key=value,
 * --section.key=value, --section.key value; '-' and '_' are the same in
 * command-line names; a bare --key works when the key is unique in the
 * table; a boolean given without a value, --flag, means true: it takes the
 * next argument as its value only when that does not start with "--").
 *
 * INI syntax
 *     # comment            ; comment
 *     [optimizer]
 *     lr = 0.05            # inline comments need a space before '#' or ';'
 *     name = "a value with # or ; or surrounding spaces"   (\" \\ \n \t escapes)
 *
 * Sections. A daemon owns the sections its table names: there, unknown keys
 * are errors with a "did you mean" suggestion (duplicate keys too). Other
 * sections of a run file (config_run_sections(), or the table's own list)
 * belong to other daemons and are skipped, so every daemon can read the same
 * run file. A section listed in `partial_sections` is shared: the keys the
 * table knows are read and the others are skipped. Sections nobody knows
 * are errors (typos).
 *
 * Storage. Each option writes one field of the caller's struct at `offset`:
 *     OPT_INT    int          OPT_UINT64 uint64_t     OPT_DOUBLE double
 *     OPT_BOOL   bool         OPT_STRING char * (malloc'd, owned by the struct;
 *                                        free with config_release())
 *     OPT_ENUM   int          (index into `names`)
 * Bounds: numbers are checked against [min, max] when min < max (use
 * INFINITY / INT_MAX for a one-sided bound); strings against a length of at
 * most max bytes when max > 0 and at least min when min > 0.
 *
 * Example table entries (positional entries must spell out every field,
 * the trailing `names` included, or -Wextra complains; the CONFIG_OPT and
 * CONFIG_ENUM macros below do it for you):
 *     { "optimizer", "lr", OPT_DOUBLE, offsetof(struct cfg, lr), "0.1", 0, 10,
 *       "learning rate", NULL },
 *     CONFIG_OPT("worker", "threads", OPT_INT, struct cfg, threads, "1", 1, 256,
 *                "compute threads"),
 *     CONFIG_ENUM("kfac", "method", struct cfg, method, "cholesky", s_methods,
 *                 "how inverses are computed"),
 * with static const char *const s_methods[] = { "cholesky", "eigen", NULL };
 *
 * Errors are one line naming the source, line and key and what was expected:
 *     run.ini:12: key 'lr': expected a number between 0 and 10, got 'abc'
 *     run.ini:7: unknown key 'lrr' in [optimizer] (did you mean 'lr'?)
 *     command line: option '--lr': expected a number between 0 and 10, got 'x'
 *
 * Thread safety: none needed; configuration is read once at start-up (and
 * when a client parses the config text of a Welcome message).
 */
#ifndef KFAC_CONFIG_H
#define KFAC_CONFIG_H

#include <stddef.h>
#include <stdio.h>

typedef enum {
    OPT_INT = 0,
    OPT_UINT64,
    OPT_DOUBLE,
    OPT_BOOL,
    OPT_STRING,
    OPT_ENUM,
} config_type_t;

typedef struct config_option {
    const char *section;      /* "optimizer" */
    const char *key;          /* "lr" */
    config_type_t type;
    size_t offset;            /* offsetof(struct cfg, field) */
    const char *def;          /* default, as it would be written in a file */
    double min, max;          /* bounds, see above */
    const char *help;         /* one line, for --help and the dump */
    const char *const *names; /* OPT_ENUM: allowed names, NULL-terminated */
} config_option_t;

/* An environment variable that sets one option (after the file, before
 * the command line). */
typedef struct config_env {
    const char *var;   /* "KFAC_PS" */
    const char *name;  /* the option it sets, "cluster.ps" (must be in the table) */
} config_env_t;

typedef struct config_spec {
    const char *program;                  /* "kfac-worker", for --help */
    const char *summary;                  /* one line under the usage line */
    const config_option_t *opts;          /* the table (borrowed, static) */
    size_t n_opts;
    const char *const *partial_sections;  /* NULL-terminated, or NULL */
    const char *const *known_sections;    /* NULL-terminated; NULL: config_run_sections() */
    const config_env_t *env;              /* environment variables (borrowed), or NULL */
    size_t n_env;
    const char *epilogue;                 /* printed at the end of --help (exit codes...), or NULL */
} config_spec_t;

#define CONFIG_COUNT(table) (sizeof(table) / sizeof((table)[0]))

/* Table entries with every field named. */
#define CONFIG_OPT(sec, k, t, st, field, d, lo, hi, h)                                  \
    { .section = (sec), .key = (k), .type = (t), .offset = offsetof(st, field), .def = (d), \
      .min = (lo), .max = (hi), .help = (h), .names = NULL }
#define CONFIG_ENUM(sec, k, st, field, d, nm, h)                                          \
    { .section = (sec), .key = (k), .type = OPT_ENUM, .offset = offsetof(st, field),       \
      .def = (d), .min = 0, .max = 0, .help = (h), .names = (nm) }

/* config_load() results besides 0 and -errno. */
#define CONFIG_HELP 1  /* --help (or --version) was printed: exit 0 */
#define CONFIG_DUMP 2  /* --dump-config printed the configuration: exit 0 */

/* Exit statuses of every kfac program (sysexits.h values where one fits).
 * The systemd units list RestartPreventExitStatus=2 78: neither a usage
 * error nor a configuration error goes away by restarting. */
#define CONFIG_EXIT_OK 0
#define CONFIG_EXIT_FAILURE 1  /* runtime failure: port busy, diverged, out of memory, peer refused */
#define CONFIG_EXIT_USAGE 2    /* bad option or bad value in the configuration file */
#define CONFIG_EXIT_CONFIG 78  /* EX_CONFIG: a start-up input is missing, unreadable or malformed
                                * (model file, data file), or the model and data disagree */

/* The exit status for a start-up step that failed with the negative errno
 * rc, under the convention every loader follows (common/nn/data.h,
 * common/nn/nn.h): -ENOENT, -EACCES, -EPERM, -ENOTDIR, -EISDIR, -ELOOP,
 * -ENAMETOOLONG (the file cannot be opened) and -EINVAL (its contents are
 * malformed or do not fit the model) are CONFIG_EXIT_CONFIG; anything else
 * (-ENOMEM, -EIO, -EADDRINUSE, ...) and rc >= 0 is CONFIG_EXIT_FAILURE. */
int config_exit_status(int rc);

/* config_to_text() flags. */
#define CONFIG_TEXT_COMMENTS 1 /* a header line and each option's help as a comment */

/* The sections of a kfac run file: run model data optimizer kfac cluster
 * ps worker statsd invertd security log metrics checkpoint experiment.
 * NULL-terminated, static. */
const char *const *config_run_sections(void);

/* Check the table itself (programmer errors): non-empty names, no duplicate
 * section.key, enum names present, every default valid for its option.
 * Returns 0 or -EINVAL with the reason in err. config_load() calls it. */
int config_check_spec(const config_spec_t *spec, char *err, size_t err_len);

/* Everything a daemon's main() needs: check the spec, set the defaults,
 * read --config PATH if given, apply the environment (config_apply_env),
 * apply the other command-line options in order. argv[0] is the program name and is skipped. --help prints
 * config_help() to out and returns CONFIG_HELP; --dump-config prints the
 * effective configuration (after the file and the other options) to out and
 * returns CONFIG_DUMP. Returns 0, CONFIG_HELP, CONFIG_DUMP, or a negative
 * errno with the message in err. On error the struct may hold a mix of
 * sources; call config_release() in every case. */
int config_load(const config_spec_t *spec, void *cfg, int argc, char **argv, FILE *out, char *err,
                size_t err_len);

/* config_load() without the dump: the same sources, --help and --version,
 * but --dump-config only sets *dump (1; else 0) and prints nothing, so
 * that the caller can run its checks across options first and print the
 * configuration with config_dump() only when they pass (--dump-config then
 * rejects what a start would). dump may be NULL. Returns 0, CONFIG_HELP or
 * a negative errno with the message in err. */
int config_read(const config_spec_t *spec, void *cfg, int argc, char **argv, FILE *out, int *dump, char *err,
                size_t err_len);

/* Set every option of the table to its default (strings are allocated).
 * Returns 0, -EINVAL (a bad default, see config_check_spec) or -ENOMEM. */
int config_defaults(const config_spec_t *spec, void *cfg, char *err, size_t err_len);

/* Apply INI text; origin names it in messages ("run.ini", "welcome"). Keys
 * not in the text keep their values. Returns 0, -EINVAL or -ENOMEM. */
int config_parse_text(const config_spec_t *spec, void *cfg, const char *text, const char *origin,
                      char *err, size_t err_len);

/* Read a file and config_parse_text() it with the path as origin. Returns 0,
 * -errno from opening/reading (message says so), -EINVAL or -ENOMEM. */
int config_parse_file(const config_spec_t *spec, void *cfg, const char *path, char *err, size_t err_len);

/* Set one option by name ("key" when unique, or "section.key") from text.
 * origin is used in messages. Returns 0, -ENOENT (unknown name, with a
 * suggestion), -EINVAL (bad value, ambiguous name) or -ENOMEM. */
int config_set(const config_spec_t *spec, void *cfg, const char *name, const char *value,
               const char *origin, char *err, size_t err_len);

/* Apply the spec's environment variables in list order: each one that is
 * set and not empty sets its option as config_set() would, with
 * "environment variable VAR" as the origin in messages. Returns 0, or the
 * first error (-EINVAL bad value, -ENOENT an entry naming no option,
 * -ENOMEM) with the message in err. */
int config_apply_env(const config_spec_t *spec, void *cfg, char *err, size_t err_len);

/* Apply command-line overrides argv[1..argc-1]; --config and its argument,
 * --help and --dump-config are skipped (config_load handles them). Returns 0
 * or a negative errno with the message in err. */
int config_parse_args(const config_spec_t *spec, void *cfg, int argc, char **argv, char *err,
                      size_t err_len);

/* Print the usage line, summary and every option with its type, bounds,
 * default and help text, grouped by section, to f. */
void config_help(const config_spec_t *spec, FILE *f);

/* The configuration as INI text that config_parse_text() reads back to the
 * same values: every option of the listed sections (NULL: all sections), in
 * table order grouped by section. Numbers are written in their shortest
 * exact form. flags: CONFIG_TEXT_COMMENTS. Returns a malloc'd string (caller
 * frees) or NULL when out of memory. */
char *config_to_text(const config_spec_t *spec, const void *cfg, const char *const *sections, int flags);

/* config_to_text(spec, cfg, NULL, CONFIG_TEXT_COMMENTS) to f. Returns 0,
 * -ENOMEM or -EIO. */
int config_dump(const config_spec_t *spec, const void *cfg, FILE *f);

/* Write the value of option o in cfg as it would appear in a file
 * (unquoted). Returns the length, or -ENOSPC if it did not fit in len. */
int config_format_value(const config_option_t *o, const void *cfg, char *buf, size_t len);

/* The option (section, key), or NULL. */
const config_option_t *config_find(const config_spec_t *spec, const char *section, const char *key);

/* Free the strings the struct owns and set them to NULL. Safe to call twice
 * and on a struct that was zeroed but never filled. */
void config_release(const config_spec_t *spec, void *cfg);

#endif
