/* common/nn/nn_par.h — a fork-join pool for the network core: one call runs
 * fn(arg, part, n_parts) for every part in [0, n_parts), part 0 on the
 * calling thread and the others on the pool's threads, and returns when all
 * are done.
 *
 * Why not OpenBLAS's threads: the layers between the sgemm calls (im2col,
 * pooling, activations, zeroing) are a third to a half of a CPU step and
 * stay serial under a threaded BLAS, whose idle threads also spin in
 * sched_yield between the many small sgemm calls of a step (a quarter of the
 * CPU time was system time). With this pool each thread runs a slice of the
 * batch through a layer, BLAS single-threaded inside it.
 *
 * Waiting threads spin briefly (pause instructions, no system calls), then
 * sleep on a condition variable: an idle pool costs nothing.
 *
 * Threads: nn_par_run is called by one thread at a time (the net's owner);
 * fn must only touch what its part owns.
 */
#ifndef KFAC_NN_PAR_H
#define KFAC_NN_PAR_H

typedef struct nn_par nn_par_t;

typedef void (*nn_par_fn)(void *arg, int part, int n_parts);

/* A pool of n_threads (>= 1) threads in all, the caller included, so
 * n_threads - 1 are started. Returns NULL when a thread cannot be started
 * or n_threads < 1. */
nn_par_t *nn_par_new(int n_threads);

/* Stop and join the threads; NULLs *p_p; NULL is a no-op. */
void nn_par_free(nn_par_t **p_p);

/* Threads in all (1 for a NULL pool). */
int nn_par_threads(const nn_par_t *p);

/* fn(arg, part, n) for part = 0 .. n - 1 with n = nn_par_threads(p);
 * returns when every part has returned. A NULL pool runs fn(arg, 0, 1). */
void nn_par_run(nn_par_t *p, nn_par_fn fn, void *arg);

/* The slice [*lo, *hi) of n items that part `part` of n_parts takes:
 * contiguous, in order, sizes differing by at most one. */
static inline void nn_par_range(int n, int part, int n_parts, int *lo, int *hi) {
    *lo = (int)((long long)n * part / n_parts);
    *hi = (int)((long long)n * (part + 1) / n_parts);
}

#endif
