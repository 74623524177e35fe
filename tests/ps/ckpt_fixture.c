/* tests/ps/ckpt_fixture.c — see ckpt_fixture.h. */
#include "tests/ps/ckpt_fixture.h"

#include <check.h>
#include <inttypes.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <zlib.h>

#include "tests/lib/testnet.h"

const char *ckfx_model =
    "input 2x5x5\n"
    "conv name=c1 out=3 k=3 pad=1\n"
    "fc name=f0 out=4 kfac=doubly\n"
    "batchnorm name=bn\nrelu\n"
    "fc name=f1 out=5\n"
    "fc name=f2 out=3 bias=0\n"
    "softmax_xent\n";

/* One PS-like state: the objects a checkpoint reads and writes. */

static void s_fill(rng_t *r, float *x, size_t n) {
    for (size_t i = 0; i < n; i++) x[i] = (float)rng_normal(r);
}

/* A random symmetric positive definite n x n matrix. */
static void s_spd(rng_t *r, float *F, int n) {
    float *B = malloc((size_t)n * n * sizeof(float));
    ck_assert_ptr_nonnull(B);
    s_fill(r, B, (size_t)n * n);
    for (int i = 0; i < n; i++)
        for (int j = 0; j < n; j++) {
            double s = i == j ? 0.5 : 0.0;
            for (int k = 0; k < n; k++) s += (double)B[i * n + k] * B[j * n + k] / n;
            F[i * n + j] = (float)s;
        }
    free(B);
}

/* An empty world of kind: "kfac", "kfac-eigen-adaptive" or "sgd". */
void ckfx_world(ckfx_world_t *w, const char *kind, const char *model) {
    memset(w, 0, sizeof *w);
    char err[256];
    w->net = testnet_parse(model, 4);
    if (strcmp(kind, "sgd") == 0) {
        w->sgd = sgd_new(w->net, 0.9, 0.0);
        ck_assert_ptr_nonnull(w->sgd);
        w->sgd_polyak = calloc(w->net->n_params, sizeof(float));
        ck_assert_ptr_nonnull(w->sgd_polyak);
    } else {
        kfac_opts_t o;
        kfac_opts_default(&o);
        if (strstr(kind, "eigen")) o.method = KFAC_INV_EIGEN;
        w->kfac = kfac_opt_new(w->net, &o, err, sizeof err);
        ck_assert_msg(w->kfac != NULL, "%s", err);
        int nb = w->kfac->n_blocks;
        w->sched = calloc((size_t)nb, sizeof *w->sched);
        ck_assert_ptr_nonnull(w->sched);
        for (int b = 0; b < nb; b++) ps_sched_block_init(&w->sched[b], w->kfac->blocks[b].n);
        if (strstr(kind, "adaptive")) {
            w->refresh = calloc((size_t)nb, sizeof *w->refresh);
            ck_assert_ptr_nonnull(w->refresh);
            for (int b = 0; b < nb; b++) {
                w->refresh[b] = kfac_refresh_new((size_t)w->kfac->blocks[b].n, 0.1, 0);
                ck_assert_ptr_nonnull(w->refresh[b]);
            }
        }
    }
    w->st.model_text = model;
    w->st.net = w->net;
    w->st.kfac = w->kfac;
    w->st.sgd = w->sgd;
    w->st.sgd_polyak = w->sgd_polyak;
    w->st.sgd_polyak_count = w->sgd ? &w->sgd_polyak_count : NULL;
    w->st.sched = w->sched;
    w->st.refresh = w->refresh;
    w->st.n_refresh = w->refresh ? w->kfac->n_blocks : 0;
    w->st.n_blocks = w->kfac ? w->kfac->n_blocks : 0;
    w->st.norms = &w->norms;
    w->st.owners = &w->owners;
    w->st.idents = &w->idents;
}

void ckfx_world_free(ckfx_world_t *w) {
    if (w->refresh)
        for (int b = 0; b < w->st.n_blocks; b++) kfac_refresh_free(&w->refresh[b]);
    free(w->refresh);
    free(w->sched);
    kfac_opt_free(&w->kfac);
    sgd_free(&w->sgd);
    free(w->sgd_polyak);
    ps_owners_release(&w->owners);
    ps_idents_release(&w->idents);
    net_free(&w->net);
}

static const char s_z85[] = "0123456789abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ.-:+=^!/*?&<>()[]{}@%$#";

