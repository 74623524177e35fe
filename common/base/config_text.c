/* common/base/config_text.c — the config module's text helpers
 * (config_int.h): how options, types and bounds are named in messages and
 * --help, and the edit distance behind "did you mean ...". */
#include "common/base/config_int.h"

#include <ctype.h>
#include <errno.h>
#include <inttypes.h>
#include <limits.h>
#include <math.h>
#include <stdarg.h>
#include <stdbool.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

const char *config_txt_type_name(const config_option_t *o) {
    switch (o->type) {
    case OPT_INT: return "int";
    case OPT_UINT64: return "uint64";
    case OPT_DOUBLE: return "double";
    case OPT_BOOL: return "bool";
    case OPT_STRING: return "string";
    case OPT_ENUM: return "enum";
    }
    return "?";
}

/* Shortest %g form that reads back to the same double; whole numbers below
 * 1e15 are written without an exponent ("10", not "1e+01"). */
void config_txt_fmt_double(double v, char *buf, size_t len) {
    int prec = 1;
    for (; prec <= 17; prec++) {
        int n = snprintf(buf, len, "%.*g", prec, v);
        if (n < 0 || (size_t)n >= len || strtod(buf, NULL) == v) break; /* too small a buffer: the best it holds */
    }
    if (strchr(buf, 'e') && fabs(v) >= 1 && fabs(v) < 1e15)
        for (; prec <= 17 && strchr(buf, 'e'); prec++) {
            int n = snprintf(buf, len, "%.*g", prec, v);
            if (n < 0 || (size_t)n >= len) break;
        }
}

void *config_txt_field(void *cfg, const config_option_t *o) { return (char *)cfg + o->offset; }
const void *config_txt_cfield(const void *cfg, const config_option_t *o) { return (const char *)cfg + o->offset; }

/* Is the number bound on each side active? */
int config_txt_has_min(const config_option_t *o) {
    if (!(o->min < o->max)) return 0;
    if (o->type == OPT_UINT64) return o->min > 0;
    if (o->type == OPT_INT) return o->min > (double)INT_MIN;
    return isfinite(o->min);
}
int config_txt_has_max(const config_option_t *o) {
    if (!(o->min < o->max)) return 0;
    if (o->type == OPT_UINT64) return o->max < 18446744073709551615.0;
    if (o->type == OPT_INT) return o->max < (double)INT_MAX;
    return isfinite(o->max);
}

/* "between 0 and 10", ">= 1", "<= 5" or "" (with a leading space when set). */
void config_txt_bounds_text(const config_option_t *o, char *buf, size_t len) {
    char a[40], b[40];
    config_txt_fmt_double(o->min, a, sizeof a);
    config_txt_fmt_double(o->max, b, sizeof b);
    int lo = config_txt_has_min(o), hi = config_txt_has_max(o);
    if (lo && hi) snprintf(buf, len, " between %s and %s", a, b);
    else if (lo) snprintf(buf, len, " >= %s", a);
    else if (hi) snprintf(buf, len, " <= %s", b);
    else buf[0] = 0;
}

/* What a value of this option must look like: "a number between 0 and 10". */
void config_txt_expected(const config_option_t *o, char *buf, size_t len) {
    char bounds[100];
    config_txt_bounds_text(o, bounds, sizeof bounds);
    switch (o->type) {
    case OPT_INT: snprintf(buf, len, "an integer%s", bounds); break;
    case OPT_UINT64: snprintf(buf, len, "a non-negative integer%s", bounds); break;
    case OPT_DOUBLE: snprintf(buf, len, "a number%s", bounds); break;
    case OPT_BOOL: snprintf(buf, len, "true or false (or yes/no, on/off, 1/0)"); break;
    case OPT_ENUM: {
        size_t n = (size_t)snprintf(buf, len, "one of ");
        for (size_t i = 0; o->names && o->names[i] && n < len; i++)
            n += (size_t)snprintf(buf + n, len - n, "%s%s", i ? ", " : "", o->names[i]);
        break;
    }
    case OPT_STRING:
        if (o->max > 0 && o->min > 0)
            snprintf(buf, len, "a string of %.0f to %.0f bytes", o->min, o->max);
        else if (o->max > 0)
            snprintf(buf, len, "a string of at most %.0f bytes", o->max);
        else if (o->min > 0)
            snprintf(buf, len, "a string of at least %.0f bytes", o->min);
        else
            snprintf(buf, len, "a string");
        break;
    }
}

