/* common/kfac/kfac_stats.h — K-FAC second-order statistics: the Kronecker factors
 * of every preconditioned layer, computed from one mini-batch with SYRK/GEMM,
 * folded into running averages, and flattened to packed triangles for the
 * wire.
 *
 * Conventions
 *   - float32, row-major. A symmetric factor of dimension d is stored full
 *     d x d; its UPPER triangle is authoritative. The functions here also
 *     mirror it onto the lower triangle, so a freshly computed factor is
 *     exactly symmetric, but consumers must only rely on the upper half.
 *   - Linear layer s = W a + b, W (out, in). The gradient matrix is
 *     V = [dW | db] (out, in+1), the bias being the homogeneous coordinate
 *     (last column). A layer without a bias (bias=0) has V = dW and no
 *     homogeneous coordinate. The Fisher block acting on vec(V) (columns
 *     stacked, see common/kfac/kfac_linalg.h) is approximated by A (x) G.
 *   - g is the PER-EXAMPLE gradient of that example's loss w.r.t. s. The
 *     network's loss is the batch mean, so nn's dy rows are g / n: every
 *     function below takes g_scale, the factor turning a dy row into g
 *     (g_scale = n for nn's dy; 1 when dy already holds per-example g).
 *   - E[.] is the mean over the n examples of the batch.
 *
 * The factors (what is computed, shapes, and why)
 *   fc, standard (Martens & Grosse 2015; Ba et al. Eq. 2):
 *       A = E[[a;1][a;1]^T]   (in+1, in+1),   G = E[g g^T]   (out, out).
 *       For one example A (x) G = vec(V) vec(V)^T exactly.
 *   conv, KFC (Grosse & Martens 2016; Ba et al. App. A Eq. 15). With patches
 *   p_{i,t} (K = in_c*k*k values, the rows of nn's l->cols) and per-position
 *   output gradients g_{i,t} at the |T| = oh*ow positions:
 *       A = E_i[ (1/|T|) sum_t [p_{i,t};1][p_{i,t};1]^T ]   (K+1, K+1)
 *       G = E_i[ sum_t g_{i,t} g_{i,t}^T ]                  (out, out)
 *     so that A (x) G = |T| E_{i,t}[p p^T] (x) E_{i,t}[g g^T], which is
 *     Eq. 15 (spatial homogeneity + spatially uncorrelated derivatives). This
 *     is also Grosse & Martens' own split: their Omega sums the patch outer
 *     products over positions and their Gamma divides the summed derivative
 *     outer products by |T|; here the |T| sits on G instead of A. Where the
 *     factor |T| sits does not change the damped preconditioner: factored
 *     Tikhonov damping's pi = sqrt((tr A/dA)/(tr G/dG)) scales with A / G,
 *     so (A c + pi c sqrt(l) I) (x) (G/c + sqrt(l)/(pi c) I) is the same
 *     product for every c > 0. For one example at one position (|T| = 1)
 *     A (x) G = vec(V) vec(V)^T exactly.
 *   conv, spatially averaged (Ba et al. App. A Eq. 16-19):
 *       A = E_i[ m_i m_i^T ],  m_i = [(1/|T|) sum_t p_{i,t}; 1]   (K+1, K+1)
 *       G = E_i[ s_i s_i^T ],  s_i = sum_t g_{i,t}                (out, out)
 *     so that A (x) G = |T|^2 E[E_t[A_t] E_t[A_t]^T] (x) E[E_t[Ds_t]
 *     E_t[Ds_t]^T], Eq. 19 (sum_t g = |T| E_t[g]). Note s_i is exactly the
 *     example's bias gradient.
 *   fc on a feature map, doubly factored (Ba et al. sec. 4, Eq. 4-8). The
 *     input of example i, flattened channel-major (index c*T + t, T = h*w,
 *     which is nn's NCHW layout), is the T x C activation matrix
 *     A_i[t][c] = a_i[c*T + t]. Its leading singular triple (sigma, u, v),
 *     A_i ~ sigma u v^T, gives K_i = sqrt(sigma) u (T) and
 *     Psi_i = sqrt(sigma) v (C) — the singular value split evenly as in the
 *     paper — with the sign fixed so that sum_c Psi_c >= 0 (the pair
 *     (K, Psi) -> (-K, -Psi) is the only freedom; K Psi^T is unchanged).
 *     Factors: E[K K^T] (T, T), E[Psi Psi^T] (C, C), G = E[g g^T] (out, out)
 *     and, for the bias (which has no homogeneous coordinate here), its own
 *     full Fisher block E[db db^T] = E[g g^T] (out, out): the same statistic
 *     as G, kept separately because it is damped and inverted differently
 *     (lambda, not the three-way pi lambda^(1/3)). Kronecker order on the
 *     input index c*T + t: E[a a^T] ~ E[Psi Psi^T] (x) E[K K^T], i.e. vec of
 *     the T x C matrix A_i stacked column by column (Eq. 7 written in this
 *     project's column-stacking vec).
 *     The rank-1 triple comes from the exact leading eigenpair of the smaller
 *     Gram matrix (A^T A or A A^T, m = min(T, C)), computed in double with
 *     LAPACK dsyevr (range 'I', the largest eigenvalue only, abstol =
 *     dlamch('S'), the value LAPACK recommends for the most accurate
 *     eigenvalues); the other singular vector is A v / sigma (or A^T u /
 *     sigma). No iteration count or tolerance to tune: the triple is
 *     accurate to double rounding times the gap ratio, then rounded to float.
 *   batch normalization, unit-wise (SP-NGD Eq. 14-17): per channel c,
 *       dgamma_{i,c} = sum_t g_{i,c,t} xhat_{i,c,t},   dbeta_{i,c} = sum_t g_{i,c,t}
 *       F_c = E[[dgamma^2, dgamma dbeta], [dgamma dbeta, dbeta^2]]
 *     stored as 3 floats per channel (dgamma^2, dgamma dbeta, dbeta^2).
 *
 * Factor order per layer (kfac_layer_stats_t.f[], and on the wire):
 *   fc standard:  A (in+has_bias), G (out)
 *   conv kfc/avg: A (K+has_bias),  G (out)
 *   fc doubly:    K (T), Psi (C), G (out), Gbias (out; only with a bias)
 *   batchnorm:    one KFAC_FACTOR_DIAG2X2 factor of 3*c floats
 *
 * Fisher type: the true Fisher uses labels sampled from the model's own
 * predictive distribution (kfac_sample_labels, one Monte-Carlo sample per
 * example, SP-NGD Eq. 5), the empirical Fisher the data labels (SP-NGD
 * Eq. 13). Either way the caller runs net_backward with those labels and
 * then kfac_stats_compute.
 *
 * Ownership: a kfac_stats_t owns its factor arena and scratch; factor data
 * pointers are views into it, valid until kfac_stats_free. Other pointer
 * arguments are borrowed for the duration of the call. Not thread-safe: one
 * thread per container. Functions return 0 or a negative errno and log why.
 */
