/* proto/msg.c — encode and decode kfac wire messages (proto/msg.h); the
 * checks of msg_validate() are in proto/msg_validate.c.
 *
 * With proto/msg_fields.c, the only file that sees protobuf-c types. Encode,
 * decode and msg_clear() walk each message's field table
 * (proto/msg_fields.h); no code here names a message field. Encoding
 * points the generated structs at the caller's arrays (no copies until
 * protobuf-c packs them with one memcpy per packed float field). Decoding unpacks with an allocator that
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
#include "proto/msg_fields.h"

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

/* ---- field access ------------------------------------------------------- */

/* The member at byte offset off of a struct, of type T. */
#define S_AT(p, off, T) ((T *)(void *)((char *)(p) + (off)))
#define S_CAT(p, off, T) ((const T *)(const void *)((const char *)(p) + (off)))

/* Pointers of any type are moved as bytes: the tables know a member is a
 * pointer, not to what. */
static void *s_ptr(const void *p, size_t off) {
    void *v;
    memcpy(&v, (const char *)p + off, sizeof v);
    return v;
}

static void s_set_ptr(void *p, size_t off, const void *v) {
    memcpy((char *)p + off, &v, sizeof v);
}

/* The body of m: every member of msg_t's union starts at the same place. */
#define S_BODY(m) ((void *)&(m)->hello)

/* ---- encode ------------------------------------------------------------- */

/* What one encode allocates (sub-messages, their pointer arrays), freed
 * together; each block is zeroed and aligned for any type. */
typedef union s_block {
    union s_block *next;
    max_align_t align;
} s_block_t;

static void *s_arena_alloc(s_block_t **arena, size_t n, size_t size) {
    if (size && n > (SIZE_MAX - sizeof(s_block_t)) / size) return NULL;
    s_block_t *b = calloc(1, sizeof *b + n * size);
    if (!b) return NULL;
    b->next = *arena;
    *arena = b;
    return b + 1;
}

static void s_arena_free(s_block_t **arena) {
    while (*arena) {
        s_block_t *next = (*arena)->next;
        free(*arena);
        *arena = next;
    }
}

/* Fill protobuf-c's struct pb from the C struct src by table t. Arrays and
 * strings are pointed at, not copied (protobuf-c only reads them; packed
 * floats go out with one memcpy each). Returns 0, -EINVAL (a NULL array
 * with a non-zero count) or -ENOMEM. */
