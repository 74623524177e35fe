/* common/run/runcfg.h — the run configuration: one INI file describes a whole
 * training run (model, data, optimizer, K-FAC, cluster) and every daemon and
 * tool reads it with its own view of the one option table below.
 *
 * Sections and who reads them:
 *   [run] [model] [data] [optimizer] [kfac]   everyone (the PS sends its own
 *                                             values of these to clients in
 *                                             Welcome, so the PS is the single
 *                                             source of truth)
 *   [cluster]                                 everyone (addresses, role counts)
 *   [ps] [worker] [statsd] [invertd]          the daemon of that name
 *   [security]                                every daemon (not kfac-train); never
 *                                             sent in Welcome
 * A daemon skips the other daemons' sections of a shared file; it rejects
 * unknown keys in its own (see common/base/config.h).
 *
 * Ownership: string fields are malloc'd and owned by the struct; release
 * them with runcfg_release().
 */
#ifndef KFAC_RUNCFG_H
#define KFAC_RUNCFG_H

#include <stdbool.h>
#include <stdint.h>
#include <stdio.h>

#include "common/backend/backend.h"
#include "common/base/config.h"
#include "common/kfac/kfac_damping.h"
#include "common/kfac/kfac_opt.h"
#include "common/kfac/kfac_step.h"
#include "common/kfac/kfac_refresh.h"
#include "common/kfac/kfac_schedule.h"
#include "common/nn/data.h"
#include "common/nn/nn.h"
#include "common/nn/sgd.h"

/* The settings with named values, stored as these enums (the option table's
 * names, in order: the table writes each as an int). */
typedef enum { RUNCFG_OPTIMIZER_KFAC = 0, RUNCFG_OPTIMIZER_SGD } runcfg_optimizer_t;
typedef enum {
    RUNCFG_STATS_ASYNC = 0, /* statistics from kfac-statsd */
    RUNCFG_STATS_SYNC,      /* the workers send statistics with their gradients */
} runcfg_stats_mode_t;
typedef enum {
    RUNCFG_PRIORITY_IDLE = 0, /* SCHED_IDLE, or nice 19 where refused */
    RUNCFG_PRIORITY_NORMAL,   /* as started */
    RUNCFG_PRIORITY_LOW,      /* nice 10: a bounded share that progresses on a busy host */
    RUNCFG_PRIORITY_YIELD,    /* curvature daemons: SCHED_IDLE, lifted to nice 10 while starved (common/net/daemon.h) */
} runcfg_priority_t;
typedef enum {
    RUNCFG_AGGREGATE_MEAN = 0,   /* the example-weighted mean of the round's gradients */
    RUNCFG_AGGREGATE_TRIMMED,    /* coordinate-wise: drop aggregate_trim lowest and highest, mean of the rest */
    RUNCFG_AGGREGATE_MEDIAN,     /* coordinate-wise median */
} runcfg_aggregate_t;
typedef enum {
    RUNCFG_REFRESH_CONTINUOUS = 0, /* every block as soon as an inverse daemon is free */
    RUNCFG_REFRESH_EVERY,          /* all blocks every inverse_every steps */
    RUNCFG_REFRESH_ADAPTIVE,       /* SP-NGD Algorithm 2 per block */
} runcfg_refresh_t;
typedef enum {
    RUNCFG_DAMPING_FIXED = 0,      /* [kfac] damping and its milestones */
    RUNCFG_DAMPING_ADAPTIVE,       /* ... scaled by the Levenberg-Marquardt rule (common/kfac/kfac_damping.h) */
} runcfg_damping_rule_t;
typedef enum {
    RUNCFG_DATASET_MNIST = 0,
    RUNCFG_DATASET_FASHION_MNIST,
    RUNCFG_DATASET_CIFAR10,
    RUNCFG_DATASET_IDX, /* the user's IDX files: [data] train_images ... test_labels */
    RUNCFG_DATASET_NPY, /* the user's NumPy .npy files: the same keys */
} runcfg_dataset_t;

typedef enum { RUNCFG_ROLE_PS = 0, RUNCFG_ROLE_WORKER, RUNCFG_ROLE_STATSD, RUNCFG_ROLE_INVERTD,
               RUNCFG_ROLE_TRAIN, RUNCFG_ROLE_COUNT } runcfg_role_t;

/* What a daemon's own section says about the process itself, one record
 * per role (cfg->daemon[role]: [ps], [worker], [statsd], [invertd]), so
 * that code shared by the daemons reads its role's record instead of
 * choosing among parallel fields. A key a section does not have keeps the
 * record's value from runcfg_init (id 0, threads 1, cpus "", device auto
 * for the worker and the stats worker and cpu for kfac-invertd, priority
 * normal for kfac-ps and the worker). */
