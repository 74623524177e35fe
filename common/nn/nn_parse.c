/* common/nn/nn_parse.c — the model text format: parsing, shape inference,
 * allocation of the parameter/state/activation arenas, initialization and
 * the summary table. The format is documented in models/README.md.
 *
 * One layer per line: `kind key=value key=value ...`; `#` starts a comment.
 * The first non-empty line is `input CxHxW [init=...] [bias_init=...]` (the
 * model-wide options); the last is `softmax_xent`.
 */
#include "common/nn/nn.h"

#include <ctype.h>
#include <errno.h>
#include <math.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "common/base/rng.h"
#include "common/nn/nn_dnnl.h"
#include "common/nn/nn_par.h"

/* Most values per example in any layer's output, the input or a conv patch
 * row (1 GiB of float32): keeps every per-example size well inside int. */
#define S_MAX_VALUES (1LL << 28)

static const char *s_kind_names[LAYER_KIND_COUNT] = {
    "fc", "conv", "relu", "tanh", "maxpool", "avgpool", "flatten",
    "dropout", "batchnorm", "add", "softmax_xent",
};

/* Options each kind accepts (space separated); "name" and "in" are common. */
static const char *s_kind_opts[LAYER_KIND_COUNT] = {
    "out bias kfac init bias_init", "out k stride pad bias kfac init bias_init", "", "", "k stride pad",
    "k stride pad global", "", "p", "eps momentum kfac", "from", "",
};

static const char *s_init_names[NN_INIT_COUNT] = {
    "default", "he_uniform", "he_normal", "xavier_uniform", "xavier_normal",
};
#define S_INIT_EXPECTED "default, he_uniform, he_normal, xavier_uniform or xavier_normal"

static const char *s_bias_init_names[NN_BIAS_INIT_COUNT] = {"default", "zero"};
#define S_BIAS_INIT_EXPECTED "default or zero"

const char *nn_init_name(nn_init_t init) {
    return (unsigned)init < NN_INIT_COUNT ? s_init_names[init] : "?";
}

const char *nn_bias_init_name(nn_bias_init_t bias_init) {
    return (unsigned)bias_init < NN_BIAS_INIT_COUNT ? s_bias_init_names[bias_init] : "?";
}

const char *layer_kind_name(layer_kind_t kind) {
    return (unsigned)kind < LAYER_KIND_COUNT ? s_kind_names[kind] : "?";
}

int net_find_layer(const net_t *net, const char *name) {
    for (int i = 0; i < net->n_layers; i++)
        if (strcmp(net->layers[i].name, name) == 0) return i;
    return -1;
}

typedef struct parse_ctx {
    const char *origin;
    int line;
    char *err;
    size_t err_len;
} parse_ctx_t;

__attribute__((format(printf, 2, 3)))
static int s_fail(parse_ctx_t *p, const char *fmt, ...) {
    char msg[512];
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(msg, sizeof msg, fmt, ap);
    va_end(ap);
    if (p->err && p->err_len) {
        if (p->line > 0) snprintf(p->err, p->err_len, "%s:%d: %s", p->origin, p->line, msg);
        else snprintf(p->err, p->err_len, "%s: %s", p->origin, msg);
    }
    return -EINVAL;
}

static int s_parse_int(parse_ctx_t *p, const char *kind, const char *key, const char *v,
                       int lo, int hi, int *out) {
    char *end;
    errno = 0;
    long x = strtol(v, &end, 10);
    if (errno || end == v || *end || x < lo || x > hi)
        return s_fail(p, "%s: option '%s' expects an integer in [%d, %d], got '%s'", kind, key, lo, hi, v);
    *out = (int)x;
    return 0;
}

static int s_parse_float(parse_ctx_t *p, const char *kind, const char *key, const char *v,
                         double lo, double hi, float *out) {
    char *end;
    errno = 0;
    double x = strtod(v, &end);
    if (errno || end == v || *end || !(x >= lo && x <= hi))
        return s_fail(p, "%s: option '%s' expects a number in [%g, %g], got '%s'", kind, key, lo, hi, v);
    *out = (float)x;
    return 0;
}

