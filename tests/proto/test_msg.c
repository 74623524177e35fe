/* tests/proto/test_msg.c — the wire messages (proto/msg.h): encode/decode round
 * trips of every type with random contents, hostile input (every prefix of a
 * message, random bytes, mutated bytes), and msg_validate() on each kind of
 * bad content: wrong version, wrong role, NaN/Inf (the error names the field
 * and index), sizes against data lengths and against the model, limits.
 *
 * Random contents come from a fresh seed (/dev/urandom) printed in every
 * failure message. Floats must survive the wire bit for bit (no tolerance:
 * the encoding is a memcpy of IEEE-754 float32).
 */
#include <check.h>
#include <errno.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "common/base/rng.h"
#include "proto/msg.h"
#include "tests/lib/seed.h"

/* ---- fixtures ----------------------------------------------------------- */

/* A random model: up to 6 layers of kinds none / standard (A, G) / doubly
 * (K, Psi, G, G_bias) / batch norm (2x2 blocks). */
typedef struct s_ctx {
    uint64_t seed;
    rng_t rng;
    msg_layer_shape_t layers[6];
    msg_model_shape_t model;
    msg_limits_t lim; /* with model */
} s_ctx_t;

static void s_ctx_init(s_ctx_t *c) {
    memset(c, 0, sizeof *c);
    c->seed = test_seed();
    rng_seed(&c->rng, c->seed);
    rng_t *r = &c->rng;
    c->model.n_layers = 2 + rng_below(r, 5);
    int any = 0;
    for (uint32_t l = 0; l < c->model.n_layers; l++) {
        msg_layer_shape_t *ls = &c->layers[l];
        uint32_t kind = rng_below(r, 4);
        if (l == 0) kind = 1 + rng_below(r, 2); /* at least one invertible factor */
        if (l == 1) kind = 1 + rng_below(r, 3); /* at least two layers with statistics */
        if (kind == 1) {
            ls->n_factors = 2;
            ls->kind[0] = MSG_FACTOR_A;
            ls->kind[1] = MSG_FACTOR_G;
        } else if (kind == 2) {
            ls->n_factors = 4;
            ls->kind[0] = MSG_FACTOR_K;
            ls->kind[1] = MSG_FACTOR_PSI;
            ls->kind[2] = MSG_FACTOR_G;
            ls->kind[3] = MSG_FACTOR_G_BIAS;
        } else if (kind == 3) {
            ls->n_factors = 1;
            ls->kind[0] = MSG_FACTOR_BN;
        }
        for (uint32_t f = 0; f < ls->n_factors; f++) {
            if (ls->kind[f] == MSG_FACTOR_BN) {
                ls->n[f] = 2;
                ls->n_blocks[f] = 1 + rng_below(r, 16);
            } else {
                ls->n[f] = 1 + rng_below(r, 24);
                ls->n_blocks[f] = 1;
            }
        }
        any |= ls->n_factors > 0;
    }
    ck_assert(any);
    c->model.n_params = 1 + rng_below(r, 3000);
    c->model.n_state = rng_below(r, 40);
    c->model.layers = c->layers;
    msg_limits_default(&c->lim);
    c->lim.model = &c->model;
}

static float *s_floats(rng_t *r, size_t n) {
    float *x = malloc((n ? n : 1) * sizeof *x);
    ck_assert_ptr_nonnull(x);
    for (size_t i = 0; i < n; i++) x[i] = (float)(rng_normal(r) * 3.0);
    return x;
}

static char *s_string(rng_t *r, size_t max_len) {
    size_t n = rng_below(r, (uint32_t)max_len + 1);
    char *s = malloc(n + 1);
    ck_assert_ptr_nonnull(s);
    for (size_t i = 0; i < n; i++) {
        uint32_t c = rng_below(r, 97);
        s[i] = c == 96 ? '\n' : (char)(32 + c); /* printable ASCII and newlines */
    }
    s[n] = 0;
    return s;
}

/* A factor with the model's shape; diagonals are >= 0 as for any second
 * moment matrix. */
static void s_factor(rng_t *r, msg_factor_t *f, msg_factor_kind_t kind, uint32_t n, uint32_t nb) {
    f->kind = kind;
    f->n = n;
    f->n_blocks = nb;
    f->n_data = (size_t)nb * msg_packed_len(n);
    f->data = s_floats(r, f->n_data);
    for (uint32_t b = 0; b < nb; b++)
        for (uint32_t i = 0; i < n; i++) {
            float *d = &f->data[b * msg_packed_len(n) + msg_packed_index(n, i, i)];
            *d = fabsf(*d);
        }
}

/* Statistics for a random non-empty subset of the model's layers, in random
 * order. */
static void s_stats(s_ctx_t *c, msg_stats_t *st) {
    rng_t *r = &c->rng;
    uint32_t idx[8], n = 0;
    for (uint32_t l = 0; l < c->model.n_layers; l++)
        if (c->layers[l].n_factors && (n == 0 || rng_below(r, 3))) idx[n++] = l;
    for (uint32_t i = n; i > 1; i--) { /* shuffle */
        uint32_t j = rng_below(r, i), t = idx[i - 1];
        idx[i - 1] = idx[j];
        idx[j] = t;
    }
    st->n_layers = n;
    st->layers = calloc(n, sizeof *st->layers);
    ck_assert_ptr_nonnull(st->layers);
    for (uint32_t i = 0; i < n; i++) {
        const msg_layer_shape_t *ls = &c->layers[idx[i]];
        msg_layer_stats_t *d = &st->layers[i];
        d->layer = idx[i];
        d->n_factors = ls->n_factors;
        d->factors = calloc(ls->n_factors, sizeof *d->factors);
        ck_assert_ptr_nonnull(d->factors);
        for (uint32_t f = 0; f < ls->n_factors; f++)
            s_factor(r, &d->factors[f], ls->kind[f], ls->n[f], ls->n_blocks[f]);
    }
}

/* A (layer, factor) that can be an inversion job. */
static void s_job_target(s_ctx_t *c, uint32_t *layer, uint32_t *factor, uint32_t *n) {
    for (;;) {
        uint32_t l = rng_below(&c->rng, c->model.n_layers);
        const msg_layer_shape_t *ls = &c->layers[l];
        if (ls->n_factors == 0) continue;
        uint32_t f = rng_below(&c->rng, ls->n_factors);
        if (ls->n_blocks[f] > 1 || ls->kind[f] == MSG_FACTOR_BN) continue;
        *layer = l;
        *factor = f;
        *n = ls->n[f];
        return;
    }
}

static msg_role_t s_client_role(rng_t *r) {
    static const msg_role_t roles[] = {MSG_ROLE_WORKER, MSG_ROLE_STATSD, MSG_ROLE_INVERTD, MSG_ROLE_TOOL};
    return roles[rng_below(r, 4)];
}

