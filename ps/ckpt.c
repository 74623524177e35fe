/* ps/ckpt.c — see ckpt.h: ps_ckpt_decode, the reader of a checkpoint's
 * contents: the header's checks, then one walk over the records that runs
 * twice on restore: first checking everything, then writing it (so a bad
 * file never leaves the state half restored). The writer of the records is
 * ps/ckpt_encode.c, the bytes themselves (buffers, values, record frames,
 * CRC-32) ps/ckpt_wire.c, the files ps/ckpt_file.c. */
#include "ps/ckpt.h"

#include <errno.h>
#include <float.h>
#include <inttypes.h>
#include <math.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "ps/ckpt_wire.h"

/* ---- decode ----------------------------------------------------------------------- */

typedef struct {
    ps_ckpt_state_t *st;
    int apply;          /* 0: check only; 1: write into st */
    double now_s;
    const char *origin;
    char *err;
    size_t err_len;
    int rc;             /* first error */
    uint32_t flags;     /* META: what the file holds */
    uint32_t version;   /* the file's format version */
} s_dec_t;

static int s_fail(s_dec_t *d, int rc, const char *fmt, ...) __attribute__((format(printf, 3, 4)));
static int s_fail(s_dec_t *d, int rc, const char *fmt, ...) {
    if (d->rc == 0) {
        int n = snprintf(d->err, d->err_len, "%s: ", d->origin);
        if (n < 0 || (size_t)n >= d->err_len) n = 0;
        va_list ap;
        va_start(ap, fmt);
        vsnprintf(d->err + n, d->err_len - (size_t)n, fmt, ap);
        va_end(ap);
        d->rc = rc;
    }
    return rc;
}

static int s_short(s_dec_t *d, const char *what) {
    return s_fail(d, -EBADMSG, "record %s is shorter than its contents (corrupt file)", what);
}

static int s_dec_meta(s_dec_t *d, ckw_rbuf_t *r) {
    ps_ckpt_state_t *st = d->st;
    uint32_t mcrc = ckw_take_u32(r);
    uint64_t np = ckw_take_u64(r), ns = ckw_take_u64(r);
    int64_t t = ckw_take_i64(r);
    uint64_t steps_done = ckw_take_u64(r);
    double wall = ckw_take_f64(r);
    uint32_t folded = ckw_take_u32(r);
    uint64_t next_job = ckw_take_u64(r);
    uint32_t flags = ckw_take_u32(r), n_blocks = ckw_take_u32(r), n_counters = ckw_take_u32(r);
    if (r->bad) return s_short(d, "META");
    if (mcrc != ckw_model_crc(st->model_text))
        return s_fail(d, -EINVAL, "written for another model (the model text differs); resume with the same [model] file");
    if (np != st->net->n_params || ns != st->net->n_state)
        return s_fail(d, -EINVAL, "has %" PRIu64 " parameters and %" PRIu64 " state values, this model %zu and %zu", np,
                      ns, st->net->n_params, st->net->n_state);
    uint32_t want = (st->kfac ? 1u : 0u) | (st->sgd ? 2u : 0u) | (st->sched ? 4u : 0u) | (st->refresh ? 8u : 0u);
    if (flags != want)
        return s_fail(d, -EINVAL,
                      "written by a run with %s%s, this one uses %s%s; resume with the same [optimizer] kind and "
                      "[kfac] refresh",
                      flags & 1u ? "kfac" : "sgd", flags & 8u ? " and adaptive refresh" : "",
                      st->kfac ? "kfac" : "sgd", st->refresh ? " and adaptive refresh" : "");
    if (n_blocks != (uint32_t)st->n_blocks)
        return s_fail(d, -EINVAL, "has %u blocks, this model %d", n_blocks, st->n_blocks);
    if (t < 0 || (uint64_t)t != steps_done || !isfinite(wall) || wall < 0 || folded > 1 || n_counters > 1000)
        return s_fail(d, -EBADMSG, "META holds impossible values (step %" PRId64 ", steps done %" PRIu64 ")", t,
                      steps_done);
    uint64_t c[PS_CKPT_COUNTERS] = {0};
    for (uint32_t i = 0; i < n_counters; i++) {
        uint64_t v = ckw_take_u64(r);
        if (i < PS_CKPT_COUNTERS) c[i] = v;
    }
    if (r->bad) return s_short(d, "META");
    d->flags = flags;
    if (d->apply) {
        st->t = (long)t;
        st->steps_done = steps_done;
        st->wall_s = wall;
        st->round_folded = (int)folded;
        st->next_job_id = next_job;
        memcpy(st->counters, c, sizeof c);
    }
    return 0;
}