/* init=VALUE and bias_init=VALUE, on the input line (kind "input") or a layer. */
static int s_parse_init(parse_ctx_t *p, const char *kind, const char *v, nn_init_t *out) {
    for (int i = 0; i < NN_INIT_COUNT; i++)
        if (strcmp(v, s_init_names[i]) == 0) { *out = (nn_init_t)i; return 0; }
    return s_fail(p, "%s: init=%s is not valid (expected " S_INIT_EXPECTED ")", kind, v);
}

static int s_parse_bias_init(parse_ctx_t *p, const char *kind, const char *v, nn_bias_init_t *out) {
    for (int i = 0; i < NN_BIAS_INIT_COUNT; i++)
        if (strcmp(v, s_bias_init_names[i]) == 0) { *out = (nn_bias_init_t)i; return 0; }
    return s_fail(p, "%s: bias_init=%s is not valid (expected " S_BIAS_INIT_EXPECTED ")", kind, v);
}

/* Is `key` in the space-separated list `opts`? */
static int s_opt_allowed(const char *opts, const char *key) {
    size_t n = strlen(key);
    for (const char *s = opts; *s;) {
        while (*s == ' ') s++;
        const char *e = s;
        while (*e && *e != ' ') e++;
        if ((size_t)(e - s) == n && strncmp(s, key, n) == 0) return 1;
        s = e;
    }
    return 0;
}

static int s_valid_name(const char *s) {
    if (!*s || strlen(s) >= NN_NAME_MAX) return 0;
    for (; *s; s++)
        if (!isalnum((unsigned char)*s) && *s != '_' && *s != '-') return 0;
    return 1;
}

/* Output size of a window op along one axis; <= 0 when it does not fit. */
static int s_out_dim(int in, int k, int stride, int pad) {
    if (in + 2 * pad < k) return 0;
    return (in + 2 * pad - k) / stride + 1;
}

/* Parse one layer line (already split into tokens) into l, resolving names
 * against the layers before it. */
