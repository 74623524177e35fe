/* tests/proto/test_msg_validate.c — msg_validate() (proto/msg.h) on each kind of
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
#include "tests/lib/msg_fixture.h"
#include "tests/lib/seed.h"

/* ---- validation --------------------------------------------------------- */

/* Encode, decode, validate; returns msg_validate's code, err filled. */
static int s_validate_wire(msgfx_ctx_t *c, const msg_t *m, char *err, size_t err_len) {
    msg_t d;
    msgfx_wire(c, m, &d);
    err[0] = 0;
    int rc = msg_validate(&d, &c->lim, err, err_len);
    msg_clear(&d);
    return rc;
}

START_TEST(test_msg_validate_protocol_version) {
    msgfx_ctx_t c;
    msgfx_ctx_init(&c);
    msg_t m;
    char err[256];
    msgfx_random_msg(&c, MSG_HELLO, &m);
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
    msgfx_ctx_t c;
    msgfx_ctx_init(&c);
    msg_t m;
    char err[256];
    msgfx_random_msg(&c, MSG_JOB, &m);
    m.role = MSG_ROLE_WORKER;
    ck_assert_int_eq(s_validate_wire(&c, &m, err, sizeof err), -EINVAL);
    ck_assert_str_eq(err, "a worker may not send job");
    m.role = (msg_role_t)9;
    ck_assert_int_eq(s_validate_wire(&c, &m, err, sizeof err), -EINVAL);
    ck_assert_str_eq(err, "job: unknown sender role 9");
    msg_clear(&m);
    msgfx_random_msg(&c, MSG_GRAD_PUSH, &m);
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
    msgfx_ctx_t c;
    msgfx_ctx_init(&c);
    static const msg_type_t types[] = {MSG_PARAMS, MSG_GRAD_PUSH, MSG_STATS_PUSH, MSG_JOB, MSG_JOB_RESULT};
    const float bad[3] = {NAN, INFINITY, -INFINITY};
    int checked = 0;
    for (size_t ti = 0; ti < sizeof types / sizeof types[0]; ti++) {
        for (int which = 0; which < 3; which++) {
            for (int rep = 0; rep < 12; rep++) {
                msg_t m;
                msgfx_random_msg(&c, types[ti], &m);
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
    msgfx_random_msg(&c, MSG_GRAD_PUSH, &m);
    m.grad_push.loss = NAN;
    ck_assert_int_eq(s_validate_wire(&c, &m, err, sizeof err), -EINVAL);
    ck_assert_str_eq(err, "grad_push.loss is NaN");
    m.grad_push.loss = 1;
    m.grad_push.compute_ms = INFINITY;
    ck_assert_int_eq(s_validate_wire(&c, &m, err, sizeof err), -EINVAL);
    ck_assert_str_eq(err, "grad_push.compute_ms is Inf");
    msg_clear(&m);
    msgfx_random_msg(&c, MSG_JOB, &m);
    m.job.damping = -INFINITY;
    ck_assert_int_eq(s_validate_wire(&c, &m, err, sizeof err), -EINVAL);
    ck_assert_str_eq(err, "job.damping is Inf");
    m.job.damping = -1e-3;
    ck_assert_int_eq(s_validate_wire(&c, &m, err, sizeof err), -EINVAL);
    ck_assert_str_eq(err, "job.damping is negative (-0.001)");
    msg_clear(&m);
}
END_TEST

/* grad_finite_later: a GradPush's dense gradient keeps its length check
 * but not its NaN/Inf scan (the receiver's); every other array keeps both.
 * msg_first_nonfinite names the index the scan would have named. */
START_TEST(test_msg_validate_grad_finite_later) {
    msgfx_ctx_t c;
    msgfx_ctx_init(&c);
    const float bad[3] = {NAN, INFINITY, -INFINITY};
    int passed = 0;
    for (int rep = 0; rep < 12; rep++) {
        msg_t m;
        msgfx_random_msg(&c, MSG_GRAD_PUSH, &m);
        if (m.grad_push.n_grad == 0) {
            msg_clear(&m);
            continue;
        }
        size_t k = rng_below(&c.rng, (uint32_t)m.grad_push.n_grad);
        m.grad_push.grad[k] = bad[rep % 3];
        char err[256];
        c.lim.grad_finite_later = 0;
        ck_assert_int_eq(s_validate_wire(&c, &m, err, sizeof err), -EINVAL);
        c.lim.grad_finite_later = 1;
        ck_assert_msg(s_validate_wire(&c, &m, err, sizeof err) == 0, "seed %llu: %s", (unsigned long long)c.seed, err);
        ck_assert_uint_eq(msg_first_nonfinite(m.grad_push.grad, m.grad_push.n_grad), k);
        /* its length is still checked */
        m.grad_push.n_grad--;
        ck_assert_int_eq(s_validate_wire(&c, &m, err, sizeof err), -EINVAL);
        ck_assert_msg(strstr(err, "grad_push.grad") != NULL, "%s", err);
        m.grad_push.n_grad++;
        /* and the state's floats still are scanned */
        m.grad_push.grad[k] = 1.0f;
        if (m.grad_push.n_state > 0) {
            m.grad_push.state[0] = NAN;
            ck_assert_int_eq(s_validate_wire(&c, &m, err, sizeof err), -EINVAL);
            ck_assert_str_eq(err, "grad_push.state[0] is NaN");
        }
        c.lim.grad_finite_later = 0;
        passed++;
        msg_clear(&m);
    }
    ck_assert_int_gt(passed, 6);
    float x[9000];
    for (size_t i = 0; i < 9000; i++) x[i] = (float)i;
    ck_assert_uint_eq(msg_first_nonfinite(x, 9000), 9000);
    x[8191] = INFINITY;
    x[8500] = NAN;
    ck_assert_uint_eq(msg_first_nonfinite(x, 9000), 8191);
    ck_assert_uint_eq(msg_first_nonfinite(x, 8191), 8191);
}
END_TEST

/* The sizes sent with a tensor must match its data (protobuf-c does not
 * check), and the model's shapes. */
START_TEST(test_msg_validate_dims_mismatch) {
    msgfx_ctx_t c;
    msgfx_ctx_init(&c);
    msg_t m;
    char err[256], want[256];

    /* factor data one float short */
    msgfx_random_msg(&c, MSG_STATS_PUSH, &m);
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
        msgfx_random_msg(&c, MSG_STATS_PUSH, &m);
    } while (m.stats_push.stats.n_layers < 2);
    layer = m.stats_push.stats.layers[0].layer;
    m.stats_push.stats.layers[1].layer = layer;
    snprintf(want, sizeof want, "stats_push.stats.layers[1]: layer %u appears twice", layer);
    ck_assert_int_eq(s_validate_wire(&c, &m, err, sizeof err), -EINVAL);
    ck_assert_str_eq(err, want);
    msg_clear(&m);

    /* a layer without factors in the model */
    msgfx_random_msg(&c, MSG_STATS_PUSH, &m);
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
    msgfx_factor(&c.rng, &bf, MSG_FACTOR_BN, 3, 2);
    ls.factors = &bf;
    m.stats_push.stats.layers = &ls;
    m.stats_push.stats.n_layers = 1;
    const msg_model_shape_t *saved = c.lim.model;
    c.lim.model = NULL;
    ck_assert_int_eq(s_validate_wire(&c, &m, err, sizeof err), -EINVAL);
    ck_assert_str_eq(err, "stats_push.stats.layers[0].factors[0]: a BN factor has n=2 (2x2 blocks), got n=3 n_blocks=2");
    free(bf.data);
    msgfx_factor(&c.rng, &bf, MSG_FACTOR_A, 3, 2);
    ck_assert_int_eq(s_validate_wire(&c, &m, err, sizeof err), -EINVAL);
    ck_assert_str_eq(err, "stats_push.stats.layers[0].factors[0]: a A factor has one block, got n=3 n_blocks=2");
    free(bf.data);
    msgfx_factor(&c.rng, &bf, MSG_FACTOR_A, 3, 1);
    bf.data[msg_packed_index(3, 1, 1)] = -0.5f;
    ck_assert_int_eq(s_validate_wire(&c, &m, err, sizeof err), -EINVAL);
    ck_assert_str_eq(err, "stats_push.stats.layers[0].factors[0]: diagonal element (1,1) is negative (-0.5): "
                          "not a second-moment matrix");
    free(bf.data);
    c.lim.model = saved;

    /* job packed length and target */
    msgfx_random_msg(&c, MSG_JOB, &m);
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
    msgfx_job_target(&c, &m.job_result.layer, &m.job_result.factor, &m.job_result.n);
    uint32_t n = m.job_result.n;
    m.job_result.method = MSG_METHOD_EIGEN;
    m.job_result.n_eigvecs = (size_t)n * n + 1;
    m.job_result.eigvecs = msgfx_floats(&c.rng, m.job_result.n_eigvecs);
    m.job_result.n_eigvals = n;
    m.job_result.eigvals = msgfx_floats(&c.rng, n);
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
    msgfx_random_msg(&c, MSG_PARAMS, &m);
    m.params.n_params--;
    snprintf(want, sizeof want, "params.params: expected %zu floats, got %zu", m.params.n_params + 1,
             m.params.n_params);
    ck_assert_int_eq(s_validate_wire(&c, &m, err, sizeof err), -EINVAL);
    ck_assert_str_eq(err, want);
    m.params.n_params++;
    free(m.params.state);
    m.params.n_state = c.model.n_state + 1;
    m.params.state = msgfx_floats(&c.rng, m.params.n_state);
    snprintf(want, sizeof want, "params.state: expected %llu floats (or none), got %zu",
             (unsigned long long)c.model.n_state, m.params.n_state);
    ck_assert_int_eq(s_validate_wire(&c, &m, err, sizeof err), -EINVAL);
    ck_assert_str_eq(err, want);
    msg_clear(&m);

    /* params.stats_layers: strictly increasing layers that have factors */
    msgfx_random_msg(&c, MSG_PARAMS, &m);
    free(m.params.stats_layers);
    m.params.stats_layers = calloc(8, sizeof(uint32_t));
    int with = -1, without = -1;
    for (uint32_t l = 0; l < c.model.n_layers; l++) {
        if (c.layers[l].n_factors && with < 0) with = (int)l;
        if (!c.layers[l].n_factors && without < 0) without = (int)l;
    }
    ck_assert_int_ge(with, 0); /* the fixture's models always have a layer with factors */
    m.params.n_stats_layers = 1;
    m.params.stats_layers[0] = (uint32_t)with;
    ck_assert_int_eq(s_validate_wire(&c, &m, err, sizeof err), 0);
    m.params.n_stats_layers = 2;
    m.params.stats_layers[1] = (uint32_t)with;
    snprintf(want, sizeof want,
             "params.stats_layers[1]: layer %d after %d (the list must be strictly increasing)", with, with);
    ck_assert_int_eq(s_validate_wire(&c, &m, err, sizeof err), -EINVAL);
    ck_assert_str_eq(err, want);
    m.params.stats_layers[1] = c.lim.max_layers;
    snprintf(want, sizeof want, "params.stats_layers[1]: layer %u is over the limit of %u layers", c.lim.max_layers,
             c.lim.max_layers);
    ck_assert_int_eq(s_validate_wire(&c, &m, err, sizeof err), -EINVAL);
    ck_assert_str_eq(err, want);
    if (without >= 0) {
        m.params.n_stats_layers = 1;
        m.params.stats_layers[0] = (uint32_t)without;
        snprintf(want, sizeof want, "params.stats_layers[0]: layer %d has no Kronecker factors in this model", without);
        ck_assert_int_eq(s_validate_wire(&c, &m, err, sizeof err), -EINVAL);
        ck_assert_str_eq(err, want);
    }
    m.params.n_stats_layers = 0; /* empty: every layer */
    ck_assert_int_eq(s_validate_wire(&c, &m, err, sizeof err), 0);
    msg_clear(&m);

    /* grad push counts */
    msgfx_random_msg(&c, MSG_GRAD_PUSH, &m);
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
    msgfx_ctx_t c;
    msgfx_ctx_init(&c);
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
    m.params.params = msgfx_floats(&c.rng, 101);
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

/* GradPush.factored: an fc layer's weight gradient as D^T X, checked
 * against the model's fc shapes and the batch a worker may use, and the
 * grad array that leaves those weights out. A hand-made model: layer 0 fc
 * 4 -> 3 with bias (15 parameters), layer 1 no weights, layer 2 fc 3 -> 2
 * without bias (6): 21 parameters. */
static int s_validate_lowrank(msg_t *m, const msg_limits_t *lim, char *err, size_t n) {
    uint8_t *buf;
    size_t len;
    msg_t d;
    ck_assert_int_eq(msg_encode(m, &buf, &len), 0);
    ck_assert_int_eq(msg_decode(buf, len, &d, err, n), 0);
    free(buf);
    err[0] = 0;
    int rc = msg_validate(&d, lim, err, n);
    msg_clear(&d);
    return rc;
}

START_TEST(test_msg_validate_factored_grad) {
    msg_layer_shape_t layers[3];
    memset(layers, 0, sizeof layers);
    layers[0].fc_out = 3, layers[0].fc_in = 4;
    layers[2].fc_out = 2, layers[2].fc_in = 3;
    msg_model_shape_t md = {.n_params = 21, .n_state = 0, .n_layers = 3, .layers = layers};
    msg_limits_t lim;
    msg_limits_default(&lim);
    lim.model = &md;
    lim.max_rows = 4;
    /* d2 and x2 hold 5 rows: the case of more rows than the batch below sends 5 */
    float grad[21], d0[4 * 3], x0[4 * 4], d2[5 * 2] = {0}, x2[5 * 3] = {0};
    for (int i = 0; i < 21; i++) grad[i] = 0.01f * (float)i;
    for (int i = 0; i < 12; i++) d0[i] = 0.5f - 0.1f * (float)i;
    for (int i = 0; i < 16; i++) x0[i] = 0.25f * (float)i;
    for (int i = 0; i < 8; i++) d2[i] = -0.3f * (float)i;
    for (int i = 0; i < 12; i++) x2[i] = 1.0f + (float)i;
    msg_lowrank_t lr[2] = {{.layer = 0, .n_rows = 3, .d = d0, .n_d = 9, .x = x0, .n_x = 12},
                           {.layer = 2, .n_rows = 3, .d = d2, .n_d = 6, .x = x2, .n_x = 9}};
    msg_t m;
    msg_init(&m, MSG_GRAD_PUSH, MSG_ROLE_WORKER, 1);
    m.grad_push.n_examples = 3;
    m.grad_push.grad = grad;
    m.grad_push.n_grad = 21 - 12 - 6;
    m.grad_push.lowrank = lr;
    m.grad_push.n_lowrank = 2;
    char err[256];
    ck_assert_msg(s_validate_lowrank(&m, &lim, err, sizeof err) == 0, "%s", err);

    /* the arrays survive the wire bit for bit */
    {
        uint8_t *buf;
        size_t len;
        msg_t d;
        ck_assert_int_eq(msg_encode(&m, &buf, &len), 0);
        ck_assert_int_eq(msg_decode(buf, len, &d, err, sizeof err), 0);
        free(buf);
        ck_assert_uint_eq(d.grad_push.n_lowrank, 2);
        ck_assert_uint_eq(d.grad_push.lowrank[1].layer, 2);
        ck_assert_uint_eq(d.grad_push.lowrank[1].n_rows, 3);
        ck_assert_uint_eq(d.grad_push.lowrank[1].n_x, 9);
        ck_assert(memcmp(d.grad_push.lowrank[0].d, d0, 9 * sizeof(float)) == 0);
        ck_assert(memcmp(d.grad_push.lowrank[1].x, x2, 9 * sizeof(float)) == 0);
        ck_assert_uint_eq(d.grad_push.n_grad, 3);
        msg_clear(&d);
    }
    /* one layer factored: grad holds the other's weights */
    m.grad_push.n_lowrank = 1;
    m.grad_push.n_grad = 21 - 12;
    ck_assert_msg(s_validate_lowrank(&m, &lim, err, sizeof err) == 0, "%s", err);
    /* the whole arena beside a factored layer */
    m.grad_push.n_grad = 21;
    ck_assert_int_eq(s_validate_lowrank(&m, &lim, err, sizeof err), -EINVAL);
    ck_assert_str_eq(err, "grad_push.grad (without 1 factored weight): expected 9 floats, got 21");
    m.grad_push.n_grad = 9;
    /* a receiver that takes none, or knows no model */
    lim.max_rows = 0;
    ck_assert_int_eq(s_validate_lowrank(&m, &lim, err, sizeof err), -EINVAL);
    ck_assert_str_eq(err, "grad_push.factored: this receiver takes no factored gradients");
    lim.max_rows = 4;
    lim.model = NULL;
    ck_assert_int_eq(s_validate_lowrank(&m, &lim, err, sizeof err), -EINVAL);
    lim.model = &md;
    /* no fc layer, a layer out of range, out of order */
    lr[0].layer = 1;
    ck_assert_int_eq(s_validate_lowrank(&m, &lim, err, sizeof err), -EINVAL);
    ck_assert_str_eq(err, "grad_push.factored[0]: layer 1 is no fully connected layer of the model");
    lr[0].layer = 7;
    ck_assert_int_eq(s_validate_lowrank(&m, &lim, err, sizeof err), -EINVAL);
    lr[0].layer = 0;
    lr[1].layer = 0;
    m.grad_push.n_lowrank = 2;
    m.grad_push.n_grad = 3;
    ck_assert_int_eq(s_validate_lowrank(&m, &lim, err, sizeof err), -EINVAL);
    ck_assert_str_eq(err, "grad_push.factored[1]: layer 0 is not after layer 0");
    lr[0].layer = 0, lr[1].layer = 2;
    ck_assert_msg(s_validate_lowrank(&m, &lim, err, sizeof err) == 0, "%s", err);
    /* rows: 0, more than the batch, more than the examples */
    lr[1].n_rows = 0;
    ck_assert_int_eq(s_validate_lowrank(&m, &lim, err, sizeof err), -EINVAL);
    lr[1].n_rows = 5, lr[1].n_d = 10, lr[1].n_x = 15;
    ck_assert_int_eq(s_validate_lowrank(&m, &lim, err, sizeof err), -EINVAL);
    lr[1].n_rows = 4, lr[1].n_d = 8, lr[1].n_x = 12;
    ck_assert_int_eq(s_validate_lowrank(&m, &lim, err, sizeof err), -EINVAL); /* n_examples = 3 */
    m.grad_push.n_examples = 4;
    ck_assert_msg(s_validate_lowrank(&m, &lim, err, sizeof err) == 0, "%s", err);
    /* lengths against the rows, NaN and Inf named */
    lr[1].n_x = 11;
    ck_assert_int_eq(s_validate_lowrank(&m, &lim, err, sizeof err), -EINVAL);
    ck_assert_str_eq(err, "grad_push.factored[1]: 4 rows of layer 2 need 8 floats of d and 12 of x, got 8 and 11");
    lr[1].n_x = 12;
    x2[5] = NAN;
    ck_assert_int_eq(s_validate_lowrank(&m, &lim, err, sizeof err), -EINVAL);
    ck_assert_str_eq(err, "grad_push.factored[1].x[5] is NaN");
    x2[5] = 0.0f;
    d0[2] = INFINITY;
    ck_assert_int_eq(s_validate_lowrank(&m, &lim, err, sizeof err), -EINVAL);
    ck_assert_str_eq(err, "grad_push.factored[0].d[2] is Inf");
    d0[2] = 0.0f;
    grad[1] = NAN;
    ck_assert_int_eq(s_validate_lowrank(&m, &lim, err, sizeof err), -EINVAL);
    grad[1] = 0.0f;
    ck_assert_msg(s_validate_lowrank(&m, &lim, err, sizeof err) == 0, "%s", err);
    /* the size bound counts a batch of rows of every fc layer (texts small:
     * the gradient is then the largest message) */
    lim.max_text = 10;
    lim.max_string = 10;
    int64_t with = msg_limits_max_bytes(&lim);
    lim.max_rows = 0;
    ck_assert_int_ge(with - msg_limits_max_bytes(&lim), 4 * 4 * (3 + 4 + 2 + 3));
}
END_TEST

Suite *make_suite(void) {
    Suite *s = suite_create("msg_validate");
    TCase *tc = tcase_create("core");
    tcase_set_timeout(tc, 30);
    tcase_add_test(tc, test_msg_validate_protocol_version);
    tcase_add_test(tc, test_msg_validate_role);
    tcase_add_test(tc, test_msg_validate_nonfinite_names_field);
    tcase_add_test(tc, test_msg_validate_grad_finite_later);
    tcase_add_test(tc, test_msg_validate_dims_mismatch);
    tcase_add_test(tc, test_msg_validate_limits);
    tcase_add_test(tc, test_msg_validate_factored_grad);
    suite_add_tcase(s, tc);
    return s;
}
