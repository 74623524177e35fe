/* tools/kfac-poke.c — send malformed and hostile frames to a kfac-ps and
 * print what comes back: a robustness probe for the parameter server (and
 * the integration test that trains while being poked).
 *
 *   kfac-poke --endpoint tcp://127.0.0.1:5555 --count 200
 *   kfac-poke --endpoint tcp://127.0.0.1:5555 --kinds random,version,nan --print 50
 *
 * It holds one DEALER (like every client) and never says a valid Hello, so it
 * never joins the run. Frame kinds, sent round-robin (--kinds all):
 *   random       random bytes (0..2047 of them)
 *   truncated    a valid GradPush envelope cut short
 *   version      a Hello speaking protocol version 99      -> Refuse expected
 *   body         an Envelope whose body field is unknown    -> Error expected
 *   role         a Params message claiming to come from a worker
 *   unwelcomed   a GradPush from a peer that never said Hello
 *   nan          a GradPush whose gradient holds NaN and Inf
 *   shape        a StatsPush whose factor data do not match n
 *   job          a JobResult for a job that does not exist, with NaN data
 *   empty        a zero-length frame
 *   multipart    a message of two frames (dropped by the PS, no reply)
 *   oversize     --oversize-bytes of random data (ZeroMQ drops the connection)
 *   large        a GradPush of random floats, --large_bytes long in all, from a
 *                peer that never said Hello: decoded whole, then refused
 *                (Error NOT_WELCOMED). With --large_bytes just under the PS's
 *                limit (it logs "largest message accepted: N bytes") this is
 *                the memory burst of tests/integration/62-memory-burst.sh:
 *                  kfac-poke --kinds large --large_bytes N --count 40 --replies 40
 * With --client_secret_key and --server_public_key it is a CURVE client
 * (an unlisted key is refused in the handshake: nothing is sent, and the
 * "handshakes:" line counts the refusals).
 * Every reply is decoded and, up to --print of them, printed one per line
 * ("reply 3: error INVALID: ..."); the last line sums up. After the last
 * frame it collects replies until 50 ms pass without one (the first may
 * take --wait_ms), or, with --replies N, until N have come in all (at most
 * --wait_ms): a PS that handles each large frame in more than 50 ms has
 * its later replies counted, not cut off. Exit: 0 done,
 * 1 nothing could be sent, 2 usage error.
 *
 * Hostile member (--member_id N >= 0): a gradient worker with a valid Hello
 * (member id N) that joins the run and then, for --count rounds, pushes
 * gradients of version t that it should not (--member_kind):
 *   examples  n_examples = 1000000 (more than any batch)
 *   huge      every value 3e38 (finite, far from any real gradient's norm)
 *   nan       NaN and Inf among the values
 *   stall     asks for Params, then nothing at all: it only heartbeats, for --wait_ms
 *   hello     never even asks for Params: Hello, then heartbeats for --wait_ms
 *   alternate --count rounds: every other one it pushes a small gradient,
 *             the others it asks for Params and then only heartbeats for
 *             --wait_ms (a member that stalls, rejoins and stalls again)
 *   flood     asks for Params once and reads them, then sends --count more
 *             GetParams without reading a reply, heartbeats for --wait_ms
 *             and leaves (replies far larger than requests)
 *   stats     as a statistics worker: for the Params it gets, a StatsPush
 *             with n_examples = 1000000, then two with 1 example and no
 *             factors (the second for the same version)
 *   negvar    small gradients, with batch-norm running statistics of -1
 *             (a negative running variance)
 * or, as an inverse daemon (Hello with role invertd), answers --count jobs
 * with inverses it should not send:
 *   inv-indefinite  Cholesky form: symmetric, positive diagonal, indefinite
 *                   (I + 2 (e0 e1^T + e1 e0^T)); n = 1: the next kind
 *   inv-scaled      the true inverse of the job's factor times 1e6
 *   inv-other       the true inverse of another matrix (F + I, diagonal scaled)
 * and stops early when kfac-ps shuts it out.
 * It waits for Welcome, Params and each answer at most --wait_ms, prints
 * what came back (errors one per line, up to --print), and exits 0 when it
 * was welcomed (1 when it was refused or nothing answered: the refusal text
 * is printed). 
 *
 * Conventions: plain blocking ZeroMQ calls with timeouts (a probe, not a
 * daemon); random choices from common/base/rng.h seeded by --seed (0: the clock).
 */
#include <errno.h>
#include <inttypes.h>
#include <math.h>
#include <stdbool.h>
#include <stddef.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>
#include <zmq.h>

#include "common/base/config.h"
#include "common/base/log.h"
#include "common/base/rng.h"
#include "common/kfac/kfac_inverse.h"
#include "common/kfac/kfac_linalg.h"
#include "common/kfac/kfac_stats.h"
#include "common/net/wire.h"
#include "common/nn/nn.h"
#include "common/base/version.h"
#include "common/net/auth_keys.h"
#include "proto/msg.h"

typedef struct poke_cfg {
    char *endpoint;
    int count;
    uint64_t seed;
    int wait_ms;
    int replies;
    int interval_ms;
    char *kinds;
    int print;
    int oversize_bytes;
    int large_bytes;
    int member_id;
    char *member_kind;
    char *client_secret_key, *client_public_key, *server_public_key; /* CURVE (docs/security.md) */
} poke_cfg_t;