static int s_parse_layer(parse_ctx_t *p, net_t *net, layer_t *l, char **tok, int n_tok) {
    int kind = -1;
    for (int k = 0; k < LAYER_KIND_COUNT; k++)
        if (strcmp(tok[0], s_kind_names[k]) == 0) kind = k;
    if (kind < 0)
        return s_fail(p, "unknown layer '%s' (expected one of: fc conv relu tanh maxpool avgpool "
                         "flatten dropout batchnorm add softmax_xent)", tok[0]);
    memset(l, 0, sizeof *l);
    l->kind = (layer_kind_t)kind;
    l->line = p->line;
    l->index = net->n_layers;
    l->in = net->n_layers - 1;
    l->in2 = kind == LAYER_ADD ? -2 : -1; /* -2: from= not given yet */
    l->stride = 0;
    l->has_bias = 1;
    l->p = 0.5f;
    l->eps = 1e-5f;
    l->momentum = 0.1f;
    l->kfac = KFAC_MODE_DEFAULT;
    l->init = net->init;
    l->bias_init = net->bias_init;
    snprintf(l->name, sizeof l->name, "%s%d", tok[0], net->n_layers + 1);
    int have_out = 0, have_k = 0;
    const char *kn = tok[0];
    for (int t = 1; t < n_tok; t++) {
        char *key = tok[t], *eq = strchr(key, '=');
        const char *val = eq ? eq + 1 : NULL;
        if (eq) *eq = 0;
        if (!val) {
            if (kind == LAYER_AVGPOOL && strcmp(key, "global") == 0) { l->global = 1; continue; }
            return s_fail(p, "%s: expected key=value, got '%s'", kn, key);
        }
        if (strcmp(key, "name") == 0) {
            if (!s_valid_name(val))
                return s_fail(p, "%s: name '%s' must be 1-%d letters, digits, '_' or '-'", kn, val, NN_NAME_MAX - 1);
            snprintf(l->name, sizeof l->name, "%s", val);
        } else if (strcmp(key, "in") == 0 || (strcmp(key, "from") == 0 && kind == LAYER_ADD)) {
            int idx = strcmp(val, "input") == 0 ? -1 : net_find_layer(net, val);
            if (idx < 0 && strcmp(val, "input") != 0)
                return s_fail(p, "%s: '%s=%s' names no earlier layer", kn, key, val);
            if (strcmp(key, "in") == 0) l->in = idx; else l->in2 = idx;
        } else if (!s_opt_allowed(s_kind_opts[kind], key)) {
            return s_fail(p, "%s: unknown option '%s' (expected: name in%s%s)", kn, key,
                          *s_kind_opts[kind] ? " " : "", s_kind_opts[kind]);
        } else if (strcmp(key, "out") == 0) {
            if (s_parse_int(p, kn, key, val, 1, 1 << 20, &l->out)) return -EINVAL;
            have_out = 1;
        } else if (strcmp(key, "k") == 0) {
            if (s_parse_int(p, kn, key, val, 1, 64, &l->k)) return -EINVAL;
            have_k = 1;
        } else if (strcmp(key, "stride") == 0) {
            if (s_parse_int(p, kn, key, val, 1, 64, &l->stride)) return -EINVAL;
        } else if (strcmp(key, "pad") == 0) {
            if (s_parse_int(p, kn, key, val, 0, 64, &l->pad)) return -EINVAL;
        } else if (strcmp(key, "bias") == 0) {
            if (s_parse_int(p, kn, key, val, 0, 1, &l->has_bias)) return -EINVAL;
        } else if (strcmp(key, "global") == 0) {
            if (s_parse_int(p, kn, key, val, 0, 1, &l->global)) return -EINVAL;
        } else if (strcmp(key, "p") == 0) {
            if (s_parse_float(p, kn, key, val, 0.0, 0.99, &l->p)) return -EINVAL;
        } else if (strcmp(key, "eps") == 0) {
            if (s_parse_float(p, kn, key, val, 1e-12, 1.0, &l->eps)) return -EINVAL;
        } else if (strcmp(key, "momentum") == 0) {
            if (s_parse_float(p, kn, key, val, 0.0, 1.0, &l->momentum)) return -EINVAL;
        } else if (strcmp(key, "init") == 0) {
            if (s_parse_init(p, kn, val, &l->init)) return -EINVAL;
        } else if (strcmp(key, "bias_init") == 0) {
            if (s_parse_bias_init(p, kn, val, &l->bias_init)) return -EINVAL;
        } else if (strcmp(key, "kfac") == 0) {
            if (kind == LAYER_FC && strcmp(val, "standard") == 0) l->kfac = KFAC_MODE_STANDARD;
            else if (kind == LAYER_FC && strcmp(val, "doubly") == 0) l->kfac = KFAC_MODE_DOUBLY;
            else if (kind == LAYER_CONV && strcmp(val, "kfc") == 0) l->kfac = KFAC_MODE_KFC;
            else if (kind == LAYER_CONV && strcmp(val, "avg") == 0) l->kfac = KFAC_MODE_AVG;
            else if (strcmp(val, "none") == 0) l->kfac = KFAC_MODE_NONE;
            else if (strcmp(val, "auto") == 0) l->kfac = KFAC_MODE_DEFAULT;
            else
                return s_fail(p, "%s: kfac=%s is not valid (expected %s)", kn, val,
                              kind == LAYER_FC ? "standard, doubly, auto or none" : kind == LAYER_CONV ? "kfc, avg, auto or none" : "auto or none");
        }
    }
    if ((kind == LAYER_FC || kind == LAYER_CONV) && !have_out)
        return s_fail(p, "%s: option 'out' is required (number of %s)", kn, kind == LAYER_FC ? "outputs" : "output channels");
    if (kind == LAYER_CONV && !have_k) return s_fail(p, "conv: option 'k' (kernel size) is required");
    if (kind == LAYER_MAXPOOL && !have_k) l->k = 2;
    if (kind == LAYER_AVGPOOL && !have_k && !l->global) l->k = 2;
    if (kind == LAYER_ADD && l->in2 == -2)
        return s_fail(p, "add: option 'from=<layer name>' is required (the branch to add)");
    if (l->stride == 0) l->stride = (kind == LAYER_MAXPOOL || kind == LAYER_AVGPOOL) ? l->k : 1;
    /* Checked after the options so default names ("fc3") are unique too. */
    if (strcmp(l->name, "input") == 0)
        return s_fail(p, "%s: name 'input' is reserved (in=input and from=input mean the network input)", kn);
    int dup = net_find_layer(net, l->name);
    if (dup >= 0)
        return s_fail(p, "%s: name '%s' is already used by the layer on line %d; give this layer a unique name=",
                      kn, l->name, net->layers[dup].line);
    return 0;
}

