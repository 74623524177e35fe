/* common/base/config.c — declarative configuration (see common/base/config.h): INI
 * files and command-line overrides, from one table (--help and the dump:
 * config_help.c; shared text helpers: config_text.c).
 *
 * Values are parsed into a small union first (s_parse) and stored only when
 * valid (s_store), so a bad value never half-overwrites a field. Error
 * messages are composed here in one place per kind, so the tests can assert
 * their exact text.
 */
#include "common/base/config.h"
#include "common/base/config_int.h"
#include "common/base/version.h"

#include <ctype.h>
#include <errno.h>
#include <inttypes.h>
#include <limits.h>
#include <math.h>
#include <stdarg.h>
#include <stdbool.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#define S_MAX_FILE_BYTES (16u << 20) /* a config file larger than this is a mistake */

typedef union s_value {
    int i;
    uint64_t u;
    double d;
    bool b;
    char *s;
} s_value_t;

static void s_err(char *err, size_t err_len, const char *fmt, ...) __attribute__((format(printf, 3, 4)));
static void s_err(char *err, size_t err_len, const char *fmt, ...) {
    if (!err || err_len == 0) return;
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(err, err_len, fmt, ap);
    va_end(ap);
}


/* ---- values ------------------------------------------------------------- */

static int s_parse_bool(const char *t, bool *out) {
    static const char *const yes[] = {"true", "yes", "on", "1", NULL};
    static const char *const no[] = {"false", "no", "off", "0", NULL};
    for (size_t i = 0; yes[i]; i++)
        if (strcasecmp(t, yes[i]) == 0) { *out = true; return 0; }
    for (size_t i = 0; no[i]; i++)
        if (strcasecmp(t, no[i]) == 0) { *out = false; return 0; }
    return -EINVAL;
}

/* Parse text for option o into v. On failure writes "expected ..., got '...'"
 * into why and returns -EINVAL (or -ENOMEM). Strings are malloc'd into v->s. */
static int s_parse(const config_option_t *o, const char *t, s_value_t *v, char *why, size_t why_len) {
    char *end = NULL;
    int ok = 0;
    memset(v, 0, sizeof *v);
    switch (o->type) {
    case OPT_INT: {
        errno = 0;
        long x = strtol(t, &end, 10);
        ok = *t && !*end && errno == 0 && x >= INT_MIN && x <= INT_MAX && !isspace((unsigned char)*t);
        if (ok && o->min < o->max && ((double)x < o->min || (double)x > o->max)) ok = 0;
        if (ok) v->i = (int)x;
        break;
    }
    case OPT_UINT64: {
        errno = 0;
        unsigned long long x = strtoull(t, &end, 10);
        ok = *t && !*end && errno == 0 && isdigit((unsigned char)*t);
        if (ok && o->min < o->max && ((double)x < o->min || (double)x > o->max)) ok = 0;
        if (ok) v->u = (uint64_t)x;
        break;
    }
    case OPT_DOUBLE: {
        errno = 0;
        double x = strtod(t, &end);
        ok = *t && !*end && errno != ERANGE && isfinite(x) && !isspace((unsigned char)*t);
        if (ok && o->min < o->max && (x < o->min || x > o->max)) ok = 0;
        if (ok) v->d = x;
        break;
    }
    case OPT_BOOL:
        ok = s_parse_bool(t, &v->b) == 0;
        break;
    case OPT_ENUM:
        for (int i = 0; o->names && o->names[i]; i++)
            if (strcmp(o->names[i], t) == 0) {
                v->i = i;
                ok = 1;
                break;
            }
        break;
    case OPT_STRING: {
        size_t n = strlen(t);
        ok = !(o->max > 0 && (double)n > o->max) && !(o->min > 0 && (double)n < o->min);
        if (ok) {
            v->s = strdup(t);
            if (!v->s) {
                s_err(why, why_len, "out of memory");
                return -ENOMEM;
            }
        }
        break;
    }
    }
    if (ok) return 0;
    char expected[400], shown[CONFIG_SHOW_MAX + 8];
    config_txt_expected(o, expected, sizeof expected);
    config_txt_show(t, shown, sizeof shown);
    if (o->type == OPT_ENUM) {
        const char *best = NULL;
        size_t best_d = SIZE_MAX;
        for (size_t i = 0; o->names && o->names[i]; i++) {
            size_t d = config_txt_distance(t, o->names[i]);
            if (d < best_d) { best_d = d; best = o->names[i]; }
        }
        if (best && *t && config_txt_close(t, best_d)) {
            s_err(why, why_len, "expected %s, got '%s' (did you mean '%s'?)", expected, shown, best);
            return -EINVAL;
        }
    }
    s_err(why, why_len, "expected %s, got '%s'", expected, shown);
    return -EINVAL;
}

