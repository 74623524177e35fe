/* ps/ckpt_wire.h — private to the checkpoint code (ps/ckpt_encode.c, ps/ckpt.c):
 * the bytes of a checkpoint's records. A growable write buffer and a
 * bounds-checked read buffer, little-endian u32/u64/i64/f64 and float32
 * arrays put and taken, the record frame (u32 tag, u32 zero, u64 length),
 * zlib's CRC-32, and the record tags. The format itself is described in
 * ps/ckpt.h; what each record holds is written by ps/ckpt_encode.c and
 * checked by ps/ckpt.c. Not thread-safe per buffer; no globals. */
#ifndef KFAC_PS_CKPT_WIRE_H
#define KFAC_PS_CKPT_WIRE_H

#include <stddef.h>
#include <stdint.h>

#include "common/net/auth_keys.h"
#include "ps/drift.h"

/* Record tags: four ASCII letters, read as a little-endian u32. */
#define CKW_TAG(a, b, c, d) ((uint32_t)(a) | (uint32_t)(b) << 8 | (uint32_t)(c) << 16 | (uint32_t)(d) << 24)
#define CKW_META CKW_TAG('M', 'E', 'T', 'A')
#define CKW_PRMS CKW_TAG('P', 'R', 'M', 'S')
#define CKW_BNST CKW_TAG('B', 'N', 'S', 'T')
#define CKW_SGDV CKW_TAG('S', 'G', 'D', 'V')
#define CKW_KOPT CKW_TAG('K', 'O', 'P', 'T')
#define CKW_FACT CKW_TAG('F', 'A', 'C', 'T')
#define CKW_BLCK CKW_TAG('B', 'L', 'C', 'K')
#define CKW_SCHD CKW_TAG('S', 'C', 'H', 'D')
#define CKW_RFSH CKW_TAG('R', 'F', 'S', 'H')
#define CKW_NORM CKW_TAG('N', 'O', 'R', 'M')
#define CKW_OWNR CKW_TAG('O', 'W', 'N', 'R')
#define CKW_IDNT CKW_TAG('I', 'D', 'N', 'T')
#define CKW_HIST CKW_TAG('H', 'I', 'S', 'T')
#define CKW_DRFT CKW_TAG('D', 'R', 'F', 'T')
#define CKW_N_TAGS 14

/* DRFT (version 4): the reference-gradient check's histories (ps/drift.h):
 * u64 the table's judgement count, u64 n_params, u32 n, then n members:
 * u32 role code (CKW_ROLE_*), u32 member id, PS_DRIFT_KEY_LEN bytes of key
 * (NUL-padded), u64 judged_at, u32 flags (CKW_DRFT_*), u32 e values seen,
 * u32 pushes judged, f64 mu, s2, gbar, z, then with CKW_DRFT_M n_params
 * floats (the running mean direction). */
#define CKW_DRFT_M 1u
#define CKW_DRFT_REFUSING 2u
#define CKW_DRFT_LEN (28u + PS_DRIFT_KEY_LEN + 32u)

/* OWNR: u32 n, then n bindings of CKW_OWNR_LEN bytes each: u32 role code
 * (CKW_ROLE_*), u32 member id, the key's AUTH_KEY_Z85_LEN Z85 characters.
 * Its own role codes: the file does not depend on proto/'s numbering. */
#define CKW_OWNR_LEN (8u + AUTH_KEY_Z85_LEN)
#define CKW_ROLE_WORKER 1u
#define CKW_ROLE_STATSD 2u
#define CKW_ROLE_INVERTD 3u

/* IDNT (version 3): u32 n, then n identities of CKW_IDNT_LEN bytes each
 * (ps/ident.h, what a member has done): u32 role code (CKW_ROLE_*), u32
 * member id, the key's AUTH_KEY_Z85_LEN Z85 characters (all zero without
 * CURVE), u32 stalls, u32 bad inverses, u32 flags (CKW_IDNT_*), u64 the
 * last statistics version. */