/* Infer the layer's input and output shapes from its inputs. */
static int s_infer_shape(parse_ctx_t *p, net_t *net, layer_t *l) {
    if (l->in >= 0) {
        const layer_t *src = &net->layers[l->in];
        l->in_c = src->c; l->in_h = src->h; l->in_w = src->w;
    } else {
        l->in_c = net->in_c; l->in_h = net->in_h; l->in_w = net->in_w;
    }
    int in_size = l->in_c * l->in_h * l->in_w;
    switch (l->kind) {
    case LAYER_FC:
        l->c = l->out; l->h = l->w = 1;
        break;
    case LAYER_CONV:
        if (l->pad >= l->k) return s_fail(p, "conv: pad=%d must be smaller than k=%d", l->pad, l->k);
        l->c = l->out;
        l->h = s_out_dim(l->in_h, l->k, l->stride, l->pad);
        l->w = s_out_dim(l->in_w, l->k, l->stride, l->pad);
        if (l->h <= 0 || l->w <= 0)
            return s_fail(p, "conv: kernel %dx%d does not fit input %dx%dx%d with pad=%d",
                          l->k, l->k, l->in_c, l->in_h, l->in_w, l->pad);
        break;
    case LAYER_MAXPOOL:
    case LAYER_AVGPOOL:
        if (l->global) { l->k = l->in_h > l->in_w ? l->in_h : l->in_w; l->c = l->in_c; l->h = l->w = 1; break; }
        if (l->pad >= l->k) return s_fail(p, "%s: pad=%d must be smaller than k=%d", layer_kind_name(l->kind), l->pad, l->k);
        l->c = l->in_c;
        l->h = s_out_dim(l->in_h, l->k, l->stride, l->pad);
        l->w = s_out_dim(l->in_w, l->k, l->stride, l->pad);
        if (l->h <= 0 || l->w <= 0)
            return s_fail(p, "%s: window %dx%d does not fit input %dx%dx%d", layer_kind_name(l->kind),
                          l->k, l->k, l->in_c, l->in_h, l->in_w);
        break;
    case LAYER_FLATTEN:
        l->c = in_size; l->h = l->w = 1;
        break;
    case LAYER_ADD: {
        int c2, h2, w2;
        if (l->in2 >= 0) { const layer_t *s2 = &net->layers[l->in2]; c2 = s2->c; h2 = s2->h; w2 = s2->w; }
        else { c2 = net->in_c; h2 = net->in_h; w2 = net->in_w; }
        if (c2 != l->in_c || h2 != l->in_h || w2 != l->in_w)
            return s_fail(p, "add: shape mismatch: input is %dx%dx%d but from= is %dx%dx%d",
                          l->in_c, l->in_h, l->in_w, c2, h2, w2);
        l->c = l->in_c; l->h = l->in_h; l->w = l->in_w;
        break;
    }
    case LAYER_SOFTMAX_XENT:
        if (in_size < 2) return s_fail(p, "softmax_xent: needs at least 2 classes, input has %d values", in_size);
        l->c = in_size; l->h = l->w = 1;
        break;
    default: /* elementwise: relu, tanh, dropout, batchnorm */
        l->c = l->in_c; l->h = l->in_h; l->w = l->in_w;
        break;
    }
    long long size = (long long)l->c * l->h * l->w;
    if (size > S_MAX_VALUES)
        return s_fail(p, "%s: output %dx%dx%d has %lld values per example, more than %lld",
                      layer_kind_name(l->kind), l->c, l->h, l->w, size, S_MAX_VALUES);
    if (l->kind == LAYER_CONV && (long long)l->in_c * l->k * l->k > S_MAX_VALUES)
        return s_fail(p, "conv: patches of %d channels x %dx%d have more than %lld values",
                      l->in_c, l->k, l->k, S_MAX_VALUES);
    l->size = (int)size;
    return 0;
}

static void s_add_view(net_t *net, const char *layer, const char *suffix, size_t off, size_t n,
                       int d0, int d1, int d2, int d3) {
    net_view_t *v = &net->views[net->n_views++];
    snprintf(v->name, sizeof v->name, "%s.%s", layer, suffix);
    v->off = off; v->n = n;
    v->shape[0] = d0; v->shape[1] = d1; v->shape[2] = d2; v->shape[3] = d3;
}

