/* tests/net/test_wire.c — K-FAC objects on the wire (common/net/wire.h):
 *   - statistics: a network with fc (standard and doubly factored), conv
 *     and batch-norm layers computes its factors on a fresh random batch;
 *     wire_stats_to_msg() -> encode -> decode must pass msg_validate()
 *     against wire_shape_init()'s model shape and unpack into a fresh
 *     container bit for bit (no tolerance: the wire copies float32 as is);
 *     a mis-sized factor or one of the wrong kind must be rejected;
 *   - the model's limits: wire_shape_init()'s max_n and max_floats are
 *     exactly the largest factor and the longest array a message about the
 *     model can carry (a brute-force scan of the factors); a real JobResult
 *     (kfac_inverse_compute on the computed factor, then
 *     wire_result_from_inverse) of every invertible factor kind (A, G, K,
 *     PSI, G_BIAS), in both forms, passes msg_validate() with those limits,
 *     fits msg_limits_max_bytes() when encoded, and loads back bit for bit;
 *     the model is chosen so that the eigenvectors of its widest factor (n *
 *     n floats) are longer than anything else it sends, so limits that
 *     leave the eigenvectors out reject its eigen results; an eigen result
 *     cut to the packed size, and any result for a batch-norm factor, is
 *     rejected;
 *   - Params against the shape: the right length passes, one float short
 *     does not.
 * Random inputs come from a fresh seed (/dev/urandom), printed on failure.
 */
#include <check.h>
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "common/base/rng.h"
#include "common/kfac/kfac_inverse.h"
#include "common/kfac/kfac_linalg.h"
#include "common/kfac/kfac_stats.h"
#include "common/net/wire.h"
#include "common/nn/nn.h"
#include "proto/msg.h"
#include "tests/lib/seed.h"

/* conv (KFC) -> batch norm -> pool -> fc on a feature map (doubly) -> fc:
 * every factor kind. */
static const char *s_model =
    "input 2x6x6\n"
    "conv name=c1 out=4 k=3 pad=1 bias=0\n"
    "batchnorm name=bn1\n"
    "relu\n"
    "maxpool k=2\n"
    "fc name=f1 out=7 kfac=doubly\n"
    "relu\n"
    "fc name=f2 out=5\n"
    "softmax_xent\n";

/* A wide first factor and few parameters: conv A is 26 x 26 (676 floats as
 * eigenvectors) while the model has 151 parameters. */
static const char *s_wide =
    "input 1x8x8\n"
    "conv name=c1 out=2 k=5\n"
    "relu\n"
    "fc name=f1 out=3\n"
    "softmax_xent\n";

/* A network with parameters from seed and its statistics on one fresh
 * random batch of n examples. */
static net_t *s_net_with_stats(const char *model, int n, uint64_t seed, kfac_stats_t **st) {
    char err[512];
    rng_t r;
    rng_seed(&r, seed);
    net_t *net = net_parse(model, "test", n, err, sizeof err);
    ck_assert_msg(net != NULL, "%s", err);
    net_init_params(net, seed);
    float *x = malloc((size_t)n * net->in_size * sizeof(float));
    int *y = malloc((size_t)n * sizeof(int));
    ck_assert(x && y);
    for (int i = 0; i < n * net->in_size; i++) x[i] = (float)rng_normal(&r);
    for (int i = 0; i < n; i++) y[i] = (int)rng_below(&r, (uint32_t)net->n_classes);
    ck_assert_int_eq(net_forward(net, x, n, 1), 0);
    net_backward(net, y, NULL, NULL);
    *st = kfac_stats_new(net);
    ck_assert_ptr_nonnull(*st);
    ck_assert_int_eq(kfac_stats_compute(*st, net), 0);
    free(x);
    free(y);
    return net;
}

/* ---- statistics on the wire ---------------------------------------------------- */

/* Only the wanted layers (a Params' stats_layers): kfac_stats_compute
 * leaves the others empty and computes the wanted ones exactly as a full
 * computation does (bit for bit: the same code on the same batch), and
 * wire_stats_to_msg sends only them, in order; an empty list wants all. */
