/* tests/ps/test_ps_ckpt.c — checkpoints of the parameter server's state
 * (ps/ckpt_encode.c, ps/ckpt.c,
 * ps/ckpt_wire.c): a random state (parameters, batch-norm state, momentum,
 * Polyak average, every factor with its counts, inverses in both forms and
 * missing ones, scheduler and adaptive-refresh state, counters) survives a
 * save and a restore bit for bit, field by field; every kind of damage
 * (truncation at random offsets, a flipped bit anywhere, a bad magic, a
 * future format version, another model) is refused and leaves the state
 * untouched; files are written atomically, listed newest first, pruned,
 * and a damaged newest file falls back to the previous one. The member ids
 * bound to CURVE keys survive too; a version-1 file (without them) loads
 * with none bound; a cut or corrupt record of them is refused, naming the
 * file and the record, and leaves the bindings as they were. Fresh seed
 * per run (printed on failure). */
#include <check.h>
#include <errno.h>
#include <fcntl.h>
#include <inttypes.h>
#include <math.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>
#include <zlib.h>

#include "common/base/rng.h"
#include "common/kfac/kfac_opt.h"
#include "common/kfac/kfac_refresh.h"
#include "ps/ckpt.h"
#include "tests/lib/seed.h"
#include "tests/lib/testnet.h"
#include "tests/lib/tmpdir.h"

/* Every kind of factor and block: conv (KFC), doubly-factored fc (K, Psi,
 * G, Gbias), batch norm (2x2 blocks, state), fc without bias. */
static const char *s_model =
    "input 2x5x5\n"
    "conv name=c1 out=3 k=3 pad=1\n"
    "fc name=f0 out=4 kfac=doubly\n"
    "batchnorm name=bn\nrelu\n"
    "fc name=f1 out=5\n"
    "fc name=f2 out=3 bias=0\n"
    "softmax_xent\n";

