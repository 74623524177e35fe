/* tests/fuzz/fuzz_msg_seeds.c — writes the message harness's seed corpus:
 * one real, valid message of every type (as the daemons send them, against
 * the fuzz model of fuzz_model.h, statistics of every factor kind) into
 * DIR/<type>.bin. Usage: fuzz_msg_seeds DIR. Exit 0, or 1 with the reason. */
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "proto/msg.h"
#include "tests/fuzz/fuzz_model.h"

static float s_buf[4096];

static int s_write(const char *dir, const char *name, msg_t *m) {
    msg_limits_t lim;
    char err[512], path[1024];
    fuzz_model_limits(&lim);
    if (msg_validate(m, &lim, err, sizeof err) != 0) {
        fprintf(stderr, "fuzz_msg_seeds: %s does not validate: %s\n", name, err);
        return -1;
    }
    uint8_t *buf = NULL;
    size_t len = 0;
    if (msg_encode(m, &buf, &len) != 0) {
        fprintf(stderr, "fuzz_msg_seeds: %s: encode failed\n", name);
        return -1;
    }
    snprintf(path, sizeof path, "%s/%s.bin", dir, name);
    FILE *f = fopen(path, "wb");
    int ok = f && fwrite(buf, 1, len, f) == len;
    if (f && fclose(f) != 0) ok = 0;
    free(buf);
    if (!ok) fprintf(stderr, "fuzz_msg_seeds: %s: %s\n", path, strerror(errno));
    return ok ? 0 : -1;
}

/* Statistics of every layer with factors, data from s_buf (identity-like). */
static msg_factor_t s_fac[7];
static msg_layer_stats_t s_ls[3];
static void s_stats(msg_stats_t *st) {
    msg_limits_t lim;
    fuzz_model_limits(&lim);
    int k = 0;
    for (uint32_t li = 0; li < 3; li++) {
        const msg_layer_shape_t *ls = &lim.model->layers[li];
        s_ls[li] = (msg_layer_stats_t){.layer = li, .factors = &s_fac[k], .n_factors = ls->n_factors};
        for (uint32_t j = 0; j < ls->n_factors; j++, k++) {
            uint32_t n = ls->n[j], nb = ls->n_blocks[j];
            s_fac[k] = (msg_factor_t){.kind = ls->kind[j], .n = n, .n_blocks = nb, .data = s_buf,
                                      .n_data = (size_t)nb * n * (n + 1) / 2};
        }
    }
    st->layers = s_ls;
    st->n_layers = 3;
}