/* n floats, all finite, into dst when applying. */
static int s_dec_floats(s_dec_t *d, ckw_rbuf_t *r, float *dst, size_t n, const char *what) {
    if (!ckw_peek_finite(r, n)) {
        if (n > (r->len - r->at) / 4) return s_short(d, what);
        return s_fail(d, -EBADMSG, "%s holds NaN or Inf", what);
    }
    if (ckw_take_floats(r, d->apply ? dst : NULL, n) < 0) return s_short(d, what);
    return 0;
}

/* SGDV: the velocity, then the Polyak average's count and floats (n_params
 * of them when the run keeps one, st->sgd_polyak, else none). */
static int s_dec_sgdv(s_dec_t *d, ckw_rbuf_t *r) {
    const ps_ckpt_state_t *st = d->st;
    if (s_dec_floats(d, r, st->sgd->v, st->sgd->n, "the SGD velocity") < 0) return d->rc;
    int64_t pc = ckw_take_i64(r);
    if (r->bad) return s_short(d, "SGDV");
    if (pc < 0) return s_fail(d, -EBADMSG, "SGDV holds a negative Polyak count");
    size_t n = st->sgd_polyak ? st->net->n_params : 0;
    if (s_dec_floats(d, r, st->sgd_polyak, n, "SGD's Polyak average") < 0) return d->rc;
    if (d->apply && st->sgd_polyak_count) *st->sgd_polyak_count = (long)pc;
    return 0;
}

static int s_dec_kopt(s_dec_t *d, ckw_rbuf_t *r) {
    kfac_opt_t *k = d->st->kfac;
    int64_t pc = ckw_take_i64(r);
    uint64_t folds = ckw_take_u64(r), idl = ckw_take_u64(r), pe = ckw_take_u64(r);
    double damping = ckw_take_f64(r);
    uint64_t is[CKW_N_INV_STATS];
    for (int i = 0; i < CKW_N_INV_STATS; i++) is[i] = ckw_take_u64(r);
    if (r->bad) return s_short(d, "KOPT");
    if (pc < 0 || !(damping > 0) || !isfinite(damping)) return s_fail(d, -EBADMSG, "KOPT holds impossible values");
    size_t np = d->st->net->n_params;
    if (s_dec_floats(d, r, k->mom, np, "the momentum") < 0) return d->rc;
    if (s_dec_floats(d, r, k->polyak, np, "the Polyak average") < 0) return d->rc;
    if (d->apply) {
        k->polyak_count = (long)pc;
        k->n_folds = folds;
        k->n_identity_layers = idl;
        k->n_precond_errors = pe;
        k->opts.damping = damping;
        memcpy(&k->inv_stats.n_calls, is, sizeof is);
    }
    return 0;
}

static int s_dec_fact(s_dec_t *d, ckw_rbuf_t *r) {
    kfac_stats_t *avg = d->st->kfac->avg;
    uint32_t nl = ckw_take_u32(r);
    if (r->bad) return s_short(d, "FACT");
    if (nl != (uint32_t)avg->n_layers)
        return s_fail(d, -EINVAL, "has statistics of %u layers, this model %d", nl, avg->n_layers);
    for (int l = 0; l < avg->n_layers; l++) {
        kfac_layer_stats_t *ls = &avg->layers[l];
        uint32_t nf = ckw_take_u32(r);
        if (r->bad) return s_short(d, "FACT");
        if (nf != (uint32_t)ls->n_factors)
            return s_fail(d, -EINVAL, "layer %d has %u factors, this model %d", ls->layer, nf, ls->n_factors);
        for (int f = 0; f < ls->n_factors; f++) {
            kfac_factor_t *fa = &ls->f[f];
            uint32_t kind = ckw_take_u32(r), dim = ckw_take_u32(r);
            double ns = ckw_take_f64(r);
            int64_t nu = ckw_take_i64(r);
            uint64_t n = ckw_take_u64(r);
            if (r->bad) return s_short(d, "FACT");
            if (kind != (uint32_t)fa->kind || dim != (uint32_t)fa->dim || n != kfac_factor_len(fa))
                return s_fail(d, -EINVAL, "layer %d factor %d is of another kind or size (dim %u, this model %d)",
                              ls->layer, f, dim, fa->dim);
            if (!isfinite(ns) || ns < 0 || nu < 0)
                return s_fail(d, -EBADMSG, "layer %d factor %d has impossible counts", ls->layer, f);
            char what[64];
            snprintf(what, sizeof what, "layer %d factor %d", ls->layer, f);
            if (s_dec_floats(d, r, fa->data, (size_t)n, what) < 0) return d->rc;
            if (d->apply) {
                fa->n_samples = ns;
                fa->n_updates = (long)nu;
            }
        }
    }
    return 0;
}

