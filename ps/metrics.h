/* ps/metrics.h — the parameter server's run folder and log helpers.
 *
 * The PS writes its run into [run] out_dir through common/run/rundir.h
 * (steps.csv, eval.csv, config.ini, model.txt; at the end params.npy,
 * params_polyak.npy and manifest.json, see common/run/export.h), plus
 *   endpoint   the endpoint the PS actually bound, one line (so a script
 *              that binds port 0 can find it).
 *
 * Threads: the PS's loop thread.
 */
#ifndef KFAC_PS_METRICS_H
#define KFAC_PS_METRICS_H

#include <stddef.h>

#include "common/run/rundir.h"

/* The PS's step row is the run folder's. */
typedef rundir_step_row_t ps_step_row_t;

/* "2m18s", "1h02m", "45s", "0.8s" into buf; returns buf. */
const char *ps_format_duration(double seconds, char *buf, size_t len);

#endif
