/* tests/lib/check_main.c — the main() every Check test binary shares. Each
 * tests/<folder>/test_<module>.c defines make_suite(); this runs it and exits non-zero
 * on any failure. CK_FORK stays on (the default): each test runs in its own
 * process, so ZeroMQ or CUDA contexts must be created inside the test. */
#include <check.h>
#include <stdlib.h>

#include "common/base/blas.h"

Suite *make_suite(void);

int main(int argc, char **argv) {
    (void)argc;
    blas_restart_if_generic(argv); /* the same OpenBLAS kernels the daemons use */
    SRunner *sr = srunner_create(make_suite());
    srunner_run_all(sr, CK_NORMAL);
    int failed = srunner_ntests_failed(sr);
    srunner_free(sr);
    return failed == 0 ? EXIT_SUCCESS : EXIT_FAILURE;
}
