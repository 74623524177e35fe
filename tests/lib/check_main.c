/* tests/lib/check_main.c — the main() every Check test binary shares (see
 * check_main.h). Each tests/<folder>/test_<module>.c defines make_suite();
 * this runs it and exits non-zero on any failure, or 77 when the binary's
 * optional suite_skip_reason() says it cannot run here. CK_FORK stays on
 * (the default): each test runs in its own process, so ZeroMQ or CUDA
 * contexts must be created inside the test. */
#include "tests/lib/check_main.h"

#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/wait.h>
#include <unistd.h>

#include "common/base/blas.h"

/* Ask suite_skip_reason() in a child process. Returns 0 (run), 1 (skip,
 * reason in why) or -1 (the probe failed; reason in why). */
static int s_skip_probe(char *why, size_t why_len) {
    int fd[2];
    if (pipe(fd) != 0) {
        snprintf(why, why_len, "pipe: %s", strerror(errno));
        return -1;
    }
    fflush(NULL); /* the child's exit must not repeat buffered output */
    pid_t pid = fork();
    if (pid < 0) {
        snprintf(why, why_len, "fork: %s", strerror(errno));
        close(fd[0]);
        close(fd[1]);
        return -1;
    }
    if (pid == 0) {
        close(fd[0]);
        char buf[1024] = {0};
        buf[0] = suite_skip_reason(buf + 1, sizeof buf - 1) ? 's' : 'r';
        buf[sizeof buf - 1] = 0;
        size_t len = 1 + strlen(buf + 1) + 1, off = 0;
        while (off < len) {
            ssize_t w = write(fd[1], buf + off, len - off);
            if (w <= 0) _exit(2);
            off += (size_t)w;
        }
        _exit(0);
    }
    close(fd[1]);
    char buf[1024];
    size_t got = 0;
    for (;;) {
        ssize_t r = read(fd[0], buf + got, sizeof buf - 1 - got);
        if (r > 0 && (got += (size_t)r) < sizeof buf - 1) continue;
        if (r < 0 && errno == EINTR) continue;
        break;
    }
    close(fd[0]);
    buf[got] = 0;
    int status = 0;
    while (waitpid(pid, &status, 0) < 0 && errno == EINTR) {}
    if (!WIFEXITED(status) || WEXITSTATUS(status) != 0 || got < 2) {
        snprintf(why, why_len, "the skip probe died (status 0x%x)", (unsigned)status);
        return -1;
    }
    snprintf(why, why_len, "%s", buf + 1);
    return buf[0] == 's';
}

uint64_t check_scaled_ms(uint64_t ms) {
    const char *e = getenv("CK_TIMEOUT_MULTIPLIER");
    char *end = NULL;
    double k = e ? strtod(e, &end) : 1.0;
    if (!e || end == e || *end || !(k > 0.0) || k > 1000.0) k = 1.0;
    return (uint64_t)((double)ms * k + 0.5);
}

int main(int argc, char **argv) {
    (void)argc;
    blas_restart_if_generic(argv); /* the same OpenBLAS kernels the daemons use (may execv) */
    if (suite_skip_reason) {
        char why[1024];
        int rc = s_skip_probe(why, sizeof why);
        if (rc != 0) {
            printf("%s: %s: %s\n", argv[0], rc > 0 ? "skipped" : "FAIL", why);
            return rc > 0 ? 77 : EXIT_FAILURE;
        }
    }
    SRunner *sr = srunner_create(make_suite());
    srunner_run_all(sr, CK_NORMAL);
    int failed = srunner_ntests_failed(sr);
    srunner_free(sr);
    return failed == 0 ? EXIT_SUCCESS : EXIT_FAILURE;
}
