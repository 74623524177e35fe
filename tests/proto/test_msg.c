/* tests/proto/test_msg.c — the wire messages (proto/msg.h): encode/decode round
 * trips of every type with random contents, hostile input (every prefix of a
 * message, random bytes, mutated bytes), with msg_validate() in test_msg_validate.c.
 *
 * Random contents come from a fresh seed (/dev/urandom) printed in every
 * failure message. Floats must survive the wire bit for bit (no tolerance:
 * the encoding is a memcpy of IEEE-754 float32).
 */
#include <check.h>
#include <errno.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "common/base/rng.h"
#include "proto/msg.h"
#include "proto/msg_fields.h"
#include "tests/lib/msg_fixture.h"
#include "tests/lib/seed.h"

/* ---- the field tables ---------------------------------------------------- */

/* Every field of proto/kfac.proto has its row in proto/msg_fields.c (a
 * field added to the .proto alone fails here), of the wire's kind. */
START_TEST(test_msg_fields_match_the_wire) {
    char err[256] = "";
    ck_assert_msg(msg_fields_check(err, sizeof err) == 0, "%s", err);
    for (int t = MSG_HELLO; t < MSG_TYPE_COUNT; t++) {
        const msg_struct_t *b = msg_fields_body((msg_type_t)t);
        ck_assert_ptr_nonnull(b);
        ck_assert_str_eq(b->name, msg_type_name((msg_type_t)t));
        ck_assert_int_eq(msg_fields_type_of_case(b->body_case), t);
    }
    ck_assert_ptr_null(msg_fields_body(MSG_NONE));
    ck_assert_ptr_null(msg_fields_body(MSG_TYPE_COUNT));
    ck_assert_int_eq(msg_fields_type_of_case(99), MSG_NONE);
}
END_TEST

/* ---- round trips -------------------------------------------------------- */

START_TEST(test_msg_roundtrip_every_type) {
    msgfx_ctx_t c;
    msgfx_ctx_init(&c);
    int64_t bound = msg_limits_max_bytes(&c.lim);
    for (int t = MSG_HELLO; t < MSG_TYPE_COUNT; t++) {
        for (int rep = 0; rep < 25; rep++) {
            msg_t m, d;
            char err[256] = "";
            msgfx_random_msg(&c, (msg_type_t)t, &m);
            int rc = msg_validate(&m, &c.lim, err, sizeof err);
            ck_assert_msg(rc == 0, "seed %llu: generated %s invalid: %s", (unsigned long long)c.seed,
                          msg_type_name((msg_type_t)t), err);
            uint8_t *buf;
            size_t len;
            ck_assert_int_eq(msg_encode(&m, &buf, &len), 0);
            ck_assert_msg((int64_t)len <= bound, "seed %llu: %s encodes to %zu bytes, bound %lld",
                          (unsigned long long)c.seed, msg_type_name((msg_type_t)t), len, (long long)bound);
            rc = msg_decode(buf, len, &d, err, sizeof err);
            free(buf);
            ck_assert_msg(rc == 0, "seed %llu: %s: %s", (unsigned long long)c.seed, msg_type_name((msg_type_t)t), err);
            ck_assert_msg(msgfx_msg_eq(&m, &d), "seed %llu: %s differs after the round trip", (unsigned long long)c.seed,
                          msg_type_name((msg_type_t)t));
            rc = msg_validate(&d, &c.lim, err, sizeof err);
            ck_assert_msg(rc == 0, "seed %llu: decoded %s invalid: %s", (unsigned long long)c.seed,
                          msg_type_name((msg_type_t)t), err);
            msg_clear(&m);
            msg_clear(&d);
            ck_assert_int_eq(d.type, MSG_NONE);
        }
    }
}
END_TEST

/* msg_encode_to: the same bytes as msg_encode in a buffer of exactly the
 * size or larger (nothing written past the size); a smaller buffer is
 * refused with the size needed and left untouched. */
