/* ps/ckpt.h — checkpoints of the parameter server's whole state: what a
 * killed or stopped kfac-ps needs to go on exactly where it was.
 *
 * Contents (all of it owned by the PS; see docs/operations.md, "Checkpoints"):
 *   the parameters and their version t, the batch-norm state, the step
 *   counters (steps done, wall time, the job id counter, the summary
 *   counters), whether round t's synchronous statistics were folded already;
 *   K-FAC: momentum, the Polyak average and its count, every factor's
 *   running average with its sample count and number of updates, every
 *   block's factor version, its installed inverse (Cholesky form or
 *   eigendecomposition, with its damping) and the factor version it came
 *   from, the inverse counters; the scheduler's per-block versions and
 *   refresh marks; the adaptive refresh history (SP-NGD Algorithm 2);
 *   SGD: the velocity; the norms of the last accepted gradients (the
 *   outlier rule's history); under CURVE, which key each member id
 *   belongs to (ps/owner.h: role, member id, the key's Z85 text), so that
 *   after a restart no other key can take a member's id; what each member
 *   identity has done (ps/ident.h); the guards' histories (clipped norms,
 *   statistics traces); the reference-gradient check's histories
 *   ([ps] heldout_n: each worker's running mean direction and statistic,
 *   ps/drift.h; n_params floats per worker).
 * Derived from t on resume, not stored: the learning-rate schedule, the KL
 * rule's k = floor(t / kl_decay_every), the interval and damping milestones.
 * Not stored: jobs in flight (no daemon holds them after a restart; blocks
 * are handed out again), held gradients of the open round (the workers
 * push them again), random streams (the PS draws none after the
 * initialisation; the workers own their data position and random streams,
 * see docs/operations.md).
 *
 * File format (version PS_CKPT_VERSION; version 1, without the record
 * OWNR, is still read: its member ids are then bound to no key, as on a
 * fresh start; integers little-endian, floats
 * IEEE-754 binary32 little-endian, doubles binary64):
 *   header, 32 bytes:
 *     0  magic "KFACCKPT"        8 bytes
 *     8  format version          u32
 *    12  header length (32)      u32
 *    16  payload length          u64
 *    24  CRC-32 of the payload   u32 (zlib's crc32, polynomial 0xEDB88320)
 *    28  CRC-32 of bytes 0..27   u32
 *   payload: records, each u32 tag (four ASCII letters), u32 zero, u64
 *   length, then that many bytes. Every record of the format is required
 *   exactly once; an unknown tag is an error.
 * Files are DIR/ckpt-<step, 10 digits>.kfc, written atomically: a temporary
 * DIR/.ckpt-<step>.kfc.tmp is written, fsync'd, renamed, and the folder is
 * fsync'd; so a crash leaves either the old set of files or the new one.
 *
 * Errors: negative errno; every failure also writes a one-line reason that
 * names the file and what is wrong into err.
 * Threads: any, one call at a time per state. Everything is borrowed.
 */
#ifndef KFAC_PS_CKPT_H
#define KFAC_PS_CKPT_H

#include <stddef.h>
#include <stdint.h>

#include "common/kfac/kfac_opt.h"
#include "common/kfac/kfac_refresh.h"
#include "common/nn/nn.h"
#include "common/nn/sgd.h"
#include "ps/drift.h"
#include "ps/ident.h"
#include "ps/member.h"
#include "ps/owner.h"
#include "ps/sched.h"

#define PS_CKPT_MAGIC "KFACCKPT"
#define PS_CKPT_VERSION 4u     /* written; 2: the record OWNR (member ids bound to CURVE keys); 3: IDNT (identities)
                                  and HIST (the guards' histories); 4: DRFT (the reference-gradient check's
                                  histories) */
#define PS_CKPT_VERSION_MIN 1u /* the oldest read */
#define PS_CKPT_HEADER_LEN 32u

/* Counters carried across a restart so that steps.csv and the summary go on
 * counting (inverses_installed, stats_folded, ...). */
typedef enum {
    PS_CKPT_N_INSTALLED = 0,
    PS_CKPT_N_IGNORED_OLD,
    PS_CKPT_N_INV_FAILED,
    PS_CKPT_N_FOLDS,
    PS_CKPT_N_STALE_GRADS,
    PS_CKPT_N_GRADS_TOTAL,
    PS_CKPT_N_DROPPED,
    PS_CKPT_N_STEP_FAILURES,
    PS_CKPT_N_JOBS_SENT,
    PS_CKPT_N_REJECTED_GRADS,
    PS_CKPT_COUNTERS /* number of counters */
} ps_ckpt_counter_t;

/* The state a checkpoint saves and restores, as borrowed pointers into the
 * PS (or a test). Shapes: net (parameters n_params, state n_state) fixes
 * the sizes; kfac and sgd are NULL when the run does not use them; sched
 * has n_blocks entries (kfac->n_blocks) or is NULL; refresh has n_refresh
 * entries or is NULL (adaptive refresh only). */