/* One PS-like state: the objects a checkpoint reads and writes. */
typedef struct {
    net_t *net;
    kfac_opt_t *kfac;
    sgd_t *sgd;
    float *sgd_polyak; /* (n_params) with sgd */
    long sgd_polyak_count;
    ps_sched_block_t *sched;
    kfac_refresh_t **refresh;
    ps_norm_hist_t norms;
    ps_owners_t owners;
    ps_idents_t idents;
    ps_ckpt_state_t st;
} world_t;

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
static void s_world(world_t *w, const char *kind, const char *model) {
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

static void s_world_free(world_t *w) {
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
static void s_random_owners(rng_t *r, world_t *w, int n) {
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
static void s_randomize(rng_t *r, world_t *w) {
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
    s_random_owners(r, w, 1 + (int)rng_below(r, 8));
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
static void s_expect_equal(const world_t *a, const world_t *b, double inv_now_s) {
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

static void s_round_trip(const char *kind) {
    uint64_t seed = test_seed();
    rng_t r;
    rng_seed(&r, seed);
    world_t a, b;
    s_world(&a, kind, s_model);
    s_world(&b, kind, s_model);
    s_randomize(&r, &a);
    uint8_t *buf;
    size_t len;
    char err[600] = "";
    ck_assert_msg(ps_ckpt_encode(&a.st, &buf, &len, err, sizeof err) == 0, "%s", err);
    int rc = ps_ckpt_decode(&b.st, buf, len, 42.5, "mem", err, sizeof err);
    ck_assert_msg(rc == 0, "seed %" PRIu64 " %s: %s", seed, kind, err);
    s_expect_equal(&a, &b, 42.5);
    free(buf);
    s_world_free(&a);
    s_world_free(&b);
}

START_TEST(test_ps_ckpt_round_trip_kfac) { s_round_trip("kfac"); }
END_TEST

START_TEST(test_ps_ckpt_round_trip_eigen_adaptive) { s_round_trip("kfac-eigen-adaptive"); }
END_TEST

START_TEST(test_ps_ckpt_round_trip_sgd) { s_round_trip("sgd"); }
END_TEST

/* Checksum of the parts a failed restore must not touch. */
static uint64_t s_fingerprint(const world_t *w) {
    uint64_t h = 1469598103934665603ULL;
#define MIX(p, n)                                                    \
    do {                                                             \
        const uint8_t *q_ = (const uint8_t *)(p);                    \
        for (size_t i_ = 0; i_ < (n); i_++) h = (h ^ q_[i_]) * 1099511628211ULL; \
    } while (0)
    MIX(w->net->params, w->net->n_params * sizeof(float));
    MIX(w->net->state, w->net->n_state * sizeof(float));
    MIX(&w->st.t, sizeof w->st.t);
    MIX(w->st.counters, sizeof w->st.counters);
    if (w->kfac) {
        MIX(w->kfac->mom, w->net->n_params * sizeof(float));
        MIX(w->kfac->avg->arena, w->kfac->avg->n_floats * sizeof(float));
        for (int b = 0; b < w->kfac->n_blocks; b++) {
            MIX(&w->kfac->blocks[b].inv_version, sizeof(long));
            MIX(&w->kfac->blocks[b].inv->valid, sizeof(bool));
            MIX(&w->sched[b].factor_version, sizeof(long));
        }
    }
#undef MIX
    return h;
}

START_TEST(test_ps_ckpt_corruption_detected) {
    uint64_t seed = test_seed();
    rng_t r;
    rng_seed(&r, seed);
    world_t a, b;
    s_world(&a, "kfac", s_model);
    s_world(&b, "kfac", s_model);
    s_randomize(&r, &a);
    s_randomize(&r, &b);
    uint64_t fp = s_fingerprint(&b);
    uint8_t *buf;
    size_t len;
    char err[600] = "";
    ck_assert_int_eq(ps_ckpt_encode(&a.st, &buf, &len, err, sizeof err), 0);
    uint8_t *bad = malloc(len);
    ck_assert_ptr_nonnull(bad);
    /* truncation at random offsets (and at the edges) */
    for (int i = 0; i < 60; i++) {
        size_t cut = i == 0 ? 0 : i == 1 ? len - 1 : i == 2 ? PS_CKPT_HEADER_LEN : rng_below(&r, (uint32_t)len);
        int rc = ps_ckpt_decode(&b.st, buf, cut, 1.0, "cut", err, sizeof err);
        ck_assert_msg(rc == -EBADMSG, "seed %" PRIu64 ": truncation at %zu of %zu: rc %d (%s)", seed, cut, len, rc, err);
        ck_assert_msg(strstr(err, "truncated") || strstr(err, "shorter"), "truncation at %zu reported as: %s", cut, err);
    }
    /* one flipped bit anywhere */
    for (int i = 0; i < 200; i++) {
        memcpy(bad, buf, len);
        size_t at = rng_below(&r, (uint32_t)len);
        bad[at] ^= (uint8_t)(1u << rng_below(&r, 8));
        int rc = ps_ckpt_decode(&b.st, bad, len, 1.0, "flip", err, sizeof err);
        ck_assert_msg(rc < 0, "seed %" PRIu64 ": a flipped bit at byte %zu went unnoticed", seed, at);
        ck_assert_msg(rc == -EBADMSG || rc == -EPROTO, "flip at %zu: rc %d (%s)", at, rc, err);
    }
    /* bad magic (header checksum recomputed, so the magic itself is what fails) */
    memcpy(bad, buf, len);
    memcpy(bad, "NOTKFAC!", 8);
    ck_assert_int_eq(ps_ckpt_decode(&b.st, bad, len, 1.0, "magic", err, sizeof err), -EBADMSG);
    ck_assert_msg(strstr(err, "magic") != NULL, "%s", err);
    /* a future format version, with a valid header checksum */
    memcpy(bad, buf, len);
    bad[8] = (uint8_t)(PS_CKPT_VERSION + 1);
    uint32_t c = (uint32_t)crc32(crc32(0L, Z_NULL, 0), bad, 28);
    for (int i = 0; i < 4; i++) bad[28 + i] = (uint8_t)(c >> (8 * i));
    ck_assert_int_eq(ps_ckpt_decode(&b.st, bad, len, 1.0, "future", err, sizeof err), -EPROTO);
    ck_assert_msg(strstr(err, "format version") != NULL, "%s", err);
    ck_assert_msg(s_fingerprint(&b) == fp, "a refused checkpoint changed the state");
    free(bad);
    free(buf);
    s_world_free(&a);
    s_world_free(&b);
}
END_TEST

/* A checkpoint of one model or optimizer is refused by another. */
START_TEST(test_ps_ckpt_other_run_refused) {
    uint64_t seed = test_seed();
    rng_t r;
    rng_seed(&r, seed);
    static const char *other = "input 2x5x5\nflatten\nfc name=f1 out=5\nsoftmax_xent\n";
    world_t a, b, c, d;
    s_world(&a, "kfac", s_model);
    s_world(&b, "kfac", other);
    s_world(&c, "sgd", s_model);
    s_world(&d, "kfac-eigen-adaptive", s_model);
    s_randomize(&r, &a);
    uint64_t fb = s_fingerprint(&b), fc = s_fingerprint(&c);
    uint8_t *buf;
    size_t len;
    char err[600] = "";
    ck_assert_int_eq(ps_ckpt_encode(&a.st, &buf, &len, err, sizeof err), 0);
    ck_assert_int_eq(ps_ckpt_decode(&b.st, buf, len, 1.0, "x", err, sizeof err), -EINVAL);
    ck_assert_msg(strstr(err, "another model") != NULL, "%s", err);
    ck_assert_int_eq(ps_ckpt_decode(&c.st, buf, len, 1.0, "x", err, sizeof err), -EINVAL);
    ck_assert_msg(strstr(err, "sgd") != NULL, "%s", err);
    ck_assert_int_eq(ps_ckpt_decode(&d.st, buf, len, 1.0, "x", err, sizeof err), -EINVAL);
    ck_assert(s_fingerprint(&b) == fb && s_fingerprint(&c) == fc);
    free(buf);
    s_world_free(&a);
    s_world_free(&b);
    s_world_free(&c);
    s_world_free(&d);
}
END_TEST

/* image with its record `tag` replaced by body (NULL: none) and format
 * version `version` (before 3 also without IDNT and HIST, which it did not know),
 * CRCs recomputed: a new buffer (*out_len bytes). */
static uint8_t *s_with_rec(const uint8_t *buf, size_t len, const char *tag, const uint8_t *body, size_t body_len,
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
        else if (version >= 3 || (memcmp(buf + at, "IDNT", 4) != 0 && memcmp(buf + at, "HIST", 4) != 0)) {
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

static uint8_t *s_with_ownr(const uint8_t *buf, size_t len, const uint8_t *body, size_t body_len, uint32_t version,
                            size_t *out_len) {
    return s_with_rec(buf, len, "OWNR", body, body_len, version, out_len);
}

/* One binding of OWNR: role code, id, key. */
static size_t s_ownr_entry(uint8_t *p, uint32_t code, uint32_t id, const char *key) {
    for (int i = 0; i < 4; i++) p[i] = (uint8_t)(code >> (8 * i));
    for (int i = 0; i < 4; i++) p[4 + i] = (uint8_t)(id >> (8 * i));
    memcpy(p + 8, key, AUTH_KEY_Z85_LEN);
    return 8 + AUTH_KEY_Z85_LEN;
}

#define KEY_A "aaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaa"
#define KEY_B "B-B-B-B-B-B-B-B-B-B-B-B-B-B-B-B-B-B-B-B-"
#define KEY_NUL "B-B-B-B-B-B-B-B-B\0B-B-B-B-B-B-B-B-B-B-B-" /* 40 characters (the 18th a NUL), as s_ownr_entry copies */

/* The member ids bound to CURVE keys: saved and restored (replacing what
 * the table held); a version-1 checkpoint, which has no such record, loads
 * with none bound; a version-1 file with one, and every kind of damage to
 * it (cut short, a count past its end, a role code, a key that is not Z85,
 * an id bound twice, too many) are refused with the file's name and the
 * record's, and leave the bindings untouched. */
START_TEST(test_ps_ckpt_owners_survive) {
    uint64_t seed = test_seed();
    rng_t r;
    rng_seed(&r, seed);
    world_t a, b;
    s_world(&a, "sgd", s_model);
    s_world(&b, "sgd", s_model);
    s_randomize(&r, &a);
    s_random_owners(&r, &a, 16);
    s_random_owners(&r, &b, 3); /* replaced by the restore */
    uint8_t *buf, *bad;
    size_t len, blen;
    char err[600] = "";
    ck_assert_int_eq(ps_ckpt_encode(&a.st, &buf, &len, err, sizeof err), 0);
    ck_assert_msg(ps_ckpt_decode(&b.st, buf, len, 1.0, "good.kfc", err, sizeof err) == 0, "seed %" PRIu64 ": %s",
                  seed, err);
    s_expect_equal(&a, &b, 1.0);
    ck_assert_int_eq(ps_owners_count(&b.owners), 16);
    /* a restored id stays with its key: another key is refused it */
    const ps_owner_t *o0 = ps_owners_at(&a.owners, 0);
    ps_peers_t none;
    ck_assert_int_eq(ps_peers_init(&none, 4), 0);
    const char *other = strcmp(o0->key, KEY_A) ? KEY_A : KEY_B;
    ck_assert_int_eq(ps_owners_check(&b.owners, &none, o0->role, o0->id, other, 1, 10, 3, NULL), PS_OWNER_OTHER_KEY);
    ck_assert_int_eq(ps_owners_check(&b.owners, &none, o0->role, o0->id, o0->key, 1, 10, 3, NULL), PS_OWNER_ADMIT);
    ps_peers_release(&none);

    /* version 1 (no OWNR): loads, nothing bound */
    uint8_t *v1 = s_with_ownr(buf, len, NULL, 0, 1, &blen);
    ck_assert_msg(ps_ckpt_decode(&b.st, v1, blen, 1.0, "v1.kfc", err, sizeof err) == 0, "%s", err);
    ck_assert_int_eq(ps_owners_count(&b.owners), 0);
    free(v1);
    /* version 2 without OWNR: missing */
    ck_assert_int_eq(ps_ckpt_decode(&b.st, buf, len, 1.0, "good.kfc", err, sizeof err), 0);
    bad = s_with_ownr(buf, len, NULL, 0, 2, &blen);
    ck_assert_int_eq(ps_ckpt_decode(&b.st, bad, blen, 1.0, "cut.kfc", err, sizeof err), -EBADMSG);
    ck_assert_msg(strstr(err, "cut.kfc") && strstr(err, "OWNR") && strstr(err, "missing"), "%s", err);
    free(bad);

    uint8_t body[4 + 3 * (8 + AUTH_KEY_Z85_LEN) + 8];
    struct {
        const char *why, *expect;
        uint32_t n, code1, id1;
        const char *key1;
        size_t cut; /* bytes dropped from the end */
        uint32_t version;
    } cases[] = {
        {"a count past the end", "shorter", 3, 1, 2, KEY_B, 0, 2},
        {"cut inside a key", "shorter", 2, 1, 2, KEY_B, 5, 2},
        {"cut inside the count", "shorter", 2, 1, 2, KEY_B, 2 * (8 + AUTH_KEY_Z85_LEN) + 2, 2},
        {"role code 3", "role code 3", 2, 3, 2, KEY_B, 0, 2},
        {"a key with a space", "Z85", 2, 2, 2, "B-B-B-B-B-B-B-B-B B-B-B-B-B-B-B-B-B-B-B-", 0, 2},
        {"a key with a NUL", "Z85", 2, 2, 2, KEY_NUL, 0, 2},
        {"worker id 1 twice", "worker id 1", 2, 1, 1, KEY_B, 0, 2},
        {"too many", "more than", PS_OWNERS_MAX + 1, 1, 2, KEY_B, 0, 2},
        {"OWNR in a version-1 file", "unknown record 'OWNR'", 2, 1, 2, KEY_B, 0, 1},
    };
    for (size_t c = 0; c < sizeof cases / sizeof cases[0]; c++) {
        ck_assert_int_eq(ps_ckpt_decode(&b.st, buf, len, 1.0, "good.kfc", err, sizeof err), 0);
        size_t n = 0;
        for (int i = 0; i < 4; i++) body[n++] = (uint8_t)(cases[c].n >> (8 * i));
        n += s_ownr_entry(body + n, 1, 1, KEY_A);
        n += s_ownr_entry(body + n, cases[c].code1, cases[c].id1, cases[c].key1);
        n -= cases[c].cut;
        bad = s_with_ownr(buf, len, body, n, cases[c].version, &blen);
        int rc = ps_ckpt_decode(&b.st, bad, blen, 1.0, "bad.kfc", err, sizeof err);
        ck_assert_msg(rc == -EBADMSG, "%s: rc %d (%s)", cases[c].why, rc, err);
        ck_assert_msg(strstr(err, "bad.kfc") && strstr(err, "OWNR") && strstr(err, cases[c].expect),
                      "%s reported as: %s", cases[c].why, err);
        s_expect_equal(&a, &b, 1.0); /* untouched */
        free(bad);
    }
    /* the same record, undamaged, is accepted */
    size_t n = 0;
    for (int i = 0; i < 4; i++) body[n++] = (uint8_t)(2u >> (8 * i));
    n += s_ownr_entry(body + n, 1, 1, KEY_A);
    n += s_ownr_entry(body + n, 2, 1, KEY_B);
    bad = s_with_ownr(buf, len, body, n, 2, &blen);
    ck_assert_msg(ps_ckpt_decode(&b.st, bad, blen, 1.0, "ok.kfc", err, sizeof err) == 0, "%s", err);
    ck_assert_str_eq(ps_owners_find(&b.owners, MSG_ROLE_WORKER, 1), KEY_A);
    ck_assert_str_eq(ps_owners_find(&b.owners, MSG_ROLE_STATSD, 1), KEY_B);
    free(bad);
    free(buf);
    s_world_free(&a);
    s_world_free(&b);
}
END_TEST

/* What member identities have done (ps/ident.h, record IDNT) survives a
 * restart: penalties and statistics versions come back under the same
 * identity; a file of version 2 (no IDNT) loads with none; damaged IDNT
 * records (cut short, a role code, unknown flags, a short key, too many)
 * are refused with the file's name and the record's, the table untouched. */
START_TEST(test_ps_ckpt_idents_survive) {
    world_t a, b;
    s_world(&a, "sgd", s_model);
    s_world(&b, "sgd", s_model);
    ps_ident_t *w = ps_ident_attach(&a.idents, MSG_ROLE_WORKER, "", 7, 1);
    ps_ident_stalled(w);
    ps_ident_stalled(w);
    ps_ident_demote(w);
    ps_ident_t *v = ps_ident_attach(&a.idents, MSG_ROLE_INVERTD, KEY_A, 0, 1);
    for (int i = 0; i < 3; i++) ps_ident_bad_inverse(v);
    ps_ident_distrust(v);
    ps_ident_stats_version(ps_ident_attach(&a.idents, MSG_ROLE_STATSD, KEY_B, 0, 1), 1234567890123ULL);
    ps_ident_attach(&b.idents, MSG_ROLE_WORKER, "", 8, 1); /* replaced by the restore */
    uint8_t *buf, *bad;
    size_t len, blen;
    char err[600] = "";
    ck_assert_int_eq(ps_ckpt_encode(&a.st, &buf, &len, err, sizeof err), 0);
    ck_assert_msg(ps_ckpt_decode(&b.st, buf, len, 1.0, "good.kfc", err, sizeof err) == 0, "%s", err);
    ck_assert_int_eq(b.idents.n, 3);
    ps_ident_t *w2 = ps_ident_attach(&b.idents, MSG_ROLE_WORKER, "", 7, 2);
    ck_assert_int_eq(w2->n_stalls, 2);
    ck_assert_int_eq(w2->demoted, 1);
    ps_ident_t *v2 = ps_ident_attach(&b.idents, MSG_ROLE_INVERTD, KEY_A, 3, 2);
    ck_assert_int_eq(v2->n_bad_inverses, 3);
    ck_assert_int_eq(v2->distrusted, 1);
    ps_ident_t *s2 = ps_ident_attach(&b.idents, MSG_ROLE_STATSD, KEY_B, 0, 2);
    ck_assert_int_eq(ps_ident_stats_version(s2, 1234567890123ULL), -1);
    ck_assert_int_eq(b.idents.n, 3);
    /* version 2 (no IDNT): loads, no identity kept */
    uint8_t *v2f = s_with_rec(buf, len, "IDNT", NULL, 0, 2, &blen);
    ck_assert_msg(ps_ckpt_decode(&b.st, v2f, blen, 1.0, "v2.kfc", err, sizeof err) == 0, "%s", err);
    ck_assert_int_eq(b.idents.n, 0);
    free(v2f);
    /* damaged records */
    uint8_t body[4 + 2 * (28 + AUTH_KEY_Z85_LEN)];
    struct {
        const char *why, *expect;
        uint32_t n, code, flags;
        const char *key;
        size_t cut;
    } cases[] = {
        {"a count past the end", "shorter", 3, 1, 0, KEY_B, 0},
        {"cut inside an identity", "shorter", 2, 1, 0, KEY_B, 9},
        {"role code 9", "role code 9", 2, 9, 0, KEY_B, 0},
        {"unknown flags", "unknown flags", 2, 1, 64, KEY_B, 0},
        {"the same identity twice", "the same", 2, 1, 1, KEY_A, 0},
        {"too many", "more than", PS_IDENT_MAX + 1, 1, 0, KEY_B, 0},
    };
    for (size_t c = 0; c < sizeof cases / sizeof cases[0]; c++) {
        ck_assert_int_eq(ps_ckpt_decode(&b.st, buf, len, 1.0, "good.kfc", err, sizeof err), 0);
        size_t n = 0;
        for (int i = 0; i < 4; i++) body[n++] = (uint8_t)(cases[c].n >> (8 * i));
        for (int e = 0; e < 2; e++) {
            uint32_t code = e ? cases[c].code : 1u, flags = e ? cases[c].flags : 1u;
            const char *key = e ? cases[c].key : KEY_A;
            for (int i = 0; i < 4; i++) body[n++] = (uint8_t)(code >> (8 * i));
            for (int i = 0; i < 4; i++) body[n++] = 0; /* id */
            memcpy(body + n, key, AUTH_KEY_Z85_LEN);
            n += AUTH_KEY_Z85_LEN;
            for (int i = 0; i < 8; i++) body[n++] = 0; /* stalls, bad inverses */
            for (int i = 0; i < 4; i++) body[n++] = (uint8_t)(flags >> (8 * i));
            for (int i = 0; i < 8; i++) body[n++] = 0; /* statistics version */
        }
        n -= cases[c].cut;
        bad = s_with_rec(buf, len, "IDNT", body, n, 3, &blen);
        int rc = ps_ckpt_decode(&b.st, bad, blen, 1.0, "bad.kfc", err, sizeof err);
        ck_assert_msg(rc == -EBADMSG, "%s: rc %d (%s)", cases[c].why, rc, err);
        ck_assert_msg(strstr(err, "bad.kfc") && strstr(err, "IDNT") && strstr(err, cases[c].expect),
                      "%s reported as: %s", cases[c].why, err);
        ck_assert_int_eq(b.idents.n, 3); /* untouched */
        free(bad);
    }
    free(buf);
    s_world_free(&a);
    s_world_free(&b);
}
END_TEST

/* The guards' histories (record HIST: each layer's clipped norms, each
 * factor's statistics traces) survive a restart value for value; a file
 * whose counts do not match the model is refused, naming the record; a
 * version-2 file restores them empty. */
START_TEST(test_ps_ckpt_hists_survive) {
    uint64_t seed = test_seed();
    rng_t r;
    rng_seed(&r, seed);
    world_t a, b;
    s_world(&a, "sgd", s_model);
    s_world(&b, "sgd", s_model);
    ps_norm_hist_t ca[3], ta[5], cb[3], tb[5], cc[2];
    memset(ca, 0, sizeof ca);
    memset(ta, 0, sizeof ta);
    memset(cb, 0, sizeof cb);
    memset(tb, 0, sizeof tb);
    for (int k = 0; k < 3; k++)
        for (int i = 0; i < (int)rng_below(&r, 2 * PS_NORM_HISTORY); i++) ps_norm_hist_add(&ca[k], rng_uniform(&r));
    for (int k = 0; k < 5; k++)
        for (int i = 0; i < (int)rng_below(&r, 2 * PS_NORM_HISTORY); i++) ps_norm_hist_add(&ta[k], 1e3 * rng_uniform(&r));
    a.st.clip_hists = ca;
    a.st.n_clip_hists = 3;
    a.st.trace_hists = ta;
    a.st.n_trace_hists = 5;
    b.st.clip_hists = cb;
    b.st.n_clip_hists = 3;
    b.st.trace_hists = tb;
    b.st.n_trace_hists = 5;
    uint8_t *buf;
    size_t len, blen;
    char err[600] = "";
    ck_assert_int_eq(ps_ckpt_encode(&a.st, &buf, &len, err, sizeof err), 0);
    ck_assert_msg(ps_ckpt_decode(&b.st, buf, len, 1.0, "good.kfc", err, sizeof err) == 0, "%s", err);
    for (int k = 0; k < 3; k++) {
        ck_assert_int_eq(cb[k].n, ca[k].n);
        ck_assert_int_eq(cb[k].next, ca[k].next);
        ck_assert_msg(memcmp(cb[k].v, ca[k].v, (size_t)ca[k].n * sizeof(double)) == 0, "seed %" PRIu64, seed);
        ck_assert(ps_norm_hist_median(&cb[k]) == ps_norm_hist_median(&ca[k]));
    }
    for (int k = 0; k < 5; k++) {
        ck_assert_int_eq(tb[k].n, ta[k].n);
        ck_assert_msg(memcmp(tb[k].v, ta[k].v, (size_t)ta[k].n * sizeof(double)) == 0, "seed %" PRIu64, seed);
    }
    /* another model's layout: refused */
    memset(cc, 0, sizeof cc);
    b.st.clip_hists = cc;
    b.st.n_clip_hists = 2;
    ck_assert_int_eq(ps_ckpt_decode(&b.st, buf, len, 1.0, "other.kfc", err, sizeof err), -EINVAL);
    ck_assert_msg(strstr(err, "other.kfc") && strstr(err, "HIST") && strstr(err, "3 clipped gradient norm histories"),
                  "%s", err);
    /* version 2: empty */
    b.st.clip_hists = cb;
    b.st.n_clip_hists = 3;
    uint8_t *v2 = s_with_rec(buf, len, "IDNT", NULL, 0, 2, &blen);
    ck_assert_msg(ps_ckpt_decode(&b.st, v2, blen, 1.0, "v2.kfc", err, sizeof err) == 0, "%s", err);
    for (int k = 0; k < 3; k++) ck_assert_int_eq(cb[k].n, 0);
    free(v2);
    free(buf);
    s_world_free(&a);
    s_world_free(&b);
}
END_TEST

/* Files: atomic writes (no temporary left), newest first, pruning, and a
 * damaged newest file falls back to the one before. */
START_TEST(test_ps_ckpt_files_and_fallback) {
    uint64_t seed = test_seed();
    rng_t r;
    rng_seed(&r, seed);
    char dir[256];
    test_tmpdir_make(dir, sizeof dir, "ckpt-test");
    char sub[300], p[4300], err[600] = "";
    snprintf(sub, sizeof sub, "%s/a/b", dir); /* created on the first write */
    world_t a[3], b;
    uint64_t steps[3] = {10, 20, 30};
    for (int i = 0; i < 3; i++) {
        s_world(&a[i], "kfac", s_model);
        s_randomize(&r, &a[i]);
        a[i].st.t = (long)steps[i];
        a[i].st.steps_done = steps[i];
        uint8_t *buf;
        size_t len;
        ck_assert_int_eq(ps_ckpt_encode(&a[i].st, &buf, &len, err, sizeof err), 0);
        ck_assert_msg(ps_ckpt_write_file(sub, steps[i], buf, len, p, sizeof p, err, sizeof err) == 0, "%s", err);
        free(buf);
    }
    uint64_t got[8];
    ck_assert_int_eq(ps_ckpt_list(sub, got, 8), 3);
    ck_assert_uint_eq(got[0], 30);
    ck_assert_uint_eq(got[2], 10);
    char tmp[4300];
    snprintf(tmp, sizeof tmp, "%s/.ckpt-%010d.kfc.tmp", sub, 30);
    ck_assert_int_ne(access(tmp, F_OK), 0);
    /* damage the newest: cut it in half */
    ps_ckpt_path(sub, 30, p, sizeof p);
    struct stat sb;
    ck_assert_int_eq(stat(p, &sb), 0);
    ck_assert_int_eq(truncate(p, sb.st_size / 2), 0);
    s_world(&b, "kfac", s_model);
    char used[4300] = "";
    int rc = ps_ckpt_restore_newest(sub, &b.st, 3.0, used, sizeof used, err, sizeof err);
    ck_assert_msg(rc == 1, "rc %d: %s", rc, err);
    ck_assert_msg(strstr(used, "ckpt-0000000020.kfc") != NULL, "restored %s", used);
    s_expect_equal(&a[1], &b, 3.0);
    /* keep 1: only the newest file stays, and a dead writer's temporary goes */
    snprintf(tmp, sizeof tmp, "%s/.ckpt-%010d.kfc.tmp", sub, 40);
    FILE *f = fopen(tmp, "w");
    ck_assert_ptr_nonnull(f);
    fputs("half a checkpoint", f);
    fclose(f);
    ck_assert_int_eq(ps_ckpt_prune(sub, 1), 2);
    ck_assert_int_ne(access(tmp, F_OK), 0);
    ck_assert_int_eq(ps_ckpt_list(sub, got, 8), 1);
    ck_assert_uint_eq(got[0], 30);
    /* only a damaged file: an error, not a silent fresh start */
    rc = ps_ckpt_restore_newest(sub, &b.st, 3.0, NULL, 0, err, sizeof err);
    ck_assert_int_eq(rc, -EBADMSG);
    ck_assert_msg(strstr(err, "none of the 1") != NULL, "%s", err);
    /* no folder: nothing to resume */
    snprintf(tmp, sizeof tmp, "%s/none", dir);
    ck_assert_int_eq(ps_ckpt_restore_newest(tmp, &b.st, 3.0, NULL, 0, err, sizeof err), 0);
    unlink(p);
    rmdir(sub);
    snprintf(tmp, sizeof tmp, "%s/a", dir);
    rmdir(tmp);
    rmdir(dir);
    for (int i = 0; i < 3; i++) s_world_free(&a[i]);
    s_world_free(&b);
}
END_TEST

/* The files are private and written safely: folder 0700, file 0600; a link
 * planted at the temporary's name is not followed (its target is left as
 * it was); a file larger than PS_CKPT_MAX_BYTES is refused before it is
 * read. */
START_TEST(test_ps_ckpt_files_private_and_safe) {
    char dir[256];
    test_tmpdir_make(dir, sizeof dir, "ckpt-safe");
    char sub[300], p[4300], err[600] = "", tmp[4300], target[400];
    snprintf(sub, sizeof sub, "%s/ck", dir);
    snprintf(target, sizeof target, "%s/target", dir);
    FILE *t = fopen(target, "w");
    ck_assert(t != NULL);
    fputs("untouched", t);
    fclose(t);
    const uint8_t data[] = "not a real checkpoint, only bytes";
    ck_assert_msg(ps_ckpt_write_file(sub, 5, data, sizeof data, p, sizeof p, err, sizeof err) == 0, "%s", err);
    struct stat sb;
    ck_assert_int_eq(stat(sub, &sb), 0);
    ck_assert_msg((sb.st_mode & 0777) == 0700, "folder mode %o", sb.st_mode & 0777);
    ck_assert_int_eq(stat(p, &sb), 0);
    ck_assert_msg((sb.st_mode & 0777) == 0600, "file mode %o", sb.st_mode & 0777);
    /* a link at the next temporary's name */
    snprintf(tmp, sizeof tmp, "%s/.ckpt-%010d.kfc.tmp", sub, 6);
    ck_assert_int_eq(symlink(target, tmp), 0);
    ck_assert_msg(ps_ckpt_write_file(sub, 6, data, sizeof data, p, sizeof p, err, sizeof err) == 0, "%s", err);
    char back[32] = "";
    t = fopen(target, "r");
    ck_assert(t != NULL);
    ck_assert_ptr_nonnull(fgets(back, sizeof back, t));
    fclose(t);
    ck_assert_str_eq(back, "untouched");
    ck_assert_int_eq(lstat(p, &sb), 0);
    ck_assert(S_ISREG(sb.st_mode));
    /* too large: a sparse file one byte over the cap */
    char big[4300];
    snprintf(big, sizeof big, "%s/big.kfc", dir);
    int fd = open(big, O_WRONLY | O_CREAT | O_TRUNC, 0600);
    ck_assert_int_ge(fd, 0);
    ck_assert_int_eq(ftruncate(fd, (off_t)(PS_CKPT_MAX_BYTES + 1)), 0);
    close(fd);
    uint8_t *buf = NULL;
    size_t len = 0;
    ck_assert_int_eq(ps_ckpt_read_file(big, &buf, &len, err, sizeof err), -EFBIG);
    ck_assert_msg(strstr(err, "not a checkpoint") != NULL, "%s", err);
    ck_assert_ptr_null(buf);
    unlink(big);
    /* reading: a file others may write, and a symbolic link, are refused */
    ck_assert_int_eq(chmod(p, 0620), 0);
    ck_assert_int_eq(ps_ckpt_read_file(p, &buf, &len, err, sizeof err), -EACCES);
    ck_assert_msg(strstr(err, "mode 0620") && strstr(err, "chmod 600"), "%s", err);
    ck_assert_int_eq(chmod(p, 0600), 0);
    ck_assert_msg(ps_ckpt_read_file(p, &buf, &len, err, sizeof err) == 0, "%s", err);
    free(buf);
    buf = NULL;
    char link[4300];
    snprintf(link, sizeof link, "%s/ckpt-%010d.kfc", sub, 7);
    ck_assert_int_eq(symlink(p, link), 0);
    ck_assert_int_eq(ps_ckpt_read_file(link, &buf, &len, err, sizeof err), -ELOOP);
    ck_assert_msg(strstr(err, "symbolic link") != NULL, "%s", err);
    ck_assert_ptr_null(buf);
    /* the checkpoint folder, made ahead of the first write, is private from the start */
    char early[4300];
    snprintf(early, sizeof early, "%s/a/b/checkpoints", dir);
    ck_assert_int_eq(ps_ckpt_mkdirs(early), 0);
    ck_assert_int_eq(stat(early, &sb), 0);
    ck_assert_msg((sb.st_mode & 0777) == 0700, "folder mode %o", sb.st_mode & 0777);
    /* a link where the folder should be is not taken for it */
    char ldir[4300];
    snprintf(ldir, sizeof ldir, "%s/linked", dir);
    ck_assert_int_eq(symlink(early, ldir), 0);
    ck_assert_int_eq(ps_ckpt_mkdirs(ldir), -ENOTDIR);
    ck_assert_int_eq(test_tmpdir_remove(dir), 0);
}
END_TEST

Suite *make_suite(void) {
    Suite *s = suite_create("ps_ckpt");
    TCase *tc = tcase_create("ckpt");
    tcase_set_timeout(tc, 60);
    tcase_add_test(tc, test_ps_ckpt_round_trip_kfac);
    tcase_add_test(tc, test_ps_ckpt_round_trip_eigen_adaptive);
    tcase_add_test(tc, test_ps_ckpt_round_trip_sgd);
    tcase_add_test(tc, test_ps_ckpt_corruption_detected);
    tcase_add_test(tc, test_ps_ckpt_other_run_refused);
    tcase_add_test(tc, test_ps_ckpt_files_and_fallback);
    tcase_add_test(tc, test_ps_ckpt_files_private_and_safe);
    tcase_add_test(tc, test_ps_ckpt_owners_survive);
    tcase_add_test(tc, test_ps_ckpt_idents_survive);
    tcase_add_test(tc, test_ps_ckpt_hists_survive);
    suite_add_tcase(s, tc);
    return s;
}