#ifndef KFAC_STATS_H
#define KFAC_STATS_H

#include <stddef.h>

#include "common/nn/nn.h"
#include "common/base/rng.h"

typedef enum {
    KFAC_FISHER_TRUE = 0,   /* labels sampled from the model (1 MC sample) */
    KFAC_FISHER_EMPIRICAL,  /* the data labels */
} kfac_fisher_t;

typedef enum {
    KFAC_FACTOR_SYM = 0,    /* dim x dim symmetric, upper authoritative */
    KFAC_FACTOR_DIAG2X2,    /* dim 2x2 blocks, 3 floats each */
} kfac_factor_kind_t;

typedef enum {
    KFAC_FACTOR_ROLE_A = 0, /* input statistics */
    KFAC_FACTOR_ROLE_G,     /* output-gradient statistics */
    KFAC_FACTOR_ROLE_K,     /* doubly: spatial factor E[K K^T] */
    KFAC_FACTOR_ROLE_PSI,   /* doubly: channel factor E[Psi Psi^T] */
    KFAC_FACTOR_ROLE_GBIAS, /* doubly: the bias's full block */
    KFAC_FACTOR_ROLE_BN,    /* batchnorm unit-wise 2x2 blocks */
} kfac_factor_role_t;

#define KFAC_STATS_MAX_FACTORS 4

