/* common/base/affinity.c — see affinity.h. */
#include "common/base/affinity.h"

#include <ctype.h>
#include <dirent.h>
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/syscall.h>
#include <unistd.h>

#include "common/base/log.h"

/* Read a decimal CPU number at *p (no sign), advancing *p. 0 or -EINVAL. */
static int s_number(const char **p, long *out) {
    const char *s = *p;
    if (!isdigit((unsigned char)*s)) return -EINVAL;
    long v = 0;
    while (isdigit((unsigned char)*s)) {
        v = v * 10 + (*s - '0');
        if (v >= CPU_SETSIZE) return -ERANGE;
        s++;
    }
    *p = s;
    *out = v;
    return 0;
}

static const char *s_skip_blank(const char *s) {
    while (*s == ' ' || *s == '\t') s++;
    return s;
}

int affinity_parse(const char *list, cpu_set_t *set, char *err, size_t err_len) {
    CPU_ZERO(set);
    if (!list) return 0;
    const char *p = s_skip_blank(list);
    if (!*p) return 0;
    for (;;) {
        const char *item = p;
        long lo = 0, hi = 0;
        int rc = s_number(&p, &lo);
        if (rc == 0) {
            p = s_skip_blank(p);
            hi = lo;
            if (*p == '-') {
                p = s_skip_blank(p + 1);
                rc = s_number(&p, &hi);
                p = s_skip_blank(p);
            }
        }
        if (rc == -ERANGE) {
            snprintf(err, err_len, "CPU list '%s': CPU numbers must be below %d", list, CPU_SETSIZE);
            return -EINVAL;
        }
        if (rc < 0 || (*p && *p != ',')) {
            size_t n = strcspn(item, ",");
            snprintf(err, err_len, "CPU list '%s': bad item '%.*s' (expected N or N-M, items separated by commas)",
                     list, (int)n, item);
            return -EINVAL;
        }
        if (hi < lo) {
            snprintf(err, err_len, "CPU list '%s': range %ld-%ld ends below its start", list, lo, hi);
            return -EINVAL;
        }
        for (long c = lo; c <= hi; c++) CPU_SET((int)c, set);
        if (!*p) return 0;
        p = s_skip_blank(p + 1); /* past ',' */
        if (!*p) {
            snprintf(err, err_len, "CPU list '%s': ends with a comma", list);
            return -EINVAL;
        }
    }
}

int affinity_format(const cpu_set_t *set, char *buf, size_t len) {
    size_t off = 0;
    int need = 0, full = 0;
    if (len) buf[0] = '\0';
    for (int c = 0; c < CPU_SETSIZE; c++) {
        if (!CPU_ISSET(c, set)) continue;
        int e = c;
        while (e + 1 < CPU_SETSIZE && CPU_ISSET(e + 1, set)) e++;
        char item[32];
        int n = e > c ? snprintf(item, sizeof item, "%s%d-%d", need ? "," : "", c, e)
                      : snprintf(item, sizeof item, "%s%d", need ? "," : "", c);
        if (!full && off + (size_t)n < len) {
            memcpy(buf + off, item, (size_t)n + 1);
            off += (size_t)n;
        } else {
            full = 1; /* whole items only, in order */
        }
        need += n;
        c = e;
    }
    return need;
}

/* Pin one thread; a thread that exited meanwhile (ESRCH) is not an error. */
static int s_pin_thread(pid_t tid, const cpu_set_t *set) {
    if (sched_setaffinity(tid, sizeof *set, set) == 0) return 0;
    return errno == ESRCH ? 1 : -errno;
}

int affinity_apply(const char *list, const char *what, char *err, size_t err_len) {
    cpu_set_t want, allowed;
    if (!what) what = "cpus";
    int rc = affinity_parse(list, &want, err, err_len);
    if (rc < 0) {
        /* prefix the setting's name to the parser's message */
        char msg[512];
        snprintf(msg, sizeof msg, "%s", err);
        snprintf(err, err_len, "%s: %s", what, msg);
        return rc;
    }
    if (CPU_COUNT(&want) == 0) return 0;
    if (sched_getaffinity(0, sizeof allowed, &allowed) < 0) {
        rc = -errno;
        snprintf(err, err_len, "%s: cannot read this process's CPUs (%s)", what, strerror(errno));
        return rc;
    }
    cpu_set_t missing;
    CPU_ZERO(&missing);
    for (int c = 0; c < CPU_SETSIZE; c++)
        if (CPU_ISSET(c, &want) && !CPU_ISSET(c, &allowed)) CPU_SET(c, &missing);
    if (CPU_COUNT(&missing) > 0) {
        char m[256], a[256];
        affinity_format(&missing, m, sizeof m);
        affinity_format(&allowed, a, sizeof a);
        snprintf(err, err_len, "%s = %s: CPU %s not available (this process may use CPUs %s)", what, list, m, a);
        return -EINVAL;
    }
    /* The calling thread first (its failure is the error), then every other
     * thread of the process. */
    pid_t self = (pid_t)syscall(SYS_gettid);
    if ((rc = s_pin_thread(self, &want)) < 0) {
        snprintf(err, err_len, "%s: sched_setaffinity failed (%s)", what, strerror(-rc));
        return rc;
    }
    int n_threads = 1, n_failed = 0;
    DIR *d = opendir("/proc/self/task");
    if (d) {
        struct dirent *e;
        while ((e = readdir(d))) {
            char *end = NULL;
            long tid = strtol(e->d_name, &end, 10);
            if (!end || *end || tid <= 0 || (pid_t)tid == self) continue;
            int r = s_pin_thread((pid_t)tid, &want);
            if (r == 0) n_threads++;
            else if (r < 0) n_failed++;
        }
        closedir(d);
    }
    char w[256];
    affinity_format(&want, w, sizeof w);
    log_info("pinned to CPU%s %s (%s): %d thread%s%s", CPU_COUNT(&want) == 1 ? "" : "s", w, what, n_threads,
             n_threads == 1 ? "" : "s", n_failed ? " (some threads could not be pinned)" : "");
    return 0;
}

int affinity_count(void) {
    cpu_set_t allowed;
    if (sched_getaffinity(0, sizeof allowed, &allowed) < 0) return 1;
    int n = CPU_COUNT(&allowed);
    return n > 0 ? n : 1;
}
