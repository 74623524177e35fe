/* proto/msg.c — encode and decode kfac wire messages (proto/msg.h); the
 * checks of msg_validate() are in proto/msg_validate.c.
 *
 * The only file that sees protobuf-c types. Encoding points the generated
 * structs at the caller's arrays (no copies until protobuf-c packs them with
 * one memcpy per packed float field). Decoding unpacks with an allocator that
 * is plain malloc/free, so the float arrays protobuf-c allocates can be
 * handed to the msg_t as they are (set to NULL in the unpacked message
 * before it is freed): one copy from the wire buffer in all. Strings and the
 * small structures are copied.
 */
#include "proto/msg.h"

#include <errno.h>
#include <inttypes.h>
#include <math.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "proto/kfac.pb-c.h"

/* ---- small helpers ------------------------------------------------------ */

static void s_err(char *err, size_t err_len, const char *fmt, ...)
    __attribute__((format(printf, 3, 4)));
static void s_err(char *err, size_t err_len, const char *fmt, ...) {
    if (!err || err_len == 0) return;
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(err, err_len, fmt, ap);
    va_end(ap);
}

static void *s_alloc(void *data, size_t size) {
    (void)data;
    return malloc(size ? size : 1);
}

static void s_free(void *data, void *p) {
    (void)data;
    free(p);
}

/* Every unpack uses plain malloc/free, so arrays can change owner. */
static ProtobufCAllocator s_allocator(void) {
    ProtobufCAllocator a = { .alloc = s_alloc, .free = s_free, .allocator_data = NULL };
    return a;
}

static char *s_strdup(const char *s) {
    return strdup(s ? s : "");
}

/* ---- names -------------------------------------------------------------- */

static const char *const s_type_names[MSG_TYPE_COUNT] = {
    "none", "hello", "welcome", "refuse", "get_params", "params", "grad_push",
    "stats_push", "job_request", "job", "job_result", "heartbeat", "error",
    "bye", "shutdown",
};
static const char *const s_role_names[MSG_ROLE_COUNT] = {
    "none", "ps", "worker", "statsd", "invertd", "tool",
};
static const char *const s_role_programs[MSG_ROLE_COUNT] = {
    "?", "kfac-ps", "kfac-worker", "kfac-statsd", "kfac-invertd", "kfac tools",
};
static const char *const s_method_names[MSG_METHOD_COUNT] = {
    "none", "cholesky", "eigen",
};
static const char *const s_factor_names[MSG_FACTOR_COUNT] = {
    "none", "A", "G", "K", "Psi", "G_bias", "BN",
};
static const char *const s_error_names[MSG_ERR_COUNT] = {
    "none", "bad_message", "version", "invalid", "not_welcomed", "unexpected",
    "stale", "internal",
};

#define S_NAME(table, count, v) \
    (((int)(v) >= 0 && (int)(v) < (int)(count)) ? (table)[(int)(v)] : "?")

const char *msg_type_name(msg_type_t t) { return S_NAME(s_type_names, MSG_TYPE_COUNT, t); }
const char *msg_role_name(msg_role_t r) { return S_NAME(s_role_names, MSG_ROLE_COUNT, r); }
const char *msg_role_program(msg_role_t r) { return S_NAME(s_role_programs, MSG_ROLE_COUNT, r); }
const char *msg_method_name(msg_method_t m) { return S_NAME(s_method_names, MSG_METHOD_COUNT, m); }
const char *msg_factor_kind_name(msg_factor_kind_t k) { return S_NAME(s_factor_names, MSG_FACTOR_COUNT, k); }
const char *msg_error_code_name(msg_error_code_t c) { return S_NAME(s_error_names, MSG_ERR_COUNT, c); }

void msg_version_refusal(char *buf, size_t len, uint32_t client_version, msg_role_t client_role) {
    if (!buf || len == 0) return;
    const char *upgrade = client_version < KFAC_PROTOCOL_VERSION
                              ? msg_role_program(client_role) : "kfac-ps";
    if (client_version < KFAC_PROTOCOL_VERSION && (client_role <= MSG_ROLE_NONE || client_role >= MSG_ROLE_COUNT))
        upgrade = "the client";
    snprintf(buf, len, "protocol version %" PRIu32 " does not match the server's %d; upgrade %s",
             client_version, KFAC_PROTOCOL_VERSION, upgrade);
}

