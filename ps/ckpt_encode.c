/* ps/ckpt_encode.c — see ckpt.h: ps_ckpt_encode, the writer of every
 * record of a checkpoint (the order and contents that ps/ckpt.c checks on
 * restore) and of the header. The bytes themselves (buffers, values, record
 * frames, CRC-32) are ps/ckpt_wire.c; the files are ps/ckpt_file.c. */
#include "ps/ckpt.h"

#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "ps/ckpt_wire.h"

static void s_put_inverse(ckw_wbuf_t *w, const kfac_inverse_t *inv) {
    ckw_put_u32(w, inv->valid ? 1u : 0u);
    ckw_put_u32(w, (uint32_t)inv->method);
    ckw_put_f64(w, (double)inv->damping_used);
    ckw_put_u64(w, inv->n_updates);
    if (!inv->valid) return;
    size_t nn = (size_t)inv->n * (size_t)inv->n;
    if (inv->method == KFAC_INV_EIGEN) {
        ckw_put_floats(w, inv->Q, nn);
        ckw_put_floats(w, inv->v, (size_t)inv->n);
    } else {
        ckw_put_floats(w, inv->inv, nn);
    }
}

int ps_ckpt_encode(const ps_ckpt_state_t *st, uint8_t **out, size_t *out_len, char *err, size_t err_len) {
    *out = NULL;
    *out_len = 0;
    if (!st || !st->net || (st->kfac && st->n_blocks != st->kfac->n_blocks) || (st->sched && !st->kfac) ||
        (st->refresh && !st->sched)) {
        snprintf(err, err_len, "checkpoint: inconsistent state to save");
        return -EINVAL;
    }
    const net_t *net = st->net;
    ckw_wbuf_t w = {0};
    uint8_t hdr[PS_CKPT_HEADER_LEN] = {0};
    ckw_put(&w, hdr, sizeof hdr); /* filled at the end */

    size_t at = ckw_rec_begin(&w, CKW_META);
    ckw_put_u32(&w, ckw_model_crc(st->model_text));
    ckw_put_u64(&w, net->n_params);
    ckw_put_u64(&w, net->n_state);
    ckw_put_i64(&w, st->t);
    ckw_put_u64(&w, st->steps_done);
    ckw_put_f64(&w, st->wall_s);
    ckw_put_u32(&w, st->round_folded ? 1u : 0u);
    ckw_put_u64(&w, st->next_job_id);
    ckw_put_u32(&w, (st->kfac ? 1u : 0u) | (st->sgd ? 2u : 0u) | (st->sched ? 4u : 0u) | (st->refresh ? 8u : 0u));
    ckw_put_u32(&w, (uint32_t)st->n_blocks);
    ckw_put_u32(&w, PS_CKPT_COUNTERS);
    for (int i = 0; i < PS_CKPT_COUNTERS; i++) ckw_put_u64(&w, st->counters[i]);
    ckw_rec_end(&w, at);

    at = ckw_rec_begin(&w, CKW_PRMS);
    ckw_put_floats(&w, net->params, net->n_params);
    ckw_rec_end(&w, at);
    at = ckw_rec_begin(&w, CKW_BNST);
    ckw_put_floats(&w, net->state, net->n_state);
    ckw_rec_end(&w, at);

    if (st->sgd) {
        /* velocity (n), then SGD's Polyak average: its count and n_params floats */
        at = ckw_rec_begin(&w, CKW_SGDV);
        ckw_put_floats(&w, st->sgd->v, st->sgd->n);
        ckw_put_i64(&w, st->sgd_polyak_count ? *st->sgd_polyak_count : 0);
        ckw_put_floats(&w, st->sgd_polyak, st->sgd_polyak ? net->n_params : 0);
        ckw_rec_end(&w, at);
    }
    if (st->kfac) {
        const kfac_opt_t *k = st->kfac;
        at = ckw_rec_begin(&w, CKW_KOPT);
        ckw_put_i64(&w, k->polyak_count);
        ckw_put_u64(&w, k->n_folds);
        ckw_put_u64(&w, k->n_identity_layers);
        ckw_put_u64(&w, k->n_precond_errors);
        ckw_put_f64(&w, k->opts.damping);
        const uint64_t *is = &k->inv_stats.n_calls;
        _Static_assert(sizeof(kfac_inverse_stats_t) == CKW_N_INV_STATS * sizeof(uint64_t),
                       "kfac_inverse_stats_t is stored as CKW_N_INV_STATS counters");
        for (int i = 0; i < CKW_N_INV_STATS; i++) ckw_put_u64(&w, is[i]);
        ckw_put_floats(&w, k->mom, net->n_params);
        ckw_put_floats(&w, k->polyak, net->n_params);
        ckw_rec_end(&w, at);

        at = ckw_rec_begin(&w, CKW_FACT);
        ckw_put_u32(&w, (uint32_t)k->avg->n_layers);
        for (int l = 0; l < k->avg->n_layers; l++) {
            const kfac_layer_stats_t *ls = &k->avg->layers[l];
            ckw_put_u32(&w, (uint32_t)ls->n_factors);
            for (int f = 0; f < ls->n_factors; f++) {
                const kfac_factor_t *fa = &ls->f[f];
                size_t n = kfac_factor_len(fa);
                ckw_put_u32(&w, (uint32_t)fa->kind);
                ckw_put_u32(&w, (uint32_t)fa->dim);
                ckw_put_f64(&w, fa->n_samples);
                ckw_put_i64(&w, fa->n_updates);
                ckw_put_u64(&w, n);
                ckw_put_floats(&w, fa->data, n);
            }
        }
        ckw_rec_end(&w, at);

        at = ckw_rec_begin(&w, CKW_BLCK);
        ckw_put_u32(&w, (uint32_t)k->n_blocks);
        for (int b = 0; b < k->n_blocks; b++) {
            const kfac_block_t *kb = &k->blocks[b];
            ckw_put_u32(&w, (uint32_t)kb->n);
            ckw_put_i64(&w, kb->factor_version);
            ckw_put_i64(&w, kb->inv_version);
            ckw_put_u64(&w, kb->n_installed);
            s_put_inverse(&w, kb->inv);
        }
        ckw_rec_end(&w, at);
    }
    if (st->sched) {
        at = ckw_rec_begin(&w, CKW_SCHD);
        ckw_put_u32(&w, (uint32_t)st->n_blocks);
        for (int b = 0; b < st->n_blocks; b++) {
            const ps_sched_block_t *sb = &st->sched[b];
            ckw_put_u32(&w, (uint32_t)sb->n);
            ckw_put_i64(&w, sb->factor_version);
            ckw_put_i64(&w, sb->inv_version);
            ckw_put_i64(&w, sb->failed_version);
            ckw_put_u32(&w, sb->due ? 1u : 0u);
        }
        ckw_rec_end(&w, at);
    }
    if (st->refresh) {
        at = ckw_rec_begin(&w, CKW_RFSH);
        ckw_put_u32(&w, (uint32_t)st->n_refresh);
        for (int b = 0; b < st->n_refresh; b++) {
            const kfac_refresh_t *r = st->refresh[b];
            ckw_put_u64(&w, r->n);
            ckw_put_u32(&w, (uint32_t)r->have);
            ckw_put_i64(&w, r->delta);
            ckw_put_i64(&w, r->delta_prev);
            ckw_put_i64(&w, r->next);
            ckw_put_floats(&w, r->x1, r->n);
            ckw_put_floats(&w, r->x2, r->n);
        }
        ckw_rec_end(&w, at);
    }
    at = ckw_rec_begin(&w, CKW_NORM);
    {
        const ps_norm_hist_t *h = st->norms;
        int n = h ? h->n : 0;
        ckw_put_u32(&w, (uint32_t)n);
        ckw_put_u32(&w, h ? (uint32_t)h->next : 0u);
        for (int i = 0; i < n; i++) ckw_put_f64(&w, h->v[i]);
    }
    ckw_rec_end(&w, at);
    at = ckw_rec_begin(&w, CKW_OWNR);
    {
        int n = ps_owners_count(st->owners), m = 0;
        for (int i = 0; i < n; i++) {
            msg_role_t role = ps_owners_at(st->owners, i)->role;
            m += role == MSG_ROLE_WORKER || role == MSG_ROLE_STATSD;
        }
        ckw_put_u32(&w, (uint32_t)m);
        for (int i = 0; i < n; i++) {
            const ps_owner_t *b = ps_owners_at(st->owners, i);
            if (b->role != MSG_ROLE_WORKER && b->role != MSG_ROLE_STATSD) continue; /* never bound */
            char key[AUTH_KEY_Z85_LEN] = {0};
            memcpy(key, b->key, strnlen(b->key, sizeof key));
            ckw_put_u32(&w, b->role == MSG_ROLE_WORKER ? CKW_ROLE_WORKER : CKW_ROLE_STATSD);
            ckw_put_u32(&w, b->id);
            ckw_put(&w, key, sizeof key);
        }
    }
    ckw_rec_end(&w, at);
    at = ckw_rec_begin(&w, CKW_HIST);
    for (int set = 0; set < 2; set++) {
        const ps_norm_hist_t *hs = set == 0 ? st->clip_hists : st->trace_hists;
        const int nh = hs ? (set == 0 ? st->n_clip_hists : st->n_trace_hists) : 0;
        ckw_put_u32(&w, (uint32_t)nh);
        for (int k = 0; k < nh; k++) {
            ckw_put_u32(&w, (uint32_t)hs[k].n);
            ckw_put_u32(&w, (uint32_t)hs[k].next);
            for (int i = 0; i < hs[k].n; i++) ckw_put_f64(&w, hs[k].v[i]);
        }
    }
    ckw_rec_end(&w, at);
    at = ckw_rec_begin(&w, CKW_IDNT);
    {
        int n = st->idents ? ps_idents_save(st->idents, NULL, 0) : 0;
        ps_ident_saved_t *v = n ? calloc((size_t)n, sizeof *v) : NULL;
        if (n && !v) w.oom = 1;
        else if (n) n = ps_idents_save(st->idents, v, n);
        ckw_put_u32(&w, v ? (uint32_t)n : 0u);
        for (int i = 0; v && i < n; i++) {
            const ps_ident_saved_t *x = &v[i];
            char key[AUTH_KEY_Z85_LEN] = {0};
            memcpy(key, x->key, strnlen(x->key, sizeof key));
            ckw_put_u32(&w, x->role == MSG_ROLE_WORKER   ? CKW_ROLE_WORKER
                            : x->role == MSG_ROLE_STATSD ? CKW_ROLE_STATSD
                                                         : CKW_ROLE_INVERTD);
            ckw_put_u32(&w, x->id);
            ckw_put(&w, key, sizeof key);
            ckw_put_u32(&w, x->n_stalls);
            ckw_put_u32(&w, x->n_bad_inverses);
            ckw_put_u32(&w, (x->demoted ? CKW_IDNT_DEMOTED : 0u) | (x->distrusted ? CKW_IDNT_DISTRUSTED : 0u) |
                                (x->has_stats_version ? CKW_IDNT_STATS_VERSION : 0u));
            ckw_put_u64(&w, x->stats_version);
        }
        free(v);
    }
    ckw_rec_end(&w, at);
    at = ckw_rec_begin(&w, CKW_DRFT);
    {
        const int n = st->drift ? ps_drift_save(st->drift, NULL, 0) : 0;
        ps_drift_saved_t *v = n ? calloc((size_t)n, sizeof *v) : NULL;
        if (n && !v) w.oom = 1;
        const int k = v ? ps_drift_save(st->drift, v, n) : 0;
        const size_t np = st->drift ? ps_drift_n_params(st->drift) : 0;
        ckw_put_u64(&w, st->drift ? ps_drift_judged(st->drift) : 0);
        ckw_put_u64(&w, (uint64_t)np);
        ckw_put_u32(&w, (uint32_t)k);
        for (int i = 0; i < k; i++) {
            const ps_drift_saved_t *x = &v[i];
            char key[PS_DRIFT_KEY_LEN] = {0};
            memcpy(key, x->key, strnlen(x->key, sizeof key - 1));
            ckw_put_u32(&w, x->role == MSG_ROLE_WORKER   ? CKW_ROLE_WORKER
                            : x->role == MSG_ROLE_STATSD ? CKW_ROLE_STATSD
                                                         : CKW_ROLE_INVERTD);
            ckw_put_u32(&w, x->id);
            ckw_put(&w, key, sizeof key);
            ckw_put_u64(&w, x->judged_at);
            ckw_put_u32(&w, (x->has_m ? CKW_DRFT_M : 0u) | (x->refusing ? CKW_DRFT_REFUSING : 0u));
            ckw_put_u32(&w, (uint32_t)x->n);
            ckw_put_u32(&w, (uint32_t)x->n_judged);
            ckw_put_f64(&w, x->mu);
            ckw_put_f64(&w, x->s2);
            ckw_put_f64(&w, x->gbar);
            ckw_put_f64(&w, x->z);
            if (x->has_m) ckw_put_floats(&w, x->m, np);
        }
        free(v);
    }
    ckw_rec_end(&w, at);
    if (w.oom) {
        free(w.p);
        snprintf(err, err_len, "checkpoint: out of memory encoding %zu bytes", w.len);
        return -ENOMEM;
    }
    /* header */
    uint64_t payload = (uint64_t)(w.len - PS_CKPT_HEADER_LEN);
    uint8_t *h = w.p;
    memcpy(h, PS_CKPT_MAGIC, 8);
    for (int i = 0; i < 4; i++) h[8 + i] = (uint8_t)(PS_CKPT_VERSION >> (8 * i));
    for (int i = 0; i < 4; i++) h[12 + i] = (uint8_t)(PS_CKPT_HEADER_LEN >> (8 * i));
    for (int i = 0; i < 8; i++) h[16 + i] = (uint8_t)(payload >> (8 * i));
    uint32_t c = ckw_crc(w.p + PS_CKPT_HEADER_LEN, (size_t)payload);
    for (int i = 0; i < 4; i++) h[24 + i] = (uint8_t)(c >> (8 * i));
    c = ckw_crc(h, 28);
    for (int i = 0; i < 4; i++) h[28 + i] = (uint8_t)(c >> (8 * i));
    *out = w.p;
    *out_len = w.len;
    return 0;
}