static int s_dec_blck(s_dec_t *d, ckw_rbuf_t *r) {
    kfac_opt_t *k = d->st->kfac;
    uint32_t nb = ckw_take_u32(r);
    if (r->bad) return s_short(d, "BLCK");
    if (nb != (uint32_t)k->n_blocks) return s_fail(d, -EINVAL, "has %u blocks, this model %d", nb, k->n_blocks);
    for (int b = 0; b < k->n_blocks; b++) {
        kfac_block_t *kb = &k->blocks[b];
        uint32_t n = ckw_take_u32(r);
        int64_t fv = ckw_take_i64(r), iv = ckw_take_i64(r);
        uint64_t n_inst = ckw_take_u64(r);
        uint32_t valid = ckw_take_u32(r), method = ckw_take_u32(r);
        double damping = ckw_take_f64(r);
        uint64_t n_upd = ckw_take_u64(r);
        if (r->bad) return s_short(d, "BLCK");
        if (n != (uint32_t)kb->n) return s_fail(d, -EINVAL, "block %d has n=%u, this model n=%d", b, n, kb->n);
        if (fv < -1 || iv < -1 || valid > 1 || method > KFAC_INV_EIGEN || !isfinite(damping) || damping < 0 ||
            damping > FLT_MAX || /* the loaders take a float: checked here, not after the first write */
            (valid && iv < 0) || (!valid && iv >= 0))
            return s_fail(d, -EBADMSG, "block %d holds impossible values", b);
        size_t nn = (size_t)n * n;
        const float *Q = NULL, *v = NULL;
        if (valid) {
            char what[64];
            snprintf(what, sizeof what, "block %d's inverse", b);
            size_t cnt = method == KFAC_INV_EIGEN ? nn + n : nn;
            if (!ckw_peek_finite(r, cnt)) {
                if (cnt > (r->len - r->at) / 4) return s_short(d, "BLCK");
                return s_fail(d, -EBADMSG, "%s holds NaN or Inf", what);
            }
            if (method == KFAC_INV_CHOLESKY) {
                /* the loader wants a positive diagonal */
                for (uint32_t i = 0; i < n; i++) {
                    float x;
                    ckw_rbuf_t c = *r;
                    c.at += 4 * ((size_t)i * n + i);
                    ckw_take_floats(&c, &x, 1);
                    if (!(x > 0.0f)) return s_fail(d, -EBADMSG, "%s has a non-positive diagonal", what);
                }
            }
            if (d->apply) {
                float *buf = malloc(cnt * sizeof(float));
                if (!buf) return s_fail(d, -ENOMEM, "out of memory restoring block %d", b);
                ckw_take_floats(r, buf, cnt);
                Q = buf;
                v = buf + nn;
                int rc = method == KFAC_INV_EIGEN ? kfac_inverse_load_eigen(kb->inv, Q, v, (float)damping)
                                                  : kfac_inverse_load_cholesky(kb->inv, Q, (float)damping);
                free(buf);
                if (rc < 0) return s_fail(d, rc, "block %d's inverse was not accepted (%s)", b, strerror(-rc));
                kb->inv->n_updates = n_upd;
            } else {
                ckw_take_floats(r, NULL, cnt);
            }
        } else if (d->apply) {
            kb->inv->valid = false;
            kb->inv->n_updates = n_upd;
        }
        if (d->apply) {
            kb->factor_version = (long)fv;
            kb->inv_version = (long)iv;
            kb->n_installed = n_inst;
            kb->inv_time_s = d->now_s;
        }
    }
    return r->bad ? s_short(d, "BLCK") : 0;
}

static int s_dec_schd(s_dec_t *d, ckw_rbuf_t *r) {
    uint32_t nb = ckw_take_u32(r);
    if (r->bad) return s_short(d, "SCHD");
    if (nb != (uint32_t)d->st->n_blocks) return s_fail(d, -EINVAL, "SCHD has %u blocks, this model %d", nb, d->st->n_blocks);
    for (int b = 0; b < d->st->n_blocks; b++) {
        ps_sched_block_t *sb = &d->st->sched[b];
        uint32_t n = ckw_take_u32(r);
        int64_t fv = ckw_take_i64(r), iv = ckw_take_i64(r), failed = ckw_take_i64(r);
        uint32_t due = ckw_take_u32(r);
        if (r->bad) return s_short(d, "SCHD");
        if (n != (uint32_t)sb->n) return s_fail(d, -EINVAL, "scheduler block %d has n=%u, this model n=%d", b, n, sb->n);
        if (fv < -1 || iv < -1 || failed < -1 || due > 1)
            return s_fail(d, -EBADMSG, "scheduler block %d holds impossible values", b);
        if (d->apply) {
            ps_sched_block_init(sb, sb->n); /* no job in flight after a restart */
            sb->factor_version = (long)fv;
            sb->inv_version = (long)iv;
            sb->failed_version = (long)failed;
            sb->due = (int)due;
        }
    }
    return 0;
}

