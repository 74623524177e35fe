/* common/base/textbuf.h — a growing text buffer for formatted output
 * (JSON manifests, the metrics exposition): append with printf formats,
 * the memory grows as needed, an allocation failure is sticky.
 *
 *   textbuf_t b = {0};
 *   textbuf_printf(&b, "{\"step\": %d}", 3);
 *   if (b.failed) ... else use b.s (NUL-terminated, b.len bytes); free(b.s);
 *
 * Ownership: b.s is malloc'd and belongs to the caller (free it, also after
 * a failure). */
#ifndef KFAC_BASE_TEXTBUF_H
#define KFAC_BASE_TEXTBUF_H

#include <stddef.h>

typedef struct textbuf {
    char *s;       /* the text, NUL-terminated once anything was appended (NULL before) */
    size_t len;    /* bytes of text, without the NUL */
    size_t cap;    /* bytes allocated */
    int failed;    /* an allocation or formatting failed: later appends do nothing */
} textbuf_t;

/* Append printf(fmt, ...) to b, growing it (first 4096 bytes, then
 * doubling). On failure sets b->failed and leaves the text as it was. */
__attribute__((format(printf, 2, 3))) void textbuf_printf(textbuf_t *b, const char *fmt, ...);

#endif
