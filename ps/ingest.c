/* ps/ingest.c — see wire.h. */
#include "ps/ingest.h"

#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "common/kfac/kfac_linalg.h"

msg_method_t ps_ingest_method(kfac_inv_method_t m) {
    return m == KFAC_INV_EIGEN ? MSG_METHOD_EIGEN : MSG_METHOD_CHOLESKY;
}

void ps_ingest_stats_clear(kfac_stats_t *s) {
    for (int j = 0; j < s->n_layers; j++)
        for (int f = 0; f < s->layers[j].n_factors; f++) {
            s->layers[j].f[f].n_samples = 0.0;
            s->layers[j].f[f].n_updates = 0;
        }
}

int ps_ingest_stats_unpack(const wire_shape_t *sh, const msg_stats_t *st, double n_examples,
                         kfac_stats_t *out, float *scratch, char *err, size_t err_len) {
    ps_ingest_stats_clear(out);
    for (size_t l = 0; l < st->n_layers; l++) {
        const msg_layer_stats_t *ml = &st->layers[l];
        int slot = kfac_stats_find(out, (int)ml->layer);
        if (slot < 0) {
            snprintf(err, err_len, "stats: layer %u has no Kronecker factors", ml->layer);
            goto fail;
        }
        kfac_layer_stats_t *ls = &out->layers[slot];
        if ((int)ml->n_factors != ls->n_factors) {
            snprintf(err, err_len, "stats: layer %u has %d factors, got %zu", ml->layer, ls->n_factors,
                     ml->n_factors);
            goto fail;
        }
        size_t off = 0;
        for (int f = 0; f < ls->n_factors; f++) {
            size_t len = kfac_factor_packed_len(&ls->f[f]);
            if (ml->factors[f].n_data != len || off + len > sh->max_layer_floats) {
                snprintf(err, err_len, "stats: layer %u factor %d needs %zu floats, got %zu", ml->layer, f, len,
                         ml->factors[f].n_data);
                goto fail;
            }
            memcpy(scratch + off, ml->factors[f].data, len * sizeof(float));
            off += len;
        }
        if (kfac_stats_layer_unpack(ls, scratch, off, n_examples) != 0) {
            snprintf(err, err_len, "stats: layer %u: not finite or a negative diagonal", ml->layer);
            goto fail;
        }
    }
    return 0;
fail:
    ps_ingest_stats_clear(out);
    return -EINVAL;
}

int ps_ingest_block_of(const kfac_opt_t *k, uint32_t layer, uint32_t factor) {
    if (!k) return -1;
    for (int b = 0; b < k->n_blocks; b++)
        if ((uint32_t)k->blocks[b].layer == layer && (uint32_t)k->blocks[b].factor == factor) return b;
    return -1;
}

int ps_ingest_result_load(const msg_job_result_t *r, int n, float damping, float *full, kfac_inverse_t *inv,
                        char *err, size_t err_len) {
    if (n < 1 || r->n != (uint32_t)n || !inv || inv->n != n) {
        snprintf(err, err_len, "job_result: n=%u, the block has n=%d", r->n, n);
        return -EINVAL;
    }
    inv->valid = false;
    int rc;
    if (r->method == MSG_METHOD_CHOLESKY) {
        if (r->n_inverse != kfac_linalg_packed_len(n)) {
            snprintf(err, err_len, "job_result.inverse: %zu floats, n=%d needs %zu", r->n_inverse, n,
                     kfac_linalg_packed_len(n));
            return -EINVAL;
        }
        /* A damped SPD inverse has a positive diagonal; checked here so a bad
         * result is turned away quietly (the loader would log each one). */
        for (int i = 0; i < n; i++)
            if (!(r->inverse[kfac_linalg_packed_index(n, i, i)] > 0.0f)) {
                snprintf(err, err_len, "job_result.inverse: diagonal element %d is not positive", i);
                return -EDOM;
            }
        /* packed upper -> full n x n row-major, both triangles */
        rc = kfac_linalg_unpack_upper(r->inverse, n, full);
        if (rc == 0) rc = kfac_inverse_load_cholesky(inv, full, damping);
    } else if (r->method == MSG_METHOD_EIGEN) {
        if (r->n_eigvecs != (size_t)n * (size_t)n || r->n_eigvals != (size_t)n) {
            snprintf(err, err_len, "job_result: eigen result of n=%d with %zu eigvecs and %zu eigvals", n,
                     r->n_eigvecs, r->n_eigvals);
            return -EINVAL;
        }
        rc = kfac_inverse_load_eigen(inv, r->eigvecs, r->eigvals, damping);
    } else {
        rc = -EINVAL;
    }
    if (rc != 0) {
        inv->valid = false;
        snprintf(err, err_len, "job_result: the inverse was rejected (%s)",
                 rc == -EDOM ? "not finite or a non-positive diagonal" : "bad shape or method");
        return rc < 0 ? rc : -EINVAL;
    }
    return 0;
}

