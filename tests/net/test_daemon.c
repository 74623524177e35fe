/* tests/net/test_daemon.c — the compute-client skeleton (common/net/daemon.h)
 * against a fake kfac-ps on real sockets (a ROUTER on 127.0.0.1 in a
 * thread), with two test roles whose work takes a while:
 *   - in order (a kfac-invertd-like role: READY at Welcome, every Job
 *     queued): three Jobs sent for one JobRequest are computed and answered
 *     in order; no request goes out while their results are unanswered;
 *     each Error counts as an answer, and the third brings the JobRequest;
 *     an input the role rejects is answered with Error(INVALID) naming it
 *     and counts as an answer too;
 *   - the newest only (a kfac-worker-like role): Params v2 and v3 sent
 *     while v1 computes: v3 replaces v2, so the pushes are v1 and v3. No
 *     sleep stands for "while": the fake kfac-ps sends v2 once v1's work
 *     has begun, and v1's work ends only once the daemon has taken v3 in;
 *   - both: Shutdown ends the daemon with exit code 0, the role's stop runs
 *     once.
 */
#include <check.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <uv.h>
#include <zmq.h>

#include "common/base/log.h"
#include "common/net/daemon.h"
#include "common/run/runcfg.h"
#include "proto/msg.h"
#include "tests/lib/check_main.h"
#include "tests/lib/fake_ps.h"

#define S_WORK_MS 150 /* each job's work: long enough for the next inputs to arrive meanwhile */

/* The bound on a wait for the daemon (a message, a hand-shake flag): 10 s
 * x CK_TIMEOUT_MULTIPLIER, so that on a loaded machine Check's timeout,
 * not this guard, is what a hang runs into. */
static int s_wait_ms(void) { return (int)check_scaled_ms(10000); }

/* What the roles saw (the daemon owns and frees their state). */
static int s_n_stops, s_n_welcomes;

/* The newest-only scenario's hand-shake between the compute thread, the
 * daemon's loop thread (accept) and the fake kfac-ps's thread. */
static atomic_int s_v1_started, s_v3_accepted;

/* Wait (polling every ms) until *flag is set; 1 when it was within ms. */
static int s_wait_flag(atomic_int *flag, int ms) {
    for (int t = 0; t < ms && !atomic_load(flag); t++) uv_sleep(1);
    return atomic_load(flag) != 0;
}

typedef struct fake_ps {
    void *ctx, *sock;
    char endpoint[128];
    int newest;        /* the worker-like scenario */
    char fail[512];    /* the first step that went wrong, or "" */
} fake_ps_t;

/* ---- the test roles ---------------------------------------------------------------- */

static int s_welcome(client_daemon_t *d, const msg_welcome_t *w, const runcfg_t *cfg, compute_setup_t *st) {
    (void)d, (void)w, (void)cfg, (void)st;
    s_n_welcomes++;
    return CLIENT_DAEMON_WELCOME_READY;
}

static int s_accept_queue(client_daemon_t *d, client_daemon_job_t *j, const client_daemon_job_t *newest, char *err,
                          size_t n) {
    (void)d, (void)newest;
    if (j->in.job.job_id == 999) {
        snprintf(err, n, "job 999: the test role refuses it");
        return -22;
    }
    return CLIENT_DAEMON_INPUT_QUEUE;
}

static int s_accept_newest(client_daemon_t *d, client_daemon_job_t *j, const client_daemon_job_t *newest, char *err,
                           size_t n) {
    (void)d, (void)newest, (void)err, (void)n;
    if (j->in.type == MSG_PARAMS && j->in.params.version == 3) atomic_store(&s_v3_accepted, 1);
    return CLIENT_DAEMON_INPUT_NEWEST;
}

/* Compute thread: wait, then answer with the input's id (a JobResult) or
 * version (a GradPush). */
static void s_work(void *state, compute_ctx_t *cc, client_daemon_job_t *j) {
    (void)state, (void)cc;
    if (j->in.type == MSG_PARAMS && j->in.params.version == 1) {
        atomic_store(&s_v1_started, 1);
        (void)s_wait_flag(&s_v3_accepted, s_wait_ms()); /* else the pushes show it */
    }
    uv_sleep(S_WORK_MS);
    msg_t m;
    double *ms;
    if (j->in.type == MSG_JOB) {
        msg_init(&m, MSG_JOB_RESULT, MSG_ROLE_INVERTD, j->sender_id);
        m.job_result.job_id = j->in.job.job_id;
        m.job_result.n = j->in.job.n;
        m.job_result.inverse = j->in.job.packed;
        m.job_result.n_inverse = j->in.job.n_packed;
        ms = &m.job_result.compute_ms;
    } else {
        msg_init(&m, MSG_GRAD_PUSH, MSG_ROLE_WORKER, j->sender_id);
        m.grad_push.version = j->in.params.version;
        m.grad_push.grad = j->in.params.params;
        m.grad_push.n_grad = j->in.params.n_params;
        ms = &m.grad_push.compute_ms;
    }
    client_daemon_job_answer(j, &m, ms, 0.0, NULL, NULL, "the answer");
}

