/* tests/backend/test_backend.c — the backend interface (common/backend/backend.h)
 * on the CPU, and what it does without a GPU. Runs everywhere; the CUDA
 * backend against this one (its checked twin) is tests/backend/test_backend_cuda.c.
 *
 * (a) CPU backend == direct calls, bit for bit (memcmp): logits, every
 *     layer's activations, probabilities, loss, hits, gradients, batch-norm
 *     running statistics, dropout seed and every K-FAC factor, in training
 *     and eval mode, on models that use every layer kind.
 * (c) backend_new(BACKEND_CUDA) without a GPU (or in a build without CUDA)
 *     fails with "no GPU" / "built without CUDA" in the message; AUTO falls
 *     back to the CPU (with a GPU: CUDA works and AUTO picks it). Bad calls
 *     are rejected with -EINVAL.
 *
 * Fresh random parameters and inputs (KFAC_TEST_SEED=<n> replays). Check
 * forks every test: CUDA is touched only inside the tests.
 */
#include <check.h>
#include <errno.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "common/backend/backend.h"
#include "common/base/rng.h"
#include "common/kfac/kfac_stats.h"
#include "common/nn/nn.h"
#include "tests/lib/seed.h"
#include "tests/lib/testnet.h"

#define TB_BATCH 8

/* ---- (a) CPU backend == direct calls ------------------------------------------------ */

static const char *s_cpu_models[] = {
    /* conv (kfc, avg), bn, relu, add, tanh, maxpool, dropout, avgpool, flatten, fc */
    "input 2x8x8\n"
    "conv name=c1 out=4 k=3 pad=1\nbatchnorm name=bn1\nrelu name=r1\n"
    "conv name=c2 out=4 k=3 pad=1 kfac=avg\nadd name=a1 from=r1\ntanh\n"
    "maxpool k=2\ndropout p=0.3\navgpool k=2\nflatten\nfc name=f1 out=6\nsoftmax_xent\n",
    /* doubly-factored fc on a feature map, layers without bias */
    "input 3x6x6\nconv name=c1 out=5 k=3 pad=1 bias=0\nrelu\nfc name=f1 out=8 kfac=doubly\nrelu\n"
    "fc name=f2 out=4 bias=0\nsoftmax_xent\n",
    /* strided conv, global average pooling */
    "input 3x5x7\nconv name=c1 out=4 k=3 stride=2 pad=1\navgpool global\nfc name=f1 out=3\nsoftmax_xent\n",
};

/* Every layer's y equal, bit for bit. */
static void s_assert_layers_equal(backend_t *b, const net_t *ref, int n, int with_dy, const char *what) {
    for (int li = 0; li < ref->n_layers; li++) {
        const layer_t *l = &ref->layers[li];
        if (l->kind == LAYER_SOFTMAX_XENT) continue;
        size_t len = (size_t)n * l->size;
        float *y = malloc(len * sizeof(float)), *dy = malloc(len * sizeof(float));
        ck_assert_ptr_nonnull(y);
        ck_assert_ptr_nonnull(dy);
        ck_assert_int_eq(backend_layer_copy(b, li, y, with_dy ? dy : NULL), 0);
        ck_assert_msg(memcmp(y, l->y, len * sizeof(float)) == 0, "%s: layer %s output differs", what, l->name);
        if (with_dy)
            ck_assert_msg(memcmp(dy, l->dy, len * sizeof(float)) == 0, "%s: layer %s dy differs", what, l->name);
        free(y);
        free(dy);
    }
}

