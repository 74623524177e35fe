/* proto/msg_validate.c — msg_validate(): everything protobuf-c does not check
 * about a kfac message (proto/msg.h): protocol version, role permissions,
 * array lengths against the sizes sent with them and against the model,
 * limits, NaN/Inf in every float, string lengths. Error messages name the
 * field ("stats_push.stats.layers[0].factors[1].data[7] is NaN").
 *
 * Each message is checked in two passes: every field's own check, as its
 * row in proto/msg_fields.c says (finite, >= 0, ranges, limits, enums,
 * string lengths), then the message's rule below for what involves several
 * fields or the model (array lengths against n or the model, statistics,
 * factored gradients, a job's target).
 */
#include "proto/msg.h"
#include "proto/msg_fields.h"

#include <errno.h>
#include <inttypes.h>
#include <math.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

static void s_err(char *err, size_t err_len, const char *fmt, ...)
    __attribute__((format(printf, 3, 4)));
static void s_err(char *err, size_t err_len, const char *fmt, ...) {
    if (!err || err_len == 0) return;
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(err, err_len, fmt, ap);
    va_end(ap);
}

/* ---- validate ----------------------------------------------------------- */

/* Index of the first non-finite float, or n when all are finite. Scans in
 * blocks with an OR of exponent tests (vectorizes), then locates. */
size_t msg_first_nonfinite(const float *x, size_t n) {
    const size_t block = 4096;
    for (size_t start = 0; start < n; start += block) {
        size_t end = start + block < n ? start + block : n;
        uint32_t bad = 0;
        for (size_t i = start; i < end; i++) {
            uint32_t u;
            memcpy(&u, &x[i], sizeof u);
            bad |= (uint32_t)((u & 0x7f800000u) == 0x7f800000u);
        }
        if (bad)
            for (size_t i = start; i < end; i++)
                if (!isfinite(x[i])) return i;
    }
    return n;
}

/* Check one float array: presence and length. expect: required length,
 * or 0 for "any length in [min_n, max_floats]". */
static int s_check_len(const char *field, const float *x, size_t n, uint64_t min_n,
                       uint64_t expect, const msg_limits_t *lim, char *err, size_t err_len) {
    if (n > 0 && !x) {
        s_err(err, err_len, "%s: %zu floats announced but no data", field, n);
        return -EINVAL;
    }
    if (n > lim->max_floats) {
        s_err(err, err_len, "%s: %zu floats is over the limit of %" PRIu64, field, n, lim->max_floats);
        return -EINVAL;
    }
    if (expect && n != expect) {
        s_err(err, err_len, "%s: expected %" PRIu64 " floats, got %zu", field, expect, n);
        return -EINVAL;
    }
    if (n < min_n) {
        s_err(err, err_len, "%s: expected at least %" PRIu64 " floats, got %zu", field, min_n, n);
        return -EINVAL;
    }
    return 0;
}

/* s_check_len, then finiteness: the first NaN or Inf is named. */
static int s_check_floats(const char *field, const float *x, size_t n, uint64_t min_n,
                          uint64_t expect, const msg_limits_t *lim, char *err, size_t err_len) {
    int rc = s_check_len(field, x, n, min_n, expect, lim, err, err_len);
    if (rc < 0) return rc;
    size_t i = msg_first_nonfinite(x, n);
    if (i < n) {
        s_err(err, err_len, "%s[%zu] is %s", field, i, isnan(x[i]) ? "NaN" : "Inf");
        return -EINVAL;
    }
    return 0;
}

/* The diagonal of a second-moment matrix (a mean of outer products) is a
 * mean of squares, so it is >= 0 exactly in floating point; a negative one
 * means a wrong layout or garbage. data holds n_blocks packed triangles. */
static int s_check_diagonal(const char *field, const float *data, uint32_t n, uint32_t n_blocks,
                            char *err, size_t err_len) {
    uint64_t tri = msg_packed_len(n);
    for (uint32_t b = 0; b < n_blocks; b++) {
        const float *p = data + (size_t)b * tri;
        for (uint32_t i = 0; i < n; i++) {
            float d = p[msg_packed_index(n, i, i)];
            if (d < 0) {
                if (n_blocks > 1)
                    s_err(err, err_len, "%s: block %u diagonal element (%u,%u) is negative (%g): not a second-moment matrix",
                          field, b, i, i, (double)d);
                else
                    s_err(err, err_len, "%s: diagonal element (%u,%u) is negative (%g): not a second-moment matrix",
                          field, i, i, (double)d);
                return -EINVAL;
            }
        }
    }
    return 0;
}