START_TEST(test_wire_stats_want_subset) {
    uint64_t seed = test_seed();
    const int n = 5;
    kfac_stats_t *full = NULL;
    net_t *net = s_net_with_stats(s_model, n, seed, &full);
    kfac_stats_t *part = kfac_stats_new(net);
    ck_assert_ptr_nonnull(part);
    rng_t r;
    rng_seed(&r, seed ^ 0x77);
    uint32_t want[8];
    size_t nw = 0;
    for (int j = 0; j < full->n_layers; j++)
        if (rng_below(&r, 2) || (j == full->n_layers - 1 && nw == 0)) want[nw++] = (uint32_t)full->layers[j].layer;
    ck_assert_int_eq(wire_stats_want(part, want, nw), (int)nw);
    ck_assert_int_eq(kfac_stats_compute(part, net), 0);
    msg_stats_t ms;
    float *packed = NULL;
    ck_assert_int_eq(wire_stats_to_msg(part, &ms, &packed), 0);
    ck_assert_uint_eq(ms.n_layers, nw);
    size_t k = 0;
    for (int j = 0; j < full->n_layers; j++) {
        const kfac_layer_stats_t *a = &full->layers[j], *b = &part->layers[j];
        int wanted = k < nw && want[k] == (uint32_t)a->layer;
        for (int f = 0; f < a->n_factors; f++) {
            if (!wanted) {
                ck_assert_int_eq(b->f[f].n_updates, 0);
                continue;
            }
            ck_assert_int_eq(b->f[f].n_updates, 1);
            ck_assert_msg(!memcmp(a->f[f].data, b->f[f].data, kfac_factor_len(&a->f[f]) * sizeof(float)),
                          "seed %llu: layer %d factor %d differs", (unsigned long long)seed, a->layer, f);
        }
        if (wanted) {
            ck_assert_uint_eq(ms.layers[k].layer, (uint32_t)a->layer);
            ck_assert_uint_eq(ms.layers[k].n_factors, (size_t)a->n_factors);
            k++;
        }
    }
    wire_stats_release(&ms, &packed);
    ck_assert_int_eq(wire_stats_want(part, NULL, 0), part->n_layers); /* empty: all */
    ck_assert_int_eq(kfac_stats_compute(part, net), 0);
    ck_assert_int_eq(wire_stats_to_msg(part, &ms, &packed), 0);
    ck_assert_uint_eq(ms.n_layers, (size_t)part->n_layers);
    wire_stats_release(&ms, &packed);
    kfac_stats_free(&part);
    kfac_stats_free(&full);
    net_free(&net);
}
END_TEST

START_TEST(test_wire_stats_roundtrip) {
    uint64_t seed = test_seed();
    char err[512];
    const int n = 6;
    kfac_stats_t *st = NULL;
    net_t *net = s_net_with_stats(s_model, n, seed, &st);
    kfac_stats_t *back = kfac_stats_new(net);
    ck_assert_ptr_nonnull(back);
    ck_assert_int_ge(st->n_layers, 4); /* c1, bn1, f1, f2 */

    msg_t m, d;
    msg_init(&m, MSG_STATS_PUSH, MSG_ROLE_STATSD, 3);
    m.stats_push.params_version = 11;
    m.stats_push.n_examples = (uint64_t)n;
    float *packed = NULL;
    ck_assert_int_eq(wire_stats_to_msg(st, &m.stats_push.stats, &packed), 0);
    ck_assert_uint_eq(m.stats_push.stats.n_layers, (size_t)st->n_layers);
    uint8_t *buf = NULL;
    size_t len = 0;
    ck_assert_int_eq(msg_encode(&m, &buf, &len), 0);
    ck_assert_int_eq(msg_decode(buf, len, &d, err, sizeof err), 0);
    wire_shape_t sh;
    ck_assert_int_eq(wire_shape_init(&sh, net, st), 0);
    int rc = msg_validate(&d, &sh.limits, err, sizeof err);
    ck_assert_msg(rc == 0, "seed %llu: %s", (unsigned long long)seed, err);
    ck_assert_int_le((int64_t)len, msg_limits_max_bytes(&sh.limits));

    /* Unpack layer by layer into a fresh container: the same floats. */
    size_t total = kfac_stats_packed_len(st);
    float *want = malloc(total * sizeof(float)), *got = malloc(total * sizeof(float));
    ck_assert_int_eq(kfac_stats_pack(st, want, total), 0);
    for (size_t l = 0; l < d.stats_push.stats.n_layers; l++) {
        const msg_layer_stats_t *ls = &d.stats_push.stats.layers[l];
        int slot = kfac_stats_find(back, (int)ls->layer);
        ck_assert_int_ge(slot, 0);
        size_t need = kfac_stats_layer_packed_len(&back->layers[slot]), off = 0;
        ck_assert_uint_le(need, sh.max_layer_floats);
        float *cat = malloc(need * sizeof(float));
        for (size_t f = 0; f < ls->n_factors; f++) {
            ck_assert_uint_le(off + ls->factors[f].n_data, need);
            memcpy(cat + off, ls->factors[f].data, ls->factors[f].n_data * sizeof(float));
            off += ls->factors[f].n_data;
        }
        ck_assert_uint_eq(off, need);
        ck_assert_int_eq(kfac_stats_layer_unpack(&back->layers[slot], cat, need, (double)n), 0);
        free(cat);
    }
    ck_assert_int_eq(kfac_stats_pack(back, got, total), 0);
    ck_assert_msg(memcmp(want, got, total * sizeof(float)) == 0, "seed %llu: factors changed on the wire",
                  (unsigned long long)seed);

    /* A factor one float short is caught by validation against the shape. */
    msg_factor_t *f0 = &d.stats_push.stats.layers[0].factors[0];
    f0->n_data -= 1;
    ck_assert_int_eq(msg_validate(&d, &sh.limits, err, sizeof err), -EINVAL);
    f0->n_data += 1;
    /* So is a factor of the wrong kind. */
    msg_factor_kind_t k = f0->kind;
    f0->kind = k == MSG_FACTOR_G ? MSG_FACTOR_A : MSG_FACTOR_G;
    ck_assert_int_eq(msg_validate(&d, &sh.limits, err, sizeof err), -EINVAL);
    f0->kind = k;

    wire_shape_release(&sh);
    msg_clear(&d);
    free(buf);
    wire_stats_release(&m.stats_push.stats, &packed);
    ck_assert_ptr_null(packed);
    free(want);
    free(got);
    kfac_stats_free(&st);
    kfac_stats_free(&back);
    net_free(&net);
}
END_TEST

