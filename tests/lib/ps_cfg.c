/* tests/lib/ps_cfg.c — see ps_cfg.h. */
#include "tests/lib/ps_cfg.h"

#include <check.h>
#include <stdio.h>
#include <stdlib.h>
#include <unistd.h>

const char *const test_ps_cfg_model = "input 1x4x4\nflatten\nfc name=fc1 out=6\nrelu\nfc name=fc2 out=3\nsoftmax_xent\n";

void test_ps_cfg(runcfg_t *c, const char *prefix, const char *kind, char *path, size_t path_len,
                 char *const *extra, int n_extra) {
    ck_assert_int_lt(snprintf(path, path_len, "/tmp/%s.XXXXXX", prefix), (int)path_len);
    int fd = mkstemp(path);
    ck_assert_int_ge(fd, 0);
    FILE *f = fdopen(fd, "w");
    ck_assert_ptr_nonnull(f);
    fputs(test_ps_cfg_model, f);
    ck_assert_int_eq(fclose(f), 0);
    ck_assert_int_le(n_extra, 20);
    char err[512];
    char *argv[32] = {"kfac-ps", "--seed", "5", "--model.file", path, "--optimizer.kind", (char *)kind,
                      "--data.dir", "/nonexistent/kfac-data"};
    int argc = 9;
    for (int i = 0; i < n_extra; i++) argv[argc++] = extra[i];
    argv[argc] = NULL;
    ck_assert_msg(runcfg_load(c, RUNCFG_ROLE_PS, argc, argv, err, sizeof err) == 0, "%s", err);
}