START_TEST(test_msg_encode_to_caller_buffer) {
    msgfx_ctx_t c;
    msgfx_ctx_init(&c);
    for (int t = MSG_HELLO; t < MSG_TYPE_COUNT; t++) {
        for (int rep = 0; rep < 10; rep++) {
            msg_t m;
            msgfx_random_msg(&c, (msg_type_t)t, &m);
            uint8_t *ref;
            size_t len, got = 0;
            ck_assert_int_eq(msg_encode(&m, &ref, &len), 0);
            size_t slack = rng_below(&c.rng, 64);
            uint8_t *buf = malloc(len + slack + 1);
            ck_assert_ptr_nonnull(buf);
            memset(buf, 0xa5, len + slack + 1);
            ck_assert_int_eq(msg_encode_to(&m, buf, len + slack, &got), 0);
            ck_assert_msg(got == len && memcmp(buf, ref, len) == 0, "seed %llu: %s: msg_encode_to differs",
                          (unsigned long long)c.seed, msg_type_name((msg_type_t)t));
            for (size_t i = len; i < len + slack + 1; i++) ck_assert_uint_eq(buf[i], 0xa5);
            if (len > 0) {
                memset(buf, 0xa5, len + slack + 1);
                size_t cap = rng_below(&c.rng, (uint32_t)len);
                got = 0;
                ck_assert_int_eq(msg_encode_to(&m, buf, cap, &got), -ENOSPC);
                ck_assert_uint_eq(got, len);
                for (size_t i = 0; i < len + slack + 1; i++) ck_assert_uint_eq(buf[i], 0xa5);
            }
            ck_assert_int_eq(msg_encode_to(&m, NULL, 100, &got), -EINVAL);
            free(buf);
            free(ref);
            msg_clear(&m);
        }
    }
}
END_TEST

/* Borrowed arrays and NULL strings encode; decoding gives "" for NULL. */
START_TEST(test_msg_encode_borrowed_fields) {
    static const float w[5] = {1, -2, 3.5f, 0, 1e-30f};
    msg_t m, d;
    msg_init(&m, MSG_PARAMS, MSG_ROLE_PS, 7);
    m.params.version = 3;
    m.params.params = (float *)w;
    m.params.n_params = 5;
    msgfx_ctx_t c;
    msgfx_ctx_init(&c);
    msgfx_wire(&c, &m, &d);
    ck_assert(msgfx_msg_eq(&m, &d));
    msg_clear(&d);

    msg_init(&m, MSG_BYE, MSG_ROLE_WORKER, 1); /* reason NULL */
    msgfx_wire(&c, &m, &d);
    ck_assert_ptr_nonnull(d.bye.text);
    ck_assert_str_eq(d.bye.text, "");
    msg_clear(&d);
}
END_TEST

/* The decoded arrays can be taken without a copy; msg_clear() leaves them. */
START_TEST(test_msg_decode_take_array) {
    msgfx_ctx_t c;
    msgfx_ctx_init(&c);
    msg_t m, d;
    msgfx_random_msg(&c, MSG_GRAD_PUSH, &m);
    msgfx_wire(&c, &m, &d);
    float *g = d.grad_push.grad;
    size_t n = d.grad_push.n_grad;
    d.grad_push.grad = NULL;
    d.grad_push.n_grad = 0;
    msg_clear(&d);
    ck_assert_int_eq(memcmp(g, m.grad_push.grad, n * sizeof *g), 0);
    free(g); /* the caller owns it now (ASan checks it came from malloc) */
    msg_clear(&m);
}
END_TEST

/* A gradient of a million floats: exact round trip and the length check
 * against the model. */
START_TEST(test_msg_roundtrip_large_gradient) {
    msgfx_ctx_t c;
    msgfx_ctx_init(&c);
    const size_t n = (size_t)1 << 20;
    c.model.n_params = n;
    msg_t m, d;
    msg_init(&m, MSG_GRAD_PUSH, MSG_ROLE_WORKER, 3);
    m.grad_push.n_examples = 128;
    m.grad_push.grad = msgfx_floats(&c.rng, n);
    m.grad_push.n_grad = n;
    uint8_t *buf;
    size_t len;
    ck_assert_int_eq(msg_encode(&m, &buf, &len), 0);
    ck_assert_uint_ge(len, n * 4);
    ck_assert_uint_le(len, n * 4 + 64); /* packed: 4 bytes per float plus headers */
    char err[256];
    ck_assert_int_eq(msg_decode(buf, len, &d, err, sizeof err), 0);
    free(buf);
    ck_assert_msg(msgfx_msg_eq(&m, &d), "seed %llu", (unsigned long long)c.seed);
    ck_assert_int_eq(msg_validate(&d, &c.lim, err, sizeof err), 0);
    c.model.n_params = n - 1;
    ck_assert_int_eq(msg_validate(&d, &c.lim, err, sizeof err), -EINVAL);
    ck_assert_str_eq(err, "grad_push.grad: expected 1048575 floats, got 1048576");
    msg_clear(&m);
    msg_clear(&d);
}
END_TEST

