/* common/kfac/kfac_lowrank.h — fully connected weight gradients kept in
 * factored (low-rank) form.
 *
 * Over a batch of b examples an fc layer's weight gradient is
 *     dW = D^T X    (n_out, n_in),
 * D (b, n_out) the gradients w.r.t. the layer's outputs (net->layers[i].dy,
 * which already carries the 1/b of the mean loss) and X (b, n_in) its inputs
 * (net_layer_input), so its rank is at most b. For a wide layer the two
 * factors are much smaller than dW (the wide model's fc 3136 -> 1024 with
 * b = 64: 266k floats instead of 3.2M), and K-FAC's preconditioning can act
 * on them: G^-1 D^T X A^-1 = (D G^-1)^T (X A^-1) (kfac_precond.h,
 * kfac_precond_kron_lowrank). The mean over workers is the row
 * concatenation: sum_i w_i D_i^T X_i = [w_1 D_1; w_2 D_2; ..]^T [X_1; X_2; ..].
 * The bias gradient is not part of it: it travels and is kept densely.
 *
 * The shape rules (no setting):
 *  - a worker sends a layer factored when it is an fc layer that K-FAC
 *    preconditions and  4 b (n_in + n_out) <= n_in n_out  (the two factors
 *    are at most a quarter of dW; kfac_lowrank_wire_pays);
 *  - the parameter server preconditions a factored layer in factored form
 *    when that costs fewer multiply-adds than densifying and preconditioning
 *    densely (kfac_lowrank_update_pays, with B = the rows of every worker);
 *    otherwise, and wherever it needs the dense gradient, it densifies.
 *
 * Conventions: float32, row-major; sums of Gram products in double.
 * Ownership: a kfac_lowrank_t owns D and X (kfac_lowrank_release); a set
 * owns its entries. Not thread-safe: one owner thread.
 */
#ifndef KFAC_LOWRANK_H
#define KFAC_LOWRANK_H

#include <stddef.h>

#include "common/nn/nn.h"

typedef struct kfac_lowrank {
    int layer;        /* net layer index (an fc layer) */
    int n_out, n_in;  /* the weight's shape */
    size_t w_off;     /* the weight's offset in the params arena */
    int n_rows;       /* rows held; 0: the layer's gradient is not held factored */
    int cap_rows;     /* rows D and X have room for */
    float *D;         /* (cap_rows, n_out), rows [0, n_rows) used */
    float *X;         /* (cap_rows, n_in), rows [0, n_rows) used */
} kfac_lowrank_t;

/* One entry per fc layer of a net, in layer order. */
typedef struct kfac_lowrank_set {
    int n;
    kfac_lowrank_t *v; /* (n) */
} kfac_lowrank_set_t;

/* Entries for every fc layer of net (borrowed, only shapes read), each
 * empty (no memory until rows are appended). Returns 0 or -ENOMEM (set
 * released). */
int kfac_lowrank_set_init(kfac_lowrank_set_t *set, const net_t *net);

/* Free every entry's arrays and zero set. NULL is a no-op. */
void kfac_lowrank_set_release(kfac_lowrank_set_t *set);

/* Every entry to 0 rows (memory kept). */
void kfac_lowrank_set_clear(kfac_lowrank_set_t *set);

/* The entry of net layer `layer`, or NULL when it is no fc layer. */
kfac_lowrank_t *kfac_lowrank_set_find(const kfac_lowrank_set_t *set, int layer);

/* Number of entries holding rows. */
int kfac_lowrank_set_count(const kfac_lowrank_set_t *set);

/* Append n_rows rows: D rows (n_rows, n_out) times scale, X rows (n_rows,
 * n_in) as they are (both borrowed, read only). Grows the arrays. Returns
 * 0, -EINVAL (n_rows < 0) or -ENOMEM (nothing appended). */
int kfac_lowrank_append(kfac_lowrank_t *e, const float *D, const float *X, int n_rows, float scale);

/* D <- s D (so dW <- s dW). */
void kfac_lowrank_scale(kfac_lowrank_t *e, float s);

/* <A^T B, C^T E>_F = sum_ij (A C^T)_ij (B E^T)_ij for A (na, n_out), B
 * (na, n_in), C (nc, n_out), E (nc, n_in) with row strides lda..lde: the
 * Frobenius inner product of two low-rank matrices through two na x nc
 * Gram products (na nc (n_out + n_in) multiply-adds instead of forming
 * n_out x n_in matrices). Float products, summed in double. Returns NAN
 * on a bad argument or no memory. */
double kfac_lowrank_inner(const float *A, int lda, const float *B, int ldb, int na, const float *C, int ldc,
                          const float *E, int lde, int nc, int n_out, int n_in);

/* ||D^T X||_F^2 of e's rows (kfac_lowrank_inner with itself); 0 when it
 * holds none. */
double kfac_lowrank_norm2(const kfac_lowrank_t *e);

/* W = D^T X + beta W, W (n_out, n_in) row-major (n_out * n_in floats). */
void kfac_lowrank_densify(const kfac_lowrank_t *e, float *W, float beta);

/* The worker's rule: send an fc layer's weight gradient factored when
 * 4 b (n_in + n_out) <= n_in n_out. 1 or 0. */
int kfac_lowrank_wire_pays(int b, int n_out, int n_in);

/* The parameter server's rule: multiply-adds of preconditioning B rows in
 * factored form (D G^-1, X A^-1 row by row, forming (D G^-1)^T (X A^-1))
 * against densifying (B n_out n_in) and preconditioning densely. n_cols is
 * the dense gradient's columns (n_in, or n_in + 1 with the homogeneous
 * bias column); doubly-factored layers give n_c, n_t (n_c n_t = n_in),
 * others 0, 0. 1 when factored costs less. */
int kfac_lowrank_update_pays(int B, int n_out, int n_cols, int n_c, int n_t);

#endif
