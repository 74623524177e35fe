/* common/run/train.c — see train.h. */
#include "common/run/train.h"

#include <errno.h>
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "common/base/clock.h"
#include "common/base/rng.h"
#include "common/kfac/kfac_stats.h"
#include "common/kfac/kfac_step.h"
#include "common/run/export.h"

void train_opts_default(train_opts_t *o) {
    memset(o, 0, sizeof *o);
    o->optimizer = TRAIN_OPT_SGD;
    o->batch = 64;
    o->steps = 1000;
    o->seed = 1;
    o->lr.kind = SGD_LR_CONSTANT;
    o->lr.base = 0.05;
    o->momentum = 0.9;
    o->polyak_decay = 0.99;
    kfac_opts_default(&o->kfac);
    o->fisher = KFAC_FISHER_TRUE;
    o->stats_every = 1;
    o->inverse_every = 20;
    o->eval_every = 0;
}

/* Evaluate the current parameters and their Polyak average (polyak, with
 * count steps in it; none yet: the current figures) on the first n test
 * examples (n <= 0: all). saved (n_params) is scratch for the current
 * parameters, which are restored. */
static void s_eval(net_t *net, const dataset_t *test, int n, const float *polyak, long count, float *saved,
                   double *loss, double *acc, double *p_loss, double *p_acc) {
    if (n <= 0 || n > test->n) n = test->n;
    net_evaluate(net, test->x, test->y, n, loss, acc);
    *p_loss = *loss;
    *p_acc = *acc;
    if (polyak && count > 0) {
        memcpy(saved, net->params, net->n_params * sizeof(float));
        memcpy(net->params, polyak, net->n_params * sizeof(float));
        net_evaluate(net, test->x, test->y, n, p_loss, p_acc);
        memcpy(net->params, saved, net->n_params * sizeof(float));
    }
}

/* The steps.csv row of step t (0-based; the row says t + 1), as kfac-ps
 * counts it: inverse and statistics ages in versions at t. */
static void s_record_step(rundir_t *out, const kfac_opt_t *kfac, long t, double wall_s, double loss, double acc,
                          double step_size) {
    rundir_step_row_t r;
    memset(&r, 0, sizeof r);
    r.step = (uint64_t)t + 1;
    r.wall_s = wall_s;
    r.train_loss = loss;
    r.train_acc = acc;
    r.step_size = step_size;
    r.inv_age_max = -1;
    r.workers = 1;
    r.grad_weight_mean = 1.0;
    if (kfac) {
        r.damping = kfac->opts.damping;
        double now_s = clock_now_s(), age = 0.0, ms = 0.0, st = 0.0;
        int n_inv = 0, n_st = 0;
        for (int b = 0; b < kfac->n_blocks; b++) {
            const kfac_block_t *k = &kfac->blocks[b];
            r.inverses_installed += k->n_installed;
            if (k->factor_version >= 0) {
                st += (double)(t - k->factor_version);
                n_st++;
            }
            if (!k->inv->valid) continue;
            long a = t - k->inv_version;
            age += (double)a;
            if (a > r.inv_age_max) r.inv_age_max = a;
            ms += (now_s - k->inv_time_s) * 1e3;
            n_inv++;
        }
        r.inv_age_mean = n_inv ? age / n_inv : 0.0;
        r.inv_age_ms_mean = n_inv ? ms / n_inv : 0.0;
        r.stats_age_mean = n_st ? st / n_st : 0.0;
        r.stats_folded = kfac->n_folds;
        rundir_ages(out, kfac, r.step, t);
    }
    rundir_step(out, &r);
}