static int s_dec_rfsh(s_dec_t *d, ckw_rbuf_t *r) {
    uint32_t nb = ckw_take_u32(r);
    if (r->bad) return s_short(d, "RFSH");
    if (nb != (uint32_t)d->st->n_refresh)
        return s_fail(d, -EINVAL, "RFSH has %u refresh trackers, this model %d", nb, d->st->n_refresh);
    for (int b = 0; b < d->st->n_refresh; b++) {
        kfac_refresh_t *rf = d->st->refresh[b];
        uint64_t n = ckw_take_u64(r);
        uint32_t have = ckw_take_u32(r);
        int64_t delta = ckw_take_i64(r), prev = ckw_take_i64(r), next = ckw_take_i64(r);
        if (r->bad) return s_short(d, "RFSH");
        if (n != rf->n) return s_fail(d, -EINVAL, "refresh block %d has %" PRIu64 " values, this model %zu", b, n, rf->n);
        if (have > 2 || delta < 1 || prev < 0 || delta > INT32_MAX || prev > INT32_MAX)
            return s_fail(d, -EBADMSG, "refresh block %d holds impossible values", b);
        if (s_dec_floats(d, r, rf->x1, rf->n, "a refresh history") < 0) return d->rc;
        if (s_dec_floats(d, r, rf->x2, rf->n, "a refresh history") < 0) return d->rc;
        if (d->apply) {
            rf->have = (int)have;
            rf->delta = (int)delta;
            rf->delta_prev = (int)prev;
            rf->next = (long)next;
        }
    }
    return 0;
}

static int s_dec_norm(s_dec_t *d, ckw_rbuf_t *r) {
    uint32_t n = ckw_take_u32(r), next = ckw_take_u32(r);
    if (r->bad) return s_short(d, "NORM");
    if (n > PS_NORM_HISTORY || next >= PS_NORM_HISTORY || (n < PS_NORM_HISTORY && next != n))
        return s_fail(d, -EBADMSG, "NORM holds impossible values (%u norms, next %u)", n, next);
    double v[PS_NORM_HISTORY];
    for (uint32_t i = 0; i < n; i++) {
        v[i] = ckw_take_f64(r);
        if (!isfinite(v[i]) || v[i] < 0) return s_fail(d, -EBADMSG, "NORM holds a norm that is not finite");
    }
    if (r->bad) return s_short(d, "NORM");
    if (d->apply && d->st->norms) {
        ps_norm_hist_t *h = d->st->norms;
        memset(h, 0, sizeof *h);
        memcpy(h->v, v, n * sizeof *v);
        h->n = (int)n;
        h->next = (int)next;
    }
    return 0;
}

/* One history of HIST into h (may be NULL: checked only). */
static int s_dec_one_hist(s_dec_t *d, ckw_rbuf_t *r, ps_norm_hist_t *h, const char *what, int k) {
    uint32_t n = ckw_take_u32(r), next = ckw_take_u32(r);
    if (r->bad) return s_short(d, "HIST");
    if (n > PS_NORM_HISTORY || next >= PS_NORM_HISTORY || (n < PS_NORM_HISTORY && next != n))
        return s_fail(d, -EBADMSG, "HIST: %s history %d holds impossible values (%u values, next %u)", what, k, n,
                      next);
    double v[PS_NORM_HISTORY];
    for (uint32_t i = 0; i < n; i++) {
        v[i] = ckw_take_f64(r);
        if (!isfinite(v[i]) || v[i] < 0)
            return s_fail(d, -EBADMSG, "HIST: %s history %d holds a value that is not finite or below 0", what, k);
    }
    if (r->bad) return s_short(d, "HIST");
    if (h) {
        memset(h, 0, sizeof *h);
        memcpy(h->v, v, n * sizeof *v);
        h->n = (int)n;
        h->next = (int)next;
    }
    return 0;
}

/* HIST (see ckpt_wire.h): each set's count must be this run's (a layer or
 * factor per history), or 0 (a file written without them). */
static int s_dec_hist(s_dec_t *d, ckw_rbuf_t *r) {
    for (int set = 0; set < 2 && d->rc == 0; set++) {
        const char *what = set == 0 ? "clipped gradient norm" : "statistics trace";
        ps_norm_hist_t *hs = set == 0 ? d->st->clip_hists : d->st->trace_hists;
        const int want = hs ? (set == 0 ? d->st->n_clip_hists : d->st->n_trace_hists) : -1;
        uint32_t n = ckw_take_u32(r);
        if (r->bad) return s_short(d, "HIST");
        if (n > 1000000u) return s_fail(d, -EBADMSG, "HIST: %u %s histories", n, what);
        if (want >= 0 && n != 0 && n != (uint32_t)want)
            return s_fail(d, -EINVAL, "HIST: %u %s histories, this run's model has %d", n, what, want);
        for (uint32_t k = 0; k < n && d->rc == 0; k++)
            s_dec_one_hist(d, r, d->apply && want >= 0 ? &hs[k] : NULL, what, (int)k);
    }
    return d->rc;
}

