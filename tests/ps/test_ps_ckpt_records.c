/* tests/ps/test_ps_ckpt_records.c — the checkpoint's records of what
 * outlives a connection or a step (ps/ckpt.c, ps/ckpt_encode.c): the
 * member ids bound to CURVE keys (OWNR), the member identities (IDNT) and
 * the guards' histories (HIST) and the reference-gradient check's (DRFT)
 * survive a save and a restore; a file of an
 * older format (without them) loads with none; a cut or corrupt record is
 * refused, naming the file and the record, and leaves the tables as they
 * were. Fresh seed per run (printed on failure). */

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
#include "ps/ckpt.h"
#include "tests/lib/seed.h"
#include "tests/lib/tmpdir.h"
#include "tests/ps/ckpt_fixture.h"

static uint8_t *s_with_ownr(const uint8_t *buf, size_t len, const uint8_t *body, size_t body_len, uint32_t version,
                            size_t *out_len) {
    return ckfx_with_rec(buf, len, "OWNR", body, body_len, version, out_len);
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
    ckfx_world_t a, b;
    ckfx_world(&a, "sgd", ckfx_model);
    ckfx_world(&b, "sgd", ckfx_model);
    ckfx_randomize(&r, &a);
    ckfx_random_owners(&r, &a, 16);
    ckfx_random_owners(&r, &b, 3); /* replaced by the restore */
    uint8_t *buf, *bad;
    size_t len, blen;
    char err[600] = "";
    ck_assert_int_eq(ps_ckpt_encode(&a.st, &buf, &len, err, sizeof err), 0);
    ck_assert_msg(ps_ckpt_decode(&b.st, buf, len, 1.0, "good.kfc", err, sizeof err) == 0, "seed %" PRIu64 ": %s",
                  seed, err);
    ckfx_expect_equal(&a, &b, 1.0);
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
        ckfx_expect_equal(&a, &b, 1.0); /* untouched */
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
    ckfx_world_free(&a);
    ckfx_world_free(&b);
}
END_TEST

/* What member identities have done (ps/ident.h, record IDNT) survives a
 * restart: penalties and statistics versions come back under the same
 * identity; a file of version 2 (no IDNT) loads with none; damaged IDNT
 * records (cut short, a role code, unknown flags, a short key, too many)
 * are refused with the file's name and the record's, the table untouched. */
START_TEST(test_ps_ckpt_idents_survive) {
    ckfx_world_t a, b;
    ckfx_world(&a, "sgd", ckfx_model);
    ckfx_world(&b, "sgd", ckfx_model);
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
    uint8_t *v2f = ckfx_with_rec(buf, len, "IDNT", NULL, 0, 2, &blen);
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
        bad = ckfx_with_rec(buf, len, "IDNT", body, n, 3, &blen);
        int rc = ps_ckpt_decode(&b.st, bad, blen, 1.0, "bad.kfc", err, sizeof err);
        ck_assert_msg(rc == -EBADMSG, "%s: rc %d (%s)", cases[c].why, rc, err);
        ck_assert_msg(strstr(err, "bad.kfc") && strstr(err, "IDNT") && strstr(err, cases[c].expect),
                      "%s reported as: %s", cases[c].why, err);
        ck_assert_int_eq(b.idents.n, 3); /* untouched */
        free(bad);
    }
    free(buf);
    ckfx_world_free(&a);
    ckfx_world_free(&b);
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
    ckfx_world_t a, b;
    ckfx_world(&a, "sgd", ckfx_model);
    ckfx_world(&b, "sgd", ckfx_model);
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
    uint8_t *v2 = ckfx_with_rec(buf, len, "IDNT", NULL, 0, 2, &blen);
    ck_assert_msg(ps_ckpt_decode(&b.st, v2, blen, 1.0, "v2.kfc", err, sizeof err) == 0, "%s", err);
    for (int k = 0; k < 3; k++) ck_assert_int_eq(cb[k].n, 0);
    free(v2);
    free(buf);
    ckfx_world_free(&a);
    ckfx_world_free(&b);
}
END_TEST

/* The reference-gradient check's histories (DRFT): a table of 3 workers
 * after random pushes survives a save and a restore into a table that held
 * others (the same members, counts and statistics, the directions bit for
 * bit, and the next push judged alike on both); a version-3 file (no DRFT)
 * loads with an empty table; another model's gradient length, a role code
 * and a direction that is not finite are refused, naming the file and the
 * record, and leave the table as it was. */
