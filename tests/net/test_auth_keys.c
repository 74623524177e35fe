/* tests/net/test_auth_keys.c — CURVE key files, allowlists and the loopback
 * test (common/net/auth_keys.h):
 *   - a fresh key pair from libzmq (zmq_curve_keypair, the oracle) written
 *     with auth_key_write_file() reads back byte for byte, and
 *     auth_key_public_of() of the secret key is the pair's public key;
 *   - the reader refuses, with a message naming the file (and line) and the
 *     fix: a key one character short or long, a character Z85 does not use,
 *     a secret key file readable by group or others (each of the bits
 *     0040, 0004, 0020, 0002), no key, two keys, a missing file;
 *   - allowlists: a folder of *.pub files (one holding two keys; a
 *     .secret file beside them is ignored) lists every key for its role and
 *     no other key; the same key for two roles is refused; a bad line is
 *     named by file and line; an empty folder lists nothing (no error);
 *   - the difference of two allowlists per role (what kfac-ps's reload
 *     line reports): keys added, keys removed, a key moved to another role
 *     counted as removed from one and added to the other, NULL as empty;
 *   - writing never replaces an existing file unless forced;
 *   - which bind endpoints count as loopback.
 * Every test works in its own mkdtemp folder; keys are fresh on every run. */
#include <check.h>
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>
#include <zmq.h>

#include "common/net/auth_keys.h"
#include "tests/lib/tmpdir.h"

typedef struct {
    char pub[AUTH_KEY_Z85_LEN + 1], sec[AUTH_KEY_Z85_LEN + 1];
} s_pair_t;

static s_pair_t s_pair(void) {
    s_pair_t p;
    ck_assert_int_eq(zmq_curve_keypair(p.pub, p.sec), 0);
    return p;
}

static char s_dir[256];

static void s_mkdir(void) {
    test_tmpdir_make(s_dir, sizeof s_dir, "auth");
}

/* Write text to s_dir/name with mode; returns the path (static buffer per call site: copy it). */
static const char *s_file(const char *name, const char *text, unsigned mode) {
    static char path[4][512];
    static int k;
    char *p = path[k++ % 4];
    snprintf(p, 512, "%s/%s", s_dir, name);
    FILE *f = fopen(p, "w");
    ck_assert_ptr_nonnull(f);
    fputs(text, f);
    fclose(f);
    ck_assert_int_eq(chmod(p, mode), 0);
    return p;
}

static void s_rmdir(void) {
    ck_assert_int_eq(test_tmpdir_remove(s_dir), 0);
}

START_TEST(test_auth_key_roundtrip) {
    s_mkdir();
    s_pair_t p = s_pair();
    char err[600], text[200], path[512], ppath[512];
    snprintf(path, sizeof path, "%s/k.secret", s_dir);
    snprintf(ppath, sizeof ppath, "%s/k.pub", s_dir);
    snprintf(text, sizeof text, "# a comment\n\n  %s  \n", p.sec);
    ck_assert_int_eq(auth_key_write_file(path, text, 0600, 0, err, sizeof err), 0);
    snprintf(text, sizeof text, "%s\n", p.pub);
    ck_assert_int_eq(auth_key_write_file(ppath, text, 0644, 0, err, sizeof err), 0);
    struct stat st;
    ck_assert_int_eq(stat(path, &st), 0);
    ck_assert_uint_eq(st.st_mode & 0777, 0600);
    auth_key_t sec, pub, derived;
    ck_assert_msg(auth_key_read(path, 1, &sec, err, sizeof err) == 0, "%s", err);
    ck_assert_msg(auth_key_read(ppath, 0, &pub, err, sizeof err) == 0, "%s", err);
    ck_assert_str_eq(sec.z85, p.sec);
    ck_assert_str_eq(pub.z85, p.pub);
    uint8_t raw[AUTH_KEY_BYTES];
    ck_assert_ptr_nonnull(zmq_z85_decode(raw, p.sec));
    ck_assert_mem_eq(sec.raw, raw, AUTH_KEY_BYTES);
    ck_assert_int_eq(auth_key_public_of(&sec, &derived), 0);
    ck_assert_mem_eq(derived.raw, pub.raw, AUTH_KEY_BYTES);
    /* never over an existing file unless forced */
    ck_assert_int_eq(auth_key_write_file(path, text, 0600, 0, err, sizeof err), -EEXIST);
    ck_assert_ptr_nonnull(strstr(err, "--force"));
    ck_assert_int_eq(auth_key_write_file(path, text, 0600, 1, err, sizeof err), 0);
    s_rmdir();
}
END_TEST