int main(int argc, char **argv) {
    if (argc != 2) {
        fprintf(stderr, "usage: fuzz_msg_seeds DIR\n");
        return 1;
    }
    const char *dir = argv[1];
    for (size_t i = 0; i < sizeof s_buf / sizeof s_buf[0]; i++) s_buf[i] = (i % 7 == 0) ? 1.0f : 0.01f * (float)(i % 5);
    int rc = 0;
    msg_t m;
    char host[] = "host", build[] = "kfac 0.1 (protocol 1)", text[] = "[run]\nsteps = 10\n", reason[] = "done";
    char model[] = "input 1x4x4\nfc 3\n";

    msg_init(&m, MSG_HELLO, MSG_ROLE_WORKER, 0);
    m.hello.build_id = build; m.hello.host = host; m.hello.pid = 42;
    rc |= s_write(dir, "hello", &m);

    msg_init(&m, MSG_WELCOME, MSG_ROLE_PS, 0);
    m.welcome.model_text = model; m.welcome.config_text = text; m.welcome.n_params = FUZZ_N_PARAMS;
    m.welcome.n_state = FUZZ_N_STATE; m.welcome.rank = 1; m.welcome.n_ranks = 2; m.welcome.assigned_id = 7;
    rc |= s_write(dir, "welcome", &m);

    msg_init(&m, MSG_REFUSE, MSG_ROLE_PS, 0);
    m.refuse.text = reason;
    rc |= s_write(dir, "refuse", &m);

    msg_init(&m, MSG_GET_PARAMS, MSG_ROLE_WORKER, 3);
    m.get_params.min_version = 5;
    rc |= s_write(dir, "get_params", &m);

    msg_init(&m, MSG_PARAMS, MSG_ROLE_PS, 0);
    m.params.version = 5; m.params.params = s_buf; m.params.n_params = FUZZ_N_PARAMS;
    m.params.state = s_buf; m.params.n_state = FUZZ_N_STATE; m.params.want_stats = 1;
    rc |= s_write(dir, "params", &m);

    msg_init(&m, MSG_GRAD_PUSH, MSG_ROLE_WORKER, 3);
    m.grad_push.version = 5; m.grad_push.loss = 0.5; m.grad_push.n_examples = 16; m.grad_push.n_correct = 9;
    m.grad_push.grad = s_buf; m.grad_push.n_grad = FUZZ_N_PARAMS; m.grad_push.compute_ms = 3.0;
    s_stats(&m.grad_push.stats);
    rc |= s_write(dir, "grad_push", &m);

    /* the same with layer 0's weights (fc 4 -> 3) as 2 rows of D and X */
    msg_lowrank_t lr = {.layer = 0, .n_rows = 2, .d = s_buf, .n_d = 6, .x = s_buf, .n_x = 8};
    m.grad_push.grad = s_buf; m.grad_push.n_grad = FUZZ_N_PARAMS - 12;
    m.grad_push.lowrank = &lr; m.grad_push.n_lowrank = 1;
    rc |= s_write(dir, "grad_push_factored", &m);

    msg_init(&m, MSG_STATS_PUSH, MSG_ROLE_STATSD, 4);
    m.stats_push.params_version = 5; m.stats_push.n_examples = 16; m.stats_push.compute_ms = 2.0;
    s_stats(&m.stats_push.stats);
    rc |= s_write(dir, "stats_push", &m);

    msg_init(&m, MSG_JOB_REQUEST, MSG_ROLE_INVERTD, 5);
    m.job_request.max_n = 64;
    rc |= s_write(dir, "job_request", &m);

    msg_init(&m, MSG_JOB, MSG_ROLE_PS, 0);
    m.job.job_id = 11; m.job.layer = 0; m.job.factor = 0; m.job.factor_version = 4;
    m.job.method = MSG_METHOD_CHOLESKY; m.job.damping = 0.01; m.job.n = 5; m.job.packed = s_buf; m.job.n_packed = 15;
    rc |= s_write(dir, "job", &m);

    msg_init(&m, MSG_JOB_RESULT, MSG_ROLE_INVERTD, 5);
    m.job_result.job_id = 11; m.job_result.layer = 0; m.job_result.factor = 0; m.job_result.factor_version = 4;
    m.job_result.method = MSG_METHOD_CHOLESKY; m.job_result.n = 5; m.job_result.damping = 0.01;
    m.job_result.inverse = s_buf; m.job_result.n_inverse = 15;
    rc |= s_write(dir, "job_result_cholesky", &m);

    msg_init(&m, MSG_JOB_RESULT, MSG_ROLE_INVERTD, 5);
    m.job_result.job_id = 12; m.job_result.layer = 0; m.job_result.factor = 1; m.job_result.factor_version = 4;
    m.job_result.method = MSG_METHOD_EIGEN; m.job_result.n = 3; m.job_result.damping = 0.01;
    m.job_result.eigvecs = s_buf; m.job_result.n_eigvecs = 9; m.job_result.eigvals = s_buf; m.job_result.n_eigvals = 3;
    rc |= s_write(dir, "job_result_eigen", &m);

    msg_init(&m, MSG_HEARTBEAT, MSG_ROLE_WORKER, 3);
    m.heartbeat.mono_ns = 123456789; m.heartbeat.echo_ns = 0;
    rc |= s_write(dir, "heartbeat", &m);

    msg_init(&m, MSG_ERROR, MSG_ROLE_PS, 0);
    m.error.code = MSG_ERR_INVALID; m.error.text = reason;
    rc |= s_write(dir, "error", &m);

    msg_init(&m, MSG_BYE, MSG_ROLE_WORKER, 3);
    m.bye.text = reason;
    rc |= s_write(dir, "bye", &m);

    msg_init(&m, MSG_SHUTDOWN, MSG_ROLE_PS, 0);
    m.shutdown.text = reason;
    rc |= s_write(dir, "shutdown", &m);
    return rc ? 1 : 0;
}