/* ---- the model's limits against real job results --------------------------------- */

static uint64_t s_max(uint64_t a, uint64_t b) { return a > b ? a : b; }

/* JobResult of (layer, factor) from inv -> encode -> decode -> validate
 * with sh's limits; then load it back the way kfac-ps does and compare
 * with inv bit for bit. Returns the validation's return code (the loaded
 * copy is compared only when it passed). */
static int s_result_roundtrip(const wire_shape_t *sh, const kfac_inverse_t *inv, uint32_t layer,
                              uint32_t factor, uint64_t seed) {
    char err[512] = "";
    msg_t m, d;
    msg_init(&m, MSG_JOB_RESULT, MSG_ROLE_INVERTD, 1);
    m.job_result.job_id = 9;
    m.job_result.layer = layer;
    m.job_result.factor = factor;
    m.job_result.factor_version = 4;
    float *packed = NULL;
    ck_assert_int_eq(wire_result_from_inverse(inv, &m.job_result, &packed), 0);
    ck_assert_uint_eq(m.job_result.n, (uint32_t)inv->n);
    uint8_t *buf = NULL;
    size_t len = 0;
    ck_assert_int_eq(msg_encode(&m, &buf, &len), 0);
    free(packed);
    ck_assert_msg((int64_t)len <= msg_limits_max_bytes(&sh->limits),
                  "a %zu-byte result is over msg_limits_max_bytes() = %lld", len,
                  (long long)msg_limits_max_bytes(&sh->limits));
    ck_assert_int_eq(msg_decode(buf, len, &d, err, sizeof err), 0);
    free(buf);
    int rc = msg_validate(&d, &sh->limits, err, sizeof err);
    if (rc == 0) {
        int n = inv->n;
        kfac_inverse_t *got = kfac_inverse_new(n);
        ck_assert_ptr_nonnull(got);
        if (inv->method == KFAC_INV_EIGEN) {
            ck_assert_uint_eq(d.job_result.n_eigvecs, (size_t)n * (size_t)n);
            ck_assert_int_eq(kfac_inverse_load_eigen(got, d.job_result.eigvecs, d.job_result.eigvals,
                                                     (float)d.job_result.damping), 0);
            ck_assert(memcmp(got->Q, inv->Q, (size_t)n * n * sizeof(float)) == 0);
            ck_assert(memcmp(got->v, inv->v, (size_t)n * sizeof(float)) == 0);
        } else {
            ck_assert_uint_eq(d.job_result.n_inverse, kfac_linalg_packed_len(n));
            float *full = malloc((size_t)n * n * sizeof(float));
            ck_assert_int_eq(kfac_linalg_unpack_upper(d.job_result.inverse, n, full), 0);
            ck_assert_int_eq(kfac_inverse_load_cholesky(got, full, (float)d.job_result.damping), 0);
            for (int i = 0; i < n; i++)
                for (int j = i; j < n; j++)
                    ck_assert_msg(got->inv[i * n + j] == inv->inv[i * n + j],
                                  "seed %llu: inverse (%d,%d) changed on the wire", (unsigned long long)seed, i, j);
            free(full);
        }
        ck_assert(got->damping_used == inv->damping_used);
        kfac_inverse_free(&got);
    }
    msg_clear(&d);
    return rc;
}