START_TEST(test_auth_key_bad_length) {
    s_mkdir();
    s_pair_t p = s_pair();
    char err[600], text[100];
    auth_key_t k;
    snprintf(text, sizeof text, "%.39s\n", p.pub); /* one short */
    const char *f = s_file("short.pub", text, 0644);
    ck_assert_int_eq(auth_key_read(f, 0, &k, err, sizeof err), -EINVAL);
    ck_assert_msg(strstr(err, "short.pub:1") && strstr(err, "39 characters") && strstr(err, "kfac-keygen"), "%s", err);
    snprintf(text, sizeof text, "# c\n%sA\n", p.sec); /* one long, on line 2 */
    f = s_file("long.secret", text, 0600);
    ck_assert_int_eq(auth_key_read(f, 1, &k, err, sizeof err), -EINVAL);
    ck_assert_msg(strstr(err, "long.secret:2") && strstr(err, "41 characters"), "%s", err);
    s_rmdir();
}
END_TEST

START_TEST(test_auth_key_bad_z85) {
    s_mkdir();
    s_pair_t p = s_pair();
    char err[600], text[100];
    auth_key_t k;
    /* '"', ',', '~' and '\\' are not in the Z85 alphabet; the length is right */
    const char bad[] = {'"', ',', '~', '\\', ';'};
    for (size_t i = 0; i < sizeof bad; i++) {
        snprintf(text, sizeof text, "%s\n", p.pub);
        text[7 + i] = bad[i];
        const char *f = s_file("bad.pub", text, 0644);
        ck_assert_int_eq(auth_key_read(f, 0, &k, err, sizeof err), -EINVAL);
        ck_assert_msg(strstr(err, "not Z85") && strstr(err, "bad.pub:1"), "%s", err);
    }
    ck_assert_int_eq(auth_key_from_text(p.pub, &k, err, sizeof err), 0);
    s_rmdir();
}
END_TEST

START_TEST(test_auth_key_secret_permissions) {
    s_mkdir();
    s_pair_t p = s_pair();
    char err[600], text[100];
    auth_key_t k;
    snprintf(text, sizeof text, "%s\n", p.sec);
    const unsigned modes[] = {0640, 0604, 0620, 0602, 0644, 0666};
    for (size_t i = 0; i < sizeof modes / sizeof modes[0]; i++) {
        const char *f = s_file("open.secret", text, modes[i]);
        ck_assert_int_eq(auth_key_read(f, 1, &k, err, sizeof err), -EACCES);
        ck_assert_msg(strstr(err, "chmod 600") && strstr(err, "open.secret"), "mode %o: %s", modes[i], err);
        /* the same file read as a public key: no mode demand */
        ck_assert_int_eq(auth_key_read(f, 0, &k, err, sizeof err), 0);
    }
    const char *f = s_file("ok.secret", text, 0400);
    ck_assert_msg(auth_key_read(f, 1, &k, err, sizeof err) == 0, "%s", err);
    ck_assert_str_eq(k.z85, p.sec);
    s_rmdir();
}
END_TEST

START_TEST(test_auth_key_count_and_missing) {
    s_mkdir();
    s_pair_t a = s_pair(), b = s_pair();
    char err[600], text[200];
    auth_key_t k;
    const char *f = s_file("empty.pub", "# nothing here\n\n", 0644);
    ck_assert_int_eq(auth_key_read(f, 0, &k, err, sizeof err), -EINVAL);
    ck_assert_msg(strstr(err, "no key"), "%s", err);
    snprintf(text, sizeof text, "%s\n%s\n", a.pub, b.pub);
    f = s_file("two.pub", text, 0644);
    ck_assert_int_eq(auth_key_read(f, 0, &k, err, sizeof err), -EINVAL);
    ck_assert_msg(strstr(err, "2 keys"), "%s", err);
    char path[600];
    snprintf(path, sizeof path, "%s/none.pub", s_dir);
    ck_assert_int_eq(auth_key_read(path, 0, &k, err, sizeof err), -ENOENT);
    ck_assert_msg(strstr(err, "none.pub"), "%s", err);
    s_rmdir();
}
END_TEST

