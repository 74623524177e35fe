/* common/run/runcfg.c — see runcfg.h. The one option table of a run. */
#include "common/run/runcfg.h"

#include <errno.h>
#include <limits.h>
#include <math.h>
#include <stddef.h>
#include <stdlib.h>
#include <string.h>

#include "common/base/affinity.h"
#include "common/base/log.h"

/* The option table stores an OPT_ENUM through an int *: every enum field
 * must be int-sized, and the names below list its values in order. */
_Static_assert(sizeof(runcfg_optimizer_t) == sizeof(int) && sizeof(runcfg_stats_mode_t) == sizeof(int) &&
                   sizeof(runcfg_refresh_t) == sizeof(int) && sizeof(runcfg_dataset_t) == sizeof(int) &&
                   sizeof(sgd_lr_schedule_t) == sizeof(int) && sizeof(kfac_inv_method_t) == sizeof(int) &&
                   sizeof(kfac_step_rule_t) == sizeof(int) && sizeof(kfac_wd_mode_t) == sizeof(int) &&
                   sizeof(kfac_fisher_t) == sizeof(int) && sizeof(kfac_identity_mode_t) == sizeof(int) &&
                   sizeof(backend_kind_t) == sizeof(int) && sizeof(nn_conv_engine_t) == sizeof(int) &&
                   sizeof(runcfg_damping_rule_t) == sizeof(int) && sizeof(kfac_age_weight_t) == sizeof(int),
               "runcfg enum fields are stored as int by the option table");
static const char *const s_optimizers[] = {"kfac", "sgd", NULL};
static const char *const s_schedules[] = {"constant", "step", "cosine", NULL};
static const char *const s_methods[] = {"cholesky", "eigen", NULL};
static const char *const s_rules[] = {"kl", "kl_clip", "fixed", NULL};
static const char *const s_wd_modes[] = {"gradient", "damping", "decoupled", NULL};
static const char *const s_fishers[] = {"true", "empirical", NULL};
static const char *const s_stats_modes[] = {"async", "sync", NULL};
static const char *const s_priorities[] = {"idle", "normal", "low", NULL};
static const char *const s_curv_priorities[] = {"idle", "normal", "low", "yield", NULL};
static const char *const s_aggregate[] = {"mean", "trimmed_mean", "median", NULL};
static const char *const s_refresh[] = {"continuous", "every", "adaptive", NULL};
static const char *const s_identity[] = {"sgd", "damped", NULL};
static const char *const s_damping_rules[] = {"fixed", "adaptive", NULL};
static const char *const s_age_weights[] = {"none", "inverse", NULL};
static const char *const s_devices[] = {"auto", "cpu", "cuda", NULL};
static const char *const s_conv_engines[] = {"blas", "onednn", "auto", NULL}; /* nn_conv_engine_t's order */
static const char *const s_datasets[] = {"mnist", "fashion-mnist", "cifar10", "idx", "npy", NULL};

#define O(sec, key, type, field, def, lo, hi, help) CONFIG_OPT(sec, key, type, runcfg_t, field, def, lo, hi, help)
#define E(sec, key, field, def, names, help) CONFIG_ENUM(sec, key, runcfg_t, field, def, names, help)