static void s_store(const config_option_t *o, void *cfg, s_value_t *v) {
    void *f = config_txt_field(cfg, o);
    switch (o->type) {
    case OPT_INT:
    case OPT_ENUM: *(int *)f = v->i; break;
    case OPT_UINT64: *(uint64_t *)f = v->u; break;
    case OPT_DOUBLE: *(double *)f = v->d; break;
    case OPT_BOOL: *(bool *)f = v->b; break;
    case OPT_STRING:
        free(*(char **)f);
        *(char **)f = v->s;
        v->s = NULL;
        break;
    }
}


/* ---- the table ---------------------------------------------------------- */

static int s_valid_name(const char *s) {
    if (!s || !*s) return 0;
    for (; *s; s++)
        if (!isalnum((unsigned char)*s) && *s != '_' && *s != '-') return 0;
    return 1;
}

const config_option_t *config_find(const config_spec_t *spec, const char *section, const char *key) {
    for (size_t i = 0; i < spec->n_opts; i++)
        if (strcmp(spec->opts[i].section, section) == 0 && strcmp(spec->opts[i].key, key) == 0)
            return &spec->opts[i];
    return NULL;
}

int config_check_spec(const config_spec_t *spec, char *err, size_t err_len) {
    if (!spec || (!spec->opts && spec->n_opts)) {
        s_err(err, err_len, "config table: no options");
        return -EINVAL;
    }
    for (size_t i = 0; i < spec->n_opts; i++) {
        const config_option_t *o = &spec->opts[i];
        if (!s_valid_name(o->section) || !s_valid_name(o->key)) {
            s_err(err, err_len, "config table entry %zu: section and key must be non-empty names of letters, "
                  "digits, '_' and '-'", i);
            return -EINVAL;
        }
        if ((int)o->type < OPT_INT || o->type > OPT_ENUM) {
            s_err(err, err_len, "config table: [%s] %s: unknown type %d", o->section, o->key, (int)o->type);
            return -EINVAL;
        }
        if (!o->help || !*o->help) {
            s_err(err, err_len, "config table: [%s] %s: no help text", o->section, o->key);
            return -EINVAL;
        }
        if (o->type == OPT_ENUM && (!o->names || !o->names[0])) {
            s_err(err, err_len, "config table: [%s] %s: an enum needs names", o->section, o->key);
            return -EINVAL;
        }
        if (!o->def && o->type != OPT_STRING) {
            s_err(err, err_len, "config table: [%s] %s: no default", o->section, o->key);
            return -EINVAL;
        }
        for (size_t j = 0; j < i; j++) {
            const config_option_t *p = &spec->opts[j];
            if (strcmp(p->section, o->section) == 0 && strcmp(p->key, o->key) == 0) {
                s_err(err, err_len, "config table: [%s] %s appears twice", o->section, o->key);
                return -EINVAL;
            }
            if (p->offset == o->offset) {
                s_err(err, err_len, "config table: [%s] %s and [%s] %s share a field", p->section, p->key,
                      o->section, o->key);
                return -EINVAL;
            }
        }
        s_value_t v;
        char why[512];
        int rc = s_parse(o, o->def ? o->def : "", &v, why, sizeof why);
        if (rc < 0) {
            s_err(err, err_len, "config table: [%s] %s: default: %s", o->section, o->key, why);
            return rc;
        }
        if (o->type == OPT_STRING) free(v.s);
    }
    for (size_t i = 0; spec->env && i < spec->n_env; i++) {
        const config_env_t *e = &spec->env[i];
        const char *dot = e->name ? strchr(e->name, '.') : NULL;
        char sec[128];
        if (!e->var || !*e->var || !dot || (size_t)(dot - e->name) >= sizeof sec) {
            s_err(err, err_len, "config table: environment entry %zu: needs a variable and a section.key", i);
            return -EINVAL;
        }
        snprintf(sec, sizeof sec, "%.*s", (int)(dot - e->name), e->name);
        if (!config_find(spec, sec, dot + 1)) {
            s_err(err, err_len, "config table: environment variable %s sets %s, which is not in the table", e->var,
                  e->name);
            return -EINVAL;
        }
    }
    return 0;
}