/* Lay out the parameter and state arenas and allocate every buffer. */
static int s_allocate(parse_ctx_t *p, net_t *net) {
    size_t np = 0, ns = 0;
    net->views = calloc((size_t)(unsigned)net->n_layers * 2 + 1, sizeof *net->views);
    if (!net->views) return s_fail(p, "out of memory");
    for (int i = 0; i < net->n_layers; i++) {
        layer_t *l = &net->layers[i];
        int in_size = l->in_c * l->in_h * l->in_w;
        if (l->kind == LAYER_FC) {
            l->n_w = (size_t)l->out * in_size; l->n_b = l->has_bias ? (size_t)l->out : 0;
        } else if (l->kind == LAYER_CONV) {
            l->n_w = (size_t)l->out * l->in_c * l->k * l->k; l->n_b = l->has_bias ? (size_t)l->out : 0;
        } else if (l->kind == LAYER_BATCHNORM) {
            l->n_w = (size_t)l->c; l->n_b = (size_t)l->c;
            ns += 2 * (size_t)l->c;
        }
        l->w_off = np; np += l->n_w;
        l->b_off = np; np += l->n_b;
    }
    net->n_params = np;
    net->n_state = ns;
    net->params = calloc(np ? np : 1, sizeof(float));
    net->grads = calloc(np ? np : 1, sizeof(float));
    net->state = calloc(ns ? ns : 1, sizeof(float));
    if (!net->params || !net->grads || !net->state) return s_fail(p, "out of memory (%zu parameters)", np);
    size_t so = 0;
    size_t cap = (size_t)net->batch_cap;
    for (int i = 0; i < net->n_layers; i++) {
        layer_t *l = &net->layers[i];
        if (l->n_w) {
            l->weight = net->params + l->w_off; l->dweight = net->grads + l->w_off;
            if (l->kind == LAYER_FC) s_add_view(net, l->name, "w", l->w_off, l->n_w, l->out, l->in_c * l->in_h * l->in_w, 0, 0);
            else if (l->kind == LAYER_CONV) s_add_view(net, l->name, "w", l->w_off, l->n_w, l->out, l->in_c, l->k, l->k);
            else s_add_view(net, l->name, "gamma", l->w_off, l->n_w, l->c, 0, 0, 0);
        }
        if (l->n_b) {
            l->bias = net->params + l->b_off; l->dbias = net->grads + l->b_off;
            s_add_view(net, l->name, l->kind == LAYER_BATCHNORM ? "beta" : "b", l->b_off, l->n_b, (int)l->n_b, 0, 0, 0);
        }
        if (l->kind == LAYER_BATCHNORM) {
            l->run_mean = net->state + so; so += (size_t)l->c;
            l->run_var = net->state + so; so += (size_t)l->c;
        }
        size_t sz = cap * (size_t)l->size;
        if (l->kind != LAYER_SOFTMAX_XENT) {
            l->y = malloc(sz * sizeof(float));
            l->dy = malloc(sz * sizeof(float));
            if (!l->y || !l->dy) return s_fail(p, "out of memory for layer '%s' (%zu floats)", l->name, sz);
        }
        if (l->kind == LAYER_CONV) {
            size_t rows = cap * (size_t)l->h * l->w, K = (size_t)l->in_c * l->k * l->k;
            l->cols = malloc(rows * K * sizeof(float));
            l->dcols = malloc(rows * K * sizeof(float));
            l->tmp = malloc(rows * (size_t)l->out * sizeof(float));
            if (!l->cols || !l->dcols || !l->tmp)
                return s_fail(p, "out of memory for conv '%s' patches (%zu x %zu floats); lower the batch size", l->name, rows, K);
        } else if (l->kind == LAYER_MAXPOOL) {
            if (!(l->argmax = malloc(sz * sizeof(int32_t)))) return s_fail(p, "out of memory");
        } else if (l->kind == LAYER_DROPOUT) {
            if (!(l->mask = malloc(sz * sizeof(float)))) return s_fail(p, "out of memory");
        } else if (l->kind == LAYER_BATCHNORM) {
            l->xhat = malloc(sz * sizeof(float));
            l->bmean = malloc((size_t)l->c * sizeof(float));
            l->binvstd = malloc((size_t)l->c * sizeof(float));
            if (!l->xhat || !l->bmean || !l->binvstd) return s_fail(p, "out of memory");
        } else if (l->kind == LAYER_SOFTMAX_XENT) {
            if (!(l->probs = malloc(cap * (size_t)l->c * sizeof(float)))) return s_fail(p, "out of memory");
        }
    }
    return 0;
}

