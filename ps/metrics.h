/* ps/metrics.h — the parameter server's metrics files and log helpers.
 *
 * Files in [run] out_dir (created with its parents if missing; existing
 * files are replaced, or appended to by a resumed run):
 *   steps.csv  one row per applied step:
 *     step,wall_s,train_loss,train_acc,step_size,inv_age_mean,inv_age_max,
 *     inv_age_ms_mean,stats_age_mean,inverses_installed,stats_folded,
 *     workers_present
 *   eval.csv   one row per evaluation:
 *     step,wall_s,test_loss,test_acc,polyak_loss,polyak_acc
 *   endpoint   the endpoint the PS actually bound, one line (so a script
 *              that binds port 0 can find it)
 * The meaning of every column is in docs/architecture.md ("Metrics"). Rows
 * are written whole and the files are line buffered, so a reader (or a
 * killed run) never sees half a row.
 *
 * Threads: the PS's loop thread.
 */
#ifndef KFAC_PS_METRICS_H
#define KFAC_PS_METRICS_H

#include <stddef.h>
#include <stdint.h>

#define PS_STEPS_CSV_HEADER                                                                               \
    "step,wall_s,train_loss,train_acc,step_size,inv_age_mean,inv_age_max,inv_age_ms_mean,stats_age_mean," \
    "inverses_installed,stats_folded,workers_present"
#define PS_EVAL_CSV_HEADER "step,wall_s,test_loss,test_acc,polyak_loss,polyak_acc"

typedef struct ps_step_row {
    uint64_t step;              /* parameter version after the step (1 for the first) */
    double wall_s;              /* seconds since the PS started */
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
} ps_step_row_t;

typedef struct ps_metrics ps_metrics_t;

/* Create out_dir (and parents) and open both CSVs with their headers;
 * append (a resumed run): existing files are appended to, never truncated.
 * Returns NULL with the reason in err. */
ps_metrics_t *ps_metrics_open(const char *out_dir, int append, char *err, size_t err_len);

/* Append a row. Returns 0 or -EIO (logged once). */
int ps_metrics_step(ps_metrics_t *m, const ps_step_row_t *r);
int ps_metrics_eval(ps_metrics_t *m, uint64_t step, double wall_s, double loss, double acc, double polyak_loss,
                    double polyak_acc);

/* Write text to out_dir/name (replacing it). Returns 0 or -errno. */
int ps_metrics_write_file(const ps_metrics_t *m, const char *name, const char *text);

/* Flush and close both files. NULLs *m_p; NULL is a no-op. */
void ps_metrics_free(ps_metrics_t **m_p);

/* mkdir -p. Returns 0 or -errno. */
int ps_metrics_mkdirs(const char *path);


/* "2m18s", "1h02m", "45s", "0.8s" into buf; returns buf. */
const char *ps_format_duration(double seconds, char *buf, size_t len);

#endif
