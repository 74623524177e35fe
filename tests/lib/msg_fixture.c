/* tests/lib/msg_fixture.c — see msg_fixture.h. */
#include "tests/lib/msg_fixture.h"

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

void msgfx_ctx_init(msgfx_ctx_t *c) {
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

float *msgfx_floats(rng_t *r, size_t n) {
    float *x = malloc((n ? n : 1) * sizeof *x);
    ck_assert_ptr_nonnull(x);
    for (size_t i = 0; i < n; i++) x[i] = (float)(rng_normal(r) * 3.0);
    return x;
}

char *msgfx_string(rng_t *r, size_t max_len) {
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
void msgfx_factor(rng_t *r, msg_factor_t *f, msg_factor_kind_t kind, uint32_t n, uint32_t nb) {
    f->kind = kind;
    f->n = n;
    f->n_blocks = nb;
    f->n_data = (size_t)nb * msg_packed_len(n);
    f->data = msgfx_floats(r, f->n_data);
    for (uint32_t b = 0; b < nb; b++)
        for (uint32_t i = 0; i < n; i++) {
            float *d = &f->data[b * msg_packed_len(n) + msg_packed_index(n, i, i)];
            *d = fabsf(*d);
        }
}

/* Statistics for a random non-empty subset of the model's layers, in random
 * order. */
void msgfx_stats(msgfx_ctx_t *c, msg_stats_t *st) {
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
            msgfx_factor(r, &d->factors[f], ls->kind[f], ls->n[f], ls->n_blocks[f]);
    }
}

/* A (layer, factor) that can be an inversion job. */
void msgfx_job_target(msgfx_ctx_t *c, uint32_t *layer, uint32_t *factor, uint32_t *n) {
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

msg_role_t msgfx_client_role(rng_t *r) {
    static const msg_role_t roles[] = {MSG_ROLE_WORKER, MSG_ROLE_STATSD, MSG_ROLE_INVERTD, MSG_ROLE_TOOL};
    return roles[rng_below(r, 4)];
}

/* A random message of type t that passes msg_validate(c->lim); every
 * pointer is malloc'd so msg_clear() frees it. */
void msgfx_random_msg(msgfx_ctx_t *c, msg_type_t t, msg_t *m) {
    rng_t *r = &c->rng;
    msg_role_t role = MSG_ROLE_PS;
    switch (t) {
    case MSG_HELLO: case MSG_BYE: role = msgfx_client_role(r); break;
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
        m->hello.build_id = msgfx_string(r, 40);
        m->hello.host = msgfx_string(r, 20);
        m->hello.pid = (uint32_t)rng_u64(r);
        break;
    case MSG_WELCOME:
        m->welcome.model_text = msgfx_string(r, 300);
        m->welcome.config_text = msgfx_string(r, 300);
        m->welcome.params_version = rng_u64(r) >> 1;
        m->welcome.n_params = c->model.n_params;
        m->welcome.n_state = c->model.n_state;
        m->welcome.n_ranks = rng_below(r, 9);
        m->welcome.rank = m->welcome.n_ranks ? rng_below(r, m->welcome.n_ranks) : 0;
        m->welcome.assigned_id = (uint32_t)rng_u64(r);
        break;
    case MSG_REFUSE: m->refuse.text = msgfx_string(r, 100); break;
    case MSG_BYE: m->bye.text = msgfx_string(r, 100); break;
    case MSG_SHUTDOWN: m->shutdown.text = msgfx_string(r, 100); break;
    case MSG_GET_PARAMS: m->get_params.min_version = rng_u64(r); break;
    case MSG_PARAMS:
        m->params.version = rng_u64(r);
        m->params.n_params = c->model.n_params;
        m->params.params = msgfx_floats(r, m->params.n_params);
        if (rng_below(r, 2) && c->model.n_state) {
            m->params.n_state = c->model.n_state;
            m->params.state = msgfx_floats(r, m->params.n_state);
        }
        m->params.want_stats = (int)rng_below(r, 2);
        if (rng_below(r, 2)) { /* a random subset of the layers with factors (none: all) */
            m->params.stats_layers = malloc(c->model.n_layers * sizeof(uint32_t) + 1);
            for (uint32_t l = 0; l < c->model.n_layers; l++)
                if (c->layers[l].n_factors && rng_below(r, 2)) m->params.stats_layers[m->params.n_stats_layers++] = l;
        }
        break;
    case MSG_GRAD_PUSH: {
        msg_grad_push_t *g = &m->grad_push;
        g->version = rng_u64(r);
        g->loss = rng_normal(r);
        g->n_examples = 1 + rng_below(r, 1000);
        g->n_correct = rng_below(r, (uint32_t)g->n_examples + 1);
        g->n_grad = c->model.n_params;
        g->grad = msgfx_floats(r, g->n_grad);
        if (rng_below(r, 2) && c->model.n_state) {
            g->n_state = c->model.n_state;
            g->state = msgfx_floats(r, g->n_state);
        }
        if (rng_below(r, 2)) msgfx_stats(c, &g->stats);
        g->compute_ms = rng_uniform(r) * 100;
        break;
    }
    case MSG_STATS_PUSH:
        m->stats_push.params_version = rng_u64(r);
        m->stats_push.n_examples = 1 + rng_below(r, 1000);
        m->stats_push.compute_ms = rng_uniform(r) * 100;
        msgfx_stats(c, &m->stats_push.stats);
        break;
    case MSG_JOB_REQUEST: m->job_request.max_n = rng_below(r, 5000); break;
    case MSG_JOB: {
        msg_job_t *j = &m->job;
        j->job_id = rng_u64(r);
        msgfx_job_target(c, &j->layer, &j->factor, &j->n);
        j->factor_version = rng_u64(r);
        j->method = rng_below(r, 2) ? MSG_METHOD_CHOLESKY : MSG_METHOD_EIGEN;
        j->damping = rng_uniform(r);
        msg_factor_t f;
        msgfx_factor(r, &f, MSG_FACTOR_A, j->n, 1);
        j->packed = f.data;
        j->n_packed = f.n_data;
        break;
    }
    case MSG_JOB_RESULT: {
        msg_job_result_t *j = &m->job_result;
        j->job_id = rng_u64(r);
        msgfx_job_target(c, &j->layer, &j->factor, &j->n);
        j->factor_version = rng_u64(r);
        j->method = rng_below(r, 2) ? MSG_METHOD_CHOLESKY : MSG_METHOD_EIGEN;
        j->damping = rng_uniform(r);
        j->compute_ms = rng_uniform(r) * 50;
        if (rng_below(r, 8) == 0) {
            j->error = msgfx_string(r, 60);
            if (!j->error[0]) { free(j->error); j->error = strdup("cholesky failed"); }
        } else if (j->method == MSG_METHOD_CHOLESKY) {
            j->n_inverse = msg_packed_len(j->n);
            j->inverse = msgfx_floats(r, j->n_inverse);
        } else {
            j->n_eigvecs = (size_t)j->n * j->n;
            j->eigvecs = msgfx_floats(r, j->n_eigvecs);
            j->n_eigvals = j->n;
            j->eigvals = msgfx_floats(r, j->n_eigvals);
        }
        break;
    }
    case MSG_HEARTBEAT:
        m->heartbeat.mono_ns = rng_u64(r);
        m->heartbeat.echo_ns = rng_below(r, 2) ? rng_u64(r) : 0;
        break;
    case MSG_ERROR:
        m->error.code = (msg_error_code_t)(1 + rng_below(r, MSG_ERR_COUNT - 1));
        m->error.text = msgfx_string(r, 100);
        break;
    default:
        ck_abort_msg("no generator for type %d", (int)t);
    }
}

/* ---- deep comparison ---------------------------------------------------- */

int msgfx_str_eq(const char *a, const char *b) { return strcmp(a ? a : "", b ? b : "") == 0; }

int msgfx_arr_eq(const float *a, size_t na, const float *b, size_t nb) {
    if (na != nb) return 0;
    return na == 0 || memcmp(a, b, na * sizeof *a) == 0; /* bit for bit */
}

int msgfx_stats_eq(const msg_stats_t *a, const msg_stats_t *b) {
    if (a->n_layers != b->n_layers) return 0;
    for (size_t l = 0; l < a->n_layers; l++) {
        const msg_layer_stats_t *x = &a->layers[l], *y = &b->layers[l];
        if (x->layer != y->layer || x->n_factors != y->n_factors) return 0;
        for (size_t f = 0; f < x->n_factors; f++) {
            const msg_factor_t *p = &x->factors[f], *q = &y->factors[f];
            if (p->kind != q->kind || p->n != q->n || p->n_blocks != q->n_blocks) return 0;
            if (!msgfx_arr_eq(p->data, p->n_data, q->data, q->n_data)) return 0;
        }
    }
    return 1;
}

int msgfx_msg_eq(const msg_t *a, const msg_t *b) {
    if (a->type != b->type || a->protocol_version != b->protocol_version || a->role != b->role ||
        a->sender_id != b->sender_id)
        return 0;
    switch (a->type) {
    case MSG_HELLO:
        return msgfx_str_eq(a->hello.build_id, b->hello.build_id) && msgfx_str_eq(a->hello.host, b->hello.host) &&
               a->hello.pid == b->hello.pid;
    case MSG_WELCOME: {
        const msg_welcome_t *x = &a->welcome, *y = &b->welcome;
        return msgfx_str_eq(x->model_text, y->model_text) && msgfx_str_eq(x->config_text, y->config_text) &&
               x->params_version == y->params_version && x->n_params == y->n_params &&
               x->n_state == y->n_state && x->rank == y->rank && x->n_ranks == y->n_ranks &&
               x->assigned_id == y->assigned_id;
    }
    case MSG_REFUSE: return msgfx_str_eq(a->refuse.text, b->refuse.text);
    case MSG_BYE: return msgfx_str_eq(a->bye.text, b->bye.text);
    case MSG_SHUTDOWN: return msgfx_str_eq(a->shutdown.text, b->shutdown.text);
    case MSG_GET_PARAMS: return a->get_params.min_version == b->get_params.min_version;
    case MSG_PARAMS:
        return a->params.version == b->params.version && a->params.want_stats == b->params.want_stats &&
               msgfx_arr_eq(a->params.params, a->params.n_params, b->params.params, b->params.n_params) &&
               msgfx_arr_eq(a->params.state, a->params.n_state, b->params.state, b->params.n_state) &&
               a->params.n_stats_layers == b->params.n_stats_layers &&
               (a->params.n_stats_layers == 0 ||
                !memcmp(a->params.stats_layers, b->params.stats_layers, a->params.n_stats_layers * sizeof(uint32_t)));
    case MSG_GRAD_PUSH: {
        const msg_grad_push_t *x = &a->grad_push, *y = &b->grad_push;
        return x->version == y->version && x->loss == y->loss && x->n_examples == y->n_examples &&
               x->n_correct == y->n_correct && x->compute_ms == y->compute_ms &&
               msgfx_arr_eq(x->grad, x->n_grad, y->grad, y->n_grad) &&
               msgfx_arr_eq(x->state, x->n_state, y->state, y->n_state) && msgfx_stats_eq(&x->stats, &y->stats);
    }
    case MSG_STATS_PUSH:
        return a->stats_push.params_version == b->stats_push.params_version &&
               a->stats_push.n_examples == b->stats_push.n_examples &&
               a->stats_push.compute_ms == b->stats_push.compute_ms &&
               msgfx_stats_eq(&a->stats_push.stats, &b->stats_push.stats);
    case MSG_JOB_REQUEST: return a->job_request.max_n == b->job_request.max_n;
    case MSG_JOB: {
        const msg_job_t *x = &a->job, *y = &b->job;
        return x->job_id == y->job_id && x->layer == y->layer && x->factor == y->factor &&
               x->factor_version == y->factor_version && x->method == y->method && x->damping == y->damping &&
               x->n == y->n && msgfx_arr_eq(x->packed, x->n_packed, y->packed, y->n_packed);
    }
    case MSG_JOB_RESULT: {
        const msg_job_result_t *x = &a->job_result, *y = &b->job_result;
        return x->job_id == y->job_id && x->layer == y->layer && x->factor == y->factor &&
               x->factor_version == y->factor_version && x->method == y->method && x->n == y->n &&
               x->damping == y->damping && x->compute_ms == y->compute_ms && msgfx_str_eq(x->error, y->error) &&
               msgfx_arr_eq(x->inverse, x->n_inverse, y->inverse, y->n_inverse) &&
               msgfx_arr_eq(x->eigvecs, x->n_eigvecs, y->eigvecs, y->n_eigvecs) &&
               msgfx_arr_eq(x->eigvals, x->n_eigvals, y->eigvals, y->n_eigvals);
    }
    case MSG_HEARTBEAT:
        return a->heartbeat.mono_ns == b->heartbeat.mono_ns && a->heartbeat.echo_ns == b->heartbeat.echo_ns;
    case MSG_ERROR: return a->error.code == b->error.code && msgfx_str_eq(a->error.text, b->error.text);
    default: return 0;
    }
}

/* Encode m, decode it into out; asserts both succeed. */
void msgfx_wire(const msgfx_ctx_t *c, const msg_t *m, msg_t *out) {
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
