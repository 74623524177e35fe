/* ps/ckpt.c — see ckpt.h. The contents of a checkpoint: a record writer
 * over a growable buffer, a bounds-checked reader, and one walk over the
 * records that runs twice on restore: first checking everything, then
 * writing it (so a bad file never leaves the state half restored). The
 * files themselves are ps/ckpt_file.c. */
#include "ps/ckpt.h"

#include <errno.h>
#include <float.h>
#include <inttypes.h>
#include <math.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <zlib.h>



#define S_TAG(a, b, c, d) ((uint32_t)(a) | (uint32_t)(b) << 8 | (uint32_t)(c) << 16 | (uint32_t)(d) << 24)
#define S_META S_TAG('M', 'E', 'T', 'A')
#define S_PRMS S_TAG('P', 'R', 'M', 'S')
#define S_BNST S_TAG('B', 'N', 'S', 'T')
#define S_SGDV S_TAG('S', 'G', 'D', 'V')
#define S_KOPT S_TAG('K', 'O', 'P', 'T')
#define S_FACT S_TAG('F', 'A', 'C', 'T')
#define S_BLCK S_TAG('B', 'L', 'C', 'K')
#define S_SCHD S_TAG('S', 'C', 'H', 'D')
#define S_RFSH S_TAG('R', 'F', 'S', 'H')
#define S_NORM S_TAG('N', 'O', 'R', 'M')
#define S_OWNR S_TAG('O', 'W', 'N', 'R')
#define S_N_TAGS 11

/* OWNR: u32 n, then n bindings of S_OWNR_LEN bytes each: u32 role code
 * (S_ROLE_*), u32 member id, the key's AUTH_KEY_Z85_LEN Z85 characters.
 * Its own role codes: the file does not depend on proto/'s numbering. */
#define S_OWNR_LEN (8u + AUTH_KEY_Z85_LEN)
#define S_ROLE_WORKER 1u
#define S_ROLE_STATSD 2u

/* Inverse counters stored, in this order (kfac_inverse_stats_t). */
#define S_N_INV_STATS 12

/* ---- writer ----------------------------------------------------------------- */

typedef struct {
    uint8_t *p;
    size_t len, cap;
    int oom;
} s_wbuf_t;

static void s_put(s_wbuf_t *w, const void *src, size_t n) {
    if (w->oom) return;
    if (w->len + n > w->cap) {
        size_t cap = w->cap ? w->cap : 4096;
        while (cap < w->len + n) cap *= 2;
        uint8_t *p = realloc(w->p, cap);
        if (!p) {
            w->oom = 1;
            return;
        }
        w->p = p;
        w->cap = cap;
    }
    memcpy(w->p + w->len, src, n);
    w->len += n;
}

static void s_u32(s_wbuf_t *w, uint32_t v) {
    uint8_t b[4];
    for (int i = 0; i < 4; i++) b[i] = (uint8_t)(v >> (8 * i));
    s_put(w, b, 4);
}

static void s_u64(s_wbuf_t *w, uint64_t v) {
    uint8_t b[8];
    for (int i = 0; i < 8; i++) b[i] = (uint8_t)(v >> (8 * i));
    s_put(w, b, 8);
}

static void s_i64(s_wbuf_t *w, int64_t v) { s_u64(w, (uint64_t)v); }

static void s_f64(s_wbuf_t *w, double v) {
    uint64_t u;
    memcpy(&u, &v, sizeof u);
    s_u64(w, u);
}

static void s_floats(s_wbuf_t *w, const float *v, size_t n) {
    for (size_t i = 0; i < n; i++) {
        uint32_t u;
        memcpy(&u, &v[i], sizeof u);
        s_u32(w, u);
    }
}

/* A record: tag, zero, length patched at the end. */
static size_t s_rec_begin(s_wbuf_t *w, uint32_t tag) {
    s_u32(w, tag);
    s_u32(w, 0);
    size_t at = w->len;
    s_u64(w, 0);
    return at;
}