#define O(key, type, field, def, lo, hi, help) CONFIG_OPT("poke", key, type, poke_cfg_t, field, def, lo, hi, help)
static const config_option_t s_opts[] = {
    O("endpoint", OPT_STRING, endpoint, "tcp://127.0.0.1:5555", 1, 256, "the kfac-ps endpoint to poke"),
    O("count", OPT_INT, count, "100", 1, 1000000, "frames to send"),
    O("seed", OPT_UINT64, seed, "0", 0, 0, "seed of the random frames (0: from the clock)"),
    O("wait_ms", OPT_INT, wait_ms, "1000", 0, 600000, "how long to collect replies after the last frame"),
    O("replies", OPT_INT, replies, "0", 0, 1000000,
      "replies expected: collect until that many came, for at most wait_ms after the last frame (0: until 50 ms "
      "pass without one, once the first came or wait_ms passed)"),
    O("interval_ms", OPT_INT, interval_ms, "0", 0, 60000, "pause between frames"),
    O("kinds", OPT_STRING, kinds, "all", 1, 512,
      "comma-separated frame kinds: random truncated version body role unwelcomed nan shape job empty multipart "
      "oversize large, or all (all but large)"),
    O("print", OPT_INT, print, "20", 0, 1000000, "replies printed one per line (the rest are only counted)"),
    O("oversize_bytes", OPT_INT, oversize_bytes, "33554432", 1, 1073741824, "size of an oversize frame"),
    O("large_bytes", OPT_INT, large_bytes, "1048576", 64, 1073741824,
      "size of a large frame (a whole GradPush; pick one just under the kfac-ps limit)"),
    O("member_id", OPT_INT, member_id, "-1", -1, 1000000,
      "join as a gradient worker with this member id and push hostile gradients (-1: only send frames)"),
    O("member_kind", OPT_STRING, member_kind, "examples", 1, 16,
      "what the hostile member does: examples, huge, nan, stall, hello, alternate, flood, stats, negvar, inv-indefinite, inv-scaled or inv-other (see the header of tools/kfac-poke.c)"),
    O("client_secret_key", OPT_STRING, client_secret_key, "", 0, 4096,
      "CURVE: this probe's secret key file (kfac-keygen); with server_public_key, poke a CURVE kfac-ps"),
    O("client_public_key", OPT_STRING, client_public_key, "", 0, 4096,
      "CURVE: this probe's public key file (optional; must match client_secret_key)"),
    O("server_public_key", OPT_STRING, server_public_key, "", 0, 4096, "CURVE: the kfac-ps public key file"),
};
static const char *const s_sections[] = {"poke", NULL};

typedef enum {
    K_RANDOM = 0, K_TRUNCATED, K_VERSION, K_BODY, K_ROLE, K_UNWELCOMED, K_NAN, K_SHAPE, K_JOB, K_EMPTY,
    K_MULTIPART, K_OVERSIZE, K_LARGE, K_COUNT
} kind_t;
static const char *const s_kind_names[K_COUNT] = {"random", "truncated", "version", "body", "role", "unwelcomed",
                                                  "nan", "shape", "job", "empty", "multipart", "oversize",
                                                  "large"};

/* Parse "all" or a comma list into on[]. Returns the number chosen or -1. */
static int s_parse_kinds(const char *text, bool *on) {
    memset(on, 0, K_COUNT * sizeof *on);
    if (strcmp(text, "all") == 0) {
        for (int k = 0; k < K_COUNT; k++) on[k] = k != K_LARGE; /* large: only when named (a memory burst) */
        return K_COUNT - 1;
    }
    int n = 0;
    const char *p = text;
    while (*p) {
        size_t len = strcspn(p, ",");
        int found = -1;
        for (int k = 0; k < K_COUNT; k++)
            if (strlen(s_kind_names[k]) == len && strncmp(p, s_kind_names[k], len) == 0) found = k;
        if (found < 0) {
            fprintf(stderr, "kfac-poke: unknown frame kind '%.*s' (see --help)\n", (int)len, p);
            return -1;
        }
        if (!on[found]) n++;
        on[found] = true;
        p += len;
        if (*p == ',') p++;
    }
    return n;
}

static void s_fill_random(rng_t *r, uint8_t *b, size_t n) {
    for (size_t i = 0; i < n; i++) b[i] = (uint8_t)rng_below(r, 256);
}

/* Encode m into a malloc'd buffer; exits on failure (a programming error). */
static uint8_t *s_encode(const msg_t *m, size_t *len) {
    uint8_t *buf = NULL;
    if (msg_encode(m, &buf, len) < 0) {
        fprintf(stderr, "kfac-poke: encoding a %s failed\n", msg_type_name(m->type));
        exit(1);
    }
    return buf;
}

/* A GradPush of n floats from a worker; poison: NaN and Inf inside. */
static uint8_t *s_grad_push(rng_t *r, size_t n, int poison, size_t *len) {
    float *g = malloc(n * sizeof *g);
    if (!g) exit(1);
    for (size_t i = 0; i < n; i++) g[i] = (float)rng_normal(r);
    if (poison) {
        g[rng_below(r, (uint32_t)n)] = NAN;
        g[rng_below(r, (uint32_t)n)] = INFINITY;
    }
    msg_t m;
    msg_init(&m, MSG_GRAD_PUSH, MSG_ROLE_WORKER, 1 + rng_below(r, 8));
    m.grad_push.version = rng_below(r, 1000);
    m.grad_push.loss = poison ? NAN : 2.3;
    m.grad_push.n_examples = 64;
    m.grad_push.grad = g;
    m.grad_push.n_grad = n;
    uint8_t *buf = s_encode(&m, len);
    free(g);
    return buf;
}