static const config_option_t s_table[] = {
    O("run", "name", OPT_STRING, name, "kfac", 1, 64, "run name, used in logs and file names"),
    O("run", "seed", OPT_UINT64, seed, "1", 0, 0, "seed of every random choice (init, shuffling, sampled labels)"),
    O("run", "steps", OPT_UINT64, steps, "2000", 1, 1e9, "parameter updates to run"),
    O("run", "target_acc", OPT_DOUBLE, target_acc, "0", 0, 1, "stop once the test accuracy reaches this (0: run all steps)"),
    O("run", "eval_every", OPT_UINT64, eval_every, "100", 1, 1e9, "steps between evaluations on the test set"),
    O("run", "eval_n", OPT_INT, eval_n, "0", 0, INT_MAX, "test examples per evaluation (0: the whole test set)"),
    O("run", "out_dir", OPT_STRING, out_dir, "", 0, 4096,
      "folder of the run: steps.csv, eval.csv, config.ini, model.txt, the weights (empty: a new folder "
      "runs/YYYYMMDD-HHMMSS, UTC, and runs/latest a link to it; with --resume, the folder runs/latest names; "
      "docs/operations.md)"),
    O("run", "log_level", OPT_STRING, log_level, "info", 1, 8, "error, warn, info or debug"),
    O("model", "file", OPT_STRING, model, "models/mnist-cnn.model", 1, 4096, "model description file (see models/README.md)"),
    O("model", "doubly_min_in", OPT_DOUBLE, doubly_min_in, "1e30", 1, INFINITY,
      "fc layers with kfac=auto on a feature map wider than this use the doubly-factored approximation"),
    E("model", "conv_engine", conv_engine, "auto", s_conv_engines,
      "CPU engine of the conv layers: auto (oneDNN for the layer shapes it was measured faster on, im2col + "
      "OpenBLAS for the others and wherever oneDNN cannot run, e.g. under MemoryDenyWriteExecute), onednn (every "
      "conv layer; fails where oneDNN cannot run) or blas"),
    E("data", "set", dataset, "mnist", s_datasets,
      "data set: a built-in one under [data] dir, or the user's idx (IDX) or npy (NumPy) files named below"),
    O("data", "dir", OPT_STRING, data_dir, "data", 1, DATASET_PATH_MAX - 1,
      "data folder (filled by `make data`); relative [data] file paths are under it"),
    O("data", "batch", OPT_INT, batch, "128", 1, 65536, "mini-batch size of each gradient worker"),
    O("data", "augment", OPT_BOOL, augment, "false", 0, 0, "random crop (pad 4) and horizontal flip"),
    O("data", "train_n", OPT_INT, train_n, "0", 0, INT_MAX, "use only the first train_n training examples (0: all)"),
    O("data", "train_images", OPT_STRING, train_images, "", 0, DATASET_PATH_MAX - 1,
      "set = idx | npy: training images (relative paths are under [data] dir; plain or gzip)"),
    O("data", "train_labels", OPT_STRING, train_labels, "", 0, DATASET_PATH_MAX - 1, "set = idx | npy: training labels"),
    O("data", "test_images", OPT_STRING, test_images, "", 0, DATASET_PATH_MAX - 1, "set = idx | npy: test images"),
    O("data", "test_labels", OPT_STRING, test_labels, "", 0, DATASET_PATH_MAX - 1, "set = idx | npy: test labels"),
    O("data", "mean", OPT_STRING, data_mean, "", 0, 256,
      "set = idx | npy: mean subtracted per channel, one value or one per channel (\"0.49, 0.48, 0.45\"), on the "
      "scale of pixel/255 for uint8 images, of the values for float32; empty: computed from the training images"),
    O("data", "std", OPT_STRING, data_std, "", 0, 256, "set = idx | npy: standard deviation divided by, like mean"),
    E("optimizer", "kind", optimizer, "kfac", s_optimizers, "kfac or sgd"),
    O("optimizer", "lr", OPT_DOUBLE, lr, "0.05", 0, 100, "learning rate (sgd; kfac with step_rule fixed or kl_clip)"),
    E("optimizer", "lr_schedule", lr_schedule, "constant", s_schedules, "sgd learning-rate schedule"),
    O("optimizer", "lr_gamma", OPT_DOUBLE, lr_gamma, "0.1", 0, 1, "step schedule: factor applied every lr_every steps"),
    O("optimizer", "lr_every", OPT_UINT64, lr_every, "1000", 1, 1e9, "step schedule: steps between decays"),
    O("optimizer", "lr_warmup", OPT_UINT64, lr_warmup, "0", 0, 1e9, "linear warm-up steps"),
    O("optimizer", "lr_floor", OPT_DOUBLE, lr_floor, "0", 0, 100, "cosine schedule: final learning rate"),
    O("optimizer", "momentum", OPT_DOUBLE, momentum, "0.9", 0, 0.999, "heavy-ball momentum"),
    O("optimizer", "weight_decay", OPT_DOUBLE, weight_decay, "0", 0, 1, "L2 weight decay on fc/conv weights"),
    O("optimizer", "polyak_decay", OPT_DOUBLE, polyak_decay, "-1", -1, 0.99999,
      "sgd and kfac: decay d of the Polyak average of the iterates, avg <- d avg + (1-d) w after every step, evaluated "
      "beside them (target_acc stops the run when either reaches it); -1: [kfac] polyak_decay if set, else 0.99"),
    E("kfac", "method", method, "cholesky", s_methods, "inverses: cholesky (factored Tikhonov) or eigen (Pauloski eigen damping)"),
    O("kfac", "damping", OPT_DOUBLE, damping, "0.01", 1e-12, 1e6, "damping lambda"),
    O("kfac", "stat_decay", OPT_DOUBLE, stat_decay, "0.95", 0, 0.9999, "running average F <- d F + (1-d) F_new"),
    E("kfac", "step_rule", step_rule, "kl", s_rules, "step size: kl (Ba sec. 5), kl_clip (Pauloski Eq. 18) or fixed (lr)"),
    O("kfac", "eta_max", OPT_DOUBLE, eta_max, "1", 1e-12, 1e6, "kl rule: largest step size"),
    O("kfac", "kl_c0", OPT_DOUBLE, kl_c0, "0.001", 1e-12, 1e6, "kl rule: c_0, the bound on the squared Fisher norm of a step"),
    O("kfac", "kl_zeta", OPT_DOUBLE, kl_zeta, "1", 1e-6, 1, "kl rule: c_k = c_0 zeta^k"),
    O("kfac", "kl_decay_every", OPT_UINT64, kl_decay_every, "0", 0, 1e9, "kl rule: steps per k (0: no decay)"),
    O("kfac", "kl_clip", OPT_DOUBLE, kl_clip, "0.001", 1e-12, 1e6, "kl_clip rule: the bound"),
    E("kfac", "weight_decay_mode", wd_mode, "gradient", s_wd_modes, "weight decay: gradient, folded into damping, or decoupled"),
    O("kfac", "polyak_decay", OPT_DOUBLE, kfac_polyak_decay, "-1", -1, 0.99999,
      "old name of [optimizer] polyak_decay, used when that one is not set (-1: not set)"),
    E("kfac", "fisher", fisher, "true", s_fishers, "true Fisher (sampled labels) or empirical (data labels)"),
    E("kfac", "stats", stats_mode, "async", s_stats_modes, "async: statistics from kfac-statsd; sync: workers send them with gradients"),
    O("kfac", "stats_every", OPT_INT, stats_every, "1", 1, 1000000, "sync stats and in-process: statistics every N steps"),
    O("kfac", "inverse_every", OPT_INT, inverse_every, "20", 1, 1000000, "in-process and refresh=every: inverses every N steps"),
    E("kfac", "refresh", refresh, "continuous", s_refresh,
      "inverse refresh: continuous (async, stalest first), every (all blocks every inverse_every steps), adaptive (SP-NGD Alg. 2)"),
    O("kfac", "refresh_alpha", OPT_DOUBLE, refresh_alpha, "0.1", 0, 10, "adaptive refresh: similarity threshold alpha"),
    O("kfac", "max_inverse_staleness", OPT_INT, max_inverse_staleness, "-1", -1, 1000000,
      "a step waits until every inverse is at most this many versions old (-1: never wait; 0: synchronous)"),
    E("kfac", "identity", identity, "sgd", s_identity, "layers without inverses yet: plain gradient (sgd) or damped identity"),
    O("kfac", "interval_milestones", OPT_STRING, interval_milestones, "", 0, 256,
      "steps at which stats_every and inverse_every are multiplied by interval_factor (comma-separated, increasing; Pauloski et al. sec. V-C)"),
    O("kfac", "interval_factor", OPT_DOUBLE, interval_factor, "1", 1e-6, 1e6, "factor applied to both intervals at each interval milestone"),
    O("kfac", "damping_milestones", OPT_STRING, damping_milestones, "", 0, 256,
      "steps at which the damping is multiplied by damping_factor (comma-separated, increasing)"),
    O("kfac", "damping_factor", OPT_DOUBLE, damping_factor, "1", 1e-6, 1e6, "factor applied to the damping at each damping milestone"),
    /* adaptive damping and staleness-aware steps (common/kfac/kfac_damping.h; docs/experiments.md,
     * "Adaptive damping and staleness-aware steps") */
    E("kfac", "damping_rule", damping_rule, "fixed", s_damping_rules,
      "fixed (damping and its milestones) or adaptive (kfac-ps: Levenberg-Marquardt, Martens & Grosse sec. 6.5: "
      "every damping_interval steps rho = observed / predicted loss change, lambda times damping_decay^T when rho > "
      "3/4, divided by it when rho < 1/4, within damping_min and damping_max)"),
    O("kfac", "damping_min", OPT_DOUBLE, damping_min, "1e-6", 1e-12, 1e6, "damping_rule = adaptive: smallest damping"),
    O("kfac", "damping_max", OPT_DOUBLE, damping_max, "100", 1e-12, 1e6, "damping_rule = adaptive: largest damping"),
    O("kfac", "damping_interval", OPT_INT, damping_interval, "10", 1, KFAC_LM_MAX_INTERVAL,
      "damping_rule = adaptive: T, steps between decisions; rho compares the mean training loss of the last T "
      "versions with that of the T before"),
    O("kfac", "damping_decay", OPT_DOUBLE, damping_decay, "0.95", 0.01, 0.9999,
      "damping_rule = adaptive: per-step factor; a decision scales the damping by damping_decay^T (19/20 in the paper)"),
    O("kfac", "inverse_age_damping", OPT_DOUBLE, inverse_age_damping, "0", 0, 1e6,
      "kfac-ps, kl and kl_clip rules: kappa; a step whose inverses are a versions old (mean over blocks) divides the "
      "KL bound by 1 + kappa a, as if the damping had grown by kappa a lambda (0: off)"),
    O("cluster", "ps", OPT_STRING, ps, "tcp://127.0.0.1:5555", 1, 256, "PS endpoint the clients connect to"),
    O("cluster", "workers", OPT_INT, workers, "2", 1, 4096, "gradient workers in each synchronous round"),
    O("cluster", "statsd", OPT_INT, statsd, "1", 0, 4096, "stats workers the launcher starts"),
    O("cluster", "invertd", OPT_INT, invertd, "2", 0, 4096, "inverse daemons the launcher starts"),
    O("cluster", "admit_wait_s", OPT_UINT64, admit_wait_s, "300", 0, 604800,
      "clients: when kfac-ps refuses this daemon's CURVE key, connect again (after 1 s, 2 s, 4 s, ... at most 30 s "
      "apart) for this long, waiting for the key to be listed, then exit 78 (0: exit 78 at once)"),
    O("ps", "bind", OPT_STRING, bind, "tcp://127.0.0.1:5555", 1, 256, "endpoint the PS binds (ROUTER)"),
    O("ps", "worker_timeout_ms", OPT_UINT64, worker_timeout_ms, "10000", 10, 1e9, "a silent gradient worker leaves the round after this"),
    O("ps", "heartbeat_ms", OPT_UINT64, heartbeat_ms, "1000", 10, 1e9, "heartbeat interval"),
    O("ps", "job_timeout_ms", OPT_UINT64, job_timeout_ms, "30000", 10, 1e9, "an inversion job is handed out again after this"),
    O("ps", "progress_every", OPT_UINT64, progress_every, "50", 1, 1e9, "steps between progress lines"),
    O("ps", "threads", OPT_INT, daemon[RUNCFG_ROLE_PS].threads, "1", 1, 256, "OpenBLAS threads of the PS"),
    O("ps", "update_threads", OPT_INT, ps_update_threads, "0", 0, 256,
      "threads of the update (K-FAC or SGD): its large products and its passes over the parameters split over "
      "them (0: every CPU the PS may run on; 1: the loop thread alone)"),
    O("ps", "cpus", OPT_STRING, daemon[RUNCFG_ROLE_PS].cpus, "", 0, 256, "CPU list to pin the PS to, e.g. 0 or 0-1 (empty: no pinning)"),
    /* [security]: CURVE keys (docs/security.md). Every daemon reads the whole
     * section (so a typo is an error everywhere) and uses its own keys; it is
     * never sent in Welcome. Values are paths of key files (tools/kfac-keygen). */
    O("security", "server_secret_key", OPT_STRING, server_secret_key, "", 0, 4096,
      "kfac-ps: file with its CURVE secret key (mode 0600); set: every client must present a listed key"),
    O("security", "server_public_key", OPT_STRING, server_public_key, "", 0, 4096,
      "kfac-ps: its public key file (optional; must match the secret key); clients: the kfac-ps public key to trust"),
    O("security", "client_secret_key", OPT_STRING, client_secret_key, "", 0, 4096,
      "clients: file with this daemon's CURVE secret key (mode 0600); needs server_public_key"),
    O("security", "client_public_key", OPT_STRING, client_public_key, "", 0, 4096,
      "clients: this daemon's public key file (optional; must match client_secret_key)"),
    O("security", "allow_workers", OPT_STRING, allow_workers, "", 0, 4096,
      "kfac-ps: file of public keys, or folder of *.pub files, that may connect as kfac-worker"),
    O("security", "allow_statsd", OPT_STRING, allow_statsd, "", 0, 4096,
      "kfac-ps: file or folder of public keys that may connect as kfac-statsd"),
    O("security", "allow_invertd", OPT_STRING, allow_invertd, "", 0, 4096,
      "kfac-ps: file or folder of public keys that may connect as kfac-invertd"),
    O("security", "insecure", OPT_BOOL, insecure, "false", 0, 0,
      "kfac-ps: allow binding a non-loopback address without CURVE keys (anyone who reaches the port can steer training)"),
    O("security", "members_per_key", OPT_INT, members_per_key, "1", 0, INT_MAX,
      "kfac-ps, with CURVE: clients one key may hold at once (0: any number); a member id stays with the key that "
      "first held it"),
    /* failure handling and checkpoints of kfac-ps (docs/operations.md) */
    O("ps", "grad_norm_max_ratio", OPT_DOUBLE, grad_norm_max_ratio, "100", 0, 1e30,
      "a gradient whose norm is more than this many times the median of the last 32 accepted ones is rejected (0: "
      "off)"),
    O("ps", "stats_trace_max_ratio", OPT_DOUBLE, stats_trace_max_ratio, "1000", 0, 1e30,
      "a statistics push whose factor's trace is more than this many times the median of that factor's last 32 "
      "accepted ones is rejected (0: off; the check that each factor is a second moment stays)"),
    O("ps", "grad_clip_ratio", OPT_DOUBLE, grad_clip_ratio, "20", 0, 1e30,
      "a layer's gradient whose norm is more than this many times the median of that layer's last 32 is scaled "
      "down to it (0: off)"),
    O("ps", "heldout_n", OPT_INT, heldout_n, "0", 0, 65536,
      "examples of the training split (its last ones) on which kfac-ps computes its own reference gradient, "
      "which every worker's gradients are judged against (heldout_z; 0, the default: no reference, no check; "
      "256 is the size measured in docs/security.md)"),
    O("ps", "heldout_every", OPT_INT, heldout_every, "4", 1, 1000000,
      "versions between two reference gradients (each computed beside the step, at the evaluation's priority)"),
    O("ps", "heldout_z", OPT_DOUBLE, heldout_z, "5", 0, 1e30,
      "a worker whose gradients keep a direction of their own that the reference does not share is refused while "
      "that excess, in its own noise's standard deviations (docs/security.md), is above this"),
    E("ps", "aggregate", aggregate, "mean", s_aggregate,
      "how the round's gradients are combined: mean (weighted by examples), trimmed_mean or median (coordinate-wise, "
      "robust to a hostile worker; need 2 * aggregate_trim + 1 and 3 workers)"),
    O("ps", "aggregate_trim", OPT_INT, aggregate_trim, "1", 1, 1000,
      "aggregate = trimmed_mean: gradients dropped at each end of every coordinate"),
    O("ps", "gradient_staleness", OPT_INT, gradient_staleness, "0", 0, 1000,
      "a gradient computed on parameters up to this many versions old still goes into the round (0: synchronous "
      "rounds; older ones are discarded and counted as stale)"),
    E("ps", "gradient_age_weight", gradient_age_weight, "none", s_age_weights,
      "weight of a gradient a versions old in the round's mean: none (its examples) or inverse (its examples times "
      "1 / (1 + a), Zhang et al. 2016; the mean is still divided by the examples, so stale rounds take smaller "
      "steps); needs aggregate = mean"),
    O("ps", "quorum", OPT_INT, quorum, "0", 0, 4096,
      "after the first step, a round steps once this many gradients are in; the others go into a later round within "
      "gradient_staleness (0: wait for every member)"),
    O("ps", "stall_timeout_ms", OPT_UINT64, stall_timeout_ms, "60000", 0, 1e9,
      "a worker that heartbeats but has not pushed its gradient this long after the round opened is dropped from "
      "the rounds until it pushes again (0: never)"),
    O("ps", "stall_factor", OPT_DOUBLE, stall_factor, "10", 0, 1e6,
      "once the round's pushes show how long members take, a member is dropped after this many times the median "
      "time to push of the recent accepted gradients instead (at least stall_min_ms, at most stall_timeout_ms; 0: "
      "stall_timeout_ms only)"),
    O("ps", "stall_min_ms", OPT_UINT64, stall_min_ms, "2000", 0, 1e9,
      "the shortest stall timeout stall_factor may give"),
    O("ps", "stall_max_drops", OPT_UINT64, stall_max_drops, "3", 0, 1e9,
      "a worker dropped this many times for stalling is no member of the rounds again and its gradients are refused "
      "(0: never)"),
    O("ps", "handshake_timeout_ms", OPT_UINT64, handshake_timeout_ms, "10000", 10, 1e9,
      "a client that has not asked for work this long after Hello is forgotten"),
    O("checkpoint", "dir", OPT_STRING, ckpt_dir, "", 0, 4096, "checkpoint folder (empty: [run] out_dir/checkpoints)"),
    O("checkpoint", "every", OPT_UINT64, ckpt_every, "0", 0, 1e9,
      "steps between checkpoints, also written on SIGTERM and SIGINT (0: no checkpoints)"),
    O("checkpoint", "keep", OPT_INT, ckpt_keep, "3", 1, 1000000, "checkpoint files kept (the newest)"),
    O("checkpoint", "resume", OPT_BOOL, ckpt_resume, "false", 0, 0,
      "on start (--resume), go on from the newest valid checkpoint in dir (none there: start afresh)"),
    O("worker", "id", OPT_INT, daemon[RUNCFG_ROLE_WORKER].id, "0", 0, 1000000,
      "stable member id: the data shard it asks for; restarted with the same id it gets its shard and its place in "
      "the round back (while another live worker holds the id, it is told so and tries again later)"),
    O("worker", "threads", OPT_INT, daemon[RUNCFG_ROLE_WORKER].threads, "1", 1, 256, "OpenBLAS threads"),
    E("worker", "device", daemon[RUNCFG_ROLE_WORKER].device, "auto", s_devices, "auto (GPU when one answers), cpu or cuda"),
    O("worker", "cpus", OPT_STRING, daemon[RUNCFG_ROLE_WORKER].cpus, "", 0, 256, "CPU list to pin the worker to (empty: no pinning)"),
    O("statsd", "id", OPT_INT, daemon[RUNCFG_ROLE_STATSD].id, "0", 0, 1000000, "stats worker id"),
    O("statsd", "threads", OPT_INT, daemon[RUNCFG_ROLE_STATSD].threads, "1", 1, 256, "OpenBLAS threads"),
    O("statsd", "batch", OPT_INT, statsd_batch, "0", 0, RUNCFG_STATSD_BATCH_MAX, "mini-batch for statistics (0: data.batch)"),
    O("statsd", "cpus", OPT_STRING, daemon[RUNCFG_ROLE_STATSD].cpus, "", 0, 256, "CPU list to pin the stats worker to (empty: no pinning)"),
    E("statsd", "device", daemon[RUNCFG_ROLE_STATSD].device, "auto", s_devices, "auto (GPU when one answers), cpu or cuda"),
    O("invertd", "id", OPT_INT, daemon[RUNCFG_ROLE_INVERTD].id, "0", 0, 1000000, "inverse daemon id"),
    O("invertd", "threads", OPT_INT, daemon[RUNCFG_ROLE_INVERTD].threads, "1", 1, 256, "OpenBLAS threads"),
    O("invertd", "delay_ms", OPT_UINT64, invertd_delay_ms, "0", 0, 1e9, "injected delay per job (staleness studies)"),
    O("worker", "delay_ms", OPT_UINT64, worker_delay_ms, "0", 0, 1e9,
      "mean of an injected delay before each gradient push, drawn uniformly from [0, 2 x delay_ms] (a slow worker, "
      "for gradient staleness studies)"),
    O("invertd", "max_n", OPT_INT, invertd_max_n, "0", 0, 1000000, "largest factor accepted (0: any)"),
    O("invertd", "cpus", OPT_STRING, daemon[RUNCFG_ROLE_INVERTD].cpus, "", 0, 256, "CPU list to pin the inverse daemon to (empty: no pinning)"),
    /* the run's output folder and live view (docs/operations.md) */
    O("run", "force", OPT_BOOL, force, "false", 0, 0,
      "overwrite a previous run in out_dir (otherwise a folder holding steps.csv, eval.csv or manifest.json is refused)"),
    O("ps", "metrics", OPT_STRING, ps_metrics, "", 0, 256,
      "serve Prometheus metrics over HTTP at HOST:PORT, e.g. 127.0.0.1:9464 (:PORT: 127.0.0.1; 0.0.0.0:PORT: every "
      "interface, unauthenticated; empty: off)"),
    O("ps", "curvature_warn_s", OPT_DOUBLE, curvature_warn_s, "30", 1, 1e9,
      "kfac: warn when no inverse was installed or no statistics folded for this many seconds"),
    /* CPU priority of the curvature daemons' compute threads and of the PS's
     * evaluation (common/base/prio.h), and the evaluation's threads. */
    E("ps", "eval_priority", ps_eval_priority, "low", s_priorities,
      "evaluation threads: low (nice 10: a bounded share, about a tenth of a nice-0 thread's), idle (SCHED_IDLE: "
      "only CPU time nothing else wants; may starve on a busy host) or normal"),
    O("ps", "eval_threads", OPT_INT, ps_eval_threads, "2", 1, 64,
      "threads of each evaluation (the net's own threads over the batch)"),
    E("statsd", "priority", daemon[RUNCFG_ROLE_STATSD].priority, "yield", s_curv_priorities,
      "compute thread: yield (SCHED_IDLE, lifted to nice 10 while a job gets under a tenth of a CPU for 1 s: a floor on a "
      "busy host), idle (SCHED_IDLE only: may starve on a busy host), low (nice 10) or normal"),
    E("invertd", "priority", daemon[RUNCFG_ROLE_INVERTD].priority, "yield", s_curv_priorities,
      "compute thread: yield (SCHED_IDLE, lifted to nice 10 while a job gets under a tenth of a CPU for 1 s: a floor on a "
      "busy host), idle (SCHED_IDLE only: may starve on a busy host), low (nice 10) or normal"),
};

