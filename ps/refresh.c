/* ps/refresh.c — see refresh.h. */
#include "ps/refresh.h"

#include <errno.h>
#include <inttypes.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "common/base/log.h"

ps_refresh_t *ps_refresh_new(const kfac_opt_t *k, double alpha, int max_interval) {
    if (!k || !k->avg) return NULL;
    ps_refresh_t *r = calloc(1, sizeof *r);
    if (!r) return NULL;
    if (!(r->plan = kfac_refresh_plan_new(k->avg, alpha, max_interval, 0))) goto fail;
    size_t ns = (size_t)r->plan->n_slots, nt = (size_t)(r->plan->n_trackers ? r->plan->n_trackers : 1);
    r->want = calloc(ns, 1);
    r->layers = calloc(ns, sizeof *r->layers);
    r->recorded = calloc(nt, 1);
    r->folded = calloc(ns, sizeof *r->folded);
    if (!r->want || !r->layers || !r->recorded || !r->folded) goto fail;
    return r;
fail:
    ps_refresh_free(&r);
    return NULL;
}

void ps_refresh_free(ps_refresh_t **r_p) {
    if (!r_p || !*r_p) return;
    ps_refresh_t *r = *r_p;
    kfac_refresh_plan_free(&r->plan);
    free(r->want);
    free(r->layers);
    free(r->recorded);
    free(r->folded);
    free(r);
    *r_p = NULL;
}

int ps_refresh_wanted(ps_refresh_t *r, long t, uint32_t **layers) {
    kfac_refresh_plan_wanted(r->plan, t, r->want);
    int n = 0;
    for (int j = 0; j < r->plan->n_slots; j++) /* slots are in network order: increasing layers */
        if (r->want[j]) r->layers[n++] = (uint32_t)r->plan->layer[j];
    if (layers) *layers = r->layers;
    return n;
}

int ps_refresh_folded(ps_refresh_t *r, const kfac_stats_t *batch, long t, const kfac_opt_t *k, ps_sched_block_t *sched) {
    int n = kfac_refresh_plan_record(r->plan, batch, t, r->recorded);
    if (n < 0) return n;
    r->n_batches++;
    for (int j = 0; j < batch->n_layers; j++)
        if (batch->layers[j].n_factors > 0 && batch->layers[j].f[0].n_updates > 0) {
            r->folded[j]++;
            r->n_layer_stats++;
        }
    for (int b = 0; b < k->n_blocks; b++) {
        int i = kfac_refresh_plan_index(r->plan, k->blocks[b].stat, k->blocks[b].factor);
        if (i < 0 || !r->recorded[i]) continue;
        sched[b].due = 1;
        log_debug("adaptive refresh: layer %d factor %d at step %ld, next in %d steps", k->blocks[b].layer,
                  k->blocks[b].factor, t, r->plan->tr[i]->delta);
    }
    return n;
}

void ps_refresh_log_summary(const ps_refresh_t *r) {
    if (!r) return;
    char per[512], iv[1024];
    size_t a = 0, b = 0;
    per[0] = iv[0] = 0;
    for (int j = 0; j < r->plan->n_slots; j++) {
        int w = snprintf(per + a, sizeof per - a, "%s%d:%" PRIu64, j ? " " : "", r->plan->layer[j], r->folded[j]);
        if (w > 0 && (size_t)w < sizeof per - a) a += (size_t)w;
        for (int i = r->plan->first[j]; i < r->plan->first[j + 1]; i++) {
            const kfac_refresh_t *t = r->plan->tr[i];
            w = snprintf(iv + b, sizeof iv - b, "%s%d.%d:%d/%.3f", b ? " " : "", r->plan->layer[j], i - r->plan->first[j],
                         t->delta, t->n_records > 1 ? t->dist_sum / (double)(t->n_records - 1) : 0.0);
            if (w > 0 && (size_t)w < sizeof iv - b) b += (size_t)w;
        }
    }
    log_info("adaptive refresh: %" PRIu64 " layer statistics folded in %" PRIu64 " batches (by layer %s); %ld factor "
             "refreshes, %ld similar to the previous; %" PRIu64 " statsd requests held; interval now / mean distance to "
             "the previous value per layer.factor: %s",
             r->n_layer_stats, r->n_batches, per, r->plan->n_records, r->plan->n_similar, r->n_held, iv);
}

void ps_refresh_held(ps_refresh_t *r) { r->n_held++; }