/* One frame of kind k: *buf (malloc'd) and *len (multipart: split in two by the caller). */
static void s_make(kind_t k, rng_t *r, const poke_cfg_t *c, uint8_t **buf, size_t *len) {
    msg_t m;
    switch (k) {
    case K_RANDOM:
        *len = rng_below(r, 2048);
        *buf = malloc(*len + 1);
        s_fill_random(r, *buf, *len);
        return;
    case K_TRUNCATED: {
        size_t full;
        uint8_t *b = s_grad_push(r, 1000, 0, &full);
        *len = 1 + rng_below(r, (uint32_t)(full - 1));
        *buf = b;
        return;
    }
    case K_VERSION:
        msg_init(&m, MSG_HELLO, MSG_ROLE_WORKER, 0);
        m.protocol_version = 99;
        m.hello.build_id = "kfac-poke";
        m.hello.host = "poke";
        *buf = s_encode(&m, len);
        return;
    case K_BODY: {
        /* protocol_version = 1, role = worker, then field 99 (length 1): no
         * body this protocol knows. */
        static const uint8_t b[] = {0x08, 0x01, 0x10, 0x02, 0x9a, 0x06, 0x01, 0x00};
        *len = sizeof b;
        *buf = malloc(sizeof b);
        memcpy(*buf, b, sizeof b);
        return;
    }
    case K_ROLE: {
        float p[4] = {1, 2, 3, 4};
        msg_init(&m, MSG_PARAMS, MSG_ROLE_WORKER, 1);
        m.params.version = 7;
        m.params.params = p;
        m.params.n_params = 4;
        *buf = s_encode(&m, len);
        return;
    }
    case K_UNWELCOMED:
        *buf = s_grad_push(r, 16, 0, len);
        return;
    case K_NAN:
        *buf = s_grad_push(r, 64, 1, len);
        return;
    case K_SHAPE: {
        float d[5] = {1, 0, 1, 0, 1};
        msg_factor_t f = {.kind = MSG_FACTOR_A, .n = 3, .n_blocks = 1, .data = d, .n_data = 5}; /* needs 6 */
        msg_layer_stats_t ls = {.layer = 1, .factors = &f, .n_factors = 1};
        msg_init(&m, MSG_STATS_PUSH, MSG_ROLE_STATSD, 1);
        m.stats_push.params_version = 1;
        m.stats_push.n_examples = 64;
        m.stats_push.stats.layers = &ls;
        m.stats_push.stats.n_layers = 1;
        *buf = s_encode(&m, len);
        return;
    }
    case K_JOB: {
        float inv[3] = {1, NAN, 1};
        msg_init(&m, MSG_JOB_RESULT, MSG_ROLE_INVERTD, 1);
        m.job_result.job_id = 1000000 + rng_below(r, 1000);
        m.job_result.layer = 1;
        m.job_result.n = 2;
        m.job_result.method = MSG_METHOD_CHOLESKY;
        m.job_result.inverse = inv;
        m.job_result.n_inverse = 3;
        *buf = s_encode(&m, len);
        return;
    }
    case K_EMPTY:
        *len = 0;
        *buf = malloc(1);
        return;
    case K_MULTIPART:
        *len = 16;
        *buf = malloc(16);
        s_fill_random(r, *buf, 16);
        return;
    case K_OVERSIZE:
        *len = (size_t)c->oversize_bytes;
        *buf = malloc(*len);
        if (*buf) s_fill_random(r, *buf, *len < 4096 ? *len : 4096); /* the rest: whatever malloc gave */
        if (*buf && *len > 4096) memset(*buf + 4096, 0x5a, *len - 4096);
        return;
    case K_LARGE: {
        /* as many floats as keep the encoded GradPush within large_bytes
         * (the envelope and the other fields take under 64 bytes) */
        size_t n = ((size_t)c->large_bytes - 64) / sizeof(float);
        *buf = s_grad_push(r, n ? n : 1, 0, len);
        return;
    }
    case K_COUNT:
        break;
    }
    *len = 0;
    *buf = malloc(1);
}

typedef struct tally {
    uint64_t n_replies;
    uint64_t by_type[MSG_TYPE_COUNT];
    uint64_t by_error[MSG_ERR_COUNT];
    uint64_t n_undecodable;
} tally_t;

static int64_t s_now_ms(void) {
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (int64_t)ts.tv_sec * 1000 + ts.tv_nsec / 1000000;
}

/* Read the replies that arrive within timeout_ms. With --replies N (and
 * timeout_ms > 0) until N have come in all or timeout_ms has passed: a PS
 * that is slow to handle large frames is waited for, not cut off. Without
 * it until 50 ms pass without a reply once the first came. */
static void s_collect(void *sock, int timeout_ms, const poke_cfg_t *c, tally_t *t) {
    zmq_pollitem_t it = {.socket = sock, .events = ZMQ_POLLIN};
    int counted = c->replies > 0 && timeout_ms > 0;
    int64_t deadline_ms = s_now_ms() + timeout_ms;
    for (;;) {
        if (counted) {
            int64_t left_ms = deadline_ms - s_now_ms();
            if (t->n_replies >= (uint64_t)c->replies || left_ms <= 0) return;
            timeout_ms = (int)left_ms;
        }
        int rc = zmq_poll(&it, 1, timeout_ms);
        if (rc < 0 && errno == EINTR) continue;
        if (rc <= 0) return;
        zmq_msg_t zm;
        zmq_msg_init(&zm);
        if (zmq_msg_recv(&zm, sock, ZMQ_DONTWAIT) < 0) {
            zmq_msg_close(&zm);
            continue;
        }
        msg_t m;
        char err[256];
        t->n_replies++;
        if (msg_decode(zmq_msg_data(&zm), zmq_msg_size(&zm), &m, err, sizeof err) < 0) {
            t->n_undecodable++;
            if (t->n_replies <= (uint64_t)c->print)
                printf("reply %" PRIu64 ": undecodable (%zu bytes): %s\n", t->n_replies, zmq_msg_size(&zm), err);
        } else {
            t->by_type[m.type]++;
            if (m.type == MSG_ERROR && m.error.code < MSG_ERR_COUNT) t->by_error[m.error.code]++;
            if (t->n_replies <= (uint64_t)c->print) {
                if (m.type == MSG_ERROR)
                    printf("reply %" PRIu64 ": error %s: %s\n", t->n_replies, msg_error_code_name(m.error.code),
                           m.error.text ? m.error.text : "");
                else if (m.type == MSG_REFUSE)
                    printf("reply %" PRIu64 ": refuse: %s\n", t->n_replies, m.refuse.text ? m.refuse.text : "");
                else
                    printf("reply %" PRIu64 ": %s\n", t->n_replies, msg_type_name(m.type));
            }
        }
        msg_clear(&m);
        zmq_msg_close(&zm);
        fflush(stdout);
        if (!counted) timeout_ms = timeout_ms < 50 ? timeout_ms : 50; /* drain what is there, then go on */
    }
}

