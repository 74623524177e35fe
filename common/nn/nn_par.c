/* common/nn/nn_par.c — see nn_par.h.
 *
 * A generation counter announces work: the caller stores fn/arg and the
 * number of parts still running, then bumps `gen`; each thread runs its part
 * once per generation and the last one to finish wakes the caller. Sleeping
 * is under `mu`: a thread counts itself in `n_sleeping` and re-checks `gen`
 * under the lock, and the caller takes the lock after bumping `gen`, so no
 * wake-up is lost.
 */
#include "common/nn/nn_par.h"

#include <pthread.h>
#include <sched.h>
#include <stdatomic.h>
#include <stdlib.h>
#include <unistd.h>

/* Pause-loop iterations before sleeping: tens of microseconds, about the
 * serial work between two layers. Only where every thread of the pool has
 * a CPU of its own (the CPUs this process may run on): with more threads
 * than CPUs a spinning thread takes the CPU from the one whose part is
 * still running, and each run then waits for the scheduler's time slice
 * (measured: the 3-thread finite-difference checks of tests/nn/test_nn_grad
 * on 2 CPUs took 43 s spinning, against 0.5 s with 1 thread). There the
 * threads sleep at once, as libgomp does when it is oversubscribed. */
#define NN_PAR_SPIN 4000

typedef struct s_thread {
    nn_par_t *pool;
    int part;
    pthread_t tid;
} s_thread_t;

struct nn_par {
    int n;                       /* threads in all, the caller included */
    int spin;                    /* pause iterations before sleeping: NN_PAR_SPIN or 0 */
    s_thread_t *threads;         /* (n - 1) */
    int n_started;
    pthread_mutex_t mu;
    pthread_cond_t start, done;
    int n_sleeping;              /* under mu */
    atomic_uint gen;
    atomic_int pending;          /* parts of this generation not finished (the caller's excluded) */
    atomic_int stop;
    nn_par_fn fn;
    void *arg;
};

static inline void s_pause(void) {
#if defined(__x86_64__) || defined(__i386__)
    __builtin_ia32_pause();
#endif
}

static void *s_main(void *p_) {
    s_thread_t *t = p_;
    nn_par_t *p = t->pool;
    unsigned seen = 0; /* the generation at creation: a run may start before this thread does */
    for (;;) {
        for (int i = 0; i < p->spin && atomic_load_explicit(&p->gen, memory_order_acquire) == seen; i++)
            s_pause();
        if (atomic_load_explicit(&p->gen, memory_order_acquire) == seen) {
            pthread_mutex_lock(&p->mu);
            p->n_sleeping++;
            while (atomic_load(&p->gen) == seen) pthread_cond_wait(&p->start, &p->mu);
            p->n_sleeping--;
            pthread_mutex_unlock(&p->mu);
        }
        seen = atomic_load(&p->gen);
        if (atomic_load(&p->stop)) return NULL;
        p->fn(p->arg, t->part, p->n);
        if (atomic_fetch_sub_explicit(&p->pending, 1, memory_order_acq_rel) == 1) {
            pthread_mutex_lock(&p->mu);
            pthread_cond_signal(&p->done);
            pthread_mutex_unlock(&p->mu);
        }
    }
}

/* Announce a generation: fn/arg and pending are written before gen. */
static void s_launch(nn_par_t *p) {
    atomic_fetch_add_explicit(&p->gen, 1, memory_order_acq_rel);
    pthread_mutex_lock(&p->mu);
    if (p->n_sleeping) pthread_cond_broadcast(&p->start);
    pthread_mutex_unlock(&p->mu);
}

/* The CPUs this process may run on (its affinity mask; the online CPUs if
 * that cannot be read). */
static int s_cpus(void) {
    cpu_set_t set;
    if (sched_getaffinity(0, sizeof set, &set) == 0 && CPU_COUNT(&set) > 0) return CPU_COUNT(&set);
    long n = sysconf(_SC_NPROCESSORS_ONLN);
    return n > 0 ? (int)n : 1;
}

nn_par_t *nn_par_new(int n_threads) {
    if (n_threads < 1) return NULL;
    nn_par_t *p = calloc(1, sizeof *p);
    if (!p) return NULL;
    p->n = n_threads;
    p->spin = n_threads <= s_cpus() ? NN_PAR_SPIN : 0;
    pthread_mutex_init(&p->mu, NULL);
    pthread_cond_init(&p->start, NULL);
    pthread_cond_init(&p->done, NULL);
    atomic_init(&p->gen, 0);
    atomic_init(&p->pending, 0);
    atomic_init(&p->stop, 0);
    if (n_threads > 1 && !(p->threads = calloc((size_t)n_threads - 1, sizeof *p->threads))) goto fail;
    for (int i = 0; i < n_threads - 1; i++) {
        p->threads[i].pool = p;
        p->threads[i].part = i + 1;
        if (pthread_create(&p->threads[i].tid, NULL, s_main, &p->threads[i]) != 0) goto fail;
        p->n_started++;
    }
    return p;
fail:
    nn_par_free(&p);
    return NULL;
}

void nn_par_free(nn_par_t **p_p) {
    if (!p_p || !*p_p) return;
    nn_par_t *p = *p_p;
    *p_p = NULL;
    atomic_store(&p->stop, 1);
    s_launch(p);
    for (int i = 0; i < p->n_started; i++) pthread_join(p->threads[i].tid, NULL);
    pthread_cond_destroy(&p->start);
    pthread_cond_destroy(&p->done);
    pthread_mutex_destroy(&p->mu);
    free(p->threads);
    free(p);
}

int nn_par_threads(const nn_par_t *p) { return p ? p->n : 1; }

void nn_par_run(nn_par_t *p, nn_par_fn fn, void *arg) {
    if (!p || p->n == 1) {
        fn(arg, 0, 1);
        return;
    }
    p->fn = fn;
    p->arg = arg;
    atomic_store_explicit(&p->pending, p->n - 1, memory_order_relaxed);
    s_launch(p);
    fn(arg, 0, p->n);
    for (int i = 0; i < p->spin && atomic_load_explicit(&p->pending, memory_order_acquire) > 0; i++) s_pause();
    if (atomic_load_explicit(&p->pending, memory_order_acquire) > 0) {
        pthread_mutex_lock(&p->mu);
        while (atomic_load(&p->pending) > 0) pthread_cond_wait(&p->done, &p->mu);
        pthread_mutex_unlock(&p->mu);
    }
}