/* OWNR (see CKW_OWNR_LEN): checked whole (ps_owners_validate) before the
 * table is replaced (ps_owners_load); with st->owners NULL, checked only. */
static int s_dec_ownr(s_dec_t *d, ckw_rbuf_t *r) {
    uint32_t n = ckw_take_u32(r);
    if (r->bad) return s_short(d, "OWNR");
    if (n > PS_OWNERS_MAX)
        return s_fail(d, -EBADMSG, "OWNR (member ids bound to CURVE keys) holds %u bindings, more than %d", n,
                      PS_OWNERS_MAX);
    if ((uint64_t)n * CKW_OWNR_LEN > r->len - r->at) return s_short(d, "OWNR");
    ps_owner_t *v = n ? calloc(n, sizeof *v) : NULL;
    if (n && !v) return s_fail(d, -ENOMEM, "out of memory reading %u member-id bindings", n);
    for (uint32_t i = 0; i < n && d->rc == 0; i++) {
        uint32_t code = ckw_take_u32(r), id = ckw_take_u32(r);
        const uint8_t *key = ckw_take(r, AUTH_KEY_Z85_LEN);
        if (!key) {
            s_short(d, "OWNR");
            break;
        }
        if (code != CKW_ROLE_WORKER && code != CKW_ROLE_STATSD) {
            s_fail(d, -EBADMSG, "OWNR (member ids bound to CURVE keys): binding %u (id %u) has role code %u (1: worker, 2: statsd)",
                   i, id, code);
            break;
        }
        v[i].role = code == CKW_ROLE_WORKER ? MSG_ROLE_WORKER : MSG_ROLE_STATSD;
        v[i].id = id;
        memcpy(v[i].key, key, AUTH_KEY_Z85_LEN);
        v[i].key[AUTH_KEY_Z85_LEN] = 0;
    }
    if (d->rc == 0) {
        char why[256];
        int rc = d->apply && d->st->owners ? ps_owners_load(d->st->owners, v, (int)n, why, sizeof why)
                                           : ps_owners_validate(v, (int)n, why, sizeof why);
        if (rc < 0)
            s_fail(d, rc == -ENOMEM ? rc : -EBADMSG, "OWNR (member ids bound to CURVE keys): %s", why);
    }
    free(v);
    return d->rc;
}

/* IDNT (see CKW_IDNT_LEN): checked whole (ps_idents_validate) before the
 * table is replaced (ps_idents_load); with st->idents NULL, checked only. */
static int s_dec_idnt(s_dec_t *d, ckw_rbuf_t *r) {
    uint32_t n = ckw_take_u32(r);
    if (r->bad) return s_short(d, "IDNT");
    if (n > PS_IDENT_MAX)
        return s_fail(d, -EBADMSG, "IDNT (member identities) holds %u identities, more than %d", n, PS_IDENT_MAX);
    if ((uint64_t)n * CKW_IDNT_LEN > r->len - r->at) return s_short(d, "IDNT");
    ps_ident_saved_t *v = n ? calloc(n, sizeof *v) : NULL;
    if (n && !v) return s_fail(d, -ENOMEM, "out of memory reading %u member identities", n);
    for (uint32_t i = 0; i < n && d->rc == 0; i++) {
        uint32_t code = ckw_take_u32(r), id = ckw_take_u32(r);
        const uint8_t *key = ckw_take(r, AUTH_KEY_Z85_LEN);
        uint32_t stalls = ckw_take_u32(r), bad = ckw_take_u32(r), flags = ckw_take_u32(r);
        uint64_t sv = ckw_take_u64(r);
        if (!key || r->bad) {
            s_short(d, "IDNT");
            break;
        }
        if (code != CKW_ROLE_WORKER && code != CKW_ROLE_STATSD && code != CKW_ROLE_INVERTD) {
            s_fail(d, -EBADMSG, "IDNT (member identities): identity %u (id %u) has role code %u (1: worker, 2: statsd, "
                   "3: invertd)", i, id, code);
            break;
        }
        if (flags & ~(CKW_IDNT_DEMOTED | CKW_IDNT_DISTRUSTED | CKW_IDNT_STATS_VERSION)) {
            s_fail(d, -EBADMSG, "IDNT (member identities): identity %u has unknown flags 0x%x", i, flags);
            break;
        }
        v[i].role = code == CKW_ROLE_WORKER ? MSG_ROLE_WORKER : code == CKW_ROLE_STATSD ? MSG_ROLE_STATSD
                                                                                          : MSG_ROLE_INVERTD;
        v[i].id = id;
        memcpy(v[i].key, key, AUTH_KEY_Z85_LEN);
        v[i].key[AUTH_KEY_Z85_LEN] = 0;
        v[i].n_stalls = stalls;
        v[i].n_bad_inverses = bad;
        v[i].demoted = (flags & CKW_IDNT_DEMOTED) != 0;
        v[i].distrusted = (flags & CKW_IDNT_DISTRUSTED) != 0;
        v[i].has_stats_version = (flags & CKW_IDNT_STATS_VERSION) != 0;
        v[i].stats_version = sv;
    }
    if (d->rc == 0) {
        char why[256];
        int rc = d->apply && d->st->idents ? ps_idents_load(d->st->idents, v, (int)n, why, sizeof why)
                                           : ps_idents_validate(v, (int)n, why, sizeof why);
        if (rc < 0) s_fail(d, rc == -ENOMEM ? rc : -EBADMSG, "IDNT (member identities): %s", why);
    }
    free(v);
    return d->rc;
}

