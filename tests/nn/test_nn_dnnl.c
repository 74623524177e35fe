/* tests/nn/test_nn_dnnl.c — the oneDNN conv engine (common/nn/nn_dnnl.c)
 * against its reference, im2col + OpenBLAS (nn.c), on fresh random shapes,
 * parameters and inputs each run. The seed is printed on failure;
 * KFAC_TEST_SEED=<n> replays a run.
 *
 * Method. Two nets are built from the same model text and parameters, one
 * on each engine:
 *     input CxHxW, dropout p=0 (name x0: its dy is the input gradient),
 *     conv (out, k, stride, pad, bias drawn), flatten, fc 3, softmax_xent
 * with C 1-5, H and W 3-12, k 1-5, stride 1-3, pad 0..k-1, out 1-9, batch
 * 1-9 and 1 or 3 threads (net_set_threads: parts of 0-3 examples). Both run
 * net_forward (train) and net_backward on the same inputs and labels, and
 * these are compared: the conv output y, its weight and bias gradients, and
 * the input gradient (x0's dy), per tensor
 *     max_j |a_j - b_j| / max(max_j |a_j|, max_j |b_j|, 1e-3) <= 1e-4.
 * The engines differ by summation order only: a sum of N float32 products
 * carries a relative rounding error of order sqrt(N) * 6e-8 (N <= 125 taps
 * forward, <= 1300 positions in the weight gradient), 1e-5 at most; a wrong
 * index, stride, padding or a missing term gives errors of order 1.
 *
 * Also checked: the patches oneDNN does not form are made on demand
 * (net_conv_patches) bit for bit as the reference forms them (K-FAC reads
 * them); a conv whose input feeds another layer too adds its input gradient
 * (residual block); and two passes of the same oneDNN net give identical
 * bits for a given thread count (what tests/integration/55-deterministic.sh
 * relies on).
 *
 * Where run-time code generation is denied (systemd's
 * MemoryDenyWriteExecute=yes, imitated here by the same seccomp filter in
 * the forked test process), oneDNN cannot make its primitives: the probe
 * says so, "auto" keeps every conv layer on OpenBLAS and trains, and
 * "onednn" is refused.
 *
 * Skipped (exit 77) only where oneDNN cannot run (nn_dnnl_probe returns
 * 0 and says why). A oneDNN that runs and gives a wrong result (the probe
 * returns -EIO) is not skipped: test_nn_dnnl_probe_is_right fails, and so
 * does every engine choice but blas (KFAC_TEST_ONEDNN_WRONG=1 forces it).
 */
#include <check.h>
#include <errno.h>
#include <linux/filter.h>
#include <linux/seccomp.h>
#include <math.h>
#include <stddef.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/prctl.h>
#include <sys/syscall.h>

#include "common/base/rng.h"
#include "common/nn/nn.h"
#include "common/nn/nn_dnnl.h"
#include "tests/lib/check_main.h"
#include "tests/lib/seed.h"

#define TOL 1e-4
#define DRAWS 12

int suite_skip_reason(char *why, size_t why_len) { return nn_dnnl_probe(why, why_len) == 0; }

static int s_between(rng_t *r, int lo, int hi) { return lo + (int)rng_below(r, (uint32_t)(hi - lo + 1)); }

/* max |a - b| / max(max |a|, max |b|, 1e-3). */
static double s_rel_err(const float *a, const float *b, size_t n) {
    double d = 0.0, m = 1e-3;
    for (size_t j = 0; j < n; j++) {
        double e = fabs((double)a[j] - b[j]);
        if (e > d) d = e;
        if (fabs(a[j]) > m) m = fabs(a[j]);
        if (fabs(b[j]) > m) m = fabs(b[j]);
    }
    return d / m;
}

static net_t *s_build(const char *text, int batch, int threads, nn_conv_engine_t engine) {
    char err[512];
    net_t *net = net_parse(text, "test_nn_dnnl", batch, err, sizeof err);
    ck_assert_msg(net != NULL, "net_parse: %s\n%s", err, text);
    ck_assert_int_eq(net_set_threads(net, threads), 0);
    ck_assert_msg(net_set_conv_engine(net, engine, err, sizeof err) == 0, "%s", err);
    return net;
}

/* Patches on demand (what K-FAC reads) of conv layer li, exactly as the
 * reference formed them: for a conv that reads the same input in both nets. */