/* A random message of type t that passes msg_validate(c->lim); every
 * pointer is malloc'd so msg_clear() frees it. */
static void s_random_msg(s_ctx_t *c, msg_type_t t, msg_t *m) {
    rng_t *r = &c->rng;
    msg_role_t role = MSG_ROLE_PS;
    switch (t) {
    case MSG_HELLO: case MSG_BYE: role = s_client_role(r); break;
    case MSG_GET_PARAMS: {
        static const msg_role_t g[] = {MSG_ROLE_WORKER, MSG_ROLE_STATSD, MSG_ROLE_TOOL};
        role = g[rng_below(r, 3)];
        break;
    }
    case MSG_GRAD_PUSH: role = MSG_ROLE_WORKER; break;
    case MSG_STATS_PUSH: role = MSG_ROLE_STATSD; break;
    case MSG_JOB_REQUEST: case MSG_JOB_RESULT: role = MSG_ROLE_INVERTD; break;
    case MSG_HEARTBEAT: case MSG_ERROR: role = (msg_role_t)(1 + rng_below(r, MSG_ROLE_COUNT - 1)); break;
    default: role = MSG_ROLE_PS; break;
    }
    msg_init(m, t, role, (uint32_t)rng_u64(r));
    switch (t) {
    case MSG_HELLO:
        m->hello.build_id = s_string(r, 40);
        m->hello.host = s_string(r, 20);
        m->hello.pid = (uint32_t)rng_u64(r);
        break;
    case MSG_WELCOME:
        m->welcome.model_text = s_string(r, 300);
        m->welcome.config_text = s_string(r, 300);
        m->welcome.params_version = rng_u64(r) >> 1;
        m->welcome.n_params = c->model.n_params;
        m->welcome.n_state = c->model.n_state;
        m->welcome.n_ranks = rng_below(r, 9);
        m->welcome.rank = m->welcome.n_ranks ? rng_below(r, m->welcome.n_ranks) : 0;
        m->welcome.assigned_id = (uint32_t)rng_u64(r);
        break;
    case MSG_REFUSE: m->refuse.text = s_string(r, 100); break;
    case MSG_BYE: m->bye.text = s_string(r, 100); break;
    case MSG_SHUTDOWN: m->shutdown.text = s_string(r, 100); break;
    case MSG_GET_PARAMS: m->get_params.min_version = rng_u64(r); break;
    case MSG_PARAMS:
        m->params.version = rng_u64(r);
        m->params.n_params = c->model.n_params;
        m->params.params = s_floats(r, m->params.n_params);
        if (rng_below(r, 2) && c->model.n_state) {
            m->params.n_state = c->model.n_state;
            m->params.state = s_floats(r, m->params.n_state);
        }
        m->params.want_stats = (int)rng_below(r, 2);
        break;
    case MSG_GRAD_PUSH: {
        msg_grad_push_t *g = &m->grad_push;
        g->version = rng_u64(r);
        g->loss = rng_normal(r);
        g->n_examples = 1 + rng_below(r, 1000);
        g->n_correct = rng_below(r, (uint32_t)g->n_examples + 1);
        g->n_grad = c->model.n_params;
        g->grad = s_floats(r, g->n_grad);
        if (rng_below(r, 2) && c->model.n_state) {
            g->n_state = c->model.n_state;
            g->state = s_floats(r, g->n_state);
        }
        if (rng_below(r, 2)) s_stats(c, &g->stats);
        g->compute_ms = rng_uniform(r) * 100;
        break;
    }
    case MSG_STATS_PUSH:
        m->stats_push.params_version = rng_u64(r);
        m->stats_push.n_examples = 1 + rng_below(r, 1000);
        m->stats_push.compute_ms = rng_uniform(r) * 100;
        s_stats(c, &m->stats_push.stats);
        break;
    case MSG_JOB_REQUEST: m->job_request.max_n = rng_below(r, 5000); break;
    case MSG_JOB: {
        msg_job_t *j = &m->job;
        j->job_id = rng_u64(r);
        s_job_target(c, &j->layer, &j->factor, &j->n);
        j->factor_version = rng_u64(r);
        j->method = rng_below(r, 2) ? MSG_METHOD_CHOLESKY : MSG_METHOD_EIGEN;
        j->damping = rng_uniform(r);
        msg_factor_t f;
        s_factor(r, &f, MSG_FACTOR_A, j->n, 1);
        j->packed = f.data;
        j->n_packed = f.n_data;
        break;
    }
    case MSG_JOB_RESULT: {
        msg_job_result_t *j = &m->job_result;
        j->job_id = rng_u64(r);
        s_job_target(c, &j->layer, &j->factor, &j->n);
        j->factor_version = rng_u64(r);
        j->method = rng_below(r, 2) ? MSG_METHOD_CHOLESKY : MSG_METHOD_EIGEN;
        j->damping = rng_uniform(r);
        j->compute_ms = rng_uniform(r) * 50;
        if (rng_below(r, 8) == 0) {
            j->error = s_string(r, 60);
            if (!j->error[0]) { free(j->error); j->error = strdup("cholesky failed"); }
        } else if (j->method == MSG_METHOD_CHOLESKY) {
            j->n_inverse = msg_packed_len(j->n);
            j->inverse = s_floats(r, j->n_inverse);
        } else {
            j->n_eigvecs = (size_t)j->n * j->n;
            j->eigvecs = s_floats(r, j->n_eigvecs);
            j->n_eigvals = j->n;
            j->eigvals = s_floats(r, j->n_eigvals);
        }
        break;
    }
    case MSG_HEARTBEAT:
        m->heartbeat.mono_ns = rng_u64(r);
        m->heartbeat.echo_ns = rng_below(r, 2) ? rng_u64(r) : 0;
        break;
    case MSG_ERROR:
        m->error.code = (msg_error_code_t)(1 + rng_below(r, MSG_ERR_COUNT - 1));
        m->error.text = s_string(r, 100);
        break;
    default:
        ck_abort_msg("no generator for type %d", (int)t);
    }
}

/* ---- deep comparison ---------------------------------------------------- */

static int s_str_eq(const char *a, const char *b) { return strcmp(a ? a : "", b ? b : "") == 0; }

static int s_arr_eq(const float *a, size_t na, const float *b, size_t nb) {
    if (na != nb) return 0;
    return na == 0 || memcmp(a, b, na * sizeof *a) == 0; /* bit for bit */
}

