/* common/run/rundir.c — see rundir.h. */
#include "common/run/rundir.h"

#include <errno.h>
#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "common/base/log.h"

const char *const RUNDIR_RUN_FILES[] = {"steps.csv", "eval.csv", "manifest.json", NULL};

struct rundir {
    char *dir;
    FILE *steps, *eval, *ages;
    rundir_mode_t mode;
    int failed; /* a write error was logged */
};

int rundir_mkdirs(const char *path) {
    char buf[4096];
    size_t n = strlen(path);
    if (n == 0 || n >= sizeof buf) return -ENAMETOOLONG;
    memcpy(buf, path, n + 1);
    for (size_t i = 1; i <= n; i++) {
        if (buf[i] != '/' && buf[i] != '\0') continue;
        char c = buf[i];
        buf[i] = '\0';
        if (mkdir(buf, 0777) != 0 && errno != EEXIST) return -errno;
        buf[i] = c;
    }
    struct stat st;
    if (stat(path, &st) != 0) return -errno;
    return S_ISDIR(st.st_mode) ? 0 : -ENOTDIR;
}

int rundir_check_free(const char *out_dir, char *err, size_t err_len) {
    for (int i = 0; RUNDIR_RUN_FILES[i]; i++) {
        char path[4200];
        struct stat st;
        snprintf(path, sizeof path, "%s/%s", out_dir, RUNDIR_RUN_FILES[i]);
        if (stat(path, &st) != 0) continue;
        snprintf(err, err_len,
                 "out_dir %s holds a previous run (%s); use --force to overwrite it or choose another --run.out_dir",
                 out_dir, RUNDIR_RUN_FILES[i]);
        return -EEXIST;
    }
    return 0;
}

/* fopen(path, append ? "a" : "w") that does not follow a symbolic link
 * (errno ELOOP): a link planted in the run folder cannot redirect a write. */
static FILE *s_fopen_nofollow(const char *path, int append) {
    int fd = open(path, O_WRONLY | O_CREAT | O_NOFOLLOW | O_CLOEXEC | (append ? O_APPEND : O_TRUNC), 0666);
    if (fd < 0) return NULL;
    FILE *f = fdopen(fd, append ? "a" : "w");
    if (!f) {
        int e = errno;
        close(fd);
        errno = e;
        return NULL;
    }
    if (append) fseek(f, 0, SEEK_END); /* ftell then says whether the file has rows */
    return f;
}

static FILE *s_open(const char *dir, const char *name, const char *header, rundir_mode_t mode, char *err,
                    size_t err_len) {
    char path[4200];
    snprintf(path, sizeof path, "%s/%s", dir, name);
    FILE *f = s_fopen_nofollow(path, mode == RUNDIR_APPEND);
    if (!f) {
        snprintf(err, err_len, "cannot write %s: %s%s", path, strerror(errno),
                 errno == ELOOP ? " (a symbolic link: the run folder's files are written only in place)" : "");
        return NULL;
    }
    setvbuf(f, NULL, _IOLBF, 0);
    /* "a" positions at the end: a file with rows keeps its header */
    if (mode != RUNDIR_APPEND || ftell(f) == 0) fprintf(f, "%s\n", header);
    return f;
}

int rundir_open(const char *out_dir, rundir_mode_t mode, rundir_t **out, char *err, size_t err_len) {
    *out = NULL;
    if (mode != RUNDIR_CREATE && mode != RUNDIR_OVERWRITE && mode != RUNDIR_APPEND) {
        snprintf(err, err_len, "unknown output folder mode %d", (int)mode);
        return -EINVAL;
    }
    int rc = rundir_mkdirs(out_dir);
    if (rc < 0) {
        snprintf(err, err_len, "cannot create [run] out_dir %s: %s", out_dir, strerror(-rc));
        return rc;
    }
    if (mode == RUNDIR_CREATE && (rc = rundir_check_free(out_dir, err, err_len)) < 0) return rc;
    rundir_t *d = calloc(1, sizeof *d);
    if (!d || !(d->dir = strdup(out_dir))) {
        free(d);
        snprintf(err, err_len, "out of memory");
        return -ENOMEM;
    }
    if (mode == RUNDIR_OVERWRITE) {
        /* The previous run's manifest and weights describe another run. */
        static const char *const stale[] = {"manifest.json", "params.npy", "params_polyak.npy", "state.npy",
                                            "inverse_ages.csv", NULL};
        for (int i = 0; stale[i]; i++) {
            char path[4200];
            snprintf(path, sizeof path, "%s/%s", out_dir, stale[i]);
            if (unlink(path) != 0 && errno != ENOENT) log_warn("could not remove %s: %s", path, strerror(errno));
        }
    }
    d->mode = mode;
    if (!(d->steps = s_open(out_dir, "steps.csv", RUNDIR_STEPS_CSV_HEADER, mode, err, err_len)) ||
        !(d->eval = s_open(out_dir, "eval.csv", RUNDIR_EVAL_CSV_HEADER, mode, err, err_len))) {
        rundir_free(&d);
        return -EIO;
    }
    *out = d;
    return 0;
}

const char *rundir_path(const rundir_t *d) {
    return d ? d->dir : "";
}

static int s_check(rundir_t *d, FILE *f, const char *name) {
    if (!ferror(f)) return 0;
    if (!d->failed++) log_error("writing %s/%s failed (disk full?); metrics from now on may be lost", d->dir, name);
    clearerr(f);
    return -EIO;
}