typedef struct ps_ckpt_state {
    const char *model_text;   /* the model file's text: its CRC must match on resume */
    long t;                   /* parameter version */
    uint64_t steps_done;
    double wall_s;            /* seconds of training so far */
    int round_folded;         /* the statistics of round t were folded already */
    uint64_t next_job_id;
    uint64_t counters[PS_CKPT_COUNTERS];
    net_t *net;
    kfac_opt_t *kfac;
    sgd_t *sgd;
    float *sgd_polyak;        /* (n_params) SGD's Polyak average, or NULL (with sgd: stored empty) */
    long *sgd_polyak_count;   /* its count (NULL with sgd_polyak) */
    ps_sched_block_t *sched;
    kfac_refresh_t **refresh; /* (n_refresh) the adaptive plan's trackers, one per factor, or NULL */
    int n_refresh;
    int n_blocks;
    ps_norm_hist_t *norms;    /* recent gradient norms ([ps] grad_norm_max_ratio), or NULL (stored empty, not restored) */
    ps_owners_t *owners;      /* member ids bound to CURVE keys (ps/owner.h), or NULL (stored empty, not restored);
                               * a version-1 file restores it empty */
    ps_idents_t *idents;      /* what each member identity has done (ps/ident.h), or NULL (stored empty, not
                               * restored); a file before version 3 restores it empty */
    ps_norm_hist_t *clip_hists;  /* (n_clip_hists) each layer's clipped gradient norms, or NULL (stored empty) */
    int n_clip_hists;
    ps_norm_hist_t *trace_hists; /* (n_trace_hists) each factor's statistics traces, or NULL (stored empty) */
    int n_trace_hists;           /* a file that holds another number of either is refused; before version 3:
                                  * restored empty */
    ps_drift_t *drift;           /* the reference-gradient check's histories (ps/drift.h), or NULL (stored empty,
                                  * not restored); a file before version 4 restores it empty */
} ps_ckpt_state_t;

/* Encode st into a new buffer (*out, malloc'd, caller frees; *out_len
 * bytes): header and payload. Returns 0, -EINVAL (st inconsistent) or
 * -ENOMEM. */
int ps_ckpt_encode(const ps_ckpt_state_t *st, uint8_t **out, size_t *out_len, char *err, size_t err_len);

/* Check a whole file image (header, lengths, both CRCs, the version) and
 * restore it into st, whose objects must have the shapes of the run that
 * wrote it (same model text, optimizer, blocks, refresh policy). Either
 * everything is restored or nothing is touched: the image is checked
 * completely (shapes, lengths, finite values, valid inverses) before the
 * first write. origin names the file in messages. Returns 0, -EBADMSG
 * (corrupt: magic, CRC, truncation, bad record), -EPROTO (a format version
 * this build does not read), -EINVAL (another model or configuration) or
 * -ENOMEM. inv_now_s is the monotonic time (seconds) installs are dated
 * from (ages are stored, not times). */
int ps_ckpt_decode(ps_ckpt_state_t *st, const uint8_t *buf, size_t len, double inv_now_s, const char *origin,
                   char *err, size_t err_len);

/* Write buf atomically as DIR/ckpt-<step>.kfc (dir is created when
 * missing). path (may be NULL) receives the final path. Returns 0 or
 * -errno. */
int ps_ckpt_write_file(const char *dir, uint64_t step, const uint8_t *buf, size_t len, char *path,
                       size_t path_len, char *err, size_t err_len);

/* Read a whole file into a new buffer (*out, caller frees). Returns 0 or
 * -errno. */
int ps_ckpt_read_file(const char *path, uint8_t **out, size_t *out_len, char *err, size_t err_len);

/* mkdir -p; the folders it makes are private (0700) from the start: a
 * checkpoint holds the model and the optimizer's whole state. Returns 0,
 * -ENOTDIR when path is not a folder (a link to one is not taken), or
 * -errno. */
int ps_ckpt_mkdirs(const char *path);

/* The checkpoint files of dir, newest (largest step) first: up to cap
 * steps into steps[]. Returns their number (0 when dir is missing or has
 * none) or -errno. */
int ps_ckpt_list(const char *dir, uint64_t *steps, int cap);

/* Restore the newest valid checkpoint of dir into st: files are tried
 * newest first; each one that cannot be read or restored is reported with
 * log_warn (its path and what is wrong) and the next older one is tried.
 * path (may be NULL) receives the file used. Returns 1 when one was
 * restored, 0 when dir holds no checkpoint file (or does not exist), or a
 * negative errno with the reason in err when files exist but none is valid
 * (the state is then untouched). */
int ps_ckpt_restore_newest(const char *dir, ps_ckpt_state_t *st, double inv_now_s, char *path, size_t path_len,
                           char *err, size_t err_len);

/* The largest file ps_ckpt_read_file reads (16 GiB): more is refused
 * before anything is allocated. */
#define PS_CKPT_MAX_BYTES ((uint64_t)1 << 34)

/* "DIR/ckpt-0000000300.kfc" into buf; returns buf. */
const char *ps_ckpt_path(const char *dir, uint64_t step, char *buf, size_t len);

/* Delete all but the newest keep files of dir (keep >= 1), and the
 * temporaries of writers that died before renaming theirs. Returns the
 * number of checkpoint files deleted or -errno. */
int ps_ckpt_prune(const char *dir, int keep);

#endif