static int s_to_pb(const msg_struct_t *t, const void *src, void *pb, s_block_t **arena) {
    protobuf_c_message_init(t->pb_descriptor, pb);
    for (size_t i = 0; i < t->n_fields; i++) {
        const msg_field_t *f = &t->fields[i];
        switch (f->kind) {
        case MSG_FIELD_U32: *S_AT(pb, f->pb_off, uint32_t) = *S_CAT(src, f->off, uint32_t); break;
        case MSG_FIELD_U64: *S_AT(pb, f->pb_off, uint64_t) = *S_CAT(src, f->off, uint64_t); break;
        case MSG_FIELD_DOUBLE: *S_AT(pb, f->pb_off, double) = *S_CAT(src, f->off, double); break;
        case MSG_FIELD_BOOL: *S_AT(pb, f->pb_off, protobuf_c_boolean) = *S_CAT(src, f->off, int) ? 1 : 0; break;
        case MSG_FIELD_ENUM: *S_AT(pb, f->pb_off, int) = *S_CAT(src, f->off, int); break;
        case MSG_FIELD_STRING: {
            const char *s = s_ptr(src, f->off);
            s_set_ptr(pb, f->pb_off, s ? s : "");
            break;
        }
        case MSG_FIELD_FLOATS:
        case MSG_FIELD_U32S: {
            size_t n = *S_CAT(src, f->n_off, size_t);
            const void *p = s_ptr(src, f->off);
            if (n > 0 && !p) return -EINVAL;
            *S_AT(pb, f->pb_n_off, size_t) = n;
            s_set_ptr(pb, f->pb_off, n ? p : NULL);
            break;
        }
        case MSG_FIELD_STRUCT: {
            const void *s = (const char *)src + f->off;
            void *sub = NULL;
            if ((f->flags & MSG_FIELD_ALWAYS) || *S_CAT(s, f->sub->empty_n_off, size_t) != 0) {
                if (!(sub = s_arena_alloc(arena, 1, f->sub->pb_size))) return -ENOMEM;
                int rc = s_to_pb(f->sub, s, sub, arena);
                if (rc < 0) return rc;
            }
            s_set_ptr(pb, f->pb_off, sub);
            break;
        }
        case MSG_FIELD_STRUCTS: {
            size_t n = *S_CAT(src, f->n_off, size_t);
            const char *arr = s_ptr(src, f->off);
            if (n > 0 && !arr) return -EINVAL;
            char *subs = NULL;
            void **ptrs = NULL;
            if (n > 0) {
                subs = s_arena_alloc(arena, n, f->sub->pb_size);
                ptrs = s_arena_alloc(arena, n, sizeof *ptrs);
                if (!subs || !ptrs) return -ENOMEM;
            }
            for (size_t j = 0; j < n; j++) {
                ptrs[j] = subs + j * f->sub->pb_size;
                int rc = s_to_pb(f->sub, arr + j * f->sub->size, ptrs[j], arena);
                if (rc < 0) return rc;
            }
            *S_AT(pb, f->pb_n_off, size_t) = n;
            s_set_ptr(pb, f->pb_off, ptrs);
            break;
        }
        }
    }
    return 0;
}

/* msg_encode (into == NULL: a new malloc'd *buf) and msg_encode_to (into
 * the caller's `into`, cap bytes). */
