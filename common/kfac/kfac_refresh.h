/* common/kfac/kfac_refresh.h — SP-NGD's adaptive refresh of stale statistics
 * (Osawa et al., Algorithms 1-2, paper 002 sec. 4.3): when to recompute a
 * statistic, from how much it changed between its recorded values.
 *
 * What is compared, and why. Algorithm 1 refreshes statistic X (a
 * Kronecker factor A or G of one layer) at its step t_X and hands the value
 * just computed to Algorithm 2 together with the two values recorded at its
 * previous refreshes. X is the FRESH statistic of that refresh's mini-batch
 * (kfac_stats_compute of one batch, or the merge of the workers' batches of
 * one step), never the running average: an average F <- d F + (1 - d) F_new
 * moves by at most (1 - d) ||F_new - F|| per fold, so with d = 0.95 it looks
 * "similar" (alpha = 0.1) even when every batch differs by 100%, and the
 * interval would grow however much the curvature moves. The comparison is
 * the paper's: ||X - Y||_F / ||Y||_F < alpha on the whole matrix (all dim x
 * dim entries of a symmetric factor, so off-diagonal entries count twice as
 * in the Frobenius norm; a batch-norm factor's 3 floats per channel as
 * stored), alpha = 0.1 in every experiment of the paper.
 *
 * Interval rule (Algorithm 2), with a cap:
 *     X not similar to X_{-1}:        Delta = max(1, floor(Delta_{-1} / 2))
 *     else X not similar to X_{-2}:   Delta = Delta_{-1}
 *     else                            Delta = min(cap, Delta_{-1} + Delta_{-2})
 * The sum doubles the interval when the last two were equal (1, 1 -> 2) and
 * grows it like Fibonacci after that (2, 3, 5, 8, ...). The cap
 * (KFAC_REFRESH_MAX_INTERVAL unless set) bounds how old a statistic can get:
 * the paper has none, but its runs are long and its batches 4K-131K; on
 * small batches a cap keeps a run of a few hundred steps refreshing every
 * factor several times.
 *
 * float32 values, distances accumulated in double. kfac_refresh_t and
 * kfac_refresh_plan_t own their history; other pointers are borrowed for
 * the call. Functions return 0 or a negative errno and reject bad input
 * (never assert it). Not thread-safe: one owner thread. */
#ifndef KFAC_REFRESH_H
#define KFAC_REFRESH_H

#include <stddef.h>

#include "common/kfac/kfac_stats.h"

/* Default cap on a refresh interval, in steps. */
#define KFAC_REFRESH_MAX_INTERVAL 32

/* Relative Frobenius distance ||x - ref||_F / ||ref||_F (n floats, double
 * accumulation): SP-NGD's similarity measure, "x is similar to ref" when it
 * is < alpha. ref == 0: 0 if x == 0 too, else +Inf. */
double kfac_refresh_distance(const float *x, const float *ref, size_t n);

/* One call of Algorithm 2, uncapped (the sum saturates at 10^9). x is the
 * statistic just recomputed, x1 the previous recorded value X_{-1}, x2 the
 * one before X_{-2} (NULL when that history does not exist yet: treated as
 * not similar). On entry *delta is the last interval Delta_{-1} and
 * *delta_prev the one before Delta_{-2}; on return *delta is the next
 * interval and *delta_prev the last one (the rule in the file comment),
 * "similar" meaning kfac_refresh_distance(x, x_k) < alpha (alpha > 0).
 * Intervals must be >= 1. Returns 0 or -EINVAL. */
int kfac_refresh_interval(const float *x, const float *x1, const float *x2, size_t n, double alpha,
                          int *delta, int *delta_prev);

/* Algorithm 1's bookkeeping for one statistic X: its history (owned
 * copies of the last two recorded values), the intervals, and the step at
 * which X is next refreshed. */
typedef struct kfac_refresh {
    size_t n;          /* floats per value */
    double alpha;      /* similarity threshold */
    int max_delta;     /* cap on the interval (KFAC_REFRESH_MAX_INTERVAL after new; >= 1) */
    float *x1, *x2;    /* (n) X_{-1}, X_{-2}, owned */
    int have;          /* recorded values held (0, 1, 2) */
    int delta;         /* current interval */
    int delta_prev;    /* interval before it */
    long next;         /* step t_X of the next refresh */
    long n_records;    /* refreshes recorded */
    int last_similar;  /* the last recorded value was similar to its X_{-1} */
    double last_dist;  /* its distance to X_{-1} (+Inf without history) */
    double dist_sum;   /* sum of last_dist over the records that had an X_{-1} */
} kfac_refresh_t;