static void s_rec_end(s_wbuf_t *w, size_t at) {
    if (w->oom) return;
    uint64_t n = (uint64_t)(w->len - at - 8);
    for (int i = 0; i < 8; i++) w->p[at + (size_t)i] = (uint8_t)(n >> (8 * i));
}

/* ---- reader ------------------------------------------------------------------ */

typedef struct {
    const uint8_t *p;
    size_t len, at;
    int bad; /* ran past the end */
} s_rbuf_t;

static const uint8_t *s_take(s_rbuf_t *r, size_t n) {
    if (r->bad || r->len - r->at < n) {
        r->bad = 1;
        return NULL;
    }
    const uint8_t *q = r->p + r->at;
    r->at += n;
    return q;
}

static uint32_t s_ru32(s_rbuf_t *r) {
    const uint8_t *b = s_take(r, 4);
    if (!b) return 0;
    uint32_t v = 0;
    for (int i = 0; i < 4; i++) v |= (uint32_t)b[i] << (8 * i);
    return v;
}

static uint64_t s_ru64(s_rbuf_t *r) {
    const uint8_t *b = s_take(r, 8);
    if (!b) return 0;
    uint64_t v = 0;
    for (int i = 0; i < 8; i++) v |= (uint64_t)b[i] << (8 * i);
    return v;
}

static int64_t s_ri64(s_rbuf_t *r) { return (int64_t)s_ru64(r); }

static double s_rf64(s_rbuf_t *r) {
    uint64_t u = s_ru64(r);
    double v;
    memcpy(&v, &u, sizeof v);
    return v;
}

/* n floats into dst (NULL: skip them). Returns 0, or -1 past the end. */
static int s_rfloats(s_rbuf_t *r, float *dst, size_t n) {
    if (n > (r->len - r->at) / 4) {
        r->bad = 1;
        return -1;
    }
    const uint8_t *b = s_take(r, n * 4);
    if (!b) return -1;
    if (!dst) return 0;
    for (size_t i = 0; i < n; i++) {
        uint32_t u = (uint32_t)b[4 * i] | (uint32_t)b[4 * i + 1] << 8 | (uint32_t)b[4 * i + 2] << 16 |
                     (uint32_t)b[4 * i + 3] << 24;
        memcpy(&dst[i], &u, sizeof u);
    }
    return 0;
}

/* Are the n floats at the reader's position finite? (does not move it) */
static int s_peek_finite(const s_rbuf_t *r, size_t n) {
    if (r->bad || n > (r->len - r->at) / 4) return 0;
    for (size_t i = 0; i < n; i++) {
        const uint8_t *b = r->p + r->at + 4 * i;
        uint32_t u = (uint32_t)b[0] | (uint32_t)b[1] << 8 | (uint32_t)b[2] << 16 | (uint32_t)b[3] << 24;
        if ((u & 0x7f800000u) == 0x7f800000u) return 0;
    }
    return 1;
}

/* ---- encode -------------------------------------------------------------------- */

static uint32_t s_crc(const void *p, size_t n) {
    uLong c = crc32(0L, Z_NULL, 0);
    const uint8_t *b = p;
    while (n > 0) {
        uInt k = n > (1u << 30) ? (1u << 30) : (uInt)n;
        c = crc32(c, b, k);
        b += k;
        n -= k;
    }
    return (uint32_t)c;
}

static uint32_t s_model_crc(const char *text) {
    return text ? s_crc(text, strlen(text)) : 0;
}

