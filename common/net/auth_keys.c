/* common/net/auth_keys.c — see auth_keys.h. Key files, allowlists and the
 * loopback test; Z85 and the Curve25519 public-key derivation come from
 * libzmq (zmq_z85_decode, zmq_curve_public). */
#include "common/net/auth_keys.h"

#include <arpa/inet.h>
#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>
#include <zmq.h>

/* A key file larger than this is not a key file (an allowlist of 10000 keys
 * is about 410 KB). */
#define S_MAX_FILE_BYTES (4u << 20)
/* Files read from one allowlist folder. */
#define S_MAX_DIR_FILES 100000

/* ---- one key -------------------------------------------------------------------- */

static const char s_z85_chars[] =
    "0123456789abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ.-:+=^!/*?&<>()[]{}@%$#";

int auth_key_from_text(const char *text, auth_key_t *out, char *why, size_t why_len) {
    const char *p = text ? text : "";
    while (*p == ' ' || *p == '\t') p++;
    size_t n = strlen(p);
    while (n > 0 && (p[n - 1] == ' ' || p[n - 1] == '\t' || p[n - 1] == '\n' || p[n - 1] == '\r')) n--;
    if (n != AUTH_KEY_Z85_LEN) {
        snprintf(why, why_len, "%zu characters; a CURVE key is %d characters of Z85 text", n, AUTH_KEY_Z85_LEN);
        return -EINVAL;
    }
    for (size_t i = 0; i < n; i++)
        if (!p[i] || !strchr(s_z85_chars, p[i])) {
            snprintf(why, why_len, "character %zu ('%c') is not Z85", i + 1, p[i] >= 32 && p[i] < 127 ? p[i] : '?');
            return -EINVAL;
        }
    memcpy(out->z85, p, AUTH_KEY_Z85_LEN);
    out->z85[AUTH_KEY_Z85_LEN] = '\0';
    if (!zmq_z85_decode(out->raw, out->z85)) {
        snprintf(why, why_len, "not valid Z85");
        return -EINVAL;
    }
    return 0;
}

int auth_key_public_of(const auth_key_t *secret, auth_key_t *public_out) {
    char z[AUTH_KEY_Z85_LEN + 1];
    if (zmq_curve_public(z, secret->z85) != 0) return -EINVAL;
    char why[128];
    return auth_key_from_text(z, public_out, why, sizeof why);
}

/* Read a whole (small) file into a NUL-terminated buffer. With secret, the
 * mode is checked on the open descriptor. */
static int s_slurp(const char *path, int secret, char **text, char *err, size_t err_len) {
    *text = NULL;
    int fd = open(path, O_RDONLY | O_CLOEXEC);
    if (fd < 0) {
        int e = errno;
        snprintf(err, err_len, "%s: %s", path, strerror(e));
        return -e;
    }
    struct stat st;
    int rc = 0;
    if (fstat(fd, &st) != 0) {
        rc = -errno;
        snprintf(err, err_len, "%s: %s", path, strerror(-rc));
        goto done;
    }
    if (!S_ISREG(st.st_mode)) {
        rc = -EINVAL;
        snprintf(err, err_len, "%s: not a regular file", path);
        goto done;
    }
    if (secret && (st.st_mode & 077)) {
        rc = -EACCES;
        snprintf(err, err_len,
                 "%s: a secret key file must be readable by its owner only (mode %03o); run: chmod 600 %s", path,
                 (unsigned)(st.st_mode & 0777), path);
        goto done;
    }
    if ((size_t)st.st_size > S_MAX_FILE_BYTES) {
        rc = -EFBIG;
        snprintf(err, err_len, "%s: %lld bytes is too large for a key file (at most %u)", path,
                 (long long)st.st_size, S_MAX_FILE_BYTES);
        goto done;
    }
    char *buf = malloc((size_t)st.st_size + 1);
    if (!buf) {
        rc = -ENOMEM;
        snprintf(err, err_len, "%s: out of memory", path);
        goto done;
    }
    size_t got = 0;
    while (got < (size_t)st.st_size) {
        ssize_t r = read(fd, buf + got, (size_t)st.st_size - got);
        if (r < 0 && errno == EINTR) continue;
        if (r < 0) {
            rc = -errno;
            snprintf(err, err_len, "%s: %s", path, strerror(-rc));
            free(buf);
            goto done;
        }
        if (r == 0) break;
        got += (size_t)r;
    }
    buf[got] = '\0';
    if (strlen(buf) != got) {
        rc = -EINVAL;
        snprintf(err, err_len, "%s: binary data (a NUL byte); a key file is text", path);
        free(buf);
        goto done;
    }
    *text = buf;
done:
    close(fd);
    return rc;
}

