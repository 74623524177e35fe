/* ps/weights.h — the parameter server's weights at the end of a run:
 * params.npy, params_polyak.npy (state.npy with batch norm) and
 * manifest.json in [run] out_dir (format: common/run/export.h). The
 * manifest's figures are the newest evaluation's (eval_n test examples, at
 * the step it names). Loop thread only. */
#ifndef KFAC_PS_WEIGHTS_H
#define KFAC_PS_WEIGHTS_H

#include "ps/server_int.h"

/* Write the weights of version s->t into s->metrics' folder. Logs what it
 * wrote or why it could not; returns 0 or a negative errno. */
int ps_weights_export(ps_server_t *s);

#endif
