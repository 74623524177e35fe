/* bench/bench_util.h — what every benchmark prints beside its figures: the
 * machine (CPU model, logical CPUs, OpenBLAS's kernels) and the load
 * average, since the machines are shared and figures are read with the
 * load beside them. Header-only: each bench_*.c is its own program. */
#ifndef KFAC_BENCH_UTIL_H
#define KFAC_BENCH_UTIL_H

#include <cblas.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

/* "machine: MODEL, N logical CPUs" and "OpenBLAS: core ..., T thread(s), CONFIG". */
static inline void bench_print_machine(void) {
    char line[512], model[256] = "unknown";
    int n_cpu = 0;
    FILE *f = fopen("/proc/cpuinfo", "r");
    if (f) {
        while (fgets(line, sizeof line, f)) {
            if (strncmp(line, "processor", 9) == 0) n_cpu++;
            if (strncmp(line, "model name", 10) == 0 && strcmp(model, "unknown") == 0) {
                char *c = strchr(line, ':');
                if (c) {
                    snprintf(model, sizeof model, "%s", c + 2);
                    model[strcspn(model, "\n")] = '\0';
                }
            }
        }
        fclose(f);
    }
    printf("machine: %s, %d logical CPUs\n", model, n_cpu);
    const char *ct = getenv("OPENBLAS_CORETYPE");
    printf("OpenBLAS: core %s (OPENBLAS_CORETYPE %s), %d thread(s), %s\n", openblas_get_corename(),
           ct ? ct : "unset", openblas_get_num_threads(), openblas_get_config());
}

/* "<indent>load average <when>: <the first line of /proc/loadavg>". */
static inline void bench_print_load(const char *indent, const char *when) {
    char buf[128] = "?";
    FILE *f = fopen("/proc/loadavg", "r");
    if (f) {
        if (!fgets(buf, sizeof buf, f)) snprintf(buf, sizeof buf, "?");
        fclose(f);
    }
    buf[strcspn(buf, "\n")] = '\0';
    printf("%sload average %s: %s\n", indent, when, buf);
}

#endif