START_TEST(test_backend_cpu_matches_direct_calls_bit_for_bit) {
    uint64_t seed = test_seed();
    rng_t r;
    rng_seed(&r, seed);
    const char *text = s_cpu_models[_i];
    net_t *ref = testnet_parse(text, TB_BATCH), *net = testnet_parse(text, TB_BATCH);
    testnet_randomize(ref, &r);
    net->dropout_seed = ref->dropout_seed;
    char err[512];
    backend_t *b = backend_new(BACKEND_CPU, net, err, sizeof err);
    ck_assert_msg(b != NULL, "%s", err);
    ck_assert_int_eq(backend_kind(b), BACKEND_CPU);
    ck_assert_msg(strncmp(backend_describe(b), "cpu", 3) == 0, "%s", backend_describe(b));
    /* The backend takes the reference's arrays: they are copied into net. */
    ck_assert_int_eq(backend_set_params(b, ref->params, ref->state), 0);
    ck_assert(memcmp(net->params, ref->params, ref->n_params * sizeof(float)) == 0);

    kfac_stats_t *s_ref = kfac_stats_new(ref), *s_b = kfac_stats_new(net);
    ck_assert_ptr_nonnull(s_ref);
    ck_assert_ptr_nonnull(s_b);
    const int n = TB_BATCH - 2, K = ref->n_classes;
    float *x = malloc((size_t)n * ref->in_size * sizeof(float));
    float *probs = malloc((size_t)n * K * sizeof(float));
    int *y = malloc((size_t)n * sizeof(int));
    ck_assert(x && probs && y);
    for (int pass = 0; pass < 3; pass++) { /* train, train again (seeds advance), eval */
        const int train = pass < 2;
        testnet_fill_normal(&r, x, (size_t)n * ref->in_size);
        testnet_fill_labels(&r, y, n, K);
        ck_assert_int_eq(net_forward(ref, x, n, train), 0);
        ck_assert_int_eq(backend_forward(b, x, n, train), 0);
        s_assert_layers_equal(b, ref, n, 0, "forward");
        ck_assert_int_eq(backend_probs(b, probs), 0);
        ck_assert(memcmp(probs, net_probs(ref), (size_t)n * K * sizeof(float)) == 0);
        int hits_ref = -1, hits = -2;
        float loss_ref = net_backward(ref, y, NULL, &hits_ref), loss = -1.0f;
        ck_assert_int_eq(backend_backward(b, y, 1, &loss, &hits), 0);
        ck_assert(memcmp(&loss, &loss_ref, sizeof loss) == 0);
        ck_assert_int_eq(hits, hits_ref);
        ck_assert(memcmp(net->grads, ref->grads, ref->n_params * sizeof(float)) == 0);
        ck_assert(ref->n_state == 0 || memcmp(net->state, ref->state, ref->n_state * sizeof(float)) == 0);
        ck_assert(net->dropout_seed == ref->dropout_seed);
        s_assert_layers_equal(b, ref, n, 1, "backward");
        ck_assert_int_eq(kfac_stats_compute(s_ref, ref), 0);
        ck_assert_int_eq(backend_stats(b, s_b), 0);
        ck_assert(memcmp(s_b->arena, s_ref->arena, s_ref->n_floats * sizeof(float)) == 0);
        for (int j = 0; j < s_ref->n_layers; j++)
            for (int k = 0; k < s_ref->layers[j].n_factors; k++) {
                ck_assert(s_b->layers[j].f[k].n_samples == s_ref->layers[j].f[k].n_samples);
                ck_assert_int_eq(s_b->layers[j].f[k].n_updates, s_ref->layers[j].f[k].n_updates);
            }
    }
    free(x);
    free(probs);
    free(y);
    kfac_stats_free(&s_ref);
    kfac_stats_free(&s_b);
    backend_free(&b);
    ck_assert_ptr_null(b);
    net_free(&ref);
    net_free(&net);
}
END_TEST

/* ---- (c) without a GPU, bad calls ------------------------------------------------------ */

START_TEST(test_backend_cuda_without_gpu_fails_clearly_and_auto_falls_back) {
    net_t *net = testnet_parse("input 1x4x4\nflatten\nfc out=3\nsoftmax_xent\n", 4);
    char why[512], err[512];
    int gpu = backend_gpu_probe(why, sizeof why);
    backend_t *b = backend_new(BACKEND_CUDA, net, err, sizeof err);
    if (gpu) {
        ck_assert_msg(b != NULL, "a GPU answers but the CUDA backend failed: %s", err);
        ck_assert_int_eq(backend_kind(b), BACKEND_CUDA);
        ck_assert_msg(strncmp(backend_describe(b), "cuda: ", 6) == 0, "%s", backend_describe(b));
        backend_free(&b);
    } else {
        ck_assert_ptr_null(b);
        ck_assert_msg(strstr(why, "no GPU") || strstr(why, "built without CUDA") || strstr(why, "no usable GPU"),
                      "probe reason: %s", why);
        ck_assert_msg(strstr(err, "no GPU") || strstr(err, "built without CUDA") || strstr(err, "no usable GPU"),
                      "message: %s", err);
    }
    b = backend_new(BACKEND_AUTO, net, err, sizeof err);
    ck_assert_msg(b != NULL, "%s", err);
    ck_assert_int_eq(backend_kind(b), gpu ? BACKEND_CUDA : BACKEND_CPU);
    backend_free(&b);
    backend_free(&b); /* idempotent */
    backend_free(NULL);
    net_free(&net);
}
END_TEST

