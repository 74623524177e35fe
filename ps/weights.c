/* ps/weights.c — see export.h. */
#include "ps/weights.h"

#include <math.h>
#include <string.h>

#include "common/base/log.h"
#include "common/run/export.h"

int ps_weights_export(ps_server_t *s) {
    if (!s->metrics || !s->model.net) return 0;
    export_info_t info;
    memset(&info, 0, sizeof info);
    info.step = (uint64_t)ps_round_version(s->round);
    info.program = "kfac-ps";
    info.dataset = runcfg_dataset_name(s->cfg);
    dataset_source_t src; /* [data] set = idx | npy: the normalization the run used (given or computed) */
    char serr[256];
    if (runcfg_data_source(s->cfg, &src, serr, sizeof serr) == 0 && src.kind != DATASET_SOURCE_NAMED && src.has_norm)
        info.norm = &src.norm;
    const ps_eval_result_t *ev = ps_eval_last(s->eval);
    if (ev) {
        info.test_loss = ev->loss;
        info.test_acc = ev->acc;
        info.polyak_loss = ev->polyak_loss;
        info.polyak_acc = ev->polyak_acc;
        info.eval_n = ev->n;
        info.eval_step = ev->step;
    } else {
        /* no evaluation finished: the manifest says so with null figures */
        info.test_loss = info.test_acc = info.polyak_loss = info.polyak_acc = NAN;
    }
    const float *polyak = ps_model_polyak(&s->model);
    char err[600];
    int rc = export_write(s->metrics, s->model.net, s->model.net->params, polyak, s->model.net->state, &info, err,
                          sizeof err);
    if (rc < 0) log_error("weights not saved: %s", err);
    else log_info("weights of step %ld saved in %s (params.npy, params_polyak.npy, manifest.json)", ps_round_version(s->round),
                  rundir_path(s->metrics));
    return rc;
}