static const char *const s_shared[] = {"run", "model", "data", "optimizer", "kfac", "cluster", NULL};
static const char *const s_role_section[RUNCFG_ROLE_COUNT] = {"ps", "worker", "statsd", "invertd", NULL};
static const char *const s_programs[RUNCFG_ROLE_COUNT] = {"kfac-ps", "kfac-worker", "kfac-statsd", "kfac-invertd", "kfac-train"};
static const char *const s_summaries[RUNCFG_ROLE_COUNT] = {
    "the parameter server: gradients in, preconditioned updates out, inversion jobs scheduled",
    "a gradient worker: parameters in, gradients of its data shard out",
    "a stats worker: K-FAC factor statistics from its own mini-batches",
    "an inverse daemon: damped inverses of K-FAC factors, on request",
    "in-process training (gradients, statistics and inverses in one process)",
};

/* The settings that differ per host, from the environment (between the
 * file and the command line): where kfac-ps is, where the data are, and the
 * daemon's id (a systemd template or a Slurm task sets it per instance). */
static const config_env_t s_env_ps[] = {{"KFAC_PS", "cluster.ps"}, {"KFAC_DATA_DIR", "data.dir"}};
static const config_env_t s_env_worker[] = {{"KFAC_PS", "cluster.ps"}, {"KFAC_DATA_DIR", "data.dir"}, {"KFAC_ID", "worker.id"}};
static const config_env_t s_env_statsd[] = {{"KFAC_PS", "cluster.ps"}, {"KFAC_DATA_DIR", "data.dir"}, {"KFAC_ID", "statsd.id"}};
static const config_env_t s_env_invertd[] = {{"KFAC_PS", "cluster.ps"}, {"KFAC_DATA_DIR", "data.dir"}, {"KFAC_ID", "invertd.id"}};
static const struct { const config_env_t *env; size_t n; } s_role_env[RUNCFG_ROLE_COUNT] = {
    {s_env_ps, CONFIG_COUNT(s_env_ps)}, {s_env_worker, CONFIG_COUNT(s_env_worker)},
    {s_env_statsd, CONFIG_COUNT(s_env_statsd)}, {s_env_invertd, CONFIG_COUNT(s_env_invertd)},
    {s_env_ps, CONFIG_COUNT(s_env_ps)},
};
#define S_EXIT_HEAD "Exit status: 0 done (all steps, the target accuracy, SIGINT/SIGTERM), 1 runtime failure,\n" \
                    "2 usage error (a bad option or value, on the command line or in the --config file)"