/* DRFT (see CKW_DRFT_LEN): every member checked (its fields,
 * ps_drift_validate_one; its floats finite) before the table is replaced
 * member by member; with st->drift NULL, checked only. n_params must be
 * this run's when there are members. */
static int s_dec_drft(s_dec_t *d, ckw_rbuf_t *r) {
    uint64_t judged = ckw_take_u64(r), np = ckw_take_u64(r);
    uint32_t n = ckw_take_u32(r);
    if (r->bad) return s_short(d, "DRFT");
    if (n > PS_DRIFT_MAX)
        return s_fail(d, -EBADMSG, "DRFT (reference-gradient histories) holds %u members, more than %d", n, PS_DRIFT_MAX);
    if ((uint64_t)n * CKW_DRFT_LEN > r->len - r->at) return s_short(d, "DRFT");
    if (n && np != (uint64_t)d->st->net->n_params)
        return s_fail(d, -EINVAL, "DRFT (reference-gradient histories): gradients of %" PRIu64 " floats, this run's "
                      "model has %zu", np, d->st->net->n_params);
    ps_drift_t *dr = d->apply ? d->st->drift : NULL;
    if (dr) ps_drift_clear(dr, judged);
    struct {
        uint32_t code, id;
        uint8_t key[PS_DRIFT_KEY_LEN];
    } seen[PS_DRIFT_MAX]; /* identities so far: one twice is refused in the check, before anything is replaced */
    for (uint32_t i = 0; i < n && d->rc == 0; i++) {
        ps_drift_saved_t x;
        memset(&x, 0, sizeof x);
        uint32_t code = ckw_take_u32(r);
        x.id = ckw_take_u32(r);
        const uint8_t *key = ckw_take(r, PS_DRIFT_KEY_LEN);
        x.judged_at = ckw_take_u64(r);
        uint32_t flags = ckw_take_u32(r), ne = ckw_take_u32(r), nj = ckw_take_u32(r);
        x.mu = ckw_take_f64(r);
        x.s2 = ckw_take_f64(r);
        x.gbar = ckw_take_f64(r);
        x.z = ckw_take_f64(r);
        if (!key || r->bad) return s_short(d, "DRFT");
        if (code != CKW_ROLE_WORKER && code != CKW_ROLE_STATSD && code != CKW_ROLE_INVERTD)
            return s_fail(d, -EBADMSG, "DRFT (reference-gradient histories): member %u (id %u) has role code %u", i,
                          x.id, code);
        if (flags & ~(CKW_DRFT_M | CKW_DRFT_REFUSING) || ne > INT32_MAX || nj > INT32_MAX)
            return s_fail(d, -EBADMSG, "DRFT (reference-gradient histories): member %u has unknown flags 0x%x or "
                          "impossible counts", i, flags);
        for (uint32_t j = 0; j < i; j++)
            if (seen[j].code == code && seen[j].id == x.id &&
                strncmp((const char *)seen[j].key, (const char *)key, PS_DRIFT_KEY_LEN) == 0)
                return s_fail(d, -EBADMSG, "DRFT (reference-gradient histories): member %u (id %u) appears twice", i,
                              x.id);
        seen[i].code = code;
        seen[i].id = x.id;
        memcpy(seen[i].key, key, PS_DRIFT_KEY_LEN);
        x.role = code == CKW_ROLE_WORKER ? MSG_ROLE_WORKER : code == CKW_ROLE_STATSD ? MSG_ROLE_STATSD
                                                                                     : MSG_ROLE_INVERTD;
        memcpy(x.key, key, PS_DRIFT_KEY_LEN);
        x.has_m = (flags & CKW_DRFT_M) != 0;
        x.refusing = (flags & CKW_DRFT_REFUSING) != 0;
        x.n = (int)ne;
        x.n_judged = (int)nj;
        char why[200];
        if (ps_drift_validate_one(&x, judged, why, sizeof why) < 0)
            return s_fail(d, -EBADMSG, "DRFT (reference-gradient histories): %s", why);
        if (x.has_m && !ckw_peek_finite(r, (size_t)np))
            return r->len - r->at < np * sizeof(float) ? s_short(d, "DRFT")
                                                        : s_fail(d, -EBADMSG, "DRFT (reference-gradient histories): "
                                                                 "member %u's direction is not finite", i);
        if (dr) {
            int rc = 0;
            float *m = ps_drift_put(dr, &x, &rc);
            if (!m) return s_fail(d, rc == -ENOMEM ? rc : -EBADMSG, "DRFT (reference-gradient histories): member %u "
                                  "(id %u) %s", i, x.id, rc == -ENOMEM ? "out of memory" : "appears twice");
            if (x.has_m) ckw_take_floats(r, m, (size_t)np);
        } else if (x.has_m) {
            ckw_take_floats(r, NULL, (size_t)np);
        }
    }
    return d->rc;
}

