/* tests/kfac/test_kfac_stats_net.c — K-FAC factor statistics of whole networks
 * (kfac_stats_compute on nn.c's activations, the container's pack/update/merge)
 * against brute-force double-precision oracles on fresh random inputs. The
 * seed is printed on failure; KFAC_TEST_SEED=<n> replays a run.
 *
 * Kronecker convention in the oracles: the gradient matrix V (out, dA) =
 * [dW | db] is vectorized column by column, vec(V)[j*out + o] = V[o][j], so
 * the exact Fisher block is F = E[vec(V) vec(V)^T] and the K-FAC claim is
 * F ~ A (x) G with (A (x) G)[(j,o),(j',o')] = A[j][j'] G[o][o'].
 *
 * Tolerances. All inputs are O(1). A float32 SYRK over m terms has a
 * rounding error of at most ~m * 6e-8 times the largest term (much less in
 * practice); the tiny problems here have m <= ~200, so errors are compared
 * to the largest |reference| entry of the matrix with rtol = 2e-5 (float
 * rounding of exact-equality identities, like A (x) G = vec vec^T for one
 * example, is a few ulp: 1e-5). Comparisons against per-example runs of the
 * network (a different float32 evaluation order than the batched run) use
 * 1e-4. A wrong normalization (1/n, |T|, g_scale), index or transpose gives
 * errors of order 1.
 */
#include <cblas.h>
#include <check.h>
#include <errno.h>
#include <math.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#include "common/kfac/kfac_linalg.h"
#include "common/kfac/kfac_stats.h"
#include "common/nn/nn.h"
#include "common/base/rng.h"
#include "tests/lib/seed.h"
#include "tests/lib/stats_oracle.h"

/* ---- with a real network ----------------------------------------------------------------- */

/* Conv engine of every net built here: OpenBLAS, or oneDNN in the "onednn"
 * test case (its fixture), whose forward pass forms no patches: the
 * statistics then get them from net_conv_patches. */
static nn_conv_engine_t s_engine = NN_CONV_ENGINE_BLAS;
static void s_use_onednn(void) { s_engine = NN_CONV_ENGINE_ONEDNN; }

static net_t *s_net(const char *text, int cap, uint64_t seed) {
    char err[256] = "";
    net_t *net = net_parse(text, "test", cap, err, sizeof err);
    ck_assert_msg(net != NULL, "net_parse: %s", err);
    ck_assert_msg(net_set_conv_engine(net, s_engine, err, sizeof err) == 0, "%s", err);
    net_init_params(net, seed);
    /* non-trivial biases so every term of the factors is exercised */
    rng_t r;
    rng_seed(&r, seed + 1);
    for (int i = 0; i < net->n_layers; i++) {
        layer_t *l = &net->layers[i];
        if (l->bias)
            for (size_t j = 0; j < l->n_b; j++) l->bias[j] = (float)(0.3 * rng_normal(&r));
    }
    return net;
}

static int s_slot(const kfac_stats_t *s, const net_t *net, const char *name) {
    int li = net_find_layer(net, name);
    ck_assert_int_ge(li, 0);
    int slot = kfac_stats_find(s, li);
    ck_assert_int_ge(slot, 0);
    return slot;
}

/* One example: for the fc layer A (x) G is the exact Fisher block of its
 * V = [dW | db] taken from the network's own gradient; for a conv with a
 * single output position the same holds. */