static int s_check_n(const char *field, uint32_t n, const msg_limits_t *lim, char *err, size_t err_len) {
    if (n == 0) {
        s_err(err, err_len, "%s: n must be at least 1", field);
        return -EINVAL;
    }
    if (n > lim->max_n) {
        s_err(err, err_len, "%s: n=%" PRIu32 " is over the limit of %" PRIu32, field, n, lim->max_n);
        return -EINVAL;
    }
    return 0;
}

/* params.stats_layers: strictly increasing layer indices below the limit,
 * each (with a model) a layer that has Kronecker factors. */
static int s_check_stats_layers(const msg_params_t *p, const msg_limits_t *lim, char *err, size_t err_len) {
    if (p->n_stats_layers > lim->max_layers) {
        s_err(err, err_len, "params.stats_layers: %zu entries is over the limit of %" PRIu32 " layers",
              p->n_stats_layers, lim->max_layers);
        return -EINVAL;
    }
    const msg_model_shape_t *md = lim->model;
    for (size_t i = 0; i < p->n_stats_layers; i++) {
        uint32_t l = p->stats_layers[i];
        if (l >= lim->max_layers) {
            s_err(err, err_len, "params.stats_layers[%zu]: layer %" PRIu32 " is over the limit of %" PRIu32 " layers",
                  i, l, lim->max_layers);
            return -EINVAL;
        }
        if (i > 0 && l <= p->stats_layers[i - 1]) {
            s_err(err, err_len,
                  "params.stats_layers[%zu]: layer %" PRIu32 " after %" PRIu32 " (the list must be strictly increasing)",
                  i, l, p->stats_layers[i - 1]);
            return -EINVAL;
        }
        if (md && (l >= md->n_layers || !md->layers || md->layers[l].n_factors == 0)) {
            s_err(err, err_len, "params.stats_layers[%zu]: layer %" PRIu32 " has no Kronecker factors in this model", i,
                  l);
            return -EINVAL;
        }
    }
    return 0;
}

/* A job / job result's (layer, factor, n) against the model. */
static int s_check_job_target(const char *field, uint32_t layer, uint32_t factor, uint32_t n,
                              const msg_limits_t *lim, char *err, size_t err_len) {
    if (layer >= lim->max_layers) {
        s_err(err, err_len, "%s: layer %" PRIu32 " is over the limit of %" PRIu32 " layers", field, layer,
              lim->max_layers);
        return -EINVAL;
    }
    if (factor >= lim->max_factors) {
        s_err(err, err_len, "%s: factor %" PRIu32 " is over the limit of %" PRIu32 " factors", field,
              factor, lim->max_factors);
        return -EINVAL;
    }
    const msg_model_shape_t *md = lim->model;
    if (!md) return 0;
    if (layer >= md->n_layers || !md->layers || md->layers[layer].n_factors == 0) {
        s_err(err, err_len, "%s: layer %" PRIu32 " has no Kronecker factors in this model", field, layer);
        return -EINVAL;
    }
    const msg_layer_shape_t *ls = &md->layers[layer];
    if (factor >= ls->n_factors) {
        s_err(err, err_len, "%s: layer %" PRIu32 " has %" PRIu32 " factors, got factor %" PRIu32, field, layer,
              ls->n_factors, factor);
        return -EINVAL;
    }
    if (ls->n_blocks[factor] > 1) {
        s_err(err, err_len, "%s: layer %" PRIu32 " factor %" PRIu32 " is block-diagonal, not an inversion job",
              field, layer, factor);
        return -EINVAL;
    }
    if (ls->n[factor] != n) {
        s_err(err, err_len, "%s: layer %" PRIu32 " factor %" PRIu32 " has n=%" PRIu32 " in this model, got n=%" PRIu32,
              field, layer, factor, ls->n[factor], n);
        return -EINVAL;
    }
    return 0;
}