int msg_role_may_send(msg_role_t r, msg_type_t t) {
    if (t == MSG_HEARTBEAT || t == MSG_ERROR) return r > MSG_ROLE_NONE && r < MSG_ROLE_COUNT;
    switch (r) {
    case MSG_ROLE_PS:
        return t == MSG_WELCOME || t == MSG_REFUSE || t == MSG_PARAMS || t == MSG_JOB ||
               t == MSG_SHUTDOWN;
    case MSG_ROLE_WORKER:
        return t == MSG_HELLO || t == MSG_BYE || t == MSG_GET_PARAMS || t == MSG_GRAD_PUSH;
    case MSG_ROLE_STATSD:
        return t == MSG_HELLO || t == MSG_BYE || t == MSG_GET_PARAMS || t == MSG_STATS_PUSH;
    case MSG_ROLE_INVERTD:
        return t == MSG_HELLO || t == MSG_BYE || t == MSG_JOB_REQUEST || t == MSG_JOB_RESULT;
    case MSG_ROLE_TOOL:
        return t == MSG_HELLO || t == MSG_BYE || t == MSG_GET_PARAMS;
    default:
        return 0;
    }
}

/* ---- limits ------------------------------------------------------------- */

void msg_limits_default(msg_limits_t *lim) {
    memset(lim, 0, sizeof *lim);
    lim->max_n = 16384;
    lim->max_floats = (uint64_t)1 << 28;
    lim->max_layers = 4096;
    lim->max_factors = MSG_MAX_FACTORS;
    lim->max_string = 4096;
    lim->max_text = (size_t)1 << 20;
    lim->model = NULL;
}

/* Saturating arithmetic for the size bound. */
static uint64_t s_add(uint64_t a, uint64_t b) { return a > UINT64_MAX - b ? UINT64_MAX : a + b; }
static uint64_t s_mul(uint64_t a, uint64_t b) {
    if (a == 0 || b == 0) return 0;
    return a > UINT64_MAX / b ? UINT64_MAX : a * b;
}
static uint64_t s_max(uint64_t a, uint64_t b) { return a > b ? a : b; }

/* Field overhead: a tag (<= 3 bytes) plus a length varint (<= 10 bytes). */
#define S_FIELD_OVERHEAD 16u

int64_t msg_limits_max_bytes(const msg_limits_t *lim) {
    msg_limits_t dl;
    if (!lim) { msg_limits_default(&dl); lim = &dl; }
    uint64_t stats = 0, n_params, n_state, nn = lim->max_n;
    const uint64_t per_factor = 4 * S_FIELD_OVERHEAD; /* kind, n, n_blocks, data header */
    if (lim->model) {
        const msg_model_shape_t *md = lim->model;
        n_params = md->n_params;
        n_state = md->n_state;
        nn = 0; /* jobs are the model's factors */
        for (uint32_t l = 0; l < md->n_layers && md->layers; l++) {
            const msg_layer_shape_t *ls = &md->layers[l];
            if (ls->n_factors == 0) continue;
            uint64_t b = 2 * S_FIELD_OVERHEAD;
            for (uint32_t f = 0; f < ls->n_factors && f < MSG_MAX_FACTORS; f++) {
                uint64_t nb = ls->n_blocks[f] ? ls->n_blocks[f] : 1;
                if (nb == 1) nn = s_max(nn, ls->n[f]);
                b = s_add(b, s_add(per_factor, s_mul(4, s_mul(nb, msg_packed_len(ls->n[f])))));
            }
            stats = s_add(stats, b);
        }
        /* factored fc gradients: up to max_rows rows of (out + in) floats per fc layer */
        for (uint32_t l = 0; l < md->n_layers && md->layers && lim->max_rows; l++) {
            const msg_layer_shape_t *ls = &md->layers[l];
            if (!ls->fc_out) continue;
            uint64_t fl = s_mul(4, s_mul(lim->max_rows, (uint64_t)ls->fc_out + ls->fc_in));
            stats = s_add(stats, s_add(4 * S_FIELD_OVERHEAD, fl));
        }
    } else {
        n_params = lim->max_floats;
        n_state = lim->max_floats;
        uint64_t factor = s_add(per_factor, s_mul(4, lim->max_floats));
        uint64_t layer = s_add(2 * S_FIELD_OVERHEAD, s_mul(lim->max_factors, factor));
        stats = s_mul(lim->max_layers, layer);
    }
    stats = s_add(stats, 2 * S_FIELD_OVERHEAD);
    uint64_t scalars = 16 * S_FIELD_OVERHEAD; /* every scalar field of any body, generously */
    uint64_t tensors = s_mul(4, s_add(n_params, n_state));
    /* params.stats_layers: up to max_layers varints of <= 5 bytes */
    tensors = s_add(tensors, s_add(S_FIELD_OVERHEAD, s_mul(5, lim->model ? lim->model->n_layers : lim->max_layers)));
    uint64_t best = s_add(scalars, s_add(tensors, stats));             /* grad_push */
    uint64_t job = s_add(scalars, s_add(lim->max_string,
                                        s_mul(4, s_add(s_mul(nn, nn), s_add(nn, msg_packed_len(nn))))));
    best = s_max(best, job);                                           /* job, job_result */
    best = s_max(best, s_add(scalars, s_mul(2, lim->max_text)));       /* welcome */
    best = s_max(best, s_add(scalars, lim->max_string * 2));           /* hello, texts */
    best = s_add(best, 4 * S_FIELD_OVERHEAD);                          /* envelope */
    return best > (uint64_t)INT64_MAX ? INT64_MAX : (int64_t)best;
}

