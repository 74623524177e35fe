/* common/net/auth_watch.h — kfac-ps watches its allowlist folders, so a
 * public key copied into one is admitted without a signal
 * (docs/security.md, "Adding and removing keys").
 *
 * Each watched path is a folder of keys, or a key file, for which its
 * folder is watched (an editor or `cp` may replace the file, which would
 * end a watch on the file itself). Watching needs only read access to the
 * folder (inotify on Linux, through libuv's uv_fs_event): the 0755 folders
 * of docs/security.md serve a kfac-ps running under systemd's
 * DynamicUser=yes. Change events come in bursts (a `cp` is a create and one
 * or more writes; a `tar x` is many files), so the callback runs once,
 * debounce_ms after the last event of a burst. After every callback the
 * watches are started again, so a folder that was removed and made again is
 * watched anew.
 *
 * Threads: the loop thread only. The handles do not keep the loop alive.
 * Errors: the constructor returns NULL when out of memory; a folder that
 * cannot be watched is logged and skipped (SIGHUP still reloads it).
 */
#ifndef KFAC_NET_AUTH_WATCH_H
#define KFAC_NET_AUTH_WATCH_H

#include <stdint.h>
#include <uv.h>

/* Quiet time after the last change event before the callback runs. */
#define AUTH_WATCH_DEBOUNCE_MS 200

/* At most this many paths are watched (the three allowlists). */
#define AUTH_WATCH_MAX_PATHS 3

/* Runs on the loop thread once a burst of changes is over. what names the
 * folder(s) that changed ("/etc/kfac/allow/invertd", "... and 1 more
 * folder"); borrowed for the call. */
typedef void (*auth_watch_fn)(const char *what, void *user);

typedef struct auth_watch auth_watch_t;

/* Watch the folders of paths[0..n_paths) (n_paths <= AUTH_WATCH_MAX_PATHS;
 * empty or NULL entries are skipped; a folder named twice is watched once)
 * on loop (borrowed). paths are copied. fn and user are borrowed. A folder
 * that cannot be watched is logged (SIGHUP still reloads it) and tried
 * again at the next auth_watch_rearm(). Returns NULL only when out of
 * memory. */
auth_watch_t *auth_watch_new(uv_loop_t *loop, const char *const *paths, int n_paths, uint64_t debounce_ms,
                             auth_watch_fn fn, void *user);

/* Start every watch again (a folder that was missing or replaced). Returns
 * the number of folders watched. */
int auth_watch_rearm(auth_watch_t *w);

/* Folders watched now. */
int auth_watch_count(const auth_watch_t *w);

/* Stop and close; the memory goes in the loop's close callbacks (run the
 * loop before uv_loop_close). NULLs *wp; NULL is a no-op. */
void auth_watch_free(auth_watch_t **wp);

#endif
