/* ps/metrics.c — see metrics.h. */
#include "ps/metrics.h"

#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "common/base/log.h"

struct ps_metrics {
    char *dir;
    FILE *steps, *eval;
    int failed;          /* a write error was logged */
};

int ps_metrics_mkdirs(const char *path) {
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

static FILE *s_open(const char *dir, const char *name, const char *header, int append, char *err, size_t err_len) {
    char path[4200];
    snprintf(path, sizeof path, "%s/%s", dir, name);
    struct stat st;
    append = append && stat(path, &st) == 0 && st.st_size > 0; /* a header only in a new file */
    FILE *f = fopen(path, append ? "a" : "w");
    if (!f) {
        snprintf(err, err_len, "cannot write %s: %s", path, strerror(errno));
        return NULL;
    }
    setvbuf(f, NULL, _IOLBF, 0);
    if (!append) fprintf(f, "%s\n", header);
    return f;
}

ps_metrics_t *ps_metrics_open(const char *out_dir, int append, char *err, size_t err_len) {
    int rc = ps_metrics_mkdirs(out_dir);
    if (rc < 0) {
        snprintf(err, err_len, "cannot create [run] out_dir %s: %s", out_dir, strerror(-rc));
        return NULL;
    }
    ps_metrics_t *m = calloc(1, sizeof *m);
    if (!m || !(m->dir = strdup(out_dir))) {
        free(m);
        snprintf(err, err_len, "out of memory");
        return NULL;
    }
    if (!(m->steps = s_open(out_dir, "steps.csv", PS_STEPS_CSV_HEADER, append, err, err_len)) ||
        !(m->eval = s_open(out_dir, "eval.csv", PS_EVAL_CSV_HEADER, append, err, err_len))) {
        ps_metrics_free(&m);
        return NULL;
    }
    return m;
}

static int s_check(ps_metrics_t *m, FILE *f, const char *name) {
    if (!ferror(f)) return 0;
    if (!m->failed++) log_error("writing %s/%s failed (disk full?); metrics from now on may be lost", m->dir, name);
    clearerr(f);
    return -EIO;
}

int ps_metrics_step(ps_metrics_t *m, const ps_step_row_t *r) {
    if (!m || !m->steps) return -EIO;
    fprintf(m->steps, "%llu,%.3f,%.6g,%.6g,%.6g,%.3f,%ld,%.1f,%.3f,%llu,%llu,%d\n", (unsigned long long)r->step,
            r->wall_s, r->train_loss, r->train_acc, r->step_size, r->inv_age_mean, r->inv_age_max,
            r->inv_age_ms_mean, r->stats_age_mean, (unsigned long long)r->inverses_installed,
            (unsigned long long)r->stats_folded, r->workers);
    return s_check(m, m->steps, "steps.csv");
}

int ps_metrics_eval(ps_metrics_t *m, uint64_t step, double wall_s, double loss, double acc, double polyak_loss,
                    double polyak_acc) {
    if (!m || !m->eval) return -EIO;
    fprintf(m->eval, "%llu,%.3f,%.6g,%.6g,%.6g,%.6g\n", (unsigned long long)step, wall_s, loss, acc, polyak_loss,
            polyak_acc);
    return s_check(m, m->eval, "eval.csv");
}

int ps_metrics_write_file(const ps_metrics_t *m, const char *name, const char *text) {
    if (!m) return -EINVAL;
    char path[4200], tmp[4300];
    snprintf(path, sizeof path, "%s/%s", m->dir, name);
    snprintf(tmp, sizeof tmp, "%s.tmp", path);
    FILE *f = fopen(tmp, "w");
    if (!f) return -errno;
    fputs(text, f);
    int bad = ferror(f);
    if (fclose(f) != 0 || bad) {
        unlink(tmp);
        return -EIO;
    }
    /* rename: a reader sees the old file or the whole new one */
    if (rename(tmp, path) != 0) return -errno;
    return 0;
}

void ps_metrics_free(ps_metrics_t **m_p) {
    if (!m_p || !*m_p) return;
    ps_metrics_t *m = *m_p;
    if (m->steps) fclose(m->steps);
    if (m->eval) fclose(m->eval);
    free(m->dir);
    free(m);
    *m_p = NULL;
}

const char *ps_format_duration(double s, char *buf, size_t len) {
    if (!(s >= 0.0)) s = 0.0;
    if (s < 10.0) snprintf(buf, len, "%.1fs", s);
    else if (s < 3600.0) {
        long t = (long)(s + 0.5);
        if (t < 60) snprintf(buf, len, "%lds", t);
        else snprintf(buf, len, "%ldm%02lds", t / 60, t % 60);
    } else {
        long m = (long)(s / 60.0 + 0.5);
        snprintf(buf, len, "%ldh%02ldm", m / 60, m % 60);
    }
    return buf;
}
