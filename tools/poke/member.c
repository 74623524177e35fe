/* tools/poke/member.c — kfac-poke's replies (collecting and counting them,
 * waiting for one kind with heartbeats meanwhile) and its hostile members:
 * gradient workers, a statistics worker and inverse daemons that join with
 * a valid Hello and then send what they should not (the header of
 * tools/kfac-poke.c lists them). */
#include "tools/poke/poke.h"

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


static int64_t s_now_ms(void) {
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (int64_t)ts.tv_sec * 1000 + ts.tv_nsec / 1000000;
}

/* Read the replies that arrive within timeout_ms. With --replies N (and
 * timeout_ms > 0) until N have come in all or timeout_ms has passed: a PS
 * that is slow to handle large frames is waited for, not cut off. Without
 * it until 50 ms pass without a reply once the first came. */
void poke_collect(void *sock, int timeout_ms, const poke_cfg_t *c, tally_t *t) {
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

void poke_sleep_ms(int ms) {
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
    uint8_t *buf = poke_encode(m, &len);
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

/* Hello as a member of role (--host, else this host's name) and the
 * Welcome into *w. Returns 0, or -1 with "not welcomed" printed. */
static int s_hello(void *sock, const poke_cfg_t *c, msg_role_t role, msg_t *w, tally_t *t) {
    char host[64] = "poke";
    gethostname(host, sizeof host - 1);
    g_member_role = role;
    msg_t m;
    msg_init(&m, MSG_HELLO, role, (uint32_t)c->member_id);
    m.hello.build_id = KFAC_BUILD_ID;
    m.hello.host = c->host && c->host[0] ? c->host : host;
    m.hello.pid = (uint32_t)getpid();
    if (s_send_msg(sock, &m) < 0 || s_wait_for(sock, c, MSG_WELCOME, w, t) < 0) {
        printf("member %d: not welcomed\n", c->member_id);
        return -1;
    }
    return 0;
}

/* H (n x n, both triangles) -= 2 / (v_q + d) q q^T for eigenvector q
 * (column q of eig->Q): the damped inverse with its sign flipped along q. */
static void s_flip(float *H, int n, const kfac_inverse_t *eig, int q, float d) {
    const double s = -2.0 / ((double)eig->v[q] + d);
    for (int a = 0; a < n; a++)
        for (int b = 0; b < n; b++)
            H[(size_t)a * n + b] += (float)(s * eig->Q[(size_t)a * n + q] * eig->Q[(size_t)b * n + q]);
}

/* The hostile inverse daemon (--member_kind inv-*): Hello as kfac-invertd,
 * then --count jobs answered with a wrong inverse. Returns the exit status. */
static int s_member_invertd(void *sock, const poke_cfg_t *c, rng_t *r) {
    const char *kind = c->member_kind;
    tally_t t;
    memset(&t, 0, sizeof t);
    msg_t m, w;
    if (s_hello(sock, c, MSG_ROLE_INVERTD, &w, &t) < 0) return 1;
    printf("member %d: welcomed as inverse daemon id %u\n", c->member_id, w.welcome.assigned_id);
    fflush(stdout);
    msg_clear(&w);
    int answered = 0, shut = 0, flipped = 0;
    const int flip = strncmp(kind, "inv-flip-", 9) == 0;
    if (strcmp(kind, "inv-unknown") == 0) {
        /* One job, for a real block's layer and factor; then --count results
         * for jobs never handed out, back to back, no reply read: each used
         * to make kfac-ps cut the next job (O(n^2)) at no cost. */
        msg_init(&m, MSG_JOB_REQUEST, MSG_ROLE_INVERTD, (uint32_t)c->member_id);
        m.job_request.max_n = 0;
        s_send_msg(sock, &m);
        msg_t job;
        if (s_wait_for(sock, c, MSG_JOB, &job, &t) < 0) return 1;
        const uint32_t layer = job.job.layer, factor = job.job.factor;
        const uint64_t fv = job.job.factor_version;
        msg_clear(&job);
        for (int i = 0; i < c->count; i++) {
            msg_init(&m, MSG_JOB_RESULT, MSG_ROLE_INVERTD, (uint32_t)c->member_id);
            m.job_result.job_id = 1000000000ULL + (uint64_t)i;
            m.job_result.layer = layer;
            m.job_result.factor = factor;
            m.job_result.factor_version = fv;
            m.job_result.method = MSG_METHOD_CHOLESKY;
            m.job_result.n = 1;
            m.job_result.error = (char *)"none";
            if (s_send_msg(sock, &m) == 0) answered++;
        }
        msg_t x;
        if (s_wait_for(sock, c, MSG_NONE, &x, &t) == -2) shut = 1;
        printf("member %d: %d results for jobs never handed out; jobs received %" PRIu64 "; %s\n", c->member_id,
               answered, t.by_type[MSG_JOB], shut ? "shut out by kfac-ps" : "not shut out");
        msg_init(&m, MSG_BYE, MSG_ROLE_INVERTD, (uint32_t)c->member_id);
        s_send_msg(sock, &m);
        return 0;
    }
    for (int i = 0; i < c->count; i++) {
        /* inv-flip-*: as kfac-invertd does, a result asks for the next job (docs/protocol.md), so that every
         * result answers a job it holds and is either refused (an Error) or taken: a JobRequest only at the start
         * and when no job came for --wait_ms. The other kinds ask before every job. */
        msg_t job;
        int rc = flip && i > 0 ? s_wait_for(sock, c, MSG_JOB, &job, &t) : -1;
        if (rc == -1) {
            msg_init(&m, MSG_JOB_REQUEST, MSG_ROLE_INVERTD, (uint32_t)c->member_id);
            m.job_request.max_n = 0;
            s_send_msg(sock, &m);
            rc = s_wait_for(sock, c, MSG_JOB, &job, &t);
        }
        if (rc == -2) { shut = 1; break; }
        if (rc < 0) break;
        const int n = (int)job.job.n;
        if (strcmp(kind, "inv-fail") == 0) { /* says it could not invert it, every time */
            msg_init(&m, MSG_JOB_RESULT, MSG_ROLE_INVERTD, (uint32_t)c->member_id);
            m.job_result.job_id = job.job.job_id;
            m.job_result.layer = job.job.layer;
            m.job_result.factor = job.job.factor;
            m.job_result.factor_version = job.job.factor_version;
            m.job_result.method = MSG_METHOD_CHOLESKY;
            m.job_result.n = (uint32_t)n;
            m.job_result.damping = job.job.damping;
            m.job_result.compute_ms = 1.0;
            m.job_result.error = (char *)"not positive definite";
            if (s_send_msg(sock, &m) == 0) answered++;
            msg_clear(&job);
            continue;
        }
        float *F = malloc((size_t)n * n * sizeof(float)), *H = calloc((size_t)n * n, sizeof(float));
        float *packed = malloc(kfac_linalg_packed_len(n) * sizeof(float));
        kfac_inverse_t *inv = kfac_inverse_new(n);
        if (!F || !H || !packed || !inv || kfac_linalg_unpack_upper(job.job.packed, n, F) != 0) {
            free(F); free(H); free(packed); kfac_inverse_free(&inv); msg_clear(&job);
            return 1;
        }
        float d_sent = (float)job.job.damping;
        if (flip) {
            /* The true damped inverse (Cholesky form, at the damping it needed), its sign flipped along the
             * eigenvector of F's largest eigenvalue (inv-flip-top), a random one (inv-flip-random) or 4 random
             * ones (inv-flip-many), on blocks of n >= 64; smaller blocks get the honest inverse, so that every
             * result refused is a flipped one. */
            kfac_inverse_t *eig = n >= 64 ? kfac_inverse_new(n) : NULL;
            if (kfac_inverse_compute(F, n, d_sent, KFAC_INV_CHOLESKY, inv, NULL) != 0 || inv->method != KFAC_INV_CHOLESKY ||
                (eig && (kfac_inverse_compute(F, n, 1.0f, KFAC_INV_EIGEN, eig, NULL) != 0 || eig->method != KFAC_INV_EIGEN))) {
                fprintf(stderr, "kfac-poke: cannot invert layer %u factor %u (n=%d)\n", job.job.layer, job.job.factor, n);
                free(F); free(H); free(packed); kfac_inverse_free(&inv); kfac_inverse_free(&eig); msg_clear(&job);
                return 1;
            }
            d_sent = inv->damping_used;
            memcpy(H, inv->inv, (size_t)n * n * sizeof(float));
            if (eig) {
                const int n_flips = strcmp(kind, "inv-flip-many") == 0 ? 4 : 1;
                for (int f = 0; f < n_flips; f++)
                    s_flip(H, n, eig, strcmp(kind, "inv-flip-top") == 0 ? n - 1 : (int)rng_below(r, (uint32_t)n), d_sent);
                flipped++;
            }
            kfac_inverse_free(&eig);
        } else if (strcmp(kind, "inv-indefinite") == 0 && n >= 2) {
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
        m.job_result.damping = d_sent;
        m.job_result.compute_ms = 1.0;
        m.job_result.inverse = packed;
        m.job_result.n_inverse = kfac_linalg_packed_len(n);
        if (s_send_msg(sock, &m) == 0) {
            answered++;
            if (flip && n >= 64) { /* the job ids a test looks for in kfac-ps's log: none may be installed */
                printf("flipped job %" PRIu64 " (layer %u factor %u, n %d)\n", job.job.job_id, job.job.layer,
                       job.job.factor, n);
                fflush(stdout);
            }
        }
        free(F); free(H); free(packed); kfac_inverse_free(&inv); msg_clear(&job);
    }
    if (!shut) { /* collect what comes back: an error per result, and the shutdown */
        msg_t x;
        if (s_wait_for(sock, c, MSG_NONE, &x, &t) == -2) shut = 1;
    }
    if (flip)
        printf("member %d: %d jobs answered, %d of them with %s inverses (the others honest: n < 64); errors INVALID "
               "%" PRIu64 "; %s\n", c->member_id, answered, flipped, kind, t.by_error[MSG_ERR_INVALID],
               shut ? "shut out by kfac-ps" : "not shut out");
    else
        printf("member %d: %d jobs answered with %s inverses; errors INVALID %" PRIu64 "; %s\n", c->member_id, answered,
               kind, t.by_error[MSG_ERR_INVALID], shut ? "shut out by kfac-ps" : "not shut out");
    msg_init(&m, MSG_BYE, MSG_ROLE_INVERTD, (uint32_t)c->member_id);
    s_send_msg(sock, &m);
    return 0;
}

/* The hostile member (see the header comment). Returns the exit status. */
int poke_member(void *sock, const poke_cfg_t *c, rng_t *r) {
    const char *kind = c->member_kind;
    if (strcmp(kind, "inv-indefinite") == 0 || strcmp(kind, "inv-scaled") == 0 || strcmp(kind, "inv-other") == 0 ||
        strcmp(kind, "inv-fail") == 0 || strcmp(kind, "inv-unknown") == 0 || strcmp(kind, "inv-flip-top") == 0 ||
        strcmp(kind, "inv-flip-random") == 0 || strcmp(kind, "inv-flip-many") == 0)
        return s_member_invertd(sock, c, r);
    if (strcmp(kind, "fast-worker") == 0) return poke_fast_worker(sock, c, r);
    if (strcmp(kind, "examples") && strcmp(kind, "huge") && strcmp(kind, "nan") && strcmp(kind, "stall") &&
        strcmp(kind, "hello") && strcmp(kind, "negvar") && strcmp(kind, "bnhuge") && strcmp(kind, "alternate") && strcmp(kind, "flood") && strcmp(kind, "stats") &&
        strcmp(kind, "scaled") && strcmp(kind, "bias") && strcmp(kind, "gradstats") && strcmp(kind, "rejoin")) {
        fprintf(stderr, "kfac-poke: --member_kind must be examples, huge, nan, scaled, bias, stall, hello, alternate, flood, stats, "
                        "gradstats, rejoin, negvar, bnhuge, inv-indefinite, inv-scaled, inv-other, inv-fail, inv-unknown or fast-worker, not "
                        "'%s'\n", kind);
        return 2;
    }
    tally_t t;
    memset(&t, 0, sizeof t);
    msg_t m, w;
    const msg_role_t role = strcmp(kind, "stats") == 0 ? MSG_ROLE_STATSD : MSG_ROLE_WORKER;
    if (s_hello(sock, c, role, &w, &t) < 0) return 1;
    uint64_t n_params = w.welcome.n_params, w_n_state = w.welcome.n_state;
    const int gradstats = strcmp(kind, "gradstats") == 0;
    char *w_model = role == MSG_ROLE_STATSD || gradstats ? strdup(w.welcome.model_text ? w.welcome.model_text : "")
                                                         : NULL;
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
        /* Then, each for a newer version (one push per version): every full
         * factor symmetric with a positive diagonal but indefinite
         * (I + 2 (e0 e1^T + e1 e0^T)), and every factor the identity times
         * 1e6 (a trace far beyond any batch's). */
        uint64_t last = v;
        for (int bad = 0; bad < 2; bad++) {
            msg_t x;
            uint64_t nv = 0;
            msg_init(&m, MSG_GET_PARAMS, role, (uint32_t)c->member_id); /* the next version */
            m.get_params.min_version = last + 1;
            s_send_msg(sock, &m);
            for (int tries = 0; tries < 50 && nv <= last; tries++) { /* older Params still on their way: skipped */
                if (s_wait_for(sock, c, MSG_PARAMS, &x, &t) != 0) break;
                nv = x.params.version;
                msg_clear(&x);
            }
            if (nv <= last) break;
            last = nv;
            wire_stats_release(&ms, &packed);
            for (int j = 0; j < ks->n_layers; j++)
                for (int k = 0; k < ks->layers[j].n_factors; k++) {
                    kfac_factor_t *f = &ks->layers[j].f[k];
                    if (bad == 0 && f->kind == KFAC_FACTOR_SYM && f->dim >= 2) {
                        for (int a = 0; a < f->dim; a++) f->data[(size_t)a * f->dim + a] = 1.0f;
                        f->data[1] = f->data[f->dim] = 2.0f;
                    } else if (bad == 1) {
                        for (size_t e = 0; e < kfac_factor_len(f); e++) f->data[e] *= 1e6f;
                        if (f->kind == KFAC_FACTOR_SYM && f->dim >= 2) f->data[1] = f->data[f->dim] = 0.0f;
                    }
                }
            if (wire_stats_to_msg(ks, &ms, &packed) < 0) break;
            msg_init(&m, MSG_STATS_PUSH, role, (uint32_t)c->member_id);
            m.stats_push.params_version = nv;
            m.stats_push.n_examples = 64;
            m.stats_push.stats = ms;
            s_send_msg(sock, &m);
            printf("member %d: %s statistics pushed for version %" PRIu64 "\n", c->member_id,
                   bad == 0 ? "indefinite" : "1e6 x identity", nv);
            fflush(stdout);
            /* its answer: an Error (then Params), or, taken, the next version's Params */
            uint64_t e0 = t.by_error[MSG_ERR_INVALID];
            for (int tries = 0; tries < 50; tries++) {
                if (s_wait_for(sock, c, MSG_PARAMS, &x, &t) != 0) break;
                uint64_t got = x.params.version;
                msg_clear(&x);
                if (t.by_error[MSG_ERR_INVALID] > e0 || got > nv) break;
            }
        }
        /* Last, a replay: versions 0, 1, 2, 3, 4 back to back, older than
         * the Params it was sent (a statistics worker joining at step t
         * pushing 0, 1, ..., t). */
        int replayed = 0;
        for (uint64_t rv = 0; rv < 5 && rv < last; rv++) {
            msg_init(&m, MSG_STATS_PUSH, role, (uint32_t)c->member_id);
            m.stats_push.params_version = rv;
            m.stats_push.n_examples = 64;
            m.stats_push.stats = ms;
            if (s_send_msg(sock, &m) == 0) replayed++;
        }
        if (replayed) {
            msg_t x;
            s_wait_for(sock, c, MSG_NONE, &x, &t); /* their answers, for wait_ms */
        }
        printf("member %d: 5 statistics pushes from version %" PRIu64 ", then %d of versions 0-%d; errors INVALID %" PRIu64
               "\n", c->member_id, v, replayed, replayed - 1, t.by_error[MSG_ERR_INVALID]);
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
    if (strcmp(kind, "rejoin") == 0) {
        /* The round's version v, then --count times: a small gradient of v,
         * Bye, Hello on the same socket (a new connection to kfac-ps), and
         * the same push again; each answer counted. Taken, a push gets no
         * reply until the next version; refused, an Error. */
        msg_t pm;
        msg_init(&m, MSG_GET_PARAMS, MSG_ROLE_WORKER, (uint32_t)c->member_id);
        s_send_msg(sock, &m);
        if (s_wait_for(sock, c, MSG_PARAMS, &pm, &t) < 0) return 1;
        const uint64_t v = pm.params.version;
        msg_clear(&pm);
        float *g = malloc((n_params ? n_params : 1) * sizeof *g);
        if (!g) return 1;
        for (uint64_t j = 0; j < n_params; j++) g[j] = 0.01f * (float)rng_normal(r);
        int pushed = 0, rejoined = 0;
        for (int i = 0; i < c->count; i++) {
            msg_init(&m, MSG_GRAD_PUSH, MSG_ROLE_WORKER, (uint32_t)c->member_id);
            m.grad_push.version = v;
            m.grad_push.loss = 2.3;
            m.grad_push.n_examples = 1;
            m.grad_push.grad = g;
            m.grad_push.n_grad = n_params;
            if (s_send_msg(sock, &m) == 0) pushed++;
            poke_sleep_ms(100); /* the push is handled before the Bye */
            msg_init(&m, MSG_BYE, MSG_ROLE_WORKER, (uint32_t)c->member_id);
            s_send_msg(sock, &m);
            if (s_hello(sock, c, MSG_ROLE_WORKER, &w, &t) < 0) break;
            msg_clear(&w);
            rejoined++;
        }
        msg_t x;
        s_wait_for(sock, c, MSG_NONE, &x, &t); /* the last answers, for wait_ms */
        free(g);
        printf("member %d: %d gradients of version %" PRIu64 " pushed, %d times left and came back; replies %" PRIu64
               ", errors INVALID %" PRIu64 "\n",
               c->member_id, pushed, v, rejoined, t.n_replies, t.by_error[MSG_ERR_INVALID]);
        msg_init(&m, MSG_BYE, MSG_ROLE_WORKER, (uint32_t)c->member_id);
        s_send_msg(sock, &m);
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
    /* gradstats: with each gradient, statistics for the model's last layer
     * with a full factor, every such factor indefinite with 1e6 on the
     * diagonal (F[0][1] = F[1][0] = 2e6): statistics nobody asked for, which
     * inverse daemons would be given to invert (and fail on). */
    msg_stats_t gms;
    float *gpacked = NULL;
    kfac_stats_t *gks = NULL;
    net_t *gnet = NULL;
    memset(&gms, 0, sizeof gms);
    if (gradstats) {
        char err[512];
        gnet = net_parse(w_model ? w_model : "", "welcome", 1, err, sizeof err);
        gks = gnet ? kfac_stats_new(gnet) : NULL;
        int last = -1;
        for (int j = 0; gks && j < gks->n_layers; j++)
            for (int k = 0; k < gks->layers[j].n_factors; k++)
                if (gks->layers[j].f[k].kind == KFAC_FACTOR_SYM && gks->layers[j].f[k].dim >= 2) last = j;
        uint32_t want = last >= 0 ? (uint32_t)gks->layers[last].layer : 0;
        if (last < 0 || wire_stats_want(gks, &want, 1) != 1) {
            fprintf(stderr, "kfac-poke: cannot build the model's statistics: %s\n", gnet ? "no full factor" : err);
            kfac_stats_free(&gks);
            net_free(&gnet);
            free(w_model);
            return 1;
        }
        for (int k = 0; k < gks->layers[last].n_factors; k++) {
            kfac_factor_t *f = &gks->layers[last].f[k];
            memset(f->data, 0, kfac_factor_len(f) * sizeof(float));
            if (f->kind == KFAC_FACTOR_SYM) {
                for (int a = 0; a < f->dim; a++) f->data[(size_t)a * f->dim + a] = 1e6f;
                if (f->dim >= 2) f->data[1] = f->data[f->dim] = 2e6f;
            } else {
                for (int a = 0; a < f->dim; a++) f->data[3 * a] = f->data[3 * a + 2] = 1e6f;
            }
            f->n_samples = 1;
            f->n_updates = 1;
        }
        if (wire_stats_to_msg(gks, &gms, &gpacked) < 0) {
            fprintf(stderr, "kfac-poke: cannot encode the statistics\n");
            kfac_stats_free(&gks);
            net_free(&gnet);
            free(w_model);
            return 1;
        }
    }
    free(w_model);
    float *g = malloc((n_params ? n_params : 1) * sizeof *g);
    const int bnhuge = strcmp(kind, "bnhuge") == 0;
    const uint64_t n_state = strcmp(kind, "negvar") == 0 || bnhuge ? w_n_state : 0;
    float *st = n_state ? malloc(n_state * sizeof *st) : NULL;
    if (!g || (n_state && !st)) {
        free(g);
        wire_stats_release(&gms, &gpacked);
        kfac_stats_free(&gks);
        net_free(&gnet);
        return 1;
    }
    for (uint64_t j = 0; j < n_state; j++) st[j] = bnhuge ? 3e38f : -1.0f;
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
        /* scaled: 100 x the parameters, the push that captured the median
         * norm rule (each accepted one raised the median it is judged by) */
        if (strcmp(kind, "scaled") == 0)
            for (uint64_t j = 0; j < n_params; j++) g[j] = j < pm.params.n_params ? 100.0f * pm.params.params[j] : 0.0f;
        /* bias: -bias x the parameters, every round: a small step in the
         * same direction each time (the weights grow), inside every norm
         * bound */
        const int bias = strcmp(kind, "bias") == 0;
        if (bias)
            for (uint64_t j = 0; j < n_params; j++)
                g[j] = j < pm.params.n_params ? (float)(-c->bias) * pm.params.params[j] : 0.0f;
        msg_clear(&pm);
        if (alternate && i % 2 == 1) { /* this round: nothing but heartbeats */
            msg_t x;
            if (s_wait_for(sock, c, MSG_NONE, &x, &t) == -2) break;
            stalls++;
            continue;
        }
        if (strcmp(kind, "scaled") != 0 && !bias)
            for (uint64_t j = 0; j < n_params; j++) g[j] = strcmp(kind, "huge") == 0 ? 3e38f : 0.01f * (float)rng_normal(r);
        if (strcmp(kind, "nan") == 0 && n_params > 1) {
            g[rng_below(r, (uint32_t)n_params)] = NAN;
            g[rng_below(r, (uint32_t)n_params)] = INFINITY;
        }
        msg_init(&m, MSG_GRAD_PUSH, MSG_ROLE_WORKER, (uint32_t)c->member_id);
        m.grad_push.version = v;
        m.grad_push.loss = 2.3;
        m.grad_push.n_examples = strcmp(kind, "examples") == 0 ? 1000000 : bias ? (uint64_t)c->bias_examples : 1;
        m.grad_push.grad = g;
        m.grad_push.n_grad = n_params;
        m.grad_push.state = st;
        m.grad_push.n_state = n_state;
        if (gradstats) m.grad_push.stats = gms;
        if (s_send_msg(sock, &m) == 0) pushed++;
    }
    free(g);
    free(st);
    wire_stats_release(&gms, &gpacked);
    kfac_stats_free(&gks);
    net_free(&gnet);
    printf("member %d: %d %s gradients pushed, %d rounds stalled; replies %" PRIu64 ", errors INVALID %" PRIu64 "\n",
           c->member_id, pushed, kind, stalls, t.n_replies, t.by_error[MSG_ERR_INVALID]);
    msg_init(&m, MSG_BYE, MSG_ROLE_WORKER, (uint32_t)c->member_id);
    s_send_msg(sock, &m);
    return 0;
}