/* n random bindings (worker and statsd ids, random keys) into w. */
void ckfx_random_owners(rng_t *r, ckfx_world_t *w, int n) {
    ps_owner_t v[16];
    ck_assert_int_le(n, 16);
    for (int k = 0; k < n; k++) {
        v[k].role = rng_below(r, 2) ? MSG_ROLE_STATSD : MSG_ROLE_WORKER;
        v[k].id = (uint32_t)(2 * k + (rng_below(r, 2) ? 1 : 0)); /* distinct */
        for (int c = 0; c < AUTH_KEY_Z85_LEN; c++) v[k].key[c] = s_z85[rng_below(r, (uint32_t)sizeof s_z85 - 1)];
        v[k].key[AUTH_KEY_Z85_LEN] = 0;
    }
    char why[256];
    ck_assert_msg(ps_owners_load(&w->owners, v, n, why, sizeof why) == 0, "%s", why);
}

/* Random content in every field a checkpoint holds. */
void ckfx_randomize(rng_t *r, ckfx_world_t *w) {
    net_t *net = w->net;
    s_fill(r, net->params, net->n_params);
    s_fill(r, net->state, net->n_state);
    w->st.t = 1 + (long)rng_below(r, 100000);
    w->st.steps_done = (uint64_t)w->st.t;
    w->st.wall_s = 1000.0 * rng_uniform(r);
    w->st.round_folded = (int)rng_below(r, 2);
    w->st.next_job_id = rng_u64(r) >> 8;
    for (int i = 0; i < PS_CKPT_COUNTERS; i++) w->st.counters[i] = rng_u64(r) >> 16;
    int n_norms = (int)rng_below(r, 2 * PS_NORM_HISTORY);
    for (int i = 0; i < n_norms; i++) ps_norm_hist_add(&w->norms, exp(3.0 * rng_normal(r)));
    ckfx_random_owners(r, w, 1 + (int)rng_below(r, 8));
    if (w->sgd) {
        s_fill(r, w->sgd->v, w->sgd->n);
        s_fill(r, w->sgd_polyak, net->n_params);
        w->sgd_polyak_count = 1 + (long)rng_below(r, 1000000);
    }
    if (!w->kfac) return;
    kfac_opt_t *k = w->kfac;
    s_fill(r, k->mom, net->n_params);
    s_fill(r, k->polyak, net->n_params);
    k->polyak_count = (long)rng_below(r, 1000000);
    k->n_folds = rng_u64(r) >> 20;
    k->n_identity_layers = rng_u64(r) >> 20;
    k->n_precond_errors = rng_u64(r) >> 20;
    k->opts.damping = 1e-4 + rng_uniform(r);
    uint64_t *is = &k->inv_stats.n_calls;
    for (size_t i = 0; i < sizeof k->inv_stats / sizeof(uint64_t); i++) is[i] = rng_u64(r) >> 20;
    for (int l = 0; l < k->avg->n_layers; l++)
        for (int f = 0; f < k->avg->layers[l].n_factors; f++) {
            kfac_factor_t *fa = &k->avg->layers[l].f[f];
            if (fa->kind == KFAC_FACTOR_SYM) s_spd(r, fa->data, fa->dim);
            else s_fill(r, fa->data, kfac_factor_len(fa));
            fa->n_samples = (double)rng_below(r, 1 << 20) + rng_uniform(r);
            fa->n_updates = 1 + (long)rng_below(r, 5000);
        }
    /* Inverses from the random factors (a real decomposition: the loaders
     * insist on what a real one looks like), then a random subset dropped. */
    for (int b = 0; b < k->n_blocks; b++) {
        k->blocks[b].factor_version = (long)rng_below(r, 1000);
        ck_assert_int_eq(kfac_opt_invert_block(k, b), 0);
        kfac_block_t *kb = &k->blocks[b];
        kb->inv_version = (long)rng_below(r, 1000);
        kb->n_installed = rng_below(r, 1000);
        kb->inv->n_updates = rng_below(r, 1000);
        if (rng_below(r, 4) == 0) {
            kb->inv->valid = false;
            kb->inv_version = -1;
        }
    }
    for (int b = 0; b < k->n_blocks; b++) {
        ps_sched_block_t *sb = &w->sched[b];
        sb->factor_version = (long)rng_below(r, 1000) - 1;
        sb->inv_version = (long)rng_below(r, 1000) - 1;
        sb->failed_version = (long)rng_below(r, 1000) - 1;
        sb->due = (int)rng_below(r, 2);
        sb->cur.id = 77; /* a job in flight: not restored */
    }
    if (w->refresh)
        for (int b = 0; b < k->n_blocks; b++) {
            kfac_refresh_t *rf = w->refresh[b];
            s_fill(r, rf->x1, rf->n);
            s_fill(r, rf->x2, rf->n);
            rf->have = (int)rng_below(r, 3);
            rf->delta = 1 + (int)rng_below(r, 50);
            rf->delta_prev = (int)rng_below(r, 50);
            rf->next = (long)rng_below(r, 100000);
        }
}

