/* common/base/prio.h — CPU priority of the calling thread, so that the
 * curvature work (kfac-statsd, kfac-invertd) runs only on CPU time the
 * gradient path leaves over.
 *
 * Linux only. SCHED_IDLE (sched(7)): the thread runs only when no normal
 * thread wants the CPU (weight 3 against 1024 for nice 0, far below nice
 * 19's 15). Where the kernel or a container refuses it, nice 19 is the
 * fallback. Both apply to the calling thread alone (Linux priorities are
 * per thread); threads it creates afterwards inherit them.
 */
#ifndef KFAC_BASE_PRIO_H
#define KFAC_BASE_PRIO_H

#include <stddef.h>

/* Lower the calling thread to SCHED_IDLE, or to nice 19 when SCHED_IDLE is
 * refused. Returns 0 with what was done in `what` ("SCHED_IDLE", or
 * "nice 19 (SCHED_IDLE refused: ...)"), or -errno when neither worked
 * (what then says why). */
int prio_idle_self(char *what, size_t what_len);

/* Raise the calling thread's nice value to `nice` (1..19; never lowers it):
 * a bounded share of the CPU against nice-0 threads (weight 110 of 1024 at
 * nice 10) that still progresses on a host busy with other work, where
 * SCHED_IDLE may get nothing. Returns 0 with "nice N" in what, or -errno. */
int prio_nice_self(int nice, char *what, size_t what_len);

/* For [statsd]/[invertd] priority = yield: set the calling thread's nice
 * value to `nice` (1..19), then lower it to SCHED_IDLE. The nice value is
 * what the thread returns to when prio_boost_idle lifts it out of
 * SCHED_IDLE; an unprivileged process may do that only where RLIMIT_NICE
 * allows that nice value (ulimit -e >= 20 - nice; systemd: LimitNICE=+nice).
 * Falls back as prio_idle_self does. Returns 0 with what was done, or -errno. */
int prio_yield_self(int nice, char *what, size_t what_len);

/* Lift every thread of this process that runs under SCHED_IDLE to
 * SCHED_OTHER (at the nice value it had before it went idle), recording
 * their thread ids in tids (at most max) and their count in *n. Returns 0,
 * or -errno of the first refusal (EPERM without CAP_SYS_NICE or a large
 * enough RLIMIT_NICE) with the threads lifted so far recorded. */
int prio_boost_idle(int *tids, int max, int *n);

/* 1 when this process may lift a thread of nice `nice` out of SCHED_IDLE
 * (prio_boost_idle): it has CAP_SYS_NICE, or its RLIMIT_NICE soft limit is
 * at least 20 - nice. 0 otherwise, with the limit that refuses it in `why`
 * (for a message that names the fix). Asks the kernel nothing that can be
 * refused: getrlimit and /proc/self/status. */
int prio_can_lift(int nice, char *why, size_t why_len);

/* Lower the threads tids[0..n) back to SCHED_IDLE (always allowed). */
void prio_unboost(const int *tids, int n);

/* 1 when the calling thread runs under SCHED_IDLE or at nice >= 19. */
int prio_self_is_idle(void);

#endif