void msg_init(msg_t *m, msg_type_t type, msg_role_t role, uint32_t sender_id) {
    memset(m, 0, sizeof *m);
    m->type = type;
    m->protocol_version = KFAC_PROTOCOL_VERSION;
    m->role = role;
    m->sender_id = sender_id;
}

/* ---- encode ------------------------------------------------------------- */

/* protobuf-c wants non-const pointers even for packing; it only reads. */
#define S_MUT_STR(s) ((char *)((s) ? (s) : ""))

/* Temporary protobuf-c view of a msg_stats_t; arrays are malloc'd. */
typedef struct s_stats_pb {
    Kfac__FactorStats fs;
    Kfac__LayerStats *ls;
    Kfac__LayerStats **lsp;
    Kfac__Factor *f;
    Kfac__Factor **fp;
} s_stats_pb_t;

static void s_stats_pb_free(s_stats_pb_t *t) {
    free(t->ls);
    free(t->lsp);
    free(t->f);
    free(t->fp);
    memset(t, 0, sizeof *t);
}

static int s_stats_to_pb(const msg_stats_t *st, s_stats_pb_t *t) {
    memset(t, 0, sizeof *t);
    kfac__factor_stats__init(&t->fs);
    if (st->n_layers == 0) return 0;
    if (!st->layers) return -EINVAL;
    size_t n_f = 0;
    for (size_t l = 0; l < st->n_layers; l++) {
        if (st->layers[l].n_factors > 0 && !st->layers[l].factors) return -EINVAL;
        if (st->layers[l].n_factors > SIZE_MAX / 2 - n_f) return -EINVAL;
        n_f += st->layers[l].n_factors;
    }
    t->ls = calloc(st->n_layers, sizeof *t->ls);
    t->lsp = calloc(st->n_layers, sizeof *t->lsp);
    t->f = calloc(n_f ? n_f : 1, sizeof *t->f);
    t->fp = calloc(n_f ? n_f : 1, sizeof *t->fp);
    if (!t->ls || !t->lsp || !t->f || !t->fp) {
        s_stats_pb_free(t);
        return -ENOMEM;
    }
    size_t k = 0;
    for (size_t l = 0; l < st->n_layers; l++) {
        const msg_layer_stats_t *src = &st->layers[l];
        Kfac__LayerStats *dst = &t->ls[l];
        kfac__layer_stats__init(dst);
        dst->layer = src->layer;
        dst->n_factors = src->n_factors;
        dst->factors = src->n_factors ? &t->fp[k] : NULL;
        for (size_t j = 0; j < src->n_factors; j++, k++) {
            const msg_factor_t *sf = &src->factors[j];
            if (sf->n_data > 0 && !sf->data) {
                s_stats_pb_free(t);
                return -EINVAL;
            }
            kfac__factor__init(&t->f[k]);
            t->f[k].kind = (Kfac__FactorKind)sf->kind;
            t->f[k].n = sf->n;
            t->f[k].n_blocks = sf->n_blocks;
            t->f[k].n_data = sf->n_data;
            t->f[k].data = sf->n_data ? (float *)sf->data : NULL;
            t->fp[k] = &t->f[k];
        }
        t->lsp[l] = dst;
    }
    t->fs.n_layers = st->n_layers;
    t->fs.layers = t->lsp;
    return 0;
}

/* A float array may be NULL only when its count is 0. */
#define S_ARR_OK(p, n) ((n) == 0 || (p) != NULL)
#define S_ARR(p, n) ((n) ? (float *)(p) : NULL)

/* msg_encode (into == NULL: a new malloc'd *buf) and msg_encode_to (into
 * the caller's `into`, cap bytes). */