int config_defaults(const config_spec_t *spec, void *cfg, char *err, size_t err_len) {
    for (size_t i = 0; i < spec->n_opts; i++) {
        const config_option_t *o = &spec->opts[i];
        s_value_t v;
        char why[512];
        int rc = s_parse(o, o->def ? o->def : "", &v, why, sizeof why);
        if (rc < 0) {
            s_err(err, err_len, "config table: [%s] %s: default: %s", o->section, o->key, why);
            return rc;
        }
        s_store(o, cfg, &v);
    }
    return 0;
}

void config_release(const config_spec_t *spec, void *cfg) {
    if (!spec || !cfg) return;
    for (size_t i = 0; i < spec->n_opts; i++) {
        const config_option_t *o = &spec->opts[i];
        if (o->type != OPT_STRING) continue;
        char **p = config_txt_field(cfg, o);
        free(*p);
        *p = NULL;
    }
}

/* ---- INI text ----------------------------------------------------------- */

static char *s_trim(char *s) {
    while (isspace((unsigned char)*s)) s++;
    size_t n = strlen(s);
    while (n > 0 && isspace((unsigned char)s[n - 1])) s[--n] = 0;
    return s;
}

/* Is the rest of a line empty or a comment? */
static int s_rest_blank(const char *s) {
    while (isspace((unsigned char)*s)) s++;
    return *s == 0 || *s == '#' || *s == ';';
}

/* Decode the value part of "key = value" in place: quoted with escapes, or
 * bare up to an inline comment. Returns 0 or -EINVAL with a reason. */
static int s_ini_value(char *raw, char **out, char *why, size_t why_len) {
    char *s = raw;
    while (isspace((unsigned char)*s)) s++;
    if (*s == '"') {
        char *w = s, *r = s + 1;
        for (;;) {
            if (*r == 0) {
                s_err(why, why_len, "unterminated quoted value");
                return -EINVAL;
            }
            if (*r == '"') break;
            if (*r == '\\') {
                r++;
                switch (*r) {
                case '"': *w++ = '"'; break;
                case '\\': *w++ = '\\'; break;
                case 'n': *w++ = '\n'; break;
                case 't': *w++ = '\t'; break;
                case 'r': *w++ = '\r'; break;
                default:
                    s_err(why, why_len, "unknown escape '\\%c' in quoted value (use \\\" \\\\ \\n \\t \\r)",
                          *r ? *r : ' ');
                    return -EINVAL;
                }
                r++;
                continue;
            }
            *w++ = *r++;
        }
        if (!s_rest_blank(r + 1)) {
            s_err(why, why_len, "text after the closing quote");
            return -EINVAL;
        }
        *w = 0;
        *out = s;
        return 0;
    }
    /* bare: a '#' or ';' at the start or after a space begins a comment */
    for (char *p = s; *p; p++)
        if ((*p == '#' || *p == ';') && (p == s || isspace((unsigned char)p[-1]))) {
            *p = 0;
            break;
        }
    *out = s_trim(s);
    return 0;
}

/* Suggest a key for `key` typed in [section]: a close key of the same
 * section, else the same key in another section. Writes " (did you mean
 * ...?)" or "". */
static void s_suggest_key(const config_spec_t *spec, const char *section, const char *key, char *buf,
                          size_t len) {
    const config_option_t *best = NULL;
    size_t best_d = SIZE_MAX;
    for (size_t i = 0; i < spec->n_opts; i++) {
        const config_option_t *o = &spec->opts[i];
        if (strcmp(o->section, section) != 0) continue;
        size_t d = config_txt_distance(key, o->key);
        if (d < best_d) { best_d = d; best = o; }
    }
    if (best && config_txt_close(key, best_d)) {
        snprintf(buf, len, " (did you mean '%s'?)", best->key);
        return;
    }
    for (size_t i = 0; i < spec->n_opts; i++)
        if (strcmp(spec->opts[i].key, key) == 0) {
            snprintf(buf, len, " (did you mean '%s' in [%s]?)", key, spec->opts[i].section);
            return;
        }
    buf[0] = 0;
}

