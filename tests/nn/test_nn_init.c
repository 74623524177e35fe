/* tests/nn/test_nn_init.c — parameter initialization (net_init_params, the
 * model options init= and bias_init=, models/README.md).
 *
 * Each weight scheme is checked on an fc layer (fan_in 400, fan_out 300) and
 * a conv layer (16 channels, 5x5 kernel: fan_in 400, fan_out 300*25 = 7500),
 * 120,000 weights each, drawn from a fresh seed (printed; KFAC_TEST_SEED
 * repeats):
 *   - uniform schemes U(-b, b): every sample within [-b, b];
 *   - mean within 5 standard errors of 0: 5 sigma / sqrt(n);
 *   - variance within 5 standard errors of sigma^2: the standard error of
 *     a sample variance is sqrt((mu4 - sigma^4) / n), with mu4 = b^4 / 5 for
 *     U(-b, b) (sigma^2 = b^2 / 3) and mu4 = 3 sigma^4 for a normal;
 *   - the shape: the fraction of samples within half the bound (uniform:
 *     1/2) or within one standard deviation (normal: 0.6827), within 5
 *     binomial standard errors; this tells a normal from a uniform of the
 *     same variance.
 * Biases with bias_init=default get the same checks on an fc layer with
 * 100,000 outputs (U(-1/sqrt(4), +)); bias_init=zero gives zeros. The
 * oracle of bit-for-bit reproduction (init=he_uniform bias_init=zero) is a
 * copy of net_init_params as it was before init= existed. A 5-sigma check
 * fails by chance about once in 1.7 million. */
#include <check.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "common/base/rng.h"
#include "common/nn/nn.h"
#include "tests/lib/seed.h"

#define S_SIGMAS 5.0

static net_t *s_parse(const char *text) {
    char err[512];
    net_t *net = net_parse(text, "t.model", 1, err, sizeof err);
    ck_assert_msg(net != NULL, "parse failed: %s\n%s", err, text);
    return net;
}

/* What a scheme promises about n samples. */
typedef struct {
    int uniform;   /* 1: U(-b, b); 0: N(0, sd^2) */
    double b, sd;  /* bound (uniform) or standard deviation (normal) */
} s_dist_t;

static s_dist_t s_dist(nn_init_t init, double fan_in, double fan_out) {
    s_dist_t d = {0, 0.0, 0.0};
    switch (init) {
    case NN_INIT_DEFAULT: d.uniform = 1; d.b = 1.0 / sqrt(fan_in); break;
    case NN_INIT_HE_UNIFORM: d.uniform = 1; d.b = sqrt(6.0 / fan_in); break;
    case NN_INIT_HE_NORMAL: d.sd = sqrt(2.0 / fan_in); break;
    case NN_INIT_XAVIER_UNIFORM: d.uniform = 1; d.b = sqrt(6.0 / (fan_in + fan_out)); break;
    case NN_INIT_XAVIER_NORMAL: d.sd = sqrt(2.0 / (fan_in + fan_out)); break;
    default: ck_abort_msg("unknown scheme %d", (int)init);
    }
    return d;
}

/* Check n samples v against d; what names them in messages. */
static void s_check_samples(const float *v, size_t n, s_dist_t d, const char *what, uint64_t seed) {
    ck_assert_msg(n >= 100000, "%s: only %zu samples", what, n);
    double s1 = 0.0, s2 = 0.0;
    size_t inner = 0, out_of_bounds = 0;
    const float bf = (float)d.b; /* rounding to float is monotonic: |u b| <= b gives |fl(u b)| <= fl(b) */
    for (size_t i = 0; i < n; i++) {
        double x = v[i];
        s1 += x;
        s2 += x * x;
        if (d.uniform) {
            if (fabsf(v[i]) > bf) out_of_bounds++;
            if (fabs(x) <= d.b / 2) inner++;
        } else if (fabs(x) <= d.sd) {
            inner++;
        }
    }
    double mean = s1 / n, var = s2 / n - mean * mean;
    double sigma2 = d.uniform ? d.b * d.b / 3.0 : d.sd * d.sd;
    double mu4 = d.uniform ? pow(d.b, 4) / 5.0 : 3.0 * sigma2 * sigma2;
    double se_mean = sqrt(sigma2 / n), se_var = sqrt((mu4 - sigma2 * sigma2) / n);
    double p_inner = d.uniform ? 0.5 : erf(1.0 / sqrt(2.0));
    double se_inner = sqrt(p_inner * (1.0 - p_inner) / n);
    double frac = (double)inner / n;
    ck_assert_msg(out_of_bounds == 0, "%s: %zu of %zu samples outside [-%g, %g] (seed %llu)", what, out_of_bounds, n,
                  d.b, d.b, (unsigned long long)seed);
    ck_assert_msg(fabs(mean) <= S_SIGMAS * se_mean, "%s: mean %.3g, expected 0 +- %.3g (seed %llu)", what, mean,
                  S_SIGMAS * se_mean, (unsigned long long)seed);
    ck_assert_msg(fabs(var - sigma2) <= S_SIGMAS * se_var, "%s: variance %.6g, expected %.6g +- %.3g (seed %llu)",
                  what, var, sigma2, S_SIGMAS * se_var, (unsigned long long)seed);
    ck_assert_msg(fabs(frac - p_inner) <= S_SIGMAS * se_inner, "%s: %.4f of the samples within %s, expected %.4f +- %.4f (seed %llu)",
                  what, frac, d.uniform ? "b/2" : "one sd", p_inner, S_SIGMAS * se_inner, (unsigned long long)seed);
}