static int s_encode(const msg_t *m, uint8_t **buf, uint8_t *into, size_t cap, size_t *len) {
    if (!m || (!buf && !into) || !len) return -EINVAL;
    if (buf) *buf = NULL;
    *len = 0;

    Kfac__Envelope env = KFAC__ENVELOPE__INIT;
    env.protocol_version = m->protocol_version;
    env.role = (Kfac__Role)m->role;
    env.sender_id = m->sender_id;

    /* All bodies live here; only the one selected is used. */
    Kfac__Hello hello = KFAC__HELLO__INIT;
    Kfac__Welcome welcome = KFAC__WELCOME__INIT;
    Kfac__Refuse refuse = KFAC__REFUSE__INIT;
    Kfac__GetParams get_params = KFAC__GET_PARAMS__INIT;
    Kfac__Params params = KFAC__PARAMS__INIT;
    Kfac__GradPush grad_push = KFAC__GRAD_PUSH__INIT;
    Kfac__StatsPush stats_push = KFAC__STATS_PUSH__INIT;
    Kfac__JobRequest job_request = KFAC__JOB_REQUEST__INIT;
    Kfac__Job job = KFAC__JOB__INIT;
    Kfac__JobResult job_result = KFAC__JOB_RESULT__INIT;
    Kfac__Heartbeat heartbeat = KFAC__HEARTBEAT__INIT;
    Kfac__Error error = KFAC__ERROR__INIT;
    Kfac__Bye bye = KFAC__BYE__INIT;
    Kfac__Shutdown shutdown = KFAC__SHUTDOWN__INIT;
    s_stats_pb_t stats;
    memset(&stats, 0, sizeof stats);
    Kfac__FactoredGrad *fg = NULL, **fgp = NULL;
    int rc = 0;

    switch (m->type) {
    case MSG_HELLO:
        hello.build_id = S_MUT_STR(m->hello.build_id);
        hello.host = S_MUT_STR(m->hello.host);
        hello.pid = m->hello.pid;
        env.body_case = KFAC__ENVELOPE__BODY_HELLO;
        env.hello = &hello;
        break;
    case MSG_WELCOME:
        welcome.model_text = S_MUT_STR(m->welcome.model_text);
        welcome.config_text = S_MUT_STR(m->welcome.config_text);
        welcome.params_version = m->welcome.params_version;
        welcome.n_params = m->welcome.n_params;
        welcome.n_state = m->welcome.n_state;
        welcome.rank = m->welcome.rank;
        welcome.n_ranks = m->welcome.n_ranks;
        welcome.assigned_id = m->welcome.assigned_id;
        env.body_case = KFAC__ENVELOPE__BODY_WELCOME;
        env.welcome = &welcome;
        break;
    case MSG_REFUSE:
        refuse.reason = S_MUT_STR(m->refuse.text);
        env.body_case = KFAC__ENVELOPE__BODY_REFUSE;
        env.refuse = &refuse;
        break;
    case MSG_GET_PARAMS:
        get_params.min_version = m->get_params.min_version;
        env.body_case = KFAC__ENVELOPE__BODY_GET_PARAMS;
        env.get_params = &get_params;
        break;
    case MSG_PARAMS:
        if (!S_ARR_OK(m->params.params, m->params.n_params) ||
            !S_ARR_OK(m->params.state, m->params.n_state))
            return -EINVAL;
        params.version = m->params.version;
        params.n_params = m->params.n_params;
        params.params = S_ARR(m->params.params, m->params.n_params);
        params.n_state = m->params.n_state;
        params.state = S_ARR(m->params.state, m->params.n_state);
        params.want_stats = m->params.want_stats ? 1 : 0;
        if (m->params.n_stats_layers && !m->params.stats_layers) return -EINVAL;
        params.n_stats_layers = m->params.n_stats_layers;
        params.stats_layers = m->params.n_stats_layers ? (uint32_t *)m->params.stats_layers : NULL;
        env.body_case = KFAC__ENVELOPE__BODY_PARAMS;
        env.params = &params;
        break;
    case MSG_GRAD_PUSH:
        if (!S_ARR_OK(m->grad_push.grad, m->grad_push.n_grad) ||
            !S_ARR_OK(m->grad_push.state, m->grad_push.n_state))
            return -EINVAL;
        grad_push.version = m->grad_push.version;
        grad_push.loss = m->grad_push.loss;
        grad_push.n_examples = m->grad_push.n_examples;
        grad_push.n_correct = m->grad_push.n_correct;
        grad_push.n_grad = m->grad_push.n_grad;
        grad_push.grad = S_ARR(m->grad_push.grad, m->grad_push.n_grad);
        grad_push.n_state = m->grad_push.n_state;
        grad_push.state = S_ARR(m->grad_push.state, m->grad_push.n_state);
        grad_push.compute_ms = m->grad_push.compute_ms;
        if (m->grad_push.n_lowrank > 0) {
            const msg_lowrank_t *lr = m->grad_push.lowrank;
            if (!lr) return -EINVAL;
            for (size_t i = 0; i < m->grad_push.n_lowrank; i++)
                if (!S_ARR_OK(lr[i].d, lr[i].n_d) || !S_ARR_OK(lr[i].x, lr[i].n_x)) return -EINVAL;
            fg = calloc(m->grad_push.n_lowrank, sizeof *fg);
            fgp = calloc(m->grad_push.n_lowrank, sizeof *fgp);
            if (!fg || !fgp) {
                rc = -ENOMEM;
                goto cleanup;
            }
            for (size_t i = 0; i < m->grad_push.n_lowrank; i++) {
                kfac__factored_grad__init(&fg[i]);
                fg[i].layer = lr[i].layer;
                fg[i].n_rows = lr[i].n_rows;
                fg[i].n_d = lr[i].n_d;
                fg[i].d = S_ARR(lr[i].d, lr[i].n_d);
                fg[i].n_x = lr[i].n_x;
                fg[i].x = S_ARR(lr[i].x, lr[i].n_x);
                fgp[i] = &fg[i];
            }
            grad_push.n_factored = m->grad_push.n_lowrank;
            grad_push.factored = fgp;
        }
        if (m->grad_push.stats.n_layers > 0) {
            if ((rc = s_stats_to_pb(&m->grad_push.stats, &stats)) < 0) goto cleanup;
            grad_push.stats = &stats.fs;
        }
        env.body_case = KFAC__ENVELOPE__BODY_GRAD_PUSH;
        env.grad_push = &grad_push;
        break;
    case MSG_STATS_PUSH:
        stats_push.params_version = m->stats_push.params_version;
        stats_push.n_examples = m->stats_push.n_examples;
        stats_push.compute_ms = m->stats_push.compute_ms;
        if ((rc = s_stats_to_pb(&m->stats_push.stats, &stats)) < 0) return rc;
        stats_push.stats = &stats.fs;
        env.body_case = KFAC__ENVELOPE__BODY_STATS_PUSH;
        env.stats_push = &stats_push;
        break;
    case MSG_JOB_REQUEST:
        job_request.max_n = m->job_request.max_n;
        env.body_case = KFAC__ENVELOPE__BODY_JOB_REQUEST;
        env.job_request = &job_request;
        break;
    case MSG_JOB:
        if (!S_ARR_OK(m->job.packed, m->job.n_packed)) return -EINVAL;
        job.job_id = m->job.job_id;
        job.layer = m->job.layer;
        job.factor = m->job.factor;
        job.factor_version = m->job.factor_version;
        job.method = (Kfac__InvertMethod)m->job.method;
        job.damping = m->job.damping;
        job.n = m->job.n;
        job.n_packed = m->job.n_packed;
        job.packed = S_ARR(m->job.packed, m->job.n_packed);
        env.body_case = KFAC__ENVELOPE__BODY_JOB;
        env.job = &job;
        break;
    case MSG_JOB_RESULT: {
        const msg_job_result_t *r = &m->job_result;
        if (!S_ARR_OK(r->inverse, r->n_inverse) || !S_ARR_OK(r->eigvecs, r->n_eigvecs) ||
            !S_ARR_OK(r->eigvals, r->n_eigvals))
            return -EINVAL;
        job_result.job_id = r->job_id;
        job_result.layer = r->layer;
        job_result.factor = r->factor;
        job_result.factor_version = r->factor_version;
        job_result.method = (Kfac__InvertMethod)r->method;
        job_result.n = r->n;
        job_result.damping = r->damping;
        job_result.compute_ms = r->compute_ms;
        job_result.n_inverse = r->n_inverse;
        job_result.inverse = S_ARR(r->inverse, r->n_inverse);
        job_result.n_eigvecs = r->n_eigvecs;
        job_result.eigvecs = S_ARR(r->eigvecs, r->n_eigvecs);
        job_result.n_eigvals = r->n_eigvals;
        job_result.eigvals = S_ARR(r->eigvals, r->n_eigvals);
        job_result.error = S_MUT_STR(r->error);
        env.body_case = KFAC__ENVELOPE__BODY_JOB_RESULT;
        env.job_result = &job_result;
        break;
    }
    case MSG_HEARTBEAT:
        heartbeat.mono_ns = m->heartbeat.mono_ns;
        heartbeat.echo_ns = m->heartbeat.echo_ns;
        env.body_case = KFAC__ENVELOPE__BODY_HEARTBEAT;
        env.heartbeat = &heartbeat;
        break;
    case MSG_ERROR:
        error.code = (Kfac__ErrorCode)m->error.code;
        error.text = S_MUT_STR(m->error.text);
        env.body_case = KFAC__ENVELOPE__BODY_ERROR;
        env.error = &error;
        break;
    case MSG_BYE:
        bye.reason = S_MUT_STR(m->bye.text);
        env.body_case = KFAC__ENVELOPE__BODY_BYE;
        env.bye = &bye;
        break;
    case MSG_SHUTDOWN:
        shutdown.reason = S_MUT_STR(m->shutdown.text);
        env.body_case = KFAC__ENVELOPE__BODY_SHUTDOWN;
        env.shutdown = &shutdown;
        break;
    default:
        return -EINVAL;
    }

    size_t size = kfac__envelope__get_packed_size(&env);
    if (into && size > cap) {
        *len = size; /* what it needs */
        rc = -ENOSPC;
        goto cleanup;
    }
    uint8_t *out = into ? into : malloc(size ? size : 1);
    if (!out) {
        rc = -ENOMEM;
        goto cleanup;
    }
    size_t written = kfac__envelope__pack(&env, out);
    if (written != size) { /* cannot happen unless protobuf-c is broken */
        if (!into) free(out);
        rc = -EIO;
        goto cleanup;
    }
    if (buf) *buf = out;
    *len = size;
cleanup:
    s_stats_pb_free(&stats);
    free(fg);
    free(fgp);
    return rc;
}