typedef struct kfac_factor {
    kfac_factor_kind_t kind;
    kfac_factor_role_t role;
    int dim;            /* SYM: matrix dimension; DIAG2X2: number of channels */
    float *data;        /* SYM: (dim, dim); DIAG2X2: (dim, 3); view into the arena */
    double n_samples;   /* examples folded into this value since the last reset */
    long n_updates;     /* batches folded in; 0 = empty (no value yet) */
} kfac_factor_t;

typedef struct kfac_layer_stats {
    int layer;          /* index into net->layers */
    layer_kind_t kind;  /* LAYER_FC, LAYER_CONV or LAYER_BATCHNORM */
    kfac_mode_t mode;   /* resolved: STANDARD, DOUBLY (fc), KFC, AVG (conv), STANDARD (bn) */
    int has_bias;       /* fc/conv: bias present (homogeneous coordinate / Gbias) */
    int in;             /* fc: input width; conv: K = in_c*k*k; bn: channels */
    int out;            /* fc/conv: outputs; bn: channels */
    int positions;      /* conv: |T| = oh*ow; bn: h*w; fc: 1 */
    int fm_c, fm_t;     /* doubly: C_in and T = h*w of the input feature map */
    int n_factors;
    kfac_factor_t f[KFAC_STATS_MAX_FACTORS];
    int skip;           /* 1: kfac_stats_compute leaves this layer out (its factors are marked empty) */
} kfac_layer_stats_t;

typedef struct kfac_stats {
    int n_layers;               /* preconditioned layers */
    kfac_layer_stats_t *layers; /* (n_layers) in network order */
    int batch_cap;              /* the net's batch capacity the scratch is sized for */
    size_t n_floats;            /* floats in the factor arena */
    float *arena;               /* (n_floats) all factor data */
    size_t work_len;            /* floats of float scratch */
    float *work;                /* (work_len) */
} kfac_stats_t;

/* ---- mode selection ------------------------------------------------------ */

/* Resolve the approximation of layer l. The model file may choose it
 * (l->kfac); KFAC_MODE_DEFAULT means: conv -> KFC; fc -> DOUBLY when its
 * input is a feature map (in_h*in_w > 1, from l's recorded input shape) wider
 * than doubly_min_in values (in_c*in_h*in_w > doubly_min_in), else STANDARD.
 * An explicit kfac=doubly needs a feature-map input. Batch-norm layers give
 * STANDARD (unit-wise 2x2 blocks) unless kfac=none; layers without
 * parameters give NONE. An fc behind a flatten sees a flat input here; pass
 * a copy whose in_c/in_h/in_w are the flatten's input (kfac_stats_new does).
 * Returns the kfac_mode_t value (>= 0) or -EINVAL for an impossible choice
 * (e.g. kfac=avg on an fc, doubly on a flat input). */
int kfac_stats_choose_mode(const layer_t *l, double doubly_min_in);

/* ---- factors from raw buffers (no net needed) ---------------------------- */

/* fc, standard. a (n, in), dy (n, out); writes A (in+has_bias)^2 and
 * G (out, out), both exactly symmetric:
 *     A = (1/n) [a 1]^T [a 1],   G = (g_scale^2 / n) dy^T dy.
 * work: n floats or NULL (then allocated). Returns 0 or -EINVAL/-ENOMEM. */
int kfac_stats_fc(const float *a, const float *dy, int n, int in, int out, int has_bias,
                  float g_scale, float *A, float *G, float *work);

