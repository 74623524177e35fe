/* ps/recover.c — see recover.h. */
#include "ps/recover.h"

#include <stdlib.h>
#include <string.h>

struct ps_recover {
    size_t n_params, n_state;
    float *params, *state;
    long step; /* -1: nothing kept */
    double time_s;
};

ps_recover_t *ps_recover_new(size_t n_params, size_t n_state) {
    ps_recover_t *r = calloc(1, sizeof *r);
    if (!r) return NULL;
    r->n_params = n_params;
    r->n_state = n_state;
    r->step = -1;
    r->params = malloc((n_params ? n_params : 1) * sizeof(float));
    r->state = malloc((n_state ? n_state : 1) * sizeof(float));
    if (!r->params || !r->state) ps_recover_free(&r);
    return r;
}

void ps_recover_free(ps_recover_t **r_p) {
    if (!r_p || !*r_p) return;
    free((*r_p)->params);
    free((*r_p)->state);
    free(*r_p);
    *r_p = NULL;
}

void ps_recover_save(ps_recover_t *r, const float *params, const float *state, long step, double time_s) {
    memcpy(r->params, params, r->n_params * sizeof(float));
    if (r->n_state && state) memcpy(r->state, state, r->n_state * sizeof(float));
    r->step = step;
    r->time_s = time_s;
}

int ps_recover_have(const ps_recover_t *r) { return r && r->step >= 0; }

long ps_recover_restore(const ps_recover_t *r, float *params, float *state, double *time_s) {
    if (!ps_recover_have(r)) return -1;
    memcpy(params, r->params, r->n_params * sizeof(float));
    if (r->n_state && state) memcpy(state, r->state, r->n_state * sizeof(float));
    if (time_s) *time_s = r->time_s;
    return r->step;
}