int msg_encode(const msg_t *m, uint8_t **buf, size_t *len) {
    if (!buf) return -EINVAL;
    return s_encode(m, buf, NULL, 0, len);
}

int msg_encode_to(const msg_t *m, uint8_t *buf, size_t cap, size_t *len) {
    if (!buf) return -EINVAL;
    return s_encode(m, NULL, buf, cap, len);
}

/* ---- decode ------------------------------------------------------------- */

/* Move a float array from the unpacked message to the msg_t. */
static void s_take(float **dst, size_t *n_dst, float **src, size_t *n_src) {
    if (*n_src == 0) {
        *dst = NULL;
        *n_dst = 0;
        return; /* a zero-length allocation, if any, stays with protobuf-c */
    }
    *dst = *src;
    *n_dst = *n_src;
    *src = NULL;
    *n_src = 0;
}

static void s_stats_clear(msg_stats_t *st) {
    if (!st->layers) return;
    for (size_t l = 0; l < st->n_layers; l++) {
        msg_layer_stats_t *ls = &st->layers[l];
        if (!ls->factors) continue;
        for (size_t f = 0; f < ls->n_factors; f++) free(ls->factors[f].data);
        free(ls->factors);
    }
    free(st->layers);
    st->layers = NULL;
    st->n_layers = 0;
}

