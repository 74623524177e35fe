/* bench/bench_eval.c — how long one evaluation of the whole MNIST test set
 * takes (what kfac-ps's evaluation thread does each eval_every steps: two
 * passes, current parameters and their Polyak average, net_evaluate in
 * eval mode) by forward batch size and thread count. Prints figures; never
 * passes or fails on time.
 *
 *   build/bench/bench_eval [MODEL] [DATA_DIR]   (default models/mnist-cnn.model, data)
 *
 * For each batch size (32, 64, 128, 256) and thread setting (OpenBLAS 1
 * thread with the net on 1 or 2 threads; OpenBLAS 2 threads with the net on
 * 1), one net_evaluate over the 10000 test images, repeated REPS times with
 * the settings interleaved; figures: the best and the median seconds of one
 * pass, and images/s of the best. An evaluation on the PS is two passes.
 * The machine and the load average before and after are printed.
 */
#include <cblas.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "common/base/clock.h"
#include "common/nn/data.h"
#include "common/nn/nn.h"

#define REPS 3

typedef struct {
    int blas, net;
} s_set_t;

static int s_cmp(const void *a, const void *b) {
    double x = *(const double *)a, y = *(const double *)b;
    return (x > y) - (x < y);
}

static void s_load(const char *when) {
    char buf[128] = "?";
    FILE *f = fopen("/proc/loadavg", "r");
    if (f) {
        if (!fgets(buf, sizeof buf, f)) buf[0] = 0;
        fclose(f);
    }
    buf[strcspn(buf, "\n")] = 0;
    printf("load average %s: %s\n", when, buf);
}

int main(int argc, char **argv) {
    const char *model = argc > 1 ? argv[1] : "models/mnist-cnn.model";
    const char *dir = argc > 2 ? argv[2] : "data";
    if (argc > 3 || (argc > 1 && strcmp(argv[1], "--help") == 0)) {
        printf("usage: bench_eval [MODEL] [DATA_DIR]\n");
        return argc > 3 ? 2 : 0;
    }
    char err[512], cpu[256] = "unknown", line[512];
    FILE *f = fopen("/proc/cpuinfo", "r");
    int n_cpu = 0;
    while (f && fgets(line, sizeof line, f)) {
        if (strncmp(line, "processor", 9) == 0) n_cpu++;
        if (strncmp(line, "model name", 10) == 0 && strcmp(cpu, "unknown") == 0) {
            char *c = strchr(line, ':');
            if (c) snprintf(cpu, sizeof cpu, "%s", c + 2);
            cpu[strcspn(cpu, "\n")] = 0;
        }
    }
    if (f) fclose(f);
    printf("machine: %s, %d logical CPUs; OpenBLAS core %s\n", cpu, n_cpu, openblas_get_corename());
    dataset_t *test = NULL;
    if (dataset_load_named("mnist", dir, 0, &test, err, sizeof err) < 0) {
        fprintf(stderr, "bench_eval: %s\n", err);
        return 1;
    }
    s_load("before");
    printf("%s on %d test images, seconds per pass (the PS runs two per evaluation)\n", model, test->n);
    printf("%6s %5s %4s %9s %9s %9s\n", "batch", "blas", "net", "best s", "median s", "img/s");
    const int batches[] = {32, 64, 128, 256};
    const s_set_t sets[] = {{1, 1}, {1, 2}, {2, 1}};
    for (int b = 0; b < 4; b++) {
        net_t *net = net_load(model, batches[b], err, sizeof err);
        if (!net) {
            fprintf(stderr, "bench_eval: %s\n", err);
            return 1;
        }
        net_init_params(net, 1);
        double t[3][REPS], loss, acc;
        for (int r = 0; r < REPS; r++)
            for (int k = 0; k < 3; k++) {
                openblas_set_num_threads(sets[k].blas);
                net_set_threads(net, sets[k].net);
                double t0 = clock_now_s();
                net_evaluate(net, test->x, test->y, test->n, &loss, &acc);
                t[k][r] = clock_now_s() - t0;
            }
        for (int k = 0; k < 3; k++) {
            qsort(t[k], REPS, sizeof(double), s_cmp);
            printf("%6d %5d %4d %9.3f %9.3f %9.0f\n", batches[b], sets[k].blas, sets[k].net, t[k][0], t[k][REPS / 2],
                   test->n / t[k][0]);
        }
        net_free(&net);
    }
    s_load("after");
    dataset_free(&test);
    return 0;
}
