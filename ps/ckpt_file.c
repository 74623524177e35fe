/* ps/ckpt_file.c — see ckpt.h: the checkpoint files (atomic writes, the
 * listing newest first, pruning, restoring the newest valid one). The
 * encoding of a file's contents is in ps/ckpt_encode.c, their checks in
 * ps/ckpt.c, the bytes of a record in ps/ckpt_wire.c. */
#include "ps/ckpt.h"

#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <inttypes.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "common/base/log.h"

/* ---- files --------------------------------------------------------------------------- */

const char *ps_ckpt_path(const char *dir, uint64_t step, char *buf, size_t len) {
    snprintf(buf, len, "%s/ckpt-%010" PRIu64 ".kfc", dir, step);
    return buf;
}

int ps_ckpt_mkdirs(const char *path) {
    char p[4096];
    if (snprintf(p, sizeof p, "%s", path) >= (int)sizeof p) return -ENAMETOOLONG;
    for (char *q = p + 1; *q; q++) {
        if (*q != '/') continue;
        *q = 0;
        if (mkdir(p, 0700) < 0 && errno != EEXIST) return -errno;
        *q = '/';
    }
    if (mkdir(p, 0700) < 0 && errno != EEXIST) return -errno;
    struct stat st;
    if (lstat(p, &st) != 0) return -errno;
    if (!S_ISDIR(st.st_mode)) return -ENOTDIR;
    return 0;
}

int ps_ckpt_write_file(const char *dir, uint64_t step, const uint8_t *buf, size_t len, char *path, size_t path_len,
                       char *err, size_t err_len) {
    char tmp[4200], fin[4200];
    int rc = ps_ckpt_mkdirs(dir);
    if (rc < 0) {
        snprintf(err, err_len, "cannot create the checkpoint folder %s: %s", dir, strerror(-rc));
        return rc;
    }
    snprintf(tmp, sizeof tmp, "%s/.ckpt-%010" PRIu64 ".kfc.tmp", dir, step);
    ps_ckpt_path(dir, step, fin, sizeof fin);
    /* A new file of our own (0600): never through a link planted at its name, never an old file. A
     * temporary left by a writer that died is removed first (unlink removes a link, not its target). */
    if (unlink(tmp) < 0 && errno != ENOENT) {
        rc = -errno;
        snprintf(err, err_len, "cannot remove the old temporary %s: %s", tmp, strerror(-rc));
        return rc;
    }
    int fd = open(tmp, O_WRONLY | O_CREAT | O_EXCL | O_NOFOLLOW | O_CLOEXEC, 0600);
    if (fd < 0) {
        rc = -errno;
        snprintf(err, err_len, "cannot create %s: %s", tmp, strerror(-rc));
        return rc;
    }
    size_t done = 0;
    while (done < len) {
        ssize_t n = write(fd, buf + done, len - done);
        if (n < 0 && errno == EINTR) continue;
        if (n <= 0) {
            rc = n < 0 ? -errno : -EIO;
            snprintf(err, err_len, "writing %s failed: %s (disk full?)", tmp, strerror(-rc));
            close(fd);
            unlink(tmp);
            return rc;
        }
        done += (size_t)n;
    }
    if (fsync(fd) < 0) {
        rc = -errno;
        snprintf(err, err_len, "fsync of %s failed: %s", tmp, strerror(-rc));
        close(fd);
        unlink(tmp);
        return rc;
    }
    if (close(fd) < 0) { /* a delayed write error (NFS, quotas) shows here */
        rc = -errno;
        snprintf(err, err_len, "closing %s failed: %s", tmp, strerror(-rc));
        unlink(tmp);
        return rc;
    }
    if (rename(tmp, fin) < 0) {
        rc = -errno;
        snprintf(err, err_len, "cannot rename %s to %s: %s", tmp, fin, strerror(-rc));
        unlink(tmp);
        return rc;
    }
    /* the rename itself reaches the disk with the folder */
    int dfd = open(dir, O_RDONLY | O_DIRECTORY | O_CLOEXEC);
    if (dfd >= 0) {
        if (fsync(dfd) < 0) rc = -errno;
        close(dfd);
        if (rc < 0) {
            snprintf(err, err_len, "fsync of the folder %s failed: %s", dir, strerror(-rc));
            return rc;
        }
    }
    if (path) snprintf(path, path_len, "%s", fin);
    return 0;
}

