/* proto/msg_fields.h — the field tables of the kfac messages (internal to
 * proto/). One row per field of every body and sub-message says how the
 * field of the C struct (proto/msg.h) maps to protobuf-c's generated struct
 * and what msg_validate() checks of it alone. proto/msg.c encodes, decodes
 * and frees by walking the rows; proto/msg_validate.c runs each row's check,
 * then the message's own rule for what involves several fields or the model
 * (lengths against n or the model, the statistics, factored gradients).
 *
 * Adding a field to a message: the field in proto/kfac.proto, the member in
 * proto/msg.h, and its row in proto/msg_fields.c (which also picks its
 * check); nothing else in proto/ changes unless the field joins a rule with
 * other fields.
 *
 * Offsets are byte offsets in the two structs; proto/msg_fields.c checks
 * every member's type at compile time. The tables are constant.
 */
#ifndef KFAC_MSG_FIELDS_H
#define KFAC_MSG_FIELDS_H

#include <stddef.h>
#include <stdint.h>

#include "proto/msg.h"

/* How a field is held; the C type first, protobuf-c's after "<->". */
typedef enum {
    MSG_FIELD_U32,     /* uint32_t <-> uint32_t */
    MSG_FIELD_U64,     /* uint64_t <-> uint64_t */
    MSG_FIELD_DOUBLE,  /* double <-> double */
    MSG_FIELD_BOOL,    /* int (0 or 1) <-> protobuf_c_boolean */
    MSG_FIELD_ENUM,    /* a msg_*_t enum <-> the wire enum, both int-sized, same values */
    MSG_FIELD_STRING,  /* char * (NULL encodes as "", decode always allocates) <-> char * */
    MSG_FIELD_FLOATS,  /* float * + size_t count <-> the same; decode moves the array */
    MSG_FIELD_U32S,    /* uint32_t * + size_t count <-> the same; decode moves the array */
    MSG_FIELD_STRUCT,  /* an embedded struct <-> a sub-message pointer (NULL: absent) */
    MSG_FIELD_STRUCTS, /* an array of structs + size_t count <-> repeated sub-message */
} msg_field_kind_t;

/* What msg_validate() checks of one field on its own, before the message's
 * rule. The error texts name the field: "<body>.<field> ...". */
typedef enum {
    MSG_CHECK_NONE,   /* any value */
    MSG_CHECK_RULE,   /* checked by the message's rule in proto/msg_validate.c */
    MSG_CHECK_FINITE, /* double: finite ("grad_push.loss is NaN") */
    MSG_CHECK_NONNEG, /* double: finite and >= 0 ("job.damping is negative (-0.001)") */
    MSG_CHECK_RANGE,  /* integer: >= min and, with limit_floats, <= max_floats */
    MSG_CHECK_N,      /* uint32 n: 1..max_n, named by the body ("job: n must be at least 1") */
    MSG_CHECK_ENUM,   /* 1 .. enum_count - 1 ("job.method: unknown inversion method 5") */
    MSG_CHECK_STRING, /* at most max_string bytes */
    MSG_CHECK_TEXT,   /* at most max_text bytes */
    MSG_CHECK_FLOATS, /* data present, at most max_floats, every float finite */
} msg_check_t;

/* Row flags. */
enum {
    MSG_FIELD_ZERO_IS_ONE = 1, /* U32: decode reads a wire 0 as 1 (factor.n_blocks) */
    MSG_FIELD_ALWAYS = 2,      /* STRUCT: encoded even when empty (stats_push.stats) */
};

typedef struct msg_struct msg_struct_t;

typedef struct msg_field {
    const char *name;            /* the wire name: "loss" */
    msg_field_kind_t kind;
    size_t off;                  /* in the C struct: the value, or an array's pointer */
    size_t n_off;                /* FLOATS, U32S, STRUCTS: the count beside it */
    size_t pb_off, pb_n_off;     /* the same in protobuf-c's struct */
    const msg_struct_t *sub;     /* STRUCT, STRUCTS: the sub-message's table */
    unsigned flags;              /* MSG_FIELD_ZERO_IS_ONE, MSG_FIELD_ALWAYS */
    msg_check_t check;
    uint32_t min;                /* RANGE: the least value (0 or 1) */
    int limit_floats;            /* RANGE: also at most lim->max_floats */
    int enum_count;              /* ENUM: valid values are 1 .. enum_count - 1 */
    const char *enum_noun;       /* ENUM: "inversion method" */
} msg_field_t;

/* One message: a body of the Envelope or a sub-message. */
struct msg_struct {
    const char *name;            /* the body's name in errors: "grad_push"; sub-messages: the wire name */
    size_t size, pb_size;        /* sizeof the C struct and protobuf-c's */
    const void *pb_descriptor;   /* its ProtobufCMessageDescriptor */
    const msg_field_t *fields;   /* (n_fields) in the order msg_validate() checks them */
    size_t n_fields;
    size_t empty_n_off;          /* a STRUCT's sub-message: absent when this count is 0 */
    int body_case;               /* bodies: the Envelope's oneof case */
    size_t env_off;              /* bodies: the Envelope's member that points at it */
};

/* The table of message type t's body; NULL for MSG_NONE and unknown types. */
const msg_struct_t *msg_fields_body(msg_type_t t);

/* The message type whose body is the Envelope's oneof case body_case, or
 * MSG_NONE when this build knows none. */
msg_type_t msg_fields_type_of_case(int body_case);

/* Every table against protobuf-c's descriptors of proto/kfac.proto: each
 * wire field has exactly one row, of a matching kind, at the right place
 * (sub-messages included), and every Envelope body has a table. Returns 0,
 * or -1 with what is missing in err: a field added to the .proto without
 * its row fails the unit test that calls this. */
int msg_fields_check(char *err, size_t err_len);

#endif