START_TEST(test_nn_init_schemes_match_their_distributions) {
    uint64_t seed = test_seed();
    printf("test_nn_init_schemes_match_their_distributions: seed %llu\n", (unsigned long long)seed);
    rng_t r;
    rng_seed(&r, seed);
    for (int s = 0; s < NN_INIT_COUNT; s++) {
        for (int conv = 0; conv < 2; conv++) {
            char text[256], what[96];
            if (conv)
                snprintf(text, sizeof text, "input 16x5x5 init=%s\nconv name=c out=300 k=5\nflatten\nsoftmax_xent\n",
                         nn_init_name((nn_init_t)s));
            else
                snprintf(text, sizeof text, "input 400x1x1 init=%s\nfc name=f out=300\nsoftmax_xent\n",
                         nn_init_name((nn_init_t)s));
            net_t *net = s_parse(text);
            layer_t *l = &net->layers[0];
            ck_assert_int_eq(l->init, s);
            ck_assert_int_eq(l->n_w, 120000);
            net_init_params(net, rng_u64(&r));
            snprintf(what, sizeof what, "%s %s weights", nn_init_name((nn_init_t)s), conv ? "conv" : "fc");
            /* fan_in 400 both; fan_out 300 (fc) or 300*5*5 (conv) */
            s_check_samples(l->weight, l->n_w, s_dist((nn_init_t)s, 400.0, conv ? 7500.0 : 300.0), what, seed);
            /* bias_init=default whatever the scheme: within 1/sqrt(fan_in) */
            for (size_t j = 0; j < l->n_b; j++)
                ck_assert_msg(fabsf(l->bias[j]) <= (float)(1.0 / 20.0), "%s: bias %g outside [-0.05, 0.05]", what,
                              l->bias[j]);
            net_free(&net);
        }
    }
}
END_TEST

START_TEST(test_nn_init_default_bias_and_zero_bias) {
    uint64_t seed = test_seed();
    printf("test_nn_init_default_bias_and_zero_bias: seed %llu\n", (unsigned long long)seed);
    /* fan_in 4: biases U(-1/2, 1/2), 100,000 of them */
    net_t *net = s_parse("input 4x1x1\nfc out=100000\nsoftmax_xent\n");
    layer_t *l = &net->layers[0];
    ck_assert_int_eq(net->init, NN_INIT_DEFAULT);
    ck_assert_int_eq(l->init, NN_INIT_DEFAULT);
    ck_assert_int_eq(l->bias_init, NN_BIAS_INIT_DEFAULT);
    net_init_params(net, seed);
    s_dist_t d = {1, 0.5, 0.0};
    s_check_samples(l->bias, l->n_b, d, "default fc biases", seed);
    net_free(&net);
    for (int s = 0; s < NN_INIT_COUNT; s++) {
        char text[256];
        snprintf(text, sizeof text, "input 2x3x3 init=%s bias_init=zero\nconv out=7 k=3 pad=1\nfc out=5\nsoftmax_xent\n",
                 nn_init_name((nn_init_t)s));
        net = s_parse(text);
        net_init_params(net, seed);
        for (int li = 0; li < 2; li++) {
            l = &net->layers[li];
            ck_assert_int_eq(l->bias_init, NN_BIAS_INIT_ZERO);
            for (size_t j = 0; j < l->n_b; j++) ck_assert_msg(l->bias[j] == 0.0f, "%s layer %d bias %zu = %g", text, li, j, l->bias[j]);
            size_t nonzero = 0;
            for (size_t j = 0; j < l->n_w; j++) nonzero += l->weight[j] != 0.0f;
            ck_assert_msg(nonzero == l->n_w, "%s layer %d: %zu of %zu weights nonzero", text, li, nonzero, l->n_w);
        }
        net_free(&net);
    }
}
END_TEST