/* Call fn for every key line of text; fn returns < 0 to stop. Returns the
 * number of keys, or a negative errno (a bad line, or fn's). */
typedef int (*s_key_fn)(const auth_key_t *k, int line, void *user);
static int s_each_key(const char *path, char *text, s_key_fn fn, void *user, char *err, size_t err_len) {
    int n = 0, line = 0;
    for (char *p = text; p && *p;) {
        char *nl = strchr(p, '\n');
        if (nl) *nl = '\0';
        line++;
        const char *s = p;
        while (*s == ' ' || *s == '\t' || *s == '\r') s++;
        if (*s && *s != '#') {
            auth_key_t k;
            char why[160];
            if (auth_key_from_text(s, &k, why, sizeof why) < 0) {
                snprintf(err, err_len, "%s:%d: not a CURVE key: %s (make keys with kfac-keygen)", path, line, why);
                return -EINVAL;
            }
            int rc = fn(&k, line, user);
            if (rc < 0) return rc;
            n++;
        }
        p = nl ? nl + 1 : NULL;
    }
    return n;
}

typedef struct {
    auth_key_t *out;
    int n;
} s_one_t;

static int s_take_one(const auth_key_t *k, int line, void *user) {
    (void)line;
    s_one_t *o = user;
    if (o->n++ == 0) *o->out = *k;
    return 0;
}

int auth_key_read(const char *path, int secret, auth_key_t *out, char *err, size_t err_len) {
    if (!path || !path[0]) {
        snprintf(err, err_len, "no key file given");
        return -EINVAL;
    }
    char *text = NULL;
    int rc = s_slurp(path, secret, &text, err, err_len);
    if (rc < 0) return rc;
    s_one_t one = {.out = out, .n = 0};
    rc = s_each_key(path, text, s_take_one, &one, err, err_len);
    free(text);
    if (rc < 0) return rc;
    if (rc == 0) {
        snprintf(err, err_len, "%s: no key in the file (make one with kfac-keygen)", path);
        return -EINVAL;
    }
    if (rc > 1) {
        snprintf(err, err_len, "%s: %d keys; a %s key file holds exactly one", path, rc, secret ? "secret" : "public");
        return -EINVAL;
    }
    return 0;
}

int auth_key_write_file(const char *path, const char *text, unsigned mode, int force, char *err, size_t err_len) {
    int flags = O_WRONLY | O_CREAT | O_CLOEXEC | (force ? O_TRUNC : O_EXCL);
    int fd = open(path, flags, (mode_t)mode);
    if (fd < 0) {
        int e = errno;
        snprintf(err, err_len, "%s: %s%s", path, strerror(e), e == EEXIST ? " (remove it, or use --force)" : "");
        return -e;
    }
    /* An existing file keeps its mode through O_TRUNC: set it. */
    int rc = 0;
    if (fchmod(fd, (mode_t)mode) != 0) rc = -errno;
    size_t len = strlen(text), done = 0;
    while (rc == 0 && done < len) {
        ssize_t w = write(fd, text + done, len - done);
        if (w < 0 && errno == EINTR) continue;
        if (w < 0) rc = -errno;
        else done += (size_t)w;
    }
    if (rc == 0 && fsync(fd) != 0) rc = -errno;
    if (close(fd) != 0 && rc == 0) rc = -errno;
    if (rc < 0) snprintf(err, err_len, "%s: %s", path, strerror(-rc));
    return rc;
}

/* ---- allowlists ------------------------------------------------------------------ */

typedef struct {
    uint8_t key[AUTH_KEY_BYTES];
    msg_role_t role;
} s_entry_t;

struct auth_allow {
    s_entry_t *v;
    size_t n, cap;
};