#ifdef KFAC_CUDA /* a build without CUDA has no plugin to look for */
/* The CUDA backend is a plugin (common/backend/backend_cuda_api.h): where it
 * cannot be loaded, the probe and backend_new say which file and why, and
 * AUTO still gets the CPU. Each test runs in a child of its own (Check's
 * fork mode), so the loader starts afresh with this KFAC_CUDA_LIB. */
START_TEST(test_backend_cuda_plugin_missing_or_foreign_is_named) {
    static const struct {
        const char *lib, *want;
    } cases[] = {
        {"/nonexistent/libkfac-cuda.so", "KFAC_CUDA_LIB=/nonexistent/libkfac-cuda.so: No such file"},
        {"/etc/passwd", "the CUDA backend /etc/passwd could not be loaded"},
    };
    const char *fork_env = getenv("CK_FORK");
    ck_assert_msg(!fork_env || strcmp(fork_env, "no") != 0, "needs Check's fork mode (the plugin loads once a process)");
    ck_assert_int_eq(setenv("KFAC_CUDA_LIB", cases[_i].lib, 1), 0);
    net_t *net = testnet_parse("input 1x4x4\nflatten\nfc out=3\nsoftmax_xent\n", 4);
    char why[1024], err[1024];
    ck_assert_int_eq(backend_gpu_probe(why, sizeof why), 0);
    ck_assert_msg(strstr(why, cases[_i].want), "probe reason: %s (expected it to contain: %s)", why, cases[_i].want);
    ck_assert_ptr_null(backend_new(BACKEND_CUDA, net, err, sizeof err));
    ck_assert_msg(strstr(err, cases[_i].want), "message: %s", err);
    backend_t *b = backend_new(BACKEND_AUTO, net, err, sizeof err);
    ck_assert_msg(b != NULL, "%s", err);
    ck_assert_int_eq(backend_kind(b), BACKEND_CPU);
    backend_free(&b);
    net_free(&net);
}
END_TEST

/* The plugin of this build, named by KFAC_CUDA_LIB, loads (all its symbols
 * resolve against this program) and runs its own probe: a GPU, or the CUDA
 * runtime's reason. Without the name, a machine with no NVIDIA driver never
 * loads it, so this is the check that it can be loaded at all. It is found
 * beside the build's programs (build/tests/backend/ -> build/) or in the
 * GPU kit (tests/ -> lib/kfac/). */
START_TEST(test_backend_cuda_plugin_of_this_build_loads) {
    const char *fork_env = getenv("CK_FORK");
    ck_assert_msg(!fork_env || strcmp(fork_env, "no") != 0, "needs Check's fork mode (the plugin loads once a process)");
    char exe[4096];
    ssize_t n = readlink("/proc/self/exe", exe, sizeof exe - 1);
    ck_assert_int_gt(n, 0);
    exe[n] = 0;
    *strrchr(exe, '/') = 0; /* the test's folder */
    char a[4200], b[4200];
    snprintf(a, sizeof a, "%s/../../libkfac-cuda.so", exe);
    snprintf(b, sizeof b, "%s/../lib/kfac/libkfac-cuda.so", exe);
    const char *lib = access(a, R_OK) == 0 ? a : access(b, R_OK) == 0 ? b : NULL;
    ck_assert_msg(lib != NULL, "the build's CUDA backend is in neither %s nor %s", a, b);
    ck_assert_int_eq(setenv("KFAC_CUDA_LIB", lib, 1), 0);
    char why[1024];
    int gpu = backend_gpu_probe(why, sizeof why);
    ck_assert_msg(gpu || strstr(why, "no GPU (cuda") || strstr(why, "no usable GPU"),
                  "%s did not load or did not probe: %s", lib, why);
}
END_TEST
#endif

