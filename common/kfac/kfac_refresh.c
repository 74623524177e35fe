/* common/kfac/kfac_refresh.c — see kfac_refresh.h. */
#include "common/kfac/kfac_refresh.h"

#include <errno.h>
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "common/base/log.h"

double kfac_refresh_distance(const float *x, const float *ref, size_t n) {
    double num = 0.0, den = 0.0;
    for (size_t i = 0; i < n; i++) {
        double d = (double)x[i] - ref[i];
        num += d * d;
        den += (double)ref[i] * ref[i];
    }
    if (den == 0.0) return num == 0.0 ? 0.0 : INFINITY;
    return sqrt(num / den);
}

int kfac_refresh_interval(const float *x, const float *x1, const float *x2, size_t n, double alpha,
                          int *delta, int *delta_prev) {
    if (!x || !delta || !delta_prev || n == 0 || !(alpha > 0.0) || *delta < 1 || *delta_prev < 1) {
        log_error("kfac_refresh_interval: bad arguments");
        return -EINVAL;
    }
    int d1 = *delta, d2 = *delta_prev, next;
    int sim1 = x1 && kfac_refresh_distance(x, x1, n) < alpha;
    int sim2 = x2 && kfac_refresh_distance(x, x2, n) < alpha;
    if (!sim1)
        next = d1 / 2 > 1 ? d1 / 2 : 1;
    else if (!sim2)
        next = d1;
    else
        next = d1 > 1000000000 - d2 ? 1000000000 : d1 + d2;
    *delta = next;
    *delta_prev = d1;
    return 0;
}

kfac_refresh_t *kfac_refresh_new(size_t n, double alpha, long t0) {
    if (n == 0 || !(alpha > 0.0)) {
        log_error("kfac_refresh_new: need n > 0 and alpha > 0");
        return NULL;
    }
    kfac_refresh_t *r = calloc(1, sizeof *r);
    if (!r) return NULL;
    r->x1 = malloc(n * sizeof *r->x1);
    r->x2 = malloc(n * sizeof *r->x2);
    if (!r->x1 || !r->x2) {
        kfac_refresh_free(&r);
        return NULL;
    }
    r->n = n;
    r->alpha = alpha;
    r->delta = r->delta_prev = 1;
    r->next = t0;
    return r;
}

void kfac_refresh_free(kfac_refresh_t **r_p) {
    if (!r_p || !*r_p) return;
    free((*r_p)->x1);
    free((*r_p)->x2);
    free(*r_p);
    *r_p = NULL;
}

int kfac_refresh_record(kfac_refresh_t *r, const float *x, long t) {
    if (!r || !x) return -EINVAL;
    int rc = kfac_refresh_interval(x, r->have >= 1 ? r->x1 : NULL, r->have >= 2 ? r->x2 : NULL, r->n,
                                   r->alpha, &r->delta, &r->delta_prev);
    if (rc) return rc;
    r->next = t + r->delta;
    float *tmp = r->x2; /* X_{-2} <- X_{-1}, X_{-1} <- x */
    r->x2 = r->x1;
    r->x1 = tmp;
    memcpy(r->x1, x, r->n * sizeof *x);
    if (r->have < 2) r->have++;
    return r->delta;
}
