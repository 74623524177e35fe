/* bench/bench_update.c — the K-FAC update the PS computes every step
 * (kfac_opt_step: preconditioning, step size, momentum, Polyak average), its
 * flop count, and its speed against sgemm on this machine, with the
 * preconditioning on 1 thread and split over a pool of threads
 * ([ps] update_threads). Prints figures; never passes or fails on time.
 *
 *   build/bench/bench_update [--model F] [--doubly-min-in N] [--threads 1,2]
 *                            [--reps N] [--method cholesky|eigen] [--seed S]
 *
 * Defaults: models/mnist-cnn-wide.model (fc 3136 -> 1024 doubly-factored),
 * threads 1 and every CPU this process may use, 20 timed updates after 3
 * untimed ones, Cholesky inverses, seed 1. --doubly-min-in 1e30 with
 * experiments/mnist-cnn-wide-auto.model gives the standard factors of the
 * same layer (A 3137 x 3137).
 *
 * Set-up: statistics of one batch of 64 random images (model-sampled labels)
 * are folded and every block is inverted, so that each layer is
 * preconditioned with real inverses; the gradient is that of the same batch
 * with random labels. Each timed update starts from the same parameters.
 *
 * Flops: the multiply-adds of the Kronecker products, counted from the
 * shapes (2 flops each): a layer's gradient (out, C, T) (T = in + bias for
 * the standard factors, C = 1) costs 2 out C T (out + C + T) with Cholesky
 * inverses (one product per mode; C only when doubly-factored) and twice
 * that in eigen form (Q^T, then Q); the doubly layer's bias block adds
 * 2 out^2. Element-wise work (copies, dot products, momentum, Polyak) is
 * timed but not counted.
 *
 * Reference: sgemm of the largest product (out x T x out) on one thread,
 * single-threaded OpenBLAS, best of 5: the machine's rate for this shape.
 *
 * Factored arm (--workers N, default 2; 0: none): the fc layers a worker
 * sends factored (kfac_lowrank_wire_pays at 64 images) as the rows D and
 * X of N workers of the same batch (weights 1/N), preconditioned by
 * kfac_opt_step_lowrank; the dense arm gets D^T X densely. The two arms
 * alternate update by update (dense, factored, dense, ...), so they share
 * the machine's load, each from the same parameters and momentum; the
 * table gives each arm's times and the largest relative difference of the
 * two updates (parameters after minus before, 2-norm).
 *
 * CPU ms: the process's CPU time (every thread) per timed update, mean:
 * on a loaded machine the update's own work, where the wall-clock times
 * also hold the waits for a CPU. A pool's threads that spin while waiting
 * for their part count too.
 */
#include <cblas.h>
#include <errno.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "bench/bench_util.h"
#include "common/base/affinity.h"
#include "common/base/blas.h"
#include "common/base/clock.h"
#include "common/base/rng.h"
#include "common/kfac/kfac_lowrank.h"
#include "common/kfac/kfac_opt.h"
#include "common/kfac/kfac_stats.h"
#include "common/nn/nn.h"
#include "common/nn/nn_par.h"

#define BU_BATCH 64
#define BU_MAX_THREADS 16

/* Flops of the Kronecker products of one update (see the header comment),
 * and the largest single product's shape. */
static double s_update_flops(const kfac_opt_t *k, int eigen, int *big_m, int *big_n) {
    double flops = 0.0, big = 0.0;
    for (int s = 0; s < k->avg->n_layers; s++) {
        const kfac_layer_stats_t *ls = &k->avg->layers[s];
        const layer_t *l = &k->net->layers[ls->layer];
        if (l->kind == LAYER_BATCHNORM) continue;
        double out = ls->out, C = 1.0, T = ls->in + ls->has_bias;
        if (ls->mode == KFAC_MODE_DOUBLY) {
            C = ls->fm_c;
            T = ls->fm_t;
            flops += 2.0 * out * out; /* the bias block */
        }
        double f = 2.0 * out * C * T * (out + (C > 1.0 ? C : 0.0) + T);
        flops += eigen ? 2.0 * f : f;
        double g = out * out * C * T; /* the G-side product's multiply-adds */
        if (g > big) {
            big = g;
            *big_m = (int)out;
            *big_n = (int)(C * T);
        }
    }
    return flops;
}

/* CPU time of the process, every thread, in seconds: on a machine others
 * share, the update's own cost, which the wall-clock time mixes with the
 * waits for a CPU. */