static int s_stats_from_pb(Kfac__FactorStats *fs, msg_stats_t *st) {
    memset(st, 0, sizeof *st);
    if (!fs || fs->n_layers == 0) return 0;
    st->layers = calloc(fs->n_layers, sizeof *st->layers);
    if (!st->layers) return -ENOMEM;
    st->n_layers = fs->n_layers;
    for (size_t l = 0; l < fs->n_layers; l++) {
        Kfac__LayerStats *src = fs->layers[l];
        msg_layer_stats_t *dst = &st->layers[l];
        if (!src) continue;
        dst->layer = src->layer;
        if (src->n_factors == 0) continue;
        dst->factors = calloc(src->n_factors, sizeof *dst->factors);
        if (!dst->factors) return -ENOMEM;
        dst->n_factors = src->n_factors;
        for (size_t f = 0; f < src->n_factors; f++) {
            Kfac__Factor *sf = src->factors[f];
            msg_factor_t *df = &dst->factors[f];
            if (!sf) continue;
            df->kind = (msg_factor_kind_t)sf->kind;
            df->n = sf->n;
            df->n_blocks = sf->n_blocks ? sf->n_blocks : 1;
            s_take(&df->data, &df->n_data, &sf->data, &sf->n_data);
        }
    }
    return 0;
}

static int s_dup(char **dst, const char *src) {
    *dst = s_strdup(src);
    return *dst ? 0 : -ENOMEM;
}

