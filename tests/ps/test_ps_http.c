/* tests/ps/test_ps_http.c — kfac-ps's metrics endpoint (ps/http.h):
 *   - the exposition text: HELP and TYPE before each metric, NaN for the
 *     accuracies before the first evaluation, label values escaped, the
 *     K-FAC metrics only with kind = kfac, fresh random counters written
 *     exactly;
 *   - steps/s from successive snapshots;
 *   - the server on 127.0.0.1, port 0: GET /metrics answers 200 with the
 *     published snapshot, other paths 404, garbage gets an HTTP error and
 *     the server keeps answering; bad addresses and a busy port are clear
 *     errors that name [ps] metrics.
 */
#include <arpa/inet.h>
#include <check.h>
#include <math.h>
#include <netinet/in.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <sys/time.h>
#include <unistd.h>

#include "common/base/rng.h"
#include "ps/http.h"
#include "tests/lib/check_main.h"
#include "tests/lib/seed.h"

static void s_snapshot(ps_http_snapshot_t *x, ps_http_block_t *blocks, rng_t *r) {
    memset(x, 0, sizeof *x);
    x->step = rng_u64(r) % 1000000;
    x->steps_target = 2000000;
    x->wall_s = 12.5;
    x->train_loss = 0.25;
    x->train_acc = 0.5;
    x->workers = 2;
    x->invertd = 3;
    for (int t = 0; t < MSG_TYPE_COUNT; t++) x->rejected[t] = rng_u64(r) >> 1;
    x->kfac = 1;
    x->inverses_installed = rng_u64(r) >> 1;
    x->stats_folded = 7;
    x->stalled = rng_u64(r) >> 1;
    x->demoted = 5;
    x->repushed = 7;
    x->drift_refused = 13;
    x->ckpt_saved = 11;
    x->ckpt_failed = 2;
    snprintf(blocks[0].layer, sizeof blocks[0].layer, "fc1");
    blocks[0].factor = 0;
    blocks[0].age_steps = -1;
    snprintf(blocks[1].layer, sizeof blocks[1].layer, "we\"ird\\");
    blocks[1].factor = 1;
    blocks[1].age_steps = 4;
    x->n_blocks = 2;
    x->blocks = blocks;
}

static void s_has(const char *text, const char *want) {
    ck_assert_msg(strstr(text, want) != NULL, "no '%s' in:\n%s", want, text);
}

