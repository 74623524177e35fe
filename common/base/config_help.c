/* common/base/config_help.c — --help and the configuration dump
 * (config_help, config_to_text, config_dump), both generated from the option
 * table so that they can never drift from the parser. */
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

/* "double, between 0 and 10, default 0.1" */
static void s_describe(const config_option_t *o, char *buf, size_t len) {
    char bounds[100], def[200];
    config_txt_bounds_text(o, bounds, sizeof bounds);
    if (o->type == OPT_STRING && (!o->def || !*o->def)) snprintf(def, sizeof def, "\"\"");
    else snprintf(def, sizeof def, "%s", o->def ? o->def : "");
    if (o->type == OPT_ENUM) {
        size_t n = (size_t)snprintf(buf, len, "one of ");
        for (size_t i = 0; o->names[i] && n < len; i++)
            n += (size_t)snprintf(buf + n, len - n, "%s%s", i ? "|" : "", o->names[i]);
        if (n < len) snprintf(buf + n, len - n, ", default %s", def);
    } else if (o->type == OPT_STRING && o->max > 0) {
        snprintf(buf, len, "string, at most %.0f bytes, default %s", o->max, def);
    } else {
        snprintf(buf, len, "%s%s%s, default %s", config_txt_type_name(o), *bounds ? "," : "", bounds, def);
    }
}

static const char *s_placeholder(const config_option_t *o) {
    switch (o->type) {
    case OPT_INT: return "INT";
    case OPT_UINT64: return "UINT64";
    case OPT_DOUBLE: return "NUMBER";
    case OPT_BOOL: return "BOOL";
    case OPT_STRING: return "TEXT";
    case OPT_ENUM: return NULL;
    }
    return "?";
}

/* Sections in table order of first appearance: calls fn for each. */
static int s_first_in_section(const config_spec_t *spec, size_t i) {
    for (size_t j = 0; j < i; j++)
        if (strcmp(spec->opts[j].section, spec->opts[i].section) == 0) return 0;
    return 1;
}

void config_help(const config_spec_t *spec, FILE *f) {
    const char *prog = spec->program ? spec->program : "program";
    fprintf(f, "Usage: %s [--config FILE] [--SECTION.KEY=VALUE ...]\n", prog);
    if (spec->summary) fprintf(f, "%s\n", spec->summary);
    fprintf(f, "\nSettings come from the defaults below, then the --config file (INI: [section]\n"
               "lines, then key = value), then the command line; later sources win. A key\n"
               "that is unique may be given as --KEY; '-' and '_' are interchangeable. A\n"
               "boolean given without a value (--KEY) means true (--KEY false: false).\n\n");
    fprintf(f, "  --config FILE\n      read settings from an INI file\n");
    fprintf(f, "  --dump-config\n      print the effective configuration and exit\n");
    fprintf(f, "  --help\n      print this help and exit\n");
    fprintf(f, "  --version\n      print the program's version (build id and protocol) and exit\n");
    for (size_t i = 0; i < spec->n_opts; i++) {
        if (!s_first_in_section(spec, i)) continue;
        const char *sec = spec->opts[i].section;
        fprintf(f, "\n[%s]\n", sec);
        for (size_t j = i; j < spec->n_opts; j++) {
            const config_option_t *o = &spec->opts[j];
            if (strcmp(o->section, sec) != 0) continue;
            char desc[600];
            s_describe(o, desc, sizeof desc);
            const char *ph = s_placeholder(o);
            fprintf(f, "  --%s.%s=", o->section, o->key);
            if (ph) {
                fputs(ph, f);
            } else {
                for (size_t k = 0; o->names[k]; k++) fprintf(f, "%s%s", k ? "|" : "", o->names[k]);
            }
            fprintf(f, "  (%s)\n      %s\n", desc, o->help);
        }
    }
    if (spec->env && spec->n_env) {
        fprintf(f, "\nEnvironment (after the --config file, before the command line; empty is unset):\n");
        for (size_t i = 0; i < spec->n_env; i++) fprintf(f, "  %-14s sets --%s\n", spec->env[i].var, spec->env[i].name);
    }
    if (spec->epilogue) fprintf(f, "\n%s", spec->epilogue);
}

/* Does a string value need quotes to read back the same? */
static int s_needs_quotes(const char *s) {
    if (!*s) return 1;
    if (isspace((unsigned char)s[0]) || isspace((unsigned char)s[strlen(s) - 1])) return 1;
    for (const char *p = s; *p; p++)
        if (*p == '#' || *p == ';' || *p == '"' || *p == '\\' || (unsigned char)*p < 32) return 1;
    return 0;
}

static void s_write_string(FILE *f, const char *s) {
    if (!s_needs_quotes(s)) {
        fputs(s, f);
        return;
    }
    fputc('"', f);
    for (const char *p = s; *p; p++) {
        switch (*p) {
        case '"': fputs("\\\"", f); break;
        case '\\': fputs("\\\\", f); break;
        case '\n': fputs("\\n", f); break;
        case '\t': fputs("\\t", f); break;
        case '\r': fputs("\\r", f); break;
        default: fputc(*p, f); break;
        }
    }
    fputc('"', f);
}

char *config_to_text(const config_spec_t *spec, const void *cfg, const char *const *sections, int flags) {
    char *buf = NULL;
    size_t len = 0;
    FILE *f = open_memstream(&buf, &len);
    if (!f) return NULL;
    int first = 1;
    if (flags & CONFIG_TEXT_COMMENTS)
        fprintf(f, "# %s configuration\n", spec->program ? spec->program : "effective");
    for (size_t i = 0; i < spec->n_opts; i++) {
        if (!s_first_in_section(spec, i)) continue;
        const char *sec = spec->opts[i].section;
        if (sections && !config_txt_in_list(sections, sec)) continue;
        fprintf(f, "%s[%s]\n", first && !(flags & CONFIG_TEXT_COMMENTS) ? "" : "\n", sec);
        first = 0;
        for (size_t j = i; j < spec->n_opts; j++) {
            const config_option_t *o = &spec->opts[j];
            if (strcmp(o->section, sec) != 0) continue;
            if (flags & CONFIG_TEXT_COMMENTS) {
                char desc[600];
                s_describe(o, desc, sizeof desc);
                fprintf(f, "# %s (%s)\n", o->help, desc);
            }
            fprintf(f, "%s = ", o->key);
            if (o->type == OPT_STRING) {
                const char *s = *(char *const *)config_txt_cfield(cfg, o);
                s_write_string(f, s ? s : "");
            } else {
                char v[128];
                config_format_value(o, cfg, v, sizeof v);
                fputs(v, f);
            }
            fputc('\n', f);
        }
    }
    if (fclose(f) != 0) {
        free(buf);
        return NULL;
    }
    return buf;
}

int config_dump(const config_spec_t *spec, const void *cfg, FILE *f) {
    char *text = config_to_text(spec, cfg, NULL, CONFIG_TEXT_COMMENTS);
    if (!text) return -ENOMEM;
    int rc = fputs(text, f) < 0 ? -EIO : 0;
    free(text);
    return rc;
}
