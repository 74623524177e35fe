/* common/run/rundir.h — a run's output folder ([run] out_dir): the metrics
 * CSVs that kfac-ps and kfac-train write alike, and whole files beside them
 * (config.ini, model.txt, manifest.json, ...).
 *
 * Files:
 *   steps.csv  one row per applied step (RUNDIR_STEPS_CSV_HEADER):
 *     step,wall_s,train_loss,train_acc,step_size,inv_age_mean,inv_age_max,
 *     inv_age_ms_mean,stats_age_mean,inverses_installed,stats_folded,
 *     workers_present,wait_ms,curv_ms,update_ms,publish_ms,eval_busy,
 *     grad_age_mean,grad_age_max,damping,grad_weight_mean
 *   damping is the [kfac] damping in force for the step (the one new
 *   inversion jobs are cut with; 0 under sgd), grad_weight_mean the mean
 *   weight of the step's gradients per example ([ps] gradient_age_weight;
 *   1 without it).
 *   The last five split kfac-ps's step period (publish of version t to the
 *   end of the publish of t + 1) on its loop thread (kfac-train writes 0):
 *     wait_ms     from the end of the previous publish (the start, for the
 *                 first step) until the update begins: waiting for the
 *                 round's gradients (and for inverses, under a staleness
 *                 bound); includes curv_ms
 *     curv_ms     the part of wait_ms the loop spent folding statistics
 *                 and installing inverses (curvature work on the loop)
 *     update_ms   averaging the gradients and the update math
 *     publish_ms  encoding and sending Params of the new version to the
 *                 workers waiting for it, queueing an evaluation, the
 *                 progress line (the row is written right after)
 *     eval_busy   1 when an evaluation was queued or running on the
 *                 evaluation thread at the round's start or at its update
 *   eval.csv   one row per evaluation (RUNDIR_EVAL_CSV_HEADER):
 *     step,wall_s,test_loss,test_acc,polyak_loss,polyak_acc
 *   inverse_ages.csv  kind = kfac: one row per step, the age of every
 *     block's inverse in versions (-1: none yet), a column per block named
 *     LAYER.FACTOR (fc1.0 is fc1's A, fc1.1 its G):
 *     step,fc1.0,fc1.1,...
 * The meaning of every column is in docs/architecture.md ("Metrics"). Rows
 * are written whole and the files are line buffered, so a reader (or a
 * killed run) never sees half a row.
 *
 * A folder holds one run. A folder that holds a previous run (any of
 * RUNDIR_RUN_FILES) is refused unless the caller asks to overwrite it
 * (the operator's [run] force) or to append to it (a resumed run).
 *
 * Threads: one thread uses a rundir_t at a time (the PS's loop thread).
 */
#ifndef KFAC_RUN_RUNDIR_H
#define KFAC_RUN_RUNDIR_H

#include <stddef.h>
#include <stdint.h>

#include "common/kfac/kfac_opt.h"
#include "common/run/runcfg.h"

#define RUNDIR_STEPS_CSV_HEADER                                                                           \
    "step,wall_s,train_loss,train_acc,step_size,inv_age_mean,inv_age_max,inv_age_ms_mean,stats_age_mean," \
    "inverses_installed,stats_folded,workers_present,wait_ms,curv_ms,update_ms,publish_ms,eval_busy,grad_age_mean," \
    "grad_age_max,damping,grad_weight_mean"
#define RUNDIR_EVAL_CSV_HEADER "step,wall_s,test_loss,test_acc,polyak_loss,polyak_acc"

/* The files whose presence marks a folder as holding a run
 * (NULL-terminated). */
extern const char *const RUNDIR_RUN_FILES[];

typedef enum {
    RUNDIR_CREATE = 0, /* a new run: refused (-EEXIST) when the folder holds a previous run */
    RUNDIR_OVERWRITE,  /* a new run replacing the one there ([run] force = true) */
    RUNDIR_APPEND,     /* the same run going on: rows are added to the CSVs there
                        * (headers only where a file is new or empty) */
} rundir_mode_t;