/* A tracker for n-float values, first refresh at step t0, intervals 1, cap
 * KFAC_REFRESH_MAX_INTERVAL (assign max_delta to change it). Returns NULL
 * on bad arguments (n == 0, alpha <= 0) or out of memory. */
kfac_refresh_t *kfac_refresh_new(size_t n, double alpha, long t0);

/* Free; NULL is a no-op and *r_p is set to NULL. */
void kfac_refresh_free(kfac_refresh_t **r_p);

/* Is X due for a refresh at step t (t >= next)? */
static inline int kfac_refresh_due(const kfac_refresh_t *r, long t) {
    return r && t >= r->next;
}

/* Record the value x just computed at step t: run Algorithm 2 against the
 * history, cap the interval at max_delta, set next = t + Delta, and shift
 * the history (X_{-2} <- X_{-1}, X_{-1} <- x). Returns the new interval
 * (>= 1) or -EINVAL. */
int kfac_refresh_record(kfac_refresh_t *r, const float *x, long t);

/* ---- a whole network: one tracker per factor ------------------------------------ */

/* Algorithm 1 over every factor of a statistics layout (kfac_stats_new):
 * tracker tr[first[j] + f] follows factor f of slot j (SYM factors as their
 * dim x dim matrices, DIAG2X2 as their 3 dim floats). A slot (layer) wants
 * statistics at step t when any of its factors is due: statistics are
 * computed and sent per layer, so the factors of one layer travel together;
 * a factor that arrives while not due is folded by the caller but not
 * recorded (its interval runs on). Memory: two copies of every factor
 * (X_{-1}, X_{-2}), 2 x the layout's n_floats. */
typedef struct kfac_refresh_plan {
    int n_slots;             /* the layout's n_layers */
    int *layer;              /* (n_slots) net layer index of each slot */
    int *first;              /* (n_slots + 1) first tracker of each slot */
    int n_trackers;
    kfac_refresh_t **tr;     /* (n_trackers) owned */
    long n_records;          /* factor refreshes recorded */
    long n_similar;          /* of which similar to X_{-1} */
} kfac_refresh_plan_t;

/* A plan for the layout of `layout` (borrowed for the call; only shapes
 * are read), every factor due at step t0, threshold alpha, interval cap
 * max_delta (0: KFAC_REFRESH_MAX_INTERVAL). Returns NULL on bad arguments
 * (alpha <= 0, max_delta < 0, an empty layout) or out of memory. */
kfac_refresh_plan_t *kfac_refresh_plan_new(const kfac_stats_t *layout, double alpha, int max_delta, long t0);

/* Free; NULL is a no-op and *p_p is set to NULL. */
void kfac_refresh_plan_free(kfac_refresh_plan_t **p_p);

/* want[j] = 1 when slot j has a factor due at step t, else 0 (want: n_slots
 * bytes, caller-owned). Returns the number of slots wanted. */
int kfac_refresh_plan_wanted(const kfac_refresh_plan_t *p, long t, unsigned char *want);

/* Record fresh statistics batch (the same layout) at step t: every factor
 * that holds a value (n_updates > 0) and is due at t runs Algorithm 2
 * (kfac_refresh_record). recorded (n_trackers bytes, or NULL) receives 1 for
 * each factor recorded, 0 otherwise. Returns the number recorded, or
 * -EINVAL (layout mismatch; nothing is recorded). */
int kfac_refresh_plan_record(kfac_refresh_plan_t *p, const kfac_stats_t *batch, long t, unsigned char *recorded);

/* Tracker index of factor f of slot j, or -1. */
static inline int kfac_refresh_plan_index(const kfac_refresh_plan_t *p, int slot, int f) {
    if (!p || slot < 0 || slot >= p->n_slots || f < 0 || p->first[slot] + f >= p->first[slot + 1]) return -1;
    return p->first[slot] + f;
}

#endif