typedef struct runcfg_daemon {
    int id;                      /* [worker|statsd|invertd] id: the member id asked for (0: any) */
    int threads;                 /* OpenBLAS threads */
    char *cpus;                  /* CPU list to pin to ("": no pinning) */
    backend_kind_t device;       /* where the math runs ([worker|statsd] device) */
    runcfg_priority_t priority;  /* of the compute thread ([statsd|invertd] priority) */
} runcfg_daemon_t;

/* The largest [statsd] batch: also what kfac-ps accepts as a statistics
 * push's n_examples (it does not know the statistics workers' own batch). */
#define RUNCFG_STATSD_BATCH_MAX 65536

typedef struct runcfg {
    /* [run] */
    char *name;              /* run name, used in logs and file names */
    uint64_t seed;
    uint64_t steps;           /* parameter updates to run */
    double target_acc;       /* stop early at this test accuracy (0: never) */
    uint64_t eval_every;      /* steps between evaluations */
    int eval_n;              /* test examples per evaluation (0: all) */
    char *out_dir;           /* where metrics CSVs and logs go ("": a new folder, common/run/runpick.h) */
    char *log_level;
    /* [model] */
    char *model;             /* model file */
    double doubly_min_in;    /* fc layers on a feature map wider than this become doubly-factored */
    nn_conv_engine_t conv_engine; /* CPU engine of the conv layers (net_set_conv_engine) */
    /* [data] */
    runcfg_dataset_t dataset; /* mnist | fashion-mnist | cifar10 | idx | npy */
    char *data_dir;
    int batch;               /* per gradient worker */
    bool augment;
    int train_n;             /* use the first train_n training examples (0: all) */
    char *train_images;      /* idx | npy: the four files (relative: under data_dir) */
    char *train_labels;
    char *test_images;
    char *test_labels;
    char *data_mean;         /* idx | npy: "m" or "m0, m1, m2" ("": computed, see runcfg_data_prepare) */
    char *data_std;
    /* [optimizer] */
    runcfg_optimizer_t optimizer;
    double lr;
    sgd_lr_schedule_t lr_schedule;
    double lr_gamma;
    uint64_t lr_every;
    uint64_t lr_warmup;
    double lr_floor;
    double momentum;
    double weight_decay;
    double polyak_decay;     /* Polyak average of the iterates, sgd and kfac (-1: not set); read runcfg_polyak_decay() */
    /* [kfac] */
    kfac_inv_method_t method;
    double damping;
    double stat_decay;
    kfac_step_rule_t step_rule;
    double eta_max, kl_c0, kl_zeta;
    uint64_t kl_decay_every;
    double kl_clip;
    kfac_wd_mode_t wd_mode;
    double kfac_polyak_decay; /* [kfac] polyak_decay, the old name of [optimizer] polyak_decay (-1: not set) */
    kfac_fisher_t fisher;
    runcfg_stats_mode_t stats_mode;
    int stats_every;         /* sync / in-process: statistics every N steps */
    int inverse_every;       /* in-process and refresh=every: inverses every N steps */
    runcfg_refresh_t refresh;
    double refresh_alpha;
    int max_inverse_staleness; /* -1: unbounded; k: a step waits until every inverse is <= k versions old */
    kfac_identity_mode_t identity; /* layers without inverses: plain gradient or damped identity */
    char *interval_milestones; /* steps at which stats_every and inverse_every are scaled (Pauloski sec. V-C) */
    double interval_factor;  /* the scale applied at each interval milestone */
    char *damping_milestones; /* steps at which the damping is scaled */
    double damping_factor;   /* the scale applied at each damping milestone */
    runcfg_damping_rule_t damping_rule; /* fixed | adaptive (Levenberg-Marquardt, kfac-ps only) */
    double damping_min, damping_max;    /* adaptive: bounds of lambda */
    int damping_interval;    /* adaptive: T, steps between decisions (the window holds 2T versions) */
    double damping_decay;    /* adaptive: lambda scaled by damping_decay^T or its inverse at a decision */
    double inverse_age_damping; /* kappa: a step's KL bound divided by 1 + kappa * mean inverse age (0: off) */
    /* [cluster] */
    char *ps;                /* endpoint the clients connect to */
    int workers;             /* gradient workers in a synchronous round */
    int statsd;              /* for the launcher */
    int invertd;             /* for the launcher */
    uint64_t admit_wait_s;   /* a client whose CURVE key is refused tries again this long (0: exits at once) */
    /* [ps] */
    char *bind;              /* endpoint the PS binds */
    uint64_t worker_timeout_ms;
    uint64_t heartbeat_ms;
    uint64_t job_timeout_ms;
    uint64_t progress_every;  /* steps between progress lines */
    int ps_update_threads;   /* preconditioning threads (0: every CPU available) */
    runcfg_priority_t ps_eval_priority; /* of the evaluation thread(s) */
    int ps_eval_threads;     /* threads of each evaluation */
    double grad_norm_max_ratio;  /* reject gradients this far from the median norm (0: off) */
    double stats_trace_max_ratio; /* reject statistics whose factor traces are this far above their median (0: off) */
    double grad_clip_ratio;      /* clip a layer's gradient to this many times its median norm (0: off) */
    int heldout_n;               /* examples of kfac-ps's own reference gradient (0: none) */
    int heldout_every;           /* versions between two references */
    double heldout_z;            /* refuse a worker whose own direction, unshared by the reference, is this significant */
    runcfg_aggregate_t aggregate; /* how the round's gradients are combined */
    int aggregate_trim;          /* trimmed_mean: gradients dropped at each end of every coordinate */
    int gradient_staleness;      /* versions a gradient may lag the round it goes into (0: synchronous) */
    kfac_age_weight_t gradient_age_weight; /* a gradient's weight in the mean by its age (none: 1) */
    int quorum;                  /* gradients after which a round steps (0: every member's) */
    uint64_t worker_delay_ms;    /* kfac-worker: injected delay per gradient (staleness studies) */
    uint64_t stall_timeout_ms;   /* drop a member that has not pushed this long into a round (0: never) */
    double stall_factor;         /* ... or after this many median push times, once known (0: off) */
    uint64_t stall_min_ms;       /* ... but not sooner than this */
    uint64_t stall_max_drops;    /* drops after which a worker is no member again (0: never) */
    uint64_t handshake_timeout_ms; /* forget a client that has not asked for work this long after Hello */
    /* [checkpoint] (kfac-ps) */
    char *ckpt_dir;          /* "": out_dir/checkpoints */
    uint64_t ckpt_every;     /* steps between checkpoints (0: none) */
    int ckpt_keep;           /* files kept */
    bool ckpt_resume;        /* start from the newest valid checkpoint */
    /* [security] (paths of CURVE key files; "": not set; docs/security.md) */
    char *server_secret_key; /* kfac-ps */
    char *server_public_key; /* kfac-ps: its own (optional); clients: the one to trust */
    char *client_secret_key; /* clients */
    char *client_public_key; /* clients (optional) */
    char *allow_workers;     /* kfac-ps: allowlists, a file of keys or a folder of *.pub */
    char *allow_statsd;
    char *allow_invertd;
    bool insecure;           /* kfac-ps: may bind beyond loopback without keys */
    int members_per_key;     /* kfac-ps, CURVE: clients one key may hold at once (0: any) */
    /* each daemon's id, threads, CPUs, device and priority ([ps] threads
     * and cpus, [worker] id, threads, device, cpus, ...) */
    runcfg_daemon_t daemon[RUNCFG_ROLE_COUNT];
    /* [statsd] */
    int statsd_batch;        /* 0: the data batch; at most RUNCFG_STATSD_BATCH_MAX */
    /* [invertd] */
    uint64_t invertd_delay_ms;  /* injected delay per job (staleness studies) */
    int invertd_max_n;
    /* the run's output and live view */
    bool force;              /* [run] force: a new run may replace the one in out_dir */
    char *ps_metrics;        /* [ps] metrics: HOST:PORT of the Prometheus endpoint ("": off) */
    double curvature_warn_s; /* [ps] curvature_warn_s: warn when kfac has had no inverse / statistics this long */
} runcfg_t;