/* Split a line into whitespace-separated tokens in place; returns count. */
static int s_tokenize(char *s, char **tok, int max_tok) {
    int n = 0;
    char *save = NULL;
    for (char *t = strtok_r(s, " \t\r", &save); t; t = strtok_r(NULL, " \t\r", &save)) {
        if (n == max_tok) return -1;
        tok[n++] = t;
    }
    return n;
}

net_t *net_parse(const char *text, const char *origin, int batch_cap, char *err, size_t err_len) {
    parse_ctx_t p = {origin ? origin : "<model>", 0, err, err_len};
    if (err && err_len) err[0] = 0;
    if (!text) { s_fail(&p, "no model text"); return NULL; }
    net_t *net = calloc(1, sizeof *net);
    char *copy = strdup(text);
    if (!net || !copy) { free(net); free(copy); s_fail(&p, "out of memory"); return NULL; }
    net->source = strdup(text);
    net->fc_doubly_min_in = 1e30; /* automatic doubly-factored selection off unless set */
    int cap_layers = 16, saw_input = 0, rc = 0;
    net->layers = calloc((size_t)cap_layers, sizeof(layer_t));
    if (!net->source || !net->layers) { rc = s_fail(&p, "out of memory"); goto done; }
    if (batch_cap < 1 || batch_cap > (1 << 20)) { rc = s_fail(&p, "batch capacity %d out of range [1, %d]", batch_cap, 1 << 20); goto done; }
    net->batch_cap = batch_cap;
    char *save = NULL;
    int line_no = 0;
    /* strtok_r on "\n" would skip empty lines and lose line numbers: walk by hand. */
    for (char *line = copy; line; ) {
        char *nl = strchr(line, '\n');
        if (nl) *nl = 0;
        line_no++;
        p.line = line_no;
        char *hash = strchr(line, '#');
        if (hash) *hash = 0;
        char *tok[32];
        int n_tok = s_tokenize(line, tok, 32);
        line = nl ? nl + 1 : NULL;
        if (n_tok < 0) { rc = s_fail(&p, "too many options on one line (at most 31)"); goto done; }
        if (n_tok == 0) continue;
        if (!saw_input) {
            if (strcmp(tok[0], "input") != 0) { rc = s_fail(&p, "expected 'input CxHxW' as the first layer, got '%s'", tok[0]); goto done; }
            int c = 0, h = 0, w = 0;
            char tail;
            if (n_tok < 2 || sscanf(tok[1], "%dx%dx%d%c", &c, &h, &w, &tail) != 3 || c < 1 || h < 1 || w < 1 ||
                c > 4096 || h > 4096 || w > 4096) {
                rc = s_fail(&p, "input: expected a shape like 'input 1x28x28' (channels x height x width), got '%s'",
                            n_tok > 1 ? tok[1] : "");
                goto done;
            }
            if ((long long)c * h * w > S_MAX_VALUES) {
                rc = s_fail(&p, "input: %s has %lld values per example, more than %lld", tok[1],
                            (long long)c * h * w, S_MAX_VALUES);
                goto done;
            }
            /* Model-wide options: the defaults of every layer. */
            for (int t = 2; t < n_tok; t++) {
                char *eq = strchr(tok[t], '=');
                if (!eq) { rc = s_fail(&p, "input: expected key=value after the shape, got '%s' (options: init bias_init)", tok[t]); goto done; }
                *eq = 0;
                if (strcmp(tok[t], "init") == 0) rc = s_parse_init(&p, "input", eq + 1, &net->init);
                else if (strcmp(tok[t], "bias_init") == 0) rc = s_parse_bias_init(&p, "input", eq + 1, &net->bias_init);
                else rc = s_fail(&p, "input: unknown option '%s' (expected: init bias_init)", tok[t]);
                if (rc) goto done;
            }
            net->in_c = c; net->in_h = h; net->in_w = w;
            net->in_size = c * h * w;
            saw_input = 1;
            continue;
        }
        if (strcmp(tok[0], "input") == 0) { rc = s_fail(&p, "'input' may appear only once, as the first layer"); goto done; }
        if (net->n_layers > 0 && net->layers[net->n_layers - 1].kind == LAYER_SOFTMAX_XENT) {
            rc = s_fail(&p, "'%s' after softmax_xent: the loss must be the last layer", tok[0]);
            goto done;
        }
        if (net->n_layers == cap_layers) {
            cap_layers *= 2;
            if (cap_layers > 4096) { rc = s_fail(&p, "too many layers (at most 4096)"); goto done; }
            layer_t *nl2 = realloc(net->layers, (size_t)cap_layers * sizeof(layer_t));
            if (!nl2) { rc = s_fail(&p, "out of memory"); goto done; }
            net->layers = nl2;
        }
        layer_t *l = &net->layers[net->n_layers];
        if ((rc = s_parse_layer(&p, net, l, tok, n_tok))) goto done;
        if ((rc = s_infer_shape(&p, net, l))) goto done;
        net->n_layers++;
    }
    (void)save;
    p.line = 0;
    if (!saw_input) { rc = s_fail(&p, "empty model: expected 'input CxHxW' and layers ending in softmax_xent"); goto done; }
    if (net->n_layers == 0 || net->layers[net->n_layers - 1].kind != LAYER_SOFTMAX_XENT) {
        rc = s_fail(&p, "the last layer must be softmax_xent (the loss)");
        goto done;
    }
    net->n_classes = net->layers[net->n_layers - 1].c;
    for (int i = 0; i < net->n_layers; i++) {
        layer_t *l = &net->layers[i];
        if (l->kind == LAYER_SOFTMAX_XENT && i != net->n_layers - 1) {
            p.line = l->line;
            rc = s_fail(&p, "softmax_xent must be the last layer");
            goto done;
        }
    }
    rc = s_allocate(&p, net);
done:
    free(copy);
    if (rc) { net_free(&net); return NULL; }
    return net;
}