static int s_stats_eq(const msg_stats_t *a, const msg_stats_t *b) {
    if (a->n_layers != b->n_layers) return 0;
    for (size_t l = 0; l < a->n_layers; l++) {
        const msg_layer_stats_t *x = &a->layers[l], *y = &b->layers[l];
        if (x->layer != y->layer || x->n_factors != y->n_factors) return 0;
        for (size_t f = 0; f < x->n_factors; f++) {
            const msg_factor_t *p = &x->factors[f], *q = &y->factors[f];
            if (p->kind != q->kind || p->n != q->n || p->n_blocks != q->n_blocks) return 0;
            if (!s_arr_eq(p->data, p->n_data, q->data, q->n_data)) return 0;
        }
    }
    return 1;
}

static int s_msg_eq(const msg_t *a, const msg_t *b) {
    if (a->type != b->type || a->protocol_version != b->protocol_version || a->role != b->role ||
        a->sender_id != b->sender_id)
        return 0;
    switch (a->type) {
    case MSG_HELLO:
        return s_str_eq(a->hello.build_id, b->hello.build_id) && s_str_eq(a->hello.host, b->hello.host) &&
               a->hello.pid == b->hello.pid;
    case MSG_WELCOME: {
        const msg_welcome_t *x = &a->welcome, *y = &b->welcome;
        return s_str_eq(x->model_text, y->model_text) && s_str_eq(x->config_text, y->config_text) &&
               x->params_version == y->params_version && x->n_params == y->n_params &&
               x->n_state == y->n_state && x->rank == y->rank && x->n_ranks == y->n_ranks &&
               x->assigned_id == y->assigned_id;
    }
    case MSG_REFUSE: return s_str_eq(a->refuse.text, b->refuse.text);
    case MSG_BYE: return s_str_eq(a->bye.text, b->bye.text);
    case MSG_SHUTDOWN: return s_str_eq(a->shutdown.text, b->shutdown.text);
    case MSG_GET_PARAMS: return a->get_params.min_version == b->get_params.min_version;
    case MSG_PARAMS:
        return a->params.version == b->params.version && a->params.want_stats == b->params.want_stats &&
               s_arr_eq(a->params.params, a->params.n_params, b->params.params, b->params.n_params) &&
               s_arr_eq(a->params.state, a->params.n_state, b->params.state, b->params.n_state);
    case MSG_GRAD_PUSH: {
        const msg_grad_push_t *x = &a->grad_push, *y = &b->grad_push;
        return x->version == y->version && x->loss == y->loss && x->n_examples == y->n_examples &&
               x->n_correct == y->n_correct && x->compute_ms == y->compute_ms &&
               s_arr_eq(x->grad, x->n_grad, y->grad, y->n_grad) &&
               s_arr_eq(x->state, x->n_state, y->state, y->n_state) && s_stats_eq(&x->stats, &y->stats);
    }
    case MSG_STATS_PUSH:
        return a->stats_push.params_version == b->stats_push.params_version &&
               a->stats_push.n_examples == b->stats_push.n_examples &&
               a->stats_push.compute_ms == b->stats_push.compute_ms &&
               s_stats_eq(&a->stats_push.stats, &b->stats_push.stats);
    case MSG_JOB_REQUEST: return a->job_request.max_n == b->job_request.max_n;
    case MSG_JOB: {
        const msg_job_t *x = &a->job, *y = &b->job;
        return x->job_id == y->job_id && x->layer == y->layer && x->factor == y->factor &&
               x->factor_version == y->factor_version && x->method == y->method && x->damping == y->damping &&
               x->n == y->n && s_arr_eq(x->packed, x->n_packed, y->packed, y->n_packed);
    }
    case MSG_JOB_RESULT: {
        const msg_job_result_t *x = &a->job_result, *y = &b->job_result;
        return x->job_id == y->job_id && x->layer == y->layer && x->factor == y->factor &&
               x->factor_version == y->factor_version && x->method == y->method && x->n == y->n &&
               x->damping == y->damping && x->compute_ms == y->compute_ms && s_str_eq(x->error, y->error) &&
               s_arr_eq(x->inverse, x->n_inverse, y->inverse, y->n_inverse) &&
               s_arr_eq(x->eigvecs, x->n_eigvecs, y->eigvecs, y->n_eigvecs) &&
               s_arr_eq(x->eigvals, x->n_eigvals, y->eigvals, y->n_eigvals);
    }
    case MSG_HEARTBEAT:
        return a->heartbeat.mono_ns == b->heartbeat.mono_ns && a->heartbeat.echo_ns == b->heartbeat.echo_ns;
    case MSG_ERROR: return a->error.code == b->error.code && s_str_eq(a->error.text, b->error.text);
    default: return 0;
    }
}

/* Encode m, decode it into out; asserts both succeed. */
static void s_wire(const s_ctx_t *c, const msg_t *m, msg_t *out) {
    uint8_t *buf = NULL;
    size_t len = 0;
    char err[256] = "";
    ck_assert_msg(msg_encode(m, &buf, &len) == 0, "seed %llu: encode %s", (unsigned long long)c->seed,
                  msg_type_name(m->type));
    int rc = msg_decode(buf, len, out, err, sizeof err);
    ck_assert_msg(rc == 0, "seed %llu: decode %s: %d %s", (unsigned long long)c->seed, msg_type_name(m->type),
                  rc, err);
    free(buf);
}

/* ---- round trips -------------------------------------------------------- */

START_TEST(test_msg_roundtrip_every_type) {
    s_ctx_t c;
    s_ctx_init(&c);
    int64_t bound = msg_limits_max_bytes(&c.lim);
    for (int t = MSG_HELLO; t < MSG_TYPE_COUNT; t++) {
        for (int rep = 0; rep < 25; rep++) {
            msg_t m, d;
            char err[256] = "";
            s_random_msg(&c, (msg_type_t)t, &m);
            int rc = msg_validate(&m, &c.lim, err, sizeof err);
            ck_assert_msg(rc == 0, "seed %llu: generated %s invalid: %s", (unsigned long long)c.seed,
                          msg_type_name((msg_type_t)t), err);
            uint8_t *buf;
            size_t len;
            ck_assert_int_eq(msg_encode(&m, &buf, &len), 0);
            ck_assert_msg((int64_t)len <= bound, "seed %llu: %s encodes to %zu bytes, bound %lld",
                          (unsigned long long)c.seed, msg_type_name((msg_type_t)t), len, (long long)bound);
            rc = msg_decode(buf, len, &d, err, sizeof err);
            free(buf);
            ck_assert_msg(rc == 0, "seed %llu: %s: %s", (unsigned long long)c.seed, msg_type_name((msg_type_t)t), err);
            ck_assert_msg(s_msg_eq(&m, &d), "seed %llu: %s differs after the round trip", (unsigned long long)c.seed,
                          msg_type_name((msg_type_t)t));
            rc = msg_validate(&d, &c.lim, err, sizeof err);
            ck_assert_msg(rc == 0, "seed %llu: decoded %s invalid: %s", (unsigned long long)c.seed,
                          msg_type_name((msg_type_t)t), err);
            msg_clear(&m);
            msg_clear(&d);
            ck_assert_int_eq(d.type, MSG_NONE);
        }
    }
}
END_TEST