static void s_sleep_ms(int ms) {
    struct timespec ts = {.tv_sec = ms / 1000, .tv_nsec = (long)(ms % 1000) * 1000000L};
    while (nanosleep(&ts, &ts) != 0 && errno == EINTR) {
    }
}

/* One message from the PS within timeout_ms into *m (decoded; caller
 * clears). Returns 0, or -1 when nothing (decodable) came. */
static int s_recv(void *sock, int timeout_ms, msg_t *m) {
    zmq_pollitem_t it = {.socket = sock, .events = ZMQ_POLLIN};
    int rc = zmq_poll(&it, 1, timeout_ms);
    if (rc <= 0) return -1;
    zmq_msg_t zm;
    zmq_msg_init(&zm);
    if (zmq_msg_recv(&zm, sock, ZMQ_DONTWAIT) < 0) {
        zmq_msg_close(&zm);
        return -1;
    }
    char err[256];
    rc = msg_decode(zmq_msg_data(&zm), zmq_msg_size(&zm), m, err, sizeof err);
    zmq_msg_close(&zm);
    if (rc < 0) {
        msg_clear(m);
        return -1;
    }
    return 0;
}

static int s_send_msg(void *sock, const msg_t *m) {
    size_t len;
    uint8_t *buf = s_encode(m, &len);
    int rc = zmq_send(sock, buf, len, 0);
    free(buf);
    return rc < 0 ? -1 : 0;
}

/* Wait (at most wait_ms, heartbeats meanwhile) for a message of type want;
 * errors and others are printed (up to --print) and counted in t. */
static msg_role_t g_member_role = MSG_ROLE_WORKER; /* the hostile member's role (its heartbeats) */

static int s_wait_for(void *sock, const poke_cfg_t *c, msg_type_t want, msg_t *out, tally_t *t) {
    struct timespec t0, now;
    clock_gettime(CLOCK_MONOTONIC, &t0);
    for (;;) {
        clock_gettime(CLOCK_MONOTONIC, &now);
        long el = (now.tv_sec - t0.tv_sec) * 1000 + (now.tv_nsec - t0.tv_nsec) / 1000000;
        if (el >= c->wait_ms) return -1;
        msg_t m;
        if (s_recv(sock, 200, &m) < 0) {
            msg_t hb;
            msg_init(&hb, MSG_HEARTBEAT, g_member_role, (uint32_t)c->member_id);
            s_send_msg(sock, &hb);
            continue;
        }
        t->n_replies++;
        t->by_type[m.type]++;
        if (m.type == MSG_ERROR && m.error.code < MSG_ERR_COUNT) t->by_error[m.error.code]++;
        if (m.type == want) {
            *out = m;
            return 0;
        }
        if ((m.type == MSG_ERROR || m.type == MSG_REFUSE || m.type == MSG_SHUTDOWN) &&
            t->n_replies <= (uint64_t)c->print)
            printf("reply %" PRIu64 ": %s: %s\n", t->n_replies,
                   m.type == MSG_ERROR ? msg_error_code_name(m.error.code) : msg_type_name(m.type),
                   m.type == MSG_ERROR ? (m.error.text ? m.error.text : "")
                   : m.type == MSG_REFUSE ? (m.refuse.text ? m.refuse.text : "")
                                          : (m.shutdown.text ? m.shutdown.text : ""));
        fflush(stdout);
        int stop = m.type == MSG_REFUSE || m.type == MSG_SHUTDOWN;
        msg_clear(&m);
        if (stop) return -2;
    }
}

/* The hostile inverse daemon (--member_kind inv-*): Hello as kfac-invertd,
 * then --count jobs answered with a wrong inverse. Returns the exit status. */