int rundir_step(rundir_t *d, const rundir_step_row_t *r) {
    if (!d || !d->steps) return -EIO;
    fprintf(d->steps, "%llu,%.3f,%.6g,%.6g,%.6g,%.3f,%ld,%.1f,%.3f,%llu,%llu,%d,%.3f,%.3f,%.3f,%.3f,%d,%.3f,%ld,%.6g,%.6g\n",
            (unsigned long long)r->step, r->wall_s, r->train_loss, r->train_acc, r->step_size, r->inv_age_mean,
            r->inv_age_max, r->inv_age_ms_mean, r->stats_age_mean, (unsigned long long)r->inverses_installed,
            (unsigned long long)r->stats_folded, r->workers, r->wait_ms, r->curv_ms, r->update_ms, r->publish_ms,
            r->eval_busy, r->grad_age_mean, r->grad_age_max, r->damping, r->grad_weight_mean);
    return s_check(d, d->steps, "steps.csv");
}

int rundir_eval(rundir_t *d, uint64_t step, double wall_s, double loss, double acc, double polyak_loss,
                double polyak_acc) {
    if (!d || !d->eval) return -EIO;
    fprintf(d->eval, "%llu,%.3f,%.6g,%.6g,%.6g,%.6g\n", (unsigned long long)step, wall_s, loss, acc, polyak_loss,
            polyak_acc);
    return s_check(d, d->eval, "eval.csv");
}

int rundir_ages_begin(rundir_t *d, const kfac_opt_t *k, char *err, size_t err_len) {
    if (!d || !k) return -EINVAL;
    if (d->ages) return 0;
    size_t cap = 16 + (size_t)k->n_blocks * (NN_NAME_MAX + 16), off = 0;
    char *head = malloc(cap);
    if (!head) {
        snprintf(err, err_len, "out of memory");
        return -ENOMEM;
    }
    off += (size_t)snprintf(head, cap, "step");
    for (int b = 0; b < k->n_blocks && off < cap; b++)
        off += (size_t)snprintf(head + off, cap - off, ",%s.%d", k->net->layers[k->blocks[b].layer].name,
                                k->blocks[b].factor);
    d->ages = s_open(d->dir, "inverse_ages.csv", head, d->mode, err, err_len);
    free(head);
    return d->ages ? 0 : -EIO;
}

int rundir_ages(rundir_t *d, const kfac_opt_t *k, uint64_t step, long t) {
    if (!d || !d->ages || !k) return 0;
    fprintf(d->ages, "%llu", (unsigned long long)step);
    for (int b = 0; b < k->n_blocks; b++) {
        const kfac_block_t *blk = &k->blocks[b];
        fprintf(d->ages, ",%ld", blk->inv->valid && blk->inv_version >= 0 ? t - blk->inv_version : -1L);
    }
    fputc('\n', d->ages);
    return s_check(d, d->ages, "inverse_ages.csv");
}

int rundir_write_file(const rundir_t *d, const char *name, const void *data, size_t n_bytes) {
    if (!d || !name) return -EINVAL;
    char path[4200], tmp[4300];
    snprintf(path, sizeof path, "%s/%s", d->dir, name);
    snprintf(tmp, sizeof tmp, "%s.tmp", path);
    FILE *f = s_fopen_nofollow(tmp, 0);
    if (!f) return -errno;
    size_t put = n_bytes ? fwrite(data, 1, n_bytes, f) : 0;
    int bad = ferror(f) || put != n_bytes;
    if (fclose(f) != 0 || bad) {
        unlink(tmp);
        return -EIO;
    }
    /* rename: a reader sees the old file or the whole new one */
    if (rename(tmp, path) != 0) {
        int e = errno;
        unlink(tmp);
        return -e;
    }
    return 0;
}

int rundir_write_text(const rundir_t *d, const char *name, const char *text) {
    return rundir_write_file(d, name, text, text ? strlen(text) : 0);
}

rundir_mode_t rundir_mode_of(const runcfg_t *c) {
    return c->force ? RUNDIR_OVERWRITE : RUNDIR_CREATE;
}

int rundir_open_run(const runcfg_t *c, runcfg_role_t role, const char *model_text, rundir_mode_t mode,
                    rundir_t **out, char *err, size_t err_len) {
    int rc = rundir_open(c->out_dir, mode, out, err, err_len);
    if (rc < 0) return rc;
    /* force is the one setting not kept: a rerun from this config.ini must
     * not replace the very run it came from without being told to. The
     * copy is shallow (its strings are c's, and it is never released). */
    runcfg_t kept = *c;
    kept.force = false;
    char *config = config_to_text(runcfg_spec(role), &kept, NULL, CONFIG_TEXT_COMMENTS);
    const char *bad = NULL;
    if (!config) bad = "config.ini";
    else if (rundir_write_text(*out, "config.ini", config) < 0) bad = "config.ini";
    else if (rundir_write_text(*out, "model.txt", model_text ? model_text : "") < 0) bad = "model.txt";
    free(config);
    if (bad) {
        snprintf(err, err_len, "cannot write %s/%s", c->out_dir, bad);
        rundir_free(out);
        return -EIO;
    }
    return 0;
}

void rundir_free(rundir_t **d_p) {
    if (!d_p || !*d_p) return;
    rundir_t *d = *d_p;
    if (d->steps) fclose(d->steps);
    if (d->eval) fclose(d->eval);
    if (d->ages) fclose(d->ages);
    free(d->dir);
    free(d);
    *d_p = NULL;
}