START_TEST(test_wire_shape_limits_fit_eigen_results) {
    uint64_t seed = test_seed();
    const char *models[2] = {s_model, s_wide};
    int kinds_seen[MSG_FACTOR_COUNT] = {0};
    for (int mi = 0; mi < 2; mi++) {
        kfac_stats_t *st = NULL;
        net_t *net = s_net_with_stats(models[mi], 8, seed + (uint64_t)mi, &st);
        wire_shape_t sh;
        ck_assert_int_eq(wire_shape_init(&sh, net, st), 0);

        /* The oracle: a scan of every factor for the largest n and the
         * longest array (params, state, packed factor, packed inverse,
         * eigenvectors). */
        uint32_t want_n = 2;
        uint64_t want_floats = s_max(net->n_params, net->n_state), widest_packed = 0, widest_eig = 0;
        for (int j = 0; j < st->n_layers; j++)
            for (int f = 0; f < st->layers[j].n_factors; f++) {
                const kfac_factor_t *fa = &st->layers[j].f[f];
                uint64_t packed = kfac_factor_packed_len(fa);
                want_floats = s_max(want_floats, packed);
                if (fa->kind == KFAC_FACTOR_DIAG2X2) continue;
                if ((uint32_t)fa->dim > want_n) want_n = (uint32_t)fa->dim;
                uint64_t eig = (uint64_t)fa->dim * (uint64_t)fa->dim;
                want_floats = s_max(want_floats, eig);
                if (eig > widest_eig) {
                    widest_eig = eig;
                    widest_packed = packed;
                }
            }
        ck_assert_uint_eq(sh.limits.max_n, want_n);
        ck_assert_uint_eq(sh.limits.max_floats, want_floats);
        ck_assert_uint_eq(sh.limits.max_layers, (uint32_t)net->n_layers);
        ck_assert_ptr_eq(sh.limits.model, &sh.model);
        if (mi == 1) /* the eigenvectors are what sets the limit here */
            ck_assert_uint_gt(widest_eig, s_max(s_max(net->n_params, net->n_state), widest_packed));

        for (int j = 0; j < st->n_layers; j++) {
            const kfac_layer_stats_t *ls = &st->layers[j];
            for (int f = 0; f < ls->n_factors; f++) {
                const kfac_factor_t *fa = &ls->f[f];
                msg_factor_kind_t kind = wire_factor_kind(fa);
                ck_assert_int_eq((int)sh.layers[ls->layer].kind[f], (int)kind);
                if (fa->kind == KFAC_FACTOR_DIAG2X2) {
                    /* Not an inversion job: a result for it is turned away. */
                    ck_assert_uint_eq(sh.layers[ls->layer].n_blocks[f], (uint32_t)fa->dim);
                    msg_t m;
                    msg_init(&m, MSG_JOB_RESULT, MSG_ROLE_INVERTD, 1);
                    float q[4] = {1, 0, 0, 1}, v[2] = {1, 1};
                    m.job_result = (msg_job_result_t){.layer = (uint32_t)ls->layer, .factor = (uint32_t)f,
                                                      .method = MSG_METHOD_EIGEN, .n = 2, .eigvecs = q,
                                                      .n_eigvecs = 4, .eigvals = v, .n_eigvals = 2};
                    char err[256];
                    ck_assert_int_eq(msg_validate(&m, &sh.limits, err, sizeof err), -EINVAL);
                    kinds_seen[kind] = 1;
                    continue;
                }
                ck_assert_uint_eq(sh.layers[ls->layer].n[f], (uint32_t)fa->dim);
                for (int meth = 0; meth < 2; meth++) {
                    kfac_inv_method_t method = meth ? KFAC_INV_EIGEN : KFAC_INV_CHOLESKY;
                    kfac_inverse_t *inv = kfac_inverse_new(fa->dim);
                    ck_assert_ptr_nonnull(inv);
                    ck_assert_int_eq(kfac_inverse_compute(fa->data, fa->dim, 1e-2f, method, inv, NULL), 0);
                    ck_assert_int_eq((int)inv->method, (int)method);
                    char what[64];
                    snprintf(what, sizeof what, "%s n=%d", msg_factor_kind_name(kind), fa->dim);
                    ck_assert_msg(s_result_roundtrip(&sh, inv, (uint32_t)ls->layer, (uint32_t)f, seed) == 0,
                                  "seed %llu: the %s result of the %s factor does not pass the model's limits",
                                  (unsigned long long)seed, kfac_inverse_method_name(method), what);
                    if (method == KFAC_INV_EIGEN && (uint64_t)fa->dim * (uint64_t)fa->dim == widest_eig &&
                        mi == 1) {
                        /* Limits that leave the eigenvectors out reject the
                         * widest eigen result. */
                        wire_shape_t narrow;
                        ck_assert_int_eq(wire_shape_init(&narrow, net, st), 0);
                        narrow.limits.max_floats = s_max(s_max(net->n_params, net->n_state), widest_packed);
                        ck_assert_int_eq(s_result_roundtrip(&narrow, inv, (uint32_t)ls->layer, (uint32_t)f, seed),
                                         -EINVAL);
                        wire_shape_release(&narrow);
                    }
                    kfac_inverse_free(&inv);
                }
                kinds_seen[kind] = 1;
            }
        }

        /* Eigenvectors cut to the packed size are rejected. */
        const kfac_factor_t *fa = &st->layers[0].f[0];
        ck_assert_int_ne(fa->kind, KFAC_FACTOR_DIAG2X2);
        kfac_inverse_t *inv = kfac_inverse_new(fa->dim);
        ck_assert_int_eq(kfac_inverse_compute(fa->data, fa->dim, 1e-2f, KFAC_INV_EIGEN, inv, NULL), 0);
        msg_t m;
        msg_init(&m, MSG_JOB_RESULT, MSG_ROLE_INVERTD, 1);
        m.job_result.layer = (uint32_t)st->layers[0].layer;
        float *packed = NULL;
        ck_assert_int_eq(wire_result_from_inverse(inv, &m.job_result, &packed), 0);
        m.job_result.n_eigvecs = kfac_linalg_packed_len(fa->dim);
        char err[256];
        ck_assert_int_eq(msg_validate(&m, &sh.limits, err, sizeof err), -EINVAL);
        ck_assert_msg(strstr(err, "eigvecs") != NULL, "%s", err);
        kfac_inverse_free(&inv);

        wire_shape_release(&sh);
        kfac_stats_free(&st);
        net_free(&net);
    }
    const msg_factor_kind_t all[] = {MSG_FACTOR_A, MSG_FACTOR_G, MSG_FACTOR_K, MSG_FACTOR_PSI,
                                     MSG_FACTOR_G_BIAS, MSG_FACTOR_BN};
    for (size_t i = 0; i < sizeof all / sizeof all[0]; i++)
        ck_assert_msg(kinds_seen[all[i]], "no %s factor was tried", msg_factor_kind_name(all[i]));
}
END_TEST

