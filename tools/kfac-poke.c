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
 *   scaled    100 x the parameters it was sent (finite; the first push's norm
 *             is near the honest ones' early in a run)
 *   bias      -(--bias) x the parameters it was sent, every round, with
 *             n_examples = --bias_examples: a small push in the same
 *             direction each time, inside every norm bound ("a little is
 *             enough"); it pushes until Shutdown or --count rounds
 *   stall     asks for Params, then nothing at all: it only heartbeats, for --wait_ms
 *   hello     never even asks for Params: Hello, then heartbeats for --wait_ms
 *   alternate --count rounds: every other one it pushes a small gradient,
 *             the others it asks for Params and then only heartbeats for
 *             --wait_ms (a member that stalls, rejoins and stalls again)
 *   flood     asks for Params once and reads them, then sends --count more
 *             GetParams without reading a reply, heartbeats for --wait_ms
 *             and leaves (replies far larger than requests)
 *   stats     as a statistics worker: for the Params it gets, a StatsPush
 *             with n_examples = 1000000, then two with 1 example and
 *             identity factors (the second for the same version); then,
 *             each for a newer version, one whose full factors are
 *             indefinite (I + 2 (e0 e1^T + e1 e0^T)) and one of 1e6 x the
 *             identity; then versions 0, 1, ..., 4 back to back (a replay)
 *   gradstats small gradients, each with statistics nobody asked for: the
 *             last layer with a full factor, its factors indefinite with
 *             1e6 on the diagonal (F[0][1] = 2e6)
 *   rejoin    for the version it is sent, --count times: a small
 *             gradient, Bye, Hello again on the same socket, the same push
 *             (a member that leaves and comes back to push again)
 *   bnhuge    small gradients, with batch-norm running statistics of 3e38
 *             (finite, but two of them average to Inf)
 *   negvar    small gradients, with batch-norm running statistics of -1
 *             (a negative running variance)
 * or, as an inverse daemon (Hello with role invertd), answers --count jobs
 * with inverses it should not send:
 *   inv-indefinite  Cholesky form: symmetric, positive diagonal, indefinite
 *                   (I + 2 (e0 e1^T + e1 e0^T)); n = 1: the next kind
 *   inv-scaled      the true inverse of the job's factor times 1e6
 *   inv-other       the true inverse of another matrix (F + I, diagonal scaled)
 *   inv-fail        no inverse: a result that says the factor could not be
 *                   inverted, for every job
 *   inv-unknown     after one job, --count results for jobs never handed
 *                   out, back to back (each used to buy the next job's cut)
 *   inv-flip-top    the true damped inverse (Cholesky form) with its sign
 *                   flipped along the eigenvector of the factor's largest
 *                   eigenvalue: H - 2 / (v_q + d) q q^T, indefinite; blocks
 *                   of n < 64 are answered honestly
 *   inv-flip-random the same along one random eigenvector
 *   inv-flip-many   the same along 4 random eigenvectors
 * and stops early when kfac-ps shuts it out.
 * Not hostile: --member_kind fast-worker is a gradient worker that computes
 * nothing: it answers each new Params at once with a gradient it made once
 * (tools/poke/fast.c), until Shutdown, SIGTERM or --count pushes; with a
 * real kfac-statsd and kfac-invertd beside it a cluster steps at what
 * kfac-ps and the transport cost (bench/fast_members.sh; kfac-ps with
 * [ps] heldout_n = 0: a stored gradient pushed every round is a direction its
 * reference check may refuse, docs/security.md):
 *   kfac-poke --endpoint tcp://127.0.0.1:5555 --member_id 1 --member_kind fast-worker \
 *     --count 1000000 --wait_ms 60000
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
#include "tools/poke/poke.h"


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
      "what the member does: examples, huge, nan, scaled, bias, stall, hello, alternate, flood, stats, gradstats, rejoin, negvar, bnhuge, inv-indefinite, inv-scaled, inv-other, inv-fail, inv-unknown, inv-flip-top, inv-flip-random, inv-flip-many (hostile), or fast-worker (a gradient worker that computes nothing; see the header of tools/kfac-poke.c)"),
    O("bias", OPT_DOUBLE, bias, "0.02", 0, 1e6,
      "member_kind bias: each push is -bias x the parameters the member was sent"),
    O("bias_examples", OPT_INT, bias_examples, "64", 1, 65536,
      "member_kind bias: the examples each push claims (the honest batch gives it an equal share of the mean)"),
    O("host", OPT_STRING, host, "", 0, 4096,
      "the hostile member's host name in its Hello (\"\": this host's; any bytes: kfac-ps must log them safely)"),
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

uint8_t *poke_encode(const msg_t *m, size_t *len) {
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
    uint8_t *buf = poke_encode(&m, len);
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
        *buf = poke_encode(&m, len);
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
        *buf = poke_encode(&m, len);
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
        *buf = poke_encode(&m, len);
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
        *buf = poke_encode(&m, len);
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
    if (c.member_id >= 0)
        printf("kfac-poke: member %d (%s, --count %d) at %s, seed %" PRIu64 "\n", c.member_id, c.member_kind, c.count,
               c.endpoint, seed);
    else
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
        status = poke_member(sock, &c, &r);
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
        if (c.interval_ms > 0) poke_sleep_ms(c.interval_ms);
        poke_collect(sock, 0, &c, &t);
    }
    poke_collect(sock, c.wait_ms, &c, &t);
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