static int s_member_invertd(void *sock, const poke_cfg_t *c) {
    const char *kind = c->member_kind;
    tally_t t;
    memset(&t, 0, sizeof t);
    msg_t m, w;
    char host[64] = "poke";
    gethostname(host, sizeof host - 1);
    g_member_role = MSG_ROLE_INVERTD;
    msg_init(&m, MSG_HELLO, MSG_ROLE_INVERTD, (uint32_t)c->member_id);
    m.hello.build_id = KFAC_BUILD_ID;
    m.hello.host = host;
    m.hello.pid = (uint32_t)getpid();
    if (s_send_msg(sock, &m) < 0 || s_wait_for(sock, c, MSG_WELCOME, &w, &t) < 0) {
        printf("member %d: not welcomed\n", c->member_id);
        return 1;
    }
    printf("member %d: welcomed as inverse daemon id %u\n", c->member_id, w.welcome.assigned_id);
    fflush(stdout);
    msg_clear(&w);
    int answered = 0, shut = 0;
    for (int i = 0; i < c->count; i++) {
        msg_init(&m, MSG_JOB_REQUEST, MSG_ROLE_INVERTD, (uint32_t)c->member_id);
        m.job_request.max_n = 0;
        s_send_msg(sock, &m);
        msg_t job;
        int rc = s_wait_for(sock, c, MSG_JOB, &job, &t);
        if (rc == -2) { shut = 1; break; }
        if (rc < 0) break;
        const int n = (int)job.job.n;
        float *F = malloc((size_t)n * n * sizeof(float)), *H = calloc((size_t)n * n, sizeof(float));
        float *packed = malloc(kfac_linalg_packed_len(n) * sizeof(float));
        kfac_inverse_t *inv = kfac_inverse_new(n);
        if (!F || !H || !packed || !inv || kfac_linalg_unpack_upper(job.job.packed, n, F) != 0) {
            free(F); free(H); free(packed); kfac_inverse_free(&inv); msg_clear(&job);
            return 1;
        }
        if (strcmp(kind, "inv-indefinite") == 0 && n >= 2) {
            for (int a = 0; a < n; a++) H[(size_t)a * n + a] = 1.0f;
            H[1] = H[n] = 2.0f;
        } else {
            if (strcmp(kind, "inv-other") == 0)
                for (int a = 0; a < n; a++) F[(size_t)a * n + a] = 3.0f * F[(size_t)a * n + a] + 1.0f;
            if (kfac_inverse_compute(F, n, (float)job.job.damping, KFAC_INV_CHOLESKY, inv, NULL) == 0 &&
                inv->method == KFAC_INV_CHOLESKY)
                memcpy(H, inv->inv, (size_t)n * n * sizeof(float));
            else
                for (int a = 0; a < n; a++) H[(size_t)a * n + a] = 1.0f;
            if (strcmp(kind, "inv-other") != 0)
                for (size_t k = 0; k < (size_t)n * n; k++) H[k] *= 1e6f;
        }
        kfac_linalg_pack_upper(H, n, packed);
        msg_init(&m, MSG_JOB_RESULT, MSG_ROLE_INVERTD, (uint32_t)c->member_id);
        m.job_result.job_id = job.job.job_id;
        m.job_result.layer = job.job.layer;
        m.job_result.factor = job.job.factor;
        m.job_result.factor_version = job.job.factor_version;
        m.job_result.method = MSG_METHOD_CHOLESKY;
        m.job_result.n = (uint32_t)n;
        m.job_result.damping = job.job.damping;
        m.job_result.compute_ms = 1.0;
        m.job_result.inverse = packed;
        m.job_result.n_inverse = kfac_linalg_packed_len(n);
        if (s_send_msg(sock, &m) == 0) answered++;
        free(F); free(H); free(packed); kfac_inverse_free(&inv); msg_clear(&job);
    }
    if (!shut) { /* collect what comes back: an error per result, and the shutdown */
        msg_t x;
        if (s_wait_for(sock, c, MSG_NONE, &x, &t) == -2) shut = 1;
    }
    printf("member %d: %d jobs answered with %s inverses; errors INVALID %" PRIu64 "; %s\n", c->member_id, answered,
           kind, t.by_error[MSG_ERR_INVALID], shut ? "shut out by kfac-ps" : "not shut out");
    msg_init(&m, MSG_BYE, MSG_ROLE_INVERTD, (uint32_t)c->member_id);
    s_send_msg(sock, &m);
    return 0;
}

