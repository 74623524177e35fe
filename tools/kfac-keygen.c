/* tools/kfac-keygen.c — make a CURVE key pair for kfac-ps or a client
 * (docs/security.md).
 *
 *   kfac-keygen --out keys/invertd-1   writes keys/invertd-1.secret (0600) and
 *                                      keys/invertd-1@HOST.pub (0644), HOST this host's short name
 *   kfac-keygen --out keys/ps --host none   writes keys/ps.secret and keys/ps.pub
 *   kfac-keygen --out keys/worker-1 --host node7 --force
 *
 * The public key's name carries the host by default: the same daemon
 * number on several hosts (kfac-invertd@1 on each) makes key files of
 * different names, which land side by side in kfac-ps's allowlist folder
 * instead of overwriting each other. The secret key keeps OUT.secret, the
 * name its systemd unit loads.
 *
 * Both files are text: a comment line, then the key as 40 characters of Z85
 * (common/net/auth_keys.h reads them). The secret file is created with mode
 * 0600 and never over an existing file unless --force. The key pair comes
 * from libzmq (zmq_curve_keypair: libsodium's random Curve25519 keys).
 * Exit: 0 written, 1 failed (the message names the file and the fix),
 * 2 usage error.
 */
#include <errno.h>
#include <stdbool.h>
#include <stddef.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <time.h>
#include <unistd.h>
#include <zmq.h>

#include "common/base/config.h"
#include "common/net/auth_keys.h"

typedef struct keygen_cfg {
    char *out;
    char *comment;
    char *host;
    bool force;
} keygen_cfg_t;

#define O(key, type, field, def, lo, hi, help) CONFIG_OPT("keygen", key, type, keygen_cfg_t, field, def, lo, hi, help)
static const config_option_t s_opts[] = {
    O("out", OPT_STRING, out, "", 0, 4000,
      "path of the pair without extension: writes OUT@HOST.pub (public key; see --host) and OUT.secret (secret key, "
      "mode 0600)"),
    O("comment", OPT_STRING, comment, "", 0, 200, "text for the files' comment line (default: the file name)"),
    O("host", OPT_STRING, host, "auto", 1, 64,
      "host part of the public key's name, OUT@HOST.pub: auto (this host's short name, as hostname -s prints it), "
      "a name, or none (OUT.pub: kfac-ps's own key, throwaway sets on one host)"),
    O("force", OPT_BOOL, force, "false", 0, 0, "overwrite existing key files"),
};
static const char *const s_sections[] = {"keygen", NULL};

/* The host part of the public key's name for --host (auto: this host's
 * short name; none: ""). Returns 0, or -1 with the message in err. */
static int s_host_part(const char *opt, char *out, size_t out_len, char *err, size_t err_len) {
    if (strcmp(opt, "none") == 0) {
        out[0] = '\0';
        return 0;
    }
    if (strcmp(opt, "auto") != 0) {
        snprintf(out, out_len, "%s", opt);
    } else {
        char h[256] = "";
        if (gethostname(h, sizeof h - 1) != 0) h[0] = '\0';
        h[strcspn(h, ".")] = '\0'; /* the short name: node7, not node7.cluster.example */
        snprintf(out, out_len, "%s", h);
    }
    if (!out[0] || strchr(out, '/') || out[0] == '.') {
        snprintf(err, err_len,
                 "--host %s: cannot make a file name of '%s'; give the host's name (--host node7), or --host none for "
                 "OUT.pub",
                 opt, out);
        return -1;
    }
    return 0;
}

