/* tests/lib/tmpdir.c — see tmpdir.h. */
#include "tests/lib/tmpdir.h"

#include <check.h>
#include <errno.h>
#include <ftw.h>
#include <stdio.h>
#include <stdlib.h>

void test_tmpdir_make(char *dir, size_t dir_len, const char *name) {
    const char *tmp = getenv("TMPDIR");
    int n = snprintf(dir, dir_len, "%s/kfac-%s.XXXXXX", tmp && tmp[0] ? tmp : "/tmp", name);
    ck_assert_msg(n > 0 && (size_t)n < dir_len, "temporary folder name too long for %zu bytes", dir_len);
    ck_assert_msg(mkdtemp(dir) != NULL, "mkdtemp %s failed", dir);
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
