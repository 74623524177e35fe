/* proto/msg_fields.c — the field tables of every kfac message
 * (proto/msg_fields.h): one row per field, in the order msg_validate()
 * checks them. A row names the member in the C struct (proto/msg.h) and in
 * protobuf-c's struct, which differ only where the C name says more
 * (Refuse/Bye/Shutdown `text` is the wire's `reason`, GradPush `lowrank` is
 * `factored`), and the field's own check.
 *
 * S_OFF() checks each member's type at compile time (_Generic with no
 * default: a member of another type is a compile error), so a row cannot
 * point at the wrong member silently.
 */
#include "proto/msg_fields.h"

#include <stdio.h>
#include <string.h>

#include "proto/kfac.pb-c.h"

/* The C enums travel as the wire enums: both int-sized, the same values. */
_Static_assert(sizeof(msg_factor_kind_t) == sizeof(int) && sizeof(Kfac__FactorKind) == sizeof(int),
               "factor kinds are int-sized");
_Static_assert(sizeof(msg_method_t) == sizeof(int) && sizeof(Kfac__InvertMethod) == sizeof(int),
               "methods are int-sized");
_Static_assert(sizeof(msg_error_code_t) == sizeof(int) && sizeof(Kfac__ErrorCode) == sizeof(int),
               "error codes are int-sized");
_Static_assert(sizeof(protobuf_c_boolean) == sizeof(int), "protobuf_c_boolean is an int");

/* Offset of member m of struct S, which must have type C. */
#define S_OFF(C, S, m) (offsetof(S, m) + _Generic(((S *)0)->m, C: (size_t)0))
/* Offset of an int-sized member (an enum). */
#define S_OFF_INT(S, m) (offsetof(S, m) + 0 * sizeof(char[sizeof(((S *)0)->m) == sizeof(int) ? 1 : -1]))

/* Rows of the struct pair (T, PB) defined before each table: C member m,
 * wire member pm, then the check as designated initializers. */