START_TEST(test_auth_allow_folder) {
    s_mkdir();
    s_pair_t w1 = s_pair(), w2 = s_pair(), w3 = s_pair(), inv = s_pair(), other = s_pair();
    char err[800], text[300], sub[400];
    snprintf(sub, sizeof sub, "%s/workers", s_dir);
    ck_assert_int_eq(mkdir(sub, 0700), 0);
    char name[64];
    snprintf(name, sizeof name, "workers/a.pub");
    snprintf(text, sizeof text, "# worker 1\n%s\n", w1.pub);
    s_file(name, text, 0644);
    snprintf(text, sizeof text, "%s\n# and another\n%s\n", w2.pub, w3.pub);
    s_file("workers/b.pub", text, 0644);
    snprintf(text, sizeof text, "%s\n", other.sec);
    s_file("workers/c.secret", text, 0600);      /* not a .pub: ignored */
    s_file("workers/notes.txt", "not keys\n", 0644); /* ignored */
    snprintf(text, sizeof text, "%s\n", inv.pub);
    const char *invf = s_file("invertd.pub", text, 0644);
    char invpath[512];
    snprintf(invpath, sizeof invpath, "%s", invf);

    auth_allow_t *a = auth_allow_new();
    ck_assert_ptr_nonnull(a);
    ck_assert_int_eq(auth_allow_add_path(a, sub, MSG_ROLE_WORKER, "[security] allow_workers", err, sizeof err), 3);
    ck_assert_int_eq(auth_allow_add_path(a, invpath, MSG_ROLE_INVERTD, "[security] allow_invertd", err, sizeof err), 1);
    auth_key_t k;
    const char *z[] = {w1.pub, w2.pub, w3.pub, inv.pub, other.pub};
    const msg_role_t want[] = {MSG_ROLE_WORKER, MSG_ROLE_WORKER, MSG_ROLE_WORKER, MSG_ROLE_INVERTD, MSG_ROLE_NONE};
    for (int i = 0; i < 5; i++) {
        ck_assert_int_eq(auth_key_from_text(z[i], &k, err, sizeof err), 0);
        ck_assert_int_eq(auth_allow_find(a, k.raw), want[i]);
    }
    ck_assert_uint_eq(auth_allow_count(a, MSG_ROLE_WORKER), 3);
    ck_assert_uint_eq(auth_allow_count(a, MSG_ROLE_NONE), 4);
    /* the invertd key again as a worker: refused, naming both roles */
    ck_assert_int_eq(auth_allow_add_path(a, invpath, MSG_ROLE_WORKER, "[security] allow_workers", err, sizeof err),
                     -EEXIST);
    ck_assert_msg(strstr(err, "invertd") && strstr(err, "allow_workers"), "%s", err);
    /* a bad line in a listed file */
    snprintf(text, sizeof text, "%s\nnot-a-key\n", other.pub);
    const char *bad = s_file("bad.pub", text, 0644);
    ck_assert_int_eq(auth_allow_add_path(a, bad, MSG_ROLE_STATSD, "[security] allow_statsd", err, sizeof err), -EINVAL);
    ck_assert_msg(strstr(err, "bad.pub:2"), "%s", err);
    /* a folder or key file that group or others may write: refused, naming the path and the fix */
    auth_allow_t *b = auth_allow_new();
    ck_assert_ptr_nonnull(b);
    ck_assert_int_eq(chmod(sub, 0770), 0);
    ck_assert_int_eq(auth_allow_add_path(b, sub, MSG_ROLE_WORKER, "[security] allow_workers", err, sizeof err), -EPERM);
    ck_assert_msg(strstr(err, "chmod go-w ") && strstr(err, sub) && strstr(err, "group"), "%s", err);
    ck_assert_int_eq(chmod(sub, 0700), 0);
    char apub[512];
    snprintf(apub, sizeof apub, "%s/a.pub", sub);
    ck_assert_int_eq(chmod(apub, 0646), 0);
    ck_assert_int_eq(auth_allow_add_path(b, sub, MSG_ROLE_WORKER, "[security] allow_workers", err, sizeof err), -EPERM);
    ck_assert_msg(strstr(err, "chmod go-w ") && strstr(err, apub) && strstr(err, "others"), "%s", err);
    ck_assert_uint_eq(auth_allow_count(b, MSG_ROLE_NONE), 0); /* all or nothing */
    ck_assert_int_eq(chmod(invpath, 0664), 0);
    ck_assert_int_eq(auth_allow_add_path(b, invpath, MSG_ROLE_INVERTD, "[security] allow_invertd", err, sizeof err),
                     -EPERM);
    ck_assert_int_eq(chmod(apub, 0644), 0);
    ck_assert_int_eq(chmod(invpath, 0644), 0);
    ck_assert_int_eq(auth_allow_add_path(b, sub, MSG_ROLE_WORKER, "[security] allow_workers", err, sizeof err), 3);
    auth_allow_free(&b);
    /* an empty folder lists nothing (and is no error) */
    char empty[400];
    snprintf(empty, sizeof empty, "%s/empty", s_dir);
    ck_assert_int_eq(mkdir(empty, 0700), 0);
    ck_assert_int_eq(auth_allow_add_path(a, empty, MSG_ROLE_STATSD, "[security] allow_statsd", err, sizeof err), 0);
    ck_assert_uint_eq(auth_allow_count(a, MSG_ROLE_STATSD), 0);
    auth_allow_free(&a);
    ck_assert_ptr_null(a);
    auth_allow_free(&a);
    s_rmdir();
}
END_TEST

