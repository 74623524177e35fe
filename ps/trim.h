/* ps/trim.h — when kfac-ps gives freed memory back to the system.
 *
 * glibc keeps freed blocks in its heaps, and kfac-ps counts on that: the
 * messages, their decoded copies and the Params buffer of every step reuse
 * the same pages, with no page fault and no system call per message. The
 * price is that after a burst of large messages (many clients at once, a
 * hostile peer sending frames at the size limit) the heaps keep what the
 * burst needed. malloc_trim(0) gives it back; done while training it would
 * only make the next step's messages fault their pages in again. So it is
 * done once the burst is over:
 *   - large messages (PS_TRIM_LARGE_BYTES or more) came in since the last
 *     trim; heartbeats and other small messages do not count;
 *   - none came for quiet_ns = max(idle_ns, 2 x the step period), where the
 *     step period is the time between the last two training steps, decayed
 *     by a tenth per step so that one slow step does not hold it up for
 *     long. A run that trains receives large messages (its gradients)
 *     every step, so it is not trimmed while its steps keep their pace,
 *     however slow that is; once it stops stepping (run over, workers
 *     gone), or when it never stepped, idle_ns of quiet is enough after
 *     the period has decayed.
 *
 * No I/O, no clock of its own (the caller passes its monotonic ns): the
 * decision is unit-tested in tests/ps/test_ps_trim.c; the server calls
 * malloc_trim when ps_trim_due says so. Thread: the PS's loop thread.
 */
#ifndef KFAC_PS_TRIM_H
#define KFAC_PS_TRIM_H

#include <stddef.h>
#include <stdint.h>

/* Messages of this size or more count as large (glibc's default mmap
 * threshold: smaller blocks come and go from the heaps in any case). */
#define PS_TRIM_LARGE_BYTES (128 * 1024)

typedef struct ps_trim {
    uint64_t last_large_ns;   /* when the last large message came in */
    uint64_t bytes_since;     /* bytes of large messages since the last trim */
    uint64_t last_step_ns;    /* when the last training step was applied (0: none yet) */
    uint64_t period_ns;       /* step period: the last one, or the decayed longer one before */
    uint64_t n_trims;         /* trims done */
} ps_trim_t;

/* Nothing received, no step yet: no trim due. */
void ps_trim_init(ps_trim_t *t);

/* A message of n_bytes came in at now_ns. */
void ps_trim_received(ps_trim_t *t, uint64_t now_ns, size_t n_bytes);

/* A training step was applied at now_ns: the step period follows. */
void ps_trim_stepped(ps_trim_t *t, uint64_t now_ns);

/* How long the quiet must last: max(idle_ns, 2 x period_ns). */
uint64_t ps_trim_quiet_ns(const ps_trim_t *t, uint64_t idle_ns);

/* 1 when a trim is due at now_ns: large messages came in since the last
 * trim, and none for ps_trim_quiet_ns(t, idle_ns) or more. Else 0. */
int ps_trim_due(const ps_trim_t *t, uint64_t now_ns, uint64_t idle_ns);

/* The trim was done: nothing due until the next large message. */
void ps_trim_done(ps_trim_t *t);

#endif
