/* tests/lib/ps_cfg.h — a kfac-ps configuration over a small MLP, for the
 * unit tests of ps/ units that are built from a runcfg_t (model, schedule).
 *
 * The model (input 1x4x4, fc 6, relu, fc 3, softmax) is written to a fresh
 * temporary file whose name is left in path; the caller unlinks it. Fails
 * the running Check test (ck_assert) on error. */
#ifndef KFAC_TESTS_LIB_PS_CFG_H
#define KFAC_TESTS_LIB_PS_CFG_H

#include <stddef.h>

#include "common/run/runcfg.h"

/* The model text written to the file. */
extern const char *const test_ps_cfg_model;

/* Load c as kfac-ps would from: --seed 5 --model.file <path>
 * --optimizer.kind <kind> --data.dir /nonexistent/kfac-data, then the
 * n_extra arguments of extra (at most 20). prefix names the temporary file
 * (/tmp/<prefix>.XXXXXX); path_len must hold it. */
void test_ps_cfg(runcfg_t *c, const char *prefix, const char *kind, char *path, size_t path_len,
                 char *const *extra, int n_extra);

#endif