int train_run(net_t *net, const dataset_t *train, const dataset_t *test, const train_opts_t *o,
              train_result_t *res, char *err, size_t err_len) {
    memset(res, 0, sizeof *res);
    res->steps_to_target = -1;
    if (o->batch < 1 || o->batch > net->batch_cap) {
        snprintf(err, err_len, "batch %d out of range [1, %d]", o->batch, net->batch_cap);
        return -EINVAL;
    }
    if (train->c * train->h * train->w != net->in_size || test->c * test->h * test->w != net->in_size) {
        snprintf(err, err_len, "data set examples are %dx%dx%d but the model's input is %dx%dx%d",
                 train->c, train->h, train->w, net->in_c, net->in_h, net->in_w);
        return -EINVAL;
    }
    if (o->optimizer == TRAIN_OPT_SGD && !(o->polyak_decay >= 0.0 && o->polyak_decay < 1.0)) {
        snprintf(err, err_len, "polyak_decay %g out of range [0, 1)", o->polyak_decay);
        return -EINVAL;
    }
    int rc = 0;
    sgd_t *sgd = NULL;
    float *sgd_polyak = NULL; /* (n_params) SGD's Polyak average; K-FAC keeps its own */
    long sgd_polyak_count = 0;
    kfac_opt_t *kfac = NULL;
    kfac_stats_t *batch_stats = NULL;
    batcher_t *bat = NULL;
    float *x = malloc((size_t)o->batch * net->in_size * sizeof(float));
    int *y = malloc((size_t)o->batch * sizeof(int)), *ys = malloc((size_t)o->batch * sizeof(int));
    float *saved = malloc(net->n_params * sizeof(float) + 1);
    double *loss_hist = calloc(50, sizeof(double));
    if (!x || !y || !ys || !saved || !loss_hist) { snprintf(err, err_len, "out of memory"); rc = -ENOMEM; goto done; }
    batcher_opts_t bo = {.batch = o->batch, .seed = o->seed, .rank = 0, .n_ranks = 1, .shuffle = 1,
                         .aug_crop_pad = o->augment ? 4 : 0, .aug_flip = o->augment, .drop_last = 1};
    if (!(bat = batcher_new(train, &bo, err, err_len))) { rc = -EINVAL; goto done; }
    if (o->optimizer == TRAIN_OPT_SGD) {
        if (!(sgd = sgd_new(net, o->momentum, o->weight_decay)) || !(sgd_polyak = malloc(net->n_params * sizeof(float) + 1))) {
            snprintf(err, err_len, "out of memory");
            rc = -ENOMEM;
            goto done;
        }
    } else {
        if (!(kfac = kfac_opt_new(net, &o->kfac, err, err_len))) { rc = -EINVAL; goto done; }
        kfac_opt_set_par(kfac, net->par); /* the preconditioning on the net's threads, between its passes */
        if (!(batch_stats = kfac_stats_new(net))) { snprintf(err, err_len, "out of memory"); rc = -ENOMEM; goto done; }
        if (o->out && (rc = rundir_ages_begin(o->out, kfac, err, err_len)) < 0) goto done;
    }
    rng_t label_rng;
    rng_seed(&label_rng, o->seed ^ 0xfeedULL);
    double t0 = clock_now_s(), eval_time = 0.0;
    long t;
    for (t = 0; t < o->steps; t++) {
        int n = batcher_next(bat, x, y);
        if (n <= 0) { snprintf(err, err_len, "batcher failed"); rc = -EIO; goto done; }
        net_forward(net, x, n, 1);
        if (kfac && o->stats_every > 0 && t % o->stats_every == 0) {
            /* Statistics first: a backward pass with the Fisher's labels. */
            const int *lab = y;
            if (o->fisher == KFAC_FISHER_TRUE) {
                kfac_sample_labels(net_probs(net), n, net->n_classes, &label_rng, ys);
                lab = ys;
            }
            net_backward(net, lab, NULL, NULL);
            if ((rc = kfac_stats_compute(batch_stats, net)) || (rc = kfac_opt_fold(kfac, batch_stats, t))) {
                snprintf(err, err_len, "statistics failed at step %ld (%d)", t, rc);
                goto done;
            }
        }
        if (kfac && o->inverse_every > 0 && t % o->inverse_every == 0) kfac_opt_invert_all(kfac);
        int n_correct = 0;
        float loss = net_backward(net, y, NULL, &n_correct);
        loss_hist[t % 50] = loss;
        res->examples += n;
        if (!isfinite(loss)) { snprintf(err, err_len, "loss is not finite at step %ld; lower the learning rate", t); rc = -ERANGE; goto done; }
        double step_size = 0.0;
        if (sgd) {
            step_size = sgd_lr_at(&o->lr, t);
            sgd_step(sgd, net->params, net->grads, step_size);
            /* The same average K-FAC keeps (kfac_opt_step calls it too). */
            if ((rc = kfac_step_polyak(sgd_polyak, net->params, net->n_params, o->polyak_decay, &sgd_polyak_count))) {
                snprintf(err, err_len, "Polyak average failed at step %ld (%d)", t, rc);
                goto done;
            }
        } else {
            kfac_step_info_t info;
            if ((rc = kfac_opt_step(kfac, net->params, net->grads, t, &info))) {
                snprintf(err, err_len, "K-FAC step failed at step %ld (%d)", t, rc);
                goto done;
            }
            step_size = info.step;
        }
        if (o->out) s_record_step(o->out, kfac, t, clock_now_s() - t0 - eval_time, loss, (double)n_correct / n, step_size);
        int last = t + 1 == o->steps;
        if ((o->eval_every > 0 && (t + 1) % o->eval_every == 0) || last) {
            double e0 = clock_now_s(), tl, ta, pl, pa;
            s_eval(net, test, o->eval_n, kfac ? kfac->polyak : sgd_polyak, kfac ? kfac->polyak_count : sgd_polyak_count,
                   saved, &tl, &ta, &pl, &pa);
            eval_time += clock_now_s() - e0;
            double el = clock_now_s() - t0 - eval_time;
            if (o->out) rundir_eval(o->out, (uint64_t)t + 1, el, tl, ta, pl, pa);
            if (o->progress) {
                double ml = 0.0;
                int m = t + 1 < 50 ? (int)(t + 1) : 50;
                for (int i = 0; i < m; i++) ml += loss_hist[i];
                /* tools/kfac-sweep reads these fields by position: add new ones at the end. */
                fprintf(o->progress, "step %6ld/%ld  epoch %5.2f  train loss %.4f  test loss %.4f  test acc %6.2f%%  %6.1f img/s  %.1fs"
                        "  polyak loss %.4f acc %6.2f%%\n",
                        t + 1, o->steps, (double)res->examples / train->n, ml / m, tl, 100.0 * ta,
                        res->examples / (el > 0 ? el : 1e-9), el, pl, 100.0 * pa);
                fflush(o->progress);
            }
            if (o->target_acc > 0 && (ta >= o->target_acc || pa >= o->target_acc) && res->steps_to_target < 0) {
                res->steps_to_target = t + 1;
                res->seconds_to_target = el;
                res->target_by_polyak = ta < o->target_acc;
                t++;
                break;
            }
        }
    }
    res->steps = t;
    res->seconds = clock_now_s() - t0 - eval_time;
    {
        int m = t < 50 ? (int)t : 50;
        double ml = 0.0;
        for (int i = 0; i < m; i++) ml += loss_hist[i];
        res->final_train_loss = m ? ml / m : 0.0;
    }
    double e0 = clock_now_s();
    s_eval(net, test, 0, kfac ? kfac->polyak : sgd_polyak, kfac ? kfac->polyak_count : sgd_polyak_count, saved,
           &res->test_loss, &res->test_acc, &res->polyak_loss, &res->polyak_acc);
    res->eval_seconds = eval_time + (clock_now_s() - e0);
    if (o->out) {
        const float *polyak = kfac ? kfac->polyak : sgd_polyak;
        long count = kfac ? kfac->polyak_count : sgd_polyak_count;
        export_info_t info = {.step = (uint64_t)t, .test_loss = res->test_loss, .test_acc = res->test_acc,
                              .polyak_loss = res->polyak_loss, .polyak_acc = res->polyak_acc, .eval_n = test->n,
                              .eval_step = (uint64_t)t, .program = "kfac-train", .dataset = o->dataset, .norm = o->norm};
        if ((rc = export_write(o->out, net, net->params, count > 0 ? polyak : NULL, NULL, &info, err, err_len)) < 0)
            goto done;
    }
done:
    batcher_free(&bat);
    sgd_free(&sgd);
    kfac_opt_free(&kfac);
    kfac_stats_free(&batch_stats);
    free(x); free(y); free(ys); free(saved); free(loss_hist); free(sgd_polyak);
    return rc;
}