static void s_same_patches(net_t *ref, net_t *dn, int li, int n, const char *text) {
    const layer_t *a = &ref->layers[li];
    ck_assert_int_eq(net_conv_patches(dn, &dn->layers[li]), 0);
    const size_t n_cols = (size_t)a->in_c * a->k * a->k * n * a->h * a->w;
    ck_assert_msg(memcmp(a->cols, dn->layers[li].cols, n_cols * sizeof(float)) == 0, "patches differ\n%s", text);
}

/* Run both nets on the same batch and compare the conv layer's tensors. */
static void s_compare(net_t *ref, net_t *dn, const char *conv, rng_t *r, int n, const char *text, uint64_t seed) {
    net_init_params(ref, rng_u64(r));
    for (size_t j = 0; j < ref->n_params; j++) ref->params[j] += (float)(0.1 * rng_normal(r)); /* biases off 0 */
    memcpy(dn->params, ref->params, ref->n_params * sizeof(float));
    float *x = malloc((size_t)n * ref->in_size * sizeof(float));
    int *y = malloc((size_t)n * sizeof(int));
    ck_assert(x && y);
    for (size_t j = 0; j < (size_t)n * ref->in_size; j++) x[j] = (float)rng_normal(r);
    for (int i = 0; i < n; i++) y[i] = (int)rng_below(r, (uint32_t)ref->n_classes);
    ck_assert_int_eq(net_forward(ref, x, n, 1), 0);
    ck_assert_int_eq(net_forward(dn, x, n, 1), 0);
    net_backward(ref, y, NULL, NULL);
    net_backward(dn, y, NULL, NULL);
    const int li = net_find_layer(ref, conv), x0 = net_find_layer(ref, "x0");
    ck_assert(li >= 0 && x0 >= 0);
    const layer_t *a = &ref->layers[li], *b = &dn->layers[li];
    ck_assert_msg(b->dnnl != NULL, "the conv layer is not on oneDNN");
    double e[4] = {s_rel_err(a->y, b->y, (size_t)n * a->size), s_rel_err(a->dweight, b->dweight, a->n_w),
                   a->n_b ? s_rel_err(a->dbias, b->dbias, a->n_b) : 0.0,
                   s_rel_err(ref->layers[x0].dy, dn->layers[x0].dy, (size_t)n * ref->in_size)};
    static const char *what[4] = {"y", "dW", "db", "dx"};
    for (int k = 0; k < 4; k++)
        ck_assert_msg(e[k] <= TOL, "%s: relative error %.3g > %g (seed %llu, batch %d, threads %d)\n%s", what[k], e[k],
                      TOL, (unsigned long long)seed, n, net_threads(dn), text);
    if (a->in == x0) s_same_patches(ref, dn, li, n, text);
    free(x);
    free(y);
}

START_TEST(test_nn_dnnl_conv_matches_blas) {
    uint64_t seed = test_seed();
    rng_t r;
    rng_seed(&r, seed);
    for (int d = 0; d < DRAWS; d++) {
        const int C = s_between(&r, 1, 5), H = s_between(&r, 3, 12), W = s_between(&r, 3, 12);
        int k = s_between(&r, 1, 5);
        if (k > H) k = H;
        if (k > W) k = W;
        const int s = s_between(&r, 1, 3), pad = s_between(&r, 0, k - 1), O = s_between(&r, 1, 9);
        const int n = s_between(&r, 1, 9), threads = rng_below(&r, 2) ? 3 : 1, bias = (int)rng_below(&r, 2);
        char text[512];
        snprintf(text, sizeof text,
                 "input %dx%dx%d\ndropout p=0 name=x0\nconv name=c out=%d k=%d stride=%d pad=%d bias=%d\n"
                 "flatten\nfc out=3\nsoftmax_xent\n",
                 C, H, W, O, k, s, pad, bias);
        net_t *ref = s_build(text, n, threads, NN_CONV_ENGINE_BLAS);
        net_t *dn = s_build(text, n, threads, NN_CONV_ENGINE_ONEDNN);
        s_compare(ref, dn, "c", &r, n, text, seed);
        net_free(&ref);
        net_free(&dn);
    }
}
END_TEST

