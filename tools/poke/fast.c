/* tools/poke/fast.c — kfac-poke's fast worker (--member_kind fast-worker):
 * a gradient worker that computes nothing. It joins like kfac-worker
 * (Hello as a worker with --member_id, Welcome, GetParams once) and answers
 * each Params of a version it has not pushed yet at once with a GradPush of
 * a gradient it made once at Welcome, so that a cluster of such members
 * beside a real kfac-statsd and kfac-invertd steps as fast as kfac-ps and
 * the transport allow (bench/fast_members.sh). Never part of a run a user
 * starts: only kfac-poke makes one.
 *
 * The gradient: n_params draws of N(0, 1) x 1e-3 from --seed (finite, the
 * same norm every push, so kfac-ps's norm rules take it), its sign flipped
 * on odd versions so that the parameters oscillate instead of drifting;
 * n_examples is the run's [data] batch (from Welcome), loss 2.3, the
 * batch-norm state echoed from the Params. Gradients go dense (no factored
 * layers); statistics are never sent, so the run needs [kfac] stats =
 * async (a Params with want_stats is answered without them, and counted).
 *
 * Heartbeats as docs/protocol.md says: each of kfac-ps's is answered with
 * its mono_ns echoed, and one of its own goes out after 1 s without a
 * message sent. It stops on Shutdown (exit 0), on SIGTERM or SIGINT (Bye,
 * exit 0), after --count pushes (Bye, exit 0), on Refuse or after
 * --wait_ms without any message from kfac-ps (exit 1).
 *
 * Conventions: one thread, blocking ZeroMQ calls with a 100 ms poll (the
 * signal flag is read between them); float32 gradients in the model's
 * arena layout.
 */
#include "tools/poke/poke.h"

#include <errno.h>
#include <inttypes.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>
#include <zmq.h>

#include "common/base/clock.h"
#include "common/base/config.h"
#include "common/base/version.h"
#include "common/run/runcfg.h"

#define S_POLL_MS 100
#define S_OWN_HEARTBEAT_NS 1000000000ULL /* a heartbeat of its own after 1 s without sending */
#define S_PRINT_ERRORS 5                 /* Error replies printed (the rest counted) */

static volatile sig_atomic_t s_stop_signal;

static void s_on_signal(int sig) { s_stop_signal = sig; }

static void s_free_buf(void *data, void *hint) {
    (void)hint;
    free(data);
}

/* Encode m and hand the buffer to ZeroMQ without a copy. Returns 0 or -1. */
static int s_send(void *sock, const msg_t *m) {
    size_t len;
    uint8_t *buf = poke_encode(m, &len);
    zmq_msg_t zm;
    if (zmq_msg_init_data(&zm, buf, len, s_free_buf, NULL) != 0) {
        free(buf);
        return -1;
    }
    if (zmq_msg_send(&zm, sock, 0) < 0) {
        zmq_msg_close(&zm);
        return -1;
    }
    return 0;
}

/* The next decodable message within S_POLL_MS into *m (caller clears).
 * Returns 1, 0 when none came, -1 on an undecodable frame (dropped). */
static int s_recv(void *sock, msg_t *m) {
    zmq_pollitem_t it = {.socket = sock, .events = ZMQ_POLLIN};
    if (zmq_poll(&it, 1, S_POLL_MS) <= 0) return 0;
    zmq_msg_t zm;
    zmq_msg_init(&zm);
    if (zmq_msg_recv(&zm, sock, ZMQ_DONTWAIT) < 0) {
        zmq_msg_close(&zm);
        return 0;
    }
    char err[256];
    int rc = msg_decode(zmq_msg_data(&zm), zmq_msg_size(&zm), m, err, sizeof err);
    zmq_msg_close(&zm);
    if (rc < 0) {
        msg_clear(m);
        return -1;
    }
    return 1;
}

/* The run's [data] batch from Welcome's configuration text (1 when it
 * cannot be read: still a valid n_examples). */