/* Borrowed arrays and NULL strings encode; decoding gives "" for NULL. */
START_TEST(test_msg_encode_borrowed_fields) {
    static const float w[5] = {1, -2, 3.5f, 0, 1e-30f};
    msg_t m, d;
    msg_init(&m, MSG_PARAMS, MSG_ROLE_PS, 7);
    m.params.version = 3;
    m.params.params = (float *)w;
    m.params.n_params = 5;
    s_ctx_t c;
    s_ctx_init(&c);
    s_wire(&c, &m, &d);
    ck_assert(s_msg_eq(&m, &d));
    msg_clear(&d);

    msg_init(&m, MSG_BYE, MSG_ROLE_WORKER, 1); /* reason NULL */
    s_wire(&c, &m, &d);
    ck_assert_ptr_nonnull(d.bye.text);
    ck_assert_str_eq(d.bye.text, "");
    msg_clear(&d);
}
END_TEST

/* The decoded arrays can be taken without a copy; msg_clear() leaves them. */
START_TEST(test_msg_decode_take_array) {
    s_ctx_t c;
    s_ctx_init(&c);
    msg_t m, d;
    s_random_msg(&c, MSG_GRAD_PUSH, &m);
    s_wire(&c, &m, &d);
    float *g = d.grad_push.grad;
    size_t n = d.grad_push.n_grad;
    d.grad_push.grad = NULL;
    d.grad_push.n_grad = 0;
    msg_clear(&d);
    ck_assert_int_eq(memcmp(g, m.grad_push.grad, n * sizeof *g), 0);
    free(g); /* the caller owns it now (ASan checks it came from malloc) */
    msg_clear(&m);
}
END_TEST

/* A gradient of a million floats: exact round trip and the length check
 * against the model. */
START_TEST(test_msg_roundtrip_large_gradient) {
    s_ctx_t c;
    s_ctx_init(&c);
    const size_t n = (size_t)1 << 20;
    c.model.n_params = n;
    msg_t m, d;
    msg_init(&m, MSG_GRAD_PUSH, MSG_ROLE_WORKER, 3);
    m.grad_push.n_examples = 128;
    m.grad_push.grad = s_floats(&c.rng, n);
    m.grad_push.n_grad = n;
    uint8_t *buf;
    size_t len;
    ck_assert_int_eq(msg_encode(&m, &buf, &len), 0);
    ck_assert_uint_ge(len, n * 4);
    ck_assert_uint_le(len, n * 4 + 64); /* packed: 4 bytes per float plus headers */
    char err[256];
    ck_assert_int_eq(msg_decode(buf, len, &d, err, sizeof err), 0);
    free(buf);
    ck_assert_msg(s_msg_eq(&m, &d), "seed %llu", (unsigned long long)c.seed);
    ck_assert_int_eq(msg_validate(&d, &c.lim, err, sizeof err), 0);
    c.model.n_params = n - 1;
    ck_assert_int_eq(msg_validate(&d, &c.lim, err, sizeof err), -EINVAL);
    ck_assert_str_eq(err, "grad_push.grad: expected 1048575 floats, got 1048576");
    msg_clear(&m);
    msg_clear(&d);
}
END_TEST

/* ---- hostile bytes ------------------------------------------------------ */

/* Every strict prefix of a message fails to decode, or decodes to something
 * msg_validate() rejects; never a crash or a leak (ASan). */
START_TEST(test_msg_decode_truncated_prefixes) {
    s_ctx_t c;
    s_ctx_init(&c);
    for (int t = MSG_HELLO; t < MSG_TYPE_COUNT; t++) {
        msg_t m;
        s_random_msg(&c, (msg_type_t)t, &m);
        uint8_t *buf;
        size_t len;
        ck_assert_int_eq(msg_encode(&m, &buf, &len), 0);
        for (size_t k = 0; k < len; k++) {
            uint8_t *cut = malloc(k ? k : 1); /* exact size: ASan sees overreads */
            memcpy(cut, buf, k);
            msg_t d;
            char err[256] = "";
            int rc = msg_decode(cut, k, &d, err, sizeof err);
            ck_assert_msg(rc == 0 || rc == -EBADMSG || rc == -EPROTO, "rc %d", rc);
            if (rc != 0) ck_assert_msg(err[0], "seed %llu: no error text", (unsigned long long)c.seed);
            if (rc == 0) {
                int v = msg_validate(&d, &c.lim, err, sizeof err);
                ck_assert_msg(v != 0, "seed %llu: %s prefix %zu of %zu bytes decodes to a valid message",
                              (unsigned long long)c.seed, msg_type_name((msg_type_t)t), k, len);
            }
            msg_clear(&d);
            free(cut);
        }
        msg_t d;
        ck_assert_int_eq(msg_decode(buf, len, &d, NULL, 0), 0);
        ck_assert(s_msg_eq(&m, &d));
        msg_clear(&d);
        msg_clear(&m);
        free(buf);
    }
}
END_TEST

static void s_decode_any(const s_ctx_t *c, const uint8_t *b, size_t n) {
    msg_t d;
    char err[256] = "";
    int rc = msg_decode(b, n, &d, err, sizeof err);
    ck_assert_msg(rc == 0 || rc == -EBADMSG || rc == -EPROTO, "seed %llu: rc %d", (unsigned long long)c->seed, rc);
    if (rc == -EBADMSG) {
        ck_assert_int_eq(d.type, MSG_NONE);
        ck_assert_int_eq(d.sender_id, 0);
    }
    if (rc == -EPROTO) ck_assert_int_eq(d.type, MSG_NONE);
    if (rc == 0) {
        ck_assert(d.type > MSG_NONE && d.type < MSG_TYPE_COUNT);
        (void)msg_validate(&d, &c->lim, err, sizeof err); /* must not crash whatever it says */
    }
    msg_clear(&d);
}

START_TEST(test_msg_decode_random_bytes) {
    s_ctx_t c;
    s_ctx_init(&c);
    for (int rep = 0; rep < 3000; rep++) {
        size_t n = rng_below(&c.rng, 200);
        uint8_t *b = malloc(n ? n : 1);
        for (size_t i = 0; i < n; i++) b[i] = (uint8_t)rng_u64(&c.rng);
        s_decode_any(&c, b, n);
        free(b);
    }
    s_decode_any(&c, NULL, 0);
}
END_TEST