START_TEST(test_compute_single_example_exact_fisher) {
    SEEDED();
    const char *text =
        "input 2x3x3\n"
        "conv name=c1 out=3 k=3\n"      /* 1x1 output: one location */
        "relu\n"
        "flatten\n"
        "fc name=f1 out=4\n"
        "tanh\n"
        "fc name=f2 out=3\n"
        "softmax_xent\n";
    net_t *net = s_net(text, 4, seed);
    kfac_stats_t *s = kfac_stats_new(net);
    ck_assert_ptr_nonnull(s);
    ck_assert_int_eq(s->n_layers, 3);
    float x[18];
    oracle_randn(&rng, x, 18);
    int label = (int)rng_below(&rng, 3);
    ck_assert_int_eq(net_forward(net, x, 1, 1), 0);
    net_backward(net, &label, NULL, NULL);
    ck_assert_int_eq(kfac_stats_compute(s, net), 0);
    const char *names[3] = {"c1", "f1", "f2"};
    for (int q = 0; q < 3; q++) {
        int slot = s_slot(s, net, names[q]);
        const kfac_layer_stats_t *ls = &s->layers[slot];
        const layer_t *l = &net->layers[ls->layer];
        int out = ls->out, in = ls->in, dA = in + 1;
        ck_assert_int_eq(ls->f[0].dim, dA);
        double *V = NEWD(out * dA), *F = NEWD((size_t)out * dA * out * dA);
        for (int o = 0; o < out; o++) {
            for (int j = 0; j < in; j++) V[o * dA + j] = l->dweight[o * in + j];
            V[o * dA + in] = l->dbias[o];
        }
        oracle_add_fisher(F, V, out, dA, 1.0);
        oracle_check_kron(names[q], ls->f[0].data, dA, ls->f[1].data, out, F, RTOL_EXACT * 10, seed);
        ck_assert(ls->f[0].n_samples == 1.0 && ls->f[1].n_updates == 1);
        free(V); free(F);
    }
    kfac_stats_free(&s);
    ck_assert_ptr_null(s);
    net_free(&net);
}
END_TEST

/* A batch of n against n single-example passes: fc factors from the inputs
 * and the bias gradients (db_i = g_i), conv KFC factors from a double im2col
 * of the raw input and the per-example output gradients, conv AVG G from the
 * conv bias gradients (db_i = sum_t g_{i,t}), doubly factors from a double
 * SVD of the per-example inputs. */
