/* common/base/log.h — the one logger every daemon, tool and test uses.
 *
 * Lines go to stderr as "2026-11-21T14:28:32.123Z LEVEL tag: message".
 * The macros test the level before formatting, so disabled debug lines cost a
 * compare. The level and the tag are process-wide (the only globals allowed
 * by the house style); set them once at start-up with log_init().
 */
#ifndef KFAC_LOG_H
#define KFAC_LOG_H

#include <stddef.h>

typedef enum {
    LOG_LEVEL_ERROR = 0,
    LOG_LEVEL_WARN = 1,
    LOG_LEVEL_INFO = 2,
    LOG_LEVEL_DEBUG = 3,
} log_level_t;

extern log_level_t log_level_now;

/* Set the level and the tag printed on every line (tag is copied; NULL keeps
 * the previous one). */
void log_init(log_level_t level, const char *tag);

/* Parse "error", "warn", "info" or "debug"; returns 0 or -EINVAL. */
int log_level_parse(const char *s, log_level_t *out);

void log_write(log_level_t level, const char *fmt, ...)
    __attribute__((format(printf, 2, 3)));

/* text made safe to log: a control character, a byte >= 0x7f and the
 * backslash become \xNN (\\ for the backslash), so that a peer's string
 * (its host, build id, a Bye reason) can neither start a new log line nor
 * send escape sequences to a terminal; cut to fit buf (len bytes with the
 * NUL), a cut marked with "..." at the end. NULL is "". Returns buf (""
 * when len < 4). */
const char *log_escape(const char *text, char *buf, size_t len);

#define LOG_AT(lvl, ...) \
    do { if ((lvl) <= log_level_now) log_write((lvl), __VA_ARGS__); } while (0)
#define log_error(...) LOG_AT(LOG_LEVEL_ERROR, __VA_ARGS__)
#define log_warn(...)  LOG_AT(LOG_LEVEL_WARN, __VA_ARGS__)
#define log_info(...)  LOG_AT(LOG_LEVEL_INFO, __VA_ARGS__)
#define log_debug(...) LOG_AT(LOG_LEVEL_DEBUG, __VA_ARGS__)

#endif
