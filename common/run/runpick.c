/* common/run/runpick.c — see runpick.h. */
#include "common/run/runpick.h"

#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "common/base/log.h"
#include "common/run/rundir.h"

int runpick_new(const char *base, time_t now, char *out, size_t out_len, char *err, size_t err_len) {
    int rc = rundir_mkdirs(base);
    if (rc < 0) {
        snprintf(err, err_len, "cannot create the runs folder %s: %s", base, strerror(-rc));
        return rc;
    }
    struct tm tm;
    char stamp[32];
    if (!gmtime_r(&now, &tm) || strftime(stamp, sizeof stamp, "%Y%m%d-%H%M%S", &tm) == 0) {
        snprintf(err, err_len, "cannot format the time %lld as a folder name", (long long)now);
        return -EINVAL;
    }
    for (int i = 1; i <= RUNPICK_SUFFIX_MAX; i++) {
        int n = i == 1 ? snprintf(out, out_len, "%s/%s", base, stamp) : snprintf(out, out_len, "%s/%s-%d", base, stamp, i);
        if (n < 0 || (size_t)n >= out_len) {
            snprintf(err, err_len, "the folder name %s/%s is too long", base, stamp);
            return -ENAMETOOLONG;
        }
        /* mkdir fails when the name exists: the folder is this run's alone */
        if (mkdir(out, 0777) == 0) return 0;
        if (errno != EEXIST) {
            rc = -errno;
            snprintf(err, err_len, "cannot create the run's folder %s: %s", out, strerror(errno));
            return rc;
        }
    }
    snprintf(err, err_len, "%s/%s-2 ... -%d are all taken; name a folder with --run.out_dir", base, stamp,
             RUNPICK_SUFFIX_MAX);
    return -EEXIST;
}

int runpick_link_latest(const char *base, const char *leaf) {
    char link[4200], tmp[4300];
    snprintf(link, sizeof link, "%s/%s", base, RUNPICK_LATEST);
    struct stat st;
    if (lstat(link, &st) == 0 && !S_ISLNK(st.st_mode)) return -EEXIST;
    snprintf(tmp, sizeof tmp, "%s/.%s.%ld.tmp", base, RUNPICK_LATEST, (long)getpid());
    unlink(tmp); /* a leftover of a crashed run of this pid */
    if (symlink(leaf, tmp) != 0) return -errno;
    /* rename replaces the old link at once; it fails (EISDIR) rather than
     * replace a real folder that appeared meanwhile */
    if (rename(tmp, link) != 0) {
        int e = errno;
        unlink(tmp);
        return e == EISDIR || e == ENOTEMPTY ? -EEXIST : -e;
    }
    return 0;
}

int runpick_latest(const char *base, char *out, size_t out_len, char *err, size_t err_len) {
    char link[4200], target[4096];
    snprintf(link, sizeof link, "%s/%s", base, RUNPICK_LATEST);
    if (err_len) err[0] = '\0';
    struct stat st;
    if (lstat(link, &st) != 0) {
        if (errno == ENOENT) return -ENOENT;
        int rc = -errno;
        snprintf(err, err_len, "cannot read %s: %s", link, strerror(errno));
        return rc;
    }
    if (!S_ISLNK(st.st_mode)) {
        if (!S_ISDIR(st.st_mode)) {
            snprintf(err, err_len, "%s is neither a folder nor a link to one; remove it or name a folder with --run.out_dir", link);
            return -ENOTDIR;
        }
        snprintf(out, out_len, "%s", link);
        return 0;
    }
    ssize_t n = readlink(link, target, sizeof target - 1);
    if (n < 0) {
        int rc = -errno;
        snprintf(err, err_len, "cannot read the link %s: %s", link, strerror(errno));
        return rc;
    }
    target[n] = '\0';
    int len = target[0] == '/' ? snprintf(out, out_len, "%s", target) : snprintf(out, out_len, "%s/%s", base, target);
    if (len < 0 || (size_t)len >= out_len) {
        snprintf(err, err_len, "the target of %s is too long", link);
        return -ENAMETOOLONG;
    }
    if (stat(out, &st) != 0 || !S_ISDIR(st.st_mode)) {
        snprintf(err, err_len, "%s points at %s, which is not a folder; name the run's folder with --run.out_dir", link,
                 out);
        return -ENOENT;
    }
    return 0;
}

static int s_set(runcfg_t *c, const char *dir, char *err, size_t err_len) {
    char *copy = strdup(dir);
    if (!copy) {
        snprintf(err, err_len, "out of memory");
        return -ENOMEM;
    }
    free(c->out_dir);
    c->out_dir = copy;
    return 0;
}

/* A new folder, and base/latest pointing at it. */
static int s_choose_new(runcfg_t *c, const char *base, char *err, size_t err_len) {
    char dir[4200];
    int rc = runpick_new(base, time(NULL), dir, sizeof dir, err, err_len);
    if (rc < 0 || (rc = s_set(c, dir, err, err_len)) < 0) return rc;
    const char *leaf = dir + strlen(base) + 1;
    rc = runpick_link_latest(base, leaf);
    if (rc == -EEXIST)
        log_warn("%s/%s is a folder (the run folder of an older kfac), not a link: left as it is, and it does not "
                 "follow the newest run; to have it do so, rename it (mv %s/%s %s/NAME)",
                 base, RUNPICK_LATEST, base, RUNPICK_LATEST, base);
    else if (rc < 0)
        log_warn("could not point %s/%s at %s: %s", base, RUNPICK_LATEST, leaf, strerror(-rc));
    if (rc == 0) log_info("[run] out_dir not set: this run's folder is %s (%s/%s points at it)", dir, base, RUNPICK_LATEST);
    else log_info("[run] out_dir not set: this run's folder is %s", dir);
    return 0;
}

int runpick_choose(runcfg_t *c, const char *base, char *err, size_t err_len) {
    if (c->out_dir && c->out_dir[0]) return 0;
    if (!c->ckpt_resume) return s_choose_new(c, base, err, err_len);
    char dir[4200];
    int rc = runpick_latest(base, dir, sizeof dir, err, err_len);
    if (rc == -ENOENT && !err[0]) {
        log_info("--resume: there is no %s/%s to go on from", base, RUNPICK_LATEST);
        return s_choose_new(c, base, err, err_len);
    }
    if (rc < 0 || (rc = s_set(c, dir, err, err_len)) < 0) return rc;
    log_info("[run] out_dir not set, --resume: going on in the newest run's folder %s (%s/%s)", dir, base,
             RUNPICK_LATEST);
    return 0;
}