START_TEST(test_nn_dnnl_fan_out_adds_input_gradient) {
    uint64_t seed = test_seed();
    rng_t r;
    rng_seed(&r, seed);
    for (int d = 0; d < DRAWS / 2; d++) {
        /* c2's input (a) also feeds the add: c2 must add into a's dy, not overwrite the add's share. */
        const int C = s_between(&r, 1, 4), H = s_between(&r, 4, 10), k = 2 * s_between(&r, 0, 2) + 1;
        const int n = s_between(&r, 1, 6), threads = rng_below(&r, 2) ? 3 : 1;
        char text[512];
        snprintf(text, sizeof text,
                 "input %dx%dx%d\ndropout p=0 name=x0\nconv name=a out=%d k=%d pad=%d\n"
                 "conv name=c2 out=%d k=%d pad=%d\nadd from=a\nflatten\nfc out=3\nsoftmax_xent\n",
                 C, H, H, C, k, k / 2, C, k, k / 2);
        net_t *ref = s_build(text, n, threads, NN_CONV_ENGINE_BLAS);
        net_t *dn = s_build(text, n, threads, NN_CONV_ENGINE_ONEDNN);
        s_compare(ref, dn, "c2", &r, n, text, seed);
        /* and the first conv, which reads the input gradient c2 and the add left in a's dy */
        const int la = net_find_layer(ref, "a");
        double e = s_rel_err(ref->layers[la].dweight, dn->layers[la].dweight, ref->layers[la].n_w);
        ck_assert_msg(e <= TOL, "a.dW: relative error %.3g (seed %llu)\n%s", e, (unsigned long long)seed, text);
        s_same_patches(ref, dn, la, n, text);
        net_free(&ref);
        net_free(&dn);
    }
}
END_TEST

START_TEST(test_nn_dnnl_batch_sizes_change) {
    /* Passes of changing sizes over 2 and 3 threads: more part sizes than the primitives kept, so some are
     * made again; every pass still matches the reference and the layer stays on oneDNN. */
    uint64_t seed = test_seed();
    rng_t r;
    rng_seed(&r, seed);
    const char *text = "input 3x9x9\ndropout p=0 name=x0\nconv name=c out=5 k=3 pad=1\nflatten\nfc out=3\nsoftmax_xent\n";
    static const int sizes[] = {9, 7, 5, 3, 8, 9, 1, 2, 6, 4, 9, 7};
    for (int threads = 2; threads <= 3; threads++) {
        net_t *ref = s_build(text, 9, threads, NN_CONV_ENGINE_BLAS);
        net_t *dn = s_build(text, 9, threads, NN_CONV_ENGINE_ONEDNN);
        for (size_t i = 0; i < sizeof sizes / sizeof sizes[0]; i++) {
            s_compare(ref, dn, "c", &r, sizes[i], text, seed);
            ck_assert_int_eq(net_conv_onednn_layers(dn), 1);
        }
        net_free(&ref);
        net_free(&dn);
    }
}
END_TEST

START_TEST(test_nn_dnnl_repeats_bit_for_bit) {
    uint64_t seed = test_seed();
    rng_t r;
    rng_seed(&r, seed);
    const int n = 16;
    for (int threads = 1; threads <= 2; threads++) {
        net_t *net = s_build("input 1x28x28\nconv name=c1 out=16 k=5 pad=2\nrelu\nmaxpool k=2\n"
                             "conv name=c2 out=32 k=5 pad=2\nrelu\nmaxpool k=2\nflatten\nfc out=10\nsoftmax_xent\n",
                             n, threads, NN_CONV_ENGINE_ONEDNN);
        net_init_params(net, seed);
        float *x = malloc((size_t)n * net->in_size * sizeof(float)), *g = malloc(net->n_params * sizeof(float));
        int y[16];
        ck_assert(x && g);
        for (size_t j = 0; j < (size_t)n * net->in_size; j++) x[j] = (float)rng_normal(&r);
        for (int i = 0; i < n; i++) y[i] = (int)rng_below(&r, 10);
        for (int rep = 0; rep < 2; rep++) {
            ck_assert_int_eq(net_forward(net, x, n, 1), 0);
            net_backward(net, y, NULL, NULL);
            if (rep == 0) memcpy(g, net->grads, net->n_params * sizeof(float));
        }
        ck_assert_msg(memcmp(g, net->grads, net->n_params * sizeof(float)) == 0,
                      "two passes differ (%d threads)", threads);
        ck_assert_int_eq(net_conv_onednn_layers(net), 2);
        free(x);
        free(g);
        net_free(&net);
    }
}
END_TEST