static int s_check_factor(const char *field, const msg_factor_t *f, const msg_layer_shape_t *expect,
                          size_t index, const msg_limits_t *lim, char *err, size_t err_len) {
    if (f->kind <= MSG_FACTOR_NONE || f->kind >= MSG_FACTOR_COUNT) {
        s_err(err, err_len, "%s: unknown factor kind %d", field, (int)f->kind);
        return -EINVAL;
    }
    int rc = s_check_n(field, f->n, lim, err, err_len);
    if (rc < 0) return rc;
    if (f->n_blocks == 0) {
        s_err(err, err_len, "%s: n_blocks must be at least 1", field);
        return -EINVAL;
    }
    if (f->kind == MSG_FACTOR_BN ? f->n != 2 : f->n_blocks != 1) {
        s_err(err, err_len, "%s: a %s factor has %s, got n=%" PRIu32 " n_blocks=%" PRIu32, field,
              msg_factor_kind_name(f->kind),
              f->kind == MSG_FACTOR_BN ? "n=2 (2x2 blocks)" : "one block", f->n, f->n_blocks);
        return -EINVAL;
    }
    uint64_t tri = msg_packed_len(f->n);
    if (f->n_blocks > lim->max_floats / tri) {
        s_err(err, err_len, "%s: n=%" PRIu32 " n_blocks=%" PRIu32 " is over the limit of %" PRIu64 " floats",
              field, f->n, f->n_blocks, lim->max_floats);
        return -EINVAL;
    }
    uint64_t need = tri * f->n_blocks;
    if (f->n_data != need) {
        s_err(err, err_len, "%s: n=%" PRIu32 " n_blocks=%" PRIu32 " needs %" PRIu64 " floats, got %zu", field,
              f->n, f->n_blocks, need, f->n_data);
        return -EINVAL;
    }
    if (expect) {
        uint32_t eb = expect->n_blocks[index] ? expect->n_blocks[index] : 1;
        if (expect->kind[index] != f->kind || expect->n[index] != f->n || eb != f->n_blocks) {
            s_err(err, err_len,
                  "%s: the model has a %s factor with n=%" PRIu32 " n_blocks=%" PRIu32
                  " here, got %s with n=%" PRIu32 " n_blocks=%" PRIu32,
                  field, msg_factor_kind_name(expect->kind[index]), expect->n[index], eb,
                  msg_factor_kind_name(f->kind), f->n, f->n_blocks);
            return -EINVAL;
        }
    }
    char sub[256];
    snprintf(sub, sizeof sub, "%.240s.data", field);
    if ((rc = s_check_floats(sub, f->data, f->n_data, need, need, lim, err, err_len)) < 0) return rc;
    return s_check_diagonal(field, f->data, f->n, f->n_blocks, err, err_len);
}

static int s_check_stats(const char *field, const msg_stats_t *st, int required,
                         const msg_limits_t *lim, char *err, size_t err_len) {
    if (st->n_layers == 0) {
        if (!required) return 0;
        s_err(err, err_len, "%s: no layers", field);
        return -EINVAL;
    }
    if (!st->layers) {
        s_err(err, err_len, "%s: %zu layers announced but no data", field, st->n_layers);
        return -EINVAL;
    }
    if (st->n_layers > lim->max_layers) {
        s_err(err, err_len, "%s: %zu layers is over the limit of %" PRIu32, field, st->n_layers, lim->max_layers);
        return -EINVAL;
    }
    const msg_model_shape_t *md = lim->model;
    uint8_t *seen = calloc(lim->max_layers ? lim->max_layers : 1, 1);
    if (!seen) {
        s_err(err, err_len, "%s: out of memory", field);
        return -ENOMEM;
    }
    int rc = 0;
    char path[160], fpath[200];
    for (size_t l = 0; l < st->n_layers && rc == 0; l++) {
        const msg_layer_stats_t *ls = &st->layers[l];
        snprintf(path, sizeof path, "%.100s.layers[%zu]", field, l);
        rc = -EINVAL;
        if (ls->layer >= lim->max_layers) {
            s_err(err, err_len, "%s: layer %" PRIu32 " is over the limit of %" PRIu32 " layers", path, ls->layer,
                  lim->max_layers);
            break;
        }
        if (seen[ls->layer]) {
            s_err(err, err_len, "%s: layer %" PRIu32 " appears twice", path, ls->layer);
            break;
        }
        seen[ls->layer] = 1;
        const msg_layer_shape_t *expect = NULL;
        if (md) {
            if (ls->layer >= md->n_layers || !md->layers || md->layers[ls->layer].n_factors == 0) {
                s_err(err, err_len, "%s: layer %" PRIu32 " has no Kronecker factors in this model", path, ls->layer);
                break;
            }
            expect = &md->layers[ls->layer];
            if (ls->n_factors != expect->n_factors) {
                s_err(err, err_len, "%s: layer %" PRIu32 " has %" PRIu32 " factors in this model, got %zu", path,
                      ls->layer, expect->n_factors, ls->n_factors);
                break;
            }
        }
        if (ls->n_factors == 0 || ls->n_factors > lim->max_factors || ls->n_factors > MSG_MAX_FACTORS) {
            s_err(err, err_len, "%s: %zu factors, expected 1 to %" PRIu32, path, ls->n_factors,
                  lim->max_factors < MSG_MAX_FACTORS ? lim->max_factors : (uint32_t)MSG_MAX_FACTORS);
            break;
        }
        if (!ls->factors) {
            s_err(err, err_len, "%s: %zu factors announced but no data", path, ls->n_factors);
            break;
        }
        rc = 0;
        for (size_t f = 0; f < ls->n_factors && rc == 0; f++) {
            snprintf(fpath, sizeof fpath, "%.160s.factors[%zu]", path, f);
            rc = s_check_factor(fpath, &ls->factors[f], expect, f, lim, err, err_len);
        }
    }
    free(seen);
    return rc;
}

