/* ps/trim.h — when kfac-ps gives freed memory back to the system.
 *
 * glibc keeps freed blocks in its heaps, and kfac-ps counts on that: the
 * messages, their decoded copies and the Params buffer of every step reuse
 * the same pages, with no page fault and no system call per message. The
 * price is that after a burst of large messages (many clients at once, a
 * hostile peer sending frames at the size limit) the heaps keep what the
 * burst needed. malloc_trim(0) gives it back; done while training it only
 * makes the next step's messages fault their pages in again (a rule that
 * trimmed after a quiet spell of twice the step period still did, several
 * times a minute, on a loaded machine whose step times swung from 0.2 to
 * 2 s). So it is done when the burst is over and nobody trains:
 *   - large messages (PS_TRIM_LARGE_BYTES or more) came in since the last
 *     trim; heartbeats and other small messages do not count;
 *   - none came for idle_ns;
 *   - the caller says the run is not training (kfac-ps: no gradient worker
 *     present, or the run is over).
 * While a run trains, what a burst left stays in the heaps, which the
 * step's messages reuse: the process does not grow past its peak, and the
 * memory goes back once the workers are gone.
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
    uint64_t n_trims;         /* trims done */
} ps_trim_t;

/* Nothing received yet: no trim due. */
void ps_trim_init(ps_trim_t *t);

/* A message of n_bytes came in at now_ns. */
void ps_trim_received(ps_trim_t *t, uint64_t now_ns, size_t n_bytes);

/* 1 when a trim is due at now_ns: training is 0, large messages came in
 * since the last trim, and none for idle_ns or more. Else 0. */
int ps_trim_due(const ps_trim_t *t, uint64_t now_ns, uint64_t idle_ns, int training);

/* The trim was done: nothing due until the next large message. */
void ps_trim_done(ps_trim_t *t);

#endif