START_TEST(test_nn_dnnl_auto_follows_the_measured_rule) {
    /* models/mnist-cnn.model's layers: conv1 (1 input channel) stays on OpenBLAS, conv2 (16 -> 32, 5x5) and a
     * 4-channel 3x3 conv go to oneDNN; a 1x1 conv and a 3x3 one with 2 input channels stay. */
    net_t *net = s_build("input 1x28x28\nconv name=conv1 out=16 k=5 pad=2\nrelu\nmaxpool k=2\n"
                         "conv name=conv2 out=32 k=5 pad=2\nconv name=c3 out=2 k=1\nconv name=c4 out=4 k=3\n"
                         "conv name=c5 out=8 k=3 in=c4\nflatten\nfc out=10\nsoftmax_xent\n",
                         4, 1, NN_CONV_ENGINE_AUTO);
    static const struct { const char *name; int onednn; } want[] = {
        {"conv1", 0}, {"conv2", 1}, {"c3", 0}, {"c4", 0}, {"c5", 1}};
    for (int i = 0; i < 5; i++) {
        const layer_t *l = &net->layers[net_find_layer(net, want[i].name)];
        ck_assert_msg((l->dnnl != NULL) == want[i].onednn, "%s: on oneDNN %d, want %d", want[i].name,
                      l->dnnl != NULL, want[i].onednn);
        ck_assert_int_eq(nn_conv_engine_pick(l) == NN_CONV_ENGINE_ONEDNN, want[i].onednn);
    }
    ck_assert_int_eq(net_conv_onednn_layers(net), 2);
    ck_assert_int_eq(net_set_conv_engine(net, NN_CONV_ENGINE_BLAS, NULL, 0), 0);
    ck_assert_int_eq(net_conv_onednn_layers(net), 0);
    net_free(&net);
}
END_TEST

/* What systemd's MemoryDenyWriteExecute=yes installs (seccomp, EPERM):
 * mmap asking for PROT_WRITE and PROT_EXEC together, and mprotect or
 * pkey_mprotect adding PROT_EXEC. For this process and its threads from
 * now on; Check forks each test, so only this test is affected. */
static int s_deny_write_execute(void) {
    struct sock_filter f[] = {
        BPF_STMT(BPF_LD | BPF_W | BPF_ABS, offsetof(struct seccomp_data, nr)),
        BPF_JUMP(BPF_JMP | BPF_JEQ | BPF_K, __NR_mmap, 0, 3),
        BPF_STMT(BPF_LD | BPF_W | BPF_ABS, offsetof(struct seccomp_data, args[2])),
        BPF_JUMP(BPF_JMP | BPF_JSET | BPF_K, PROT_EXEC, 0, 6),     /* mmap without exec: allow */
        BPF_JUMP(BPF_JMP | BPF_JSET | BPF_K, PROT_WRITE, 4, 5),    /* write and exec: deny */
        BPF_JUMP(BPF_JMP | BPF_JEQ | BPF_K, __NR_mprotect, 1, 0),
        BPF_JUMP(BPF_JMP | BPF_JEQ | BPF_K, __NR_pkey_mprotect, 0, 3),
        BPF_STMT(BPF_LD | BPF_W | BPF_ABS, offsetof(struct seccomp_data, args[2])),
        BPF_JUMP(BPF_JMP | BPF_JSET | BPF_K, PROT_EXEC, 0, 1),     /* adding exec: deny */
        BPF_STMT(BPF_RET | BPF_K, SECCOMP_RET_ERRNO | EPERM),
        BPF_STMT(BPF_RET | BPF_K, SECCOMP_RET_ALLOW),
    };
    struct sock_fprog prog = {(unsigned short)(sizeof f / sizeof f[0]), f};
    if (prctl(PR_SET_NO_NEW_PRIVS, 1, 0, 0, 0) != 0) return -1;
    return prctl(PR_SET_SECCOMP, SECCOMP_MODE_FILTER, &prog);
}