/* The hostile member (see the header comment). Returns the exit status. */
static int s_member(void *sock, const poke_cfg_t *c, rng_t *r) {
    const char *kind = c->member_kind;
    if (strcmp(kind, "inv-indefinite") == 0 || strcmp(kind, "inv-scaled") == 0 || strcmp(kind, "inv-other") == 0)
        return s_member_invertd(sock, c);
    if (strcmp(kind, "examples") && strcmp(kind, "huge") && strcmp(kind, "nan") && strcmp(kind, "stall") &&
        strcmp(kind, "hello") && strcmp(kind, "negvar") && strcmp(kind, "alternate") && strcmp(kind, "flood") && strcmp(kind, "stats")) {
        fprintf(stderr, "kfac-poke: --member_kind must be examples, huge, nan, stall, hello, alternate, flood, stats, "
                        "negvar, inv-indefinite, inv-scaled or inv-other, not '%s'\n", kind);
        return 2;
    }
    tally_t t;
    memset(&t, 0, sizeof t);
    msg_t m, w;
    char host[64] = "poke";
    gethostname(host, sizeof host - 1);
    const msg_role_t role = strcmp(kind, "stats") == 0 ? MSG_ROLE_STATSD : MSG_ROLE_WORKER;
    g_member_role = role;
    msg_init(&m, MSG_HELLO, role, (uint32_t)c->member_id);
    m.hello.build_id = KFAC_BUILD_ID;
    m.hello.host = host;
    m.hello.pid = (uint32_t)getpid();
    if (s_send_msg(sock, &m) < 0 || s_wait_for(sock, c, MSG_WELCOME, &w, &t) < 0) {
        printf("member %d: not welcomed\n", c->member_id);
        return 1;
    }
    uint64_t n_params = w.welcome.n_params, w_n_state = w.welcome.n_state;
    char *w_model = role == MSG_ROLE_STATSD ? strdup(w.welcome.model_text ? w.welcome.model_text : "") : NULL;
    printf("member %d: welcomed as id %u, shard %u of %u, %" PRIu64 " parameters\n", c->member_id,
           w.welcome.assigned_id, w.welcome.rank, w.welcome.n_ranks, n_params);
    fflush(stdout);
    msg_clear(&w);
    if (role == MSG_ROLE_STATSD) {
        msg_t pm;
        msg_init(&m, MSG_GET_PARAMS, role, (uint32_t)c->member_id);
        s_send_msg(sock, &m);
        if (!w_model || s_wait_for(sock, c, MSG_PARAMS, &pm, &t) < 0) {
            free(w_model);
            return 1;
        }
        const uint64_t v = pm.params.version;
        msg_clear(&pm);
        /* Well-shaped statistics of the run's model (from Welcome), every factor the identity: they pass the
         * message checks, so the PS's own bounds are what refuses them. */
        char err[512];
        net_t *net = net_parse(w_model, "welcome", 1, err, sizeof err);
        kfac_stats_t *ks = net ? kfac_stats_new(net) : NULL;
        float *packed = NULL;
        msg_stats_t ms;
        memset(&ms, 0, sizeof ms);
        if (!ks || wire_stats_want(ks, NULL, 0) < 0) {
            fprintf(stderr, "kfac-poke: cannot build the model's statistics: %s\n", net ? "kfac_stats_new" : err);
            kfac_stats_free(&ks);
            net_free(&net);
            free(w_model);
            return 1;
        }
        for (int j = 0; j < ks->n_layers; j++)
            for (int k = 0; k < ks->layers[j].n_factors; k++) {
                kfac_factor_t *f = &ks->layers[j].f[k];
                memset(f->data, 0, kfac_factor_len(f) * sizeof(float));
                if (f->kind == KFAC_FACTOR_SYM)
                    for (int a = 0; a < f->dim; a++) f->data[(size_t)a * f->dim + a] = 1.0f;
                else
                    for (int a = 0; a < f->dim; a++) f->data[3 * a] = f->data[3 * a + 2] = 1.0f;
                f->n_samples = 1;
                f->n_updates = 1;
            }
        if (wire_stats_to_msg(ks, &ms, &packed) < 0) {
            fprintf(stderr, "kfac-poke: cannot encode the statistics\n");
            kfac_stats_free(&ks);
            net_free(&net);
            free(w_model);
            return 1;
        }
        static const uint64_t examples[3] = {1000000, 1, 1};
        for (int i = 0; i < 3; i++) {
            msg_init(&m, MSG_STATS_PUSH, role, (uint32_t)c->member_id);
            m.stats_push.params_version = v;
            m.stats_push.n_examples = examples[i];
            m.stats_push.stats = ms;
            s_send_msg(sock, &m);
            msg_t x;
            if (s_wait_for(sock, c, MSG_PARAMS, &x, &t) == 0) msg_clear(&x); /* each push is answered with Params */
        }
        printf("member %d: 3 statistics pushes for version %" PRIu64 "; errors INVALID %" PRIu64 "\n", c->member_id,
               v, t.by_error[MSG_ERR_INVALID]);
        wire_stats_release(&ms, &packed);
        kfac_stats_free(&ks);
        net_free(&net);
        free(w_model);
        return 0;
    }
    if (strcmp(kind, "flood") == 0) {
        msg_t pm;
        msg_init(&m, MSG_GET_PARAMS, MSG_ROLE_WORKER, (uint32_t)c->member_id);
        s_send_msg(sock, &m);
        if (s_wait_for(sock, c, MSG_PARAMS, &pm, &t) < 0) return 1;
        msg_clear(&pm);
        int sent = 0;
        for (int i = 0; i < c->count; i++) {
            msg_init(&m, MSG_GET_PARAMS, MSG_ROLE_WORKER, (uint32_t)c->member_id);
            if (s_send_msg(sock, &m) == 0) sent++;
        }
        printf("member %d: %d GetParams sent, no reply read\n", c->member_id, sent);
        fflush(stdout);
        struct timespec ts = {c->wait_ms / 1000, (long)(c->wait_ms % 1000) * 1000000L};
        nanosleep(&ts, NULL); /* nothing read meanwhile: the replies pile up wherever they pile up */
        return 0;
    }
    if (strcmp(kind, "stall") == 0 || strcmp(kind, "hello") == 0) {
        msg_init(&m, MSG_GET_PARAMS, MSG_ROLE_WORKER, (uint32_t)c->member_id);
        if (strcmp(kind, "stall") == 0) s_send_msg(sock, &m);
        s_wait_for(sock, c, MSG_NONE, &w, &t); /* only heartbeats, for wait_ms */
        printf("member %d: %s, then only heartbeats for %d ms (%" PRIu64 " replies)\n", c->member_id,
               strcmp(kind, "stall") == 0 ? "asked for Params" : "said Hello", c->wait_ms, t.n_replies);
        return 0;
    }
    float *g = malloc((n_params ? n_params : 1) * sizeof *g);
    const uint64_t n_state = strcmp(kind, "negvar") == 0 ? w_n_state : 0;
    float *st = n_state ? malloc(n_state * sizeof *st) : NULL;
    if (!g || (n_state && !st)) {
        free(g);
        return 1;
    }
    for (uint64_t j = 0; j < n_state; j++) st[j] = -1.0f;
    msg_init(&m, MSG_GET_PARAMS, MSG_ROLE_WORKER, (uint32_t)c->member_id);
    s_send_msg(sock, &m);
    int pushed = 0, stalls = 0;
    const int alternate = strcmp(kind, "alternate") == 0;
    for (int i = 0; i < c->count; i++) {
        msg_t pm;
        if (alternate && i > 0) { /* it asks for the parameters each round */
            msg_init(&m, MSG_GET_PARAMS, MSG_ROLE_WORKER, (uint32_t)c->member_id);
            s_send_msg(sock, &m);
        }
        if (s_wait_for(sock, c, MSG_PARAMS, &pm, &t) < 0) break;
        uint64_t v = pm.params.version;
        msg_clear(&pm);
        if (alternate && i % 2 == 1) { /* this round: nothing but heartbeats */
            msg_t x;
            if (s_wait_for(sock, c, MSG_NONE, &x, &t) == -2) break;
            stalls++;
            continue;
        }
        for (uint64_t j = 0; j < n_params; j++) g[j] = strcmp(kind, "huge") == 0 ? 3e38f : 0.01f * (float)rng_normal(r);
        if (strcmp(kind, "nan") == 0 && n_params > 1) {
            g[rng_below(r, (uint32_t)n_params)] = NAN;
            g[rng_below(r, (uint32_t)n_params)] = INFINITY;
        }
        msg_init(&m, MSG_GRAD_PUSH, MSG_ROLE_WORKER, (uint32_t)c->member_id);
        m.grad_push.version = v;
        m.grad_push.loss = 2.3;
        m.grad_push.n_examples = strcmp(kind, "examples") == 0 ? 1000000 : 1;
        m.grad_push.grad = g;
        m.grad_push.n_grad = n_params;
        m.grad_push.state = st;
        m.grad_push.n_state = n_state;
        if (s_send_msg(sock, &m) == 0) pushed++;
    }
    free(g);
    free(st);
    printf("member %d: %d %s gradients pushed, %d rounds stalled; replies %" PRIu64 ", errors INVALID %" PRIu64 "\n",
           c->member_id, pushed, kind, stalls, t.n_replies, t.by_error[MSG_ERR_INVALID]);
    msg_init(&m, MSG_BYE, MSG_ROLE_WORKER, (uint32_t)c->member_id);
    s_send_msg(sock, &m);
    return 0;
}