int ps_ckpt_read_file(const char *path, uint8_t **out, size_t *out_len, char *err, size_t err_len) {
    *out = NULL;
    *out_len = 0;
    int fd = open(path, O_RDONLY | O_NOFOLLOW | O_CLOEXEC);
    FILE *f = fd >= 0 ? fdopen(fd, "rb") : NULL;
    if (!f) {
        int rc = -errno;
        if (fd >= 0) close(fd);
        snprintf(err, err_len, "%s: cannot open: %s%s", path, strerror(-rc),
                 rc == -ELOOP ? " (a symbolic link: kfac-ps reads only checkpoints it wrote)" : "");
        return rc;
    }
    struct stat st;
    if (fstat(fileno(f), &st) == 0 && (st.st_uid != geteuid() || (st.st_mode & 022))) {
        fclose(f);
        snprintf(err, err_len,
                 "%s: owned by uid %u with mode %04o: kfac-ps reads only checkpoints of its own user that nobody "
                 "else may write (it writes them 0600); move the file away, or fix it with chown and chmod 600",
                 path, (unsigned)st.st_uid, (unsigned)(st.st_mode & 07777));
        return -EACCES;
    }
    if (fstat(fileno(f), &st) == 0 && S_ISREG(st.st_mode) && (uint64_t)st.st_size > PS_CKPT_MAX_BYTES) {
        fclose(f);
        snprintf(err, err_len, "%s: %lld bytes, more than any checkpoint kfac-ps reads (%llu): not a checkpoint",
                 path, (long long)st.st_size, (unsigned long long)PS_CKPT_MAX_BYTES);
        return -EFBIG;
    }
    size_t cap = 1 << 16, len = 0;
    uint8_t *b = malloc(cap);
    while (b) {
        if (len == cap) {
            uint8_t *nb = realloc(b, cap * 2);
            if (!nb) break;
            b = nb;
            cap *= 2;
        }
        size_t n = fread(b + len, 1, cap - len, f);
        len += n;
        if (n == 0) break;
        if (len > PS_CKPT_MAX_BYTES) { /* not a regular file, growing as it is read */
            free(b);
            fclose(f);
            snprintf(err, err_len, "%s: more than %llu bytes: not a checkpoint", path,
                     (unsigned long long)PS_CKPT_MAX_BYTES);
            return -EFBIG;
        }
    }
    int bad = ferror(f);
    fclose(f);
    if (!b || len == cap) {
        free(b);
        snprintf(err, err_len, "%s: out of memory reading it", path);
        return -ENOMEM;
    }
    if (bad) {
        free(b);
        snprintf(err, err_len, "%s: read error", path);
        return -EIO;
    }
    *out = b;
    *out_len = len;
    return 0;
}

static int s_step_desc(const void *a, const void *b) {
    uint64_t x = *(const uint64_t *)a, y = *(const uint64_t *)b;
    return x > y ? -1 : x < y;
}

/* Every step with a file, sorted newest first, into a new array. */
static int s_scan(const char *dir, uint64_t **steps_out) {
    *steps_out = NULL;
    DIR *dp = opendir(dir);
    if (!dp) return errno == ENOENT ? 0 : -errno;
    size_t n = 0, cap = 0;
    uint64_t *v = NULL;
    struct dirent *e;
    while ((e = readdir(dp))) {
        unsigned long long step;
        int used = 0;
        if (sscanf(e->d_name, "ckpt-%llu.kfc%n", &step, &used) != 1 || used <= 0 || e->d_name[used] != 0) continue;
        if (n == cap) {
            cap = cap ? cap * 2 : 16;
            uint64_t *nv = realloc(v, cap * sizeof *v);
            if (!nv) {
                free(v);
                closedir(dp);
                return -ENOMEM;
            }
            v = nv;
        }
        v[n++] = step;
    }
    closedir(dp);
    qsort(v, n, sizeof *v, s_step_desc);
    *steps_out = v;
    return (int)n;
}

int ps_ckpt_list(const char *dir, uint64_t *steps, int cap) {
    uint64_t *v;
    int n = s_scan(dir, &v);
    if (n < 0) return n;
    if (n > cap) n = cap;
    memcpy(steps, v, (size_t)n * sizeof *v);
    free(v);
    return n;
}

/* Temporaries left by a writer that died before its rename. */
static void s_remove_temporaries(const char *dir) {
    DIR *dp = opendir(dir);
    if (!dp) return;
    struct dirent *e;
    while ((e = readdir(dp))) {
        size_t n = strlen(e->d_name);
        if (strncmp(e->d_name, ".ckpt-", 6) != 0 || n < 9 || strcmp(e->d_name + n - 8, ".kfc.tmp") != 0) continue;
        char p[4200];
        snprintf(p, sizeof p, "%s/%s", dir, e->d_name);
        unlink(p);
    }
    closedir(dp);
}

int ps_ckpt_prune(const char *dir, int keep) {
    if (keep < 1) keep = 1;
    uint64_t *v;
    int n = s_scan(dir, &v), deleted = 0;
    if (n < 0) return n;
    s_remove_temporaries(dir);
    for (int i = keep; i < n; i++) {
        char p[4200];
        if (unlink(ps_ckpt_path(dir, v[i], p, sizeof p)) == 0) deleted++;
    }
    free(v);
    return deleted;
}

int ps_ckpt_restore_newest(const char *dir, ps_ckpt_state_t *st, double inv_now_s, char *path, size_t path_len,
                           char *err, size_t err_len) {
    uint64_t *v;
    int n = s_scan(dir, &v);
    if (n < 0) {
        snprintf(err, err_len, "cannot read the checkpoint folder %s: %s", dir, strerror(-n));
        return n;
    }
    int rc = 0, n_bad = 0;
    for (int i = 0; i < n && rc != 1; i++) {
        char p[4200], why[600] = "";
        uint8_t *buf = NULL;
        size_t len = 0;
        ps_ckpt_path(dir, v[i], p, sizeof p);
        int r = ps_ckpt_read_file(p, &buf, &len, why, sizeof why);
        if (r == 0) r = ps_ckpt_decode(st, buf, len, inv_now_s, p, why, sizeof why);
        free(buf);
        if (r == 0) {
            if (path) snprintf(path, path_len, "%s", p);
            rc = 1;
            break;
        }
        n_bad++;
        log_warn("checkpoint %s", why);
        if (i + 1 < n) log_warn("trying the previous checkpoint");
    }
    if (rc == 0 && n_bad > 0) {
        snprintf(err, err_len,
                 "none of the %d checkpoint files in %s can be used (see above); move them away to start afresh, or "
                 "point [checkpoint] dir elsewhere",
                 n_bad, dir);
        rc = -EBADMSG;
    }
    free(v);
    return rc;
}