static void s_suggest_section(const config_spec_t *spec, const char *name, char *buf, size_t len) {
    const char *best = NULL;
    size_t best_d = SIZE_MAX;
    const char *const *known = config_txt_known(spec);
    for (size_t i = 0; known[i]; i++) {
        size_t d = config_txt_distance(name, known[i]);
        if (d < best_d) { best_d = d; best = known[i]; }
    }
    for (size_t i = 0; i < spec->n_opts; i++) {
        size_t d = config_txt_distance(name, spec->opts[i].section);
        if (d < best_d) { best_d = d; best = spec->opts[i].section; }
    }
    if (best && config_txt_close(name, best_d)) snprintf(buf, len, " (did you mean [%s]?)", best);
    else buf[0] = 0;
}

enum { S_SEC_NONE, S_SEC_OWNED, S_SEC_PARTIAL, S_SEC_SKIP };

int config_parse_text(const config_spec_t *spec, void *cfg, const char *text, const char *origin,
                      char *err, size_t err_len) {
    if (!text) text = "";
    if (!origin) origin = "config";
    int rc = 0;
    int *set_on = calloc(spec->n_opts ? spec->n_opts : 1, sizeof *set_on); /* line that set each option */
    char *line = NULL;
    char section[128] = "";
    int mode = S_SEC_NONE;
    if (!set_on) {
        s_err(err, err_len, "%s: out of memory", origin);
        return -ENOMEM;
    }
    const char *p = text;
    for (int lineno = 1; *p; lineno++) {
        const char *eol = strchr(p, '\n');
        size_t n = eol ? (size_t)(eol - p) : strlen(p);
        free(line);
        line = malloc(n + 1);
        if (!line) {
            s_err(err, err_len, "%s: out of memory", origin);
            rc = -ENOMEM;
            break;
        }
        memcpy(line, p, n);
        line[n] = 0;
        p = eol ? eol + 1 : p + n;
        char *s = s_trim(line);
        if (*s == 0 || *s == '#' || *s == ';') continue;

        if (*s == '[') {
            char *close = strchr(s, ']');
            if (!close) {
                s_err(err, err_len, "%s:%d: section header without ']'", origin, lineno);
                rc = -EINVAL;
                break;
            }
            if (!s_rest_blank(close + 1)) {
                s_err(err, err_len, "%s:%d: text after the section header", origin, lineno);
                rc = -EINVAL;
                break;
            }
            *close = 0;
            char *name = s_trim(s + 1);
            if (!s_valid_name(name) || strlen(name) >= sizeof section) {
                s_err(err, err_len, "%s:%d: bad section name [%s]", origin, lineno, name);
                rc = -EINVAL;
                break;
            }
            snprintf(section, sizeof section, "%s", name);
            if (config_txt_section_owned(spec, section))
                mode = config_txt_in_list(spec->partial_sections, section) ? S_SEC_PARTIAL : S_SEC_OWNED;
            else if (config_txt_in_list(config_txt_known(spec), section) || config_txt_in_list(spec->partial_sections, section))
                mode = S_SEC_SKIP;
            else {
                char hint[160];
                s_suggest_section(spec, section, hint, sizeof hint);
                s_err(err, err_len, "%s:%d: unknown section [%s]%s", origin, lineno, section, hint);
                rc = -EINVAL;
                break;
            }
            continue;
        }

        char *eq = strchr(s, '=');
        if (!eq) {
            char shown[CONFIG_SHOW_MAX + 8];
            config_txt_show(s, shown, sizeof shown);
            s_err(err, err_len, "%s:%d: expected 'key = value' or '[section]', got '%s'", origin, lineno, shown);
            rc = -EINVAL;
            break;
        }
        *eq = 0;
        char *key = s_trim(s);
        if (!s_valid_name(key)) {
            s_err(err, err_len, "%s:%d: bad key name '%s'", origin, lineno, key);
            rc = -EINVAL;
            break;
        }
        char *value, why[512];
        if (s_ini_value(eq + 1, &value, why, sizeof why) < 0) {
            s_err(err, err_len, "%s:%d: key '%s': %s", origin, lineno, key, why);
            rc = -EINVAL;
            break;
        }
        if (mode == S_SEC_NONE) {
            s_err(err, err_len, "%s:%d: key '%s' is outside any [section]", origin, lineno, key);
            rc = -EINVAL;
            break;
        }
        if (mode == S_SEC_SKIP) continue;
        const config_option_t *o = config_find(spec, section, key);
        if (!o) {
            if (mode == S_SEC_PARTIAL) continue;
            char hint[200];
            s_suggest_key(spec, section, key, hint, sizeof hint);
            s_err(err, err_len, "%s:%d: unknown key '%s' in [%s]%s", origin, lineno, key, section, hint);
            rc = -EINVAL;
            break;
        }
        size_t idx = (size_t)(o - spec->opts);
        if (set_on[idx]) {
            s_err(err, err_len, "%s:%d: key '%s' in [%s] is already set on line %d", origin, lineno, key,
                  section, set_on[idx]);
            rc = -EINVAL;
            break;
        }
        s_value_t v;
        if ((rc = s_parse(o, value, &v, why, sizeof why)) < 0) {
            s_err(err, err_len, "%s:%d: key '%s': %s", origin, lineno, key, why);
            break;
        }
        s_store(o, cfg, &v);
        set_on[idx] = lineno;
    }
    free(line);
    free(set_on);
    return rc;
}

