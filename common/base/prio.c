/* common/base/prio.c — see prio.h. */
#include "common/base/prio.h"

#include <dirent.h>
#include <errno.h>
#include <stdlib.h>
#include <sched.h>
#include <stdio.h>
#include <string.h>
#include <sys/resource.h>
#include <sys/syscall.h>
#include <unistd.h>

static pid_t s_tid(void) { return (pid_t)syscall(SYS_gettid); }

int prio_idle_self(char *what, size_t what_len) {
    struct sched_param sp;
    memset(&sp, 0, sizeof sp);
    /* The tid, not 0 or the pid: Linux applies both calls to one thread. */
    if (sched_setscheduler(s_tid(), SCHED_IDLE, &sp) == 0) {
        snprintf(what, what_len, "SCHED_IDLE");
        return 0;
    }
    int e = errno;
    if (setpriority(PRIO_PROCESS, (id_t)s_tid(), 19) == 0) {
        snprintf(what, what_len, "nice 19 (SCHED_IDLE refused: %s)", strerror(e));
        return 0;
    }
    int e2 = errno;
    snprintf(what, what_len, "unchanged (SCHED_IDLE refused: %s; nice 19 refused: %s)", strerror(e), strerror(e2));
    return -e2;
}

int prio_self_is_idle(void) {
    if (sched_getscheduler(s_tid()) == SCHED_IDLE) return 1;
    errno = 0;
    int nice = getpriority(PRIO_PROCESS, (id_t)s_tid());
    return errno == 0 && nice >= 19;
}

int prio_nice_self(int nice, char *what, size_t what_len) {
    if (nice < 1 || nice > 19) {
        snprintf(what, what_len, "unchanged (nice %d out of 1..19)", nice);
        return -EINVAL;
    }
    errno = 0;
    int now = getpriority(PRIO_PROCESS, (id_t)s_tid());
    if (errno == 0 && now >= nice) {
        snprintf(what, what_len, "nice %d (already)", now);
        return 0;
    }
    if (setpriority(PRIO_PROCESS, (id_t)s_tid(), nice) != 0) {
        int e = errno;
        snprintf(what, what_len, "unchanged (nice %d refused: %s)", nice, strerror(e));
        return -e;
    }
    snprintf(what, what_len, "nice %d", nice);
    return 0;
}

int prio_yield_self(int nice, char *what, size_t what_len) {
    if (nice < 1 || nice > 19) {
        snprintf(what, what_len, "unchanged (nice %d out of 1..19)", nice);
        return -EINVAL;
    }
    char first[96] = "";
    errno = 0;
    int now = getpriority(PRIO_PROCESS, (id_t)s_tid());
    if (!(errno == 0 && now >= nice) && setpriority(PRIO_PROCESS, (id_t)s_tid(), nice) != 0)
        snprintf(first, sizeof first, " (nice %d refused: %s)", nice, strerror(errno));
    char idle[160];
    int rc = prio_idle_self(idle, sizeof idle);
    snprintf(what, what_len, "%s%s", idle, first);
    return rc;
}

int prio_boost_idle(int *tids, int max, int *n_out) {
    *n_out = 0;
    DIR *dir = opendir("/proc/self/task");
    if (!dir) return -errno;
    int n = 0, rc = 0;
    struct dirent *e;
    while ((e = readdir(dir)) != NULL && n < max) {
        char *end = NULL;
        long tid = strtol(e->d_name, &end, 10);
        if (tid <= 0 || !end || *end) continue;
        if (sched_getscheduler((pid_t)tid) != SCHED_IDLE) continue;
        struct sched_param sp;
        memset(&sp, 0, sizeof sp);
        if (sched_setscheduler((pid_t)tid, SCHED_OTHER, &sp) != 0) {
            if (errno == ESRCH) continue; /* the thread ended meanwhile */
            rc = -errno;
            break;
        }
        tids[n++] = (int)tid;
    }
    closedir(dir);
    *n_out = n;
    return rc;
}

/* CAP_SYS_NICE (bit 23) in the calling thread's effective set (CapEff of
 * /proc/thread-self/status: capabilities are per thread). */
static int s_has_cap_sys_nice(void) {
    FILE *f = fopen("/proc/thread-self/status", "r");
    if (!f) return 0;
    char line[256];
    unsigned long long eff = 0;
    int found = 0;
    while (fgets(line, sizeof line, f))
        if (sscanf(line, "CapEff: %llx", &eff) == 1) {
            found = 1;
            break;
        }
    fclose(f);
    return found && ((eff >> 23) & 1ULL);
}

int prio_can_lift(int nice, char *why, size_t why_len) {
    if (why_len) why[0] = 0;
    if (s_has_cap_sys_nice()) return 1;
    struct rlimit rl;
    if (getrlimit(RLIMIT_NICE, &rl) != 0) {
        snprintf(why, why_len, "RLIMIT_NICE unreadable: %s", strerror(errno));
        return 0;
    }
    rlim_t need = (rlim_t)(20 - nice);
    if (rl.rlim_cur != RLIM_INFINITY && rl.rlim_cur < need) {
        char hard[32];
        if (rl.rlim_max == RLIM_INFINITY) snprintf(hard, sizeof hard, "unlimited");
        else snprintf(hard, sizeof hard, "%llu", (unsigned long long)rl.rlim_max);
        snprintf(why, why_len, "no CAP_SYS_NICE, and RLIMIT_NICE is %llu (hard limit %s) where nice %d needs %llu",
                 (unsigned long long)rl.rlim_cur, hard, nice, (unsigned long long)need);
        return 0;
    }
    return 1;
}

void prio_unboost(const int *tids, int n) {
    struct sched_param sp;
    memset(&sp, 0, sizeof sp);
    for (int i = 0; i < n; i++) (void)sched_setscheduler((pid_t)tids[i], SCHED_IDLE, &sp);
}