static void s_put_inverse(s_wbuf_t *w, const kfac_inverse_t *inv) {
    s_u32(w, inv->valid ? 1u : 0u);
    s_u32(w, (uint32_t)inv->method);
    s_f64(w, (double)inv->damping_used);
    s_u64(w, inv->n_updates);
    if (!inv->valid) return;
    size_t nn = (size_t)inv->n * (size_t)inv->n;
    if (inv->method == KFAC_INV_EIGEN) {
        s_floats(w, inv->Q, nn);
        s_floats(w, inv->v, (size_t)inv->n);
    } else {
        s_floats(w, inv->inv, nn);
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
    s_wbuf_t w = {0};
    uint8_t hdr[PS_CKPT_HEADER_LEN] = {0};
    s_put(&w, hdr, sizeof hdr); /* filled at the end */

    size_t at = s_rec_begin(&w, S_META);
    s_u32(&w, s_model_crc(st->model_text));
    s_u64(&w, net->n_params);
    s_u64(&w, net->n_state);
    s_i64(&w, st->t);
    s_u64(&w, st->steps_done);
    s_f64(&w, st->wall_s);
    s_u32(&w, st->round_folded ? 1u : 0u);
    s_u64(&w, st->next_job_id);
    s_u32(&w, (st->kfac ? 1u : 0u) | (st->sgd ? 2u : 0u) | (st->sched ? 4u : 0u) | (st->refresh ? 8u : 0u));
    s_u32(&w, (uint32_t)st->n_blocks);
    s_u32(&w, PS_CKPT_COUNTERS);
    for (int i = 0; i < PS_CKPT_COUNTERS; i++) s_u64(&w, st->counters[i]);
    s_rec_end(&w, at);

    at = s_rec_begin(&w, S_PRMS);
    s_floats(&w, net->params, net->n_params);
    s_rec_end(&w, at);
    at = s_rec_begin(&w, S_BNST);
    s_floats(&w, net->state, net->n_state);
    s_rec_end(&w, at);

    if (st->sgd) {
        /* velocity (n), then SGD's Polyak average: its count and n_params floats */
        at = s_rec_begin(&w, S_SGDV);
        s_floats(&w, st->sgd->v, st->sgd->n);
        s_i64(&w, st->sgd_polyak_count ? *st->sgd_polyak_count : 0);
        s_floats(&w, st->sgd_polyak, st->sgd_polyak ? net->n_params : 0);
        s_rec_end(&w, at);
    }
    if (st->kfac) {
        const kfac_opt_t *k = st->kfac;
        at = s_rec_begin(&w, S_KOPT);
        s_i64(&w, k->polyak_count);
        s_u64(&w, k->n_folds);
        s_u64(&w, k->n_identity_layers);
        s_u64(&w, k->n_precond_errors);
        s_f64(&w, k->opts.damping);
        const uint64_t *is = &k->inv_stats.n_calls;
        _Static_assert(sizeof(kfac_inverse_stats_t) == S_N_INV_STATS * sizeof(uint64_t),
                       "kfac_inverse_stats_t is stored as S_N_INV_STATS counters");
        for (int i = 0; i < S_N_INV_STATS; i++) s_u64(&w, is[i]);
        s_floats(&w, k->mom, net->n_params);
        s_floats(&w, k->polyak, net->n_params);
        s_rec_end(&w, at);

        at = s_rec_begin(&w, S_FACT);
        s_u32(&w, (uint32_t)k->avg->n_layers);
        for (int l = 0; l < k->avg->n_layers; l++) {
            const kfac_layer_stats_t *ls = &k->avg->layers[l];
            s_u32(&w, (uint32_t)ls->n_factors);
            for (int f = 0; f < ls->n_factors; f++) {
                const kfac_factor_t *fa = &ls->f[f];
                size_t n = kfac_factor_len(fa);
                s_u32(&w, (uint32_t)fa->kind);
                s_u32(&w, (uint32_t)fa->dim);
                s_f64(&w, fa->n_samples);
                s_i64(&w, fa->n_updates);
                s_u64(&w, n);
                s_floats(&w, fa->data, n);
            }
        }
        s_rec_end(&w, at);

        at = s_rec_begin(&w, S_BLCK);
        s_u32(&w, (uint32_t)k->n_blocks);
        for (int b = 0; b < k->n_blocks; b++) {
            const kfac_block_t *kb = &k->blocks[b];
            s_u32(&w, (uint32_t)kb->n);
            s_i64(&w, kb->factor_version);
            s_i64(&w, kb->inv_version);
            s_u64(&w, kb->n_installed);
            s_put_inverse(&w, kb->inv);
        }
        s_rec_end(&w, at);
    }
    if (st->sched) {
        at = s_rec_begin(&w, S_SCHD);
        s_u32(&w, (uint32_t)st->n_blocks);
        for (int b = 0; b < st->n_blocks; b++) {
            const ps_sched_block_t *sb = &st->sched[b];
            s_u32(&w, (uint32_t)sb->n);
            s_i64(&w, sb->factor_version);
            s_i64(&w, sb->inv_version);
            s_i64(&w, sb->failed_version);
            s_u32(&w, sb->due ? 1u : 0u);
        }
        s_rec_end(&w, at);
    }
    if (st->refresh) {
        at = s_rec_begin(&w, S_RFSH);
        s_u32(&w, (uint32_t)st->n_refresh);
        for (int b = 0; b < st->n_refresh; b++) {
            const kfac_refresh_t *r = st->refresh[b];
            s_u64(&w, r->n);
            s_u32(&w, (uint32_t)r->have);
            s_i64(&w, r->delta);
            s_i64(&w, r->delta_prev);
            s_i64(&w, r->next);
            s_floats(&w, r->x1, r->n);
            s_floats(&w, r->x2, r->n);
        }
        s_rec_end(&w, at);
    }
    at = s_rec_begin(&w, S_NORM);
    {
        const ps_norm_hist_t *h = st->norms;
        int n = h ? h->n : 0;
        s_u32(&w, (uint32_t)n);
        s_u32(&w, h ? (uint32_t)h->next : 0u);
        for (int i = 0; i < n; i++) s_f64(&w, h->v[i]);
    }
    s_rec_end(&w, at);
    at = s_rec_begin(&w, S_OWNR);
    {
        int n = ps_owners_count(st->owners), m = 0;
        for (int i = 0; i < n; i++) {
            msg_role_t role = ps_owners_at(st->owners, i)->role;
            m += role == MSG_ROLE_WORKER || role == MSG_ROLE_STATSD;
        }
        s_u32(&w, (uint32_t)m);
        for (int i = 0; i < n; i++) {
            const ps_owner_t *b = ps_owners_at(st->owners, i);
            if (b->role != MSG_ROLE_WORKER && b->role != MSG_ROLE_STATSD) continue; /* never bound */
            char key[AUTH_KEY_Z85_LEN] = {0};
            memcpy(key, b->key, strnlen(b->key, sizeof key));
            s_u32(&w, b->role == MSG_ROLE_WORKER ? S_ROLE_WORKER : S_ROLE_STATSD);
            s_u32(&w, b->id);
            s_put(&w, key, sizeof key);
        }
    }
    s_rec_end(&w, at);
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
    uint32_t c = s_crc(w.p + PS_CKPT_HEADER_LEN, (size_t)payload);
    for (int i = 0; i < 4; i++) h[24 + i] = (uint8_t)(c >> (8 * i));
    c = s_crc(h, 28);
    for (int i = 0; i < 4; i++) h[28 + i] = (uint8_t)(c >> (8 * i));
    *out = w.p;
    *out_len = w.len;
    return 0;
}

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

static int s_dec_meta(s_dec_t *d, s_rbuf_t *r) {
    ps_ckpt_state_t *st = d->st;
    uint32_t mcrc = s_ru32(r);
    uint64_t np = s_ru64(r), ns = s_ru64(r);
    int64_t t = s_ri64(r);
    uint64_t steps_done = s_ru64(r);
    double wall = s_rf64(r);
    uint32_t folded = s_ru32(r);
    uint64_t next_job = s_ru64(r);
    uint32_t flags = s_ru32(r), n_blocks = s_ru32(r), n_counters = s_ru32(r);
    if (r->bad) return s_short(d, "META");
    if (mcrc != s_model_crc(st->model_text))
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
        uint64_t v = s_ru64(r);
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
static int s_dec_floats(s_dec_t *d, s_rbuf_t *r, float *dst, size_t n, const char *what) {
    if (!s_peek_finite(r, n)) {
        if (n > (r->len - r->at) / 4) return s_short(d, what);
        return s_fail(d, -EBADMSG, "%s holds NaN or Inf", what);
    }
    if (s_rfloats(r, d->apply ? dst : NULL, n) < 0) return s_short(d, what);
    return 0;
}

/* SGDV: the velocity, then the Polyak average's count and floats (n_params
 * of them when the run keeps one, st->sgd_polyak, else none). */
static int s_dec_sgdv(s_dec_t *d, s_rbuf_t *r) {
    const ps_ckpt_state_t *st = d->st;
    if (s_dec_floats(d, r, st->sgd->v, st->sgd->n, "the SGD velocity") < 0) return d->rc;
    int64_t pc = s_ri64(r);
    if (r->bad) return s_short(d, "SGDV");
    if (pc < 0) return s_fail(d, -EBADMSG, "SGDV holds a negative Polyak count");
    size_t n = st->sgd_polyak ? st->net->n_params : 0;
    if (s_dec_floats(d, r, st->sgd_polyak, n, "SGD's Polyak average") < 0) return d->rc;
    if (d->apply && st->sgd_polyak_count) *st->sgd_polyak_count = (long)pc;
    return 0;
}

static int s_dec_kopt(s_dec_t *d, s_rbuf_t *r) {
    kfac_opt_t *k = d->st->kfac;
    int64_t pc = s_ri64(r);
    uint64_t folds = s_ru64(r), idl = s_ru64(r), pe = s_ru64(r);
    double damping = s_rf64(r);
    uint64_t is[S_N_INV_STATS];
    for (int i = 0; i < S_N_INV_STATS; i++) is[i] = s_ru64(r);
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

static int s_dec_fact(s_dec_t *d, s_rbuf_t *r) {
    kfac_stats_t *avg = d->st->kfac->avg;
    uint32_t nl = s_ru32(r);
    if (r->bad) return s_short(d, "FACT");
    if (nl != (uint32_t)avg->n_layers)
        return s_fail(d, -EINVAL, "has statistics of %u layers, this model %d", nl, avg->n_layers);
    for (int l = 0; l < avg->n_layers; l++) {
        kfac_layer_stats_t *ls = &avg->layers[l];
        uint32_t nf = s_ru32(r);
        if (r->bad) return s_short(d, "FACT");
        if (nf != (uint32_t)ls->n_factors)
            return s_fail(d, -EINVAL, "layer %d has %u factors, this model %d", ls->layer, nf, ls->n_factors);
        for (int f = 0; f < ls->n_factors; f++) {
            kfac_factor_t *fa = &ls->f[f];
            uint32_t kind = s_ru32(r), dim = s_ru32(r);
            double ns = s_rf64(r);
            int64_t nu = s_ri64(r);
            uint64_t n = s_ru64(r);
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

static int s_dec_blck(s_dec_t *d, s_rbuf_t *r) {
    kfac_opt_t *k = d->st->kfac;
    uint32_t nb = s_ru32(r);
    if (r->bad) return s_short(d, "BLCK");
    if (nb != (uint32_t)k->n_blocks) return s_fail(d, -EINVAL, "has %u blocks, this model %d", nb, k->n_blocks);
    for (int b = 0; b < k->n_blocks; b++) {
        kfac_block_t *kb = &k->blocks[b];
        uint32_t n = s_ru32(r);
        int64_t fv = s_ri64(r), iv = s_ri64(r);
        uint64_t n_inst = s_ru64(r);
        uint32_t valid = s_ru32(r), method = s_ru32(r);
        double damping = s_rf64(r);
        uint64_t n_upd = s_ru64(r);
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
            if (!s_peek_finite(r, cnt)) {
                if (cnt > (r->len - r->at) / 4) return s_short(d, "BLCK");
                return s_fail(d, -EBADMSG, "%s holds NaN or Inf", what);
            }
            if (method == KFAC_INV_CHOLESKY) {
                /* the loader wants a positive diagonal */
                for (uint32_t i = 0; i < n; i++) {
                    float x;
                    s_rbuf_t c = *r;
                    c.at += 4 * ((size_t)i * n + i);
                    s_rfloats(&c, &x, 1);
                    if (!(x > 0.0f)) return s_fail(d, -EBADMSG, "%s has a non-positive diagonal", what);
                }
            }
            if (d->apply) {
                float *buf = malloc(cnt * sizeof(float));
                if (!buf) return s_fail(d, -ENOMEM, "out of memory restoring block %d", b);
                s_rfloats(r, buf, cnt);
                Q = buf;
                v = buf + nn;
                int rc = method == KFAC_INV_EIGEN ? kfac_inverse_load_eigen(kb->inv, Q, v, (float)damping)
                                                  : kfac_inverse_load_cholesky(kb->inv, Q, (float)damping);
                free(buf);
                if (rc < 0) return s_fail(d, rc, "block %d's inverse was not accepted (%s)", b, strerror(-rc));
                kb->inv->n_updates = n_upd;
            } else {
                s_rfloats(r, NULL, cnt);
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

static int s_dec_schd(s_dec_t *d, s_rbuf_t *r) {
    uint32_t nb = s_ru32(r);
    if (r->bad) return s_short(d, "SCHD");
    if (nb != (uint32_t)d->st->n_blocks) return s_fail(d, -EINVAL, "SCHD has %u blocks, this model %d", nb, d->st->n_blocks);
    for (int b = 0; b < d->st->n_blocks; b++) {
        ps_sched_block_t *sb = &d->st->sched[b];
        uint32_t n = s_ru32(r);
        int64_t fv = s_ri64(r), iv = s_ri64(r), failed = s_ri64(r);
        uint32_t due = s_ru32(r);
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

static int s_dec_rfsh(s_dec_t *d, s_rbuf_t *r) {
    uint32_t nb = s_ru32(r);
    if (r->bad) return s_short(d, "RFSH");
    if (nb != (uint32_t)d->st->n_refresh)
        return s_fail(d, -EINVAL, "RFSH has %u refresh trackers, this model %d", nb, d->st->n_refresh);
    for (int b = 0; b < d->st->n_refresh; b++) {
        kfac_refresh_t *rf = d->st->refresh[b];
        uint64_t n = s_ru64(r);
        uint32_t have = s_ru32(r);
        int64_t delta = s_ri64(r), prev = s_ri64(r), next = s_ri64(r);
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

static int s_dec_norm(s_dec_t *d, s_rbuf_t *r) {
    uint32_t n = s_ru32(r), next = s_ru32(r);
    if (r->bad) return s_short(d, "NORM");
    if (n > PS_NORM_HISTORY || next >= PS_NORM_HISTORY || (n < PS_NORM_HISTORY && next != n))
        return s_fail(d, -EBADMSG, "NORM holds impossible values (%u norms, next %u)", n, next);
    double v[PS_NORM_HISTORY];
    for (uint32_t i = 0; i < n; i++) {
        v[i] = s_rf64(r);
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

/* OWNR (see S_OWNR_LEN): checked whole (ps_owners_validate) before the
 * table is replaced (ps_owners_load); with st->owners NULL, checked only. */
static int s_dec_ownr(s_dec_t *d, s_rbuf_t *r) {
    uint32_t n = s_ru32(r);
    if (r->bad) return s_short(d, "OWNR");
    if (n > PS_OWNERS_MAX)
        return s_fail(d, -EBADMSG, "OWNR (member ids bound to CURVE keys) holds %u bindings, more than %d", n,
                      PS_OWNERS_MAX);
    if ((uint64_t)n * S_OWNR_LEN > r->len - r->at) return s_short(d, "OWNR");
    ps_owner_t *v = n ? calloc(n, sizeof *v) : NULL;
    if (n && !v) return s_fail(d, -ENOMEM, "out of memory reading %u member-id bindings", n);
    for (uint32_t i = 0; i < n && d->rc == 0; i++) {
        uint32_t code = s_ru32(r), id = s_ru32(r);
        const uint8_t *key = s_take(r, AUTH_KEY_Z85_LEN);
        if (!key) {
            s_short(d, "OWNR");
            break;
        }
        if (code != S_ROLE_WORKER && code != S_ROLE_STATSD) {
            s_fail(d, -EBADMSG, "OWNR (member ids bound to CURVE keys): binding %u (id %u) has role code %u (1: worker, 2: statsd)",
                   i, id, code);
            break;
        }
        v[i].role = code == S_ROLE_WORKER ? MSG_ROLE_WORKER : MSG_ROLE_STATSD;
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
    static const uint32_t tags[S_N_TAGS] = {S_META, S_PRMS, S_BNST, S_SGDV, S_KOPT, S_FACT,
                                            S_BLCK, S_SCHD, S_RFSH, S_NORM, S_OWNR};
    int seen[S_N_TAGS] = {0};
    s_rbuf_t all = {.p = payload, .len = len};
    d->flags = 0;
    while (all.at < all.len && d->rc == 0) {
        uint32_t tag = s_ru32(&all), zero = s_ru32(&all);
        uint64_t n = s_ru64(&all);
        char tn[5];
        if (all.bad || zero != 0 || n > all.len - all.at)
            return s_fail(d, -EBADMSG, "record at byte %zu is cut short or malformed (corrupt file)",
                          (size_t)(all.at + PS_CKPT_HEADER_LEN));
        int ti = -1;
        for (int i = 0; i < S_N_TAGS; i++)
            if (tags[i] == tag) ti = i;
        if (ti < 0 || (tag == S_OWNR && d->version < 2))
            return s_fail(d, -EBADMSG, "unknown record '%s' in a version-%u file", s_tag_name(tag, tn), d->version);
        if (seen[ti]++) return s_fail(d, -EBADMSG, "record '%s' appears twice", s_tag_name(tag, tn));
        if (ti != 0 && !seen[0]) return s_fail(d, -EBADMSG, "record '%s' before META", s_tag_name(tag, tn));
        s_rbuf_t r = {.p = all.p + all.at, .len = (size_t)n};
        all.at += (size_t)n;
        int need = 1;
        switch (tag) {
        case S_META: s_dec_meta(d, &r); break;
        case S_PRMS: s_dec_floats(d, &r, d->st->net->params, d->st->net->n_params, "the parameters"); break;
        case S_BNST: s_dec_floats(d, &r, d->st->net->state, d->st->net->n_state, "the batch-norm state"); break;
        case S_SGDV:
            if ((need = d->st->sgd != NULL)) s_dec_sgdv(d, &r);
            break;
        case S_KOPT:
            if ((need = d->st->kfac != NULL)) s_dec_kopt(d, &r);
            break;
        case S_FACT:
            if ((need = d->st->kfac != NULL)) s_dec_fact(d, &r);
            break;
        case S_BLCK:
            if ((need = d->st->kfac != NULL)) s_dec_blck(d, &r);
            break;
        case S_SCHD:
            if ((need = d->st->sched != NULL)) s_dec_schd(d, &r);
            break;
        case S_RFSH:
            if ((need = d->st->refresh != NULL)) s_dec_rfsh(d, &r);
            break;
        case S_NORM: s_dec_norm(d, &r); break;
        case S_OWNR: s_dec_ownr(d, &r); break;
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
    } req[S_N_TAGS] = {{S_META, 1},
                       {S_PRMS, 1},
                       {S_BNST, 1},
                       {S_SGDV, d->st->sgd != NULL},
                       {S_KOPT, d->st->kfac != NULL},
                       {S_FACT, d->st->kfac != NULL},
                       {S_BLCK, d->st->kfac != NULL},
                       {S_SCHD, d->st->sched != NULL},
                       {S_RFSH, d->st->refresh != NULL},
                       {S_NORM, 1},
                       {S_OWNR, d->version >= 2}};
    for (int i = 0; i < S_N_TAGS; i++) {
        char tn[5];
        if (req[i].need && !seen[i]) return s_fail(d, -EBADMSG, "record '%s' is missing (truncated file?)", s_tag_name(req[i].tag, tn));
    }
    /* version 1 knew no bindings: its member ids belong to no key, as on a fresh start */
    if (d->apply && d->version < 2 && d->st->owners) ps_owners_release(d->st->owners);
    return 0;
}

static uint32_t s_le32(const uint8_t *b) {
    return (uint32_t)b[0] | (uint32_t)b[1] << 8 | (uint32_t)b[2] << 16 | (uint32_t)b[3] << 24;
}

int ps_ckpt_decode(ps_ckpt_state_t *st, const uint8_t *buf, size_t len, double inv_now_s, const char *origin,
                   char *err, size_t err_len) {
    s_dec_t d = {.st = st, .now_s = inv_now_s, .origin = origin ? origin : "checkpoint", .err = err, .err_len = err_len};
    if (!st || !st->net || !buf) return s_fail(&d, -EINVAL, "nothing to restore into");
    if (len < PS_CKPT_HEADER_LEN)
        return s_fail(&d, -EBADMSG, "%zu bytes: shorter than the %u-byte header (truncated)", len, PS_CKPT_HEADER_LEN);
    if (memcmp(buf, PS_CKPT_MAGIC, 8) != 0) return s_fail(&d, -EBADMSG, "not a kfac checkpoint (bad magic)");
    if (s_le32(buf + 28) != s_crc(buf, 28)) return s_fail(&d, -EBADMSG, "the header's checksum does not match (corrupt header)");
    uint32_t version = s_le32(buf + 8), hlen = s_le32(buf + 12);
    if (version < PS_CKPT_VERSION_MIN || version > PS_CKPT_VERSION)
        return s_fail(&d, -EPROTO,
                      "format version %u; this kfac-ps reads versions %u to %u (written by another release)", version,
                      PS_CKPT_VERSION_MIN, PS_CKPT_VERSION);
    d.version = version;
    if (hlen != PS_CKPT_HEADER_LEN) return s_fail(&d, -EBADMSG, "header length %u, expected %u", hlen, PS_CKPT_HEADER_LEN);
    uint64_t payload = (uint64_t)s_le32(buf + 16) | (uint64_t)s_le32(buf + 20) << 32;
    if (payload != len - PS_CKPT_HEADER_LEN)
        return s_fail(&d, -EBADMSG, "%zu bytes, the header says %" PRIu64 " (%s)", len, payload + PS_CKPT_HEADER_LEN,
                      payload > len - PS_CKPT_HEADER_LEN ? "truncated" : "trailing bytes");
    if (s_le32(buf + 24) != s_crc(buf + PS_CKPT_HEADER_LEN, (size_t)payload))
        return s_fail(&d, -EBADMSG, "the contents' checksum does not match (corrupt file)");
    d.apply = 0;
    if (s_walk(&d, buf + PS_CKPT_HEADER_LEN, (size_t)payload) < 0) return d.rc;
    d.apply = 1;
    return s_walk(&d, buf + PS_CKPT_HEADER_LEN, (size_t)payload);
}