int config_parse_file(const config_spec_t *spec, void *cfg, const char *path, char *err, size_t err_len) {
    FILE *f = fopen(path, "rb");
    if (!f) {
        int e = errno;
        s_err(err, err_len, "cannot read config file '%s': %s", path, strerror(e));
        return -e;
    }
    char *text = NULL;
    size_t len = 0, cap = 0;
    int rc = 0;
    for (;;) {
        if (len + 4096 + 1 > cap) {
            cap = cap ? cap * 2 : 8192;
            char *t = realloc(text, cap);
            if (!t) {
                s_err(err, err_len, "%s: out of memory", path);
                rc = -ENOMEM;
                break;
            }
            text = t;
        }
        size_t got = fread(text + len, 1, cap - len - 1, f);
        len += got;
        if (len > S_MAX_FILE_BYTES) {
            s_err(err, err_len, "config file '%s' is larger than %u bytes", path, S_MAX_FILE_BYTES);
            rc = -EFBIG;
            break;
        }
        if (got == 0) {
            if (ferror(f)) {
                s_err(err, err_len, "cannot read config file '%s': %s", path, strerror(EIO));
                rc = -EIO;
            }
            break;
        }
    }
    fclose(f);
    if (rc == 0) {
        text[len] = 0;
        if (memchr(text, 0, len)) {
            s_err(err, err_len, "config file '%s' is not text (it contains NUL bytes)", path);
            rc = -EINVAL;
        } else {
            rc = config_parse_text(spec, cfg, text, path, err, err_len);
        }
    }
    free(text);
    return rc;
}

/* ---- names on the command line ------------------------------------------ */

/* Resolve "key" or "section.key" (loose '-'/'_'). Returns the option, or
 * NULL with a message ("unknown option '--lrr' (did you mean '--lr'?)" or
 * "option '--seed' is ambiguous ..."); *rc receives -ENOENT or -EINVAL. */