int msg_decode(const uint8_t *buf, size_t len, msg_t *out, char *err, size_t err_len) {
    if (!out) return -EINVAL;
    memset(out, 0, sizeof *out);
    if (!buf && len > 0) return -EINVAL;
    ProtobufCAllocator alloc = s_allocator();
    Kfac__Envelope *env = kfac__envelope__unpack(&alloc, len, buf ? buf : (const uint8_t *)"");
    if (!env) {
        s_err(err, err_len, "not a valid kfac message envelope (%zu bytes)", len);
        return -EBADMSG;
    }
    out->protocol_version = env->protocol_version;
    out->role = (msg_role_t)env->role;
    out->sender_id = env->sender_id;
    int rc = 0;

    switch (env->body_case) {
    case KFAC__ENVELOPE__BODY_HELLO: {
        Kfac__Hello *b = env->hello;
        out->type = MSG_HELLO;
        out->hello.pid = b->pid;
        if ((rc = s_dup(&out->hello.build_id, b->build_id)) < 0) break;
        rc = s_dup(&out->hello.host, b->host);
        break;
    }
    case KFAC__ENVELOPE__BODY_WELCOME: {
        Kfac__Welcome *b = env->welcome;
        out->type = MSG_WELCOME;
        out->welcome.params_version = b->params_version;
        out->welcome.n_params = b->n_params;
        out->welcome.n_state = b->n_state;
        out->welcome.rank = b->rank;
        out->welcome.n_ranks = b->n_ranks;
        out->welcome.assigned_id = b->assigned_id;
        if ((rc = s_dup(&out->welcome.model_text, b->model_text)) < 0) break;
        rc = s_dup(&out->welcome.config_text, b->config_text);
        break;
    }
    case KFAC__ENVELOPE__BODY_REFUSE:
        out->type = MSG_REFUSE;
        rc = s_dup(&out->refuse.text, env->refuse->reason);
        break;
    case KFAC__ENVELOPE__BODY_GET_PARAMS:
        out->type = MSG_GET_PARAMS;
        out->get_params.min_version = env->get_params->min_version;
        break;
    case KFAC__ENVELOPE__BODY_PARAMS: {
        Kfac__Params *b = env->params;
        out->type = MSG_PARAMS;
        out->params.version = b->version;
        out->params.want_stats = b->want_stats ? 1 : 0;
        s_take(&out->params.params, &out->params.n_params, &b->params, &b->n_params);
        s_take(&out->params.state, &out->params.n_state, &b->state, &b->n_state);
        if (b->n_stats_layers) { /* moved like the float arrays */
            out->params.stats_layers = b->stats_layers;
            out->params.n_stats_layers = b->n_stats_layers;
            b->stats_layers = NULL;
            b->n_stats_layers = 0;
        }
        break;
    }
    case KFAC__ENVELOPE__BODY_GRAD_PUSH: {
        Kfac__GradPush *b = env->grad_push;
        out->type = MSG_GRAD_PUSH;
        out->grad_push.version = b->version;
        out->grad_push.loss = b->loss;
        out->grad_push.n_examples = b->n_examples;
        out->grad_push.n_correct = b->n_correct;
        out->grad_push.compute_ms = b->compute_ms;
        s_take(&out->grad_push.grad, &out->grad_push.n_grad, &b->grad, &b->n_grad);
        s_take(&out->grad_push.state, &out->grad_push.n_state, &b->state, &b->n_state);
        if (b->n_factored > 0) {
            out->grad_push.lowrank = calloc(b->n_factored, sizeof *out->grad_push.lowrank);
            if (!out->grad_push.lowrank) {
                rc = -ENOMEM;
            } else {
                out->grad_push.n_lowrank = b->n_factored;
                for (size_t i = 0; i < b->n_factored; i++) {
                    Kfac__FactoredGrad *f = b->factored[i];
                    msg_lowrank_t *d = &out->grad_push.lowrank[i];
                    if (!f) continue;
                    d->layer = f->layer;
                    d->n_rows = f->n_rows;
                    s_take(&d->d, &d->n_d, &f->d, &f->n_d);
                    s_take(&d->x, &d->n_x, &f->x, &f->n_x);
                }
            }
        }
        if (rc < 0) break;
        rc = s_stats_from_pb(b->stats, &out->grad_push.stats);
        break;
    }
    case KFAC__ENVELOPE__BODY_STATS_PUSH: {
        Kfac__StatsPush *b = env->stats_push;
        out->type = MSG_STATS_PUSH;
        out->stats_push.params_version = b->params_version;
        out->stats_push.n_examples = b->n_examples;
        out->stats_push.compute_ms = b->compute_ms;
        rc = s_stats_from_pb(b->stats, &out->stats_push.stats);
        break;
    }
    case KFAC__ENVELOPE__BODY_JOB_REQUEST:
        out->type = MSG_JOB_REQUEST;
        out->job_request.max_n = env->job_request->max_n;
        break;
    case KFAC__ENVELOPE__BODY_JOB: {
        Kfac__Job *b = env->job;
        out->type = MSG_JOB;
        out->job.job_id = b->job_id;
        out->job.layer = b->layer;
        out->job.factor = b->factor;
        out->job.factor_version = b->factor_version;
        out->job.method = (msg_method_t)b->method;
        out->job.damping = b->damping;
        out->job.n = b->n;
        s_take(&out->job.packed, &out->job.n_packed, &b->packed, &b->n_packed);
        break;
    }
    case KFAC__ENVELOPE__BODY_JOB_RESULT: {
        Kfac__JobResult *b = env->job_result;
        msg_job_result_t *r = &out->job_result;
        out->type = MSG_JOB_RESULT;
        r->job_id = b->job_id;
        r->layer = b->layer;
        r->factor = b->factor;
        r->factor_version = b->factor_version;
        r->method = (msg_method_t)b->method;
        r->n = b->n;
        r->damping = b->damping;
        r->compute_ms = b->compute_ms;
        s_take(&r->inverse, &r->n_inverse, &b->inverse, &b->n_inverse);
        s_take(&r->eigvecs, &r->n_eigvecs, &b->eigvecs, &b->n_eigvecs);
        s_take(&r->eigvals, &r->n_eigvals, &b->eigvals, &b->n_eigvals);
        rc = s_dup(&r->error, b->error);
        break;
    }
    case KFAC__ENVELOPE__BODY_HEARTBEAT:
        out->type = MSG_HEARTBEAT;
        out->heartbeat.mono_ns = env->heartbeat->mono_ns;
        out->heartbeat.echo_ns = env->heartbeat->echo_ns;
        break;
    case KFAC__ENVELOPE__BODY_ERROR:
        out->type = MSG_ERROR;
        out->error.code = (msg_error_code_t)env->error->code;
        rc = s_dup(&out->error.text, env->error->text);
        break;
    case KFAC__ENVELOPE__BODY_BYE:
        out->type = MSG_BYE;
        rc = s_dup(&out->bye.text, env->bye->reason);
        break;
    case KFAC__ENVELOPE__BODY_SHUTDOWN:
        out->type = MSG_SHUTDOWN;
        rc = s_dup(&out->shutdown.text, env->shutdown->reason);
        break;
    default:
        out->type = MSG_NONE;
        s_err(err, err_len, "message from %s %" PRIu32 " (protocol version %" PRIu32
              ") has no body this build knows",
              msg_role_name(out->role), out->sender_id, out->protocol_version);
        rc = -EPROTO;
        break;
    }
    kfac__envelope__free_unpacked(env, &alloc);
    if (rc == -ENOMEM) {
        s_err(err, err_len, "out of memory decoding a %zu-byte message", len);
        /* keep the header for the caller, drop the partial body */
        msg_t hdr = *out;
        msg_clear(out);
        out->protocol_version = hdr.protocol_version;
        out->role = hdr.role;
        out->sender_id = hdr.sender_id;
    }
    return rc;
}

