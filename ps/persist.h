/* ps/persist.h — checkpoints: the folder, saving after a step, resuming.
 * (split out of ps/server_int.h: each unit of kfac-ps has its own header,
 * and a file includes those whose functions it calls). */
#ifndef KFAC_PS_PERSIST_H
#define KFAC_PS_PERSIST_H

#include "ps/server_int.h"

/* The checkpoints' state: not resumed, no folder chosen. NULL when out of
 * memory; ps_persist_free NULLs the pointer and accepts NULL. */
/* owners and idents: Hello's tables (ps_hello_owners, ps_hello_idents),
 * borrowed, which a checkpoint saves and a resume restores. */
ps_persist_t *ps_persist_new(ps_owners_t *owners, ps_idents_t *idents);
void ps_persist_free(ps_persist_t **p_p);

/* Once [run] out_dir is chosen: the checkpoint folder ([checkpoint] dir, or
 * out_dir/checkpoints), created when checkpoints are on. Returns 0 or
 * -errno with the reason in err. */
int ps_persist_open_dir(ps_server_t *s, char *err, size_t err_len);

/* The checkpoint folder; the step resumed from (-1: a fresh start); the
 * training time before the resume (0: a fresh start). */
const char *ps_persist_dir(const ps_server_t *s);
long ps_persist_resumed_from(const ps_server_t *s);
uint64_t ps_persist_wall_offset_ns(const ps_server_t *s);
/* Whether the run resumed from a checkpoint at or past [run] steps (a
 * restart after its end): nothing to run, ps_server_run returns 0. */
int ps_persist_run_over(const ps_server_t *s);

/* Write a checkpoint of the current state now ([checkpoint] every > 0),
 * then prune to [checkpoint] keep files; why is logged ("step 300",
 * "SIGTERM"). A failure is logged and counted, never fatal. Returns 0 or
 * -errno. */
int ps_persist_save(ps_server_t *s, const char *why);

/* After a step: a checkpoint when t is a multiple of [checkpoint] every. */
void ps_persist_after_step(ps_server_t *s);

/* [checkpoint] resume: restore the newest valid checkpoint (see
 * ps_ckpt_restore_newest). Returns 1 (resumed), 0 (nothing to resume) or a
 * negative errno with the reason in err. The caller then recomputes the
 * round's schedule (ps_round_schedule): persist.c never calls the round. */
int ps_persist_resume(ps_server_t *s, char *err, size_t err_len);

#endif