START_TEST(test_compute_batch_vs_single_examples) {
    SEEDED();
    for (int variant = 0; variant < 2; variant++) {
        const char *text = variant == 0 ?
            "input 2x5x4\n"
            "conv name=c1 out=3 k=3 pad=1\n"
            "relu\n"
            "conv name=c2 out=2 k=3 stride=2 kfac=avg\n"
            "relu\n"
            "flatten\n"
            "fc name=f1 out=3\n"
            "softmax_xent\n"
            :
            "input 2x5x4\n"
            "conv name=c1 out=3 k=3 pad=1 kfac=avg\n"
            "relu\n"
            "fc name=f1 out=3 kfac=doubly\n"   /* directly on the 3x5x4 map */
            "softmax_xent\n";
        int n = 2 + (int)rng_below(&rng, 4);
        net_t *net = s_net(text, n, seed + (uint64_t)variant);
        kfac_stats_t *s = kfac_stats_new(net);
        ck_assert_ptr_nonnull(s);
        int in_size = net->in_size, classes = net->n_classes;
        float *x = NEWF(n * in_size);
        int *lab = (int *)oracle_alloc((size_t)n * sizeof(int));
        oracle_randn(&rng, x, (size_t)n * in_size);
        for (int i = 0; i < n; i++) lab[i] = (int)rng_below(&rng, (uint32_t)classes);
        ck_assert_int_eq(net_forward(net, x, n, 1), 0);
        net_backward(net, lab, NULL, NULL);
        ck_assert_int_eq(kfac_stats_compute(s, net), 0);

        int c1 = net_find_layer(net, "c1"), f1 = net_find_layer(net, "f1");
        const layer_t *lc = &net->layers[c1], *lf = &net->layers[f1];
        oracle_geom_t g = oracle_geom(lc->in_c, lc->in_h, lc->in_w, lc->k, lc->stride, lc->pad);
        int P = lc->h * lc->w, outc = lc->out, Kc = lc->in_c * lc->k * lc->k;
        int fin = lf->in_c * lf->in_h * lf->in_w, fout = lf->out;
        double *gs = NEWD((size_t)n * outc * P), *Gcb = NEWD(outc * outc);
        double *Af = NEWD((fin + 1) * (fin + 1)), *Gf = NEWD(fout * fout), *vec = NEWD(fin + 1);
        double *KKr = NEWD(fin * fin), *PPr = NEWD(fin * fin);
        double *u = NEWD(fin), *v = NEWD(fin);
        float *ain = NEWF(fin);
        for (int i = 0; i < n; i++) {
            ck_assert_int_eq(net_forward(net, x + (size_t)i * in_size, 1, 1), 0);
            net_backward(net, lab + i, NULL, NULL);
            for (int j = 0; j < outc * P; j++) gs[(size_t)i * outc * P + j] = lc->dy[j];
            for (int o = 0; o < outc; o++) vec[o] = lc->dbias[o];
            oracle_add_outer(Gcb, vec, outc, 1.0 / n);
            const float *a = net_layer_input(net, lf);
            memcpy(ain, a, (size_t)fin * sizeof *ain);
            for (int j = 0; j < fin; j++) vec[j] = a[j];
            vec[fin] = 1.0;
            oracle_add_outer(Af, vec, fin + 1, 1.0 / n);
            for (int o = 0; o < fout; o++) vec[o] = lf->dbias[o];
            oracle_add_outer(Gf, vec, fout, 1.0 / n);
            if (variant == 1) {
                int C = lf->in_c, T = lf->in_h * lf->in_w;
                double sg = oracle_power_svd(ain, C, T, u, v);
                for (int t = 0; t < T; t++) u[t] *= sqrt(sg);
                for (int c = 0; c < C; c++) v[c] *= sqrt(sg);
                oracle_add_outer(KKr, u, T, 1.0 / n);
                oracle_add_outer(PPr, v, C, 1.0 / n);
            }
        }
        /* conv c1 */
        const kfac_layer_stats_t *ls = &s->layers[s_slot(s, net, "c1")];
        int dA = Kc + 1;
        double *Ak = NEWD(dA * dA), *Gk = NEWD(outc * outc), *Aa = NEWD(dA * dA), *Ga = NEWD(outc * outc);
        oracle_conv_refs(&g, x, gs, n, outc, 1, Ak, Gk, Aa, Ga);
        if (variant == 0) {
            ck_assert_int_eq(ls->mode, KFAC_MODE_KFC);
            oracle_check_close("net kfc A", ls->f[0].data, Ak, (size_t)dA * dA, RTOL_NET, seed);
            oracle_check_close("net kfc G", ls->f[1].data, Gk, (size_t)outc * outc, RTOL_NET, seed);
        } else {
            ck_assert_int_eq(ls->mode, KFAC_MODE_AVG);
            oracle_check_close("net avg A", ls->f[0].data, Aa, (size_t)dA * dA, RTOL_NET, seed);
            oracle_check_close("net avg G", ls->f[1].data, Ga, (size_t)outc * outc, RTOL_NET, seed);
            oracle_check_close("net avg G = E[db db^T]", ls->f[1].data, Gcb, (size_t)outc * outc, RTOL_NET, seed);
        }
        /* fc f1 */
        ls = &s->layers[s_slot(s, net, "f1")];
        if (variant == 0) {
            ck_assert_int_eq(ls->mode, KFAC_MODE_STANDARD);
            oracle_check_close("net fc A", ls->f[0].data, Af, (size_t)(fin + 1) * (fin + 1), RTOL_NET, seed);
            oracle_check_close("net fc G", ls->f[1].data, Gf, (size_t)fout * fout, RTOL_NET, seed);
        } else {
            int C = lf->in_c, T = lf->in_h * lf->in_w;
            ck_assert_int_eq(ls->mode, KFAC_MODE_DOUBLY);
            ck_assert_int_eq(ls->n_factors, 4);
            ck_assert_int_eq(ls->f[0].dim, T);
            ck_assert_int_eq(ls->f[1].dim, C);
            /* relu feature maps are not dominated by one direction: the SVD
             * reference may converge to a looser 1e-9; 1e-3 still catches any
             * wrong normalization or layout */
            oracle_check_close("net E[K K^T]", ls->f[0].data, KKr, (size_t)T * T, 1e-3, seed);
            oracle_check_close("net E[Psi Psi^T]", ls->f[1].data, PPr, (size_t)C * C, 1e-3, seed);
            oracle_check_close("net doubly G", ls->f[2].data, Gf, (size_t)fout * fout, RTOL_NET, seed);
            oracle_check_close("net doubly Gbias", ls->f[3].data, Gf, (size_t)fout * fout, RTOL_NET, seed);
        }
        free(x); free(lab); free(gs); free(Gcb); free(Af); free(Gf); free(vec); free(KKr); free(PPr);
        free(u); free(v); free(ain); free(Ak); free(Gk); free(Aa); free(Ga);
        kfac_stats_free(&s);
        net_free(&net);
    }
}
END_TEST

