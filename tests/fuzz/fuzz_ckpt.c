/* tests/fuzz/fuzz_ckpt.c — libFuzzer harness of the checkpoint reader
 * (ps_ckpt_decode): the input, as a checkpoint file image, is decoded into
 * each configuration of fuzz_ckpt_world.h twice: as it is (so the header
 * and CRC checks are fuzzed too) and with both CRCs recomputed (without
 * that nearly every mutation stops at the CRC check and the record parser
 * behind it is never reached). Any crash, leak or undefined behaviour is a
 * bug; refusals are expected. A decode that succeeds must be repeatable:
 * the same image decoded again gives 0 again.
 * Seeds: fuzz_ckpt_seeds (real encoder output of every configuration). */
#include <stddef.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>
#include <zlib.h>

#include "tests/fuzz/fuzz_ckpt_world.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

static void s_put32(uint8_t *p, uint32_t v) {
    for (int i = 0; i < 4; i++) p[i] = (uint8_t)(v >> (8 * i));
}

static void s_decode_all(const uint8_t *buf, size_t len) {
    char err[1024];
    for (int i = 0; i < FUZZ_CKPT_N_WORLDS; i++) {
        ps_ckpt_state_t *st = fuzz_ckpt_world(i);
        if (!st) abort(); /* the harness itself is broken */
        if (ps_ckpt_decode(st, buf, len, 100.0, "fuzz.kfc", err, sizeof err) == 0 &&
            ps_ckpt_decode(st, buf, len, 100.0, "fuzz.kfc", err, sizeof err) != 0)
            abort(); /* a good image turned bad by being restored once */
    }
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
    if (size > (1u << 20)) return 0;
    s_decode_all(data, size);
    if (size < PS_CKPT_HEADER_LEN) return 0;
    uint8_t *b = malloc(size);
    if (!b) return 0;
    memcpy(b, data, size);
    s_put32(b + 24, (uint32_t)crc32(crc32(0L, Z_NULL, 0), b + PS_CKPT_HEADER_LEN, (uInt)(size - PS_CKPT_HEADER_LEN)));
    s_put32(b + 28, (uint32_t)crc32(crc32(0L, Z_NULL, 0), b, 28));
    s_decode_all(b, size);
    free(b);
    return 0;
}