static uint64_t s_batch_of(const char *config_text) {
    runcfg_t cfg;
    runcfg_init(&cfg);
    const config_spec_t *spec = runcfg_spec(RUNCFG_ROLE_WORKER);
    char err[512];
    uint64_t batch = 1;
    if (config_text && config_defaults(spec, &cfg, err, sizeof err) == 0 &&
        config_parse_text(spec, &cfg, config_text, "welcome", err, sizeof err) == 0 && cfg.batch > 0)
        batch = (uint64_t)cfg.batch;
    runcfg_release(&cfg);
    return batch;
}

int poke_fast_worker(void *sock, const poke_cfg_t *c, rng_t *r) {
    struct sigaction sa;
    memset(&sa, 0, sizeof sa);
    sa.sa_handler = s_on_signal;
    sigemptyset(&sa.sa_mask);
    sigaction(SIGTERM, &sa, NULL);
    sigaction(SIGINT, &sa, NULL);

    char host[64] = "poke";
    gethostname(host, sizeof host - 1);
    msg_t m;
    msg_init(&m, MSG_HELLO, MSG_ROLE_WORKER, (uint32_t)c->member_id);
    m.hello.build_id = KFAC_BUILD_ID;
    m.hello.host = c->host && c->host[0] ? c->host : host;
    m.hello.pid = (uint32_t)getpid();
    if (s_send(sock, &m) < 0) {
        printf("member %d: cannot send Hello: %s\n", c->member_id, zmq_strerror(errno));
        return 1;
    }
    uint64_t last_sent_ns = clock_now_ns(), last_heard_ns = last_sent_ns;
    uint32_t id = (uint32_t)c->member_id;
    uint64_t n_params = 0, n_state = 0, batch = 1;
    int welcomed = 0, status = 1, say_bye = 0;
    const char *why = "";
    float *g = NULL;
    uint64_t n_pushed = 0, first_v = 0, last_v = 0, n_errors = 0, n_want_stats = 0, n_stale = 0;
    int have_pushed = 0;
    float g_sign = 1.0f; /* the sign g holds now */
    for (;;) {
        if (s_stop_signal) {
            why = s_stop_signal == SIGTERM ? "SIGTERM" : "SIGINT";
            status = 0;
            say_bye = welcomed;
            break;
        }
        const uint64_t now = clock_now_ns();
        if (now - last_heard_ns >= (uint64_t)c->wait_ms * 1000000ULL) {
            why = welcomed ? "no word from kfac-ps" : "not welcomed";
            break;
        }
        if (welcomed && now - last_sent_ns >= S_OWN_HEARTBEAT_NS) {
            msg_init(&m, MSG_HEARTBEAT, MSG_ROLE_WORKER, id);
            m.heartbeat.mono_ns = now;
            if (s_send(sock, &m) == 0) last_sent_ns = now;
        }
        msg_t in;
        int rc = s_recv(sock, &in);
        if (rc == 0) continue;
        last_heard_ns = clock_now_ns();
        if (rc < 0) continue;
        if (in.type == MSG_SHUTDOWN) {
            why = "Shutdown";
            status = 0;
            msg_clear(&in);
            break;
        }
        if (in.type == MSG_REFUSE) {
            printf("member %d: refused: %s\n", c->member_id, in.refuse.text ? in.refuse.text : "");
            why = "Refuse";
            msg_clear(&in);
            break;
        }
        if (in.type == MSG_ERROR) {
            if (n_errors++ < S_PRINT_ERRORS)
                printf("member %d: error %s: %s\n", c->member_id, msg_error_code_name(in.error.code),
                       in.error.text ? in.error.text : "");
            msg_clear(&in);
            continue;
        }
        if (in.type == MSG_HEARTBEAT) {
            if (welcomed) {
                msg_init(&m, MSG_HEARTBEAT, MSG_ROLE_WORKER, id);
                m.heartbeat.mono_ns = clock_now_ns();
                m.heartbeat.echo_ns = in.heartbeat.mono_ns;
                if (s_send(sock, &m) == 0) last_sent_ns = m.heartbeat.mono_ns;
            }
            msg_clear(&in);
            continue;
        }
        if (in.type == MSG_WELCOME && !welcomed) {
            welcomed = 1;
            id = in.welcome.assigned_id;
            n_params = in.welcome.n_params;
            n_state = in.welcome.n_state;
            batch = s_batch_of(in.welcome.config_text);
            printf("member %d: welcomed as fast worker id %u, shard %u of %u, %" PRIu64 " parameters, batch %" PRIu64
                   "\n",
                   c->member_id, id, in.welcome.rank, in.welcome.n_ranks, n_params, batch);
            fflush(stdout);
            msg_clear(&in);
            g = malloc((n_params ? n_params : 1) * sizeof *g);
            if (!g) {
                why = "out of memory";
                break;
            }
            for (uint64_t j = 0; j < n_params; j++) g[j] = 1e-3f * (float)rng_normal(r);
            msg_init(&m, MSG_GET_PARAMS, MSG_ROLE_WORKER, id);
            m.get_params.min_version = 0;
            if (s_send(sock, &m) == 0) last_sent_ns = clock_now_ns();
            continue;
        }
        if (in.type != MSG_PARAMS || !welcomed) {
            msg_clear(&in);
            continue;
        }
        const uint64_t v = in.params.version;
        if (have_pushed && v <= last_v) { /* already pushed (a duplicate or an answer to a stale push) */
            n_stale++;
            msg_clear(&in);
            continue;
        }
        if (in.params.want_stats) n_want_stats++;
        if (in.params.n_params != n_params) {
            printf("member %d: Params of %zu floats, Welcome said %" PRIu64 "\n", c->member_id, in.params.n_params,
                   n_params);
            why = "mis-shaped Params";
            msg_clear(&in);
            break;
        }
        const float want = (v & 1) ? -1.0f : 1.0f; /* the stored gradient's sign follows the version's parity */
        if (want != g_sign) {
            for (uint64_t j = 0; j < n_params; j++) g[j] = -g[j];
            g_sign = want;
        }
        msg_init(&m, MSG_GRAD_PUSH, MSG_ROLE_WORKER, id);
        m.grad_push.version = v;
        m.grad_push.loss = 2.3;
        m.grad_push.n_examples = batch;
        m.grad_push.n_correct = 0;
        m.grad_push.grad = g;
        m.grad_push.n_grad = n_params;
        m.grad_push.state = n_state && in.params.n_state == n_state ? in.params.state : NULL; /* borrowed */
        m.grad_push.n_state = m.grad_push.state ? n_state : 0;
        m.grad_push.compute_ms = 0.0;
        rc = s_send(sock, &m);
        msg_clear(&in);
        if (rc < 0) {
            why = "cannot send";
            break;
        }
        last_sent_ns = clock_now_ns();
        if (!have_pushed) first_v = v;
        have_pushed = 1;
        last_v = v;
        if (++n_pushed >= (uint64_t)c->count) {
            why = "count reached";
            status = 0;
            say_bye = 1;
            break;
        }
    }
    if (say_bye) {
        /* the socket lingers 0 ms (kfac-poke.c): the Bye gets up to 2 s to
         * leave before it closes, or a busy host's I/O thread may not have
         * sent it and kfac-ps sees a closed connection instead */
        int linger = 2000;
        zmq_setsockopt(sock, ZMQ_LINGER, &linger, sizeof linger);
        msg_init(&m, MSG_BYE, MSG_ROLE_WORKER, id);
        m.bye.text = (char *)why; /* borrowed: encode only reads */
        s_send(sock, &m);
    }
    printf("member %d: fast worker: %" PRIu64 " gradients pushed (versions %" PRIu64 "-%" PRIu64 "), %" PRIu64
           " Params already pushed, %" PRIu64 " asked for statistics (none sent), %" PRIu64 " errors; stopped: %s\n",
           c->member_id, n_pushed, first_v, last_v, n_stale, n_want_stats, n_errors, why);
    fflush(stdout);
    free(g);
    return status;
}