static const char s_exit_files[] =
    S_EXIT_HEAD ",\n78 configuration error found at start-up (EX_CONFIG): the model file or a data file is\n"
    "missing, unreadable or malformed, or the data do not fit the model; [run] out_dir holds a\n"
    "previous run (kfac-ps, kfac-train; without --force, or kfac-ps's --resume); a security\n"
    "refusal (kfac-ps: a key file or allowlist missing, unreadable or too open, or a bind beyond\n"
    "loopback without keys; a client: its CURVE key still refused after [cluster] admit_wait_s).\n"
    "The message names the file or the key. Restarting does not help with 2 or 78.\n";
static const char s_exit_invertd[] =
    S_EXIT_HEAD ",\n78 when kfac-ps still refused its CURVE key after [cluster] admit_wait_s.\n"
    "kfac-invertd reads no model or data file: it gets everything from kfac-ps.\n";

static config_option_t s_role_opts[RUNCFG_ROLE_COUNT][sizeof s_table / sizeof s_table[0]];
static config_spec_t s_specs[RUNCFG_ROLE_COUNT];

static int s_is_shared(const char *sec) {
    for (int i = 0; s_shared[i]; i++)
        if (strcmp(s_shared[i], sec) == 0) return 1;
    return 0;
}

const config_spec_t *runcfg_spec(runcfg_role_t role) {
    if ((unsigned)role >= RUNCFG_ROLE_COUNT) return NULL;
    config_spec_t *s = &s_specs[role];
    if (!s->opts) {
        size_t n = 0;
        for (size_t i = 0; i < CONFIG_COUNT(s_table); i++) {
            const char *sec = s_table[i].section;
            int security = strcmp(sec, "security") == 0 && s_role_section[role]; /* not kfac-train */
            if (s_is_shared(sec) || security || (s_role_section[role] && strcmp(sec, s_role_section[role]) == 0) ||
                (role == RUNCFG_ROLE_PS && strcmp(sec, "checkpoint") == 0))
                s_role_opts[role][n++] = s_table[i];
        }
        s->program = s_programs[role];
        s->summary = s_summaries[role];
        s->opts = s_role_opts[role];
        s->n_opts = n;
        s->env = s_role_env[role].env;
        s->n_env = s_role_env[role].n;
        s->epilogue = role == RUNCFG_ROLE_INVERTD ? s_exit_invertd : s_exit_files;
    }
    return s;
}