net_t *net_load(const char *path, int batch_cap, char *err, size_t err_len) {
    FILE *f = fopen(path, "rb");
    if (!f) {
        snprintf(err, err_len, "%s: cannot open model file: %s", path, strerror(errno));
        return NULL;
    }
    char *buf = NULL;
    size_t len = 0, cap = 0;
    for (;;) {
        if (len + 4096 + 1 > cap) {
            cap = cap ? cap * 2 : 8192;
            if (cap > (1u << 24)) { snprintf(err, err_len, "%s: model file larger than 16 MiB", path); free(buf); fclose(f); return NULL; }
            char *nb = realloc(buf, cap);
            if (!nb) { free(buf); fclose(f); snprintf(err, err_len, "%s: out of memory", path); return NULL; }
            buf = nb;
        }
        size_t r = fread(buf + len, 1, 4096, f);
        len += r;
        if (r < 4096) break;
    }
    int bad = ferror(f);
    fclose(f);
    if (bad) { free(buf); snprintf(err, err_len, "%s: read error", path); return NULL; }
    buf[len] = 0;
    if (memchr(buf, 0, len)) { free(buf); snprintf(err, err_len, "%s: not a text model file (contains NUL bytes)", path); return NULL; }
    net_t *net = net_parse(buf, path, batch_cap, err, err_len);
    free(buf);
    return net;
}

void net_free(net_t **net_p) {
    if (!net_p || !*net_p) return;
    net_t *net = *net_p;
    for (int i = 0; net->layers && i < net->n_layers; i++) {
        layer_t *l = &net->layers[i];
        nn_dnnl_conv_free(&l->dnnl);
        free(l->y); free(l->dy); free(l->cols); free(l->dcols); free(l->tmp);
        free(l->argmax); free(l->mask); free(l->xhat); free(l->bmean); free(l->binvstd); free(l->probs);
    }
    /* A layer that failed mid-parse is not counted in n_layers but may hold nothing. */
    free(net->layers);
    free(net->params); free(net->grads); free(net->state);
    free(net->views); free(net->source);
    nn_par_free(&net->par);
    free(net->par_scratch);
    free(net);
    *net_p = NULL;
}