/* Float scratch (count of floats) kfac_stats_conv_cm needs for mode KFC or AVG. */
size_t kfac_stats_conv_cm_work_len(kfac_mode_t mode, int n, int positions, int K, int out);

/* conv, KFC or AVG (see the file comment for the exact normalization), from
 * channel-major patches, nn's own layout: cols (K, n*positions), row
 * (c, ky, kx), column (example, position) as in nn's l->cols; dy (n, out,
 * positions) as in nn's l->dy (position-minor). Writes A (K+has_bias)^2 and
 * G (out, out). work: kfac_stats_conv_cm_work_len floats or NULL.
 * kfac_stats_compute uses this. Returns 0 or -EINVAL/-ENOMEM. */
int kfac_stats_conv_cm(kfac_mode_t mode, const float *cols, const float *dy, int n, int positions,
                       int K, int out, int has_bias, float g_scale, float *A, float *G, float *work);

/* Rank-1 approximation of one example's feature-map input x (C*T floats,
 * channel-major: A[t][c] = x[c*T + t]): K (T) and psi (C) with
 * A ~ K psi^T, K = sqrt(sigma) u, psi = sqrt(sigma) v, sign fixed so that
 * sum(psi) >= 0 (if sum(psi) == 0, the largest |psi_c| is positive).
 * *sigma (may be NULL) receives the leading singular value. An all-zero x
 * gives K = psi = 0. Returns 0, -EINVAL, -ENOMEM or -EIO (LAPACK failed). */
int kfac_stats_rank1(const float *x, int C, int T, float *K, float *psi, double *sigma);

/* Float scratch kfac_stats_doubly needs. */
size_t kfac_stats_doubly_work_len(int n, int C, int T);

/* fc on a feature map, doubly factored. a (n, C*T) channel-major per example,
 * dy (n, out). Writes KK (T, T) = E[K K^T], PP (C, C) = E[Psi Psi^T],
 * G (out, out) = E[g g^T] and, if Gbias is non-NULL, Gbias = G.
 * work: kfac_stats_doubly_work_len floats or NULL. Returns 0 or -errno. */
int kfac_stats_doubly(const float *a, const float *dy, int n, int C, int T, int out, float g_scale,
                      float *KK, float *PP, float *G, float *Gbias, float *work);

/* batch normalization, unit-wise. xhat and dy (n, c, positions) as in nn's
 * l->xhat and l->dy. Writes F (c, 3): (E[dgamma^2], E[dgamma dbeta],
 * E[dbeta^2]) per channel, accumulated in double. Returns 0 or -EINVAL. */
int kfac_stats_bn(const float *xhat, const float *dy, int n, int c, int positions, float g_scale,
                  float *F);

/* ---- Fisher type ------------------------------------------------------------ */

/* True Fisher: one label per example drawn from its predictive distribution.
 * probs (n, classes) rows of non-negative values (normalized by their sum
 * here, so rounding does not bias the draw); labels (n) caller-owned.
 * Label k is drawn with probability probs[i,k] / sum_j probs[i,j] by
 * inverse-CDF sampling with one rng_uniform per example, so equal seeds give
 * equal labels. Returns 0, or -EINVAL (NULL, n/classes < 1, a negative or
 * non-finite probability, or a row summing to 0). */
int kfac_sample_labels(const float *probs, int n, int classes, rng_t *rng, int *labels);

/* ---- running averages -------------------------------------------------------- */

/* Floats of a factor's data (SYM: dim^2, DIAG2X2: 3*dim). */
size_t kfac_factor_len(const kfac_factor_t *f);

/* Fold a fresh value into f:  F <- decay F + (1 - decay) F_new  (Pauloski et
 * al. Eq. 16-17 written the intended way round); the first update
 * (n_updates == 0) sets F = F_new. fresh has kfac_factor_len(f) floats and
 * stands for n_fresh examples; f->n_samples += n_fresh, f->n_updates += 1.
 * decay in [0, 1]. Returns 0 or -EINVAL. */