void runcfg_init(runcfg_t *c) {
    memset(c, 0, sizeof *c);
    /* what no section's key sets (runcfg_daemon_t) */
    for (int r = 0; r < RUNCFG_ROLE_COUNT; r++) {
        c->daemon[r].threads = 1;
        c->daemon[r].device = r == RUNCFG_ROLE_INVERTD ? BACKEND_CPU : BACKEND_AUTO;
        c->daemon[r].priority = RUNCFG_PRIORITY_NORMAL;
    }
}

int runcfg_load_checked(runcfg_t *c, runcfg_role_t role, int argc, char **argv, runcfg_check_fn check, char *err,
                        size_t err_len) {
    runcfg_init(c);
    int dump = 0;
    int rc = config_read(runcfg_spec(role), c, argc, argv, stdout, &dump, err, err_len);
    if (rc != 0) return rc;
    /* --dump-config (and so kfac-launch --check) rejects what a start would */
    if ((rc = runcfg_validate(c, err, err_len)) < 0) return rc;
    if (check && (rc = check(c, err, err_len)) < 0) return rc;
    if (!dump) return 0;
    if (config_dump(runcfg_spec(role), c, stdout) < 0) {
        snprintf(err, err_len, "cannot print the configuration");
        return -EIO;
    }
    return CONFIG_DUMP;
}