/* The option spec a role uses (static, built on first call; not thread-safe
 * on the first call). */
const config_spec_t *runcfg_spec(runcfg_role_t role);

/* A daemon's own checks across options (kfac-ps: ps_config_check): 0, or
 * a negative errno with the message in err. */
typedef int (*runcfg_check_fn)(const runcfg_t *c, char *err, size_t err_len);

/* An empty configuration: zeros, and the daemon records' values that no
 * key sets (runcfg_daemon_t). runcfg_load starts from it; so must any
 * code that fills a runcfg_t with config_defaults/config_parse_text. */
void runcfg_init(runcfg_t *c);

/* config_load() with the role's spec, then runcfg_validate() and check
 * (NULL: none), --dump-config included: the configuration is printed only
 * when every check a start would make passes, so --dump-config (and
 * kfac-launch --check) rejects what the daemon would. Returns 0,
 * CONFIG_HELP, CONFIG_DUMP or a negative errno with the message in err. */
int runcfg_load_checked(runcfg_t *c, runcfg_role_t role, int argc, char **argv, runcfg_check_fn check, char *err,
                        size_t err_len);

/* runcfg_load_checked() without a check of the daemon's own. */
int runcfg_load(runcfg_t *c, runcfg_role_t role, int argc, char **argv, char *err, size_t err_len);