/* ---- CURVE keys: make sock a CURVE client and watch its handshakes ---------- */

#define S_MONITOR_EP "inproc://kfac-poke-monitor"

/* With keys configured: set the CURVE options on sock and open a monitor of
 * its handshakes (*mon, a PAIR socket). Returns 0 (also without keys, *mon
 * NULL) or -1 after printing why. */
static int s_curve_setup(const poke_cfg_t *c, void *ctx, void *sock, void **mon) {
    *mon = NULL;
    if (!c->client_secret_key[0] && !c->server_public_key[0] && !c->client_public_key[0]) return 0;
    if (!c->client_secret_key[0] || !c->server_public_key[0]) {
        fprintf(stderr, "kfac-poke: CURVE needs both --client_secret_key and --server_public_key\n");
        return -1;
    }
    auth_key_t sec, pub, given, server;
    char err[1200];
    if (auth_key_read(c->client_secret_key, 1, &sec, err, sizeof err) < 0 ||
        auth_key_read(c->server_public_key, 0, &server, err, sizeof err) < 0 ||
        (c->client_public_key[0] && auth_key_read(c->client_public_key, 0, &given, err, sizeof err) < 0)) {
        fprintf(stderr, "kfac-poke: %s\n", err);
        return -1;
    }
    if (auth_key_public_of(&sec, &pub) < 0 ||
        (c->client_public_key[0] && memcmp(given.raw, pub.raw, AUTH_KEY_BYTES) != 0)) {
        fprintf(stderr, "kfac-poke: --client_public_key is not the public key of --client_secret_key\n");
        return -1;
    }
    if (zmq_setsockopt(sock, ZMQ_CURVE_SERVERKEY, server.raw, AUTH_KEY_BYTES) ||
        zmq_setsockopt(sock, ZMQ_CURVE_PUBLICKEY, pub.raw, AUTH_KEY_BYTES) ||
        zmq_setsockopt(sock, ZMQ_CURVE_SECRETKEY, sec.raw, AUTH_KEY_BYTES) ||
        zmq_socket_monitor(sock, S_MONITOR_EP, ZMQ_EVENT_HANDSHAKE_FAILED_AUTH | ZMQ_EVENT_HANDSHAKE_SUCCEEDED |
                                                   ZMQ_EVENT_HANDSHAKE_FAILED_PROTOCOL) ||
        !(*mon = zmq_socket(ctx, ZMQ_PAIR)) || zmq_connect(*mon, S_MONITOR_EP)) {
        fprintf(stderr, "kfac-poke: cannot set up CURVE: %s\n", zmq_strerror(errno));
        return -1;
    }
    int linger = 0;
    zmq_setsockopt(*mon, ZMQ_LINGER, &linger, sizeof linger);
    printf("kfac-poke: CURVE client, public key %s\n", pub.z85);
    return 0;
}

/* Count the handshake events waiting on mon: [0] refused (authentication),
 * [1] succeeded, [2] protocol errors. */
static void s_curve_events(void *mon, uint64_t *n) {
    for (int guard = 0; mon && guard < 100000; guard++) {
        zmq_msg_t ev, ep;
        zmq_msg_init(&ev);
        if (zmq_msg_recv(&ev, mon, ZMQ_DONTWAIT) < 0) {
            zmq_msg_close(&ev);
            return;
        }
        uint16_t id = 0;
        if (zmq_msg_size(&ev) >= 2) memcpy(&id, zmq_msg_data(&ev), 2); /* little-endian hosts */
        zmq_msg_close(&ev);
        zmq_msg_init(&ep);
        if (zmq_msg_recv(&ep, mon, ZMQ_DONTWAIT) >= 0) zmq_msg_close(&ep);
        else zmq_msg_close(&ep);
        if (id == ZMQ_EVENT_HANDSHAKE_FAILED_AUTH) n[0]++;
        else if (id == ZMQ_EVENT_HANDSHAKE_SUCCEEDED) n[1]++;
        else if (id == ZMQ_EVENT_HANDSHAKE_FAILED_PROTOCOL) n[2]++;
    }
}