START_TEST(test_backend_rejects_bad_calls) {
    net_t *net = testnet_parse("input 1x4x4\nflatten\nfc out=3\nsoftmax_xent\n", 4);
    char err[512];
    backend_t *b = backend_new(BACKEND_AUTO, net, err, sizeof err);
    ck_assert_msg(b != NULL, "%s", err);
    float x[4 * 16], probs[4 * 3];
    memset(x, 0, sizeof x);
    int y[4] = {0, 1, 2, 0}, bad[4] = {0, 3, 0, 0};
    kfac_stats_t *s = kfac_stats_new(net);
    ck_assert_ptr_nonnull(s);
    ck_assert_int_eq(backend_probs(b, probs), -EINVAL);       /* no forward pass yet */
    ck_assert_int_eq(backend_backward(b, y, 1, NULL, NULL), -EINVAL);
    ck_assert_int_eq(backend_layer_copy(b, 0, x, NULL), -EINVAL);
    ck_assert_int_eq(backend_forward(b, x, 0, 1), -EINVAL);   /* n out of range */
    ck_assert_int_eq(backend_forward(b, x, 5, 1), -EINVAL);
    ck_assert_int_eq(backend_forward(b, NULL, 2, 1), -EINVAL);
    ck_assert_int_eq(backend_forward(b, x, 4, 1), 0);
    ck_assert_int_eq(backend_stats(b, s), -EINVAL);           /* no backward pass yet */
    ck_assert_int_eq(backend_layer_copy(b, 1, NULL, x), -EINVAL);
    ck_assert_int_eq(backend_backward(b, bad, 1, NULL, NULL), -EINVAL); /* label 3 of 3 classes */
    ck_assert_int_eq(backend_backward(b, NULL, 1, NULL, NULL), -EINVAL);
    ck_assert_int_eq(backend_backward(b, y, 1, NULL, NULL), 0);
    ck_assert_int_eq(backend_stats(b, s), 0);
    ck_assert_int_eq(backend_stats(b, NULL), -EINVAL);
    ck_assert_int_eq(backend_layer_copy(b, 2, x, NULL), -EINVAL);  /* softmax_xent has no y */
    ck_assert_int_eq(backend_layer_copy(b, 3, x, NULL), -EINVAL);  /* no such layer */
    ck_assert_int_eq(backend_layer_copy(b, -1, x, NULL), -EINVAL);
    ck_assert_int_eq(backend_failed(b), 0);                        /* bad calls leave it usable */
    ck_assert_int_eq(backend_forward(NULL, x, 1, 1), -EINVAL);
    ck_assert_ptr_null(backend_new(BACKEND_CPU, NULL, err, sizeof err));
    ck_assert_ptr_null(backend_new((backend_kind_t)42, net, err, sizeof err));
    kfac_stats_free(&s);
    backend_free(&b);
    net_free(&net);
}
END_TEST

START_TEST(test_backend_kind_parse_and_names) {
    backend_kind_t k = BACKEND_CPU;
    ck_assert_int_eq(backend_kind_parse("auto", &k), 0);
    ck_assert_int_eq(k, BACKEND_AUTO);
    ck_assert_int_eq(backend_kind_parse("cpu", &k), 0);
    ck_assert_int_eq(k, BACKEND_CPU);
    ck_assert_int_eq(backend_kind_parse("cuda", &k), 0);
    ck_assert_int_eq(k, BACKEND_CUDA);
    ck_assert_int_eq(backend_kind_parse("gpu", &k), 0);
    ck_assert_int_eq(k, BACKEND_CUDA);
    ck_assert_int_eq(backend_kind_parse("tpu", &k), -EINVAL);
    ck_assert_int_eq(backend_kind_parse(NULL, &k), -EINVAL);
    ck_assert_str_eq(backend_kind_name(BACKEND_AUTO), "auto");
    ck_assert_str_eq(backend_kind_name(BACKEND_CPU), "cpu");
    ck_assert_str_eq(backend_kind_name(BACKEND_CUDA), "cuda");
    ck_assert_ptr_null(backend_kind_name((backend_kind_t)7));
}
END_TEST

Suite *make_suite(void) {
    Suite *s = suite_create("backend");
    TCase *tc = tcase_create("cpu");
    tcase_add_loop_test(tc, test_backend_cpu_matches_direct_calls_bit_for_bit, 0,
                        (int)(sizeof s_cpu_models / sizeof s_cpu_models[0]));
    tcase_add_test(tc, test_backend_cuda_without_gpu_fails_clearly_and_auto_falls_back);
#ifdef KFAC_CUDA /* a build without CUDA has no plugin to look for */
    tcase_add_loop_test(tc, test_backend_cuda_plugin_missing_or_foreign_is_named, 0, 2);
    tcase_add_test(tc, test_backend_cuda_plugin_of_this_build_loads);
#endif
    tcase_add_test(tc, test_backend_rejects_bad_calls);
    tcase_add_test(tc, test_backend_kind_parse_and_names);
    tcase_set_timeout(tc, 30); /* a GPU, if there, initializes cuDNN and cuBLAS per test */
    suite_add_tcase(s, tc);
    return s;
}