START_TEST(test_ps_http_format) {
    uint64_t seed = test_seed();
    printf("test_ps_http_format: seed %llu\n", (unsigned long long)seed);
    rng_t r;
    rng_seed(&r, seed);
    ps_http_snapshot_t x;
    ps_http_block_t blocks[2];
    s_snapshot(&x, blocks, &r);
    char *t = ps_http_format(&x, 3.5);
    ck_assert_ptr_nonnull(t);
    char line[200];
    snprintf(line, sizeof line, "\nkfac_step %llu\n", (unsigned long long)x.step);
    s_has(t, line);
    s_has(t, "# HELP kfac_step ");
    s_has(t, "# TYPE kfac_step gauge\nkfac_step ");
    s_has(t, "kfac_steps_per_second 3.5\n");
    s_has(t, "kfac_test_accuracy{params=\"current\"} NaN\n");
    s_has(t, "kfac_test_accuracy{params=\"polyak\"} NaN\n");
    s_has(t, "kfac_eval_step -1\n");
    s_has(t, "kfac_clients{role=\"invertd\"} 3\n");
    s_has(t, "# TYPE kfac_rejected_messages_total counter\n");
    snprintf(line, sizeof line, "kfac_rejected_messages_total{type=\"job_result\"} %llu\n",
             (unsigned long long)x.rejected[MSG_JOB_RESULT]);
    s_has(t, line);
    snprintf(line, sizeof line, "kfac_rejected_messages_total{type=\"undecodable\"} %llu\n",
             (unsigned long long)x.rejected[MSG_NONE]);
    s_has(t, line);
    snprintf(line, sizeof line, "kfac_inverses_installed_total %llu\n", (unsigned long long)x.inverses_installed);
    s_has(t, line);
    snprintf(line, sizeof line, "kfac_workers_stalled_total %llu\n", (unsigned long long)x.stalled);
    s_has(t, line);
    s_has(t, "# TYPE kfac_workers_demoted_total counter\nkfac_workers_demoted_total 5\n");
    s_has(t, "# TYPE kfac_grads_repushed_total counter\nkfac_grads_repushed_total 7\n");
    s_has(t, "# TYPE kfac_grads_drift_refused_total counter\nkfac_grads_drift_refused_total 13\n");
    s_has(t, "# TYPE kfac_checkpoints_total counter\nkfac_checkpoints_total 11\n");
    s_has(t, "# TYPE kfac_checkpoints_failed_total counter\nkfac_checkpoints_failed_total 2\n");
    s_has(t, "kfac_inverse_age_steps{layer=\"fc1\",factor=\"0\"} -1\n");
    s_has(t, "kfac_inverse_age_steps{layer=\"we\\\"ird\\\\\",factor=\"1\"} 4\n");
    /* every sample line's metric has its HELP and TYPE before it */
    char *copy = strdup(t), *save = NULL;
    char seen[4096] = " ";
    for (char *l = strtok_r(copy, "\n", &save); l; l = strtok_r(NULL, "\n", &save)) {
        char name[128];
        if (strncmp(l, "# TYPE ", 7) == 0) {
            sscanf(l + 7, "%127s", name);
            strncat(seen, name, sizeof seen - strlen(seen) - 3);
            strcat(seen, " ");
            continue;
        }
        if (l[0] == '#') continue;
        size_t n = strcspn(l, "{ ");
        ck_assert_uint_lt(n, sizeof name - 2);
        name[0] = ' ';
        memcpy(name + 1, l, n);
        name[n + 1] = ' ';
        name[n + 2] = '\0';
        ck_assert_msg(strstr(seen, name) != NULL, "sample before its TYPE: %s", l);
    }
    free(copy);
    free(t);
    /* sgd: no K-FAC metrics; evaluated accuracies are numbers */
    x.kfac = 0;
    x.have_eval = 1;
    x.test_acc = 0.875;
    t = ps_http_format(&x, 0.0);
    ck_assert_ptr_nonnull(t);
    ck_assert_ptr_null(strstr(t, "kfac_inverse_age_steps"));
    ck_assert_ptr_null(strstr(t, "kfac_curvature_stale"));
    s_has(t, "kfac_test_accuracy{params=\"current\"} 0.875\n");
    free(t);
}
END_TEST

/* One HTTP exchange on 127.0.0.1:port; the reply (up to len - 1 bytes)
 * in buf. Returns the status code, or -1. */
static int s_http(int port, const char *request, char *buf, size_t len) {
    int fd = socket(AF_INET, SOCK_STREAM, 0);
    if (fd < 0) return -1;
    struct timeval tv = {.tv_sec = 5};
    setsockopt(fd, SOL_SOCKET, SO_RCVTIMEO, &tv, sizeof tv);
    struct sockaddr_in sa = {.sin_family = AF_INET, .sin_port = htons((uint16_t)port)};
    inet_pton(AF_INET, "127.0.0.1", &sa.sin_addr);
    if (connect(fd, (struct sockaddr *)&sa, sizeof sa) != 0) {
        close(fd);
        return -1;
    }
    if (write(fd, request, strlen(request)) < 0) {
        close(fd);
        return -1;
    }
    size_t got = 0;
    for (int i = 0; i < 1000 && got + 1 < len; i++) { /* bounded: the server closes, or the 5 s timeout */
        ssize_t n = read(fd, buf + got, len - 1 - got);
        if (n <= 0) break;
        got += (size_t)n;
    }
    buf[got] = '\0';
    close(fd);
    int code = -1;
    if (sscanf(buf, "HTTP/1.%*d %d", &code) != 1) return -1;
    return code;
}

