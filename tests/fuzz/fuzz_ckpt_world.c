/* tests/fuzz/fuzz_ckpt_world.c — see fuzz_ckpt_world.h. */
#include "tests/fuzz/fuzz_ckpt_world.h"

#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "common/base/rng.h"
#include "common/kfac/kfac_opt.h"
#include "common/kfac/kfac_refresh.h"

static const char *s_model =
    "input 2x5x5\n"
    "conv name=c1 out=3 k=3 pad=1\n"
    "fc name=f0 out=4 kfac=doubly\n"
    "batchnorm name=bn\nrelu\n"
    "fc name=f1 out=5\n"
    "fc name=f2 out=3 bias=0\n"
    "softmax_xent\n";

static const char *const s_names[FUZZ_CKPT_N_WORLDS] = {"kfac", "eigen-adaptive", "sgd"};

typedef struct {
    int built;
    net_t *net;
    kfac_opt_t *kfac;
    sgd_t *sgd;
    float *sgd_polyak;       /* (n_params) with sgd */
    long sgd_polyak_count;
    ps_sched_block_t *sched; /* (n_blocks) with kfac */
    kfac_refresh_t **refresh; /* (n_blocks) adaptive only */
    ps_norm_hist_t norms;
    ps_owners_t owners;      /* member ids bound to CURVE keys */
    ps_idents_t idents;      /* member identities (record IDNT) */
    ps_norm_hist_t clip[3], trace[4]; /* the guards' histories (record HIST) */
    ps_drift_t *drift;       /* the reference-gradient check's histories (record DRFT) */
    ps_ckpt_state_t st;
} s_world_t;

static s_world_t s_w[FUZZ_CKPT_N_WORLDS];

const char *fuzz_ckpt_world_name(int i) { return i >= 0 && i < FUZZ_CKPT_N_WORLDS ? s_names[i] : "?"; }

static int s_build(int i, s_world_t *w) {
    char err[512];
    if (!(w->net = net_parse(s_model, "fuzz-ckpt.model", 4, err, sizeof err))) {
        fprintf(stderr, "fuzz_ckpt: the model does not parse: %s\n", err);
        return -1;
    }
    if (i == 2) {
        if (!(w->sgd = sgd_new(w->net, 0.9, 0.0)) || !(w->sgd_polyak = calloc(w->net->n_params, sizeof(float))))
            return -1;
    } else {
        kfac_opts_t o;
        kfac_opts_default(&o);
        if (i == 1) o.method = KFAC_INV_EIGEN;
        if (!(w->kfac = kfac_opt_new(w->net, &o, err, sizeof err))) {
            fprintf(stderr, "fuzz_ckpt: kfac_opt_new: %s\n", err);
            return -1;
        }
        int nb = w->kfac->n_blocks;
        if (!(w->sched = calloc((size_t)nb, sizeof *w->sched))) return -1;
        for (int b = 0; b < nb; b++) ps_sched_block_init(&w->sched[b], w->kfac->blocks[b].n);
        if (i == 1) {
            if (!(w->refresh = calloc((size_t)nb, sizeof *w->refresh))) return -1;
            for (int b = 0; b < nb; b++)
                if (!(w->refresh[b] = kfac_refresh_new((size_t)w->kfac->blocks[b].n, 0.1, 0))) return -1;
        }
    }
    w->st.model_text = s_model;
    w->st.net = w->net;
    w->st.kfac = w->kfac;
    w->st.sgd = w->sgd;
    w->st.sgd_polyak = w->sgd_polyak;
    w->st.sgd_polyak_count = w->sgd ? &w->sgd_polyak_count : NULL;
    w->st.sched = w->sched;
    w->st.refresh = w->refresh;
    w->st.n_blocks = w->kfac ? w->kfac->n_blocks : 0;
    w->st.norms = &w->norms;
    w->st.owners = &w->owners;
    w->st.idents = &w->idents;
    w->st.clip_hists = w->clip;
    w->st.n_clip_hists = 3;
    w->st.trace_hists = w->trace;
    w->st.n_trace_hists = 4;
    if (!(w->drift = ps_drift_new(w->net->n_params))) return -1;
    w->st.drift = w->drift;
    return 0;
}

