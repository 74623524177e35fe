/* bench/bench_msg.c — the cost of proto/'s encode, decode and validation
 * for the messages that carry a model: a Params and a GradPush of the wide
 * model (models/mnist-cnn-wide.model: 3,274,634 parameters), a GradPush
 * with fc1 factored (32 rows), and two small messages (Heartbeat, Welcome)
 * where the per-field work is all there is. Prints figures; never passes or
 * fails on time.
 *
 *   build/bench/bench_msg [--reps R] [--case NAME]
 *
 * Each case: R rounds (default 20, after one untimed) of msg_encode_to into
 * a kept buffer, msg_decode, msg_validate against the model's shape and
 * msg_clear; the small messages run 1000 times per round. Prints the median
 * per message in microseconds for each of the four, then one line a script
 * reads per case (--case: that one alone; names as printed):
 *   msg case=NAME bytes=N encode_us=... decode_us=... validate_us=... clear_us=...
 * Under `valgrind --tool=callgrind` (with --reps 1) the instruction counts of
 * msg_encode_to, msg_decode, msg_validate and msg_clear are the steady
 * figures on a shared machine.
 */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "bench/bench_util.h"
#include "common/base/clock.h"
#include "proto/msg.h"

#define S_N_PARAMS 3274634u /* the wide model's arena */
#define S_FC1_OUT 1024u
#define S_FC1_IN 3136u
#define S_ROWS 32u

static int s_cmp(const void *a, const void *b) {
    double x = *(const double *)a, y = *(const double *)b;
    return (x > y) - (x < y);
}

/* The wide model's factors as the validator sees them: conv1 (A 26, G 32),
 * conv2 (A 801, G 64), fc1 doubly factored (K, Psi, G, G_bias), fc2 (A
 * 1025, G 10); fc1 and fc2 may be sent factored. */
static msg_layer_shape_t s_layers[4];
static msg_model_shape_t s_model;

static void s_model_init(void) {
    memset(s_layers, 0, sizeof s_layers);
    const uint32_t conv[2][2] = { { 26, 32 }, { 801, 64 } };
    for (int l = 0; l < 2; l++) {
        s_layers[l].n_factors = 2;
        s_layers[l].kind[0] = MSG_FACTOR_A, s_layers[l].n[0] = conv[l][0];
        s_layers[l].kind[1] = MSG_FACTOR_G, s_layers[l].n[1] = conv[l][1];
        s_layers[l].n_blocks[0] = s_layers[l].n_blocks[1] = 1;
    }
    const msg_factor_kind_t dk[4] = { MSG_FACTOR_K, MSG_FACTOR_PSI, MSG_FACTOR_G, MSG_FACTOR_G_BIAS };
    const uint32_t dn[4] = { 64, 49, 1024, 1024 };
    s_layers[2].n_factors = 4;
    for (int f = 0; f < 4; f++) s_layers[2].kind[f] = dk[f], s_layers[2].n[f] = dn[f], s_layers[2].n_blocks[f] = 1;
    s_layers[2].fc_out = S_FC1_OUT, s_layers[2].fc_in = S_FC1_IN;
    s_layers[3].n_factors = 2;
    s_layers[3].kind[0] = MSG_FACTOR_A, s_layers[3].n[0] = 1025;
    s_layers[3].kind[1] = MSG_FACTOR_G, s_layers[3].n[1] = 10;
    s_layers[3].n_blocks[0] = s_layers[3].n_blocks[1] = 1;
    s_layers[3].fc_out = 10, s_layers[3].fc_in = 1024;
    s_model.n_params = S_N_PARAMS;
    s_model.n_state = 0;
    s_model.n_layers = 4;
    s_model.layers = s_layers;
}

static float *s_floats(size_t n) {
    float *x = malloc((n ? n : 1) * sizeof *x);
    if (!x) {
        fprintf(stderr, "bench_msg: out of memory for %zu floats\n", n);
        exit(1);
    }
    for (size_t i = 0; i < n; i++) x[i] = 0.25f + (float)(i % 97) * 1e-3f;
    return x;
}

/* Statistics of every layer with the model's sizes (arrays owned by st). */
static void s_stats_fill(msg_stats_t *st) {
    st->n_layers = 4;
    st->layers = calloc(4, sizeof *st->layers);
    for (uint32_t l = 0; l < 4; l++) {
        msg_layer_stats_t *ls = &st->layers[l];
        ls->layer = l;
        ls->n_factors = s_layers[l].n_factors;
        ls->factors = calloc(ls->n_factors, sizeof *ls->factors);
        for (size_t f = 0; f < ls->n_factors; f++) {
            msg_factor_t *fa = &ls->factors[f];
            fa->kind = s_layers[l].kind[f];
            fa->n = s_layers[l].n[f];
            fa->n_blocks = 1;
            fa->n_data = msg_packed_len(fa->n);
            fa->data = s_floats(fa->n_data);
        }
    }
}

static void s_stats_free(msg_stats_t *st) {
    for (size_t l = 0; l < st->n_layers; l++) {
        for (size_t f = 0; f < st->layers[l].n_factors; f++) free(st->layers[l].factors[f].data);
        free(st->layers[l].factors);
    }
    free(st->layers);
}

static const char *s_only; /* --case, or NULL: every case */