/* Valid encodings with random bytes overwritten. */
START_TEST(test_msg_decode_mutated_bytes) {
    s_ctx_t c;
    s_ctx_init(&c);
    for (int t = MSG_HELLO; t < MSG_TYPE_COUNT; t++) {
        msg_t m;
        s_random_msg(&c, (msg_type_t)t, &m);
        uint8_t *buf;
        size_t len;
        ck_assert_int_eq(msg_encode(&m, &buf, &len), 0);
        msg_clear(&m);
        for (int rep = 0; rep < 200; rep++) {
            uint8_t *b = malloc(len);
            memcpy(b, buf, len);
            int k = 1 + (int)rng_below(&c.rng, 4);
            for (int i = 0; i < k; i++) b[rng_below(&c.rng, (uint32_t)len)] = (uint8_t)rng_u64(&c.rng);
            s_decode_any(&c, b, len);
            free(b);
        }
        free(buf);
    }
}
END_TEST

/* An Envelope with a body this build does not know (a future type): the
 * header is still readable so the receiver can answer. Bytes: field 1
 * varint 2, field 2 varint 3, field 3 varint 9, field 40 length 0. */
START_TEST(test_msg_decode_unknown_body) {
    static const uint8_t b[] = {0x08, 0x02, 0x10, 0x03, 0x18, 0x09, 0xc2, 0x02, 0x00};
    msg_t d;
    char err[256] = "";
    ck_assert_int_eq(msg_decode(b, sizeof b, &d, err, sizeof err), -EPROTO);
    ck_assert_int_eq(d.type, MSG_NONE);
    ck_assert_uint_eq(d.protocol_version, 2);
    ck_assert_int_eq(d.role, MSG_ROLE_STATSD);
    ck_assert_uint_eq(d.sender_id, 9);
    ck_assert_str_eq(err, "message from statsd 9 (protocol version 2) has no body this build knows");
    msg_clear(&d);
}
END_TEST

/* ---- validation --------------------------------------------------------- */

/* Encode, decode, validate; returns msg_validate's code, err filled. */
static int s_validate_wire(s_ctx_t *c, const msg_t *m, char *err, size_t err_len) {
    msg_t d;
    s_wire(c, m, &d);
    err[0] = 0;
    int rc = msg_validate(&d, &c->lim, err, err_len);
    msg_clear(&d);
    return rc;
}

START_TEST(test_msg_validate_protocol_version) {
    s_ctx_t c;
    s_ctx_init(&c);
    msg_t m;
    char err[256];
    s_random_msg(&c, MSG_HELLO, &m);
    m.protocol_version = 2;
    ck_assert_int_eq(s_validate_wire(&c, &m, err, sizeof err), -EPROTO);
    ck_assert_str_eq(err, "protocol version 2 does not match this build's 1");
    m.protocol_version = 0;
    ck_assert_int_eq(s_validate_wire(&c, &m, err, sizeof err), -EPROTO);
    msg_clear(&m);

    char why[200];
    msg_version_refusal(why, sizeof why, 2, MSG_ROLE_WORKER);
    ck_assert_str_eq(why, "protocol version 2 does not match the server's 1; upgrade kfac-ps");
    msg_version_refusal(why, sizeof why, 0, MSG_ROLE_WORKER);
    ck_assert_str_eq(why, "protocol version 0 does not match the server's 1; upgrade kfac-worker");
    msg_version_refusal(why, sizeof why, 0, MSG_ROLE_INVERTD);
    ck_assert_str_eq(why, "protocol version 0 does not match the server's 1; upgrade kfac-invertd");
}
END_TEST

START_TEST(test_msg_validate_role) {
    s_ctx_t c;
    s_ctx_init(&c);
    msg_t m;
    char err[256];
    s_random_msg(&c, MSG_JOB, &m);
    m.role = MSG_ROLE_WORKER;
    ck_assert_int_eq(s_validate_wire(&c, &m, err, sizeof err), -EINVAL);
    ck_assert_str_eq(err, "a worker may not send job");
    m.role = (msg_role_t)9;
    ck_assert_int_eq(s_validate_wire(&c, &m, err, sizeof err), -EINVAL);
    ck_assert_str_eq(err, "job: unknown sender role 9");
    msg_clear(&m);
    s_random_msg(&c, MSG_GRAD_PUSH, &m);
    m.role = MSG_ROLE_INVERTD;
    ck_assert_int_eq(s_validate_wire(&c, &m, err, sizeof err), -EINVAL);
    ck_assert_str_eq(err, "a invertd may not send grad_push");
    msg_clear(&m);
    /* every type has at least one role that may send it, PS and clients differ */
    for (int t = MSG_HELLO; t < MSG_TYPE_COUNT; t++) {
        int any = 0;
        for (int r = 1; r < MSG_ROLE_COUNT; r++) any |= msg_role_may_send((msg_role_t)r, (msg_type_t)t);
        ck_assert_msg(any, "nobody may send %s", msg_type_name((msg_type_t)t));
    }
    ck_assert(!msg_role_may_send(MSG_ROLE_PS, MSG_HELLO));
    ck_assert(!msg_role_may_send(MSG_ROLE_TOOL, MSG_GRAD_PUSH));
}
END_TEST

/* Sets element k of the float field selected by `which` to v; returns the
 * field's name for the expected message, or NULL when the message has no
 * such (non-empty) field. */
static const char *s_poison(msg_t *m, int which, float v, size_t *k, rng_t *r, char *name, size_t name_len) {
    float *x = NULL;
    size_t n = 0;
    const char *field = NULL;
    msg_stats_t *st = NULL;
    const char *stats_field = NULL;
    switch (m->type) {
    case MSG_PARAMS:
        if (which == 0) { x = m->params.params; n = m->params.n_params; field = "params.params"; }
        if (which == 1) { x = m->params.state; n = m->params.n_state; field = "params.state"; }
        break;
    case MSG_GRAD_PUSH:
        if (which == 0) { x = m->grad_push.grad; n = m->grad_push.n_grad; field = "grad_push.grad"; }
        if (which == 1) { x = m->grad_push.state; n = m->grad_push.n_state; field = "grad_push.state"; }
        if (which == 2) { st = &m->grad_push.stats; stats_field = "grad_push.stats"; }
        break;
    case MSG_STATS_PUSH:
        if (which == 0) { st = &m->stats_push.stats; stats_field = "stats_push.stats"; }
        break;
    case MSG_JOB:
        if (which == 0) { x = m->job.packed; n = m->job.n_packed; field = "job.packed"; }
        break;
    case MSG_JOB_RESULT:
        if (which == 0) { x = m->job_result.inverse; n = m->job_result.n_inverse; field = "job_result.inverse"; }
        if (which == 1) { x = m->job_result.eigvecs; n = m->job_result.n_eigvecs; field = "job_result.eigvecs"; }
        if (which == 2) { x = m->job_result.eigvals; n = m->job_result.n_eigvals; field = "job_result.eigvals"; }
        break;
    default:
        break;
    }
    if (st && st->n_layers) {
        size_t l = rng_below(r, (uint32_t)st->n_layers);
        size_t f = rng_below(r, (uint32_t)st->layers[l].n_factors);
        x = st->layers[l].factors[f].data;
        n = st->layers[l].factors[f].n_data;
        snprintf(name, name_len, "%s.layers[%zu].factors[%zu].data", stats_field, l, f);
        field = name;
    } else if (field) {
        snprintf(name, name_len, "%s", field);
        field = name;
    }
    if (!field || n == 0) return NULL;
    *k = rng_below(r, (uint32_t)n);
    x[*k] = v;
    return field;
}