static const config_option_t *s_resolve(const config_spec_t *spec, const char *name, const char *prefix,
                                        const char *origin, int *rc, char *err, size_t err_len) {
    const char *dot = strchr(name, '.');
    if (dot) {
        size_t sl = (size_t)(dot - name);
        for (size_t i = 0; i < spec->n_opts; i++) {
            const config_option_t *o = &spec->opts[i];
            if (strlen(o->section) == sl && strncmp(o->section, name, sl) == 0 && config_txt_name_eq(o->key, dot + 1, 1))
                return o;
        }
    } else {
        const config_option_t *found = NULL;
        int count = 0;
        char list[512] = "";
        size_t ln = 0;
        for (size_t i = 0; i < spec->n_opts; i++) {
            const config_option_t *o = &spec->opts[i];
            if (!config_txt_name_eq(o->key, name, 1)) continue;
            found = o;
            count++;
            if (ln < sizeof list)
                ln += (size_t)snprintf(list + ln, sizeof list - ln, "%s%s%s.%s", count > 1 ? " or " : "", prefix,
                                       o->section, o->key);
        }
        if (count == 1) return found;
        if (count > 1) {
            s_err(err, err_len, "%s: option '%s%s' is ambiguous: say %s", origin, prefix, name, list);
            *rc = -EINVAL;
            return NULL;
        }
    }
    /* unknown: suggest the closest "section.key" or unique "key" */
    const config_option_t *best = NULL;
    size_t best_d = SIZE_MAX;
    int best_full = 1;
    for (size_t i = 0; i < spec->n_opts; i++) {
        const config_option_t *o = &spec->opts[i];
        char full[256];
        snprintf(full, sizeof full, "%s.%s", o->section, o->key);
        size_t d = config_txt_distance(name, dot ? full : o->key);
        if (d < best_d) { best_d = d; best = o; best_full = dot != NULL; }
    }
    if (best && !best_full) { /* a bare key suggestion must itself be unique */
        int n = 0;
        for (size_t i = 0; i < spec->n_opts; i++) n += strcmp(spec->opts[i].key, best->key) == 0;
        best_full = n > 1;
    }
    if (best && config_txt_close(name, best_d)) {
        if (best_full)
            s_err(err, err_len, "%s: unknown option '%s%s' (did you mean '%s%s.%s'?)", origin, prefix, name, prefix,
                  best->section, best->key);
        else
            s_err(err, err_len, "%s: unknown option '%s%s' (did you mean '%s%s'?)", origin, prefix, name, prefix,
                  best->key);
    } else {
        s_err(err, err_len, "%s: unknown option '%s%s' (see --help)", origin, prefix, name);
    }
    *rc = -ENOENT;
    return NULL;
}

static int s_set(const config_spec_t *spec, void *cfg, const char *name, const char *value, const char *prefix,
                 const char *origin, char *err, size_t err_len) {
    int rc = 0;
    const config_option_t *o = s_resolve(spec, name, prefix, origin, &rc, err, err_len);
    if (!o) return rc;
    s_value_t v;
    char why[512];
    if ((rc = s_parse(o, value, &v, why, sizeof why)) < 0) {
        s_err(err, err_len, "%s: option '%s%s': %s", origin, prefix, name, why);
        return rc;
    }
    s_store(o, cfg, &v);
    return 0;
}

int config_set(const config_spec_t *spec, void *cfg, const char *name, const char *value, const char *origin,
               char *err, size_t err_len) {
    return s_set(spec, cfg, name, value ? value : "", "", origin ? origin : "config", err, err_len);
}

static int s_is(const char *arg, const char *opt) { return strcmp(arg, opt) == 0; }
static int s_is_config(const char *arg) { return s_is(arg, "--config") || strncmp(arg, "--config=", 9) == 0; }

int config_parse_args(const config_spec_t *spec, void *cfg, int argc, char **argv, char *err, size_t err_len) {
    static const char *origin = "command line";
    for (int i = 1; i < argc; i++) {
        const char *a = argv[i];
        if (s_is(a, "--help") || s_is(a, "-h") || s_is(a, "--dump-config") || s_is(a, "--version")) continue;
        if (s_is_config(a)) {
            if (s_is(a, "--config")) i++;
            continue;
        }
        if (strncmp(a, "--", 2) != 0 || a[2] == 0 || a[2] == '=') {
            char shown[CONFIG_SHOW_MAX + 8];
            config_txt_show(a, shown, sizeof shown);
            s_err(err, err_len, "%s: unexpected argument '%s' (options look like --section.key=value)", origin, shown);
            return -EINVAL;
        }
        const char *eq = strchr(a + 2, '=');
        char name[256];
        const char *value;
        if (eq) {
            size_t n = (size_t)(eq - (a + 2));
            if (n >= sizeof name) n = sizeof name - 1;
            memcpy(name, a + 2, n);
            name[n] = 0;
            value = eq + 1;
        } else {
            snprintf(name, sizeof name, "%s", a + 2);
            int rc = 0;
            const config_option_t *o = s_resolve(spec, name, "--", origin, &rc, err, err_len);
            if (!o) return rc;
            int next_is_value = i + 1 < argc && strncmp(argv[i + 1], "--", 2) != 0;
            if (o->type == OPT_BOOL && !next_is_value) {
                value = "true"; /* a bare --flag */
            } else if (next_is_value) {
                value = argv[++i];
            } else {
                char expected[400];
                config_txt_expected(o, expected, sizeof expected);
                s_err(err, err_len, "%s: option '--%s' needs a value: %s", origin, name, expected);
                return -EINVAL;
            }
        }
        int rc = s_set(spec, cfg, name, value, "--", origin, err, err_len);
        if (rc < 0) return rc;
    }
    return 0;
}