/* ---- hostile bytes ------------------------------------------------------ */

/* Every strict prefix of a message fails to decode, or decodes to something
 * msg_validate() rejects; never a crash or a leak (ASan). */
START_TEST(test_msg_decode_truncated_prefixes) {
    msgfx_ctx_t c;
    msgfx_ctx_init(&c);
    for (int t = MSG_HELLO; t < MSG_TYPE_COUNT; t++) {
        msg_t m;
        msgfx_random_msg(&c, (msg_type_t)t, &m);
        uint8_t *buf;
        size_t len;
        ck_assert_int_eq(msg_encode(&m, &buf, &len), 0);
        for (size_t k = 0; k < len; k++) {
            uint8_t *cut = malloc(k ? k : 1); /* exact size: ASan sees overreads */
            memcpy(cut, buf, k);
            msg_t d;
            char err[256] = "";
            int rc = msg_decode(cut, k, &d, err, sizeof err);
            ck_assert_msg(rc == 0 || rc == -EBADMSG || rc == -EPROTO, "rc %d", rc);
            if (rc != 0) ck_assert_msg(err[0], "seed %llu: no error text", (unsigned long long)c.seed);
            if (rc == 0) {
                int v = msg_validate(&d, &c.lim, err, sizeof err);
                ck_assert_msg(v != 0, "seed %llu: %s prefix %zu of %zu bytes decodes to a valid message",
                              (unsigned long long)c.seed, msg_type_name((msg_type_t)t), k, len);
            }
            msg_clear(&d);
            free(cut);
        }
        msg_t d;
        ck_assert_int_eq(msg_decode(buf, len, &d, NULL, 0), 0);
        ck_assert(msgfx_msg_eq(&m, &d));
        msg_clear(&d);
        msg_clear(&m);
        free(buf);
    }
}
END_TEST

static void s_decode_any(const msgfx_ctx_t *c, const uint8_t *b, size_t n) {
    msg_t d;
    char err[256] = "";
    int rc = msg_decode(b, n, &d, err, sizeof err);
    ck_assert_msg(rc == 0 || rc == -EBADMSG || rc == -EPROTO, "seed %llu: rc %d", (unsigned long long)c->seed, rc);
    if (rc == -EBADMSG) {
        ck_assert_int_eq(d.type, MSG_NONE);
        ck_assert_int_eq(d.sender_id, 0);
    }
    if (rc == -EPROTO) ck_assert_int_eq(d.type, MSG_NONE);
    if (rc == 0) {
        ck_assert(d.type > MSG_NONE && d.type < MSG_TYPE_COUNT);
        (void)msg_validate(&d, &c->lim, err, sizeof err); /* must not crash whatever it says */
    }
    msg_clear(&d);
}

START_TEST(test_msg_decode_random_bytes) {
    msgfx_ctx_t c;
    msgfx_ctx_init(&c);
    for (int rep = 0; rep < 3000; rep++) {
        size_t n = rng_below(&c.rng, 200);
        uint8_t *b = malloc(n ? n : 1);
        for (size_t i = 0; i < n; i++) b[i] = (uint8_t)rng_u64(&c.rng);
        s_decode_any(&c, b, n);
        free(b);
    }
    s_decode_any(&c, NULL, 0);
}
END_TEST

/* Valid encodings with random bytes overwritten. */
START_TEST(test_msg_decode_mutated_bytes) {
    msgfx_ctx_t c;
    msgfx_ctx_init(&c);
    for (int t = MSG_HELLO; t < MSG_TYPE_COUNT; t++) {
        msg_t m;
        msgfx_random_msg(&c, (msg_type_t)t, &m);
        uint8_t *buf;
        size_t len;
        ck_assert_int_eq(msg_encode(&m, &buf, &len), 0);
        msg_clear(&m);
        for (int rep = 0; rep < 200; rep++) {
            uint8_t *b = malloc(len);
            memcpy(b, buf, len);
            int k = 1 + (int)rng_below(&c.rng, 4);
            for (int i = 0; i < k; i++) b[rng_below(&c.rng, (uint32_t)len)] = (uint8_t)rng_u64(&c.rng);
            s_decode_any(&c, b, len);
            free(b);
        }
        free(buf);
    }
}
END_TEST