void net_print_summary(const net_t *net, void *fp) {
    FILE *f = fp;
    fprintf(f, "%-4s %-14s %-12s %-16s %12s  %s\n", "#", "layer", "kind", "output", "params", "input");
    char shape[32];
    snprintf(shape, sizeof shape, "%dx%dx%d", net->in_c, net->in_h, net->in_w);
    fprintf(f, "%-4d %-14s %-12s %-16s %12d\n", 0, "input", "input", shape, 0);
    for (int i = 0; i < net->n_layers; i++) {
        const layer_t *l = &net->layers[i];
        snprintf(shape, sizeof shape, "%dx%dx%d", l->c, l->h, l->w);
        const char *src = l->in < 0 ? "input" : net->layers[l->in].name;
        char srcbuf[80];
        if (l->kind == LAYER_ADD)
            snprintf(srcbuf, sizeof srcbuf, "%s + %s", src, l->in2 < 0 ? "input" : net->layers[l->in2].name);
        else
            snprintf(srcbuf, sizeof srcbuf, "%s", src);
        fprintf(f, "%-4d %-14s %-12s %-16s %12zu  %s\n", i + 1, l->name, layer_kind_name(l->kind), shape,
                l->n_w + l->n_b, srcbuf);
    }
    fprintf(f, "total parameters: %zu (%.2f MiB float32)\n", net->n_params, net->n_params * 4.0 / 1048576.0);
}

/* Fill n values from r with the uniform or normal scheme of the given
 * bound or standard deviation. The uniform expression is the one the
 * original He-uniform init used, so init=he_uniform draws the same floats. */
static void s_fill_uniform(rng_t *r, float *v, size_t n, double bound) {
    for (size_t j = 0; j < n; j++) v[j] = (float)((2.0 * rng_uniform(r) - 1.0) * bound);
}

static void s_fill_normal(rng_t *r, float *v, size_t n, double sd) {
    for (size_t j = 0; j < n; j++) v[j] = (float)(rng_normal(r) * sd);
}

void net_init_params(net_t *net, uint64_t seed) {
    rng_t r;
    rng_seed(&r, seed);
    for (int i = 0; i < net->n_layers; i++) {
        layer_t *l = &net->layers[i];
        if (l->kind == LAYER_FC || l->kind == LAYER_CONV) {
            /* fc: fan_in = in, fan_out = out; conv: fan_in = in_c*k*k, fan_out = out*k*k. */
            double fan_in = (double)l->n_w / l->out;
            double fan_out = l->kind == LAYER_CONV ? (double)l->out * l->k * l->k : (double)l->out;
            switch (l->init) {
            case NN_INIT_HE_UNIFORM: s_fill_uniform(&r, l->weight, l->n_w, sqrt(6.0 / fan_in)); break;
            case NN_INIT_HE_NORMAL: s_fill_normal(&r, l->weight, l->n_w, sqrt(2.0 / fan_in)); break;
            case NN_INIT_XAVIER_UNIFORM: s_fill_uniform(&r, l->weight, l->n_w, sqrt(6.0 / (fan_in + fan_out))); break;
            case NN_INIT_XAVIER_NORMAL: s_fill_normal(&r, l->weight, l->n_w, sqrt(2.0 / (fan_in + fan_out))); break;
            case NN_INIT_DEFAULT:
            default: s_fill_uniform(&r, l->weight, l->n_w, 1.0 / sqrt(fan_in)); break;
            }
            if (l->bias_init == NN_BIAS_INIT_ZERO) {
                for (size_t j = 0; j < l->n_b; j++) l->bias[j] = 0.0f;
            } else {
                s_fill_uniform(&r, l->bias, l->n_b, 1.0 / sqrt(fan_in));
            }
        } else if (l->kind == LAYER_BATCHNORM) {
            for (int c = 0; c < l->c; c++) { l->weight[c] = 1.0f; l->bias[c] = 0.0f; l->run_mean[c] = 0.0f; l->run_var[c] = 1.0f; }
        }
    }
    net->dropout_seed = seed ^ 0x5deece66dULL;
}
