/* ps/jobs.h — inversion jobs: cutting, handing out, judging and installing results.
 * (split out of ps/server_int.h: each unit of kfac-ps has its own header,
 * and a file includes those whose functions it calls). */
#ifndef KFAC_PS_JOBS_H
#define KFAC_PS_JOBS_H

#include "ps/server_int.h"

/* ps/jobs.c: the jobs' own state: the next id (the first job gets id 1),
 * the queue of daemons waiting for work, the log's rate limit (what each
 * job in flight was cut from and with is the scheduler's, ps/sched.h; the
 * probes are the curvature thread's, ps/curv.h). NULL when out of memory.
 * ps_jobs_free NULLs the pointer and accepts NULL. */
ps_jobs_t *ps_jobs_new(void);
void ps_jobs_free(ps_jobs_t **j_p);
/* ps/jobs.c: the id the next job gets; ids go on from at least next_id
 * (a resume: ids are never handed out twice in a run). */
uint64_t ps_jobs_next_id(const ps_server_t *s);
void ps_jobs_restore_next_id(ps_server_t *s, uint64_t next_id);

/* ps/jobs.c: p waits for an inversion job (answered by ps_jobs_dispatch). */
void ps_jobs_wait(ps_server_t *s, ps_peer_t *p);
/* ps/jobs.c: after a refused message from inverse daemon p while the run
 * goes on: its jobs back to the queue, p waits for work, jobs dispatched.
 * jobs.c calls nothing of round.c; round.c calls this. */
void ps_jobs_after_reject(ps_server_t *s, ps_peer_t *p);
/* ps/jobs.c: a kfac-invertd asks for work / sends a job's result. */
void ps_jobs_request(ps_server_t *s, ps_peer_t *p, const msg_t *m);
void ps_jobs_result(ps_server_t *s, ps_peer_t *p, msg_t *m); /* may take m (msg_take) for the check */

/* ps/jobs.c: a cut (PS_CURV_CUT) and a check (PS_CURV_CHECK) back from the
 * curvature thread: the Job sent to its daemon; the inverse installed or
 * refused, its daemon answered. */
void ps_jobs_cut_done(ps_server_t *s, ps_curv_task_t *t);
void ps_jobs_check_done(ps_server_t *s, ps_curv_task_t *t);

/* Inverse daemon p reports it could not invert block b's factor of
 * `version` (ps_sched_failed_by: another daemon tries it first); counted. */
void ps_jobs_failed_by(ps_server_t *s, ps_peer_t *p, int b, long version);
/* Hand out jobs to waiting inverse daemons. */
void ps_jobs_dispatch(ps_server_t *s);

#endif