/* A params/grad/state pair against the model. */
static int s_check_params_arrays(const char *pfield, const float *p, size_t n_p, int grad, const char *sfield,
                                 const float *s, size_t n_s, const msg_limits_t *lim, char *err,
                                 size_t err_len) {
    const msg_model_shape_t *md = lim->model;
    int rc = (grad && lim->grad_finite_later ? s_check_len : s_check_floats)(pfield, p, n_p, 1, md ? md->n_params : 0,
                                                                         lim, err, err_len);
    if (rc < 0) return rc;
    if (md && n_s != 0 && n_s != md->n_state) {
        s_err(err, err_len, "%s: expected %" PRIu64 " floats (or none), got %zu", sfield, md->n_state, n_s);
        return -EINVAL;
    }
    return s_check_floats(sfield, s, n_s, 0, 0, lim, err, err_len);
}

/* A GradPush's factored fc gradients and its grad array, which leaves out
 * their weights (proto/kfac.proto, GradPush). */
static int s_check_lowrank(const msg_grad_push_t *g, const msg_limits_t *lim, char *err, size_t err_len) {
    const msg_model_shape_t *md = lim->model;
    if (!md || !md->layers || lim->max_rows == 0) {
        s_err(err, err_len, "grad_push.factored: this receiver takes no factored gradients");
        return -EINVAL;
    }
    if (!g->lowrank) {
        s_err(err, err_len, "grad_push.factored: %zu entries announced but no data", g->n_lowrank);
        return -EINVAL;
    }
    uint64_t skipped = 0;
    char field[96];
    for (size_t i = 0; i < g->n_lowrank; i++) {
        const msg_lowrank_t *f = &g->lowrank[i];
        if (f->layer >= md->n_layers || md->layers[f->layer].fc_out == 0) {
            s_err(err, err_len, "grad_push.factored[%zu]: layer %" PRIu32 " is no fully connected layer of the model", i,
                  f->layer);
            return -EINVAL;
        }
        if (i > 0 && f->layer <= g->lowrank[i - 1].layer) {
            s_err(err, err_len, "grad_push.factored[%zu]: layer %" PRIu32 " is not after layer %" PRIu32, i, f->layer,
                  g->lowrank[i - 1].layer);
            return -EINVAL;
        }
        if (f->n_rows == 0 || f->n_rows > lim->max_rows || f->n_rows > g->n_examples) {
            s_err(err, err_len,
                  "grad_push.factored[%zu].n_rows: %" PRIu32 " is not in 1..%" PRIu32 " (the batch) and at most n_examples=%" PRIu64,
                  i, f->n_rows, lim->max_rows, g->n_examples);
            return -EINVAL;
        }
        const msg_layer_shape_t *ls = &md->layers[f->layer];
        const uint64_t nd = (uint64_t)f->n_rows * ls->fc_out, nx = (uint64_t)f->n_rows * ls->fc_in;
        if (f->n_d != nd || f->n_x != nx || (nd && !f->d) || (nx && !f->x)) {
            s_err(err, err_len,
                  "grad_push.factored[%zu]: %" PRIu32 " rows of layer %" PRIu32 " need %" PRIu64 " floats of d and %" PRIu64
                  " of x, got %zu and %zu",
                  i, f->n_rows, f->layer, nd, nx, f->n_d, f->n_x);
            return -EINVAL;
        }
        size_t bad = msg_first_nonfinite(f->d, f->n_d);
        if (bad < f->n_d) {
            s_err(err, err_len, "grad_push.factored[%zu].d[%zu] is %s", i, bad, isnan(f->d[bad]) ? "NaN" : "Inf");
            return -EINVAL;
        }
        bad = msg_first_nonfinite(f->x, f->n_x);
        if (bad < f->n_x) {
            s_err(err, err_len, "grad_push.factored[%zu].x[%zu] is %s", i, bad, isnan(f->x[bad]) ? "NaN" : "Inf");
            return -EINVAL;
        }
        skipped += (uint64_t)ls->fc_out * ls->fc_in;
    }
    if (skipped > md->n_params) {
        s_err(err, err_len, "grad_push.factored: the weights left out are more than the model's parameters");
        return -EINVAL;
    }
    const uint64_t expect = md->n_params - skipped;
    snprintf(field, sizeof field, "grad_push.grad (without %zu factored weight%s)", g->n_lowrank,
             g->n_lowrank == 1 ? "" : "s");
    if (expect == 0) {
        if (g->n_grad == 0) return 0;
        s_err(err, err_len, "%s: expected no floats, got %zu", field, g->n_grad);
        return -EINVAL;
    }
    return (lim->grad_finite_later ? s_check_len : s_check_floats)(field, g->grad, g->n_grad, 1, expect, lim, err,
                                                                   err_len);
}