static double s_cpu_s(void) {
    struct timespec ts;
    clock_gettime(CLOCK_PROCESS_CPUTIME_ID, &ts);
    return (double)ts.tv_sec + 1e-9 * (double)ts.tv_nsec;
}

/* sgemm (m x n) = (m x m)(m x n), one thread, best of 5, GFLOP/s. */
static double s_sgemm_gflops(int m, int n) {
    float *A = malloc(sizeof(float) * (size_t)m * m), *B = malloc(sizeof(float) * (size_t)m * n),
          *C = malloc(sizeof(float) * (size_t)m * n);
    if (!A || !B || !C) {
        free(A), free(B), free(C);
        return 0.0;
    }
    rng_t r;
    rng_seed(&r, 7);
    for (size_t i = 0; i < (size_t)m * m; i++) A[i] = (float)rng_normal(&r);
    for (size_t i = 0; i < (size_t)m * n; i++) B[i] = (float)rng_normal(&r);
    double best = 1e30;
    for (int rep = 0; rep < 5; rep++) {
        double t0 = clock_now_s();
        cblas_sgemm(CblasRowMajor, CblasNoTrans, CblasNoTrans, m, n, m, 1.0f, A, m, B, n, 0.0f, C, n);
        double dt = clock_now_s() - t0;
        if (dt < best) best = dt;
    }
    free(A), free(B), free(C);
    return 2.0 * m * (double)m * n / best * 1e-9;
}

static void s_usage(FILE *f) {
    fprintf(f, "usage: bench_update [--model F] [--doubly-min-in N] [--threads 1,2] [--reps N]\n"
               "                    [--method cholesky|eigen] [--seed S] [--workers N]\n");
}

