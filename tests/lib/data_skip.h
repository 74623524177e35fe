/* tests/lib/data_skip.h — a test binary's suite_skip_reason() for data it
 * needs: the MNIST or Fashion-MNIST files of data/ (make data). */
#ifndef KFAC_TESTS_DATA_SKIP_H
#define KFAC_TESTS_DATA_SKIP_H

#include <stddef.h>

/* 1 with "<file> (or .gz) is missing: run `make data`" in why when one of
 * the n files (plain or .gz) cannot be read, else 0. */
int test_skip_without_files(const char *const *files, int n, char *why, size_t why_len);

/* The MNIST training and test files in data/mnist. */
int test_skip_without_mnist(char *why, size_t why_len);

#endif