/* ---- one field on its own (its row's check) ----------------------------- */

#define S_CAT(p, off, T) ((const T *)(const void *)((const char *)(p) + (off)))

static const void *s_ptr(const void *p, size_t off) {
    const void *v;
    memcpy(&v, (const char *)p + off, sizeof v);
    return v;
}

/* Row f's check of body (table t); the error names "<body>.<field>". */
static int s_check_field(const msg_struct_t *t, const msg_field_t *f, const void *body, const msg_limits_t *lim,
                         char *err, size_t err_len) {
    switch (f->check) {
    case MSG_CHECK_FINITE:
    case MSG_CHECK_NONNEG: {
        double v = *S_CAT(body, f->off, double);
        if (!isfinite(v)) {
            s_err(err, err_len, "%s.%s is %s", t->name, f->name, isnan(v) ? "NaN" : "Inf");
            return -EINVAL;
        }
        if (f->check == MSG_CHECK_NONNEG && v < 0) {
            s_err(err, err_len, "%s.%s is negative (%g)", t->name, f->name, v);
            return -EINVAL;
        }
        return 0;
    }
    case MSG_CHECK_RANGE: {
        uint64_t v = f->kind == MSG_FIELD_U64 ? *S_CAT(body, f->off, uint64_t) : *S_CAT(body, f->off, uint32_t);
        if (v >= f->min && (!f->limit_floats || v <= lim->max_floats)) return 0;
        if (!f->limit_floats)
            s_err(err, err_len, "%s.%s must be at least %" PRIu32, t->name, f->name, f->min);
        else if (f->min > 0)
            s_err(err, err_len, "%s.%s: %" PRIu64 " is not in %" PRIu32 "..%" PRIu64, t->name, f->name, v, f->min,
                  lim->max_floats);
        else
            s_err(err, err_len, "%s.%s: %" PRIu64 " is over the limit of %" PRIu64, t->name, f->name, v,
                  lim->max_floats);
        return -EINVAL;
    }
    case MSG_CHECK_N: return s_check_n(t->name, *S_CAT(body, f->off, uint32_t), lim, err, err_len);
    case MSG_CHECK_ENUM: {
        int v = *S_CAT(body, f->off, int);
        if (v >= 1 && v < f->enum_count) return 0;
        s_err(err, err_len, "%s.%s: unknown %s %d", t->name, f->name, f->enum_noun, v);
        return -EINVAL;
    }
    case MSG_CHECK_STRING:
    case MSG_CHECK_TEXT: {
        const char *s = s_ptr(body, f->off);
        size_t max = f->check == MSG_CHECK_TEXT ? lim->max_text : lim->max_string;
        if (!s || strnlen(s, max + 1) <= max) return 0;
        s_err(err, err_len, "%s.%s: longer than the limit of %zu bytes", t->name, f->name, max);
        return -EINVAL;
    }
    case MSG_CHECK_FLOATS: {
        char name[96];
        snprintf(name, sizeof name, "%s.%s", t->name, f->name);
        return s_check_floats(name, s_ptr(body, f->off), *S_CAT(body, f->n_off, size_t), 0, 0, lim, err, err_len);
    }
    case MSG_CHECK_NONE:
    case MSG_CHECK_RULE:
        return 0;
    }
    return 0;
}