START_TEST(test_msg_validate_nonfinite_names_field) {
    s_ctx_t c;
    s_ctx_init(&c);
    static const msg_type_t types[] = {MSG_PARAMS, MSG_GRAD_PUSH, MSG_STATS_PUSH, MSG_JOB, MSG_JOB_RESULT};
    const float bad[3] = {NAN, INFINITY, -INFINITY};
    int checked = 0;
    for (size_t ti = 0; ti < sizeof types / sizeof types[0]; ti++) {
        for (int which = 0; which < 3; which++) {
            for (int rep = 0; rep < 12; rep++) {
                msg_t m;
                s_random_msg(&c, types[ti], &m);
                size_t k = 0;
                char name[200], err[256], want[256];
                float v = bad[rep % 3];
                const char *field = s_poison(&m, which, v, &k, &c.rng, name, sizeof name);
                if (field) {
                    snprintf(want, sizeof want, "%s[%zu] is %s", field, k, isnan(v) ? "NaN" : "Inf");
                    ck_assert_int_eq(s_validate_wire(&c, &m, err, sizeof err), -EINVAL);
                    ck_assert_msg(strcmp(err, want) == 0, "seed %llu: got '%s', want '%s'",
                                  (unsigned long long)c.seed, err, want);
                    checked++;
                }
                msg_clear(&m);
            }
        }
    }
    ck_assert_int_gt(checked, 50);

    /* scalars */
    msg_t m;
    char err[256];
    s_random_msg(&c, MSG_GRAD_PUSH, &m);
    m.grad_push.loss = NAN;
    ck_assert_int_eq(s_validate_wire(&c, &m, err, sizeof err), -EINVAL);
    ck_assert_str_eq(err, "grad_push.loss is NaN");
    m.grad_push.loss = 1;
    m.grad_push.compute_ms = INFINITY;
    ck_assert_int_eq(s_validate_wire(&c, &m, err, sizeof err), -EINVAL);
    ck_assert_str_eq(err, "grad_push.compute_ms is Inf");
    msg_clear(&m);
    s_random_msg(&c, MSG_JOB, &m);
    m.job.damping = -INFINITY;
    ck_assert_int_eq(s_validate_wire(&c, &m, err, sizeof err), -EINVAL);
    ck_assert_str_eq(err, "job.damping is Inf");
    m.job.damping = -1e-3;
    ck_assert_int_eq(s_validate_wire(&c, &m, err, sizeof err), -EINVAL);
    ck_assert_str_eq(err, "job.damping is negative (-0.001)");
    msg_clear(&m);
}
END_TEST

/* The sizes sent with a tensor must match its data (protobuf-c does not
 * check), and the model's shapes. */