static const char *s_tag_name(uint32_t tag, char buf[5]) {
    for (int i = 0; i < 4; i++) {
        char c = (char)(tag >> (8 * i));
        buf[i] = c >= 32 && c < 127 ? c : '?';
    }
    buf[4] = 0;
    return buf;
}

/* One pass over the records. */
static int s_walk(s_dec_t *d, const uint8_t *payload, size_t len) {
    static const uint32_t tags[CKW_N_TAGS] = {CKW_META, CKW_PRMS, CKW_BNST, CKW_SGDV, CKW_KOPT, CKW_FACT,
                                            CKW_BLCK, CKW_SCHD, CKW_RFSH, CKW_NORM, CKW_OWNR, CKW_IDNT, CKW_HIST,
                                            CKW_DRFT};
    int seen[CKW_N_TAGS] = {0};
    ckw_rbuf_t all = {.p = payload, .len = len};
    d->flags = 0;
    while (all.at < all.len && d->rc == 0) {
        uint32_t tag = ckw_take_u32(&all), zero = ckw_take_u32(&all);
        uint64_t n = ckw_take_u64(&all);
        char tn[5];
        if (all.bad || zero != 0 || n > all.len - all.at)
            return s_fail(d, -EBADMSG, "record at byte %zu is cut short or malformed (corrupt file)",
                          (size_t)(all.at + PS_CKPT_HEADER_LEN));
        int ti = -1;
        for (int i = 0; i < CKW_N_TAGS; i++)
            if (tags[i] == tag) ti = i;
        if (ti < 0 || (tag == CKW_OWNR && d->version < 2) || ((tag == CKW_IDNT || tag == CKW_HIST) && d->version < 3) ||
            (tag == CKW_DRFT && d->version < 4))
            return s_fail(d, -EBADMSG, "unknown record '%s' in a version-%u file", s_tag_name(tag, tn), d->version);
        if (seen[ti]++) return s_fail(d, -EBADMSG, "record '%s' appears twice", s_tag_name(tag, tn));
        if (ti != 0 && !seen[0]) return s_fail(d, -EBADMSG, "record '%s' before META", s_tag_name(tag, tn));
        ckw_rbuf_t r = {.p = all.p + all.at, .len = (size_t)n};
        all.at += (size_t)n;
        int need = 1;
        switch (tag) {
        case CKW_META: s_dec_meta(d, &r); break;
        case CKW_PRMS: s_dec_floats(d, &r, d->st->net->params, d->st->net->n_params, "the parameters"); break;
        case CKW_BNST: s_dec_floats(d, &r, d->st->net->state, d->st->net->n_state, "the batch-norm state"); break;
        case CKW_SGDV:
            if ((need = d->st->sgd != NULL)) s_dec_sgdv(d, &r);
            break;
        case CKW_KOPT:
            if ((need = d->st->kfac != NULL)) s_dec_kopt(d, &r);
            break;
        case CKW_FACT:
            if ((need = d->st->kfac != NULL)) s_dec_fact(d, &r);
            break;
        case CKW_BLCK:
            if ((need = d->st->kfac != NULL)) s_dec_blck(d, &r);
            break;
        case CKW_SCHD:
            if ((need = d->st->sched != NULL)) s_dec_schd(d, &r);
            break;
        case CKW_RFSH:
            if ((need = d->st->refresh != NULL)) s_dec_rfsh(d, &r);
            break;
        case CKW_NORM: s_dec_norm(d, &r); break;
        case CKW_OWNR: s_dec_ownr(d, &r); break;
        case CKW_IDNT: s_dec_idnt(d, &r); break;
        case CKW_HIST: s_dec_hist(d, &r); break;
        case CKW_DRFT: s_dec_drft(d, &r); break;
        }
        if (!need) return s_fail(d, -EINVAL, "record '%s' is not used by this run's configuration", s_tag_name(tag, tn));
        if (d->rc == 0 && r.at != r.len)
            return s_fail(d, -EBADMSG, "record '%s' has %zu bytes more than its contents", s_tag_name(tag, tn),
                          r.len - r.at);
    }
    if (d->rc) return d->rc;
    const struct {
        uint32_t tag;
        int need;
    } req[CKW_N_TAGS] = {{CKW_META, 1},
                       {CKW_PRMS, 1},
                       {CKW_BNST, 1},
                       {CKW_SGDV, d->st->sgd != NULL},
                       {CKW_KOPT, d->st->kfac != NULL},
                       {CKW_FACT, d->st->kfac != NULL},
                       {CKW_BLCK, d->st->kfac != NULL},
                       {CKW_SCHD, d->st->sched != NULL},
                       {CKW_RFSH, d->st->refresh != NULL},
                       {CKW_NORM, 1},
                       {CKW_OWNR, d->version >= 2},
                       {CKW_IDNT, d->version >= 3},
                       {CKW_HIST, d->version >= 3},
                       {CKW_DRFT, d->version >= 4}};
    for (int i = 0; i < CKW_N_TAGS; i++) {
        char tn[5];
        if (req[i].need && !seen[i]) return s_fail(d, -EBADMSG, "record '%s' is missing (truncated file?)", s_tag_name(req[i].tag, tn));
    }
    /* version 1 knew no bindings: its member ids belong to no key, as on a fresh start */
    if (d->apply && d->version < 2 && d->st->owners) ps_owners_release(d->st->owners);
    /* before version 3 no identity was kept: each starts afresh */
    if (d->apply && d->version < 3 && d->st->idents) ps_idents_release(d->st->idents);
    /* before version 4 the reference-gradient check kept no history in the file */
    if (d->apply && d->version < 4 && d->st->drift) ps_drift_clear(d->st->drift, 0);
    if (d->apply && d->version < 3) { /* nor the guards' histories: they start empty */
        if (d->st->clip_hists) memset(d->st->clip_hists, 0, (size_t)d->st->n_clip_hists * sizeof *d->st->clip_hists);
        if (d->st->trace_hists)
            memset(d->st->trace_hists, 0, (size_t)d->st->n_trace_hists * sizeof *d->st->trace_hists);
    }
    return 0;
}