/* ---- each message's rule: what involves several fields or the model ----- */

typedef int (*s_rule_fn)(const msg_t *m, const msg_limits_t *lim, char *err, size_t err_len);

static int s_rule_welcome(const msg_t *m, const msg_limits_t *lim, char *err, size_t err_len) {
    (void)lim;
    const msg_welcome_t *w = &m->welcome;
    if (w->n_ranks > 0 && w->rank >= w->n_ranks) {
        s_err(err, err_len, "welcome.rank: %" PRIu32 " is not below n_ranks=%" PRIu32, w->rank, w->n_ranks);
        return -EINVAL;
    }
    return 0;
}

static int s_rule_params(const msg_t *m, const msg_limits_t *lim, char *err, size_t err_len) {
    int rc = s_check_params_arrays("params.params", m->params.params, m->params.n_params, 0, "params.state",
                                   m->params.state, m->params.n_state, lim, err, err_len);
    return rc < 0 ? rc : s_check_stats_layers(&m->params, lim, err, err_len);
}

static int s_rule_grad_push(const msg_t *m, const msg_limits_t *lim, char *err, size_t err_len) {
    const msg_grad_push_t *g = &m->grad_push;
    int rc;
    if (g->n_correct > g->n_examples) {
        s_err(err, err_len, "grad_push.n_correct: %" PRIu64 " is more than n_examples=%" PRIu64, g->n_correct,
              g->n_examples);
        return -EINVAL;
    }
    if (g->n_lowrank > 0) {
        /* grad leaves out the factored layers' weights; the state as ever */
        if ((rc = s_check_lowrank(g, lim, err, err_len)) < 0) return rc;
        if (g->n_state != 0 && g->n_state != lim->model->n_state) {
            s_err(err, err_len, "grad_push.state: expected %" PRIu64 " floats (or none), got %zu",
                  lim->model->n_state, g->n_state);
            return -EINVAL;
        }
        if ((rc = s_check_floats("grad_push.state", g->state, g->n_state, 0, 0, lim, err, err_len)) < 0) return rc;
    } else if ((rc = s_check_params_arrays("grad_push.grad", g->grad, g->n_grad, 1, "grad_push.state", g->state,
                                           g->n_state, lim, err, err_len)) < 0) {
        return rc;
    }
    return s_check_stats("grad_push.stats", &g->stats, 0, lim, err, err_len);
}

static int s_rule_stats_push(const msg_t *m, const msg_limits_t *lim, char *err, size_t err_len) {
    return s_check_stats("stats_push.stats", &m->stats_push.stats, 1, lim, err, err_len);
}

static int s_rule_job(const msg_t *m, const msg_limits_t *lim, char *err, size_t err_len) {
    const msg_job_t *j = &m->job;
    int rc = s_check_job_target("job", j->layer, j->factor, j->n, lim, err, err_len);
    if (rc < 0) return rc;
    uint64_t need = msg_packed_len(j->n);
    if (j->n_packed != need) {
        s_err(err, err_len, "job.packed: n=%" PRIu32 " needs %" PRIu64 " floats, got %zu", j->n, need, j->n_packed);
        return -EINVAL;
    }
    if ((rc = s_check_floats("job.packed", j->packed, j->n_packed, need, need, lim, err, err_len)) < 0) return rc;
    return s_check_diagonal("job.packed", j->packed, j->n, 1, err, err_len);
}

