/* proto/msg.h — the kfac wire messages as plain C structs, with encode,
 * decode and validation. protobuf-c types stay inside proto/msg.c and
 * proto/msg_fields.c (each message's field table, which drives encode,
 * decode and the per-field checks); daemons see only what is declared here. The wire format is proto/kfac.proto and
 * docs/protocol.md describes every message.
 *
 * Conventions
 *   - Tensors are float32. Symmetric matrices are packed upper triangles in
 *     row-major order: element (i, j), i <= j, of an n x n matrix sits at
 *     i*n - i*(i-1)/2 + (j - i), n(n+1)/2 floats in all (LAPACK packed
 *     layout for LAPACK_ROW_MAJOR, uplo 'U'). Dense matrices are row-major.
 *   - Every float array is a pointer plus a count (`float *x; size_t n_x;`).
 *     A count of 0 means "absent"; the pointer is then ignored by encode.
 *   - Strings are NUL-terminated; NULL encodes as "".
 *
 * Ownership
 *   - A msg_t filled by msg_decode() owns every pointer in it (malloc'd
 *     copies); msg_clear() frees them all with free(). To keep an array
 *     without a copy, take the pointer and set the field to NULL (and its
 *     count to 0) before msg_clear(): e.g.
 *         float *g = m.grad_push.grad; m.grad_push.grad = NULL;
 *     The array is then the caller's, to free() when done.
 *   - A msg_t the caller fills for msg_encode() may point at borrowed memory
 *     (model arrays, static strings): msg_encode() only reads it. Do not call
 *     msg_clear() on such a message.
 *
 * Validation
 *   protobuf-c checks the wire syntax only. msg_validate() checks everything
 *   else: the protocol version, that the role may send this message type,
 *   array lengths against the sizes written next to them and against the
 *   model, matrix sizes against limits, every float for NaN/Inf (the message
 *   names the field and index), and string lengths. Every message from the
 *   network goes through msg_decode() then msg_validate() before it is used.
 *
 * Thread safety: all functions are reentrant; a msg_t belongs to one thread.
 */
#ifndef KFAC_MSG_H
#define KFAC_MSG_H

#include <stddef.h>
#include <stdint.h>

/* Bump on any change of a body's meaning. Peers with different versions
 * refuse each other at Hello. */
#define KFAC_PROTOCOL_VERSION 1

/* Message types. The values equal the Envelope body field numbers minus 9
 * and never change meaning within a protocol version. */
typedef enum {
    MSG_NONE = 0,        /* no (known) body; only seen from msg_decode() errors */
    MSG_HELLO = 1,       /* client -> PS */
    MSG_WELCOME = 2,     /* PS -> client */
    MSG_REFUSE = 3,      /* PS -> client */
    MSG_GET_PARAMS = 4,  /* client -> PS */
    MSG_PARAMS = 5,      /* PS -> client */
    MSG_GRAD_PUSH = 6,   /* worker -> PS */
    MSG_STATS_PUSH = 7,  /* statsd -> PS */
    MSG_JOB_REQUEST = 8, /* invertd -> PS */
    MSG_JOB = 9,         /* PS -> invertd */
    MSG_JOB_RESULT = 10, /* invertd -> PS */
    MSG_HEARTBEAT = 11,  /* either direction */
    MSG_ERROR = 12,      /* either direction */
    MSG_BYE = 13,        /* client -> PS */
    MSG_SHUTDOWN = 14,   /* PS -> client */
    MSG_TYPE_COUNT
} msg_type_t;

typedef enum {
    MSG_ROLE_NONE = 0,
    MSG_ROLE_PS = 1,
    MSG_ROLE_WORKER = 2,
    MSG_ROLE_STATSD = 3,
    MSG_ROLE_INVERTD = 4,
    MSG_ROLE_TOOL = 5,
    MSG_ROLE_COUNT
} msg_role_t;

typedef enum {
    MSG_FACTOR_NONE = 0,
    MSG_FACTOR_A = 1,      /* fc/conv input factor */
    MSG_FACTOR_G = 2,      /* fc/conv output-gradient factor */
    MSG_FACTOR_K = 3,      /* doubly factored fc */
    MSG_FACTOR_PSI = 4,    /* doubly factored fc */
    MSG_FACTOR_G_BIAS = 5, /* doubly factored fc: bias block */
    MSG_FACTOR_BN = 6,     /* batch norm: n = 2, n_blocks = channels */
    MSG_FACTOR_COUNT
} msg_factor_kind_t;

typedef enum {
    MSG_METHOD_NONE = 0,
    MSG_METHOD_CHOLESKY = 1, /* result: packed (F + damping I)^-1 */
    MSG_METHOD_EIGEN = 2,    /* result: eigenvectors + eigenvalues of F */
    MSG_METHOD_COUNT
} msg_method_t;

