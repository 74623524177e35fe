/* ps/life.c — see life.h. */
#include "ps/life.h"

void ps_life_init(ps_life_t *l) {
    l->phase = PS_PHASE_RUNNING;
    l->final_step = -1;
    l->shutdown_pending = 0;
    l->shutdown_code = 0;
}

int ps_life_finish(ps_life_t *l, long final_step) {
    if (l->phase != PS_PHASE_RUNNING) return 0;
    l->phase = PS_PHASE_FINISHING;
    l->final_step = final_step;
    return 1;
}

void ps_life_request_shutdown(ps_life_t *l, int exit_code) {
    if (l->phase == PS_PHASE_CLOSED) return;
    if (l->phase == PS_PHASE_RUNNING) l->phase = PS_PHASE_FINISHING; /* no more steps meanwhile */
    l->shutdown_pending = 1;
    if (exit_code > l->shutdown_code) l->shutdown_code = exit_code;
}

int ps_life_take_shutdown(ps_life_t *l, int *exit_code) {
    if (!l->shutdown_pending || l->phase == PS_PHASE_CLOSED) return 0;
    l->shutdown_pending = 0;
    *exit_code = l->shutdown_code;
    return 1;
}

int ps_life_close(ps_life_t *l) {
    if (l->phase == PS_PHASE_CLOSED) return 0;
    l->phase = PS_PHASE_CLOSED;
    return 1;
}