auth_allow_t *auth_allow_new(void) { return calloc(1, sizeof(auth_allow_t)); }

void auth_allow_free(auth_allow_t **ap) {
    if (!ap || !*ap) return;
    free((*ap)->v);
    free(*ap);
    *ap = NULL;
}

msg_role_t auth_allow_find(const auth_allow_t *a, const uint8_t *key) {
    /* Linear: a few thousand keys at most, looked up once per connection. */
    for (size_t i = 0; a && i < a->n; i++)
        if (memcmp(a->v[i].key, key, AUTH_KEY_BYTES) == 0) return a->v[i].role;
    return MSG_ROLE_NONE;
}

size_t auth_allow_count(const auth_allow_t *a, msg_role_t role) {
    size_t c = 0;
    for (size_t i = 0; a && i < a->n; i++)
        if (role == MSG_ROLE_NONE || a->v[i].role == role) c++;
    return c;
}

/* Keys of role in a that b does not list for role. */
static size_t s_missing_from(const auth_allow_t *a, const auth_allow_t *b, msg_role_t role) {
    size_t n = 0;
    for (size_t i = 0; a && i < a->n; i++)
        if (a->v[i].role == role && auth_allow_find(b, a->v[i].key) != role) n++;
    return n;
}

void auth_allow_diff(const auth_allow_t *before, const auth_allow_t *now, msg_role_t role, size_t *n_added,
                     size_t *n_removed) {
    *n_added = s_missing_from(now, before, role);
    *n_removed = s_missing_from(before, now, role);
}

typedef struct {
    auth_allow_t *a;
    msg_role_t role;
    const char *path, *what;
    char *err;
    size_t err_len;
} s_add_t;

static int s_add_key(const auth_key_t *k, int line, void *user) {
    s_add_t *x = user;
    msg_role_t old = auth_allow_find(x->a, k->raw);
    if (old == x->role) return 0; /* listed twice for the same role: harmless */
    if (old != MSG_ROLE_NONE) {
        snprintf(x->err, x->err_len,
                 "%s:%d (%s): key %s is already listed for the %s role; a key may have one role only (give each "
                 "daemon its own key pair)",
                 x->path, line, x->what, k->z85, msg_role_name(old));
        return -EEXIST;
    }
    if (x->a->n == x->a->cap) {
        size_t cap = x->a->cap ? 2 * x->a->cap : 16;
        s_entry_t *v = realloc(x->a->v, cap * sizeof *v);
        if (!v) {
            snprintf(x->err, x->err_len, "%s: out of memory", x->path);
            return -ENOMEM;
        }
        x->a->v = v;
        x->a->cap = cap;
    }
    memcpy(x->a->v[x->a->n].key, k->raw, AUTH_KEY_BYTES);
    x->a->v[x->a->n].role = x->role;
    x->a->n++;
    return 0;
}

static int s_add_file(auth_allow_t *a, const char *path, msg_role_t role, const char *what, char *err,
                      size_t err_len) {
    char *text = NULL;
    int rc = s_slurp(path, 0, &text, err, err_len);
    if (rc < 0) return rc;
    size_t before = a->n;
    s_add_t x = {.a = a, .role = role, .path = path, .what = what, .err = err, .err_len = err_len};
    rc = s_each_key(path, text, s_add_key, &x, err, err_len);
    free(text);
    return rc < 0 ? rc : (int)(a->n - before);
}

static int s_cmp_names(const void *x, const void *y) { return strcmp(*(char *const *)x, *(char *const *)y); }

/* An allowlist that group or others may write lets them list a key of
 * their own: refused, with the fix. Returns 0 or -EPERM. */
static int s_check_not_writable(const char *path, const struct stat *st, const char *what, char *err,
                                size_t err_len) {
    if (!(st->st_mode & (S_IWGRP | S_IWOTH))) return 0;
    snprintf(err, err_len,
             "%s: %s is writable by %s (mode %04o): whoever can write it could list a key of their own; fix: "
             "chmod go-w %s",
             what, path, (st->st_mode & S_IWOTH) ? "others" : "its group", (unsigned)(st->st_mode & 07777), path);
    return -EPERM;
}