void msg_clear(msg_t *m) {
    if (!m) return;
    switch (m->type) {
    case MSG_HELLO:
        free(m->hello.build_id);
        free(m->hello.host);
        break;
    case MSG_WELCOME:
        free(m->welcome.model_text);
        free(m->welcome.config_text);
        break;
    case MSG_REFUSE: free(m->refuse.text); break;
    case MSG_BYE: free(m->bye.text); break;
    case MSG_SHUTDOWN: free(m->shutdown.text); break;
    case MSG_ERROR: free(m->error.text); break;
    case MSG_PARAMS:
        free(m->params.params);
        free(m->params.state);
        free(m->params.stats_layers);
        break;
    case MSG_GRAD_PUSH:
        free(m->grad_push.grad);
        free(m->grad_push.state);
        for (size_t i = 0; m->grad_push.lowrank && i < m->grad_push.n_lowrank; i++) {
            free(m->grad_push.lowrank[i].d);
            free(m->grad_push.lowrank[i].x);
        }
        free(m->grad_push.lowrank);
        s_stats_clear(&m->grad_push.stats);
        break;
    case MSG_STATS_PUSH:
        s_stats_clear(&m->stats_push.stats);
        break;
    case MSG_JOB:
        free(m->job.packed);
        break;
    case MSG_JOB_RESULT:
        free(m->job_result.inverse);
        free(m->job_result.eigvecs);
        free(m->job_result.eigvals);
        free(m->job_result.error);
        break;
    default:
        break;
    }
    memset(m, 0, sizeof *m);
}