int ps_ckpt_decode(ps_ckpt_state_t *st, const uint8_t *buf, size_t len, double inv_now_s, const char *origin,
                   char *err, size_t err_len) {
    s_dec_t d = {.st = st, .now_s = inv_now_s, .origin = origin ? origin : "checkpoint", .err = err, .err_len = err_len};
    if (!st || !st->net || !buf) return s_fail(&d, -EINVAL, "nothing to restore into");
    if (len < PS_CKPT_HEADER_LEN)
        return s_fail(&d, -EBADMSG, "%zu bytes: shorter than the %u-byte header (truncated)", len, PS_CKPT_HEADER_LEN);
    if (memcmp(buf, PS_CKPT_MAGIC, 8) != 0) return s_fail(&d, -EBADMSG, "not a kfac checkpoint (bad magic)");
    if (ckw_le32(buf + 28) != ckw_crc(buf, 28)) return s_fail(&d, -EBADMSG, "the header's checksum does not match (corrupt header)");
    uint32_t version = ckw_le32(buf + 8), hlen = ckw_le32(buf + 12);
    if (version < PS_CKPT_VERSION_MIN || version > PS_CKPT_VERSION)
        return s_fail(&d, -EPROTO,
                      "format version %u; this kfac-ps reads versions %u to %u (written by another release)", version,
                      PS_CKPT_VERSION_MIN, PS_CKPT_VERSION);
    d.version = version;
    if (hlen != PS_CKPT_HEADER_LEN) return s_fail(&d, -EBADMSG, "header length %u, expected %u", hlen, PS_CKPT_HEADER_LEN);
    uint64_t payload = (uint64_t)ckw_le32(buf + 16) | (uint64_t)ckw_le32(buf + 20) << 32;
    if (payload != len - PS_CKPT_HEADER_LEN)
        return s_fail(&d, -EBADMSG, "%zu bytes, the header says %" PRIu64 " (%s)", len, payload + PS_CKPT_HEADER_LEN,
                      payload > len - PS_CKPT_HEADER_LEN ? "truncated" : "trailing bytes");
    if (ckw_le32(buf + 24) != ckw_crc(buf + PS_CKPT_HEADER_LEN, (size_t)payload))
        return s_fail(&d, -EBADMSG, "the contents' checksum does not match (corrupt file)");
    d.apply = 0;
    if (s_walk(&d, buf + PS_CKPT_HEADER_LEN, (size_t)payload) < 0) return d.rc;
    d.apply = 1;
    return s_walk(&d, buf + PS_CKPT_HEADER_LEN, (size_t)payload);
}
