/* common/kfac/kfac_refresh.h — SP-NGD's adaptive refresh of stale statistics
 * (Osawa et al., Algorithms 1-2): when to recompute a statistic, from how
 * much it changed between its last recorded values.
 *
 * float32 values, distances accumulated in double. kfac_refresh_t owns its
 * history; other pointers are borrowed for the call. Functions return 0 or
 * a negative errno and reject bad input (never assert it). */
#ifndef KFAC_REFRESH_H
#define KFAC_REFRESH_H

#include <stddef.h>

/* Relative Frobenius distance ||x - ref||_F / ||ref||_F (n floats, double
 * accumulation): SP-NGD's similarity measure, "x is similar to ref" when it
 * is < alpha. ref == 0: 0 if x == 0 too, else +Inf. */
double kfac_refresh_distance(const float *x, const float *ref, size_t n);

/* One call of Algorithm 2. x is the statistic just recomputed, x1 the
 * previous recorded value X_{-1}, x2 the one before X_{-2} (NULL when that
 * history does not exist yet: treated as not similar). On entry *delta is
 * the last interval Delta_{-1} and *delta_prev the one before Delta_{-2};
 * on return *delta is the next interval and *delta_prev the last one:
 *     X not similar to X_{-1}:        Delta = max(1, floor(Delta_{-1} / 2))
 *     else X not similar to X_{-2}:   Delta = Delta_{-1}
 *     else                            Delta = Delta_{-1} + Delta_{-2}
 * with "similar" meaning kfac_refresh_distance(x, x_k) < alpha (alpha > 0,
 * SP-NGD uses 0.1). Intervals must be >= 1. Returns 0 or -EINVAL. */
int kfac_refresh_interval(const float *x, const float *x1, const float *x2, size_t n, double alpha,
                          int *delta, int *delta_prev);

/* Algorithm 1's bookkeeping for one statistic X: its history (owned
 * copies of the last two recorded values), the intervals, and the step at
 * which X is next refreshed. */
typedef struct kfac_refresh {
    size_t n;          /* floats per value (a matrix, or a summary of it) */
    double alpha;      /* similarity threshold */
    float *x1, *x2;    /* (n) X_{-1}, X_{-2}, owned */
    int have;          /* recorded values held (0, 1, 2) */
    int delta;         /* current interval */
    int delta_prev;    /* interval before it */
    long next;         /* step t_X of the next refresh */
} kfac_refresh_t;

/* A tracker for n-float values, first refresh at step t0, intervals 1.
 * Returns NULL on bad arguments (n == 0, alpha <= 0) or out of memory. */
kfac_refresh_t *kfac_refresh_new(size_t n, double alpha, long t0);

/* Free; NULL is a no-op and *r_p is set to NULL. */
void kfac_refresh_free(kfac_refresh_t **r_p);

/* Is X due for a refresh at step t (t >= next)? */
static inline int kfac_refresh_due(const kfac_refresh_t *r, long t) {
    return r && t >= r->next;
}

/* Record the value x just computed at step t: run Algorithm 2 against the
 * history, set next = t + Delta, and shift the history (X_{-2} <- X_{-1},
 * X_{-1} <- x). Returns the new interval (>= 1) or -EINVAL. */
int kfac_refresh_record(kfac_refresh_t *r, const float *x, long t);

#endif