typedef enum {
    MSG_ERR_NONE = 0,
    MSG_ERR_BAD_MESSAGE = 1, /* not an Envelope, or no known body */
    MSG_ERR_VERSION = 2,     /* protocol version mismatch */
    MSG_ERR_INVALID = 3,     /* failed msg_validate() */
    MSG_ERR_NOT_WELCOMED = 4,/* request before a successful Hello */
    MSG_ERR_UNEXPECTED = 5,  /* not allowed for this role / state */
    MSG_ERR_STALE = 6,       /* unknown job, version gone */
    MSG_ERR_INTERNAL = 7,    /* receiver failed; may retry */
    MSG_ERR_COUNT
} msg_error_code_t;

/* One symmetric matrix, or n_blocks equal-sized symmetric blocks on a
 * diagonal. data: n_blocks packed upper triangles, block after block,
 * n_data == n_blocks * n(n+1)/2. */
typedef struct msg_factor {
    msg_factor_kind_t kind;
    uint32_t n;          /* block dimension */
    uint32_t n_blocks;   /* >= 1 (decode turns a wire 0 into 1) */
    float *data;         /* (n_data) */
    size_t n_data;
} msg_factor_t;

/* The factor statistics of one layer, in its fixed order:
 * fc/conv: A, G; doubly: K, PSI, G, G_BIAS; batch norm: BN. */
typedef struct msg_layer_stats {
    uint32_t layer;          /* layer index in the model */
    msg_factor_t *factors;   /* (n_factors) */
    size_t n_factors;
} msg_layer_stats_t;

/* Statistics of one mini-batch; n_layers == 0 means "none". */
typedef struct msg_stats {
    msg_layer_stats_t *layers; /* (n_layers) */
    size_t n_layers;
} msg_stats_t;

typedef struct msg_hello {
    char *build_id;   /* "kfac 0.1 (git abc123)" */
    char *host;
    uint32_t pid;
} msg_hello_t;

typedef struct msg_welcome {
    char *model_text;         /* the model description, verbatim */
    char *config_text;        /* INI text the client parses with config_parse_text() */
    uint64_t params_version;  /* PS's current t */
    uint64_t n_params;
    uint64_t n_state;
    uint32_t rank;            /* worker: shard; statsd: index */
    uint32_t n_ranks;         /* 0 when not relevant */
    uint32_t assigned_id;     /* the sender_id to use from now on */
} msg_welcome_t;

typedef struct msg_text {
    char *text;               /* Refuse: reason; Bye/Shutdown: reason */
} msg_text_t;

typedef struct msg_get_params {
    uint64_t min_version;     /* answer once version >= min_version */
} msg_get_params_t;

typedef struct msg_params {
    uint64_t version;
    float *params;            /* (n_params) flat arena in the model's layout */
    size_t n_params;
    float *state;             /* (n_state) batch-norm running stats, or none */
    size_t n_state;
    int want_stats;           /* worker: send statistics with the next GradPush */
    uint32_t *stats_layers;   /* (n_stats_layers) layers wanted, strictly increasing; none: all */
    size_t n_stats_layers;
} msg_params_t;

/* One fc layer's weight gradient as dW = D^T X (proto FactoredGrad). */
typedef struct msg_lowrank {
    uint32_t layer;           /* an fc layer of the model */
    uint32_t n_rows;          /* 1 .. the sender's batch (msg_limits.max_rows) */
    float *d;                 /* (n_rows, out) */
    size_t n_d;
    float *x;                 /* (n_rows, in) */
    size_t n_x;
} msg_lowrank_t;

typedef struct msg_grad_push {
    uint64_t version;         /* params version the gradient was taken at */
    double loss;              /* mean loss over the batch */
    uint64_t n_examples;
    uint64_t n_correct;
    float *grad;              /* (n_grad) mean gradient, n_grad == n_params less the weights of
                                 the layers in lowrank (left out, arena order kept) */
    size_t n_grad;
    float *state;             /* (n_state) the worker's bn running stats, or none */
    size_t n_state;
    msg_stats_t stats;        /* optional (n_layers == 0: none) */
    double compute_ms;
    msg_lowrank_t *lowrank;   /* (n_lowrank) fc weight gradients in factored form, strictly
                                 increasing layers; none: grad is the whole arena */
    size_t n_lowrank;
} msg_grad_push_t;

typedef struct msg_stats_push {
    uint64_t params_version;  /* params the statistics were computed with */
    uint64_t n_examples;
    msg_stats_t stats;
    double compute_ms;
} msg_stats_push_t;

typedef struct msg_job_request {
    uint32_t max_n;           /* largest n accepted; 0 = any */
} msg_job_request_t;