int config_read(const config_spec_t *spec, void *cfg, int argc, char **argv, FILE *out, int *dump_out, char *err,
                size_t err_len) {
    if (dump_out) *dump_out = 0;
    int rc = config_check_spec(spec, err, err_len);
    if (rc < 0) return rc;
    if ((rc = config_defaults(spec, cfg, err, err_len)) < 0) return rc;
    const char *path = NULL;
    int dump = 0;
    for (int i = 1; i < argc; i++) {
        const char *a = argv[i];
        if (s_is(a, "--help") || s_is(a, "-h")) {
            config_help(spec, out ? out : stdout);
            return CONFIG_HELP;
        }
        if (s_is(a, "--version")) {
            fprintf(out ? out : stdout, "%s %s\n", spec->program ? spec->program : "kfac", KFAC_BUILD_ID);
            return CONFIG_HELP;
        }
        if (s_is(a, "--dump-config")) dump = 1;
        if (s_is_config(a)) {
            const char *p = s_is(a, "--config") ? (i + 1 < argc ? argv[++i] : NULL) : a + 9;
            if (!p || !*p) {
                s_err(err, err_len, "command line: --config needs a file name");
                return -EINVAL;
            }
            if (path) {
                s_err(err, err_len, "command line: --config given twice ('%s' and '%s')", path, p);
                return -EINVAL;
            }
            path = p;
        }
    }
    if (path && (rc = config_parse_file(spec, cfg, path, err, err_len)) < 0) return rc;
    if ((rc = config_apply_env(spec, cfg, err, err_len)) < 0) return rc;
    if ((rc = config_parse_args(spec, cfg, argc, argv, err, err_len)) < 0) return rc;
    if (dump_out) *dump_out = dump;
    return 0;
}

int config_load(const config_spec_t *spec, void *cfg, int argc, char **argv, FILE *out, char *err,
                size_t err_len) {
    int dump = 0;
    int rc = config_read(spec, cfg, argc, argv, out, &dump, err, err_len);
    if (rc != 0) return rc;
    if (dump) {
        rc = config_dump(spec, cfg, out ? out : stdout);
        if (rc < 0) {
            s_err(err, err_len, "cannot print the configuration");
            return rc;
        }
        return CONFIG_DUMP;
    }
    return 0;
}

int config_apply_env(const config_spec_t *spec, void *cfg, char *err, size_t err_len) {
    for (size_t i = 0; spec->env && i < spec->n_env; i++) {
        const char *v = getenv(spec->env[i].var);
        if (!v || !*v) continue;
        char origin[96];
        snprintf(origin, sizeof origin, "environment variable %s", spec->env[i].var);
        int rc = config_set(spec, cfg, spec->env[i].name, v, origin, err, err_len);
        if (rc < 0) return rc;
    }
    return 0;
}

int config_exit_status(int rc) {
    switch (rc) {
    case -ENOENT: case -EACCES: case -EPERM: case -ENOTDIR: case -EISDIR: case -ELOOP: case -ENAMETOOLONG:
    case -EINVAL: case -EEXIST: /* EEXIST: [run] out_dir holds a previous run */
        return CONFIG_EXIT_CONFIG;
    default:
        return CONFIG_EXIT_FAILURE;
    }
}
