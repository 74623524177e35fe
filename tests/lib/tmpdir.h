/* tests/lib/tmpdir.h — a unit test's own temporary folder or file: made by
 * mkdtemp or mkstemp under $TMPDIR (default /tmp); a folder is removed with
 * everything in it by nftw,
 * with no shell in between (a path is never read as a command line, and a
 * test that cleans up does not depend on rm being on the PATH). */
#ifndef KFAC_TESTS_LIB_TMPDIR_H
#define KFAC_TESTS_LIB_TMPDIR_H

#include <stddef.h>

/* Make the folder "<TMPDIR>/kfac-<name>.XXXXXX" (X: mkdtemp's letters) and
 * put its path in dir (dir_len bytes). Fails the running Check test when it
 * cannot. */
void test_tmpdir_make(char *dir, size_t dir_len, const char *name);

/* Remove dir and everything under it, depth first; symbolic links are
 * removed, never followed. Returns 0, or the first failure as a negative
 * errno (it goes on with the rest). NULL or "": 0, nothing done. */
int test_tmpdir_remove(const char *dir);

/* A new file "<TMPDIR>/kfac-<name>.XXXXXX" holding text. Returns its path,
 * owned by the caller (unlink it, then free it). Fails the running Check
 * test when it cannot. */
char *test_tmpfile(const char *name, const char *text);

#endif
