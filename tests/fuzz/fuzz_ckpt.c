/* tests/fuzz/fuzz_ckpt.c — libFuzzer harness of the checkpoint reader
 * (ps_ckpt_decode): the input, as a checkpoint file image, is decoded into
 * each configuration of fuzz_ckpt_world.h twice: as it is (so the header
 * and CRC checks are fuzzed too) and with both CRCs recomputed (without
 * that nearly every mutation stops at the CRC check and the record parser
 * behind it is never reached). Any crash, leak or undefined behaviour is a
 * bug; refusals are expected, but a refused image must leave the state
 * exactly as it was (compared as the state's own encoding: the decoder
 * promises "everything restored or nothing touched"), and a decode that
 * succeeds must be repeatable.
 * Seeds: fuzz_ckpt_seeds (real encoder output of every configuration). */
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <zlib.h>

#include "tests/fuzz/fuzz_ckpt_world.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

static void s_put32(uint8_t *p, uint32_t v) {
    for (int i = 0; i < 4; i++) p[i] = (uint8_t)(v >> (8 * i));
}

/* The state as bytes (its own checkpoint image): the snapshot that a
 * refused image must leave unchanged. NULL when it cannot be encoded. */
static uint8_t *s_snapshot(const ps_ckpt_state_t *st, size_t *len) {
    char err[256];
    uint8_t *b = NULL;
    if (ps_ckpt_encode(st, &b, len, err, sizeof err) != 0) return NULL;
    return b;
}

/* Each world's snapshot, kept until a decode succeeds (encoding is most of
 * a run's time: one per refusal, not two). */
static uint8_t *s_snap[FUZZ_CKPT_N_WORLDS];
static size_t s_snap_len[FUZZ_CKPT_N_WORLDS];

/* Decode into every world. check: compare the state after a refusal with
 * the snapshot (the unmodified input nearly always stops at its CRC, before
 * anything could be written: it is decoded without that check). */
static void s_decode_all(const uint8_t *buf, size_t len, int check) {
    char err[1024];
    for (int i = 0; i < FUZZ_CKPT_N_WORLDS; i++) {
        ps_ckpt_state_t *st = fuzz_ckpt_world(i);
        if (!st) abort(); /* the harness itself is broken */
        if (check && !s_snap[i]) s_snap[i] = s_snapshot(st, &s_snap_len[i]);
        int rc = ps_ckpt_decode(st, buf, len, 100.0, "fuzz.kfc", err, sizeof err);
        if (rc == 0) {
            free(s_snap[i]);
            s_snap[i] = NULL; /* the state changed: a new snapshot next time */
            if (ps_ckpt_decode(st, buf, len, 100.0, "fuzz.kfc", err, sizeof err) != 0)
                abort(); /* a good image turned bad by being restored once */
        } else if (check && s_snap[i]) {
            /* ps_ckpt_decode's contract: a refused image touches nothing */
            size_t n1 = 0;
            uint8_t *after = s_snapshot(st, &n1);
            if (!after || n1 != s_snap_len[i] || memcmp(s_snap[i], after, n1) != 0) {
                fprintf(stderr, "fuzz_ckpt: a refused image changed the %s state: %s\n", fuzz_ckpt_world_name(i), err);
                abort();
            }
            free(after);
        }
    }
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
    if (size > (1u << 20)) return 0;
    s_decode_all(data, size, 0);
    if (size < PS_CKPT_HEADER_LEN) return 0;
    uint8_t *b = malloc(size);
    if (!b) return 0;
    memcpy(b, data, size);
    s_put32(b + 24, (uint32_t)crc32(crc32(0L, Z_NULL, 0), b + PS_CKPT_HEADER_LEN, (uInt)(size - PS_CKPT_HEADER_LEN)));
    s_put32(b + 28, (uint32_t)crc32(crc32(0L, Z_NULL, 0), b, 28));
    s_decode_all(b, size, 1);
    free(b);
    return 0;
}