START_TEST(test_ps_ckpt_drift_survives) {
    uint64_t seed = test_seed();
    rng_t r;
    rng_seed(&r, seed);
    ckfx_world_t a, b;
    ckfx_world(&a, "sgd", ckfx_model);
    ckfx_world(&b, "sgd", ckfx_model);
    const size_t np = a.net->n_params;
    ps_drift_t *da = ps_drift_new(np), *db = ps_drift_new(np);
    float *g = malloc(np * sizeof *g), *v = malloc(np * sizeof *v);
    ck_assert(da && db && g && v);
    for (int t = 0; t < 15; t++) {
        for (size_t i = 0; i < np; i++) v[i] = (float)rng_normal(&r);
        for (uint32_t id = 1; id <= 3; id++) {
            for (size_t i = 0; i < np; i++) g[i] = (float)(rng_normal(&r) + (id == 3 ? 2.0 : 0.0));
            ps_drift_verdict_t out;
            ck_assert_int_eq(ps_drift_judge_dense(da, MSG_ROLE_WORKER, id, id == 2 ? "KEY-2" : "", g, v, 5.0, &out), 0);
        }
    }
    ps_drift_verdict_t o;
    ck_assert_int_eq(ps_drift_judge_dense(db, MSG_ROLE_WORKER, 77, "", g, v, 5.0, &o), 0); /* replaced on restore */
    a.st.drift = da;
    b.st.drift = db;
    uint8_t *buf;
    size_t len, blen;
    char err[600] = "";
    ck_assert_int_eq(ps_ckpt_encode(&a.st, &buf, &len, err, sizeof err), 0);
    ck_assert_msg(ps_ckpt_decode(&b.st, buf, len, 1.0, "good.kfc", err, sizeof err) == 0, "%s", err);
    ps_drift_saved_t sa[PS_DRIFT_MAX], sb[PS_DRIFT_MAX];
    ck_assert_int_eq(ps_drift_save(da, sa, PS_DRIFT_MAX), 3);
    ck_assert_int_eq(ps_drift_save(db, sb, PS_DRIFT_MAX), 3);
    ck_assert(ps_drift_judged(db) == ps_drift_judged(da));
    for (int k = 0; k < 3; k++) {
        ck_assert(sa[k].role == sb[k].role && sa[k].id == sb[k].id && strcmp(sa[k].key, sb[k].key) == 0);
        ck_assert(sa[k].judged_at == sb[k].judged_at && sa[k].n == sb[k].n && sa[k].n_judged == sb[k].n_judged);
        ck_assert(sa[k].has_m == sb[k].has_m && sa[k].refusing == sb[k].refusing);
        ck_assert(sa[k].mu == sb[k].mu && sa[k].s2 == sb[k].s2 && sa[k].gbar == sb[k].gbar && sa[k].z == sb[k].z);
        ck_assert_msg(memcmp(sa[k].m, sb[k].m, np * sizeof(float)) == 0, "seed %" PRIu64 ": member %d", seed, k);
    }
    /* the next push: the same verdict on both tables */
    ps_drift_verdict_t oa, ob;
    for (size_t i = 0; i < np; i++) g[i] = (float)(rng_normal(&r) + 2.0);
    ck_assert_int_eq(ps_drift_judge_dense(da, MSG_ROLE_WORKER, 3, "", g, v, 5.0, &oa), 0);
    ck_assert_int_eq(ps_drift_judge_dense(db, MSG_ROLE_WORKER, 3, "", g, v, 5.0, &ob), 0);
    ck_assert(oa.z == ob.z && oa.refuse == ob.refuse && oa.n_judged == ob.n_judged && oa.n_judged == 16);
    /* version 3 (no DRFT): loads, the table emptied */
    uint8_t *v3 = ckfx_with_rec(buf, len, "DRFT", NULL, 0, 3, &blen);
    ck_assert_msg(ps_ckpt_decode(&b.st, v3, blen, 1.0, "v3.kfc", err, sizeof err) == 0, "%s", err);
    ck_assert_int_eq(ps_drift_save(db, NULL, 0), 0);
    free(v3);
    /* damaged records: refused, the table as it was (reloaded from the good file first) */
    ck_assert_msg(ps_ckpt_decode(&b.st, buf, len, 1.0, "good.kfc", err, sizeof err) == 0, "%s", err);
    /* the DRFT body: u64 judged, u64 n_params, u32 n, then the members */
    size_t at = PS_CKPT_HEADER_LEN, body = 0, body_len = 0;
    while (at < len) {
        uint64_t rl = 0;
        for (int i = 0; i < 8; i++) rl |= (uint64_t)buf[at + 8 + (size_t)i] << (8 * i);
        if (memcmp(buf + at, "DRFT", 4) == 0) {
            body = at + 16;
            body_len = (size_t)rl;
        }
        at += 16 + (size_t)rl;
    }
    ck_assert(body && body_len > 20);
    uint8_t *bad = malloc(body_len);
    ck_assert_ptr_nonnull(bad);
    const struct {
        size_t off;
        uint32_t val;
        int rc;
        const char *want;
    } cases[] = {
        {8, 12345, -EINVAL, "gradients of 12345 floats"},
        {20, 9, -EBADMSG, "role code 9"},
        {20 + 28 + PS_DRIFT_KEY_LEN + 32 + 4 * 7, 0x7fc00000u, -EBADMSG, "not finite"}, /* a NaN in member 0's m */
        {20 + 8 + PS_DRIFT_KEY_LEN + 8, 0x80u, -EBADMSG, "unknown flags"},
    };
    for (size_t c = 0; c < sizeof cases / sizeof cases[0]; c++) {
        memcpy(bad, buf + body, body_len);
        for (int i = 0; i < 4; i++) bad[cases[c].off + (size_t)i] = (uint8_t)(cases[c].val >> (8 * i));
        uint8_t *img = ckfx_with_rec(buf, len, "DRFT", bad, body_len, PS_CKPT_VERSION, &blen);
        int rc = ps_ckpt_decode(&b.st, img, blen, 1.0, "bad.kfc", err, sizeof err);
        ck_assert_msg(rc == cases[c].rc && strstr(err, "bad.kfc") && strstr(err, "DRFT") && strstr(err, cases[c].want),
                      "case %zu: rc %d: %s", c, rc, err);
        ck_assert_int_eq(ps_drift_save(db, sb, PS_DRIFT_MAX), 3); /* untouched */
        ck_assert(sb[0].id == sa[0].id && memcmp(sa[0].m, sb[0].m, np * sizeof(float)) == 0);
        free(img);
    }
    /* an identity twice: member 1's bytes replaced by member 0's */
    {
        const size_t L = 28 + PS_DRIFT_KEY_LEN + 32 + np * sizeof(float);
        ck_assert(body_len >= 20 + 3 * L);
        memcpy(bad, buf + body, body_len);
        memcpy(bad + 20 + L, bad + 20, L);
        uint8_t *twice = ckfx_with_rec(buf, len, "DRFT", bad, body_len, PS_CKPT_VERSION, &blen);
        int rc = ps_ckpt_decode(&b.st, twice, blen, 1.0, "twice.kfc", err, sizeof err);
        ck_assert_msg(rc == -EBADMSG && strstr(err, "twice.kfc") && strstr(err, "appears twice"), "rc %d: %s", rc, err);
        ck_assert_int_eq(ps_drift_save(db, sb, PS_DRIFT_MAX), 3); /* untouched */
        ck_assert(memcmp(sa[0].m, sb[0].m, np * sizeof(float)) == 0);
        free(twice);
    }
    /* cut short */
    uint8_t *img = ckfx_with_rec(buf, len, "DRFT", buf + body, body_len - 3, PS_CKPT_VERSION, &blen);
    ck_assert_int_eq(ps_ckpt_decode(&b.st, img, blen, 1.0, "cut.kfc", err, sizeof err), -EBADMSG);
    ck_assert_msg(strstr(err, "cut.kfc") && strstr(err, "DRFT"), "%s", err);
    ck_assert_int_eq(ps_drift_save(db, NULL, 0), 3);
    free(img);
    free(bad);
    free(buf);
    free(g);
    free(v);
    ps_drift_free(&da);
    ps_drift_free(&db);
    a.st.drift = b.st.drift = NULL;
    ckfx_world_free(&a);
    ckfx_world_free(&b);
}
END_TEST

Suite *make_suite(void) {
    Suite *s = suite_create("ps_ckpt_records");
    TCase *tc = tcase_create("records");
    tcase_set_timeout(tc, 60);
    tcase_add_test(tc, test_ps_ckpt_owners_survive);
    tcase_add_test(tc, test_ps_ckpt_idents_survive);
    tcase_add_test(tc, test_ps_ckpt_drift_survives);
    tcase_add_test(tc, test_ps_ckpt_hists_survive);
    suite_add_tcase(s, tc);
    return s;
}