START_TEST(test_nn_dnnl_denied_code_generation_falls_back) {
    const char *fork_env = getenv("CK_FORK");
    ck_assert_msg(!fork_env || strcmp(fork_env, "no") != 0, "needs Check's fork mode (the filter stays on)");
    ck_assert_int_eq(s_deny_write_execute(), 0);
    /* the filter works: a page cannot become executable */
    void *page = mmap(NULL, 4096, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
    ck_assert(page != MAP_FAILED);
    ck_assert_int_eq(mprotect(page, 4096, PROT_READ | PROT_EXEC), -1);
    munmap(page, 4096);
    char why[256] = "";
    ck_assert_int_eq(nn_dnnl_probe(why, sizeof why), 0);
    ck_assert_msg(strstr(why, "oneDNN") != NULL, "%s", why);
    const char *text = "input 3x12x12\nconv name=c1 out=8 k=3 pad=1\nrelu\nconv name=c2 out=8 k=3\n"
                       "flatten\nfc out=3\nsoftmax_xent\n";
    net_t *net = s_build(text, 4, 2, NN_CONV_ENGINE_AUTO);
    ck_assert_int_eq(net_conv_onednn_layers(net), 0);
    char err[256];
    ck_assert_int_eq(net_set_conv_engine(net, NN_CONV_ENGINE_ONEDNN, err, sizeof err), -ENOTSUP);
    ck_assert_msg(strstr(err, "cannot run here") != NULL, "%s", err);
    ck_assert_int_eq(net_conv_onednn_layers(net), 0);
    /* and the net still trains on OpenBLAS: loss of a fixed batch goes down */
    net_init_params(net, 3);
    float x[4 * 3 * 12 * 12];
    int y[4] = {0, 1, 2, 1};
    rng_t r;
    rng_seed(&r, 5);
    for (size_t j = 0; j < sizeof x / sizeof x[0]; j++) x[j] = (float)rng_normal(&r);
    float first = 0.0f, last = 0.0f;
    for (int step = 0; step < 20; step++) {
        ck_assert_int_eq(net_forward(net, x, 4, 1), 0);
        last = net_backward(net, y, NULL, NULL);
        if (step == 0) first = last;
        for (size_t j = 0; j < net->n_params; j++) net->params[j] -= 0.05f * net->grads[j];
    }
    ck_assert_msg(last < 0.5f * first, "loss %g -> %g", first, last);
    net_free(&net);
}
END_TEST

START_TEST(test_nn_dnnl_probe_is_right) {
    char why[256] = "";
    ck_assert_msg(nn_dnnl_probe(why, sizeof why) == 1, "%s", why);
}
END_TEST

/* A wrong result (forced: the probe expects a wrong value) is an error for
 * onednn and auto alike, never a quiet fall-back to OpenBLAS. Check forks
 * each test, so the variable stays in this one. */
START_TEST(test_nn_dnnl_wrong_result_fails) {
    ck_assert_int_eq(setenv("KFAC_TEST_ONEDNN_WRONG", "1", 1), 0);
    char why[256] = "";
    ck_assert_int_eq(nn_dnnl_probe(why, sizeof why), -EIO);
    ck_assert_msg(strstr(why, "gave") != NULL, "%s", why);
    const char *text = "input 3x12x12\nconv name=c1 out=8 k=3 pad=1\nrelu\nconv name=c2 out=8 k=3\n"
                       "flatten\nfc out=3\nsoftmax_xent\n";
    net_t *net = s_build(text, 4, 1, NN_CONV_ENGINE_BLAS);
    const nn_conv_engine_t engines[2] = {NN_CONV_ENGINE_ONEDNN, NN_CONV_ENGINE_AUTO};
    for (int i = 0; i < 2; i++) {
        char err[256] = "";
        ck_assert_int_eq(net_set_conv_engine(net, engines[i], err, sizeof err), -EIO);
        ck_assert_msg(strstr(err, "broken") != NULL, "%s", err);
        ck_assert_int_eq(net_conv_onednn_layers(net), 0);
    }
    net_free(&net);
}
END_TEST

START_TEST(test_nn_dnnl_engine_names_round_trip) {
    for (int e = 0; e < NN_CONV_ENGINE_COUNT; e++) {
        nn_conv_engine_t got;
        ck_assert_int_eq(nn_conv_engine_parse(nn_conv_engine_name((nn_conv_engine_t)e), &got), 0);
        ck_assert_int_eq(got, e);
    }
    nn_conv_engine_t got;
    ck_assert_int_eq(nn_conv_engine_parse("mkl", &got), -EINVAL);
    ck_assert_ptr_null(nn_conv_engine_name(NN_CONV_ENGINE_COUNT));
}
END_TEST

Suite *make_suite(void) {
    Suite *s = suite_create("nn_dnnl");
    TCase *tc = tcase_create("core");
    tcase_set_timeout(tc, 60);
    tcase_add_test(tc, test_nn_dnnl_probe_is_right);
    tcase_add_test(tc, test_nn_dnnl_wrong_result_fails);
    tcase_add_test(tc, test_nn_dnnl_conv_matches_blas);
    tcase_add_test(tc, test_nn_dnnl_fan_out_adds_input_gradient);
    tcase_add_test(tc, test_nn_dnnl_batch_sizes_change);
    tcase_add_test(tc, test_nn_dnnl_repeats_bit_for_bit);
    tcase_add_test(tc, test_nn_dnnl_auto_follows_the_measured_rule);
    tcase_add_test(tc, test_nn_dnnl_engine_names_round_trip);
    tcase_add_test(tc, test_nn_dnnl_denied_code_generation_falls_back);
    suite_add_tcase(s, tc);
    return s;
}