static int s_rule_job_result(const msg_t *m, const msg_limits_t *lim, char *err, size_t err_len) {
    const msg_job_result_t *r = &m->job_result;
    int rc = s_check_job_target("job_result", r->layer, r->factor, r->n, lim, err, err_len);
    if (rc < 0) return rc;
    int failed = r->error && r->error[0];
    int chol = r->method == MSG_METHOD_CHOLESKY;
    uint64_t n = r->n;
    if (failed) {
        if (r->n_inverse || r->n_eigvecs || r->n_eigvals) {
            s_err(err, err_len, "job_result: a failed job carries no data");
            return -EINVAL;
        }
        return 0;
    }
    if (chol && (r->n_eigvecs || r->n_eigvals)) {
        s_err(err, err_len, "job_result: a cholesky result carries no eigvecs/eigvals");
        return -EINVAL;
    }
    if (!chol && r->n_inverse) {
        s_err(err, err_len, "job_result: an eigen result carries no inverse");
        return -EINVAL;
    }
    if (chol) {
        if (r->n_inverse != msg_packed_len(n)) {
            s_err(err, err_len, "job_result.inverse: n=%" PRIu64 " needs %" PRIu64 " floats, got %zu", n,
                  msg_packed_len(n), r->n_inverse);
            return -EINVAL;
        }
        return s_check_floats("job_result.inverse", r->inverse, r->n_inverse, 1, 0, lim, err, err_len);
    }
    if (r->n_eigvecs != n * n) {
        s_err(err, err_len, "job_result.eigvecs: n=%" PRIu64 " needs %" PRIu64 " floats, got %zu", n, n * n,
              r->n_eigvecs);
        return -EINVAL;
    }
    if (r->n_eigvals != n) {
        s_err(err, err_len, "job_result.eigvals: n=%" PRIu64 " needs %" PRIu64 " floats, got %zu", n, n,
              r->n_eigvals);
        return -EINVAL;
    }
    if ((rc = s_check_floats("job_result.eigvecs", r->eigvecs, r->n_eigvecs, 1, 0, lim, err, err_len)) < 0)
        return rc;
    return s_check_floats("job_result.eigvals", r->eigvals, r->n_eigvals, 1, 0, lim, err, err_len);
}

/* The rule of each message with fields marked MSG_CHECK_RULE (NULL: none). */
static const s_rule_fn s_rules[MSG_TYPE_COUNT] = {
    [MSG_WELCOME] = s_rule_welcome,       [MSG_PARAMS] = s_rule_params, [MSG_GRAD_PUSH] = s_rule_grad_push,
    [MSG_STATS_PUSH] = s_rule_stats_push, [MSG_JOB] = s_rule_job,       [MSG_JOB_RESULT] = s_rule_job_result,
};

int msg_validate(const msg_t *m, const msg_limits_t *lim, char *err, size_t err_len) {
    msg_limits_t dl;
    if (!lim) {
        msg_limits_default(&dl);
        lim = &dl;
    }
    if (!m) {
        s_err(err, err_len, "no message");
        return -EINVAL;
    }
    if (m->protocol_version != KFAC_PROTOCOL_VERSION) {
        s_err(err, err_len, "protocol version %" PRIu32 " does not match this build's %d",
              m->protocol_version, KFAC_PROTOCOL_VERSION);
        return -EPROTO;
    }
    const msg_struct_t *t = msg_fields_body(m->type);
    if (!t) {
        s_err(err, err_len, "unknown message type %d", (int)m->type);
        return -EINVAL;
    }
    if (m->role <= MSG_ROLE_NONE || m->role >= MSG_ROLE_COUNT) {
        s_err(err, err_len, "%s: unknown sender role %d", msg_type_name(m->type), (int)m->role);
        return -EINVAL;
    }
    if (!msg_role_may_send(m->role, m->type)) {
        s_err(err, err_len, "a %s may not send %s", msg_role_name(m->role), msg_type_name(m->type));
        return -EINVAL;
    }
    const void *body = &m->hello; /* every member of msg_t's union starts here */
    for (size_t i = 0; i < t->n_fields; i++) {
        int rc = s_check_field(t, &t->fields[i], body, lim, err, err_len);
        if (rc < 0) return rc;
    }
    return s_rules[m->type] ? s_rules[m->type](m, lim, err, err_len) : 0;
}
