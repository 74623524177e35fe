/* ps/life.h — the parameter server's life cycle: running, finishing (the
 * steps are done or the target reached: the final evaluation runs), closed
 * (Shutdown sent), and the end of the run that a round function asked for
 * and the server carries out once that function returns. One ps_life_t
 * lives in the server (ps_server.life); every change goes through these
 * functions, so that the round (which finishes the run) and the server
 * (which closes it) never write the same field. The phase is read freely.
 *
 * Threads: the PS's loop thread. No I/O: unit-tested in
 * tests/ps/test_ps_life.c.
 */
#ifndef KFAC_PS_LIFE_H
#define KFAC_PS_LIFE_H

typedef enum {
    PS_PHASE_RUNNING = 0, /* rounds go on */
    PS_PHASE_FINISHING,   /* steps done or target reached: the final evaluation runs, requests are held */
    PS_PHASE_CLOSED,      /* Shutdown sent, handles closing */
} ps_phase_t;

typedef struct ps_life {
    ps_phase_t phase;
    long final_step;      /* FINISHING: the step whose evaluation ends the run (-1: none) */
    int shutdown_pending; /* a round function asked to end the run ... */
    int shutdown_code;    /* ... with this exit code (the largest asked for) */
} ps_life_t;

/* Running, no final step, nothing asked. */
void ps_life_init(ps_life_t *l);

/* The run is over once the evaluation of final_step is in: RUNNING becomes
 * FINISHING. Returns 1 when it did, 0 when the run was not running. */
int ps_life_finish(ps_life_t *l, long final_step);

/* End the run with exit_code (the larger code wins): a running run stops
 * taking steps (FINISHING) and the end is pending. Nothing once closed. */
void ps_life_request_shutdown(ps_life_t *l, int exit_code);

/* The end asked for, to carry out now: returns 1 and its exit code in
 * *exit_code once (the request is then cleared), 0 when none is pending or
 * the run is closed already. */
int ps_life_take_shutdown(ps_life_t *l, int *exit_code);

/* Shutdown is being sent: CLOSED. Returns 1, or 0 when it was closed
 * already (nothing to do). */
int ps_life_close(ps_life_t *l);

#endif