int runcfg_load(runcfg_t *c, runcfg_role_t role, int argc, char **argv, char *err, size_t err_len) {
    return runcfg_load_checked(c, role, argc, argv, NULL, err, err_len);
}

/* "v" or "v0, v1, v2": 1 to DATASET_MAX_CHANNELS finite numbers (positive
 * when positive) into v; the count, or -EINVAL with the message. */
static int s_norm_list(const char *text, const char *key, int positive, float *v, char *err, size_t err_len) {
    int n = 0;
    const char *p = text;
    for (;;) {
        char *end = NULL;
        errno = 0;
        double x = strtod(p, &end);
        if (end == p || errno || !isfinite(x) || (positive && !(x > 0)) || n == DATASET_MAX_CHANNELS) {
            snprintf(err, err_len, "[data] %s = %s: expected 1 to %d %snumbers separated by commas (one per channel, "
                     "or one for all)", key, text, DATASET_MAX_CHANNELS, positive ? "positive " : "");
            return -EINVAL;
        }
        v[n++] = (float)x;
        p = end;
        while (*p == ' ' || *p == '\t') p++;
        if (!*p) return n;
        if (*p != ',') {
            snprintf(err, err_len, "[data] %s = %s: expected numbers separated by commas", key, text);
            return -EINVAL;
        }
        p++;
    }
}

/* [data]: the file keys belong to idx / npy, both of them need all four;
 * mean and std come together and agree in length. */
static int s_validate_data(const runcfg_t *c, char *err, size_t err_len) {
    static const char *const keys[] = {"train_images", "train_labels", "test_images", "test_labels"};
    const char *vals[] = {c->train_images, c->train_labels, c->test_images, c->test_labels};
    int user = c->dataset == RUNCFG_DATASET_IDX || c->dataset == RUNCFG_DATASET_NPY;
    char missing[128] = "";
    for (int i = 0; i < 4; i++) {
        int set = vals[i] && vals[i][0];
        if (!user && set) {
            snprintf(err, err_len, "[data] %s is read only with set = idx or npy (set is %s): remove it or set the set",
                     keys[i], runcfg_dataset_name(c));
            return -EINVAL;
        }
        if (user && !set) snprintf(missing + strlen(missing), sizeof missing - strlen(missing), "%s%s",
                                   missing[0] ? ", " : "", keys[i]);
    }
    if (missing[0]) {
        snprintf(err, err_len, "[data] set = %s needs train_images, train_labels, test_images and test_labels "
                 "(missing: %s)", runcfg_dataset_name(c), missing);
        return -EINVAL;
    }
    int has_mean = c->data_mean && c->data_mean[0], has_std = c->data_std && c->data_std[0];
    if ((has_mean || has_std) && !user) {
        snprintf(err, err_len, "[data] mean and std are read only with set = idx or npy (%s has fixed constants)",
                 runcfg_dataset_name(c));
        return -EINVAL;
    }
    if (has_mean != has_std) {
        snprintf(err, err_len, "[data] %s is set but %s is not: give both, or neither (computed from the training "
                 "images)", has_mean ? "mean" : "std", has_mean ? "std" : "mean");
        return -EINVAL;
    }
    if (has_mean) {
        float m[DATASET_MAX_CHANNELS], s[DATASET_MAX_CHANNELS];
        int nm = s_norm_list(c->data_mean, "mean", 0, m, err, err_len);
        if (nm < 0) return nm;
        int ns = s_norm_list(c->data_std, "std", 1, s, err, err_len);
        if (ns < 0) return ns;
        if (nm != ns) {
            snprintf(err, err_len, "[data] mean has %d value%s but std has %d", nm, nm == 1 ? "" : "s", ns);
            return -EINVAL;
        }
    }
    return 0;
}