ps_ckpt_state_t *fuzz_ckpt_world(int i) {
    if (i < 0 || i >= FUZZ_CKPT_N_WORLDS) return NULL;
    s_world_t *w = &s_w[i];
    if (!w->built) {
        if (s_build(i, w) < 0) {
            fprintf(stderr, "fuzz_ckpt: cannot build world %s\n", s_names[i]);
            return NULL;
        }
        w->built = 1;
    }
    return &w->st;
}

static void s_fill(rng_t *r, float *x, size_t n) {
    for (size_t i = 0; i < n; i++) x[i] = (float)rng_normal(r);
}

/* F = B B^T / n + I/2 for a random B: symmetric positive definite. */
static void s_spd(rng_t *r, float *F, int n) {
    double *B = malloc((size_t)n * n * sizeof(double));
    if (!B) return;
    for (size_t i = 0; i < (size_t)n * n; i++) B[i] = rng_normal(r);
    for (int i = 0; i < n; i++)
        for (int j = 0; j < n; j++) {
            double s = i == j ? 0.5 : 0.0;
            for (int k = 0; k < n; k++) s += B[i * n + k] * B[j * n + k] / n;
            F[i * n + j] = (float)s;
        }
    free(B);
}

int fuzz_ckpt_world_randomize(int i, uint64_t seed) {
    ps_ckpt_state_t *st = fuzz_ckpt_world(i);
    if (!st) return -1;
    s_world_t *w = &s_w[i];
    rng_t r;
    rng_seed(&r, seed);
    s_fill(&r, w->net->params, w->net->n_params);
    s_fill(&r, w->net->state, w->net->n_state);
    /* batch-norm running variances stay positive */
    for (size_t k = 0; k < w->net->n_state; k++) w->net->state[k] = fabsf(w->net->state[k]) + 0.1f;
    st->t = 1 + (long)rng_below(&r, 100000);
    st->steps_done = (uint64_t)st->t;
    st->wall_s = 1000.0 * rng_uniform(&r);
    st->round_folded = (int)rng_below(&r, 2);
    st->next_job_id = 1 + (rng_u64(&r) >> 40);
    for (int c = 0; c < PS_CKPT_COUNTERS; c++) st->counters[c] = rng_u64(&r) >> 40;
    memset(&w->norms, 0, sizeof w->norms);
    int n_norms = (int)rng_below(&r, 2 * PS_NORM_HISTORY);
    for (int k = 0; k < n_norms; k++) ps_norm_hist_add(&w->norms, exp(rng_normal(&r)));
    /* 0 to 5 member ids bound to keys (ids distinct per role) */
    {
        static const char z85[] = "0123456789abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ.-:+=^!/*?&<>()[]{}@%$#";
        ps_owner_t v[5];
        int n = (int)rng_below(&r, 6);
        for (int k = 0; k < n; k++) {
            v[k].role = k % 2 ? MSG_ROLE_STATSD : MSG_ROLE_WORKER;
            v[k].id = (uint32_t)k + 1;
            for (int c = 0; c < AUTH_KEY_Z85_LEN; c++) v[k].key[c] = z85[rng_below(&r, (uint32_t)sizeof z85 - 1)];
            v[k].key[AUTH_KEY_Z85_LEN] = 0;
        }
        char why[256];
        if (ps_owners_load(&w->owners, v, n, why, sizeof why) < 0) {
            fprintf(stderr, "fuzz_ckpt: %s\n", why);
            return -1;
        }
        /* 0 to 4 identities with penalties, and the guards' histories */
        ps_ident_saved_t iv[4];
        memset(iv, 0, sizeof iv);
        int ni = (int)rng_below(&r, 5);
        for (int k = 0; k < ni; k++) {
            iv[k].role = k % 3 == 0 ? MSG_ROLE_WORKER : k % 3 == 1 ? MSG_ROLE_STATSD : MSG_ROLE_INVERTD;
            iv[k].id = (uint32_t)k + 1;
            iv[k].n_stalls = rng_below(&r, 5);
            iv[k].n_bad_inverses = rng_below(&r, 4);
            iv[k].demoted = (int)rng_below(&r, 2);
            iv[k].distrusted = (int)rng_below(&r, 2);
            iv[k].has_stats_version = 1;
            iv[k].stats_version = rng_below(&r, 1000);
        }
        if (ps_idents_load(&w->idents, iv, ni, why, sizeof why) < 0) {
            fprintf(stderr, "fuzz_ckpt: %s\n", why);
            return -1;
        }
        for (int k = 0; k < 3; k++)
            for (int q = (int)rng_below(&r, 40); q > 0; q--) ps_norm_hist_add(&w->clip[k], exp(rng_normal(&r)));
        for (int k = 0; k < 4; k++)
            for (int q = (int)rng_below(&r, 40); q > 0; q--) ps_norm_hist_add(&w->trace[k], exp(rng_normal(&r)));
        /* 0 to 3 workers' histories against a reference, a few pushes each */
        const size_t np = w->net->n_params;
        float *dg = malloc(np * sizeof *dg), *dv = malloc(np * sizeof *dv);
        if (!dg || !dv) {
            free(dg);
            free(dv);
            return -1;
        }
        ps_drift_clear(w->drift, 0);
        for (int q = (int)rng_below(&r, 4) * 3; q > 0; q--) {
            s_fill(&r, dg, np);
            s_fill(&r, dv, np);
            ps_drift_verdict_t out;
            ps_drift_judge_dense(w->drift, MSG_ROLE_WORKER, 1 + (uint32_t)(q % 3), q % 2 ? "KEY" : "", dg, dv, 5.0, &out);
        }
        free(dg);
        free(dv);
    }
    if (w->sgd) {
        s_fill(&r, w->sgd->v, w->sgd->n);
        s_fill(&r, w->sgd_polyak, w->net->n_params);
        w->sgd_polyak_count = 1 + (long)rng_below(&r, 100000);
        return 0;
    }
    kfac_opt_t *k = w->kfac;
    s_fill(&r, k->mom, w->net->n_params);
    s_fill(&r, k->polyak, w->net->n_params);
    k->polyak_count = (long)rng_below(&r, 100000);
    for (int l = 0; l < k->avg->n_layers; l++)
        for (int f = 0; f < k->avg->layers[l].n_factors; f++) {
            kfac_factor_t *fa = &k->avg->layers[l].f[f];
            if (fa->kind == KFAC_FACTOR_SYM) s_spd(&r, fa->data, fa->dim);
            else s_fill(&r, fa->data, kfac_factor_len(fa));
            fa->n_samples = 1.0 + (double)rng_below(&r, 1 << 20);
            fa->n_updates = 1 + (long)rng_below(&r, 5000);
        }
    for (int b = 0; b < k->n_blocks; b++) {
        k->blocks[b].factor_version = (long)rng_below(&r, 1000);
        if (kfac_opt_invert_block(k, b) != 0) {
            fprintf(stderr, "fuzz_ckpt: inverting block %d failed\n", b);
            return -1;
        }
        k->blocks[b].inv_version = (long)rng_below(&r, 1000);
        if (rng_below(&r, 4) == 0) {
            k->blocks[b].inv->valid = false;
            k->blocks[b].inv_version = -1;
        }
        ps_sched_block_t *sb = &w->sched[b];
        sb->factor_version = (long)rng_below(&r, 1000) - 1;
        sb->inv_version = (long)rng_below(&r, 1000) - 1;
        sb->failed_version = (long)rng_below(&r, 1000) - 1;
        sb->due = (int)rng_below(&r, 2);
    }
    if (w->refresh)
        for (int b = 0; b < k->n_blocks; b++) {
            kfac_refresh_t *rf = w->refresh[b];
            s_fill(&r, rf->x1, rf->n);
            s_fill(&r, rf->x2, rf->n);
            rf->have = (int)rng_below(&r, 3);
            rf->delta = 1 + (int)rng_below(&r, 50);
            rf->delta_prev = (int)rng_below(&r, 50);
            rf->next = (long)rng_below(&r, 100000);
        }
    return 0;
}
