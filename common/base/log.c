/* common/base/log.c — see log.h. */
#include "common/base/log.h"

#include <errno.h>
#include <stdarg.h>
#include <stdio.h>
#include <string.h>
#include <sys/time.h>
#include <time.h>

log_level_t log_level_now = LOG_LEVEL_INFO;
static char s_tag[32] = "kfac";

void log_init(log_level_t level, const char *tag) {
    log_level_now = level;
    if (tag) snprintf(s_tag, sizeof s_tag, "%s", tag);
}

int log_level_parse(const char *s, log_level_t *out) {
    static const char *names[] = {"error", "warn", "info", "debug"};
    for (int i = 0; i < 4; i++)
        if (strcmp(s, names[i]) == 0) { *out = (log_level_t)i; return 0; }
    return -EINVAL;
}

void log_write(log_level_t level, const char *fmt, ...) {
    static const char *lv[] = {"ERROR", "WARN ", "INFO ", "DEBUG"};
    char line[2048];
    struct timeval tv;
    struct tm tm;
    gettimeofday(&tv, NULL);
    gmtime_r(&tv.tv_sec, &tm);
    int n = snprintf(line, sizeof line, "%04d-%02d-%02dT%02d:%02d:%02d.%03ldZ %s %s: ",
                     tm.tm_year + 1900, tm.tm_mon + 1, tm.tm_mday, tm.tm_hour,
                     tm.tm_min, tm.tm_sec, (long)(tv.tv_usec / 1000), lv[level], s_tag);
    va_list ap;
    va_start(ap, fmt);
    if (n > 0 && (size_t)n < sizeof line) vsnprintf(line + n, sizeof line - (size_t)n, fmt, ap);
    va_end(ap);
    /* One fputs per line so concurrent writers do not interleave mid-line. */
    size_t len = strlen(line);
    if (len + 1 < sizeof line) { line[len] = '\n'; line[len + 1] = 0; }
    fputs(line, stderr);
}

/* Bytes the escaped form of c takes. */
static size_t s_escaped_len(unsigned char c) {
    if (c == '\\') return 2;
    return c >= 0x20 && c < 0x7f ? 1 : 4;
}

const char *log_escape(const char *text, char *buf, size_t len) {
    if (!buf || len < 4) return buf && len ? (buf[0] = 0, buf) : "";
    static const char hex[] = "0123456789abcdef";
    const unsigned char *t = (const unsigned char *)(text ? text : "");
    size_t total = 0;
    for (const unsigned char *c = t; *c; c++) total += s_escaped_len(*c);
    size_t room = total < len ? len - 1 : len - 4; /* all of it, or up to a final "..." */
    size_t o = 0;
    for (const unsigned char *c = t; *c && o + s_escaped_len(*c) <= room; c++) {
        if (s_escaped_len(*c) == 1) {
            buf[o++] = (char)*c;
            continue;
        }
        buf[o++] = '\\';
        if (*c == '\\') {
            buf[o++] = '\\';
            continue;
        }
        buf[o++] = 'x';
        buf[o++] = hex[*c >> 4];
        buf[o++] = hex[*c & 15];
    }
    if (total >= len) memcpy(buf + o, "...", 3), o += 3;
    buf[o] = 0;
    return buf;
}
