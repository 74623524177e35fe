/* ps/ckpt_wire.c — see ckpt_wire.h: the byte level of a checkpoint's
 * records (write and read buffers, little-endian values, the record frame,
 * CRC-32). Which record holds what is ps/ckpt_encode.c (writing) and
 * ps/ckpt.c (checking and restoring); the files are ps/ckpt_file.c. */
#include "ps/ckpt_wire.h"

#include <stdlib.h>
#include <string.h>
#include <zlib.h>

/* ---- writer ----------------------------------------------------------------- */

void ckw_put(ckw_wbuf_t *w, const void *src, size_t n) {
    if (w->oom) return;
    if (w->len + n > w->cap) {
        size_t cap = w->cap ? w->cap : 4096;
        while (cap < w->len + n) cap *= 2;
        uint8_t *p = realloc(w->p, cap);
        if (!p) {
            w->oom = 1;
            return;
        }
        w->p = p;
        w->cap = cap;
    }
    memcpy(w->p + w->len, src, n);
    w->len += n;
}

void ckw_put_u32(ckw_wbuf_t *w, uint32_t v) {
    uint8_t b[4];
    for (int i = 0; i < 4; i++) b[i] = (uint8_t)(v >> (8 * i));
    ckw_put(w, b, 4);
}

void ckw_put_u64(ckw_wbuf_t *w, uint64_t v) {
    uint8_t b[8];
    for (int i = 0; i < 8; i++) b[i] = (uint8_t)(v >> (8 * i));
    ckw_put(w, b, 8);
}

void ckw_put_i64(ckw_wbuf_t *w, int64_t v) { ckw_put_u64(w, (uint64_t)v); }

void ckw_put_f64(ckw_wbuf_t *w, double v) {
    uint64_t u;
    memcpy(&u, &v, sizeof u);
    ckw_put_u64(w, u);
}

void ckw_put_floats(ckw_wbuf_t *w, const float *v, size_t n) {
    for (size_t i = 0; i < n; i++) {
        uint32_t u;
        memcpy(&u, &v[i], sizeof u);
        ckw_put_u32(w, u);
    }
}

/* A record: tag, zero, length patched at the end. */
size_t ckw_rec_begin(ckw_wbuf_t *w, uint32_t tag) {
    ckw_put_u32(w, tag);
    ckw_put_u32(w, 0);
    size_t at = w->len;
    ckw_put_u64(w, 0);
    return at;
}

void ckw_rec_end(ckw_wbuf_t *w, size_t at) {
    if (w->oom) return;
    uint64_t n = (uint64_t)(w->len - at - 8);
    for (int i = 0; i < 8; i++) w->p[at + (size_t)i] = (uint8_t)(n >> (8 * i));
}

/* ---- reader ------------------------------------------------------------------ */

const uint8_t *ckw_take(ckw_rbuf_t *r, size_t n) {
    if (r->bad || r->len - r->at < n) {
        r->bad = 1;
        return NULL;
    }
    const uint8_t *q = r->p + r->at;
    r->at += n;
    return q;
}

uint32_t ckw_take_u32(ckw_rbuf_t *r) {
    const uint8_t *b = ckw_take(r, 4);
    if (!b) return 0;
    uint32_t v = 0;
    for (int i = 0; i < 4; i++) v |= (uint32_t)b[i] << (8 * i);
    return v;
}

uint64_t ckw_take_u64(ckw_rbuf_t *r) {
    const uint8_t *b = ckw_take(r, 8);
    if (!b) return 0;
    uint64_t v = 0;
    for (int i = 0; i < 8; i++) v |= (uint64_t)b[i] << (8 * i);
    return v;
}

int64_t ckw_take_i64(ckw_rbuf_t *r) { return (int64_t)ckw_take_u64(r); }

double ckw_take_f64(ckw_rbuf_t *r) {
    uint64_t u = ckw_take_u64(r);
    double v;
    memcpy(&v, &u, sizeof v);
    return v;
}

/* n floats into dst (NULL: skip them). Returns 0, or -1 past the end. */
int ckw_take_floats(ckw_rbuf_t *r, float *dst, size_t n) {
    if (n > (r->len - r->at) / 4) {
        r->bad = 1;
        return -1;
    }
    const uint8_t *b = ckw_take(r, n * 4);
    if (!b) return -1;
    if (!dst) return 0;
    for (size_t i = 0; i < n; i++) {
        uint32_t u = (uint32_t)b[4 * i] | (uint32_t)b[4 * i + 1] << 8 | (uint32_t)b[4 * i + 2] << 16 |
                     (uint32_t)b[4 * i + 3] << 24;
        memcpy(&dst[i], &u, sizeof u);
    }
    return 0;
}

/* Are the n floats at the reader's position finite? (does not move it) */
int ckw_peek_finite(const ckw_rbuf_t *r, size_t n) {
    if (r->bad || n > (r->len - r->at) / 4) return 0;
    for (size_t i = 0; i < n; i++) {
        const uint8_t *b = r->p + r->at + 4 * i;
        uint32_t u = (uint32_t)b[0] | (uint32_t)b[1] << 8 | (uint32_t)b[2] << 16 | (uint32_t)b[3] << 24;
        if ((u & 0x7f800000u) == 0x7f800000u) return 0;
    }
    return 1;
}

/* ---- checksums ------------------------------------------------------------------ */

uint32_t ckw_crc(const void *p, size_t n) {
    uLong c = crc32(0L, Z_NULL, 0);
    const uint8_t *b = p;
    while (n > 0) {
        uInt k = n > (1u << 30) ? (1u << 30) : (uInt)n;
        c = crc32(c, b, k);
        b += k;
        n -= k;
    }
    return (uint32_t)c;
}

uint32_t ckw_model_crc(const char *text) {
    return text ? ckw_crc(text, strlen(text)) : 0;
}

uint32_t ckw_le32(const uint8_t *b) {
    return (uint32_t)b[0] | (uint32_t)b[1] << 8 | (uint32_t)b[2] << 16 | (uint32_t)b[3] << 24;
}