int runcfg_validate(const runcfg_t *c, char *err, size_t err_len) {
    int drc = s_validate_data(c, err, err_len);
    if (drc < 0) return drc;
    log_level_t level;
    if (log_level_parse(c->log_level, &level) < 0) {
        snprintf(err, err_len, "[run] log_level: expected error, warn, info or debug, got '%s'", c->log_level);
        return -EINVAL;
    }
    if (c->optimizer == RUNCFG_OPTIMIZER_SGD && c->max_inverse_staleness >= 0) {
        snprintf(err, err_len, "[kfac] max_inverse_staleness = %d needs [optimizer] kind = kfac (it is sgd)",
                 c->max_inverse_staleness);
        return -EINVAL;
    }
    if (c->momentum >= 1.0) { snprintf(err, err_len, "[optimizer] momentum must be < 1"); return -EINVAL; }
    if ((c->polyak_decay < 0.0 && c->polyak_decay != -1.0) || (c->kfac_polyak_decay < 0.0 && c->kfac_polyak_decay != -1.0)) {
        snprintf(err, err_len, "polyak_decay: expected -1 (not set) or a decay in [0, 0.99999], got %g",
                 c->polyak_decay < 0.0 && c->polyak_decay != -1.0 ? c->polyak_decay : c->kfac_polyak_decay);
        return -EINVAL;
    }
    if (c->aggregate == RUNCFG_AGGREGATE_TRIMMED && c->workers < 2 * c->aggregate_trim + 1) {
        snprintf(err, err_len,
                 "[ps] aggregate = trimmed_mean with aggregate_trim = %d needs [cluster] workers >= %d (it is %d): "
                 "lower aggregate_trim or add workers",
                 c->aggregate_trim, 2 * c->aggregate_trim + 1, c->workers);
        return -EINVAL;
    }
    if (c->aggregate == RUNCFG_AGGREGATE_MEDIAN && c->workers < 3) {
        snprintf(err, err_len,
                 "[ps] aggregate = median needs [cluster] workers >= 3 (it is %d): the median of two is their mean",
                 c->workers);
        return -EINVAL;
    }
    if (c->damping_rule == RUNCFG_DAMPING_ADAPTIVE) {
        if (c->optimizer != RUNCFG_OPTIMIZER_KFAC) {
            snprintf(err, err_len, "[kfac] damping_rule = adaptive needs [optimizer] kind = kfac (it is sgd)");
            return -EINVAL;
        }
        if (c->damping_max < c->damping_min || c->damping < c->damping_min || c->damping > c->damping_max) {
            snprintf(err, err_len, "[kfac] damping_rule = adaptive needs damping_min <= damping <= damping_max (%g, "
                     "%g, %g)", c->damping_min, c->damping, c->damping_max);
            return -EINVAL;
        }
    }
    if (c->inverse_age_damping > 0.0 &&
        (c->optimizer != RUNCFG_OPTIMIZER_KFAC || c->step_rule == KFAC_STEP_RULE_FIXED)) {
        snprintf(err, err_len, "[kfac] inverse_age_damping = %g divides the KL bound: it needs [optimizer] kind = kfac "
                 "and step_rule = kl or kl_clip", c->inverse_age_damping);
        return -EINVAL;
    }
    if (c->gradient_age_weight != KFAC_AGE_WEIGHT_NONE && c->aggregate != RUNCFG_AGGREGATE_MEAN) {
        snprintf(err, err_len, "[ps] gradient_age_weight = inverse weights the mean: it needs aggregate = mean");
        return -EINVAL;
    }
    kfac_schedule_t sched;
    int rc = runcfg_kfac_schedule(c, &sched, err, err_len);
    if (rc < 0) return rc;
    /* CPU lists: syntax here (a usage error); whether the CPUs exist is
     * checked where the daemon pins itself (affinity_apply). */
    for (int r = RUNCFG_ROLE_PS; r <= RUNCFG_ROLE_INVERTD; r++) {
        cpu_set_t set;
        char msg[400];
        const char *what = NULL, *list = runcfg_cpus(c, (runcfg_role_t)r, &what);
        if (affinity_parse(list, &set, msg, sizeof msg) < 0) {
            snprintf(err, err_len, "%s: %s", what, msg);
            return -EINVAL;
        }
    }
    return 0;
}

/* A comma-separated list of increasing positive step numbers into m[]. */
static int s_milestones(const char *text, const char *what, long *m, int *n, char *err, size_t err_len) {
    *n = 0;
    const char *p = text ? text : "";
    while (*p == ' ' || *p == '\t') p++;
    if (!*p) return 0;
    for (;;) {
        char *end = NULL;
        errno = 0;
        long v = strtol(p, &end, 10);
        if (end == p || errno || v < 1 || v > 1000000000L) {
            snprintf(err, err_len, "[kfac] %s = %s: expected step numbers >= 1 separated by commas", what, text);
            return -EINVAL;
        }
        if (*n == KFAC_SCHEDULE_MAX) {
            snprintf(err, err_len, "[kfac] %s = %s: at most %d milestones", what, text, KFAC_SCHEDULE_MAX);
            return -EINVAL;
        }
        if (*n > 0 && v <= m[*n - 1]) {
            snprintf(err, err_len, "[kfac] %s = %s: milestones must increase (%ld after %ld)", what, text, v, m[*n - 1]);
            return -EINVAL;
        }
        m[(*n)++] = v;
        p = end;
        while (*p == ' ' || *p == '\t') p++;
        if (!*p) return 0;
        if (*p != ',') {
            snprintf(err, err_len, "[kfac] %s = %s: expected step numbers >= 1 separated by commas", what, text);
            return -EINVAL;
        }
        p++;
        while (*p == ' ' || *p == '\t') p++;
    }
}

int runcfg_kfac_schedule(const runcfg_t *c, kfac_schedule_t *s, char *err, size_t err_len) {
    memset(s, 0, sizeof *s);
    s->fac_interval = c->stats_every;
    s->inv_interval = c->inverse_every;
    s->damping = c->damping;
    s->interval_factor = c->interval_factor;
    s->damping_factor = c->damping_factor;
    int rc = s_milestones(c->interval_milestones, "interval_milestones", s->interval_milestones,
                          &s->n_interval_milestones, err, err_len);
    if (rc == 0)
        rc = s_milestones(c->damping_milestones, "damping_milestones", s->damping_milestones, &s->n_damping_milestones,
                          err, err_len);
    if (rc == 0 && kfac_schedule_check(s) < 0) {
        snprintf(err, err_len, "[kfac] the interval and damping schedule is not valid");
        rc = -EINVAL;
    }
    return rc;
}

const char *runcfg_cpus(const runcfg_t *c, runcfg_role_t role, const char **what) {
    static const char *const names[RUNCFG_ROLE_COUNT] = {"[ps] cpus", "[worker] cpus", "[statsd] cpus",
                                                         "[invertd] cpus", "cpus"};
    const int r = (unsigned)role < RUNCFG_ROLE_COUNT ? (int)role : RUNCFG_ROLE_TRAIN;
    if (what) *what = names[r];
    return r != RUNCFG_ROLE_TRAIN && c->daemon[r].cpus ? c->daemon[r].cpus : "";
}

char *runcfg_shared_text(const runcfg_t *c) {
    return config_to_text(runcfg_spec(RUNCFG_ROLE_TRAIN), c, s_shared, 0);
}

void runcfg_kfac_opts(const runcfg_t *c, kfac_opts_t *o) {
    kfac_opts_default(o);
    o->method = c->method;
    o->damping = c->damping;
    o->stat_decay = c->stat_decay;
    o->step_rule = c->step_rule;
    o->lr = c->lr;
    o->eta_max = c->eta_max;
    o->kl_c0 = c->kl_c0;
    o->kl_zeta = c->kl_zeta;
    o->kl_decay_every = (long)c->kl_decay_every;
    o->kl_clip = c->kl_clip;
    o->momentum = c->momentum;
    o->weight_decay = c->weight_decay;
    o->wd_mode = c->wd_mode;
    o->polyak_decay = runcfg_polyak_decay(c);
    o->identity_mode = c->identity;
}

double runcfg_polyak_decay(const runcfg_t *c) {
    if (c->polyak_decay >= 0.0) return c->polyak_decay;
    return c->kfac_polyak_decay >= 0.0 ? c->kfac_polyak_decay : RUNCFG_POLYAK_DECAY_DEFAULT;
}

void runcfg_lr_sched(const runcfg_t *c, sgd_lr_sched_t *s) {
    memset(s, 0, sizeof *s);
    s->kind = c->lr_schedule;
    s->base = c->lr;
    s->gamma = c->lr_gamma;
    s->every = (long)c->lr_every;
    s->total = (long)c->steps;
    s->floor = c->lr_floor;
    s->warmup = (long)c->lr_warmup;
}