#define EQF(a, b, n, what) ck_assert_msg(memcmp((a), (b), (n) * sizeof(float)) == 0, "%s differs", what)

/* Every stored field of a equals b's, bit for bit. */
void ckfx_expect_equal(const ckfx_world_t *a, const ckfx_world_t *b, double inv_now_s) {
    const net_t *na = a->net, *nb = b->net;
    EQF(na->params, nb->params, na->n_params, "params");
    EQF(na->state, nb->state, na->n_state, "batch-norm state");
    ck_assert_int_eq(a->st.t, b->st.t);
    ck_assert_uint_eq(a->st.steps_done, b->st.steps_done);
    ck_assert(a->st.wall_s == b->st.wall_s);
    ck_assert_int_eq(a->st.round_folded, b->st.round_folded);
    ck_assert_uint_eq(a->st.next_job_id, b->st.next_job_id);
    for (int i = 0; i < PS_CKPT_COUNTERS; i++) ck_assert_uint_eq(a->st.counters[i], b->st.counters[i]);
    ck_assert_int_eq(a->norms.n, b->norms.n);
    ck_assert_int_eq(a->norms.next, b->norms.next);
    ck_assert(memcmp(a->norms.v, b->norms.v, (size_t)a->norms.n * sizeof(double)) == 0);
    ck_assert(ps_norm_hist_median(&a->norms) == ps_norm_hist_median(&b->norms));
    ck_assert_int_eq(ps_owners_count(&a->owners), ps_owners_count(&b->owners));
    for (int i = 0; i < ps_owners_count(&a->owners); i++) {
        const ps_owner_t *o = ps_owners_at(&a->owners, i);
        const char *k = ps_owners_find(&b->owners, o->role, o->id);
        ck_assert_msg(k && strcmp(k, o->key) == 0, "%s id %u: key %s, restored %s", msg_role_name(o->role), o->id,
                      o->key, k ? k : "(none)");
    }
    if (a->sgd) {
        EQF(a->sgd->v, b->sgd->v, a->sgd->n, "sgd velocity");
        EQF(a->sgd_polyak, b->sgd_polyak, na->n_params, "sgd polyak");
        ck_assert_int_eq(a->sgd_polyak_count, b->sgd_polyak_count);
    }
    if (!a->kfac) return;
    const kfac_opt_t *ka = a->kfac, *kb = b->kfac;
    EQF(ka->mom, kb->mom, na->n_params, "momentum");
    EQF(ka->polyak, kb->polyak, na->n_params, "polyak");
    ck_assert_int_eq(ka->polyak_count, kb->polyak_count);
    ck_assert_uint_eq(ka->n_folds, kb->n_folds);
    ck_assert_uint_eq(ka->n_identity_layers, kb->n_identity_layers);
    ck_assert_uint_eq(ka->n_precond_errors, kb->n_precond_errors);
    ck_assert(ka->opts.damping == kb->opts.damping);
    ck_assert(memcmp(&ka->inv_stats, &kb->inv_stats, sizeof ka->inv_stats) == 0);
    for (int l = 0; l < ka->avg->n_layers; l++)
        for (int f = 0; f < ka->avg->layers[l].n_factors; f++) {
            const kfac_factor_t *fa = &ka->avg->layers[l].f[f], *fb = &kb->avg->layers[l].f[f];
            EQF(fa->data, fb->data, kfac_factor_len(fa), "factor");
            ck_assert(fa->n_samples == fb->n_samples);
            ck_assert_int_eq(fa->n_updates, fb->n_updates);
        }
    for (int i = 0; i < ka->n_blocks; i++) {
        const kfac_block_t *x = &ka->blocks[i], *y = &kb->blocks[i];
        ck_assert_int_eq(x->factor_version, y->factor_version);
        ck_assert_int_eq(x->inv_version, y->inv_version);
        ck_assert_uint_eq(x->n_installed, y->n_installed);
        ck_assert(y->inv_time_s == inv_now_s);
        ck_assert_int_eq(x->inv->valid, y->inv->valid);
        ck_assert_uint_eq(x->inv->n_updates, y->inv->n_updates);
        if (!x->inv->valid) continue;
        ck_assert_int_eq(x->inv->method, y->inv->method);
        ck_assert(x->inv->damping_used == y->inv->damping_used);
        size_t nn = (size_t)x->n * x->n;
        if (x->inv->method == KFAC_INV_EIGEN) {
            EQF(x->inv->Q, y->inv->Q, nn, "eigenvectors");
            EQF(x->inv->v, y->inv->v, (size_t)x->n, "eigenvalues");
        } else {
            EQF(x->inv->inv, y->inv->inv, nn, "inverse");
        }
    }
    for (int i = 0; i < ka->n_blocks; i++) {
        const ps_sched_block_t *x = &a->sched[i], *y = &b->sched[i];
        ck_assert_int_eq(x->factor_version, y->factor_version);
        ck_assert_int_eq(x->inv_version, y->inv_version);
        ck_assert_int_eq(x->failed_version, y->failed_version);
        ck_assert_int_eq(x->due, y->due);
        ck_assert_uint_eq(y->cur.id, 0); /* no job survives a restart */
    }
    if (a->refresh)
        for (int i = 0; i < ka->n_blocks; i++) {
            const kfac_refresh_t *x = a->refresh[i], *y = b->refresh[i];
            EQF(x->x1, y->x1, x->n, "refresh x1");
            EQF(x->x2, y->x2, x->n, "refresh x2");
            ck_assert_int_eq(x->have, y->have);
            ck_assert_int_eq(x->delta, y->delta);
            ck_assert_int_eq(x->delta_prev, y->delta_prev);
            ck_assert_int_eq(x->next, y->next);
        }
}