/* Batch norm through the network: the 2x2 blocks equal the direct double
 * formula on the layer's own xhat and dy; an fc behind a flatten of a
 * feature map resolves its doubly factors through the flatten. */
START_TEST(test_compute_bn_and_flatten_doubly) {
    SEEDED();
    const char *text =
        "input 2x4x4\n"
        "conv name=c1 out=3 k=3 pad=1\n"
        "batchnorm name=b1\n"
        "relu\n"
        "flatten\n"
        "fc name=f1 out=3 kfac=doubly\n"
        "softmax_xent\n";
    int n = 3 + (int)rng_below(&rng, 4);
    net_t *net = s_net(text, n, seed);
    kfac_stats_t *s = kfac_stats_new(net);
    ck_assert_ptr_nonnull(s);
    const kfac_layer_stats_t *lf = &s->layers[s_slot(s, net, "f1")];
    ck_assert_int_eq(lf->mode, KFAC_MODE_DOUBLY);
    ck_assert_int_eq(lf->fm_c, 3);
    ck_assert_int_eq(lf->fm_t, 16);
    float *x = NEWF(n * 32);
    int *lab = (int *)oracle_alloc((size_t)n * sizeof(int));
    oracle_randn(&rng, x, (size_t)n * 32);
    for (int i = 0; i < n; i++) lab[i] = (int)rng_below(&rng, 3);
    ck_assert_int_eq(net_forward(net, x, n, 1), 0);
    net_backward(net, lab, NULL, NULL);
    ck_assert_int_eq(kfac_stats_compute(s, net), 0);
    const kfac_layer_stats_t *lb = &s->layers[s_slot(s, net, "b1")];
    const layer_t *l = &net->layers[lb->layer];
    ck_assert_int_eq(lb->f[0].kind, KFAC_FACTOR_DIAG2X2);
    int c = l->c, P = l->h * l->w;
    double *ref = NEWD(3 * c);
    for (int ch = 0; ch < c; ch++)
        for (int i = 0; i < n; i++) {
            double dg = 0.0, db = 0.0;
            for (int t = 0; t < P; t++) {
                size_t q = ((size_t)i * c + ch) * P + t;
                dg += (double)n * l->dy[q] * l->xhat[q];
                db += (double)n * l->dy[q];
            }
            ref[3 * ch] += dg * dg / n;
            ref[3 * ch + 1] += dg * db / n;
            ref[3 * ch + 2] += db * db / n;
        }
    oracle_check_close("net bn blocks", lb->f[0].data, ref, 3 * (size_t)c, RTOL_SUM, seed);
    free(x); free(lab); free(ref);
    kfac_stats_free(&s);
    net_free(&net);
}
END_TEST

/* True Fisher end to end: sampled labels from net_probs, backward with them;
 * the last fc's G is then E[(p_i - e_{y_i})(p_i - e_{y_i})^T] with the
 * sampled y_i (softmax cross-entropy: g = p - onehot). */
START_TEST(test_compute_true_fisher_sampled_labels) {
    SEEDED();
    const char *text = "input 1x2x3\nflatten\nfc name=f1 out=4\nsoftmax_xent\n";
    int n = 5;
    net_t *net = s_net(text, n, seed);
    kfac_stats_t *s = kfac_stats_new(net);
    ck_assert_ptr_nonnull(s);
    float *x = NEWF(n * 6);
    oracle_randn(&rng, x, (size_t)n * 6);
    ck_assert_int_eq(net_forward(net, x, n, 1), 0);
    const float *pr = net_probs(net);
    float *probs = NEWF(n * 4);
    memcpy(probs, pr, (size_t)n * 4 * sizeof *probs);
    int lab[5];
    rng_t r;
    rng_seed(&r, seed);
    ck_assert_int_eq(kfac_sample_labels(probs, n, 4, &r, lab), 0);
    net_backward(net, lab, NULL, NULL);
    ck_assert_int_eq(kfac_stats_compute(s, net), 0);
    double *Gr = NEWD(16), g[4];
    for (int i = 0; i < n; i++) {
        for (int k = 0; k < 4; k++) g[k] = probs[i * 4 + k] - (k == lab[i] ? 1.0 : 0.0);
        oracle_add_outer(Gr, g, 4, 1.0 / n);
    }
    oracle_check_close("true-Fisher G", s->layers[0].f[1].data, Gr, 16, RTOL_NET, seed);
    free(x); free(probs); free(Gr);
    kfac_stats_free(&s);
    net_free(&net);
}
END_TEST