int kfac_factor_update(kfac_factor_t *f, const float *fresh, double n_fresh, double decay);

/* ---- the per-network container ---------------------------------------------- */

/* Build the factor list for every preconditioned layer of net (layers whose
 * resolved mode is not NONE) with scratch for net->batch_cap examples; the
 * doubly-factored width threshold is net->fc_doubly_min_in. All factors
 * start empty (zero, n_updates = 0). Returns NULL (logged) on an impossible
 * mode or out of memory. */
kfac_stats_t *kfac_stats_new(const net_t *net);

/* Free everything; NULL is a no-op and *s_p is set to NULL. */
void kfac_stats_free(kfac_stats_t **s_p);

/* Zero every factor and its counts. */
void kfac_stats_reset(kfac_stats_t *s);

/* Slot of net layer `layer` in s->layers, or -1. */
int kfac_stats_find(const kfac_stats_t *s, int layer);

/* Overwrite every factor with the statistics of the current batch, right
 * after net_forward + net_backward on net (the same net s was built from,
 * or one parsed from the same model): uses net->batch_n, net_layer_input,
 * l->cols, l->xhat and l->dy, with g_scale = batch_n. Each factor gets
 * n_samples = batch_n and n_updates = 1; a layer with skip set is not
 * computed and its factors get n_updates = 0 (empty). Returns 0 or -EINVAL (shapes do
 * not match, batch_n out of range) / -ENOMEM / -EIO. */
int kfac_stats_compute(kfac_stats_t *s, net_t *net);

/* Running average of whole containers: every non-empty factor of batch is
 * folded into avg with kfac_factor_update(decay). The two must have the
 * same layout. Returns 0 or -EINVAL. */
int kfac_stats_update(kfac_stats_t *avg, const kfac_stats_t *batch, double decay);

/* Combine statistics of disjoint batches (e.g. several workers' batches of
 * the same step): dst <- (n_dst dst + n_src src) / (n_dst + n_src) per
 * factor, n_samples summed; an empty dst takes src. Returns 0 or -EINVAL. */
int kfac_stats_merge(kfac_stats_t *dst, const kfac_stats_t *src);

/* ---- wire form: packed triangles ------------------------------------------- */

/* Floats of one factor on the wire: SYM dim(dim+1)/2 (packed upper triangle,
 * row by row, kfac_linalg_packed_index), DIAG2X2 3*dim. */
size_t kfac_factor_packed_len(const kfac_factor_t *f);

/* Factor dimensions of a layer in the order above: writes up to max_dims
 * values dims[j] = f[j].dim and returns n_factors (or -EINVAL). */
int kfac_stats_layer_dims(const kfac_layer_stats_t *ls, int *dims, int max_dims);

/* Floats of a layer's factors on the wire, concatenated in factor order. */
size_t kfac_stats_layer_packed_len(const kfac_layer_stats_t *ls);

/* Pack a layer's factors into out (out_len floats, caller-owned, at least
 * kfac_stats_layer_packed_len). Returns 0 or -EINVAL. */
int kfac_stats_layer_pack(const kfac_layer_stats_t *ls, float *out, size_t out_len);

/* Unpack in (exactly kfac_stats_layer_packed_len floats) into a layer's
 * factors, validating first (nothing is written on error): every value
 * finite, SYM diagonals and the DIAG2X2 dgamma^2 / dbeta^2 entries >= 0 (the
 * factors are second moments). Each factor then holds that value with
 * n_samples = n_samples and n_updates = 1. Returns 0 or -EINVAL (logged). */
int kfac_stats_layer_unpack(kfac_layer_stats_t *ls, const float *in, size_t in_len,
                            double n_samples);

/* The same for all layers concatenated in slot order. */
size_t kfac_stats_packed_len(const kfac_stats_t *s);
int kfac_stats_pack(const kfac_stats_t *s, float *out, size_t out_len);
int kfac_stats_unpack(kfac_stats_t *s, const float *in, size_t in_len, double n_samples);

#endif