#define CKW_IDNT_LEN (28u + AUTH_KEY_Z85_LEN)

/* HIST (version 3): the guards' histories, two sets, each a u32 count of
 * histories then per history u32 n, u32 next and n f64 values (as NORM):
 * each layer's clipped gradient norms ([ps] grad_clip_ratio), then each
 * factor's statistics traces ([ps] stats_trace_max_ratio). */
#define CKW_IDNT_DEMOTED 1u
#define CKW_IDNT_DISTRUSTED 2u
#define CKW_IDNT_STATS_VERSION 4u

/* Inverse counters stored, in this order (kfac_inverse_stats_t). */
#define CKW_N_INV_STATS 12

/* ---- writer ---------------------------------------------------------------- */

/* A growable buffer, zero-initialised by the caller ({0}); p (len bytes
 * used of cap) is caller-owned once written: free(w.p). An allocation
 * failure sets oom and makes every later put a no-op, so the caller
 * checks oom once, at the end. */
typedef struct {
    uint8_t *p;
    size_t len, cap;
    int oom;
} ckw_wbuf_t;

/* Append n bytes of src (borrowed). */
void ckw_put(ckw_wbuf_t *w, const void *src, size_t n);
/* Append v little-endian (i64: two's complement; f64: its binary64 bits). */
void ckw_put_u32(ckw_wbuf_t *w, uint32_t v);
void ckw_put_u64(ckw_wbuf_t *w, uint64_t v);
void ckw_put_i64(ckw_wbuf_t *w, int64_t v);
void ckw_put_f64(ckw_wbuf_t *w, double v);
/* Append n floats of v (borrowed), each its binary32 bits little-endian. */
void ckw_put_floats(ckw_wbuf_t *w, const float *v, size_t n);

/* Start a record: the tag, a zero, a length placeholder. Returns where the
 * length lies, for ckw_rec_end, which patches in the bytes written since. */
size_t ckw_rec_begin(ckw_wbuf_t *w, uint32_t tag);
void ckw_rec_end(ckw_wbuf_t *w, size_t at);

/* ---- reader ---------------------------------------------------------------- */

/* A view of len bytes at p (borrowed), read from at. Reading past the end
 * sets bad, after which every take returns 0 / NULL: callers read a group
 * of fields, then check bad once. */
typedef struct {
    const uint8_t *p;
    size_t len, at;
    int bad; /* ran past the end */
} ckw_rbuf_t;

/* The next n bytes (a pointer into the buffer), or NULL past the end. */
const uint8_t *ckw_take(ckw_rbuf_t *r, size_t n);
/* The next value, little-endian; 0 past the end. */
uint32_t ckw_take_u32(ckw_rbuf_t *r);
uint64_t ckw_take_u64(ckw_rbuf_t *r);
int64_t ckw_take_i64(ckw_rbuf_t *r);
double ckw_take_f64(ckw_rbuf_t *r);
/* n floats into dst (caller-owned, n of them; NULL: skip them). Returns 0,
 * or -1 past the end (nothing is read then). */
int ckw_take_floats(ckw_rbuf_t *r, float *dst, size_t n);
/* 1 if the n floats at the reader's position are there and finite, else 0
 * (does not move it). */
int ckw_peek_finite(const ckw_rbuf_t *r, size_t n);

/* ---- checksums --------------------------------------------------------------- */

/* zlib's CRC-32 (polynomial 0xEDB88320) of n bytes, any n. */
uint32_t ckw_crc(const void *p, size_t n);
/* The CRC-32 of the model text (NUL-terminated; NULL gives 0), stored in
 * META so that a checkpoint is resumed only with the same model. */
uint32_t ckw_model_crc(const char *text);
/* The little-endian u32 at b (4 bytes). */
uint32_t ckw_le32(const uint8_t *b);

#endif