/* Containers: pack/unpack round trip (bit-exact upper triangles), rejection
 * of corrupt input without side effects, running average and merge with
 * sample counts. */
START_TEST(test_container_pack_update_merge) {
    SEEDED();
    const char *text =
        "input 2x4x4\n"
        "conv name=c1 out=3 k=3 pad=1\n"
        "batchnorm name=b1\n"
        "relu\n"
        "fc name=f1 out=3 kfac=doubly\n"
        "softmax_xent\n";
    int n = 4;
    net_t *net = s_net(text, n, seed);
    kfac_stats_t *a = kfac_stats_new(net), *b = kfac_stats_new(net), *avg = kfac_stats_new(net);
    ck_assert(a && b && avg);
    float *x = NEWF(n * 32);
    int lab[4] = {0, 1, 2, 1};
    oracle_randn(&rng, x, (size_t)n * 32);
    ck_assert_int_eq(net_forward(net, x, n, 1), 0);
    net_backward(net, lab, NULL, NULL);
    ck_assert_int_eq(kfac_stats_compute(a, net), 0);

    size_t len = kfac_stats_packed_len(a);
    size_t expect = 0;
    for (int j = 0; j < a->n_layers; j++)
        for (int k = 0; k < a->layers[j].n_factors; k++) {
            const kfac_factor_t *f = &a->layers[j].f[k];
            expect += f->kind == KFAC_FACTOR_DIAG2X2 ? 3 * (size_t)f->dim : kfac_linalg_packed_len(f->dim);
        }
    ck_assert_uint_eq(len, expect);
    float *buf = NEWF(len);
    ck_assert_int_eq(kfac_stats_pack(a, buf, len), 0);
    ck_assert_int_eq(kfac_stats_unpack(b, buf, len, 4.0), 0);
    for (int j = 0; j < a->n_layers; j++)
        for (int k = 0; k < a->layers[j].n_factors; k++) {
            const kfac_factor_t *fa = &a->layers[j].f[k], *fb = &b->layers[j].f[k];
            ck_assert(memcmp(fa->data, fb->data, kfac_factor_len(fa) * sizeof(float)) == 0);
            ck_assert(fb->n_samples == 4.0 && fb->n_updates == 1);
        }
    int dims[KFAC_STATS_MAX_FACTORS];
    int fl = s_slot(a, net, "f1");
    ck_assert_int_eq(kfac_stats_layer_dims(&a->layers[fl], dims, KFAC_STATS_MAX_FACTORS), 4);
    ck_assert_int_eq(dims[0], 16);
    ck_assert_int_eq(dims[1], 3);
    ck_assert_int_eq(dims[2], 3);

    /* corrupt input: NaN, negative diagonal, wrong length; b keeps its values */
    kfac_stats_reset(b);
    buf[1] = NAN;
    ck_assert_int_eq(kfac_stats_unpack(b, buf, len, 4.0), -EINVAL);
    ck_assert_int_eq(b->layers[0].f[0].n_updates, 0);
    buf[1] = 0.0f;
    buf[0] = -1.0f;
    ck_assert_int_eq(kfac_stats_unpack(b, buf, len, 4.0), -EINVAL);
    ck_assert_int_eq(kfac_stats_unpack(b, buf, len - 1, 4.0), -EINVAL);
    size_t l0 = kfac_stats_layer_packed_len(&a->layers[0]);
    ck_assert_int_eq(kfac_stats_layer_unpack(&b->layers[0], buf, l0, 4.0), -EINVAL);
    ck_assert_int_eq(b->layers[0].f[0].n_updates, 0);

    /* running average over two batches and the merge of two batches */
    ck_assert_int_eq(kfac_stats_update(avg, a, 0.9), 0); /* first: copy */
    kfac_stats_reset(b);
    oracle_randn(&rng, x, (size_t)n * 32);
    ck_assert_int_eq(net_forward(net, x, n, 1), 0);
    net_backward(net, lab, NULL, NULL);
    ck_assert_int_eq(kfac_stats_compute(b, net), 0);
    ck_assert_int_eq(kfac_stats_update(avg, b, 0.9), 0);
    for (int j = 0; j < a->n_layers; j++)
        for (int k = 0; k < a->layers[j].n_factors; k++) {
            const kfac_factor_t *fa = &a->layers[j].f[k], *fb = &b->layers[j].f[k], *fv = &avg->layers[j].f[k];
            size_t m = kfac_factor_len(fa);
            double *ref = NEWD(m);
            for (size_t q = 0; q < m; q++) ref[q] = 0.9 * fa->data[q] + 0.1 * fb->data[q];
            oracle_check_close_floor("container running average", fv->data, ref, m, 1e-6,
                                fmax(oracle_max_abs(fa->data, m), oracle_max_abs(fb->data, m)), seed);
            ck_assert(fv->n_samples == 2.0 * n && fv->n_updates == 2);
            free(ref);
        }
    /* merge: b (n samples) into a copy of a with 3n samples -> weights 3/4, 1/4 */
    kfac_stats_t *m = kfac_stats_new(net);
    ck_assert_int_eq(kfac_stats_merge(m, a), 0);
    for (int j = 0; j < m->n_layers; j++)
        for (int k = 0; k < m->layers[j].n_factors; k++) m->layers[j].f[k].n_samples = 3.0 * n;
    ck_assert_int_eq(kfac_stats_merge(m, b), 0);
    for (int j = 0; j < a->n_layers; j++)
        for (int k = 0; k < a->layers[j].n_factors; k++) {
            const kfac_factor_t *fa = &a->layers[j].f[k], *fb = &b->layers[j].f[k], *fm = &m->layers[j].f[k];
            size_t mm = kfac_factor_len(fa);
            double *ref = NEWD(mm);
            for (size_t q = 0; q < mm; q++) ref[q] = 0.75 * fa->data[q] + 0.25 * fb->data[q];
            oracle_check_close_floor("container merge", fm->data, ref, mm, 1e-6,
                                fmax(oracle_max_abs(fa->data, mm), oracle_max_abs(fb->data, mm)), seed);
            ck_assert(fm->n_samples == 4.0 * n);
            free(ref);
        }
    /* layouts must match */
    net_t *other = s_net("input 1x2x2\nflatten\nfc out=2\nsoftmax_xent\n", 2, seed);
    kfac_stats_t *o = kfac_stats_new(other);
    ck_assert_int_eq(kfac_stats_update(avg, o, 0.9), -EINVAL);
    ck_assert_int_eq(kfac_stats_merge(avg, o), -EINVAL);
    ck_assert_int_eq(kfac_stats_compute(o, net), -EINVAL);
    kfac_stats_free(&o);
    net_free(&other);
    kfac_stats_free(&m);
    kfac_stats_free(&a);
    kfac_stats_free(&b);
    kfac_stats_free(&avg);
    kfac_stats_free(&avg); /* idempotent */
    free(x); free(buf);
    net_free(&net);
}
END_TEST

Suite *make_suite(void) {
    Suite *s = suite_create("kfac_stats_net");
    TCase *tn = tcase_create("net");
    tcase_set_timeout(tn, 20);
    tcase_add_test(tn, test_compute_single_example_exact_fisher);
    tcase_add_test(tn, test_compute_batch_vs_single_examples);
    tcase_add_test(tn, test_compute_bn_and_flatten_doubly);
    tcase_add_test(tn, test_compute_true_fisher_sampled_labels);
    tcase_add_test(tn, test_container_pack_update_merge);
    suite_add_tcase(s, tn);
    TCase *to = tcase_create("onednn");
    tcase_set_timeout(to, 20);
    tcase_add_checked_fixture(to, s_use_onednn, NULL);
    tcase_add_test(to, test_compute_single_example_exact_fisher);
    tcase_add_test(to, test_compute_batch_vs_single_examples);
    tcase_add_test(to, test_compute_true_fisher_sampled_labels);
    suite_add_tcase(s, to);
    return s;
}