#define S_ROW(KIND, C, PC, m, pm, ...) \
    { .name = #pm, .kind = (KIND), .off = S_OFF(C, T, m), .pb_off = S_OFF(PC, PB, pm), __VA_ARGS__ }
#define S_U32(m, pm, ...) S_ROW(MSG_FIELD_U32, uint32_t, uint32_t, m, pm, __VA_ARGS__)
#define S_U64(m, pm, ...) S_ROW(MSG_FIELD_U64, uint64_t, uint64_t, m, pm, __VA_ARGS__)
#define S_DOUBLE(m, pm, ...) S_ROW(MSG_FIELD_DOUBLE, double, double, m, pm, __VA_ARGS__)
#define S_BOOL(m, pm, ...) S_ROW(MSG_FIELD_BOOL, int, protobuf_c_boolean, m, pm, __VA_ARGS__)
#define S_STRING(m, pm, ...) S_ROW(MSG_FIELD_STRING, char *, char *, m, pm, __VA_ARGS__)
#define S_ENUM(m, pm, ...) \
    { .name = #pm, .kind = MSG_FIELD_ENUM, .off = S_OFF_INT(T, m), .pb_off = S_OFF_INT(PB, pm), __VA_ARGS__ }
#define S_ARRAY(KIND, C, m, pm, ...) \
    { .name = #pm, .kind = (KIND), .off = S_OFF(C *, T, m), .n_off = S_OFF(size_t, T, n_##m), \
      .pb_off = S_OFF(C *, PB, pm), .pb_n_off = S_OFF(size_t, PB, n_##pm), __VA_ARGS__ }
#define S_FLOATS(m, pm, ...) S_ARRAY(MSG_FIELD_FLOATS, float, m, pm, __VA_ARGS__)
#define S_U32S(m, pm, ...) S_ARRAY(MSG_FIELD_U32S, uint32_t, m, pm, __VA_ARGS__)
/* An embedded struct of C type CT, sent as sub-message PT (table SUB). */
#define S_STRUCT(CT, PT, SUB, m, pm, ...) \
    { .name = #pm, .kind = MSG_FIELD_STRUCT, .off = S_OFF(CT, T, m), .pb_off = S_OFF(PT *, PB, pm), \
      .sub = &(SUB), __VA_ARGS__ }
/* An array of CT with its count, sent as repeated sub-message PT. */
#define S_STRUCTS(CT, PT, SUB, m, pm, ...) \
    { .name = #pm, .kind = MSG_FIELD_STRUCTS, .off = S_OFF(CT *, T, m), .n_off = S_OFF(size_t, T, n_##m), \
      .pb_off = S_OFF(PT **, PB, pm), .pb_n_off = S_OFF(size_t, PB, n_##pm), .sub = &(SUB), __VA_ARGS__ }

#define S_COUNT(a) (sizeof(a) / sizeof((a)[0]))
/* A message's table: C struct CT, wire struct PT, its descriptor and rows. */
#define S_TABLE(NAME, CT, PT, DESC, ROWS) \
    .name = (NAME), .size = sizeof(CT), .pb_size = sizeof(PT), .pb_descriptor = &(DESC), .fields = (ROWS), \
    .n_fields = S_COUNT(ROWS)
#define S_STRUCT_TABLE(NAME, CT, PT, DESC, ROWS) { S_TABLE(NAME, CT, PT, DESC, ROWS) }
/* A body: also its Envelope oneof case and member. */
#define S_BODY(NAME, CT, PT, DESC, ROWS, CASE, member) \
    { S_TABLE(NAME, CT, PT, DESC, ROWS), .body_case = (CASE), .env_off = S_OFF(PT *, Kfac__Envelope, member) }

#define S_NONE .check = MSG_CHECK_NONE
#define S_RULE .check = MSG_CHECK_RULE

/* ---- sub-messages ------------------------------------------------------- */

#define T msg_factor_t
#define PB Kfac__Factor
static const msg_field_t s_factor_rows[] = {
    S_ENUM(kind, kind, S_RULE),
    S_U32(n, n, S_RULE),
    S_U32(n_blocks, n_blocks, S_RULE, .flags = MSG_FIELD_ZERO_IS_ONE),
    S_FLOATS(data, data, S_RULE),
};
static const msg_struct_t s_factor = S_STRUCT_TABLE("factors", msg_factor_t, Kfac__Factor,
                                                    kfac__factor__descriptor, s_factor_rows);
#undef T
#undef PB

#define T msg_layer_stats_t
#define PB Kfac__LayerStats
static const msg_field_t s_layer_stats_rows[] = {
    S_U32(layer, layer, S_RULE),
    S_STRUCTS(msg_factor_t, Kfac__Factor, s_factor, factors, factors, S_RULE),
};
static const msg_struct_t s_layer_stats = S_STRUCT_TABLE("layers", msg_layer_stats_t, Kfac__LayerStats,
                                                         kfac__layer_stats__descriptor, s_layer_stats_rows);
#undef T
#undef PB

#define T msg_stats_t
#define PB Kfac__FactorStats
static const msg_field_t s_stats_rows[] = {
    S_STRUCTS(msg_layer_stats_t, Kfac__LayerStats, s_layer_stats, layers, layers, S_RULE),
};
static const msg_struct_t s_stats = {
    S_TABLE("stats", msg_stats_t, Kfac__FactorStats, kfac__factor_stats__descriptor, s_stats_rows),
    .empty_n_off = offsetof(msg_stats_t, n_layers), /* no layers: no statistics sent */
};
#undef T
#undef PB

#define T msg_lowrank_t
#define PB Kfac__FactoredGrad
static const msg_field_t s_lowrank_rows[] = {
    S_U32(layer, layer, S_RULE),
    S_U32(n_rows, n_rows, S_RULE),
    S_FLOATS(d, d, S_RULE),
    S_FLOATS(x, x, S_RULE),
};
static const msg_struct_t s_lowrank = S_STRUCT_TABLE("factored", msg_lowrank_t, Kfac__FactoredGrad,
                                                     kfac__factored_grad__descriptor, s_lowrank_rows);
#undef T
#undef PB

/* ---- bodies ------------------------------------------------------------- */

#define T msg_hello_t
#define PB Kfac__Hello
static const msg_field_t s_hello_rows[] = {
    S_STRING(build_id, build_id, .check = MSG_CHECK_STRING),
    S_STRING(host, host, .check = MSG_CHECK_STRING),
    S_U32(pid, pid, S_NONE),
};
#undef T
#undef PB

#define T msg_welcome_t
#define PB Kfac__Welcome
static const msg_field_t s_welcome_rows[] = {
    S_STRING(model_text, model_text, .check = MSG_CHECK_TEXT),
    S_STRING(config_text, config_text, .check = MSG_CHECK_TEXT),
    S_U64(n_params, n_params, .check = MSG_CHECK_RANGE, .min = 1, .limit_floats = 1),
    S_U64(n_state, n_state, .check = MSG_CHECK_RANGE, .limit_floats = 1),
    S_U32(rank, rank, S_RULE),
    S_U32(n_ranks, n_ranks, S_RULE),
    S_U64(params_version, params_version, S_NONE),
    S_U32(assigned_id, assigned_id, S_NONE),
};
#undef T
#undef PB

/* Refuse, Bye and Shutdown: one reason each. */
#define T msg_text_t
#define PB Kfac__Refuse
static const msg_field_t s_refuse_rows[] = { S_STRING(text, reason, .check = MSG_CHECK_STRING) };
#undef PB
#define PB Kfac__Bye
static const msg_field_t s_bye_rows[] = { S_STRING(text, reason, .check = MSG_CHECK_STRING) };
#undef PB
#define PB Kfac__Shutdown
static const msg_field_t s_shutdown_rows[] = { S_STRING(text, reason, .check = MSG_CHECK_STRING) };
#undef PB
#undef T

#define T msg_get_params_t
#define PB Kfac__GetParams
static const msg_field_t s_get_params_rows[] = { S_U64(min_version, min_version, S_NONE) };
#undef T
#undef PB

#define T msg_params_t
#define PB Kfac__Params
static const msg_field_t s_params_rows[] = {
    S_FLOATS(params, params, S_RULE),
    S_FLOATS(state, state, S_RULE),
    S_U32S(stats_layers, stats_layers, S_RULE),
    S_U64(version, version, S_NONE),
    S_BOOL(want_stats, want_stats, S_NONE),
};
#undef T
#undef PB

#define T msg_grad_push_t
#define PB Kfac__GradPush
static const msg_field_t s_grad_push_rows[] = {
    S_DOUBLE(loss, loss, .check = MSG_CHECK_FINITE),
    S_DOUBLE(compute_ms, compute_ms, .check = MSG_CHECK_NONNEG),
    S_U64(n_examples, n_examples, .check = MSG_CHECK_RANGE, .min = 1),
    S_U64(n_correct, n_correct, S_RULE),
    S_FLOATS(grad, grad, S_RULE),
    S_FLOATS(state, state, S_RULE),
    S_STRUCTS(msg_lowrank_t, Kfac__FactoredGrad, s_lowrank, lowrank, factored, S_RULE),
    S_STRUCT(msg_stats_t, Kfac__FactorStats, s_stats, stats, stats, S_RULE),
    S_U64(version, version, S_NONE),
};
#undef T
#undef PB

#define T msg_stats_push_t
#define PB Kfac__StatsPush
static const msg_field_t s_stats_push_rows[] = {
    S_DOUBLE(compute_ms, compute_ms, .check = MSG_CHECK_NONNEG),
    S_U64(n_examples, n_examples, .check = MSG_CHECK_RANGE, .min = 1),
    S_STRUCT(msg_stats_t, Kfac__FactorStats, s_stats, stats, stats, S_RULE, .flags = MSG_FIELD_ALWAYS),
    S_U64(params_version, params_version, S_NONE),
};
#undef T
#undef PB

#define T msg_job_request_t
#define PB Kfac__JobRequest
static const msg_field_t s_job_request_rows[] = { S_U32(max_n, max_n, S_NONE) };
#undef T
#undef PB

#define S_METHOD .check = MSG_CHECK_ENUM, .enum_count = MSG_METHOD_COUNT, .enum_noun = "inversion method"

#define T msg_job_t
#define PB Kfac__Job
static const msg_field_t s_job_rows[] = {
    S_ENUM(method, method, S_METHOD),
    S_U32(n, n, .check = MSG_CHECK_N),
    S_DOUBLE(damping, damping, .check = MSG_CHECK_NONNEG),
    S_U32(layer, layer, S_RULE),
    S_U32(factor, factor, S_RULE),
    S_FLOATS(packed, packed, S_RULE),
    S_U64(job_id, job_id, S_NONE),
    S_U64(factor_version, factor_version, S_NONE),
};
#undef T
#undef PB

#define T msg_job_result_t
#define PB Kfac__JobResult
static const msg_field_t s_job_result_rows[] = {
    S_ENUM(method, method, S_METHOD),
    S_U32(n, n, .check = MSG_CHECK_N),
    S_DOUBLE(damping, damping, .check = MSG_CHECK_NONNEG),
    S_DOUBLE(compute_ms, compute_ms, .check = MSG_CHECK_NONNEG),
    S_STRING(error, error, .check = MSG_CHECK_STRING),
    S_U32(layer, layer, S_RULE),
    S_U32(factor, factor, S_RULE),
    S_FLOATS(inverse, inverse, S_RULE),
    S_FLOATS(eigvecs, eigvecs, S_RULE),
    S_FLOATS(eigvals, eigvals, S_RULE),
    S_U64(job_id, job_id, S_NONE),
    S_U64(factor_version, factor_version, S_NONE),
};
#undef T
#undef PB

#define T msg_heartbeat_t
#define PB Kfac__Heartbeat
static const msg_field_t s_heartbeat_rows[] = {
    S_U64(mono_ns, mono_ns, S_NONE),
    S_U64(echo_ns, echo_ns, S_NONE),
};
#undef T
#undef PB

#define T msg_error_t
#define PB Kfac__Error
static const msg_field_t s_error_rows[] = {
    S_ENUM(code, code, .check = MSG_CHECK_ENUM, .enum_count = MSG_ERR_COUNT, .enum_noun = "error code"),
    S_STRING(text, text, .check = MSG_CHECK_STRING),
};
#undef T
#undef PB

static const msg_struct_t s_bodies[MSG_TYPE_COUNT] = {
    [MSG_HELLO] = S_BODY("hello", msg_hello_t, Kfac__Hello, kfac__hello__descriptor, s_hello_rows,
                         KFAC__ENVELOPE__BODY_HELLO, hello),
    [MSG_WELCOME] = S_BODY("welcome", msg_welcome_t, Kfac__Welcome, kfac__welcome__descriptor, s_welcome_rows,
                           KFAC__ENVELOPE__BODY_WELCOME, welcome),
    [MSG_REFUSE] = S_BODY("refuse", msg_text_t, Kfac__Refuse, kfac__refuse__descriptor, s_refuse_rows,
                          KFAC__ENVELOPE__BODY_REFUSE, refuse),
    [MSG_GET_PARAMS] = S_BODY("get_params", msg_get_params_t, Kfac__GetParams, kfac__get_params__descriptor,
                              s_get_params_rows, KFAC__ENVELOPE__BODY_GET_PARAMS, get_params),
    [MSG_PARAMS] = S_BODY("params", msg_params_t, Kfac__Params, kfac__params__descriptor, s_params_rows,
                          KFAC__ENVELOPE__BODY_PARAMS, params),
    [MSG_GRAD_PUSH] = S_BODY("grad_push", msg_grad_push_t, Kfac__GradPush, kfac__grad_push__descriptor,
                             s_grad_push_rows, KFAC__ENVELOPE__BODY_GRAD_PUSH, grad_push),
    [MSG_STATS_PUSH] = S_BODY("stats_push", msg_stats_push_t, Kfac__StatsPush, kfac__stats_push__descriptor,
                              s_stats_push_rows, KFAC__ENVELOPE__BODY_STATS_PUSH, stats_push),
    [MSG_JOB_REQUEST] = S_BODY("job_request", msg_job_request_t, Kfac__JobRequest, kfac__job_request__descriptor,
                               s_job_request_rows, KFAC__ENVELOPE__BODY_JOB_REQUEST, job_request),
    [MSG_JOB] = S_BODY("job", msg_job_t, Kfac__Job, kfac__job__descriptor, s_job_rows, KFAC__ENVELOPE__BODY_JOB,
                       job),
    [MSG_JOB_RESULT] = S_BODY("job_result", msg_job_result_t, Kfac__JobResult, kfac__job_result__descriptor,
                              s_job_result_rows, KFAC__ENVELOPE__BODY_JOB_RESULT, job_result),
    [MSG_HEARTBEAT] = S_BODY("heartbeat", msg_heartbeat_t, Kfac__Heartbeat, kfac__heartbeat__descriptor,
                             s_heartbeat_rows, KFAC__ENVELOPE__BODY_HEARTBEAT, heartbeat),
    [MSG_ERROR] = S_BODY("error", msg_error_t, Kfac__Error, kfac__error__descriptor, s_error_rows,
                         KFAC__ENVELOPE__BODY_ERROR, error),
    [MSG_BYE] = S_BODY("bye", msg_text_t, Kfac__Bye, kfac__bye__descriptor, s_bye_rows, KFAC__ENVELOPE__BODY_BYE,
                       bye),
    [MSG_SHUTDOWN] = S_BODY("shutdown", msg_text_t, Kfac__Shutdown, kfac__shutdown__descriptor, s_shutdown_rows,
                            KFAC__ENVELOPE__BODY_SHUTDOWN, shutdown),
};

const msg_struct_t *msg_fields_body(msg_type_t t) {
    if ((int)t <= MSG_NONE || (int)t >= MSG_TYPE_COUNT) return NULL;
    return &s_bodies[t];
}

msg_type_t msg_fields_type_of_case(int body_case) {
    /* The types are numbered as the cases less 9 (proto/msg.h); the search
     * is for a body whose case moved. */
    int guess = body_case - (KFAC__ENVELOPE__BODY_HELLO - MSG_HELLO);
    if (guess > MSG_NONE && guess < MSG_TYPE_COUNT && s_bodies[guess].body_case == body_case)
        return (msg_type_t)guess;
    for (int t = MSG_NONE + 1; t < MSG_TYPE_COUNT; t++)
        if (s_bodies[t].body_case == body_case) return (msg_type_t)t;
    return MSG_NONE;
}

/* ---- the tables against the wire ---------------------------------------- */

/* The protobuf-c type and repetition a row of this kind stands for. */
static int s_kind_matches(const msg_field_t *f, const ProtobufCFieldDescriptor *d) {
    int repeated = d->label == PROTOBUF_C_LABEL_REPEATED;
    switch (f->kind) {
    case MSG_FIELD_U32: return d->type == PROTOBUF_C_TYPE_UINT32 && !repeated;
    case MSG_FIELD_U64: return d->type == PROTOBUF_C_TYPE_UINT64 && !repeated;
    case MSG_FIELD_DOUBLE: return d->type == PROTOBUF_C_TYPE_DOUBLE && !repeated;
    case MSG_FIELD_BOOL: return d->type == PROTOBUF_C_TYPE_BOOL && !repeated;
    case MSG_FIELD_ENUM: return d->type == PROTOBUF_C_TYPE_ENUM && !repeated;
    case MSG_FIELD_STRING: return d->type == PROTOBUF_C_TYPE_STRING && !repeated;
    case MSG_FIELD_FLOATS: return d->type == PROTOBUF_C_TYPE_FLOAT && repeated && d->quantifier_offset == f->pb_n_off;
    case MSG_FIELD_U32S: return d->type == PROTOBUF_C_TYPE_UINT32 && repeated && d->quantifier_offset == f->pb_n_off;
    case MSG_FIELD_STRUCT:
        return d->type == PROTOBUF_C_TYPE_MESSAGE && !repeated && d->descriptor == f->sub->pb_descriptor;
    case MSG_FIELD_STRUCTS:
        return d->type == PROTOBUF_C_TYPE_MESSAGE && repeated && d->quantifier_offset == f->pb_n_off &&
               d->descriptor == f->sub->pb_descriptor;
    }
    return 0;
}

/* Table t against its protobuf-c descriptor, sub-messages included. */
static int s_check_table(const msg_struct_t *t, char *err, size_t err_len) {
    const ProtobufCMessageDescriptor *md = t->pb_descriptor;
    if (md->sizeof_message != t->pb_size) {
        snprintf(err, err_len, "%s: the table is not of %s", t->name, md->name);
        return -1;
    }
    for (unsigned i = 0; i < md->n_fields; i++) {
        const ProtobufCFieldDescriptor *d = &md->fields[i];
        const msg_field_t *row = NULL;
        for (size_t j = 0; j < t->n_fields; j++)
            if (strcmp(t->fields[j].name, d->name) == 0) {
                if (row) {
                    snprintf(err, err_len, "%s.%s: two rows", t->name, d->name);
                    return -1;
                }
                row = &t->fields[j];
            }
        if (!row) {
            snprintf(err, err_len, "%s.%s (field %u of %s): no row in proto/msg_fields.c", t->name, d->name, d->id,
                     md->name);
            return -1;
        }
        if (row->pb_off != d->offset || !s_kind_matches(row, d)) {
            snprintf(err, err_len, "%s.%s: the row's kind or place is not the wire field's", t->name, d->name);
            return -1;
        }
        if ((row->kind == MSG_FIELD_STRUCT || row->kind == MSG_FIELD_STRUCTS) &&
            s_check_table(row->sub, err, err_len) < 0)
            return -1;
    }
    if (md->n_fields != t->n_fields) { /* each wire field has its row: the rest are extra */
        snprintf(err, err_len, "%s (%s): the wire has %u fields, the table %zu rows", t->name, md->name,
                 md->n_fields, t->n_fields);
        return -1;
    }
    return 0;
}

int msg_fields_check(char *err, size_t err_len) {
    int n_bodies = 0;
    for (int t = MSG_NONE + 1; t < MSG_TYPE_COUNT; t++) {
        const msg_struct_t *b = &s_bodies[t];
        if (!b->pb_descriptor) {
            snprintf(err, err_len, "message type %d: no table", t);
            return -1;
        }
        if (s_check_table(b, err, err_len) < 0) return -1;
        if (msg_fields_type_of_case(b->body_case) != (msg_type_t)t) {
            snprintf(err, err_len, "%s: Envelope case %d belongs to another body", b->name, b->body_case);
            return -1;
        }
        n_bodies++;
    }
    /* every oneof member of the Envelope has a body */
    const ProtobufCMessageDescriptor *ed = &kfac__envelope__descriptor;
    for (unsigned i = 0; i < ed->n_fields; i++) {
        const ProtobufCFieldDescriptor *d = &ed->fields[i];
        if (!(d->flags & PROTOBUF_C_FIELD_FLAG_ONEOF)) continue;
        if (msg_fields_type_of_case((int)d->id) == MSG_NONE) {
            snprintf(err, err_len, "Envelope.%s (case %u): no body in proto/msg_fields.c", d->name, d->id);
            return -1;
        }
        n_bodies--;
    }
    if (n_bodies != 0) {
        snprintf(err, err_len, "the tables have %d bodies more than the Envelope", n_bodies);
        return -1;
    }
    return 0;
}
