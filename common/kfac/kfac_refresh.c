/* common/kfac/kfac_refresh.c — see kfac_refresh.h. */
#include "common/kfac/kfac_refresh.h"

#include <errno.h>
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "common/base/log.h"

#define S_SUM_MAX 1000000000 /* the uncapped sum saturates here */

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

/* Algorithm 2; *dist1 receives the distance of x to x1 (+Inf without x1). */
static int s_interval(const float *x, const float *x1, const float *x2, size_t n, double alpha, int *delta,
                      int *delta_prev, double *dist1) {
    if (!x || !delta || !delta_prev || n == 0 || !(alpha > 0.0) || *delta < 1 || *delta_prev < 1) {
        log_error("kfac_refresh_interval: bad arguments");
        return -EINVAL;
    }
    int d1 = *delta, d2 = *delta_prev, next;
    double e1 = x1 ? kfac_refresh_distance(x, x1, n) : INFINITY;
    int sim1 = e1 < alpha;
    int sim2 = sim1 && x2 && kfac_refresh_distance(x, x2, n) < alpha;
    if (!sim1)
        next = d1 / 2 > 1 ? d1 / 2 : 1;
    else if (!sim2)
        next = d1;
    else
        next = d1 > S_SUM_MAX - d2 ? S_SUM_MAX : d1 + d2;
    *delta = next;
    *delta_prev = d1;
    if (dist1) *dist1 = e1;
    return 0;
}

int kfac_refresh_interval(const float *x, const float *x1, const float *x2, size_t n, double alpha,
                          int *delta, int *delta_prev) {
    return s_interval(x, x1, x2, n, alpha, delta, delta_prev, NULL);
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
    r->max_delta = KFAC_REFRESH_MAX_INTERVAL;
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
    if (!r || !x || r->max_delta < 1) return -EINVAL;
    double e1 = INFINITY;
    int rc = s_interval(x, r->have >= 1 ? r->x1 : NULL, r->have >= 2 ? r->x2 : NULL, r->n, r->alpha, &r->delta,
                        &r->delta_prev, &e1);
    if (rc) return rc;
    if (r->delta > r->max_delta) r->delta = r->max_delta;
    r->next = t + r->delta;
    r->last_similar = e1 < r->alpha;
    r->last_dist = e1;
    if (r->have >= 1) r->dist_sum += e1;
    r->n_records++;
    float *tmp = r->x2; /* X_{-2} <- X_{-1}, X_{-1} <- x */
    r->x2 = r->x1;
    r->x1 = tmp;
    memcpy(r->x1, x, r->n * sizeof *x);
    if (r->have < 2) r->have++;
    return r->delta;
}

/* ---- a whole network -------------------------------------------------------------- */

kfac_refresh_plan_t *kfac_refresh_plan_new(const kfac_stats_t *layout, double alpha, int max_delta, long t0) {
    if (!layout || layout->n_layers < 1 || !(alpha > 0.0) || max_delta < 0) {
        log_error("kfac_refresh_plan_new: need a layout with layers, alpha > 0 and max_delta >= 0");
        return NULL;
    }
    kfac_refresh_plan_t *p = calloc(1, sizeof *p);
    if (!p) return NULL;
    p->n_slots = layout->n_layers;
    p->layer = calloc((size_t)p->n_slots, sizeof *p->layer);
    p->first = calloc((size_t)p->n_slots + 1, sizeof *p->first);
    if (!p->layer || !p->first) goto fail;
    for (int j = 0; j < p->n_slots; j++) {
        p->layer[j] = layout->layers[j].layer;
        p->first[j + 1] = p->first[j] + layout->layers[j].n_factors;
    }
    p->n_trackers = p->first[p->n_slots];
    p->tr = calloc(p->n_trackers ? (size_t)p->n_trackers : 1, sizeof *p->tr);
    if (!p->tr) goto fail;
    for (int j = 0; j < p->n_slots; j++)
        for (int f = 0; f < layout->layers[j].n_factors; f++) {
            kfac_refresh_t *r = kfac_refresh_new(kfac_factor_len(&layout->layers[j].f[f]), alpha, t0);
            if (!r) goto fail;
            r->max_delta = max_delta > 0 ? max_delta : KFAC_REFRESH_MAX_INTERVAL;
            p->tr[p->first[j] + f] = r;
        }
    return p;
fail:
    kfac_refresh_plan_free(&p);
    return NULL;
}

void kfac_refresh_plan_free(kfac_refresh_plan_t **p_p) {
    if (!p_p || !*p_p) return;
    kfac_refresh_plan_t *p = *p_p;
    if (p->tr)
        for (int i = 0; i < p->n_trackers; i++) kfac_refresh_free(&p->tr[i]);
    free(p->tr);
    free(p->layer);
    free(p->first);
    free(p);
    *p_p = NULL;
}

int kfac_refresh_plan_wanted(const kfac_refresh_plan_t *p, long t, unsigned char *want) {
    if (!p || !want) return 0;
    int n = 0;
    for (int j = 0; j < p->n_slots; j++) {
        want[j] = 0;
        for (int i = p->first[j]; i < p->first[j + 1]; i++)
            if (kfac_refresh_due(p->tr[i], t)) want[j] = 1;
        n += want[j];
    }
    return n;
}

int kfac_refresh_plan_record(kfac_refresh_plan_t *p, const kfac_stats_t *batch, long t, unsigned char *recorded) {
    if (!p || !batch || batch->n_layers != p->n_slots) return -EINVAL;
    for (int j = 0; j < p->n_slots; j++) {
        const kfac_layer_stats_t *ls = &batch->layers[j];
        if (ls->layer != p->layer[j] || ls->n_factors != p->first[j + 1] - p->first[j]) return -EINVAL;
        for (int f = 0; f < ls->n_factors; f++)
            if (kfac_factor_len(&ls->f[f]) != p->tr[p->first[j] + f]->n) return -EINVAL;
    }
    if (recorded) memset(recorded, 0, (size_t)p->n_trackers);
    int n = 0;
    for (int j = 0; j < p->n_slots; j++)
        for (int f = 0; f < batch->layers[j].n_factors; f++) {
            const kfac_factor_t *fa = &batch->layers[j].f[f];
            kfac_refresh_t *r = p->tr[p->first[j] + f];
            if (fa->n_updates <= 0 || !kfac_refresh_due(r, t)) continue;
            if (kfac_refresh_record(r, fa->data, t) < 0) return -EINVAL; /* cannot happen: shapes checked */
            p->n_records++;
            p->n_similar += r->last_similar;
            if (recorded) recorded[p->first[j] + f] = 1;
            n++;
        }
    return n;
}