START_TEST(test_ps_http_serves_snapshot) {
    rng_t r;
    rng_seed(&r, test_seed());
    char err[400] = "";
    ps_http_t *h = ps_http_new("127.0.0.1:0", 2, err, sizeof err);
    ck_assert_msg(h != NULL, "%s", err);
    int port = ps_http_port(h);
    ck_assert_int_gt(port, 0);
    static char buf[65536];
    const char *get = "GET /metrics HTTP/1.0\r\nHost: x\r\n\r\n";
    ck_assert_int_eq(s_http(port, get, buf, sizeof buf), 200); /* before a snapshot: a comment only */
    ck_assert_ptr_null(strstr(buf, "kfac_step"));
    ps_http_snapshot_t x;
    ps_http_block_t blocks[2];
    s_snapshot(&x, blocks, &r);
    x.step = 10;
    ps_http_publish(h, &x);
    blocks[1].age_steps = 99;
    x.step = 20;
    x.wall_s += 4.0;
    ps_http_publish(h, &x);
    ck_assert_int_eq(s_http(port, get, buf, sizeof buf), 200);
    s_has(buf, "text/plain; version=0.0.4");
    s_has(buf, "\nkfac_step 20\n");
    s_has(buf, "kfac_steps_per_second 2.5\n"); /* (20 - 10) / 4 s */
    s_has(buf, "factor=\"1\"} 99\n");
    blocks[1].age_steps = 7; /* after the publish: the server serves its own copy, still 99 */
    ck_assert_int_eq(s_http(port, get, buf, sizeof buf), 200);
    s_has(buf, "factor=\"1\"} 99\n");
    ck_assert_int_eq(s_http(port, "GET /other HTTP/1.0\r\n\r\n", buf, sizeof buf), 404);
    ck_assert_int_eq(s_http(port, "DELETE /metrics HTTP/1.0\r\n\r\n", buf, sizeof buf), 405);
    int code = s_http(port, "\x01\x02garbage\r\n\r\n", buf, sizeof buf);
    ck_assert_msg(code == -1 || code >= 400, "garbage answered with %d", code);
    ck_assert_int_eq(s_http(port, get, buf, sizeof buf), 200); /* still serving */
    /* the same port again: a clear error */
    char addr[64];
    snprintf(addr, sizeof addr, "127.0.0.1:%d", port);
    ck_assert_ptr_null(ps_http_new(addr, 0, err, sizeof err));
    s_has(err, "[ps] metrics = 127.0.0.1:");
    ps_http_free(&h);
    ck_assert_ptr_null(h);
    ps_http_free(&h);
}
END_TEST

START_TEST(test_ps_http_bad_address) {
    static const char *const bad[] = {"", "9464", "127.0.0.1", "127.0.0.1:", "127.0.0.1:70000", "127.0.0.1:x",
                                      "example.org:9464", "*:9464"};
    for (size_t i = 0; i < sizeof bad / sizeof bad[0]; i++) {
        char err[400] = "";
        ps_http_t *h = ps_http_new(bad[i], 0, err, sizeof err);
        ck_assert_msg(h == NULL, "'%s' accepted", bad[i]);
        ck_assert_msg(strncmp(err, "[ps] metrics = ", 15) == 0, "'%s': %s", bad[i], err);
    }
    /* "*" is no shorthand for every interface: the refusal names both choices */
    char err[400] = "";
    ck_assert_int_lt(ps_http_addr_check("*:9464", err, sizeof err), 0);
    ck_assert_msg(strstr(err, "127.0.0.1:9464") && strstr(err, "0.0.0.0:9464"), "%s", err);
    /* no host: this host only */
    ps_http_t *h = ps_http_new(":0", 0, err, sizeof err);
    ck_assert_msg(h != NULL, "%s", err);
    ck_assert_int_gt(ps_http_port(h), 0);
    ps_http_free(&h);
}
END_TEST

Suite *make_suite(void) {
    Suite *s = suite_create("ps_http");
    TCase *tc = tcase_create("core");
    tcase_set_timeout(tc, 30);
    tcase_add_test(tc, test_ps_http_format);
    tcase_add_test(tc, test_ps_http_serves_snapshot);
    tcase_add_test(tc, test_ps_http_bad_address);
    suite_add_tcase(s, tc);
    return s;
}