static int s_done(client_daemon_t *d, client_daemon_job_t *j) {
    ck_assert_int_eq(client_daemon_send_result(d, j), 0);
    return 0;
}

static void s_stop(client_daemon_t *d) {
    (void)d;
    s_n_stops++;
}

static const client_daemon_role_t s_queue_role = {
    .role = RUNCFG_ROLE_INVERTD, .job_size = sizeof(client_daemon_job_t),
    .welcome = s_welcome, .accept = s_accept_queue, .done = s_done, .stop = s_stop, .work = s_work,
};

static const client_daemon_role_t s_newest_role = {
    .role = RUNCFG_ROLE_WORKER, .job_size = sizeof(client_daemon_job_t),
    .welcome = s_welcome, .accept = s_accept_newest, .done = s_done, .stop = s_stop, .work = s_work,
};

/* ---- the fake kfac-ps -------------------------------------------------------------- */

static int s_send(fake_ps_t *f, zmq_msg_t *id, msg_t *m) { return fake_ps_send(f->sock, id, m); }

static int s_recv(fake_ps_t *f, zmq_msg_t *id, msg_t *m, int timeout_ms) {
    return fake_ps_recv(f->sock, id, m, timeout_ms);
}

/* Expect a message of type t (and, for JobResult/GradPush, id or version
 * want); on anything else note the step in f->fail. Returns 1 when it came. */
static int s_expect(fake_ps_t *f, zmq_msg_t *id, msg_type_t t, uint64_t want, const char *step) {
    msg_t m;
    if (f->fail[0]) return 0;
    if (s_recv(f, id, &m, s_wait_ms()) < 0) {
        snprintf(f->fail, sizeof f->fail, "%s: no %s within %d ms", step, msg_type_name(t), s_wait_ms());
        return 0;
    }
    if (getenv("TEST_DAEMON_DEBUG")) fprintf(stderr, "fake ps: %s: got %s\n", step, msg_type_name(m.type));
    uint64_t got = t == MSG_JOB_RESULT ? m.job_result.job_id : t == MSG_GRAD_PUSH ? m.grad_push.version : want;
    int ok = m.type == t && got == want;
    if (t == MSG_ERROR && ok) ok = m.error.code == MSG_ERR_INVALID && m.error.text && strstr(m.error.text, "999");
    if (!ok)
        snprintf(f->fail, sizeof f->fail, "%s: got %s (%llu), want %s (%llu)", step, msg_type_name(m.type),
                 (unsigned long long)got, msg_type_name(t), (unsigned long long)want);
    msg_clear(&m);
    return ok;
}

static void s_expect_silence(fake_ps_t *f, zmq_msg_t *id, int ms, const char *step) {
    msg_t m;
    if (f->fail[0] || s_recv(f, id, &m, ms) < 0) return;
    snprintf(f->fail, sizeof f->fail, "%s: got %s, want nothing", step, msg_type_name(m.type));
    msg_clear(&m);
}

static void s_send_job(fake_ps_t *f, zmq_msg_t *id, uint64_t job_id) {
    float packed[1] = {2.0f};
    msg_t a;
    msg_init(&a, MSG_JOB, MSG_ROLE_PS, 0);
    a.job.job_id = job_id;
    a.job.n = 1;
    a.job.packed = packed;
    a.job.n_packed = 1;
    a.job.damping = 0.1;
    (void)s_send(f, id, &a);
}

static void s_send_params(fake_ps_t *f, zmq_msg_t *id, uint64_t version) {
    float params[2] = {1.0f, 2.0f};
    msg_t a;
    msg_init(&a, MSG_PARAMS, MSG_ROLE_PS, 0);
    a.params.version = version;
    a.params.params = params;
    a.params.n_params = 2;
    (void)s_send(f, id, &a);
}

static void s_send_error(fake_ps_t *f, zmq_msg_t *id) {
    msg_t a;
    msg_init(&a, MSG_ERROR, MSG_ROLE_PS, 0);
    a.error.code = MSG_ERR_STALE;
    a.error.text = (char *)"test: stale";
    (void)s_send(f, id, &a);
}

static void s_queue_script(fake_ps_t *f, zmq_msg_t *id) {
    s_expect(f, id, MSG_JOB_REQUEST, 0, "after Welcome");
    for (uint64_t j = 1; j <= 3; j++) s_send_job(f, id, j);
    for (uint64_t j = 1; j <= 3; j++) s_expect(f, id, MSG_JOB_RESULT, j, "three jobs for one request, in order");
    s_expect_silence(f, id, 3 * S_WORK_MS, "three results unanswered");
    for (int i = 0; i < 3; i++) s_send_error(f, id);
    s_expect(f, id, MSG_JOB_REQUEST, 0, "three Errors answered the three results");
    s_send_job(f, id, 999);
    s_expect(f, id, MSG_ERROR, 0, "a job the role rejects");
    s_expect(f, id, MSG_JOB_REQUEST, 0, "the rejected job answered the request");
}