START_TEST(test_msg_validate_dims_mismatch) {
    s_ctx_t c;
    s_ctx_init(&c);
    msg_t m;
    char err[256], want[256];

    /* factor data one float short */
    s_random_msg(&c, MSG_STATS_PUSH, &m);
    msg_factor_t *f = &m.stats_push.stats.layers[0].factors[0];
    f->n_data--;
    snprintf(want, sizeof want,
             "stats_push.stats.layers[0].factors[0]: n=%u n_blocks=%u needs %zu floats, got %zu", f->n,
             f->n_blocks, f->n_data + 1, f->n_data);
    ck_assert_int_eq(s_validate_wire(&c, &m, err, sizeof err), -EINVAL);
    ck_assert_msg(strcmp(err, want) == 0, "got '%s' want '%s'", err, want);
    f->n_data++;
    /* factor n differs from the model */
    uint32_t layer = m.stats_push.stats.layers[0].layer;
    if (f->kind != MSG_FACTOR_BN) {
        free(f->data);
        f->n++;
        f->n_data = msg_packed_len(f->n);
        f->data = calloc(f->n_data, sizeof(float));
        ck_assert_int_eq(s_validate_wire(&c, &m, err, sizeof err), -EINVAL);
        ck_assert_msg(strstr(err, "the model has a") != NULL, "got '%s'", err);
    }
    msg_clear(&m);

    /* a layer twice */
    do {
        msg_clear(&m);
        s_random_msg(&c, MSG_STATS_PUSH, &m);
    } while (m.stats_push.stats.n_layers < 2);
    layer = m.stats_push.stats.layers[0].layer;
    m.stats_push.stats.layers[1].layer = layer;
    snprintf(want, sizeof want, "stats_push.stats.layers[1]: layer %u appears twice", layer);
    ck_assert_int_eq(s_validate_wire(&c, &m, err, sizeof err), -EINVAL);
    ck_assert_str_eq(err, want);
    msg_clear(&m);

    /* a layer without factors in the model */
    s_random_msg(&c, MSG_STATS_PUSH, &m);
    m.stats_push.stats.layers[0].layer = c.model.n_layers; /* past the model */
    snprintf(want, sizeof want, "stats_push.stats.layers[0]: layer %u has no Kronecker factors in this model",
             c.model.n_layers);
    ck_assert_int_eq(s_validate_wire(&c, &m, err, sizeof err), -EINVAL);
    ck_assert_str_eq(err, want);
    msg_clear(&m);

    /* batch norm must be 2x2 blocks; others one block */
    msg_init(&m, MSG_STATS_PUSH, MSG_ROLE_STATSD, 1);
    m.stats_push.n_examples = 1;
    msg_layer_stats_t ls = {.layer = 0, .n_factors = 1};
    msg_factor_t bf;
    s_factor(&c.rng, &bf, MSG_FACTOR_BN, 3, 2);
    ls.factors = &bf;
    m.stats_push.stats.layers = &ls;
    m.stats_push.stats.n_layers = 1;
    const msg_model_shape_t *saved = c.lim.model;
    c.lim.model = NULL;
    ck_assert_int_eq(s_validate_wire(&c, &m, err, sizeof err), -EINVAL);
    ck_assert_str_eq(err, "stats_push.stats.layers[0].factors[0]: a BN factor has n=2 (2x2 blocks), got n=3 n_blocks=2");
    free(bf.data);
    s_factor(&c.rng, &bf, MSG_FACTOR_A, 3, 2);
    ck_assert_int_eq(s_validate_wire(&c, &m, err, sizeof err), -EINVAL);
    ck_assert_str_eq(err, "stats_push.stats.layers[0].factors[0]: a A factor has one block, got n=3 n_blocks=2");
    free(bf.data);
    s_factor(&c.rng, &bf, MSG_FACTOR_A, 3, 1);
    bf.data[msg_packed_index(3, 1, 1)] = -0.5f;
    ck_assert_int_eq(s_validate_wire(&c, &m, err, sizeof err), -EINVAL);
    ck_assert_str_eq(err, "stats_push.stats.layers[0].factors[0]: diagonal element (1,1) is negative (-0.5): "
                          "not a second-moment matrix");
    free(bf.data);
    c.lim.model = saved;

    /* job packed length and target */
    s_random_msg(&c, MSG_JOB, &m);
    m.job.n_packed--;
    snprintf(want, sizeof want, "job.packed: n=%u needs %zu floats, got %zu", m.job.n, m.job.n_packed + 1,
             m.job.n_packed);
    ck_assert_int_eq(s_validate_wire(&c, &m, err, sizeof err), -EINVAL);
    ck_assert_str_eq(err, want);
    m.job.n_packed++;
    m.job.factor = 7;
    ck_assert_int_eq(s_validate_wire(&c, &m, err, sizeof err), -EINVAL);
    ck_assert_msg(strstr(err, "got factor 7") != NULL, "got '%s'", err);
    msg_clear(&m);

    /* eigen result: eigvecs must be n*n */
    msg_init(&m, MSG_JOB_RESULT, MSG_ROLE_INVERTD, 1);
    s_job_target(&c, &m.job_result.layer, &m.job_result.factor, &m.job_result.n);
    uint32_t n = m.job_result.n;
    m.job_result.method = MSG_METHOD_EIGEN;
    m.job_result.n_eigvecs = (size_t)n * n + 1;
    m.job_result.eigvecs = s_floats(&c.rng, m.job_result.n_eigvecs);
    m.job_result.n_eigvals = n;
    m.job_result.eigvals = s_floats(&c.rng, n);
    snprintf(want, sizeof want, "job_result.eigvecs: n=%u needs %u floats, got %u", n, n * n, n * n + 1);
    ck_assert_int_eq(s_validate_wire(&c, &m, err, sizeof err), -EINVAL);
    ck_assert_str_eq(err, want);
    m.job_result.n_eigvecs--;
    ck_assert_int_eq(s_validate_wire(&c, &m, err, sizeof err), 0);
    m.job_result.error = strdup("not positive definite");
    ck_assert_int_eq(s_validate_wire(&c, &m, err, sizeof err), -EINVAL);
    ck_assert_str_eq(err, "job_result: a failed job carries no data");
    msg_clear(&m);

    /* params against the model; state must be all or nothing */
    s_random_msg(&c, MSG_PARAMS, &m);
    m.params.n_params--;
    snprintf(want, sizeof want, "params.params: expected %zu floats, got %zu", m.params.n_params + 1,
             m.params.n_params);
    ck_assert_int_eq(s_validate_wire(&c, &m, err, sizeof err), -EINVAL);
    ck_assert_str_eq(err, want);
    m.params.n_params++;
    free(m.params.state);
    m.params.n_state = c.model.n_state + 1;
    m.params.state = s_floats(&c.rng, m.params.n_state);
    snprintf(want, sizeof want, "params.state: expected %llu floats (or none), got %zu",
             (unsigned long long)c.model.n_state, m.params.n_state);
    ck_assert_int_eq(s_validate_wire(&c, &m, err, sizeof err), -EINVAL);
    ck_assert_str_eq(err, want);
    msg_clear(&m);

    /* grad push counts */
    s_random_msg(&c, MSG_GRAD_PUSH, &m);
    m.grad_push.n_correct = m.grad_push.n_examples + 1;
    ck_assert_int_eq(s_validate_wire(&c, &m, err, sizeof err), -EINVAL);
    ck_assert_msg(strstr(err, "grad_push.n_correct") == err, "got '%s'", err);
    m.grad_push.n_examples = 0;
    m.grad_push.n_correct = 0;
    ck_assert_int_eq(s_validate_wire(&c, &m, err, sizeof err), -EINVAL);
    ck_assert_str_eq(err, "grad_push.n_examples must be at least 1");
    msg_clear(&m);

    /* a stats push without statistics */
    msg_init(&m, MSG_STATS_PUSH, MSG_ROLE_STATSD, 1);
    m.stats_push.n_examples = 4;
    ck_assert_int_eq(s_validate_wire(&c, &m, err, sizeof err), -EINVAL);
    ck_assert_str_eq(err, "stats_push.stats: no layers");
}
END_TEST