typedef struct msg_job {
    uint64_t job_id;
    uint32_t layer;
    uint32_t factor;          /* index in the layer's factor order */
    uint64_t factor_version;  /* PS version the running factor was taken at */
    msg_method_t method;
    double damping;           /* cholesky: added to the diagonal */
    uint32_t n;
    float *packed;            /* (n_packed) = n(n+1)/2 packed upper of F */
    size_t n_packed;
} msg_job_t;

typedef struct msg_job_result {
    uint64_t job_id;
    uint32_t layer;
    uint32_t factor;
    uint64_t factor_version;
    msg_method_t method;
    uint32_t n;
    double damping;           /* damping actually used */
    double compute_ms;
    float *inverse;           /* cholesky: (n(n+1)/2) packed upper of (F + damping I)^-1 */
    size_t n_inverse;
    float *eigvecs;           /* eigen: (n, n) row-major; column j pairs with eigvals[j] */
    size_t n_eigvecs;
    float *eigvals;           /* eigen: (n) ascending */
    size_t n_eigvals;
    char *error;              /* non-empty: the job failed and no arrays are sent */
} msg_job_result_t;

typedef struct msg_heartbeat {
    uint64_t mono_ns;         /* sender's monotonic clock (uv_hrtime()) */
    uint64_t echo_ns;         /* mono_ns of the heartbeat answered, or 0 */
} msg_heartbeat_t;

typedef struct msg_error {
    msg_error_code_t code;
    char *text;
} msg_error_t;

/* One message: the envelope header and the body selected by `type`. */
typedef struct msg {
    msg_type_t type;
    uint32_t protocol_version;   /* KFAC_PROTOCOL_VERSION when we send */
    msg_role_t role;             /* sender's role */
    uint32_t sender_id;
    union {
        msg_hello_t hello;
        msg_welcome_t welcome;
        msg_text_t refuse;
        msg_get_params_t get_params;
        msg_params_t params;
        msg_grad_push_t grad_push;
        msg_stats_push_t stats_push;
        msg_job_request_t job_request;
        msg_job_t job;
        msg_job_result_t job_result;
        msg_heartbeat_t heartbeat;
        msg_error_t error;
        msg_text_t bye;
        msg_text_t shutdown;
    };
} msg_t;

/* What the model looks like, for msg_validate(): the expected factor list
 * of every layer (n_factors == 0: the layer has no statistics). */
#define MSG_MAX_FACTORS 8
typedef struct msg_layer_shape {
    uint32_t n_factors;
    msg_factor_kind_t kind[MSG_MAX_FACTORS];
    uint32_t n[MSG_MAX_FACTORS];
    uint32_t n_blocks[MSG_MAX_FACTORS];
    uint32_t fc_out, fc_in;   /* fc layers: the weight's shape (a GradPush may send it factored); else 0 */
} msg_layer_shape_t;

typedef struct msg_model_shape {
    uint64_t n_params;                /* grad / params arrays must have exactly this */
    uint64_t n_state;                 /* state arrays: exactly this, or empty */
    uint32_t n_layers;
    const msg_layer_shape_t *layers;  /* (n_layers) borrowed */
} msg_model_shape_t;

/* Bounds msg_validate() enforces. Fill with msg_limits_default() and adjust. */
typedef struct msg_limits {
    uint32_t max_n;           /* largest factor / job dimension n */
    uint64_t max_floats;      /* longest float array of any kind */
    uint32_t max_layers;      /* layer indices must be < max_layers */
    uint32_t max_factors;     /* factors per layer, <= MSG_MAX_FACTORS */
    size_t max_string;        /* bytes in a short string (build_id, reason, error text) */
    size_t max_text;          /* bytes in model_text / config_text */
    const msg_model_shape_t *model; /* borrowed; NULL: no model-shape checks */
    uint32_t max_rows;        /* rows of a factored gradient (the batch a worker may use); 0: none accepted */
    int grad_finite_later;    /* 1: GradPush.grad's floats are not scanned for NaN/Inf here (its length still
                                 is): the receiver checks them in a pass it makes anyway (kfac-ps: the
                                 gradient's norm in double, finite exactly when every float is) and names
                                 the first bad one with msg_first_nonfinite() */
} msg_limits_t;

/* Defaults: max_n 16384, max_floats 2^28, max_layers 4096, max_factors
 * MSG_MAX_FACTORS, max_string 4096, max_text 1 MiB, model NULL, max_rows 0, grad_finite_later 0
 * (a GradPush with factored layers is refused: a receiver that takes them
 * sets the batch it allows, and a model: the layers' shapes). */
void msg_limits_default(msg_limits_t *lim);

/* Index of the first NaN or Inf of x[0..n), or n when every float is
 * finite: the index msg_validate() names. */
