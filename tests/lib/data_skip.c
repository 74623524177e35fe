/* tests/lib/data_skip.c — see data_skip.h. */
#include "tests/lib/data_skip.h"

#include <stdio.h>
#include <unistd.h>

int test_skip_without_files(const char *const *files, int n, char *why, size_t why_len) {
    for (int i = 0; i < n; i++) {
        char gz[512];
        snprintf(gz, sizeof gz, "%s.gz", files[i]);
        if (access(files[i], R_OK) != 0 && access(gz, R_OK) != 0) {
            snprintf(why, why_len, "%s (or .gz) is missing: run `make data`", files[i]);
            return 1;
        }
    }
    return 0;
}

int test_skip_without_mnist(char *why, size_t why_len) {
    static const char *const files[] = {"data/mnist/train-images-idx3-ubyte", "data/mnist/train-labels-idx1-ubyte",
                                        "data/mnist/t10k-images-idx3-ubyte", "data/mnist/t10k-labels-idx1-ubyte"};
    return test_skip_without_files(files, 4, why, why_len);
}
