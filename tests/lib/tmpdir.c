/* tests/lib/tmpdir.c — see tmpdir.h. */
#include "tests/lib/tmpdir.h"

#include <check.h>
#include <errno.h>
#include <ftw.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

/* "<TMPDIR>/kfac-<name>.XXXXXX" into buf. */
static void s_template(char *buf, size_t buf_len, const char *name) {
    const char *tmp = getenv("TMPDIR");
    int n = snprintf(buf, buf_len, "%s/kfac-%s.XXXXXX", tmp && tmp[0] ? tmp : "/tmp", name);
    ck_assert_msg(n > 0 && (size_t)n < buf_len, "temporary name too long for %zu bytes", buf_len);
}

void test_tmpdir_make(char *dir, size_t dir_len, const char *name) {
    s_template(dir, dir_len, name);
    ck_assert_msg(mkdtemp(dir) != NULL, "mkdtemp %s failed", dir);
}

char *test_tmpfile(const char *name, const char *text) {
    char path[4096];
    s_template(path, sizeof path, name);
    int fd = mkstemp(path);
    ck_assert_msg(fd >= 0, "mkstemp %s failed", path);
    size_t len = strlen(text);
    ck_assert_int_eq((long)write(fd, text, len), (long)len);
    ck_assert_int_eq(close(fd), 0);
    char *copy = strdup(path);
    ck_assert_ptr_nonnull(copy);
    return copy;
}

/* nftw has no user pointer: the first failure of the walk in progress. */
static int s_first_err;

static int s_remove_one(const char *path, const struct stat *sb, int type, struct FTW *ftw) {
    (void)sb, (void)type, (void)ftw;
    if (remove(path) != 0 && s_first_err == 0) s_first_err = -errno;
    return 0; /* go on: remove what can be removed */
}

int test_tmpdir_remove(const char *dir) {
    if (!dir || !dir[0]) return 0;
    s_first_err = 0;
    if (nftw(dir, s_remove_one, 16, FTW_DEPTH | FTW_PHYS) != 0 && s_first_err == 0) s_first_err = -errno;
    return s_first_err;
}