/* Times R rounds of `inner` encode/decode/validate/clear of m. */
static int s_run(const char *name, const msg_t *m, const msg_limits_t *lim, int reps, int inner) {
    if (s_only && strcmp(s_only, name) != 0) return 0;
    size_t cap = 0, len = 0;
    msg_encode_to(m, (uint8_t *)"", 0, &cap);
    uint8_t *buf = malloc(cap ? cap : 1);
    double *t[4];
    for (int k = 0; k < 4; k++) t[k] = calloc((size_t)reps, sizeof(double));
    char err[256];
    int rc = 0;
    for (int r = -1; r < reps && rc == 0; r++) {
        double s[4] = { 0, 0, 0, 0 };
        for (int i = 0; i < inner && rc == 0; i++) {
            msg_t out;
            double t0 = clock_now_ms();
            rc = msg_encode_to(m, buf, cap, &len);
            double t1 = clock_now_ms();
            if (rc == 0) rc = msg_decode(buf, len, &out, err, sizeof err);
            double t2 = clock_now_ms();
            if (rc == 0) rc = msg_validate(&out, lim, err, sizeof err);
            double t3 = clock_now_ms();
            msg_clear(&out);
            double t4 = clock_now_ms();
            s[0] += t1 - t0, s[1] += t2 - t1, s[2] += t3 - t2, s[3] += t4 - t3;
        }
        if (r >= 0)
            for (int k = 0; k < 4; k++) t[k][r] = s[k] * 1e3 / inner;
    }
    if (rc != 0) {
        fprintf(stderr, "bench_msg: %s failed (%d): %s\n", name, rc, err);
    } else {
        for (int k = 0; k < 4; k++) qsort(t[k], (size_t)reps, sizeof(double), s_cmp);
        printf("msg case=%s bytes=%zu encode_us=%.2f decode_us=%.2f validate_us=%.2f clear_us=%.2f\n", name, len,
               t[0][reps / 2], t[1][reps / 2], t[2][reps / 2], t[3][reps / 2]);
    }
    for (int k = 0; k < 4; k++) free(t[k]);
    free(buf);
    return rc;
}

int main(int argc, char **argv) {
    int reps = 20;
    for (int i = 1; i < argc; i++) {
        if (strcmp(argv[i], "--reps") == 0 && i + 1 < argc) {
            reps = atoi(argv[++i]);
        } else if (strcmp(argv[i], "--case") == 0 && i + 1 < argc) {
            s_only = argv[++i];
        } else {
            fprintf(stderr, "usage: bench_msg [--reps R] [--case NAME]\n");
            return 2;
        }
    }
    if (reps < 1 || reps > 100000) {
        fprintf(stderr, "bench_msg: --reps must be 1..100000\n");
        return 2;
    }
    bench_print_machine();
    bench_print_load("", "before");
    s_model_init();
    msg_limits_t lim;
    msg_limits_default(&lim);
    lim.model = &s_model;
    lim.max_rows = 128;
    int rc = 0;

    msg_t p;
    msg_init(&p, MSG_PARAMS, MSG_ROLE_PS, 0);
    uint32_t stats_layers[3] = { 0, 2, 3 };
    p.params.version = 7;
    p.params.params = s_floats(S_N_PARAMS);
    p.params.n_params = S_N_PARAMS;
    p.params.want_stats = 1;
    p.params.stats_layers = stats_layers;
    p.params.n_stats_layers = 3;
    rc |= s_run("params", &p, &lim, reps, 1);

    msg_t g;
    msg_init(&g, MSG_GRAD_PUSH, MSG_ROLE_WORKER, 3);
    g.grad_push.version = 7;
    g.grad_push.loss = 0.5;
    g.grad_push.n_examples = 128;
    g.grad_push.n_correct = 100;
    g.grad_push.compute_ms = 12.5;
    g.grad_push.grad = p.params.params;
    g.grad_push.n_grad = S_N_PARAMS;
    s_stats_fill(&g.grad_push.stats);
    rc |= s_run("grad_push_stats", &g, &lim, reps, 1);

    msg_lowrank_t lr = { .layer = 2, .n_rows = S_ROWS };
    lr.n_d = (size_t)S_ROWS * S_FC1_OUT;
    lr.d = s_floats(lr.n_d);
    lr.n_x = (size_t)S_ROWS * S_FC1_IN;
    lr.x = s_floats(lr.n_x);
    msg_t gf = g;
    memset(&gf.grad_push.stats, 0, sizeof gf.grad_push.stats);
    gf.grad_push.n_grad = S_N_PARAMS - (size_t)S_FC1_OUT * S_FC1_IN;
    gf.grad_push.lowrank = &lr;
    gf.grad_push.n_lowrank = 1;
    rc |= s_run("grad_push_factored", &gf, &lim, reps, 1);

    msg_t h;
    msg_init(&h, MSG_HEARTBEAT, MSG_ROLE_WORKER, 3);
    h.heartbeat.mono_ns = 123456789;
    h.heartbeat.echo_ns = 12345678;
    rc |= s_run("heartbeat", &h, &lim, reps, 1000);

    msg_t w;
    msg_init(&w, MSG_WELCOME, MSG_ROLE_PS, 0);
    w.welcome.model_text = "input 1x28x28\nfc name=fc1 out=10\nsoftmax_xent\n";
    w.welcome.config_text = "[kfac]\ndamping = 0.001\n";
    w.welcome.params_version = 7;
    w.welcome.n_params = S_N_PARAMS;
    w.welcome.rank = 1;
    w.welcome.n_ranks = 2;
    w.welcome.assigned_id = 3;
    rc |= s_run("welcome", &w, &lim, reps, 1000);

    bench_print_load("", "after");
    s_stats_free(&g.grad_push.stats);
    free(p.params.params);
    free(lr.d);
    free(lr.x);
    return rc ? 1 : 0;
}
