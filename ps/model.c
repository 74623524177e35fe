/* ps/model.c — see model.h. */
#include "ps/model.h"

#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "common/base/affinity.h"
#include "common/base/log.h"
#include "common/kfac/kfac_step.h"
#include "common/nn/nn_par.h"

int ps_model_init(ps_model_t *m, const runcfg_t *c, char *err, size_t err_len) {
    memset(m, 0, sizeof *m);
    char perr[512] = "";
    if (!(m->net = net_load(c->model, 1, perr, sizeof perr))) {
        snprintf(err, err_len, "%s", perr);
        return -EINVAL;
    }
    m->net->fc_doubly_min_in = c->doubly_min_in;
    net_init_params(m->net, c->seed);
    /* The update on every core while the workers wait for it (the threads
     * sleep between updates): K-FAC's large products, and for either
     * optimizer the passes over all parameters. */
    int n_up = c->ps_update_threads > 0 ? c->ps_update_threads : affinity_count();
    if (n_up > 64) n_up = 64;
    if (n_up > 1 && !(m->update_par = nn_par_new(n_up)))
        log_warn("cannot start %d update threads; the update runs on the loop thread alone", n_up);
    log_info("update: on %d thread%s", nn_par_threads(m->update_par), nn_par_threads(m->update_par) == 1 ? "" : "s");
    if (c->optimizer == RUNCFG_OPTIMIZER_KFAC) {
        kfac_opts_t ko;
        runcfg_kfac_opts(c, &ko);
        if (!(m->kfac = kfac_opt_new(m->net, &ko, err, err_len))) return -EINVAL;
        kfac_opt_set_par(m->kfac, m->update_par);
        return 0;
    }
    if (!(c->momentum >= 0.0 && c->momentum < 1.0) || !(c->weight_decay >= 0.0)) {
        snprintf(err, err_len, "[optimizer] momentum must be in [0, 1) and weight_decay >= 0 (got %g, %g)", c->momentum,
                 c->weight_decay);
        return -EINVAL;
    }
    /* SGD keeps the same Polyak average of the iterates that K-FAC keeps,
     * evaluated beside the current parameters. */
    if (!(m->sgd = sgd_new(m->net, c->momentum, c->weight_decay)) ||
        !(m->sgd_polyak = malloc(m->net->n_params * sizeof(float) + 1))) {
        snprintf(err, err_len, "out of memory (sgd)");
        return -ENOMEM;
    }
    runcfg_lr_sched(c, &m->lr);
    m->sgd_polyak_decay = runcfg_polyak_decay(c);
    return 0;
}

void ps_model_release(ps_model_t *m) {
    kfac_opt_free(&m->kfac);
    nn_par_free(&m->update_par);
    sgd_free(&m->sgd);
    free(m->sgd_polyak);
    net_free(&m->net);
    memset(m, 0, sizeof *m);
}

int ps_model_update(ps_model_t *m, const float *grad, int grad_finite, const kfac_lowrank_set_t *lowrank, long t,
                    double *step_size, size_t *bad_index) {
    *step_size = 0.0;
    if (m->kfac) {
        kfac_step_info_t info;
        memset(&info, 0, sizeof info);
        int rc = (grad_finite ? kfac_opt_step_finite : kfac_opt_step_lowrank)(m->kfac, m->net->params, grad, lowrank,
                                                                                 t, &info);
        if (rc < 0) return rc;
        *step_size = info.step;
        m->last = info;
        return 0;
    }
    /* Two passes over the parameters on the update's pool: the check
     * (unless the caller's pass made it), then sgd_step's rule and the
     * Polyak average fused (kfac_step_tail). */
    const size_t bad = grad_finite ? m->net->n_params : kfac_step_copy_finite(NULL, grad, m->net->n_params, m->update_par);
    if (bad < m->net->n_params) {
        *bad_index = bad;
        return -ERANGE;
    }
    *step_size = sgd_lr_at(&m->lr, t);
    const kfac_step_tail_t tail = {
        .form = KFAC_STEP_FORM_SGD,
        .n = m->net->n_params,
        .w = m->net->params,
        .mom = m->sgd->v,
        .v = grad,
        .wd_mask = m->sgd->decay_mask,
        .step = *step_size,
        .momentum = m->sgd->momentum,
        .wd = m->sgd->weight_decay,
        .avg = m->sgd_polyak,
        .polyak_decay = m->sgd_polyak_decay,
        .polyak_count = &m->sgd_polyak_count,
    };
    /* The momentum, decay and step were validated with the configuration:
     * this cannot fail. */
    return kfac_step_tail(&tail, m->update_par);
}

const float *ps_model_polyak(const ps_model_t *m) {
    return m->kfac && m->kfac->polyak_count > 0  ? m->kfac->polyak
           : m->sgd && m->sgd_polyak_count > 0 ? m->sgd_polyak
                                               : NULL;
}

int ps_model_forget(ps_model_t *m, double since_s) {
    int forgot = 0;
    if (m->kfac) {
        memset(m->kfac->mom, 0, m->net->n_params * sizeof(float));
        for (int b = 0; b < m->kfac->n_blocks; b++)
            if (m->kfac->blocks[b].inv->valid && m->kfac->blocks[b].inv_time_s >= since_s) {
                m->kfac->blocks[b].inv->valid = 0;
                forgot++;
            }
    } else if (m->sgd) {
        memset(m->sgd->v, 0, m->net->n_params * sizeof(float));
    }
    return forgot;
}

const char *ps_model_layer_name(const void *net, int layer) {
    const net_t *n = net;
    return layer >= 0 && layer < n->n_layers ? n->layers[layer].name : NULL;
}
