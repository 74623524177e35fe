/* ps/round.h — the gradient rounds (ps/round.c, ps/round_push.c): requests, pushes, statistics, the step, evaluation and progress.
 * (split out of ps/server_int.h: each unit of kfac-ps has its own header,
 * and a file includes those whose functions it calls). */
#ifndef KFAC_PS_ROUND_H
#define KFAC_PS_ROUND_H

#include "ps/server_int.h"

/* Client requests (validated, role-checked, sender present). */
void ps_round_get_params(ps_server_t *s, ps_peer_t *p, const msg_t *m);
void ps_round_grad_push(ps_server_t *s, ps_peer_t *p, msg_t *m); /* may keep m's dense gradient array */
/* The gradients one identity may put into a round (ps/ident.h): 1 for a
 * member id, [security] members_per_key for a CURVE key (0: any number). */
int ps_round_push_share(const ps_server_t *s, const ps_peer_t *p);
void ps_round_stats_push(ps_server_t *s, ps_peer_t *p, msg_t *m); /* may take m (msg_take) for the fold */
/* A fold (PS_CURV_FOLD) back from the curvature thread: the scheduler's
 * factor versions and the batch-norm view follow, its statistics worker
 * gets its next Params (or the refusal), jobs and the step go on. */
void ps_round_fold_done(ps_server_t *s, ps_curv_task_t *t);
/* After a rejected long-poll request from a welcomed client of the right
 * role: keep it going (next Params, or back in the job queue). */
void ps_round_after_reject(ps_server_t *s, ps_peer_t *p, const msg_t *m);

/* An Error from a client: logged (rate-limited); from an inverse daemon
 * holding a job, that job counts as failed. */
void ps_round_peer_error(ps_server_t *s, ps_peer_t *p, const msg_t *m);

/* A client joined, left or went silent: its place in the round and its job. */
void ps_round_peer_joined(ps_server_t *s, ps_peer_t *p);
void ps_round_peer_gone(ps_server_t *s, ps_peer_t *p, const char *why);

/* Send Params of the current version to p now. Returns 0 or -errno. */
int ps_round_send_params(ps_server_t *s, ps_peer_t *p);

/* The schedule at step t: the statistics interval (stats = sync), the
 * inverse interval (refresh = every) and the damping in force (logged when
 * a milestone changes them). */
void ps_round_schedule(ps_server_t *s);

/* The run must end with exit_code (the larger code wins): recorded here and
 * carried out by the server once the round function that asked returns. */
void ps_round_request_shutdown(ps_server_t *s, int exit_code);

/* Apply the step if it is ready. */
void ps_round_try_step(ps_server_t *s);

/* Timer work: held Params, overdue jobs, the start-up gate, "waiting for"
 * lines. */
void ps_round_tick(ps_server_t *s);

/* Send the Params held back (ps_round_send_params) to the clients whose
 * previous Params has been written out by now. */
void ps_round_resend_held(ps_server_t *s);

/* An evaluation came back (ps_eval_done_fn). */
void ps_round_eval_done(const ps_eval_result_t *r, int status, void *user);

#endif