/* net_init_params as it was before init= existed (the oracle). */
static void s_old_init(net_t *net, uint64_t seed) {
    rng_t r;
    rng_seed(&r, seed);
    for (int i = 0; i < net->n_layers; i++) {
        layer_t *l = &net->layers[i];
        if (l->kind == LAYER_FC || l->kind == LAYER_CONV) {
            double fan_in = (double)l->n_w / l->out;
            double b = sqrt(6.0 / fan_in);
            for (size_t j = 0; j < l->n_w; j++) l->weight[j] = (float)((2.0 * rng_uniform(&r) - 1.0) * b);
            for (size_t j = 0; j < l->n_b; j++) l->bias[j] = 0.0f;
        } else if (l->kind == LAYER_BATCHNORM) {
            for (int c = 0; c < l->c; c++) { l->weight[c] = 1.0f; l->bias[c] = 0.0f; l->run_mean[c] = 0.0f; l->run_var[c] = 1.0f; }
        }
    }
    net->dropout_seed = seed ^ 0x5deece66dULL;
}

START_TEST(test_nn_init_he_uniform_zero_bias_reproduces_the_old_init) {
    uint64_t seed = test_seed();
    printf("test_nn_init_he_uniform_zero_bias_reproduces_the_old_init: seed %llu\n", (unsigned long long)seed);
    const char *models[] = {"models/mnist-cnn.model", "models/resnet8-cifar.model", "models/mnist-mlp.model"};
    for (size_t m = 0; m < sizeof models / sizeof models[0]; m++) {
        char err[512];
        net_t *a = net_load(models[m], 2, err, sizeof err);
        ck_assert_msg(a != NULL, "%s", err);
        /* the same model with the old spelling on its input line */
        size_t len = strlen(a->source);
        char *text = malloc(len + 64);
        ck_assert_ptr_nonnull(text);
        const char *in = strstr(a->source, "\ninput ");
        ck_assert_ptr_nonnull(in);
        const char *eol = strchr(in + 1, '\n');
        ck_assert_ptr_nonnull(eol);
        /* insert before a comment on the input line, if any */
        const char *hash = memchr(in + 1, '#', (size_t)(eol - in - 1));
        const char *at = hash ? hash : eol;
        snprintf(text, len + 64, "%.*s init=he_uniform bias_init=zero %s", (int)(at - a->source), a->source, at);
        net_t *b = net_parse(text, models[m], 2, err, sizeof err);
        ck_assert_msg(b != NULL, "%s", err);
        ck_assert_uint_eq(a->n_params, b->n_params);
        s_old_init(a, seed);
        memset(b->params, 0xff, b->n_params * sizeof(float)); /* NaNs: every value must be written */
        net_init_params(b, seed);
        ck_assert_msg(memcmp(a->params, b->params, a->n_params * sizeof(float)) == 0, "%s: params differ (seed %llu)",
                      models[m], (unsigned long long)seed);
        ck_assert_msg(memcmp(a->state, b->state, a->n_state * sizeof(float)) == 0, "%s: state differs", models[m]);
        ck_assert_uint_eq(a->dropout_seed, b->dropout_seed);
        /* the new default draws something else */
        net_t *c = net_parse(a->source, models[m], 2, err, sizeof err);
        ck_assert_ptr_nonnull(c);
        net_init_params(c, seed);
        ck_assert(memcmp(a->params, c->params, a->n_params * sizeof(float)) != 0);
        net_free(&a); net_free(&b); net_free(&c);
        free(text);
    }
}
END_TEST

