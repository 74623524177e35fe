/* ps/recover.h — what kfac-ps goes back to when a round cannot complete.
 *
 * A round in which every member's gradient was refused (norm outliers
 * after a step that wrecked the parameters, or a norm rule whose median no
 * longer fits the run) has no gradient to step with, and every member
 * waits for the next version: without a way out the run would wait
 * forever. The way out (ps/round.c, through ps/guard.h, which holds the
 * snapshot) restores the last good parameters kept here, forgets the
 * inverses installed since, resets the norm histories and publishes a new
 * version without a step.
 *
 * "Good": the parameters at the start of a step whose round refused no
 * gradient as a norm outlier, kept every PS_RECOVER_EVERY steps (one copy
 * of the parameters and the batch-norm state; a memcpy every few steps).
 *
 * No I/O, no clock: unit-tested in tests/ps/test_ps_recover.c. Thread: the
 * PS's loop thread.
 */
#ifndef KFAC_PS_RECOVER_H
#define KFAC_PS_RECOVER_H

#include <stddef.h>

/* Steps between two kept snapshots. */
#define PS_RECOVER_EVERY 10
/* Recoveries in a row (no step in between) after which the run stops. */
#define PS_RECOVER_MAX_IN_A_ROW 20

typedef struct ps_recover ps_recover_t;

/* For n_params parameters and n_state batch-norm state floats. NULL when
 * out of memory. */
ps_recover_t *ps_recover_new(size_t n_params, size_t n_state);
void ps_recover_free(ps_recover_t **r_p);

/* Keep params (and state, n_state floats; may be NULL when n_state is 0)
 * as those of step `step`, taken at time_s (the caller's monotonic
 * seconds). */
void ps_recover_save(ps_recover_t *r, const float *params, const float *state, long step, double time_s);

/* Whether a snapshot is kept. */
int ps_recover_have(const ps_recover_t *r);

/* Copy the kept snapshot into params and state. Returns its step and sets
 * *time_s to when it was taken, or -1 (nothing copied) when none is kept. */
long ps_recover_restore(const ps_recover_t *r, float *params, float *state, double *time_s);

#endif