/* Checks across options (e.g. staleness bound with sgd; [run] log_level
 * one of the levels). 0 or -EINVAL. */
int runcfg_validate(const runcfg_t *c, char *err, size_t err_len);

/* The shared sections ([run] [model] [data] [optimizer] [kfac] [cluster]) as
 * INI text for a Welcome message (malloc'd, caller frees). */
char *runcfg_shared_text(const runcfg_t *c);

/* Fill K-FAC optimizer options from the configuration. */
void runcfg_kfac_opts(const runcfg_t *c, kfac_opts_t *o);

/* The K-FAC interval and damping schedule (Pauloski et al. sec. V-C) from
 * [kfac] stats_every, inverse_every, damping, interval_milestones,
 * interval_factor, damping_milestones and damping_factor. Returns 0, or
 * -EINVAL with a message in err (a milestone list that is not increasing
 * positive step numbers separated by commas, more than KFAC_SCHEDULE_MAX
 * of them). */
int runcfg_kfac_schedule(const runcfg_t *c, kfac_schedule_t *s, char *err, size_t err_len);

/* The CPU list of a role's own section ([ps] cpus, [worker] cpus, ...;
 * borrowed; "" when unset or for kfac-train) and the name of the setting
 * ("[invertd] cpus"), for affinity_apply(). */
const char *runcfg_cpus(const runcfg_t *c, runcfg_role_t role, const char **what);

#define RUNCFG_POLYAK_DECAY_DEFAULT 0.99

/* The decay of the Polyak average of the iterates, for sgd and kfac alike:
 * [optimizer] polyak_decay when set (>= 0), else [kfac] polyak_decay (its
 * old name) when set, else RUNCFG_POLYAK_DECAY_DEFAULT. In [0, 1). */
double runcfg_polyak_decay(const runcfg_t *c);

/* The SGD learning-rate schedule from the configuration. */
void runcfg_lr_sched(const runcfg_t *c, sgd_lr_sched_t *s);

/* "mnist", "fashion-mnist", "cifar10", "idx" or "npy" for c->dataset. */
const char *runcfg_dataset_name(const runcfg_t *c);

/* [data] as a data source (common/nn/data.h): the set, [data] dir, the four
 * file keys and [data] mean / std when set; no model expectations. Returns
 * 0, or -ENAMETOOLONG / -EINVAL (a mean or std that is not a list of 1 to 3
 * numbers; runcfg_validate reports those first) with the message in err. */
int runcfg_data_source(const runcfg_t *c, dataset_source_t *src, char *err, size_t err_len);
/* (It cannot fail for a configuration that passed runcfg_validate.) */

/* Load one split (train 1, test 0) of src checked against net (borrowed:
 * its input C x H x W and classes; NULL: no checks), naming model_name in
 * messages. dataset_source_load's return codes: -ENOENT, -EINVAL (exit 78
 * through config_exit_status), -ENOMEM. */
int runcfg_data_load_source(const dataset_source_t *src, const net_t *net, const char *model_name, int train,
                            dataset_t **out, char *err, size_t err_len);

/* runcfg_data_source, then runcfg_data_load_source with [model] file as
 * the model's name. [data] train_n is not applied. */
int runcfg_data_load(const runcfg_t *c, const net_t *net, int train, dataset_t **out, char *err, size_t err_len);

/* For [data] set = idx or npy without [data] mean and std: compute them
 * once from the training images (dataset_source_norm; flat (N, C*H*W)
 * arrays are read with the input shape of [model] file), store them in
 * c->data_mean / data_std as text that reads back to the same floats, and
 * log them. kfac-ps calls it before it builds the Welcome, so every client
 * normalizes with the PS's constants; kfac-train before it loads the
 * splits. Returns 0 (also when there is nothing to do) or the loader's
 * negative errno with the message in err. */
int runcfg_data_prepare(runcfg_t *c, char *err, size_t err_len);

void runcfg_release(runcfg_t *c);

#endif