int main(int argc, char **argv) {
    config_spec_t spec = {.program = "kfac-keygen",
                          .summary = "make a CURVE key pair (OUT@HOST.pub, OUT.secret) for kfac-ps or a client",
                          .opts = s_opts,
                          .n_opts = CONFIG_COUNT(s_opts),
                          .partial_sections = NULL,
                          .known_sections = s_sections};
    keygen_cfg_t c;
    memset(&c, 0, sizeof c);
    char err[4300];
    int status = 1;
    int rc = config_load(&spec, &c, argc, argv, stdout, err, sizeof err);
    if (rc == CONFIG_HELP || rc == CONFIG_DUMP) {
        config_release(&spec, &c);
        return 0;
    }
    if (rc < 0) {
        fprintf(stderr, "kfac-keygen: %s\n(see kfac-keygen --help)\n", err);
        config_release(&spec, &c);
        return 2;
    }
    if (!c.out[0]) {
        fprintf(stderr, "kfac-keygen: --out is required, e.g. kfac-keygen --out keys/ps (see --help)\n");
        config_release(&spec, &c);
        return 2;
    }
    if (!zmq_has("curve")) {
        fprintf(stderr, "kfac-keygen: this libzmq has no CURVE support (zmq_has(\"curve\") = 0); install Debian's "
                        "libzmq5, which is built with libsodium\n");
        goto done;
    }
    /* The folder must exist: creating it here would pick its mode for the operator. */
    char dir[4096];
    snprintf(dir, sizeof dir, "%s", c.out);
    char *slash = strrchr(dir, '/');
    if (slash && slash != dir) {
        *slash = '\0';
        struct stat st;
        if (stat(dir, &st) != 0 || !S_ISDIR(st.st_mode)) {
            fprintf(stderr, "kfac-keygen: folder %s does not exist; create it first: mkdir -m 755 -p %s "
                            "(the secret key is written 0600; the folder must be readable by the daemons' "
                            "users, systemd's dynamic users included)\n",
                    dir, dir);
            goto done;
        }
    }
    char host[256], pub_path[4400], sec_path[4200];
    if (s_host_part(c.host, host, sizeof host, err, sizeof err) < 0) {
        fprintf(stderr, "kfac-keygen: %s\n", err);
        config_release(&spec, &c);
        return 2;
    }
    if (host[0]) snprintf(pub_path, sizeof pub_path, "%s@%s.pub", c.out, host);
    else snprintf(pub_path, sizeof pub_path, "%s.pub", c.out);
    snprintf(sec_path, sizeof sec_path, "%s.secret", c.out);
    char pub[AUTH_KEY_Z85_LEN + 1], sec[AUTH_KEY_Z85_LEN + 1];
    if (zmq_curve_keypair(pub, sec) != 0) {
        fprintf(stderr, "kfac-keygen: zmq_curve_keypair failed: %s\n", zmq_strerror(errno));
        goto done;
    }
    const char *name = c.comment[0] ? c.comment : c.out;
    char stamp[32];
    time_t now = time(NULL);
    struct tm tmv;
    strftime(stamp, sizeof stamp, "%Y-%m-%dT%H:%M:%SZ", gmtime_r(&now, &tmv));
    char text[600];
    snprintf(text, sizeof text,
             "# kfac CURVE secret key \"%s\" (kfac-keygen, %s): keep it on its own host, mode 0600\n%s\n", name,
             stamp, sec);
    if (auth_key_write_file(sec_path, text, 0600, c.force, err, sizeof err) < 0) {
        fprintf(stderr, "kfac-keygen: %s\n", err);
        goto done;
    }
    snprintf(text, sizeof text, "# kfac CURVE public key \"%s\" (kfac-keygen, %s)\n%s\n", name, stamp, pub);
    if (auth_key_write_file(pub_path, text, 0644, c.force, err, sizeof err) < 0) {
        fprintf(stderr, "kfac-keygen: %s\n", err);
        if (unlink(sec_path) == 0) fprintf(stderr, "kfac-keygen: removed %s again (no half pairs)\n", sec_path);
        goto done;
    }
    memset(sec, 0, sizeof sec);
    memset(text, 0, sizeof text);
    printf("kfac-keygen: wrote %s (public key %s) and %s (secret, mode 0600)\n", pub_path, pub, sec_path);
    status = 0;
done:
    config_release(&spec, &c);
    return status;
}
