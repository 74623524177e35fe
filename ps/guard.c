/* ps/guard.c — see guard.h. */
#include "ps/guard.h"

#include <stdlib.h>
#include <string.h>

struct ps_guard {
    int n_layers;
    ps_norm_hist_t norms;       /* norms of recently accepted gradients */
    ps_norm_hist_t push_ns;     /* how long recently accepted gradients took after their round opened (ns) */
    ps_norm_hist_t *layer_norms; /* (n_layers) each layer's (clipped) norms of recently accepted gradients */
    double *layer_n2;           /* (n_layers) scratch: the judged push's layers' squared norms */
    ps_recover_t *recover;      /* the last good parameters */
    int recoveries_in_a_row;    /* recoveries since the last step */
    ratelimit_t rl[PS_GUARD_LINE_COUNT];
};

ps_guard_t *ps_guard_new(int n_layers, size_t n_params, size_t n_state) {
    ps_guard_t *g = calloc(1, sizeof *g);
    if (!g) return NULL;
    g->n_layers = n_layers > 0 ? n_layers : 0;
    g->layer_norms = calloc(g->n_layers ? (size_t)g->n_layers : 1, sizeof *g->layer_norms);
    g->layer_n2 = calloc(g->n_layers ? (size_t)g->n_layers : 1, sizeof *g->layer_n2);
    g->recover = ps_recover_new(n_params, n_state);
    if (!g->layer_norms || !g->layer_n2 || !g->recover) ps_guard_free(&g);
    return g;
}

void ps_guard_free(ps_guard_t **g_p) {
    if (!g_p || !*g_p) return;
    ps_guard_t *g = *g_p;
    free(g->layer_norms);
    free(g->layer_n2);
    ps_recover_free(&g->recover);
    free(g);
    *g_p = NULL;
}

ps_grad_verdict_t ps_guard_check_grad(const ps_guard_t *g, uint64_t n_examples, int batch, double norm,
                                      double max_ratio, double *median, int *n_recent) {
    *median = ps_norm_hist_median(&g->norms);
    *n_recent = g->norms.n;
    return ps_member_check_grad(n_examples, batch, norm, &g->norms, max_ratio);
}

void ps_guard_accepted(ps_guard_t *g, double norm, uint64_t wait_ns) {
    ps_norm_hist_add(&g->norms, norm);
    if (wait_ns > 0) ps_norm_hist_add(&g->push_ns, (double)wait_ns);
}

double *ps_guard_layer_n2(ps_guard_t *g) { return g->layer_n2; }

double ps_guard_clip(ps_guard_t *g, int layer, double norm, double ratio, double *median, int *n_recent) {
    *median = 0.0;
    *n_recent = 0;
    if (layer < 0 || layer >= g->n_layers) return 0.0;
    ps_norm_hist_t *h = &g->layer_norms[layer];
    const double med = ps_norm_hist_median(h), bound = ratio * med;
    *median = med;
    *n_recent = h->n;
    if (med > 0.0 && norm > bound) {
        ps_norm_hist_add(h, bound);
        return bound;
    }
    ps_norm_hist_add(h, norm);
    return 0.0;
}

double ps_guard_push_median_ns(const ps_guard_t *g) { return ps_norm_hist_median(&g->push_ns); }

void ps_guard_step(ps_guard_t *g, int norm_rejects, long steps_done, const float *params, const float *state,
                   long t, double now_s) {
    g->recoveries_in_a_row = 0;
    if (norm_rejects == 0 && steps_done % PS_RECOVER_EVERY == 0) ps_recover_save(g->recover, params, state, t, now_s);
}

ps_guard_recover_t ps_guard_recover(ps_guard_t *g, int norm_rejects, float *params, float *state, long *step,
                                    double *time_s) {
    *step = -1;
    *time_s = 0.0;
    if (++g->recoveries_in_a_row > PS_RECOVER_MAX_IN_A_ROW) return PS_GUARD_RECOVER_GIVE_UP;
    if (norm_rejects > 0) *step = ps_recover_restore(g->recover, params, state, time_s);
    memset(&g->norms, 0, sizeof g->norms);
    memset(g->layer_norms, 0, (size_t)g->n_layers * sizeof *g->layer_norms);
    return *step >= 0 ? PS_GUARD_RECOVER_RESTORED : PS_GUARD_RECOVER_SAME;
}

ps_norm_hist_t *ps_guard_norms(ps_guard_t *g) { return &g->norms; }

ps_norm_hist_t *ps_guard_layer_norms(ps_guard_t *g, int *n) {
    *n = g->n_layers;
    return g->layer_norms;
}

ratelimit_t *ps_guard_rl(ps_guard_t *g, ps_guard_line_t line) {
    return &g->rl[(unsigned)line < PS_GUARD_LINE_COUNT ? line : PS_GUARD_LINE_EXAMPLES];
}
