/* tests/ps/test_ps_ckpt.c — checkpoints of the parameter server's state
 * (ps/ckpt_encode.c, ps/ckpt.c,
 * ps/ckpt_wire.c): a random state (parameters, batch-norm state, momentum,
 * Polyak average, every factor with its counts, inverses in both forms and
 * missing ones, scheduler and adaptive-refresh state, counters) survives a
 * save and a restore bit for bit, field by field; every kind of damage
 * (truncation at random offsets, a flipped bit anywhere, a bad magic, a
 * future format version, another model) is refused and leaves the state
 * untouched; files are written atomically, listed newest first, pruned,
 * and a damaged newest file falls back to the previous one; a file others
 * may write, or a link, is not read. The records of the member tables and
 * the guards' histories: test_ps_ckpt_records.c. Fresh seed per run
 * (printed on failure). */

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

static void s_round_trip(const char *kind) {
    uint64_t seed = test_seed();
    rng_t r;
    rng_seed(&r, seed);
    ckfx_world_t a, b;
    ckfx_world(&a, kind, ckfx_model);
    ckfx_world(&b, kind, ckfx_model);
    ckfx_randomize(&r, &a);
    uint8_t *buf;
    size_t len;
    char err[600] = "";
    ck_assert_msg(ps_ckpt_encode(&a.st, &buf, &len, err, sizeof err) == 0, "%s", err);
    int rc = ps_ckpt_decode(&b.st, buf, len, 42.5, "mem", err, sizeof err);
    ck_assert_msg(rc == 0, "seed %" PRIu64 " %s: %s", seed, kind, err);
    ckfx_expect_equal(&a, &b, 42.5);
    free(buf);
    ckfx_world_free(&a);
    ckfx_world_free(&b);
}

START_TEST(test_ps_ckpt_round_trip_kfac) { s_round_trip("kfac"); }
END_TEST

START_TEST(test_ps_ckpt_round_trip_eigen_adaptive) { s_round_trip("kfac-eigen-adaptive"); }
END_TEST

START_TEST(test_ps_ckpt_round_trip_sgd) { s_round_trip("sgd"); }
END_TEST

/* Checksum of the parts a failed restore must not touch. */
static uint64_t s_fingerprint(const ckfx_world_t *w) {
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
    ckfx_world_t a, b;
    ckfx_world(&a, "kfac", ckfx_model);
    ckfx_world(&b, "kfac", ckfx_model);
    ckfx_randomize(&r, &a);
    ckfx_randomize(&r, &b);
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
    ckfx_world_free(&a);
    ckfx_world_free(&b);
}
END_TEST

/* A checkpoint of one model or optimizer is refused by another. */
START_TEST(test_ps_ckpt_other_run_refused) {
    uint64_t seed = test_seed();
    rng_t r;
    rng_seed(&r, seed);
    static const char *other = "input 2x5x5\nflatten\nfc name=f1 out=5\nsoftmax_xent\n";
    ckfx_world_t a, b, c, d;
    ckfx_world(&a, "kfac", ckfx_model);
    ckfx_world(&b, "kfac", other);
    ckfx_world(&c, "sgd", ckfx_model);
    ckfx_world(&d, "kfac-eigen-adaptive", ckfx_model);
    ckfx_randomize(&r, &a);
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
    ckfx_world_free(&a);
    ckfx_world_free(&b);
    ckfx_world_free(&c);
    ckfx_world_free(&d);
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
    ckfx_world_t a[3], b;
    uint64_t steps[3] = {10, 20, 30};
    for (int i = 0; i < 3; i++) {
        ckfx_world(&a[i], "kfac", ckfx_model);
        ckfx_randomize(&r, &a[i]);
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
    ckfx_world(&b, "kfac", ckfx_model);
    char used[4300] = "";
    int rc = ps_ckpt_restore_newest(sub, &b.st, 3.0, used, sizeof used, err, sizeof err);
    ck_assert_msg(rc == 1, "rc %d: %s", rc, err);
    ck_assert_msg(strstr(used, "ckpt-0000000020.kfc") != NULL, "restored %s", used);
    ckfx_expect_equal(&a[1], &b, 3.0);
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
    for (int i = 0; i < 3; i++) ckfx_world_free(&a[i]);
    ckfx_world_free(&b);
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
    suite_add_tcase(s, tc);
    return s;
}