START_TEST(test_msg_validate_limits) {
    s_ctx_t c;
    s_ctx_init(&c);
    msg_t m;
    char err[256], want[256];

    /* a job with n over max_n (no model) */
    c.lim.model = NULL;
    c.lim.max_n = 20;
    msg_init(&m, MSG_JOB, MSG_ROLE_PS, 1);
    m.job.method = MSG_METHOD_CHOLESKY;
    m.job.n = 21;
    m.job.n_packed = msg_packed_len(21);
    m.job.packed = calloc(m.job.n_packed, sizeof(float));
    ck_assert_int_eq(s_validate_wire(&c, &m, err, sizeof err), -EINVAL);
    ck_assert_str_eq(err, "job: n=21 is over the limit of 20");
    m.job.n = 0;
    ck_assert_int_eq(s_validate_wire(&c, &m, err, sizeof err), -EINVAL);
    ck_assert_str_eq(err, "job: n must be at least 1");
    m.job.n = 20;
    m.job.n_packed = msg_packed_len(20);
    ck_assert_int_eq(s_validate_wire(&c, &m, err, sizeof err), 0);
    m.job.method = (msg_method_t)5;
    ck_assert_int_eq(s_validate_wire(&c, &m, err, sizeof err), -EINVAL);
    ck_assert_str_eq(err, "job.method: unknown inversion method 5");
    msg_clear(&m);

    /* float arrays over max_floats */
    c.lim.max_floats = 100;
    msg_init(&m, MSG_PARAMS, MSG_ROLE_PS, 1);
    m.params.n_params = 101;
    m.params.params = s_floats(&c.rng, 101);
    ck_assert_int_eq(s_validate_wire(&c, &m, err, sizeof err), -EINVAL);
    ck_assert_str_eq(err, "params.params: 101 floats is over the limit of 100");
    msg_clear(&m);

    /* a block-diagonal factor whose size overflows the limit */
    msg_init(&m, MSG_STATS_PUSH, MSG_ROLE_STATSD, 1);
    m.stats_push.n_examples = 1;
    msg_layer_stats_t ls = {.layer = 0, .n_factors = 1};
    msg_factor_t bf = {.kind = MSG_FACTOR_BN, .n = 2, .n_blocks = 4000000000u};
    ls.factors = &bf;
    m.stats_push.stats.layers = &ls;
    m.stats_push.stats.n_layers = 1;
    ck_assert_int_eq(msg_validate(&m, &c.lim, err, sizeof err), -EINVAL);
    ck_assert_str_eq(err, "stats_push.stats.layers[0].factors[0]: n=2 n_blocks=4000000000 is over the limit of 100 floats");
    /* layer index over max_layers */
    bf.n_blocks = 1;
    bf.n_data = 3;
    float d3[3] = {1, 0, 1};
    bf.data = d3;
    ls.layer = c.lim.max_layers;
    snprintf(want, sizeof want, "stats_push.stats.layers[0]: layer %u is over the limit of %u layers",
             c.lim.max_layers, c.lim.max_layers);
    ck_assert_int_eq(msg_validate(&m, &c.lim, err, sizeof err), -EINVAL);
    ck_assert_str_eq(err, want);
    ls.layer = 0;
    ck_assert_int_eq(msg_validate(&m, &c.lim, err, sizeof err), 0);

    /* strings */
    c.lim.max_string = 8;
    c.lim.max_text = 16;
    msg_init(&m, MSG_HELLO, MSG_ROLE_WORKER, 1);
    m.hello.build_id = "123456789";
    ck_assert_int_eq(s_validate_wire(&c, &m, err, sizeof err), -EINVAL);
    ck_assert_str_eq(err, "hello.build_id: longer than the limit of 8 bytes");
    m.hello.build_id = "12345678";
    ck_assert_int_eq(s_validate_wire(&c, &m, err, sizeof err), 0);
    msg_init(&m, MSG_WELCOME, MSG_ROLE_PS, 1);
    m.welcome.n_params = 10;
    m.welcome.model_text = "0123456789abcdefg";
    ck_assert_int_eq(s_validate_wire(&c, &m, err, sizeof err), -EINVAL);
    ck_assert_str_eq(err, "welcome.model_text: longer than the limit of 16 bytes");
    m.welcome.model_text = "0123456789abcdef";
    m.welcome.n_ranks = 2;
    m.welcome.rank = 2;
    ck_assert_int_eq(s_validate_wire(&c, &m, err, sizeof err), -EINVAL);
    ck_assert_str_eq(err, "welcome.rank: 2 is not below n_ranks=2");

    /* the size bound grows with the model and saturates without one */
    msg_limits_t lim;
    msg_limits_default(&lim);
    ck_assert_int_gt(msg_limits_max_bytes(&lim), (int64_t)1 << 31);
    lim.model = &c.model;
    lim.max_text = 1000;
    lim.max_string = 100;
    c.model.n_params += 10000; /* the gradient is the largest message */
    int64_t b1 = msg_limits_max_bytes(&lim);
    ck_assert_int_lt(b1, (int64_t)1 << 20);
    c.model.n_params += 1000;
    ck_assert_int_ge(msg_limits_max_bytes(&lim) - b1, 4000);
}
END_TEST

START_TEST(test_msg_encode_rejects_missing_arrays) {
    msg_t m;
    uint8_t *buf = (uint8_t *)1;
    size_t len = 1;
    msg_init(&m, MSG_PARAMS, MSG_ROLE_PS, 1);
    m.params.n_params = 3; /* no data */
    ck_assert_int_eq(msg_encode(&m, &buf, &len), -EINVAL);
    ck_assert_ptr_null(buf);
    msg_init(&m, MSG_STATS_PUSH, MSG_ROLE_STATSD, 1);
    m.stats_push.stats.n_layers = 2; /* no layers */
    ck_assert_int_eq(msg_encode(&m, &buf, &len), -EINVAL);
    msg_init(&m, (msg_type_t)99, MSG_ROLE_PS, 1);
    ck_assert_int_eq(msg_encode(&m, &buf, &len), -EINVAL);
    msg_init(&m, MSG_NONE, MSG_ROLE_PS, 1);
    ck_assert_int_eq(msg_encode(&m, &buf, &len), -EINVAL);
}
END_TEST

START_TEST(test_msg_names) {
    ck_assert_str_eq(msg_type_name(MSG_GRAD_PUSH), "grad_push");
    ck_assert_str_eq(msg_type_name((msg_type_t)77), "?");
    ck_assert_str_eq(msg_role_name(MSG_ROLE_INVERTD), "invertd");
    ck_assert_str_eq(msg_role_program(MSG_ROLE_STATSD), "kfac-statsd");
    ck_assert_str_eq(msg_method_name(MSG_METHOD_EIGEN), "eigen");
    ck_assert_str_eq(msg_factor_kind_name(MSG_FACTOR_G_BIAS), "G_bias");
    ck_assert_str_eq(msg_error_code_name(MSG_ERR_STALE), "stale");
    /* packed index: brute-force enumeration of the row-major upper triangle */
    for (size_t n = 1; n < 9; n++) {
        size_t k = 0;
        for (size_t i = 0; i < n; i++)
            for (size_t j = i; j < n; j++) ck_assert_uint_eq(msg_packed_index(n, i, j), k++);
        ck_assert_uint_eq(k, msg_packed_len(n));
    }
}
END_TEST

Suite *make_suite(void) {
    Suite *s = suite_create("msg");
    TCase *tc = tcase_create("core");
    tcase_set_timeout(tc, 30);
    tcase_add_test(tc, test_msg_roundtrip_every_type);
    tcase_add_test(tc, test_msg_encode_borrowed_fields);
    tcase_add_test(tc, test_msg_decode_take_array);
    tcase_add_test(tc, test_msg_roundtrip_large_gradient);
    tcase_add_test(tc, test_msg_decode_truncated_prefixes);
    tcase_add_test(tc, test_msg_decode_random_bytes);
    tcase_add_test(tc, test_msg_decode_mutated_bytes);
    tcase_add_test(tc, test_msg_decode_unknown_body);
    tcase_add_test(tc, test_msg_validate_protocol_version);
    tcase_add_test(tc, test_msg_validate_role);
    tcase_add_test(tc, test_msg_validate_nonfinite_names_field);
    tcase_add_test(tc, test_msg_validate_dims_mismatch);
    tcase_add_test(tc, test_msg_validate_limits);
    tcase_add_test(tc, test_msg_encode_rejects_missing_arrays);
    tcase_add_test(tc, test_msg_names);
    suite_add_tcase(s, tc);
    return s;
}
