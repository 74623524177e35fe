/* tests/lib/check_main.h — what a Check test binary defines for the shared
 * main() in tests/lib/check_main.c.
 *
 * Exit status of every test binary: 0 all tests passed, 1 a test failed (or
 * the skip probe crashed), 77 skipped: the suite cannot run on this machine
 * (tests/run.sh counts it as a skip, never as a pass). */
#ifndef KFAC_TESTS_LIB_CHECK_MAIN_H
#define KFAC_TESTS_LIB_CHECK_MAIN_H

#include <check.h>
#include <stddef.h>
#include <stdint.h>

/* Required: the binary's suite (one per module, tests named
 * test_<unit>_<behaviour>). Owned by the caller (srunner_create takes it). */
Suite *make_suite(void);

/* Optional (a weak symbol: binaries that can run anywhere leave it out):
 * can the suite run here? Returns 0 to run it, or 1 with the reason in why
 * (why_len bytes, e.g. "no GPU (cudaGetDeviceCount: no CUDA-capable device
 * is detected)"); main() then prints "<binary>: skipped: <why>" and exits 77
 * without running a test. It is called in a child process that exits right
 * after, so it may create contexts (CUDA, ZeroMQ) that the forked tests
 * must not inherit. A probe that crashes fails the binary. */
int suite_skip_reason(char *why, size_t why_len) __attribute__((weak));

/* ms x CK_TIMEOUT_MULTIPLIER (the factor by which Check stretches its own
 * per-test timeouts, and which tests/run.sh sets for a loaded machine; 1
 * when unset, not a number or not above 0): a watchdog inside a test that
 * guards against a hang scales as Check's timeouts do, so that on a slow
 * machine the test's timeout, not its watchdog, is the bound. */
uint64_t check_scaled_ms(uint64_t ms);

#endif