const char *runcfg_dataset_name(const runcfg_t *c) {
    return (unsigned)c->dataset <= RUNCFG_DATASET_NPY ? s_datasets[c->dataset] : "mnist";
}

void runcfg_release(runcfg_t *c) {
    /* every role's view: the shared sections and each daemon's own strings
     * (config_release NULLs what it frees, so shared strings go once) */
    for (int r = 0; r < RUNCFG_ROLE_COUNT; r++) config_release(runcfg_spec((runcfg_role_t)r), c);
}

/* ---- [data] as a data source --------------------------------------------------- */

static int s_copy(char *dst, size_t len, const char *src, const char *key, char *err, size_t err_len) {
    size_t n = strlen(src ? src : "");
    if (n >= len) {
        snprintf(err, err_len, "[data] %s: longer than %zu bytes", key, len - 1);
        return -ENAMETOOLONG;
    }
    memcpy(dst, src ? src : "", n + 1);
    return 0;
}

int runcfg_data_source(const runcfg_t *c, dataset_source_t *src, char *err, size_t err_len) {
    memset(src, 0, sizeof *src);
    src->kind = c->dataset == RUNCFG_DATASET_IDX   ? DATASET_SOURCE_IDX
                : c->dataset == RUNCFG_DATASET_NPY ? DATASET_SOURCE_NPY
                                                   : DATASET_SOURCE_NAMED;
    snprintf(src->name, sizeof src->name, "%s", runcfg_dataset_name(c));
    int rc = s_copy(src->dir, sizeof src->dir, c->data_dir, "dir", err, err_len);
    if (!rc) rc = s_copy(src->train_images, sizeof src->train_images, c->train_images, "train_images", err, err_len);
    if (!rc) rc = s_copy(src->train_labels, sizeof src->train_labels, c->train_labels, "train_labels", err, err_len);
    if (!rc) rc = s_copy(src->test_images, sizeof src->test_images, c->test_images, "test_images", err, err_len);
    if (!rc) rc = s_copy(src->test_labels, sizeof src->test_labels, c->test_labels, "test_labels", err, err_len);
    if (rc) return rc;
    if (src->kind != DATASET_SOURCE_NAMED && c->data_mean && c->data_mean[0]) {
        float s[DATASET_MAX_CHANNELS];
        int nm = s_norm_list(c->data_mean, "mean", 0, src->norm.mean, err, err_len);
        if (nm < 0) return nm;
        int ns = s_norm_list(c->data_std ? c->data_std : "", "std", 1, s, err, err_len);
        if (ns < 0) return ns;
        if (ns != nm) {
            snprintf(err, err_len, "[data] mean has %d values but std has %d", nm, ns);
            return -EINVAL;
        }
        memcpy(src->norm.std, s, sizeof s);
        src->norm.c = nm;
        src->has_norm = 1;
    }
    return 0;
}

int runcfg_data_load_source(const dataset_source_t *src, const net_t *net, const char *model_name, int train,
                            dataset_t **out, char *err, size_t err_len) {
    *out = NULL;
    dataset_source_t *s = malloc(sizeof *s); /* 20 KB of paths: not on a thread's stack */
    if (!s) {
        snprintf(err, err_len, "out of memory");
        return -ENOMEM;
    }
    *s = *src;
    if (net) {
        s->in_c = net->in_c;
        s->in_h = net->in_h;
        s->in_w = net->in_w;
        s->n_classes = net->n_classes;
    }
    snprintf(s->model, sizeof s->model, "%s", model_name && model_name[0] ? model_name : "the model");
    int rc = dataset_source_load(s, train, out, err, err_len);
    free(s);
    return rc;
}

int runcfg_data_load(const runcfg_t *c, const net_t *net, int train, dataset_t **out, char *err, size_t err_len) {
    *out = NULL;
    dataset_source_t *src = malloc(sizeof *src);
    if (!src) {
        snprintf(err, err_len, "out of memory");
        return -ENOMEM;
    }
    int rc = runcfg_data_source(c, src, err, err_len);
    if (rc == 0) rc = runcfg_data_load_source(src, net, c->model, train, out, err, err_len);
    free(src);
    return rc;
}

/* The shortest text of a list of n floats that reads back to the same floats. */
static void s_float_list(const float *v, int n, char *buf, size_t len) {
    size_t used = 0;
    buf[0] = 0;
    for (int i = 0; i < n && used < len; i++) {
        char one[32];
        for (int prec = 6; prec <= 9; prec++) {
            snprintf(one, sizeof one, "%.*g", prec, (double)v[i]);
            if (strtof(one, NULL) == v[i]) break;
        }
        used += (size_t)snprintf(buf + used, len - used, "%s%s", i ? ", " : "", one);
    }
}

int runcfg_data_prepare(runcfg_t *c, char *err, size_t err_len) {
    if ((c->dataset != RUNCFG_DATASET_IDX && c->dataset != RUNCFG_DATASET_NPY) || (c->data_mean && c->data_mean[0]))
        return 0;
    dataset_source_t *src = malloc(sizeof *src);
    net_t *net = NULL;
    int rc = -ENOMEM;
    if (!src) {
        snprintf(err, err_len, "out of memory");
        goto done;
    }
    if ((rc = runcfg_data_source(c, src, err, err_len)) < 0) goto done;
    /* flat (N, C*H*W) images are read in the model's shape */
    if (!(net = net_load(c->model, 1, err, err_len))) {
        rc = -EINVAL;
        goto done;
    }
    src->in_c = net->in_c;
    src->in_h = net->in_h;
    src->in_w = net->in_w;
    snprintf(src->model, sizeof src->model, "%s", c->model);
    dataset_norm_t norm;
    if ((rc = dataset_source_norm(src, &norm, err, err_len)) < 0) goto done;
    char mean[160], std[160];
    s_float_list(norm.mean, norm.c, mean, sizeof mean);
    s_float_list(norm.std, norm.c, std, sizeof std);
    const config_spec_t *spec = runcfg_spec(RUNCFG_ROLE_TRAIN);
    if ((rc = config_set(spec, c, "data.mean", mean, "computed", err, err_len)) < 0 ||
        (rc = config_set(spec, c, "data.std", std, "computed", err, err_len)) < 0)
        goto done;
    log_info("[data] %s: normalization computed from the training images %s: mean = %s, std = %s (put these in "
             "[data] mean and std to skip this pass)", runcfg_dataset_name(c), c->train_images, mean, std);
    rc = 0;
done:
    net_free(&net);
    free(src);
    return rc;
}