int main(int argc, char **argv) {
    blas_restart_if_generic(argv);
    const char *model = "models/mnist-cnn-wide.model", *threads_arg = NULL, *method = "cholesky";
    double doubly_min_in = -1.0;
    int reps = 20, workers = 2;
    unsigned long long seed = 1;
    for (int i = 1; i < argc; i++) {
        const char *a = argv[i], *v = i + 1 < argc ? argv[i + 1] : NULL;
        if (!strcmp(a, "--help") || !strcmp(a, "-h")) {
            s_usage(stdout);
            return 0;
        }
        if (!v) {
            fprintf(stderr, "bench_update: %s needs a value\n", a);
            s_usage(stderr);
            return 2;
        }
        if (!strcmp(a, "--model")) model = v;
        else if (!strcmp(a, "--doubly-min-in")) doubly_min_in = atof(v);
        else if (!strcmp(a, "--threads")) threads_arg = v;
        else if (!strcmp(a, "--reps")) reps = atoi(v);
        else if (!strcmp(a, "--method")) method = v;
        else if (!strcmp(a, "--seed")) seed = strtoull(v, NULL, 10);
        else if (!strcmp(a, "--workers")) workers = atoi(v);
        else {
            fprintf(stderr, "bench_update: unknown option %s\n", a);
            s_usage(stderr);
            return 2;
        }
        i++;
    }
    if (reps < 1 || workers < 0 || workers > 64 || (strcmp(method, "cholesky") && strcmp(method, "eigen"))) {
        fprintf(stderr, "bench_update: --reps must be >= 1, --workers in 0..64 and --method cholesky or eigen\n");
        return 2;
    }
    int n_threads[BU_MAX_THREADS], n_t = 0;
    if (threads_arg) {
        char buf[256];
        snprintf(buf, sizeof buf, "%s", threads_arg);
        for (char *tok = strtok(buf, ","); tok && n_t < BU_MAX_THREADS; tok = strtok(NULL, ",")) {
            int t = atoi(tok);
            if (t < 1 || t > 64) {
                fprintf(stderr, "bench_update: --threads: '%s' is not a count in 1..64\n", tok);
                return 2;
            }
            n_threads[n_t++] = t;
        }
    } else {
        n_threads[n_t++] = 1;
        if (affinity_count() > 1) n_threads[n_t++] = affinity_count() > 64 ? 64 : affinity_count();
    }
    blas_set_threads(1);
    bench_print_machine();
    bench_print_load("", "before");

    char err[512] = "";
    net_t *net = net_load(model, BU_BATCH, err, sizeof err);
    if (!net) {
        fprintf(stderr, "bench_update: %s\n", err);
        return 2;
    }
    if (doubly_min_in > 0.0) net->fc_doubly_min_in = doubly_min_in;
    net_init_params(net, seed);
    kfac_opts_t ko;
    kfac_opts_default(&ko);
    ko.method = strcmp(method, "eigen") ? KFAC_INV_CHOLESKY : KFAC_INV_EIGEN;
    ko.damping = 0.03;
    kfac_opt_t *k = kfac_opt_new(net, &ko, err, sizeof err);
    kfac_stats_t *st = k ? kfac_stats_new(net) : NULL;
    float *x = malloc(sizeof(float) * (size_t)BU_BATCH * net->in_size);
    int *y = malloc(sizeof(int) * BU_BATCH);
    float *p0 = malloc(sizeof(float) * net->n_params), *grad = malloc(sizeof(float) * net->n_params);
    if (!k || !st || !x || !y || !p0 || !grad) {
        fprintf(stderr, "bench_update: %s\n", err[0] ? err : "out of memory");
        return 1;
    }
    rng_t r;
    rng_seed(&r, seed);
    for (size_t i = 0; i < (size_t)BU_BATCH * net->in_size; i++) x[i] = (float)rng_normal(&r);
    net_forward(net, x, BU_BATCH, 1);
    kfac_sample_labels(net_probs(net), BU_BATCH, net->n_classes, &r, y);
    net_backward(net, y, NULL, NULL);
    double t_inv = clock_now_s();
    if (kfac_stats_compute(st, net) < 0 || kfac_opt_fold(k, st, 0) < 0 || kfac_opt_invert_all(k) != 0) {
        fprintf(stderr, "bench_update: statistics or inverses failed\n");
        return 1;
    }
    t_inv = clock_now_s() - t_inv;
    for (int i = 0; i < BU_BATCH; i++) y[i] = (int)rng_below(&r, (uint64_t)net->n_classes);
    net_forward(net, x, BU_BATCH, 1);
    net_backward(net, y, NULL, NULL);
    memcpy(grad, net->grads, sizeof(float) * net->n_params);
    memcpy(p0, net->params, sizeof(float) * net->n_params);
    /* the factored arm: the rows of `workers` copies of this batch, weights 1/workers */
    kfac_lowrank_set_t lr;
    float *grad_lr = malloc(sizeof(float) * net->n_params), *p_dense = malloc(sizeof(float) * net->n_params),
          *mom0 = malloc(sizeof(float) * net->n_params);
    if (kfac_lowrank_set_init(&lr, net) < 0 || !grad_lr || !p_dense || !mom0) {
        fprintf(stderr, "bench_update: out of memory\n");
        return 1;
    }
    memcpy(grad_lr, grad, sizeof(float) * net->n_params);
    int n_lr = 0;
    for (int i = 0; i < lr.n && workers > 0; i++) {
        kfac_lowrank_t *e = &lr.v[i];
        const layer_t *l = &net->layers[e->layer];
        if (l->kfac == KFAC_MODE_NONE || !kfac_lowrank_wire_pays(BU_BATCH, e->n_out, e->n_in)) continue;
        for (int w = 0; w < workers; w++)
            if (kfac_lowrank_append(e, l->dy, net_layer_input(net, l), BU_BATCH, 1.0f / (float)workers) < 0) {
                fprintf(stderr, "bench_update: out of memory\n");
                return 1;
            }
        memset(grad_lr + e->w_off, 0, sizeof(float) * l->n_w);
        printf("factored arm: layer %s, %d workers x %d rows of (%d + %d) floats\n", l->name, workers, BU_BATCH,
               e->n_out, e->n_in);
        n_lr++;
    }

    int big_m = 0, big_n = 0;
    double flops = s_update_flops(k, ko.method == KFAC_INV_EIGEN, &big_m, &big_n);
    double ref = s_sgemm_gflops(big_m, big_n);
    printf("model %s: %zu parameters, %d Kronecker blocks, %s inverses (statistics + all inverses: %.2f s)\n", model,
           net->n_params, k->n_blocks, method, t_inv);
    for (int s = 0; s < k->avg->n_layers; s++) {
        const kfac_layer_stats_t *ls = &k->avg->layers[s];
        if (ls->mode == KFAC_MODE_DOUBLY)
            printf("  layer %d: doubly-factored, gradient %d x (%d x %d)\n", s, ls->out, ls->fm_c, ls->fm_t);
        else
            printf("  layer %d: gradient %d x %d\n", s, ls->out, ls->in + ls->has_bias);
    }
    printf("update: %.3f GFLOP of Kronecker products per step\n", flops * 1e-9);
    printf("reference: sgemm %d x %d x %d on one thread: %.1f GFLOP/s\n\n", big_m, big_n, big_m, ref);
    printf("| update threads | ms per update (mean) | min | GFLOP/s | per thread vs sgemm | CPU ms (mean) |%s\n",
           n_lr ? " factored: ms (mean) | min | CPU ms (mean) | dense / factored | max rel. diff |" : "");
    printf("|---|---|---|---|---|---|%s\n", n_lr ? "---|---|---|---|---|" : "");
    int status = 0;
    for (int ti = 0; ti < n_t; ti++) {
        nn_par_t *par = n_threads[ti] > 1 ? nn_par_new(n_threads[ti]) : NULL;
        if (n_threads[ti] > 1 && !par) {
            fprintf(stderr, "bench_update: cannot start %d threads\n", n_threads[ti]);
            status = 1;
            continue;
        }
        kfac_opt_set_par(k, par);
        double sum = 0.0, best = 1e30, sum_lr = 0.0, best_lr = 1e30, diff = 0.0, cpu = 0.0, cpu_lr = 0.0;
        for (int rep = -3; rep < reps; rep++) {
            memcpy(net->params, p0, sizeof(float) * net->n_params);
            if (n_lr) memcpy(mom0, k->mom, sizeof(float) * net->n_params); /* both arms from one momentum */
            kfac_step_info_t info;
            double c0 = s_cpu_s(), t0 = clock_now_s();
            int rc = kfac_opt_step(k, net->params, grad, 1, &info);
            double dt = clock_now_s() - t0, dc = s_cpu_s() - c0;
            if (rc < 0 || info.n_layers_identity > 0) {
                fprintf(stderr, "bench_update: the update failed (%d) or fell back to the identity (%d layers)\n", rc,
                        info.n_layers_identity);
                status = 1;
                break;
            }
            if (rep >= 0) {
                sum += dt;
                cpu += dc;
                if (dt < best) best = dt;
            }
            if (!n_lr) continue;
            memcpy(p_dense, net->params, sizeof(float) * net->n_params);
            memcpy(net->params, p0, sizeof(float) * net->n_params);
            memcpy(k->mom, mom0, sizeof(float) * net->n_params);
            uint64_t before = k->n_lowrank_layers;
            c0 = s_cpu_s();
            t0 = clock_now_s();
            rc = kfac_opt_step_lowrank(k, net->params, grad_lr, &lr, 1, &info);
            dt = clock_now_s() - t0;
            dc = s_cpu_s() - c0;
            if (rc < 0 || k->n_lowrank_layers - before != (uint64_t)n_lr) {
                fprintf(stderr, "bench_update: the factored update failed (%d) or went dense\n", rc);
                status = 1;
                break;
            }
            /* the two updates (p - p0) against each other */
            double num = 0.0, den = 0.0;
            for (size_t j = 0; j < net->n_params; j++) {
                double a = (double)p_dense[j] - p0[j], b = (double)net->params[j] - p0[j];
                num += (a - b) * (a - b), den += a * a;
            }
            if (den > 0.0 && sqrt(num / den) > diff) diff = sqrt(num / den);
            if (rep < 0) continue;
            sum_lr += dt;
            cpu_lr += dc;
            if (dt < best_lr) best_lr = dt;
        }
        kfac_opt_set_par(k, NULL);
        nn_par_free(&par);
        double mean = sum / reps, gf = flops / mean * 1e-9;
        printf("| %d | %.1f | %.1f | %.1f | %.2f | %.1f |", n_threads[ti], 1e3 * mean, 1e3 * best, gf,
               gf / n_threads[ti] / (ref > 0 ? ref : 1.0), 1e3 * cpu / reps);
        if (n_lr)
            printf(" %.1f | %.1f | %.1f | %.2fx | %.1e |", 1e3 * sum_lr / reps, 1e3 * best_lr, 1e3 * cpu_lr / reps,
                   sum / (sum_lr > 0 ? sum_lr : 1), diff);
        printf("\n");
        fflush(stdout);
    }
    free(x), free(y), free(p0), free(grad), free(grad_lr), free(p_dense), free(mom0);
    kfac_lowrank_set_release(&lr);
    kfac_stats_free(&st);
    kfac_opt_free(&k);
    net_free(&net);
    return status;
}
