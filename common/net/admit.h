/* common/net/admit.h — how a client whose CURVE key kfac-ps refused waits
 * for its key to be listed (docs/security.md, "Adding and removing keys").
 *
 * A refused key may yet be listed: the operator copies the public key into
 * the allowlist folder after the daemon started, and kfac-ps admits it
 * without a signal. ZeroMQ does not retry a connection whose handshake the
 * peer refused, so the client connects again itself, after 1 s, 2 s, 4 s,
 * ... at most ADMIT_BACKOFF_MAX_MS apart, for at most [cluster]
 * admit_wait_s from the first refusal; then it gives up (exit 78, as with
 * admit_wait_s = 0 at the first refusal). A Welcome ends the window: a key
 * refused later (revoked, then the connection dropped) starts a new one.
 *
 * This unit only decides (no clock of its own, no I/O); common/net/client.c
 * acts on its answers. Plain struct, caller-allocated, no threads.
 */
#ifndef KFAC_NET_ADMIT_H
#define KFAC_NET_ADMIT_H

#include <stdint.h>

/* The first pause after a refusal, and the longest (ms). */
#define ADMIT_BACKOFF_FIRST_MS 1000
#define ADMIT_BACKOFF_MAX_MS 30000

typedef enum admit_decision {
    ADMIT_DECISION_GIVE_UP = 0, /* the window is over (or there is none): exit 78 */
    ADMIT_DECISION_RETRY        /* connect again after *delay_ms */
} admit_decision_t;

typedef struct admit {
    uint64_t wait_ms;     /* the window ([cluster] admit_wait_s * 1000; 0: none) */
    uint64_t first_ns;    /* the first refusal of the window (0: none yet) */
    uint64_t delay_ms;    /* the last pause (0: none yet) */
    uint64_t n_refused;   /* refusals in the window */
} admit_t;

/* A window of wait_ms, none begun. */
void admit_init(admit_t *a, uint64_t wait_ms);

/* The pause after prev_ms: ADMIT_BACKOFF_FIRST_MS when prev_ms is 0, else
 * twice prev_ms, at most ADMIT_BACKOFF_MAX_MS. */
uint64_t admit_backoff_next_ms(uint64_t prev_ms);

/* kfac-ps refused the key at now_ns (a monotonic clock). RETRY: connect
 * again in *delay_ms (the next pause of the schedule, shortened so that the
 * last try falls at the end of the window); *left_ms is what remains of the
 * window. GIVE_UP: the window (begun at the first refusal) is over, or
 * wait_ms is 0; *delay_ms is 0 and *left_ms 0. */
admit_decision_t admit_refused(admit_t *a, uint64_t now_ns, uint64_t *delay_ms, uint64_t *left_ms);

/* Admitted (a Welcome): the next refusal begins a new window. */
void admit_reset(admit_t *a);

#endif