START_TEST(test_nn_init_layer_option_overrides_model) {
    uint64_t seed = test_seed();
    printf("test_nn_init_layer_option_overrides_model: seed %llu\n", (unsigned long long)seed);
    net_t *net = s_parse("input 400x1x1 init=xavier_normal bias_init=zero\n"
                         "fc name=a out=300 init=he_uniform\n"
                         "fc name=b out=400 bias_init=default\n"
                         "conv name=c out=300 k=1 init=default bias_init=default\n"
                         "batchnorm name=bn\n"
                         "softmax_xent\n");
    layer_t *a = &net->layers[0], *b = &net->layers[1], *c = &net->layers[2], *bn = &net->layers[3];
    ck_assert_int_eq(net->init, NN_INIT_XAVIER_NORMAL);
    ck_assert_int_eq(net->bias_init, NN_BIAS_INIT_ZERO);
    ck_assert_int_eq(a->init, NN_INIT_HE_UNIFORM);
    ck_assert_int_eq(a->bias_init, NN_BIAS_INIT_ZERO);
    ck_assert_int_eq(b->init, NN_INIT_XAVIER_NORMAL);
    ck_assert_int_eq(b->bias_init, NN_BIAS_INIT_DEFAULT);
    ck_assert_int_eq(c->init, NN_INIT_DEFAULT);
    ck_assert_int_eq(c->bias_init, NN_BIAS_INIT_DEFAULT);
    net_init_params(net, seed);
    s_check_samples(a->weight, a->n_w, s_dist(NN_INIT_HE_UNIFORM, 400, 300), "layer a (he_uniform over xavier_normal)", seed);
    for (size_t j = 0; j < a->n_b; j++) ck_assert(a->bias[j] == 0.0f);
    s_check_samples(b->weight, b->n_w, s_dist(NN_INIT_XAVIER_NORMAL, 300, 400), "layer b (the model's xavier_normal)", seed);
    size_t nonzero = 0;
    for (size_t j = 0; j < b->n_b; j++) {
        nonzero += b->bias[j] != 0.0f;
        ck_assert(fabsf(b->bias[j]) <= (float)(1.0 / sqrt(300.0)));
    }
    ck_assert_uint_eq(nonzero, b->n_b);
    /* conv 1x1 on a 400x1x1 map: fan_in 400, fan_out 300 */
    s_check_samples(c->weight, c->n_w, s_dist(NN_INIT_DEFAULT, 400, 300), "layer c (default over xavier_normal)", seed);
    for (int i = 0; i < bn->c; i++) {
        ck_assert(bn->weight[i] == 1.0f && bn->bias[i] == 0.0f);
        ck_assert(bn->run_mean[i] == 0.0f && bn->run_var[i] == 1.0f);
    }
    net_free(&net);
}
END_TEST

START_TEST(test_nn_init_draw_order_and_determinism) {
    uint64_t seed = test_seed();
    printf("test_nn_init_draw_order_and_determinism: seed %llu\n", (unsigned long long)seed);
    /* One stream in layer order, a layer's biases right after its weights:
     * zero biases leave the first layer's weights as they are and shift the
     * second layer's by the first layer's bias draws. */
    net_t *d = s_parse("input 3x4x4\nconv out=5 k=3\nfc out=7\nsoftmax_xent\n");
    net_t *z = s_parse("input 3x4x4 bias_init=zero\nconv out=5 k=3\nfc out=7\nsoftmax_xent\n");
    net_t *d2 = s_parse("input 3x4x4\nconv out=5 k=3\nfc out=7\nsoftmax_xent\n");
    net_init_params(d, seed);
    net_init_params(d2, seed);
    net_init_params(z, seed);
    ck_assert(memcmp(d->params, d2->params, d->n_params * sizeof(float)) == 0);
    const layer_t *d0 = &d->layers[0], *z0 = &z->layers[0], *d1 = &d->layers[1], *z1 = &z->layers[1];
    ck_assert(memcmp(d0->weight, z0->weight, d0->n_w * sizeof(float)) == 0);
    ck_assert(memcmp(d1->weight, z1->weight, d1->n_w * sizeof(float)) != 0);
    /* the default biases are the next draws of the same uniform stream */
    rng_t r;
    rng_seed(&r, seed);
    for (size_t j = 0; j < d0->n_w; j++) (void)rng_uniform(&r);
    const double b = 1.0 / sqrt(27.0);
    for (size_t j = 0; j < d0->n_b; j++)
        ck_assert(d0->bias[j] == (float)((2.0 * rng_uniform(&r) - 1.0) * b));
    net_free(&d); net_free(&d2); net_free(&z);
}
END_TEST

Suite *make_suite(void) {
    Suite *s = suite_create("nn_init");
    TCase *tc = tcase_create("core");
    tcase_set_timeout(tc, 30);
    tcase_add_test(tc, test_nn_init_schemes_match_their_distributions);
    tcase_add_test(tc, test_nn_init_default_bias_and_zero_bias);
    tcase_add_test(tc, test_nn_init_he_uniform_zero_bias_reproduces_the_old_init);
    tcase_add_test(tc, test_nn_init_layer_option_overrides_model);
    tcase_add_test(tc, test_nn_init_draw_order_and_determinism);
    suite_add_tcase(s, tc);
    return s;
}