int main(int argc, char **argv) {
    config_spec_t spec = {.program = "kfac-poke",
                          .summary = "send malformed frames to a kfac-ps and print its replies",
                          .opts = s_opts,
                          .n_opts = CONFIG_COUNT(s_opts),
                          .partial_sections = NULL,
                          .known_sections = s_sections};
    poke_cfg_t c;
    memset(&c, 0, sizeof c);
    char err[1024];
    int rc = config_load(&spec, &c, argc, argv, stdout, err, sizeof err);
    if (rc == CONFIG_HELP || rc == CONFIG_DUMP) {
        config_release(&spec, &c);
        return 0;
    }
    if (rc < 0) {
        fprintf(stderr, "kfac-poke: %s\n", err);
        config_release(&spec, &c);
        return 2;
    }
    bool on[K_COUNT];
    int n_kinds = s_parse_kinds(c.kinds, on);
    if (n_kinds <= 0) {
        config_release(&spec, &c);
        return 2;
    }
    log_init(LOG_LEVEL_WARN, "kfac-poke");
    uint64_t seed = c.seed ? c.seed : (uint64_t)time(NULL) ^ ((uint64_t)clock() << 20);
    rng_t r;
    rng_seed(&r, seed);
    printf("kfac-poke: %d frames to %s, seed %" PRIu64 "\n", c.count, c.endpoint, seed);

    int status = 0;
    void *ctx = zmq_ctx_new();
    void *sock = ctx ? zmq_socket(ctx, ZMQ_DEALER) : NULL;
    int linger = 0, one = 1, sndtimeo = 2000;
    void *mon = NULL;
    uint64_t hs[3] = {0, 0, 0};
    if (sock && s_curve_setup(&c, ctx, sock, &mon) < 0) {
        status = 2;
        goto done;
    }
    if (!sock || zmq_setsockopt(sock, ZMQ_LINGER, &linger, sizeof linger) ||
        zmq_setsockopt(sock, ZMQ_IMMEDIATE, &one, sizeof one) ||
        zmq_setsockopt(sock, ZMQ_SNDTIMEO, &sndtimeo, sizeof sndtimeo) || zmq_connect(sock, c.endpoint)) {
        fprintf(stderr, "kfac-poke: cannot connect to %s: %s\n", c.endpoint, zmq_strerror(errno));
        status = 1;
        goto done;
    }
    if (c.member_id >= 0) {
        status = s_member(sock, &c, &r);
        goto done;
    }
    int kinds[K_COUNT], nk = 0;
    for (int k = 0; k < K_COUNT; k++)
        if (on[k]) kinds[nk++] = k;
    uint64_t sent[K_COUNT] = {0}, failed = 0;
    tally_t t;
    memset(&t, 0, sizeof t);
    for (int i = 0; i < c.count; i++) {
        kind_t k = (kind_t)kinds[i % nk];
        uint8_t *buf = NULL;
        size_t len = 0;
        s_make(k, &r, &c, &buf, &len);
        if (!buf) {
            fprintf(stderr, "kfac-poke: out of memory for a %s frame\n", s_kind_names[k]);
            status = 1;
            goto done;
        }
        int ok;
        if (k == K_MULTIPART) {
            ok = zmq_send(sock, buf, len / 2, ZMQ_SNDMORE) >= 0 && zmq_send(sock, buf + len / 2, len - len / 2, 0) >= 0;
        } else {
            ok = zmq_send(sock, buf, len, 0) >= 0;
        }
        free(buf);
        if (ok) sent[k]++;
        else failed++;
        if (c.interval_ms > 0) s_sleep_ms(c.interval_ms);
        s_collect(sock, 0, &c, &t);
    }
    s_collect(sock, c.wait_ms, &c, &t);
    uint64_t total = 0;
    printf("sent:");
    for (int k = 0; k < K_COUNT; k++)
        if (sent[k]) {
            printf(" %s %" PRIu64, s_kind_names[k], sent[k]);
            total += sent[k];
        }
    printf(" (%" PRIu64 " frames, %" PRIu64 " could not be sent)\n", total, failed);
    printf("replies: %" PRIu64 " (", t.n_replies);
    const char *sep = "";
    for (int ty = 0; ty < MSG_TYPE_COUNT; ty++)
        if (t.by_type[ty]) {
            printf("%s%s %" PRIu64, sep, msg_type_name((msg_type_t)ty), t.by_type[ty]);
            sep = ", ";
        }
    for (int e = 0; e < MSG_ERR_COUNT; e++)
        if (t.by_error[e]) {
            printf("%serror %s %" PRIu64, sep, msg_error_code_name((msg_error_code_t)e), t.by_error[e]);
            sep = ", ";
        }
    if (t.n_undecodable) printf("%sundecodable %" PRIu64, sep, t.n_undecodable);
    printf(")\n");
    s_curve_events(mon, hs);
    if (mon)
        printf("handshakes: %" PRIu64 " refused by kfac-ps (authentication), %" PRIu64 " succeeded, %" PRIu64
               " failed (protocol)\n",
               hs[0], hs[1], hs[2]);
    if (total == 0) {
        fprintf(stderr, "kfac-poke: nothing could be sent to %s (%s)\n", c.endpoint,
                hs[0] ? "kfac-ps refused this key" : "is kfac-ps running there?");
        status = 1;
    }
done:
    if (mon) zmq_close(mon);
    if (sock) zmq_close(sock);
    if (ctx) zmq_ctx_term(ctx);
    config_release(&spec, &c);
    return status;
}
