/* common/run/runpick.h — the folder of a run that names none: [run] out_dir
 * left empty (the default) gives every run a new folder of its own under
 * runs/, and runs/latest, a symbolic link, names the newest.
 *
 *   runs/20261126-080012/      a run started at 08:00:12 UTC
 *   runs/20261126-080012-2/    another one started in the same second
 *   runs/latest -> 20261126-080012-2
 *
 * A folder is taken with mkdir(2), which fails when the name exists, so two
 * runs started at once never share one. runs/latest is replaced atomically
 * (a link under a temporary name, then rename(2)): a reader always finds the
 * previous link or the new one. A runs/latest that is a real folder (the
 * default out_dir of older versions) is never touched: the run goes to a new
 * folder all the same and the caller is told, so it can say what to do.
 *
 * Only the program that writes the run's folder chooses it (kfac-ps,
 * kfac-train); deploy/kfac-launch and deploy/slurm/kfac-multiprog follow
 * the same rule for the folders they fill before kfac-ps starts, and pass
 * the folder on by name.
 *
 * Paths are relative to the working directory unless base is absolute.
 * Not thread-safe against itself in one process (one caller at start-up). */
#ifndef KFAC_RUN_RUNPICK_H
#define KFAC_RUN_RUNPICK_H

#include <stddef.h>
#include <time.h>

#include "common/run/runcfg.h"

#define RUNPICK_BASE "runs"      /* where runs without an out_dir go */
#define RUNPICK_LATEST "latest"  /* base/latest: the link to the newest */
#define RUNPICK_SUFFIX_MAX 999   /* base/STAMP-2 ... base/STAMP-999 */

/* Create a new folder base/YYYYMMDD-HHMMSS (now, in UTC), or base/STAMP-N
 * with the smallest free N in 2..RUNPICK_SUFFIX_MAX when that is taken;
 * base is created first when missing. Returns 0 with the folder's path in
 * out, or a negative errno with the reason (naming the folder) in err. */
int runpick_new(const char *base, time_t now, char *out, size_t out_len, char *err, size_t err_len);

/* Make base/latest a symbolic link to leaf (a name inside base), replacing
 * the previous link atomically. Returns 0; -EEXIST when base/latest exists
 * and is not a link (left untouched); or another negative errno (the link
 * could not be made: a file system without links, no permission). */
int runpick_link_latest(const char *base, const char *leaf);

/* The folder base/latest stands for: the link's target (as base/TARGET
 * when relative), or base/latest itself when it is a real folder. Returns
 * 0 with the path in out; -ENOENT when base/latest does not exist; another
 * negative errno with the reason in err (a link to a missing folder:
 * -ENOENT too, with err set; err is left empty when there is no link). */
int runpick_latest(const char *base, char *out, size_t out_len, char *err, size_t err_len);

/* The rule for a run's configuration: when c->out_dir is empty, replace it
 * (caller-owned, released by runcfg_release like any string of c) with
 *   - with [checkpoint] resume: the folder base/latest stands for (the
 *     newest run goes on), or a new folder when there is no base/latest;
 *   - otherwise: a new folder (runpick_new), and base/latest then points
 *     at it (a real folder there is left alone, with a warning that says
 *     what to do).
 * Logs the choice (info). A named out_dir is left as it is. Returns 0, or
 * a negative errno with the reason in err (config_exit_status maps it). */
int runpick_choose(runcfg_t *c, const char *base, char *err, size_t err_len);

#endif