/* An Envelope with a body this build does not know (a future type): the
 * header is still readable so the receiver can answer. Bytes: field 1
 * varint 2, field 2 varint 3, field 3 varint 9, field 40 length 0. */
START_TEST(test_msg_decode_unknown_body) {
    static const uint8_t b[] = {0x08, 0x02, 0x10, 0x03, 0x18, 0x09, 0xc2, 0x02, 0x00};
    msg_t d;
    char err[256] = "";
    ck_assert_int_eq(msg_decode(b, sizeof b, &d, err, sizeof err), -EPROTO);
    ck_assert_int_eq(d.type, MSG_NONE);
    ck_assert_uint_eq(d.protocol_version, 2);
    ck_assert_int_eq(d.role, MSG_ROLE_STATSD);
    ck_assert_uint_eq(d.sender_id, 9);
    ck_assert_str_eq(err, "message from statsd 9 (protocol version 2) has no body this build knows");
    msg_clear(&d);
}
END_TEST

START_TEST(test_msg_encode_rejects_missing_arrays) {
    msg_t m;
    uint8_t *buf = (uint8_t *)1;
    size_t len = 1;
    msg_init(&m, MSG_PARAMS, MSG_ROLE_PS, 1);
    m.params.n_params = 3; /* no data */
    ck_assert_int_eq(msg_encode(&m, &buf, &len), -EINVAL);
    ck_assert_ptr_null(buf);
    msg_init(&m, MSG_STATS_PUSH, MSG_ROLE_STATSD, 1);
    m.stats_push.stats.n_layers = 2; /* no layers */
    ck_assert_int_eq(msg_encode(&m, &buf, &len), -EINVAL);
    msg_init(&m, (msg_type_t)99, MSG_ROLE_PS, 1);
    ck_assert_int_eq(msg_encode(&m, &buf, &len), -EINVAL);
    msg_init(&m, MSG_NONE, MSG_ROLE_PS, 1);
    ck_assert_int_eq(msg_encode(&m, &buf, &len), -EINVAL);
}
END_TEST

START_TEST(test_msg_names) {
    ck_assert_str_eq(msg_type_name(MSG_GRAD_PUSH), "grad_push");
    ck_assert_str_eq(msg_type_name((msg_type_t)77), "?");
    ck_assert_str_eq(msg_role_name(MSG_ROLE_INVERTD), "invertd");
    ck_assert_str_eq(msg_role_program(MSG_ROLE_STATSD), "kfac-statsd");
    ck_assert_str_eq(msg_method_name(MSG_METHOD_EIGEN), "eigen");
    ck_assert_str_eq(msg_factor_kind_name(MSG_FACTOR_G_BIAS), "G_bias");
    ck_assert_str_eq(msg_error_code_name(MSG_ERR_STALE), "stale");
    /* packed index: brute-force enumeration of the row-major upper triangle */
    for (size_t n = 1; n < 9; n++) {
        size_t k = 0;
        for (size_t i = 0; i < n; i++)
            for (size_t j = i; j < n; j++) ck_assert_uint_eq(msg_packed_index(n, i, j), k++);
        ck_assert_uint_eq(k, msg_packed_len(n));
    }
}
END_TEST

Suite *make_suite(void) {
    Suite *s = suite_create("msg");
    TCase *tc = tcase_create("core");
    tcase_set_timeout(tc, 30);
    tcase_add_test(tc, test_msg_fields_match_the_wire);
    tcase_add_test(tc, test_msg_roundtrip_every_type);
    tcase_add_test(tc, test_msg_encode_to_caller_buffer);
    tcase_add_test(tc, test_msg_encode_borrowed_fields);
    tcase_add_test(tc, test_msg_decode_take_array);
    tcase_add_test(tc, test_msg_roundtrip_large_gradient);
    tcase_add_test(tc, test_msg_decode_truncated_prefixes);
    tcase_add_test(tc, test_msg_decode_random_bytes);
    tcase_add_test(tc, test_msg_decode_mutated_bytes);
    tcase_add_test(tc, test_msg_decode_unknown_body);
    tcase_add_test(tc, test_msg_encode_rejects_missing_arrays);
    tcase_add_test(tc, test_msg_names);
    suite_add_tcase(s, tc);
    return s;
}
