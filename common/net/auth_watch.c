/* common/net/auth_watch.c — see auth_watch.h. One uv_fs_event per folder
 * and one uv_timer for the debounce; the watch owns them and frees itself
 * in the last close callback. Loop thread only. */
#include "common/net/auth_watch.h"

#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>

#include "common/base/log.h"

#define S_PATH_MAX 4096

typedef struct s_dir {
    uv_fs_event_t ev;
    char path[S_PATH_MAX];     /* the folder watched */
    int active;                /* started and not stopped */
    int warned;                /* its last start failed and was logged */
    int changed;               /* an event in the current burst */
    struct auth_watch *w;
} s_dir_t;

struct auth_watch {
    uv_loop_t *loop;           /* borrowed */
    s_dir_t dirs[AUTH_WATCH_MAX_PATHS];
    int n_dirs;
    uv_timer_t timer;          /* the debounce */
    int n_open;                /* handles initialized and not yet closed */
    int closing;
    uint64_t debounce_ms;
    auth_watch_fn fn;          /* borrowed */
    void *user;
};

/* The folder to watch for path: path itself when it is a folder, else the
 * folder that holds it. Returns 0 or -ENAMETOOLONG. */
static int s_folder_of(const char *path, char *out, size_t out_len) {
    struct stat st;
    if (snprintf(out, out_len, "%s", path) >= (int)out_len) return -ENAMETOOLONG;
    if (stat(path, &st) == 0 && S_ISDIR(st.st_mode)) return 0;
    char *slash = strrchr(out, '/');
    if (!slash) snprintf(out, out_len, ".");
    else if (slash == out) out[1] = '\0'; /* "/keys.pub": the root folder */
    else *slash = '\0';
    return 0;
}

static void s_on_debounced(uv_timer_t *t) {
    auth_watch_t *w = t->data;
    if (w->closing) return;
    char what[S_PATH_MAX + 64] = "";
    int n_changed = 0;
    for (int i = 0; i < w->n_dirs; i++) {
        if (!w->dirs[i].changed) continue;
        w->dirs[i].changed = 0;
        if (n_changed++ == 0) snprintf(what, sizeof what, "%s", w->dirs[i].path);
    }
    if (n_changed > 1) {
        size_t len = strlen(what);
        snprintf(what + len, sizeof what - len, " and %d more folder%s", n_changed - 1, n_changed > 2 ? "s" : "");
    }
    /* Watch again before the callback reads the folders: a change made while
     * it reads raises a new event instead of being lost. */
    auth_watch_rearm(w);
    w->fn(what, w->user);
}

static void s_on_event(uv_fs_event_t *h, const char *filename, int events, int status) {
    s_dir_t *d = h->data;
    auth_watch_t *w = d->w;
    if (w->closing) return;
    if (status < 0) log_debug("watching %s: %s", d->path, uv_strerror(status));
    else log_debug("%s: %s%s%s", d->path, filename ? filename : "(folder)", events & UV_RENAME ? " renamed" : "",
                   events & UV_CHANGE ? " changed" : "");
    d->changed = 1;
    /* Restarting the timer pushes the callback debounce_ms past this event. */
    uv_timer_start(&w->timer, s_on_debounced, w->debounce_ms, 0);
}

int auth_watch_rearm(auth_watch_t *w) {
    if (!w || w->closing) return 0;
    int n = 0;
    for (int i = 0; i < w->n_dirs; i++) {
        s_dir_t *d = &w->dirs[i];
        if (d->active) uv_fs_event_stop(&d->ev);
        int rc = uv_fs_event_start(&d->ev, s_on_event, d->path, 0);
        d->active = rc == 0;
        if (rc < 0 && !d->warned)
            log_warn("cannot watch the allowlist folder %s (%s): keys added to it or removed from it take effect "
                     "only after SIGHUP to kfac-ps (%s)",
                     d->path, uv_strerror(rc),
                     rc == UV_ENOSPC ? "raise fs.inotify.max_user_watches" : "is it there and readable?");
        else if (rc == 0 && d->warned)
            log_info("watching the allowlist folder %s again", d->path);
        d->warned = rc < 0;
        n += rc == 0;
    }
    return n;
}

int auth_watch_count(const auth_watch_t *w) {
    int n = 0;
    for (int i = 0; w && i < w->n_dirs; i++) n += w->dirs[i].active;
    return n;
}

static void s_closed(uv_handle_t *h) {
    auth_watch_t *w = h->data;
    if (h->type == UV_FS_EVENT) w = ((s_dir_t *)h->data)->w;
    if (--w->n_open == 0) free(w);
}

auth_watch_t *auth_watch_new(uv_loop_t *loop, const char *const *paths, int n_paths, uint64_t debounce_ms,
                             auth_watch_fn fn, void *user) {
    auth_watch_t *w = calloc(1, sizeof *w);
    if (!w) {
        log_error("watching the allowlists: out of memory");
        return NULL;
    }
    w->loop = loop;
    w->debounce_ms = debounce_ms;
    w->fn = fn;
    w->user = user;
    uv_timer_init(loop, &w->timer); /* cannot fail */
    w->timer.data = w;
    uv_unref((uv_handle_t *)&w->timer);
    w->n_open = 1;
    for (int i = 0; i < n_paths && i < AUTH_WATCH_MAX_PATHS; i++) {
        if (!paths[i] || !paths[i][0]) continue;
        s_dir_t *d = &w->dirs[w->n_dirs];
        if (s_folder_of(paths[i], d->path, sizeof d->path) < 0) {
            log_warn("cannot watch %s: path too long (SIGHUP to kfac-ps reloads it)", paths[i]);
            continue;
        }
        int dup = 0;
        for (int j = 0; j < w->n_dirs; j++) dup |= strcmp(w->dirs[j].path, d->path) == 0;
        if (dup) continue;
        d->w = w;
        uv_fs_event_init(loop, &d->ev); /* cannot fail on Linux */
        d->ev.data = d;
        uv_unref((uv_handle_t *)&d->ev);
        w->n_open++;
        w->n_dirs++;
    }
    auth_watch_rearm(w);
    return w;
}

void auth_watch_free(auth_watch_t **wp) {
    if (!wp || !*wp) return;
    auth_watch_t *w = *wp;
    *wp = NULL;
    w->closing = 1;
    for (int i = 0; i < w->n_dirs; i++) uv_close((uv_handle_t *)&w->dirs[i].ev, s_closed);
    uv_close((uv_handle_t *)&w->timer, s_closed);
}
