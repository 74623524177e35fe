/* common/net/auth_keys.h — CURVE key files, allowlists of client keys and
 * the loopback test of bind endpoints: the parts of authentication that need
 * no socket (kfac-keygen, kfac-poke and the unit tests use them directly).
 *
 * Key files (written by tools/kfac-keygen). Text: lines starting with '#'
 * and blank lines are ignored; every other line holds one key as 40
 * characters of Z85 (ZeroMQ's base-85 text form of the 32-byte key),
 * surrounding blanks allowed. A public or secret key file holds exactly one
 * key; an allowlist file holds one or more public keys. A secret key file
 * must not be readable, writable or executable by group or others (mode
 * 0600 or stricter), as ssh demands of its private keys.
 *
 * Allowlists. `[security] allow_workers` (allow_statsd, allow_invertd) name
 * a file of public keys or a folder: every regular file in it whose name
 * ends in ".pub" is read (a folder of keys is rotated by adding and removing
 * files). A key may be listed for one role only; the PS refuses every key
 * it does not list, and a listed key may speak only as its role.
 *
 * Errors are negative errno values with a one-line message in err that
 * names the file (and line) and the fix. No function here keeps state
 * between calls; all are thread-safe.
 */
#ifndef KFAC_NET_AUTH_KEYS_H
#define KFAC_NET_AUTH_KEYS_H

#include <stddef.h>
#include <stdint.h>

#include "proto/msg.h"

#define AUTH_KEY_BYTES 32
#define AUTH_KEY_Z85_LEN 40

/* One CURVE key: the raw bytes and their Z85 text (NUL-terminated). */
typedef struct auth_key {
    uint8_t raw[AUTH_KEY_BYTES];
    char z85[AUTH_KEY_Z85_LEN + 1];
} auth_key_t;

/* Decode one key written as Z85 text (surrounding blanks allowed) into out.
 * Returns 0, or -EINVAL with the reason in why: the wrong length ("41
 * characters; a CURVE key is 40"), or a character Z85 does not use. */
int auth_key_from_text(const char *text, auth_key_t *out, char *why, size_t why_len);

/* Read the one key of a key file. secret: the file holds a secret key, so
 * its mode must deny group and others every access (-EACCES otherwise,
 * "chmod 600 FILE" in the message). Returns 0, -errno from opening or
 * reading (-ENOENT ...), -EACCES, or -EINVAL (no key, more than one key, a
 * line that is not a key: the line number is named). */
int auth_key_read(const char *path, int secret, auth_key_t *out, char *err, size_t err_len);

/* The public key of a secret key (Curve25519 scalar multiplication, by
 * libzmq). Returns 0 or -EINVAL. */
int auth_key_public_of(const auth_key_t *secret, auth_key_t *public_out);

/* Write text to path, created with the given mode (0600 for a secret key,
 * 0644 for a public one) and never over an existing file unless force.
 * Returns 0 or -errno (-EEXIST: the file exists) with the message in err. */
int auth_key_write_file(const char *path, const char *text, unsigned mode, int force, char *err, size_t err_len);

/* ---- allowlists ---------------------------------------------------------------- */

typedef struct auth_allow auth_allow_t;

/* An empty allowlist; NULL when out of memory. */
auth_allow_t *auth_allow_new(void);

/* Add the keys of path (a file of public keys, or a folder whose *.pub
 * files are read) for role (MSG_ROLE_WORKER, _STATSD or _INVERTD). what
 * names the setting in messages ("[security] allow_workers"). Returns the
 * number of keys added (>= 0), or -errno: the path cannot be read, a line
 * is not a key (file and line named), a key already listed for another
 * role (-EEXIST, both roles named), out of memory. A folder with no *.pub
 * file adds 0 keys (not an error: the operator may fill it later). All or
 * nothing: on an error no key of path stays added. */
int auth_allow_add_path(auth_allow_t *a, const char *path, msg_role_t role, const char *what, char *err,
                        size_t err_len);

/* The role key is listed for, or MSG_ROLE_NONE. key: AUTH_KEY_BYTES bytes. */
msg_role_t auth_allow_find(const auth_allow_t *a, const uint8_t *key);

/* Keys listed (for role; MSG_ROLE_NONE: all). */
size_t auth_allow_count(const auth_allow_t *a, msg_role_t role);

/* What changed for role from before to now: *n_added keys are listed for
 * role in now and were not in before, *n_removed the reverse (a key moved
 * from another role counts as added). NULL lists are empty. */
void auth_allow_diff(const auth_allow_t *before, const auth_allow_t *now, msg_role_t role, size_t *n_added,
                     size_t *n_removed);

/* Free; NULLs *ap; NULL is a no-op. */
void auth_allow_free(auth_allow_t **ap);

/* ---- endpoints ------------------------------------------------------------------ */

/* 1 when binding endpoint exposes the socket to this host only: tcp:// on
 * an address in 127.0.0.0/8 or on ::1 (written [::1]), ipc:// and
 * inproc://; 0 for anything else (a "*" host, tcp://0.0.0.0, host names,
 * interface names, other addresses). */
int auth_endpoint_is_loopback(const char *endpoint);

#endif
