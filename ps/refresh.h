/* ps/refresh.h — [kfac] refresh = adaptive in the parameter server: SP-NGD
 * Algorithm 1 per factor (common/kfac/kfac_refresh.h) deciding which layers
 * get new statistics, and through them which blocks get new inverses.
 *
 *   - Which layers are wanted at step t: those with a factor due
 *     (kfac_refresh_plan_wanted). Params to kfac-statsd list them in
 *     stats_layers; while none is wanted the PS holds the statsd's request
 *     until a step makes one due (so it computes nothing meanwhile). With
 *     [kfac] stats = sync the workers are asked for statistics (want_stats)
 *     only at steps where a layer is wanted, and only for those layers; this
 *     replaces [kfac] stats_every.
 *   - Fresh statistics (a StatsPush, or the round's merged worker statistics)
 *     are folded as always; each factor that was due is then recorded
 *     (Algorithm 2 on the fresh batch value against the values recorded at
 *     its previous refreshes), its next refresh set, and its block marked
 *     for a new inverse. A factor folded while not due (it travelled with a
 *     due factor of the same layer, or came from a client that ignores
 *     stats_layers) moves the running average but is neither recorded nor
 *     re-inverted.
 *
 * Steps are the PS's versions t. Threads: the PS's loop thread. Ownership:
 * ps_refresh_t owns its plan and buffers; other pointers are borrowed.
 */
#ifndef KFAC_PS_REFRESH_H
#define KFAC_PS_REFRESH_H

#include <stddef.h>
#include <stdint.h>

#include "common/kfac/kfac_opt.h"
#include "common/kfac/kfac_refresh.h"
#include "ps/sched.h"

typedef struct ps_refresh {
    kfac_refresh_plan_t *plan;
    unsigned char *want;       /* (plan->n_slots) scratch */
    uint32_t *layers;          /* (plan->n_slots) the wanted net layers, for Params.stats_layers */
    unsigned char *recorded;   /* (plan->n_trackers) scratch */
    uint64_t *folded;          /* (plan->n_slots) layer statistics folded per slot */
    uint64_t n_layer_stats;    /* layer statistics folded, all slots */
    uint64_t n_batches;        /* statistics batches folded */
    uint64_t n_held;           /* statsd requests held because no layer was wanted */
} ps_refresh_t;

/* For the layout of the optimizer's running averages (k->avg), threshold
 * alpha (> 0), interval cap max_interval (0: KFAC_REFRESH_MAX_INTERVAL);
 * every factor is due at step 0. Returns NULL on bad arguments or out of
 * memory. */
ps_refresh_t *ps_refresh_new(const kfac_opt_t *k, double alpha, int max_interval);

/* Free; NULL is a no-op and *r_p is set to NULL. */
void ps_refresh_free(ps_refresh_t **r_p);

/* The net layers wanted at step t, increasing, into *layers (r's buffer,
 * valid until the next call; may be NULL). Returns their number. */
int ps_refresh_wanted(ps_refresh_t *r, long t, uint32_t **layers);

/* Fresh statistics batch (k->avg's layout) was folded into k at step t:
 * record the due factors present and set sched[b].due for their blocks
 * (sched mirrors k->blocks). Returns the number of factors recorded, or
 * -EINVAL (layout mismatch). */
int ps_refresh_folded(ps_refresh_t *r, const kfac_stats_t *batch, long t, const kfac_opt_t *k, ps_sched_block_t *sched);

/* A statsd's request was held because no layer was wanted (counted for
 * ps_refresh_log_summary). */
void ps_refresh_held(ps_refresh_t *r);

/* One log line: layer statistics folded (in all, per batch, per layer),
 * refreshes recorded and how many found the factor similar, requests held,
 * and every factor's current interval. */
void ps_refresh_log_summary(const ps_refresh_t *r);

#endif