typedef struct rundir_step_row {
    uint64_t step;              /* parameter version after the step (1 for the first) */
    double wall_s;              /* seconds since the run started */
    double train_loss;          /* mean over the step's examples */
    double train_acc;           /* fraction in [0, 1] */
    double step_size;           /* K-FAC: the step size eta applied; sgd: the learning rate */
    double inv_age_mean;        /* versions, over blocks holding an inverse */
    long inv_age_max;           /* -1: no inverse yet */
    double inv_age_ms_mean;     /* ms since install, over blocks holding an inverse */
    double stats_age_mean;      /* versions, t - factor_version over blocks with statistics */
    uint64_t inverses_installed;/* total so far */
    uint64_t stats_folded;      /* statistics batches folded so far */
    int workers;                /* gradients averaged in this step */
    double wait_ms;             /* kfac-ps: previous publish -> update start (includes curv_ms) */
    double curv_ms;             /* loop time folding statistics and installing inverses meanwhile */
    double update_ms;           /* averaging and update math */
    double publish_ms;          /* Params to the waiting clients, evaluation queueing, progress */
    int eval_busy;              /* an evaluation was queued or running during the round */
    double grad_age_mean;       /* versions the step's gradients lagged it ([ps] gradient_staleness; 0: none) */
    long grad_age_max;
    double damping;             /* kfac: the damping in force ([kfac] damping_rule; 0: sgd) */
    double grad_weight_mean;    /* sum of age weight * examples / examples ([ps] gradient_age_weight; 1: none) */
} rundir_step_row_t;

typedef struct rundir rundir_t;

/* 0 when out_dir holds no previous run (or does not exist); -EEXIST with
 * the operator's message in err ("out_dir X holds a previous run (steps.csv);
 * use --force ...") when it does. */
int rundir_check_free(const char *out_dir, char *err, size_t err_len);

/* Create out_dir (and its parents) and open both CSVs as mode says.
 * Returns 0 with *out set (caller-owned: rundir_free), or a negative errno
 * with the reason in err: -EEXIST (CREATE and a previous run is there;
 * the caller should exit with EX_CONFIG, 78), or the errno of a folder or
 * file that cannot be created. */
int rundir_open(const char *out_dir, rundir_mode_t mode, rundir_t **out, char *err, size_t err_len);

/* The folder (borrowed, valid until rundir_free). */
const char *rundir_path(const rundir_t *d);

/* Append a row. Returns 0 or -EIO (logged once per rundir). */
int rundir_step(rundir_t *d, const rundir_step_row_t *r);
int rundir_eval(rundir_t *d, uint64_t step, double wall_s, double loss, double acc, double polyak_loss,
                double polyak_acc);

/* Open inverse_ages.csv (as rundir_open's mode says) with a column per
 * block of k. Returns 0 or -EIO with the reason in err. */
int rundir_ages_begin(rundir_t *d, const kfac_opt_t *k, char *err, size_t err_len);

/* The row of step (the version after it) with every block's age at
 * version t: t - the factor version of its inverse (-1: none). No-op
 * before rundir_ages_begin. Returns 0 or -EIO (logged once). */
int rundir_ages(rundir_t *d, const kfac_opt_t *k, uint64_t step, long t);

/* Write n_bytes of data to out_dir/name through a temporary file and a
 * rename, so a reader sees the old file or the whole new one. Returns 0 or
 * -errno. */
int rundir_write_file(const rundir_t *d, const char *name, const void *data, size_t n_bytes);

/* The same for a NUL-terminated text. */
int rundir_write_text(const rundir_t *d, const char *name, const char *text);

/* The mode a new run asks for: RUNDIR_OVERWRITE with [run] force, else
 * RUNDIR_CREATE. */
rundir_mode_t rundir_mode_of(const runcfg_t *c);

/* A run's folder: rundir_open(c->out_dir, mode), then config.ini (the
 * effective configuration as role's --dump-config prints it, except that
 * [run] force is written false: a rerun from it refuses the folder it came
 * from) and model.txt (model_text, the model file as read). Same returns as rundir_open; a
 * failure to write either file is -EIO with the file named in err. */
int rundir_open_run(const runcfg_t *c, runcfg_role_t role, const char *model_text, rundir_mode_t mode,
                    rundir_t **out, char *err, size_t err_len);

/* Flush and close both files. NULLs *d_p; NULL is a no-op. */
void rundir_free(rundir_t **d_p);

/* mkdir -p. Returns 0 or -errno. */
int rundir_mkdirs(const char *path);

#endif