int auth_allow_add_path(auth_allow_t *a, const char *path, msg_role_t role, const char *what, char *err,
                        size_t err_len) {
    if (!a || !path || !path[0]) {
        snprintf(err, err_len, "%s: no path given", what);
        return -EINVAL;
    }
    struct stat st;
    if (stat(path, &st) != 0) {
        int e = errno;
        snprintf(err, err_len, "%s = %s: %s", what, path, strerror(e));
        return -e;
    }
    if (s_check_not_writable(path, &st, what, err, err_len) < 0) return -EPERM;
    size_t before = a->n; /* all or nothing: a failed path adds no key */
    if (!S_ISDIR(st.st_mode)) {
        int r = s_add_file(a, path, role, what, err, err_len);
        if (r < 0) a->n = before;
        return r;
    }
    DIR *d = opendir(path);
    if (!d) {
        int e = errno;
        snprintf(err, err_len, "%s = %s: %s", what, path, strerror(e));
        return -e;
    }
    /* Read the names first and sort them: the same folder gives the same
     * messages in the same order on every host. */
    char **names = NULL;
    size_t n = 0, cap = 0;
    int rc = 0;
    struct dirent *e;
    while ((e = readdir(d)) != NULL) {
        size_t len = strlen(e->d_name);
        if (len < 5 || strcmp(e->d_name + len - 4, ".pub") != 0 || e->d_name[0] == '.') continue;
        if (n == S_MAX_DIR_FILES) {
            snprintf(err, err_len, "%s = %s: more than %d key files", what, path, S_MAX_DIR_FILES);
            rc = -E2BIG;
            break;
        }
        if (n == cap) {
            cap = cap ? 2 * cap : 32;
            char **v = realloc(names, cap * sizeof *v);
            if (!v) { rc = -ENOMEM; break; }
            names = v;
        }
        if (!(names[n] = strdup(e->d_name))) { rc = -ENOMEM; break; }
        n++;
    }
    closedir(d);
    if (rc == -ENOMEM) snprintf(err, err_len, "%s = %s: out of memory", what, path);
    if (rc == 0 && n > 1) qsort(names, n, sizeof *names, s_cmp_names);
    int added = 0;
    for (size_t i = 0; rc == 0 && i < n; i++) {
        char full[4096];
        if (snprintf(full, sizeof full, "%s/%s", path, names[i]) >= (int)sizeof full) {
            snprintf(err, err_len, "%s = %s: path too long", what, path);
            rc = -ENAMETOOLONG;
            break;
        }
        struct stat fs;
        if (stat(full, &fs) != 0 || !S_ISREG(fs.st_mode)) continue;
        int r = s_check_not_writable(full, &fs, what, err, err_len);
        if (r == 0) r = s_add_file(a, full, role, what, err, err_len);
        if (r < 0) rc = r;
        else added += r;
    }
    for (size_t i = 0; i < n; i++) free(names[i]);
    free(names);
    if (rc < 0) a->n = before;
    return rc < 0 ? rc : added;
}

/* ---- endpoints ------------------------------------------------------------------ */

int auth_endpoint_is_loopback(const char *endpoint) {
    if (!endpoint) return 0;
    if (strncmp(endpoint, "ipc://", 6) == 0 || strncmp(endpoint, "inproc://", 9) == 0) return 1;
    if (strncmp(endpoint, "tcp://", 6) != 0) return 0;
    const char *host = endpoint + 6;
    const char *colon = strrchr(host, ':');
    if (!colon || colon == host) return 0;
    char h[128];
    size_t len = (size_t)(colon - host);
    if (len >= sizeof h) return 0;
    memcpy(h, host, len);
    h[len] = '\0';
    if (h[0] == '[') {
        if (len < 3 || h[len - 1] != ']') return 0;
        h[len - 1] = '\0';
        struct in6_addr a6;
        if (inet_pton(AF_INET6, h + 1, &a6) != 1) return 0;
        if (IN6_IS_ADDR_LOOPBACK(&a6)) return 1;
        return IN6_IS_ADDR_V4MAPPED(&a6) && a6.s6_addr[12] == 127;
    }
    struct in_addr a4;
    if (inet_pton(AF_INET, h, &a4) != 1) return 0; /* '*', names, interfaces: not provably local */
    return (ntohl(a4.s_addr) >> 24) == 127;
}