/* Add the Z85 keys z[0..n) for role to a, through a file of them. */
static void s_allow_keys(auth_allow_t *a, const char *const *z, int n, msg_role_t role, const char *name) {
    char text[1000] = "", err[800];
    for (int i = 0; i < n; i++) {
        strcat(text, z[i]);
        strcat(text, "\n");
    }
    const char *f = s_file(name, text, 0644);
    ck_assert_msg(auth_allow_add_path(a, f, role, name, err, sizeof err) == n, "%s", err);
}

START_TEST(test_auth_allow_diff) {
    s_mkdir();
    s_pair_t p[5];
    for (int i = 0; i < 5; i++) p[i] = s_pair();
    auth_allow_t *before = auth_allow_new(), *now = auth_allow_new();
    /* before: workers 0 1 2, invertd 3; now: workers 1 2 4 (0 removed, 4
     * added), statsd 3 (moved from invertd). */
    s_allow_keys(before, (const char *const[]){p[0].pub, p[1].pub, p[2].pub}, 3, MSG_ROLE_WORKER, "b-workers.pub");
    s_allow_keys(before, (const char *const[]){p[3].pub}, 1, MSG_ROLE_INVERTD, "b-invertd.pub");
    s_allow_keys(now, (const char *const[]){p[4].pub, p[2].pub, p[1].pub}, 3, MSG_ROLE_WORKER, "n-workers.pub");
    s_allow_keys(now, (const char *const[]){p[3].pub}, 1, MSG_ROLE_STATSD, "n-statsd.pub");
    size_t added = 9, removed = 9;
    auth_allow_diff(before, now, MSG_ROLE_WORKER, &added, &removed);
    ck_assert_uint_eq(added, 1);
    ck_assert_uint_eq(removed, 1);
    auth_allow_diff(before, now, MSG_ROLE_STATSD, &added, &removed);
    ck_assert_uint_eq(added, 1);
    ck_assert_uint_eq(removed, 0);
    auth_allow_diff(before, now, MSG_ROLE_INVERTD, &added, &removed);
    ck_assert_uint_eq(added, 0);
    ck_assert_uint_eq(removed, 1);
    auth_allow_diff(now, now, MSG_ROLE_WORKER, &added, &removed);
    ck_assert_uint_eq(added + removed, 0);
    auth_allow_diff(NULL, now, MSG_ROLE_WORKER, &added, &removed);
    ck_assert_uint_eq(added, 3);
    ck_assert_uint_eq(removed, 0);
    auth_allow_diff(before, NULL, MSG_ROLE_WORKER, &added, &removed);
    ck_assert_uint_eq(added, 0);
    ck_assert_uint_eq(removed, 3);
    auth_allow_free(&before);
    auth_allow_free(&now);
    s_rmdir();
}
END_TEST

START_TEST(test_auth_endpoint_loopback) {
    const char *yes[] = {"tcp://127.0.0.1:5555", "tcp://127.1.2.3:0", "tcp://[::1]:5555", "ipc:///tmp/kfac.sock",
                         "inproc://x", "tcp://[::ffff:127.0.0.1]:1"};
    const char *no[] = {"tcp://0.0.0.0:5555", "tcp://*:5555", "tcp://10.0.0.1:5555", "tcp://eth0:5555",
                        "tcp://localhost:5555", "tcp://[::]:5555", "tcp://128.0.0.1:1", "tcp://127.0.0.1",
                        "udp://127.0.0.1:5", "", "tcp://[::1:5555"};
    for (size_t i = 0; i < sizeof yes / sizeof yes[0]; i++) ck_assert_msg(auth_endpoint_is_loopback(yes[i]), "%s", yes[i]);
    for (size_t i = 0; i < sizeof no / sizeof no[0]; i++) ck_assert_msg(!auth_endpoint_is_loopback(no[i]), "%s", no[i]);
    ck_assert(!auth_endpoint_is_loopback(NULL));
}
END_TEST

Suite *make_suite(void) {
    Suite *s = suite_create("auth_keys");
    TCase *tc = tcase_create("auth_keys");
    tcase_add_test(tc, test_auth_key_roundtrip);
    tcase_add_test(tc, test_auth_key_bad_length);
    tcase_add_test(tc, test_auth_key_bad_z85);
    tcase_add_test(tc, test_auth_key_secret_permissions);
    tcase_add_test(tc, test_auth_key_count_and_missing);
    tcase_add_test(tc, test_auth_allow_folder);
    tcase_add_test(tc, test_auth_allow_diff);
    tcase_add_test(tc, test_auth_endpoint_loopback);
    suite_add_tcase(s, tc);
    return s;
}
