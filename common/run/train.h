/* common/run/train.h — in-process training: one process computes gradients,
 * statistics and inverses in turn (the synchronous baseline, and the core
 * `make demo` fell back on before the daemons existed). Used by
 * tools/kfac-train, the K-FAC-vs-SGD test and the benchmarks.
 *
 * Both optimizers keep an exponentially decayed Polyak average of the
 * iterates (kfac_step_polyak: avg <- d avg + (1 - d) w after every step),
 * K-FAC inside its optimizer (kfac.polyak_decay), SGD here (polyak_decay).
 * Every evaluation measures the current parameters and the average, and
 * target_acc stops the run when either reaches it (the PS's rule).
 *
 * Schedule for optimizer "kfac": statistics on the training batch every
 * stats_every steps (true Fisher: labels sampled from the model with a second
 * backward pass; empirical: the data labels), all inverses every
 * inverse_every steps, preconditioned step every step.
 *
 * With o->out set, the run goes to that run folder as it goes: a steps.csv
 * row per step and an eval.csv row per evaluation (the columns kfac-ps
 * writes, common/run/rundir.h; workers_present is 1, inverse and statistics
 * ages are counted in steps the same way; wall_s is the training time
 * without evaluation, the clock of the progress lines and of
 * train_result_t.seconds), and at the end the weights
 * (params.npy, params_polyak.npy, manifest.json: common/run/export.h) with
 * the final evaluation on the whole test set.
 *
 * Ownership: the caller owns net, the data sets and o->out; train_run
 * borrows them.
 */
#ifndef KFAC_TRAIN_H
#define KFAC_TRAIN_H

#include <stdint.h>
#include <stdio.h>

#include "common/nn/data.h"
#include "common/kfac/kfac_opt.h"
#include "common/nn/nn.h"
#include "common/nn/sgd.h"
#include "common/run/rundir.h"

typedef enum { TRAIN_OPT_SGD = 0, TRAIN_OPT_KFAC } train_optimizer_t;

typedef struct train_opts {
    train_optimizer_t optimizer;
    int batch;
    long steps;              /* total steps (>= 1) */
    uint64_t seed;
    sgd_lr_sched_t lr;           /* sgd: the schedule; kfac: lr for fixed/kl_clip rules */
    double momentum, weight_decay;
    double polyak_decay;     /* sgd: Polyak average decay in [0, 1) (kfac: kfac.polyak_decay) */
    kfac_opts_t kfac;
    kfac_fisher_t fisher;
    int stats_every, inverse_every;
    long eval_every;         /* steps between evaluations (0: only at the end) */
    int eval_n;              /* test examples used per evaluation (0: all) */
    double target_acc;       /* stop when the test accuracy reaches it (0: never) */
    int augment;             /* CIFAR-style crop+flip */
    FILE *progress;          /* progress lines (NULL: quiet) */
    rundir_t *out;           /* run folder for the CSVs and the weights (NULL: none; borrowed) */
    const char *dataset;     /* data set name for the weights' manifest ("mnist", ...; NULL: unnamed) */
    const dataset_norm_t *norm; /* the normalization for the manifest when it is not the named set's (borrowed; NULL) */
} train_opts_t;

typedef struct train_result {
    long steps;              /* steps run */
    double seconds;          /* wall time of the training loop (without evaluation) */
    double eval_seconds;     /* wall time spent evaluating */
    double final_train_loss; /* mean loss over the last 50 steps */
    double test_loss, test_acc;         /* current parameters */
    double polyak_loss, polyak_acc;     /* Polyak average (= current before the first step) */
    long steps_to_target;    /* first evaluation step where current or Polyak is >= target_acc (-1: never) */
    double seconds_to_target;
    int target_by_polyak;    /* 1: only the Polyak average had reached the target there */
    long examples;           /* training examples processed */
} train_result_t;

void train_opts_default(train_opts_t *o);

/* Train net (parameters as given; call net_init_params first) on train and
 * evaluate on test. Returns 0, or a negative errno with a message in err. */
int train_run(net_t *net, const dataset_t *train, const dataset_t *test, const train_opts_t *o,
              train_result_t *res, char *err, size_t err_len);

#endif
