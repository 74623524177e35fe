/* tools/kfac-train.c — in-process training: gradients, K-FAC statistics and
 * inverses in one process (the synchronous baseline). Reads the same run
 * configuration as the daemons:
 *
 *   build/kfac-train --config deploy/examples/mnist-cnn-kfac.ini --steps 500
 *   build/kfac-train --model models/mnist-mlp.model --kind sgd --lr 0.05
 *
 * Prints the model summary, a progress line per evaluation (current
 * parameters and their Polyak average, for SGD and K-FAC alike) and a final
 * summary. Writes the run into [run] out_dir as kfac-ps does (left empty: a
 * new folder under runs/, common/run/runpick.h): steps.csv,
 * eval.csv, config.ini, model.txt, and at the end params.npy,
 * params_polyak.npy and manifest.json (docs/operations.md). Exit
 * (common/base/config.h): 0 done, 1 runtime failure, 2 usage error (bad
 * option or value), 78 configuration error (EX_CONFIG: the model or a data
 * file is missing, unreadable or malformed, or the data do not fit the
 * model, the message names the file; or out_dir holds a previous run and
 * [run] force is off).
 */
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "common/base/blas.h"
#include "common/nn/data.h"
#include "common/base/log.h"
#include "common/nn/nn.h"
#include "common/run/rundir.h"
#include "common/run/runcfg.h"
#include "common/run/runpick.h"
#include "common/run/train.h"

int main(int argc, char **argv) {
    blas_restart_if_generic(argv);
    char err[1024];
    runcfg_t c;
    int rc = runcfg_load(&c, RUNCFG_ROLE_TRAIN, argc, argv, err, sizeof err);
    if (rc == CONFIG_HELP || rc == CONFIG_DUMP) { runcfg_release(&c); return 0; }
    if (rc < 0) {
        fprintf(stderr, "kfac-train: %s\n(see kfac-train --help)\n", err);
        runcfg_release(&c);
        return 2;
    }
    log_level_t lvl = LOG_LEVEL_INFO;
    if (log_level_parse(c.log_level, &lvl) < 0) {
        fprintf(stderr, "kfac-train: [run] log_level: expected error, warn, info or debug, got '%s'\n", c.log_level);
        runcfg_release(&c);
        return 2;
    }
    if (c.out_dir[0] && !c.force && rundir_check_free(c.out_dir, err, sizeof err) < 0) {
        fprintf(stderr, "kfac-train: %s\n", err);
        runcfg_release(&c);
        return CONFIG_EXIT_CONFIG;
    }
    log_init(lvl, "kfac-train");
    /* Both cores: the net's own threads split each pass over the batch,
     * with single-threaded OpenBLAS (common/nn/nn.h, net_set_threads). */
    blas_set_threads(1);
    int status = CONFIG_EXIT_FAILURE;
    dataset_t *train = NULL, *test = NULL;
    net_t *net = NULL;
    rundir_t *out = NULL;
    if (!(net = net_load(c.model, c.batch, err, sizeof err))) {
        log_error("%s", err);
        status = CONFIG_EXIT_CONFIG;
        goto done;
    }
    if ((rc = runcfg_data_prepare(&c, err, sizeof err)) < 0 || /* [data] set = idx | npy without mean/std */
        (rc = runcfg_data_load(&c, net, 1, &train, err, sizeof err)) < 0 ||
        (rc = runcfg_data_load(&c, net, 0, &test, err, sizeof err)) < 0) {
        log_error("%s", err);
        status = config_exit_status(rc);
        goto done;
    }
    if (c.train_n > 0) dataset_truncate(train, c.train_n);
    net->fc_doubly_min_in = c.doubly_min_in;
    if ((rc = runpick_choose(&c, RUNPICK_BASE, err, sizeof err)) < 0) { /* no out_dir: a new folder */
        log_error("%s", err);
        status = config_exit_status(rc);
        goto done;
    }
    if ((rc = rundir_open_run(&c, RUNCFG_ROLE_TRAIN, net->source, rundir_mode_of(&c), &out, err, sizeof err)) < 0) {
        log_error("%s", err);
        if (rc == -EEXIST) status = CONFIG_EXIT_CONFIG;
        goto done;
    }
    net->fc_doubly_min_in = c.doubly_min_in;
    if (net_set_threads(net, 2) < 0) log_warn("cannot start the network's second thread: running on one");
    if ((rc = net_set_conv_engine(net, c.conv_engine, err, sizeof err)) < 0) {
        log_error("[model] conv_engine: %s", err);
        status = CONFIG_EXIT_CONFIG;
        goto done;
    }
    log_info("network passes on %d threads", net_threads(net));
    net_print_summary(net, stdout);
    net_init_params(net, c.seed);
    train_opts_t o;
    train_opts_default(&o);
    o.optimizer = c.optimizer == RUNCFG_OPTIMIZER_KFAC ? TRAIN_OPT_KFAC : TRAIN_OPT_SGD;
    o.batch = c.batch;
    o.steps = (long)c.steps;
    o.seed = c.seed;
    runcfg_lr_sched(&c, &o.lr);
    o.momentum = c.momentum;
    o.weight_decay = c.weight_decay;
    o.polyak_decay = runcfg_polyak_decay(&c); /* the same key and average for both optimizers */
    runcfg_kfac_opts(&c, &o.kfac);
    o.fisher = (kfac_fisher_t)c.fisher;
    o.stats_every = c.stats_every;
    o.inverse_every = c.inverse_every;
    o.eval_every = (long)c.eval_every;
    o.eval_n = c.eval_n;
    o.target_acc = c.target_acc;
    o.augment = c.augment;
    o.progress = stdout;
    o.out = out;
    o.dataset = runcfg_dataset_name(&c);
    dataset_source_t src; /* [data] set = idx | npy: the normalization used, for the manifest */
    if (runcfg_data_source(&c, &src, err, sizeof err) == 0 && src.kind != DATASET_SOURCE_NAMED && src.has_norm)
        o.norm = &src.norm;
    printf("training %s on %s (%d examples) with %s, batch %d, %ld steps, Polyak decay %g, init %s (biases %s)\n", c.model,
           runcfg_dataset_name(&c), train->n, o.optimizer == TRAIN_OPT_KFAC ? "K-FAC" : "SGD", o.batch, o.steps,
           o.polyak_decay, nn_init_name(net->init), nn_bias_init_name(net->bias_init));
    train_result_t r;
    if ((rc = train_run(net, train, test, &o, &r, err, sizeof err))) {
        log_error("%s", err);
        goto done;
    }
    printf("done: %ld steps in %.1fs (%.0f img/s), train loss %.4f, test acc %.2f%% (polyak %.2f%%)",
           r.steps, r.seconds, r.examples / (r.seconds > 0 ? r.seconds : 1e-9), r.final_train_loss,
           100.0 * r.test_acc, 100.0 * r.polyak_acc);
    if (r.steps_to_target >= 0)
        printf(", target reached at step %ld after %.1fs (%s)", r.steps_to_target, r.seconds_to_target,
               r.target_by_polyak ? "polyak" : "current");
    printf("\n");
    printf("run folder: %s (steps.csv, eval.csv, config.ini, model.txt, params.npy, params_polyak.npy, "
           "manifest.json)\n", rundir_path(out));
    status = 0;
done:
    rundir_free(&out);
    net_free(&net);
    dataset_free(&train);
    dataset_free(&test);
    runcfg_release(&c);
    return status;
}