uint8_t *ckfx_with_rec(const uint8_t *buf, size_t len, const char *tag, const uint8_t *body, size_t body_len,
                       uint32_t version, size_t *out_len) {
    uint8_t *o = malloc(len + body_len + 16);
    ck_assert_ptr_nonnull(o);
    memcpy(o, buf, PS_CKPT_HEADER_LEN);
    size_t at = PS_CKPT_HEADER_LEN, n = PS_CKPT_HEADER_LEN;
    int found = 0;
    while (at < len) {
        uint64_t rl = 0;
        for (int i = 0; i < 8; i++) rl |= (uint64_t)buf[at + 8 + (size_t)i] << (8 * i);
        if (memcmp(buf + at, tag, 4) == 0) found = 1;
        else if ((version >= 3 || (memcmp(buf + at, "IDNT", 4) != 0 && memcmp(buf + at, "HIST", 4) != 0)) &&
                 (version >= 4 || memcmp(buf + at, "DRFT", 4) != 0)) {
            memcpy(o + n, buf + at, 16 + (size_t)rl);
            n += 16 + (size_t)rl;
        }
        at += 16 + (size_t)rl;
    }
    ck_assert(found);
    if (body) {
        memcpy(o + n, tag, 4);
        memset(o + n + 4, 0, 4);
        for (int i = 0; i < 8; i++) o[n + 8 + (size_t)i] = (uint8_t)((uint64_t)body_len >> (8 * i));
        memcpy(o + n + 16, body, body_len);
        n += 16 + body_len;
    }
    uint64_t payload = n - PS_CKPT_HEADER_LEN;
    for (int i = 0; i < 4; i++) o[8 + i] = (uint8_t)(version >> (8 * i));
    for (int i = 0; i < 8; i++) o[16 + i] = (uint8_t)(payload >> (8 * i));
    uint32_t c = (uint32_t)crc32(crc32(0L, Z_NULL, 0), o + PS_CKPT_HEADER_LEN, (uInt)payload);
    for (int i = 0; i < 4; i++) o[24 + i] = (uint8_t)(c >> (8 * i));
    c = (uint32_t)crc32(crc32(0L, Z_NULL, 0), o, 28);
    for (int i = 0; i < 4; i++) o[28 + i] = (uint8_t)(c >> (8 * i));
    *out_len = n;
    return o;
}