size_t msg_first_nonfinite(const float *x, size_t n);

/* An upper bound on the encoded size of any message that passes
 * msg_validate() with these limits, for ZMQ_MAXMSGSIZE. With lim->model set
 * the bound uses the model's sizes (params, state, every factor, the largest
 * factor as a job); without a model it uses the limits alone and is huge.
 * Saturates at INT64_MAX. */
int64_t msg_limits_max_bytes(const msg_limits_t *lim);

/* Zero *m and set type, protocol_version = KFAC_PROTOCOL_VERSION, role and
 * sender_id. */
void msg_init(msg_t *m, msg_type_t type, msg_role_t role, uint32_t sender_id);

/* Serialize m into a new malloc'd buffer (*buf, *len); the caller frees it
 * (or hands it to zloop_send_take()). m is only read. Float arrays are
 * copied with one memcpy each (little-endian hosts).
 * Returns 0, -EINVAL (unknown type, or a NULL array/factor list with a
 * non-zero count) or -ENOMEM. Does not validate the contents. */
int msg_encode(const msg_t *m, uint8_t **buf, size_t *len);

/* As msg_encode, into the caller's buf of cap bytes (borrowed; nothing is
 * allocated but the encoder's small bookkeeping): a buffer kept and refilled
 * for every version of a large message. *len receives the encoded size.
 * Returns 0, -ENOSPC when cap is too small (*len then holds the size
 * needed; buf is not written), or an error of msg_encode. */
int msg_encode_to(const msg_t *m, uint8_t *buf, size_t cap, size_t *len);

/* Parse len bytes into *out, which then owns copies of everything (see
 * Ownership above); the input buffer is only read.
 * Returns 0; -EBADMSG when the bytes are not an Envelope (out is zeroed);
 * -EPROTO when the Envelope has no body this build knows (out->type is
 * MSG_NONE, but out->protocol_version, role and sender_id are filled so the
 * receiver can answer with Refuse or Error); -ENOMEM. On error a one-line
 * reason goes to err (err_len bytes, may be 0). A decoded message still
 * needs msg_validate(). Call msg_clear(out) in every case. */
int msg_decode(const uint8_t *buf, size_t len, msg_t *out, char *err, size_t err_len);

/* Free everything a decoded message owns (NULL pointers are skipped) and
 * zero it. NULL m is a no-op. */
void msg_clear(msg_t *m);

/* Move a decoded message: dst (overwritten, not freed) takes everything src
 * owns, src is left zeroed (msg_clear on it frees nothing). For a handler
 * that hands a message to another thread. */
void msg_take(msg_t *dst, msg_t *src);

/* Check m against the protocol and lim (see Validation above). Returns 0, or
 * -EPROTO for a protocol version mismatch, -EINVAL for anything else, with a
 * message naming the field: "grad_push.grad[17] is NaN",
 * "stats_push.stats.layers[0].factors[1]: n=5 n_blocks=1 needs 15 floats,
 * got 14". */
int msg_validate(const msg_t *m, const msg_limits_t *lim, char *err, size_t err_len);

/* 1 when a message of type t may be sent by role r (PS: Welcome, Refuse,
 * Params, Job, Heartbeat, Error, Shutdown; clients: Hello, Heartbeat, Error,
 * Bye, plus worker: GetParams, GradPush; statsd: GetParams, StatsPush;
 * invertd: JobRequest, JobResult; tool: GetParams). */
int msg_role_may_send(msg_role_t r, msg_type_t t);

/* Names for logs and messages: "grad_push", "worker", "cholesky", "G",
 * "invalid". Never NULL ("?" when out of range). */
const char *msg_type_name(msg_type_t t);
const char *msg_role_name(msg_role_t r);
const char *msg_method_name(msg_method_t m);
const char *msg_factor_kind_name(msg_factor_kind_t k);
const char *msg_error_code_name(msg_error_code_t c);

/* The daemon that plays role r: "kfac-worker". */
const char *msg_role_program(msg_role_t r);

/* The Refuse reason for a client speaking another protocol version, telling
 * the operator which side to upgrade: "protocol version 2 does not match the
 * server's 1; upgrade kfac-ps". Writes at most len bytes (NUL included). */
void msg_version_refusal(char *buf, size_t len, uint32_t client_version, msg_role_t client_role);

/* Number of floats in a packed upper triangle of an n x n matrix. */
static inline uint64_t msg_packed_len(uint64_t n) { return n * (n + 1) / 2; }

/* Index of (i, j), i <= j < n, in the packed upper triangle. */
static inline size_t msg_packed_index(size_t n, size_t i, size_t j) {
    return i * n - i * (i - 1) / 2 + (j - i);
}

#endif