static void s_newest_script(fake_ps_t *f, zmq_msg_t *id) {
    s_expect(f, id, MSG_GET_PARAMS, 0, "after Welcome");
    s_send_params(f, id, 1);
    if (!s_wait_flag(&s_v1_started, s_wait_ms())) {
        snprintf(f->fail, sizeof f->fail, "the work on Params v1 did not begin within %d ms", s_wait_ms());
        return;
    }
    s_send_params(f, id, 2);
    s_send_params(f, id, 3);
    s_expect(f, id, MSG_GRAD_PUSH, 1, "the first Params");
    s_expect(f, id, MSG_GRAD_PUSH, 3, "v3 replaced v2 while v1 computed");
    s_expect_silence(f, id, 2 * S_WORK_MS, "v2 was dropped");
}

static void s_fake_ps_thread(void *arg) {
    fake_ps_t *f = arg;
    zmq_msg_t id;
    zmq_msg_init(&id);
    msg_t m;
    if (s_recv(f, &id, &m, s_wait_ms()) < 0 || m.type != MSG_HELLO)
        snprintf(f->fail, sizeof f->fail, "no Hello");
    else {
        msg_clear(&m);
        char *argv_ps[] = {"kfac-ps", NULL};
        (void)fake_ps_send_welcome(f->sock, &id, "input 1x1x2\nflatten\nfc name=f out=2\nsoftmax_xent\n", 1, argv_ps);
        msg_t a;
        if (f->newest) s_newest_script(f, &id);
        else s_queue_script(f, &id);
        msg_init(&a, MSG_SHUTDOWN, MSG_ROLE_PS, 0);
        a.shutdown.text = (char *)"test over";
        (void)s_send(f, &id, &a);
    }
    zmq_msg_close(&id);
    zmq_close(f->sock);
}

/* Run role r against the fake kfac-ps; returns the daemon's exit code. */
static int s_run(const client_daemon_role_t *r, fake_ps_t *f) {
    log_init(getenv("TEST_DAEMON_DEBUG") ? LOG_LEVEL_DEBUG : LOG_LEVEL_ERROR, "test_daemon");
    s_n_stops = s_n_welcomes = 0;
    atomic_store(&s_v1_started, 0);
    atomic_store(&s_v3_accepted, 0);
    fake_ps_open(&f->ctx, &f->sock, f->endpoint, sizeof f->endpoint); /* handed to the thread */
    uv_thread_t th;
    ck_assert_int_eq(uv_thread_create(&th, s_fake_ps_thread, f), 0);
    runcfg_t local;
    char err[256];
    /* The invertd-like role at normal priority: the floor is not what is
     * tested, and SCHED_IDLE may get no CPU on a busy test machine. */
    int inv = r->role == RUNCFG_ROLE_INVERTD;
    char *argv[] = {inv ? "kfac-invertd" : "kfac-worker", "--ps", f->endpoint, "--threads", "1",
                    inv ? "--invertd.priority" : NULL, "normal", NULL};
    ck_assert_int_eq(runcfg_load(&local, r->role, inv ? 7 : 5, argv, err, sizeof err), 0);
    client_daemon_t *d = client_daemon_new(r, &local);
    ck_assert_ptr_nonnull(d);
    int code = client_daemon_run(d);
    client_daemon_free(&d);
    ck_assert_ptr_null(d);
    uv_thread_join(&th);
    zmq_ctx_term(f->ctx);
    runcfg_release(&local);
    return code;
}

START_TEST(test_daemon_queue_in_order_and_request_count) {
    fake_ps_t f;
    memset(&f, 0, sizeof f);
    int code = s_run(&s_queue_role, &f);
    ck_assert_msg(f.fail[0] == 0, "%s", f.fail);
    ck_assert_int_eq(code, 0);
    ck_assert_int_eq(s_n_welcomes, 1);
    ck_assert_int_eq(s_n_stops, 1);
}
END_TEST

START_TEST(test_daemon_newest_params_only) {
    fake_ps_t f;
    memset(&f, 0, sizeof f);
    f.newest = 1;
    int code = s_run(&s_newest_role, &f);
    ck_assert_msg(f.fail[0] == 0, "%s", f.fail);
    ck_assert_int_eq(code, 0);
    ck_assert_int_eq(s_n_stops, 1);
}
END_TEST

Suite *make_suite(void) {
    Suite *s = suite_create("daemon");
    TCase *tc = tcase_create("fake kfac-ps");
    tcase_set_timeout(tc, 60);
    tcase_add_test(tc, test_daemon_queue_in_order_and_request_count);
    tcase_add_test(tc, test_daemon_newest_params_only);
    suite_add_tcase(s, tc);
    return s;
}