/* Case-insensitive Levenshtein distance, treating '-' and '_' as equal;
 * long strings count as far apart. */
int config_txt_norm_char(int c) { return c == '-' ? '_' : tolower((unsigned char)c); }

size_t config_txt_distance(const char *a, const char *b) {
    size_t na = strlen(a), nb = strlen(b);
    if (na > 63 || nb > 63) return SIZE_MAX;
    size_t prev[64], cur[64];
    for (size_t j = 0; j <= nb; j++) prev[j] = j;
    for (size_t i = 1; i <= na; i++) {
        cur[0] = i;
        for (size_t j = 1; j <= nb; j++) {
            size_t sub = prev[j - 1] + (config_txt_norm_char(a[i - 1]) != config_txt_norm_char(b[j - 1]));
            size_t del = prev[j] + 1, ins = cur[j - 1] + 1;
            cur[j] = sub < del ? (sub < ins ? sub : ins) : (del < ins ? del : ins);
        }
        memcpy(prev, cur, (nb + 1) * sizeof prev[0]);
    }
    return prev[nb];
}

/* Close enough to suggest: one edit for short words, up to three for long. */
int config_txt_close(const char *typed, size_t d) {
    size_t n = strlen(typed);
    size_t limit = n <= 3 ? 1 : n <= 6 ? 2 : 3;
    return d <= limit;
}

/* Names compare with '-' == '_' on the command line; exact in files. */
int config_txt_name_eq(const char *a, const char *b, int loose) {
    if (!loose) return strcmp(a, b) == 0;
    for (; *a && *b; a++, b++)
        if ((*a == '-' ? '_' : *a) != (*b == '-' ? '_' : *b)) return 0;
    return *a == *b;
}

int config_txt_in_list(const char *const *list, const char *name) {
    for (size_t i = 0; list && list[i]; i++)
        if (strcmp(list[i], name) == 0) return 1;
    return 0;
}

int config_txt_section_owned(const config_spec_t *spec, const char *name) {
    for (size_t i = 0; i < spec->n_opts; i++)
        if (strcmp(spec->opts[i].section, name) == 0) return 1;
    return 0;
}

const char *const *config_txt_known(const config_spec_t *spec) {
    return spec->known_sections ? spec->known_sections : config_run_sections();
}

/* Quote a bad value for a message, shortened. */
void config_txt_show(const char *v, char *buf, size_t len) {
    size_t n = strlen(v);
    if (n > CONFIG_SHOW_MAX) snprintf(buf, len, "%.*s...", CONFIG_SHOW_MAX, v);
    else snprintf(buf, len, "%s", v);
}

/* The sections of a run file (config.h); here, below config.c and
 * config_help.c, which both use it. */
const char *const *config_run_sections(void) {
    static const char *const sections[] = {
        "run", "model", "data", "optimizer", "kfac", "cluster", "ps", "worker", "statsd",
        "invertd", "security", "log", "metrics", "checkpoint", "experiment", NULL,
    };
    return sections;
}

/* One option's value as text (config.h); here for the same reason. */
int config_format_value(const config_option_t *o, const void *cfg, char *buf, size_t len) {
    const void *f = config_txt_cfield(cfg, o);
    int n = 0;
    switch (o->type) {
    case OPT_INT: n = snprintf(buf, len, "%d", *(const int *)f); break;
    case OPT_UINT64: n = snprintf(buf, len, "%" PRIu64, *(const uint64_t *)f); break;
    case OPT_DOUBLE: {
        char tmp[40];
        config_txt_fmt_double(*(const double *)f, tmp, sizeof tmp);
        n = snprintf(buf, len, "%s", tmp);
        break;
    }
    case OPT_BOOL: n = snprintf(buf, len, "%s", *(const bool *)f ? "true" : "false"); break;
    case OPT_ENUM: {
        int i = *(const int *)f, count = 0;
        while (o->names && o->names[count]) count++;
        n = snprintf(buf, len, "%s", i >= 0 && i < count ? o->names[i] : "?");
        break;
    }
    case OPT_STRING: {
        const char *s = *(char *const *)f;
        n = snprintf(buf, len, "%s", s ? s : "");
        break;
    }
    }
    if (n < 0 || (size_t)n >= len) return -ENOSPC;
    return n;
}