static int s_encode(const msg_t *m, uint8_t **buf, uint8_t *into, size_t cap, size_t *len) {
    if (!m || (!buf && !into) || !len) return -EINVAL;
    if (buf) *buf = NULL;
    *len = 0;
    const msg_struct_t *t = msg_fields_body(m->type);
    if (!t) return -EINVAL;

    Kfac__Envelope env = KFAC__ENVELOPE__INIT;
    env.protocol_version = m->protocol_version;
    env.role = (Kfac__Role)m->role;
    env.sender_id = m->sender_id;
    /* The body on the stack (every body fits; the arena takes a larger one). */
    union {
        max_align_t align;
        unsigned char bytes[512];
    } local;
    s_block_t *arena = NULL;
    void *body = t->pb_size <= sizeof local ? (void *)&local : s_arena_alloc(&arena, 1, t->pb_size);
    int rc = body ? s_to_pb(t, S_BODY(m), body, &arena) : -ENOMEM;
    if (rc < 0) goto cleanup;
    env.body_case = (Kfac__Envelope__BodyCase)t->body_case;
    s_set_ptr(&env, t->env_off, body);

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
    s_arena_free(&arena);
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

/* Fill the zeroed C struct dst from protobuf-c's struct pb by table t.
 * Strings are copied; arrays move (pb's pointer is set to NULL, so freeing
 * the unpacked message leaves them). A count is set only with its array,
 * so a partial dst (-ENOMEM) is still freed right by s_clear(). */
static int s_from_pb(const msg_struct_t *t, void *pb, void *dst) {
    for (size_t i = 0; i < t->n_fields; i++) {
        const msg_field_t *f = &t->fields[i];
        switch (f->kind) {
        case MSG_FIELD_U32: {
            uint32_t v = *S_CAT(pb, f->pb_off, uint32_t);
            *S_AT(dst, f->off, uint32_t) = (v == 0 && (f->flags & MSG_FIELD_ZERO_IS_ONE)) ? 1 : v;
            break;
        }
        case MSG_FIELD_U64: *S_AT(dst, f->off, uint64_t) = *S_CAT(pb, f->pb_off, uint64_t); break;
        case MSG_FIELD_DOUBLE: *S_AT(dst, f->off, double) = *S_CAT(pb, f->pb_off, double); break;
        case MSG_FIELD_BOOL: *S_AT(dst, f->off, int) = *S_CAT(pb, f->pb_off, protobuf_c_boolean) ? 1 : 0; break;
        case MSG_FIELD_ENUM: *S_AT(dst, f->off, int) = *S_CAT(pb, f->pb_off, int); break;
        case MSG_FIELD_STRING: {
            char *s = s_strdup(s_ptr(pb, f->pb_off));
            if (!s) return -ENOMEM;
            s_set_ptr(dst, f->off, s);
            break;
        }
        case MSG_FIELD_FLOATS:
        case MSG_FIELD_U32S: {
            size_t n = *S_CAT(pb, f->pb_n_off, size_t);
            if (n == 0) break; /* a zero-length allocation, if any, stays with protobuf-c */
            s_set_ptr(dst, f->off, s_ptr(pb, f->pb_off));
            *S_AT(dst, f->n_off, size_t) = n;
            s_set_ptr(pb, f->pb_off, NULL);
            *S_AT(pb, f->pb_n_off, size_t) = 0;
            break;
        }
        case MSG_FIELD_STRUCT: {
            void *sub = s_ptr(pb, f->pb_off);
            int rc = sub ? s_from_pb(f->sub, sub, (char *)dst + f->off) : 0;
            if (rc < 0) return rc;
            break;
        }
        case MSG_FIELD_STRUCTS: {
            size_t n = *S_CAT(pb, f->pb_n_off, size_t);
            if (n == 0) break;
            const char *subs = s_ptr(pb, f->pb_off);
            char *arr = calloc(n, f->sub->size);
            if (!arr) return -ENOMEM;
            s_set_ptr(dst, f->off, arr);
            *S_AT(dst, f->n_off, size_t) = n;
            for (size_t j = 0; j < n; j++) {
                void *sub = s_ptr(subs, j * sizeof(void *));
                int rc = sub ? s_from_pb(f->sub, sub, arr + j * f->sub->size) : 0;
                if (rc < 0) return rc;
            }
            break;
        }
        }
    }
    return 0;
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
    out->type = msg_fields_type_of_case((int)env->body_case);
    const msg_struct_t *t = msg_fields_body(out->type);
    void *body = t ? s_ptr(env, t->env_off) : NULL;
    int rc = 0;
    if (!t || !body) {
        out->type = MSG_NONE;
        s_err(err, err_len, "message from %s %" PRIu32 " (protocol version %" PRIu32
              ") has no body this build knows",
              msg_role_name(out->role), out->sender_id, out->protocol_version);
        rc = -EPROTO;
    } else {
        rc = s_from_pb(t, body, S_BODY(out));
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

/* Free what the C struct s owns by table t (strings, arrays, sub-structs). */
static void s_clear(const msg_struct_t *t, void *s) {
    for (size_t i = 0; i < t->n_fields; i++) {
        const msg_field_t *f = &t->fields[i];
        switch (f->kind) {
        case MSG_FIELD_STRING:
        case MSG_FIELD_FLOATS:
        case MSG_FIELD_U32S: free(s_ptr(s, f->off)); break;
        case MSG_FIELD_STRUCT: s_clear(f->sub, (char *)s + f->off); break;
        case MSG_FIELD_STRUCTS: {
            char *arr = s_ptr(s, f->off);
            size_t n = *S_CAT(s, f->n_off, size_t);
            for (size_t j = 0; arr && j < n; j++) s_clear(f->sub, arr + j * f->sub->size);
            free(arr);
            break;
        }
        default: break;
        }
    }
}

void msg_clear(msg_t *m) {
    if (!m) return;
    const msg_struct_t *t = msg_fields_body(m->type);
    if (t) s_clear(t, S_BODY(m));
    memset(m, 0, sizeof *m);
}

void msg_take(msg_t *dst, msg_t *src) {
    *dst = *src;
    memset(src, 0, sizeof *src);
}
