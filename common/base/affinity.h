/* common/base/affinity.h — CPU pinning of a daemon from a CPU list in its
 * configuration ([ps] cpus, [worker] cpus, [statsd] cpus, [invertd] cpus),
 * so that on one host the statistics and inverse daemons can be given
 * their own cores, away from the gradient path (Ba et al. run them on
 * separate machines).
 *
 * A CPU list is what taskset -c and /sys/devices/system/cpu/online use:
 * comma-separated CPU numbers and inclusive ranges, e.g. "0", "0-1",
 * "0,2-3". The empty list means "no pinning". Whitespace around items is
 * allowed; nothing else is.
 *
 * Linux only (sched_setaffinity). Pinning applies to every thread the
 * process has when it is called (OpenBLAS may have started its threads
 * before main) and, by inheritance, to every thread created afterwards.
 */
#ifndef KFAC_AFFINITY_H
#define KFAC_AFFINITY_H

#include <sched.h>
#include <stddef.h>

/* Parse a CPU list into *set (cleared first). An empty or all-blank list
 * gives an empty set and returns 0. Returns 0, or -EINVAL with a message
 * in err naming the offending item (bad syntax, a range whose end is below
 * its start, a CPU number >= CPU_SETSIZE). */
int affinity_parse(const char *list, cpu_set_t *set, char *err, size_t err_len);

/* The set as a compact CPU list ("0-1,4") into buf (always terminated;
 * "" for an empty set). Returns the length it needed (like snprintf). */
int affinity_format(const cpu_set_t *set, char *buf, size_t len);

/* Pin the whole calling process to the CPUs of `list` (NULL or empty: do
 * nothing and return 0). Every CPU must be one the process may run on now
 * (sched_getaffinity); otherwise nothing changes and -EINVAL comes back
 * with a message naming the CPUs available. `what` names the setting in
 * messages (e.g. "[invertd] cpus"). Logs at info level what it did
 * ("pinned to CPUs 1 ([invertd] cpus): 3 threads"). Returns 0, -EINVAL
 * (bad list, CPU not available) or the negative errno of a failed
 * sched_setaffinity of the calling thread (a thread that exited
 * meanwhile is skipped). */
int affinity_apply(const char *list, const char *what, char *err, size_t err_len);

/* CPUs the calling thread may run on now (sched_getaffinity: after a
 * pinning, the pinned ones), at least 1. */
int affinity_count(void);

#endif
