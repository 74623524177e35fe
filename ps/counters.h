/* ps/counters.h — kfac-ps's event counters in one table: the inverses
 * installed, the gradients refused, the messages rejected by type and by
 * error code, and the rest of what the final summary line, the metrics
 * endpoint and the checkpoint report. Every other unit of ps/ bumps a
 * counter through ps_counters_bump or ps_counters_reject and reads it with
 * ps_counter; only this unit writes the table (tools/check-fields.sh).
 *
 * PS_COUNTERS is the list (an X-macro): X(ID, ckpt) with ckpt the
 * counter's slot in a checkpoint (ps/ckpt.h, ps_ckpt_counter_t) or -1 for
 * a counter that starts at 0 in every process. The rejection tables are
 * apart: one count per message type ([MSG_NONE]: undecodable) and one per
 * error code.
 *
 * Threads: the PS's loop thread. No I/O: unit-tested in
 * tests/ps/test_ps_counters.c.
 */
#ifndef KFAC_PS_COUNTERS_H
#define KFAC_PS_COUNTERS_H

#include <stdint.h>

#include "proto/msg.h"

/* X(ID, checkpoint slot or -1) */
#define PS_COUNTERS(X)                                                                                               \
    X(INSTALLED, 0)           /* inverses installed */                                                             \
    X(IGNORED_OLD, 1)         /* results older than the inverse held */                                            \
    X(INV_FAILED, 2)          /* jobs that failed (JobResult error, or an Error from the daemon holding it) */     \
    X(FOLDS, 3)               /* statistics folded */                                                              \
    X(STALE_GRADS, 4)         /* gradients older than [ps] gradient_staleness allows: discarded */                 \
    X(GRADS_TOTAL, 5)         /* gradients accepted */                                                             \
    X(DROPPED, 6)             /* workers dropped from a round (silent, gone, stalled) */                           \
    X(STEP_FAILURES, 7)       /* updates with a non-finite direction */                                            \
    X(JOBS_SENT, 8)           /* inversion jobs handed out */                                                      \
    X(INV_BAD, -1)            /* results that failed verification or came from the wrong daemon */                 \
    X(INVERTD_DISTRUSTED, -1) /* inverse daemons given no more jobs after PS_BAD_INVERSES_MAX bad results */        \
    X(REASSIGNED, -1)         /* overdue jobs handed to another daemon */                                          \
    X(REJ_EXAMPLES, -1)       /* gradients refused: more examples than [data] batch */                             \
    X(REJ_NORM, -1)           /* gradients refused: norm outliers */                                               \
    X(STALLED, -1)            /* members dropped for stalling */                                                   \
    X(DEMOTED, -1)            /* workers that stalled [ps] stall_max_drops times: no member of the rounds again */ \
    X(REPUSHED, -1)           /* gradients refused: the identity already put its share into the round */          \
    X(REJ_DRIFT, -1)          /* gradients refused: a direction of their own, unshared by the reference (ps/drift.h) */ \
    X(DRIFT_SPARED, -1)       /* ... beyond the bound but not refused: no other worker was within it (ps/drift.h) */ \
    X(STATE_KEPT, -1)         /* steps whose combined batch-norm state was not finite: the previous one kept */   \
    X(ROBUST_STEPS, -1)       /* steps combined by [ps] aggregate */                                               \
    X(ROBUST_FALLBACKS, -1)   /* ... that fell back to the mean */                                                 \
    X(CLIPPED, -1)            /* layer gradients clipped ([ps] grad_clip_ratio) */                                 \
    X(RECOVERIES, -1)         /* rounds in which every member's gradient was refused */                            \
    X(EXPIRED, -1)            /* clients forgotten for not asking for work after Hello */                          \
    X(PARAMS_HELD, -1)        /* Params not sent: the client's previous one was not written out yet */             \
    X(SEND_FULL, -1)          /* sends that found a client's pipe full (EAGAIN) */                                 \
    X(RATE_LIMITED, -1)       /* GetParams and JobRequest over PS_REQ_PER_S */                                     \
    X(REFUSED_KEY, -1)        /* Hellos refused: an id of another key, or a key at members_per_key */              \
    X(REVOKED, -1)            /* clients let go: their key left the allowlists */                                  \
    X(CKPT_SAVED, -1)         /* checkpoints written */                                                            \
    X(CKPT_FAILED, -1)        /* checkpoints that could not be written */

typedef enum {
#define PS_COUNTER_ENUM(id, ckpt) PS_CTR_##id,
    PS_COUNTERS(PS_COUNTER_ENUM)
#undef PS_COUNTER_ENUM
        PS_CTR_COUNT
} ps_counter_t;

typedef struct ps_counters {
    uint64_t v[PS_CTR_COUNT];
    uint64_t rejected[MSG_TYPE_COUNT];     /* by message type; [MSG_NONE] = undecodable */
    uint64_t rejected_code[MSG_ERR_COUNT]; /* by error code; [MSG_ERR_NONE] unused */
} ps_counters_t;

/* The value of counter id (0 for an id out of range). */
uint64_t ps_counter(const ps_counters_t *c, ps_counter_t id);

/* Add 1 to counter id and return the new value (an id out of range adds
 * nothing and returns 0). */
uint64_t ps_counters_bump(ps_counters_t *c, ps_counter_t id);

/* A rejected message of type (out of range: counted as MSG_NONE) with
 * error code (MSG_ERR_NONE or out of range: no code counted). */
void ps_counters_reject(ps_counters_t *c, msg_type_t type, msg_error_code_t code);

/* Rejected messages of type, and with code; the sum over every type. */
uint64_t ps_counters_rejected(const ps_counters_t *c, msg_type_t type);
uint64_t ps_counters_rejected_code(const ps_counters_t *c, msg_error_code_t code);
uint64_t ps_counters_rejected_total(const ps_counters_t *c);

/* The counter stored in checkpoint slot `slot` (0 .. PS_CKPT_COUNTERS-1 of
 * ps/ckpt.h), or -1 when no counter of the table is stored there. */
int ps_counters_of_slot(int slot);

/* A checkpoint's counters (n_slots values, slot order) into c: every
 * counter with a slot < n_slots takes its value; slot `rejected_grads_slot`
 * (when in range) is the count of rejected GradPush messages. Counters
 * without a slot are left as they are. */
void ps_counters_restore(ps_counters_t *c, const uint64_t *slots, int n_slots, int rejected_grads_slot);

/* The reverse: c into slots[0 .. n_slots) (unused slots zeroed). */
void ps_counters_save(const ps_counters_t *c, uint64_t *slots, int n_slots, int rejected_grads_slot);

#endif