START_TEST(test_wire_shape_params_checked) {
    char err[512];
    net_t *net = net_parse(s_model, "test", 2, err, sizeof err);
    ck_assert_ptr_nonnull(net);
    wire_shape_t sh;
    ck_assert_int_eq(wire_shape_init(&sh, net, NULL), 0);
    msg_t m;
    msg_init(&m, MSG_PARAMS, MSG_ROLE_PS, 0);
    m.params.version = 1;
    m.params.params = net->params;
    m.params.n_params = net->n_params;
    ck_assert_int_eq(msg_validate(&m, &sh.limits, err, sizeof err), 0);
    m.params.n_params = net->n_params - 1;
    ck_assert_int_eq(msg_validate(&m, &sh.limits, err, sizeof err), -EINVAL);
    wire_shape_release(&sh);
    wire_shape_release(&sh); /* released twice: a no-op */
    net_free(&net);
}
END_TEST

Suite *make_suite(void) {
    Suite *s = suite_create("wire");
    TCase *tc = tcase_create("wire");
    tcase_add_test(tc, test_wire_stats_roundtrip);
    tcase_add_test(tc, test_wire_stats_want_subset);
    tcase_add_test(tc, test_wire_shape_limits_fit_eigen_results);
    tcase_add_test(tc, test_wire_shape_params_checked);
    suite_add_tcase(s, tc);
    return s;
}
