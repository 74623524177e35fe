/* common/nn/npy.c — see npy.h. A small recursive-descent reader of the one
 * Python literal numpy writes: a dict of three keys whose values are a
 * string, a bool and a tuple of non-negative integers. Anything else is an
 * error naming the field; nothing is evaluated and nothing is allocated. */
#include "common/nn/npy.h"

#include <errno.h>
#include <stdarg.h>
#include <stdio.h>
#include <string.h>

static void s_err(char *err, size_t err_len, const char *fmt, ...) __attribute__((format(printf, 3, 4)));
static void s_err(char *err, size_t err_len, const char *fmt, ...) {
    if (!err || err_len == 0) return;
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(err, err_len, fmt, ap);
    va_end(ap);
}

size_t npy_dtype_size(npy_dtype_t t) {
    switch (t) {
    case NPY_DTYPE_U8: case NPY_DTYPE_I8: return 1;
    case NPY_DTYPE_I32: case NPY_DTYPE_F32: return 4;
    case NPY_DTYPE_I64: return 8;
    }
    return 0;
}

const char *npy_dtype_name(npy_dtype_t t) {
    switch (t) {
    case NPY_DTYPE_U8: return "uint8";
    case NPY_DTYPE_I8: return "int8";
    case NPY_DTYPE_I32: return "int32";
    case NPY_DTYPE_I64: return "int64";
    case NPY_DTYPE_F32: return "float32";
    }
    return "?";
}

int npy_parse_preamble(const uint8_t *p, size_t n, npy_header_t *h, size_t *dict_len, size_t *preamble_len,
                       char *err, size_t err_len) {
    static const uint8_t magic[NPY_MAGIC_LEN] = {0x93, 'N', 'U', 'M', 'P', 'Y'};
    if (n < NPY_MAGIC_LEN || memcmp(p, magic, NPY_MAGIC_LEN) != 0) {
        char seen[64] = "";
        for (size_t i = 0; i < n && i < NPY_MAGIC_LEN; i++)
            snprintf(seen + strlen(seen), sizeof seen - strlen(seen), "%s%02x", i ? " " : "", p[i]);
        s_err(err, err_len, "magic: expected 93 4e 55 4d 50 59 (\"\\x93NUMPY\"), found %s%s (not a .npy file; "
              "write it with numpy.save)", n ? seen : "an empty file", n && n < NPY_MAGIC_LEN ? " (file too short)" : "");
        return -EINVAL;
    }
    if (n < 8) {
        s_err(err, err_len, "version: the file ends inside the header (%zu bytes)", n);
        return -EINVAL;
    }
    h->major = p[6];
    h->minor = p[7];
    if ((h->major != 1 && h->major != 2) || h->minor != 0) {
        s_err(err, err_len, "version: %d.%d is not supported (1.0 or 2.0; numpy.save writes 1.0 unless the "
              "header is huge)", h->major, h->minor);
        return -EINVAL;
    }
    size_t need = h->major == 1 ? NPY_PREAMBLE_V1 : NPY_PREAMBLE_V2;
    if (n < need) {
        s_err(err, err_len, "header length: the file ends inside the header (%zu of %zu bytes)", n, need);
        return -EINVAL;
    }
    size_t len = h->major == 1 ? (size_t)p[8] | (size_t)p[9] << 8
                               : (size_t)p[8] | (size_t)p[9] << 8 | (size_t)p[10] << 16 | (size_t)p[11] << 24;
    if (len == 0 || len > NPY_MAX_DICT) {
        s_err(err, err_len, "header length: %zu bytes (expected 1 to %d)", len, NPY_MAX_DICT);
        return -EINVAL;
    }
    *dict_len = len;
    *preamble_len = need;
    h->data_offset = need + len;
    return 0;
}

/* ---- the dict ------------------------------------------------------------- */

typedef struct s_cur {
    const char *p, *end;
} s_cur_t;

static void s_ws(s_cur_t *c) {
    while (c->p < c->end && (*c->p == ' ' || *c->p == '\t' || *c->p == '\n' || *c->p == '\r')) c->p++;
}

static int s_peek(s_cur_t *c) {
    s_ws(c);
    return c->p < c->end ? (unsigned char)*c->p : -1;
}

/* A quoted string without escapes into out (NUL-terminated). */
static int s_string(s_cur_t *c, char *out, size_t len, const char *what, char *err, size_t err_len) {
    int q = s_peek(c);
    if (q != '\'' && q != '"') {
        s_err(err, err_len, "%s: expected a quoted string", what);
        return -EINVAL;
    }
    c->p++;
    size_t n = 0;
    while (c->p < c->end && *c->p != q) {
        if (*c->p == '\\' || (unsigned char)*c->p < 32 || (unsigned char)*c->p > 126) {
            s_err(err, err_len, "%s: unexpected character in a string", what);
            return -EINVAL;
        }
        if (n + 1 >= len) {
            s_err(err, err_len, "%s: string too long", what);
            return -EINVAL;
        }
        out[n++] = *c->p++;
    }
    if (c->p >= c->end) {
        s_err(err, err_len, "%s: unterminated string", what);
        return -EINVAL;
    }
    c->p++;
    out[n] = 0;
    return 0;
}

static int s_word(s_cur_t *c, const char *w) {
    size_t n = strlen(w);
    s_ws(c);
    if ((size_t)(c->end - c->p) >= n && memcmp(c->p, w, n) == 0) {
        c->p += n;
        return 1;
    }
    return 0;
}

static int s_descr(const char *d, npy_dtype_t *t, char *err, size_t err_len) {
    static const struct { const char *name; npy_dtype_t t; } known[] = {
        {"|u1", NPY_DTYPE_U8}, {"u1", NPY_DTYPE_U8}, {"<u1", NPY_DTYPE_U8}, {"|i1", NPY_DTYPE_I8},
        {"i1", NPY_DTYPE_I8},  {"<i1", NPY_DTYPE_I8}, {"<i4", NPY_DTYPE_I32}, {"<i8", NPY_DTYPE_I64},
        {"<f4", NPY_DTYPE_F32},
    };
    for (size_t i = 0; i < sizeof known / sizeof known[0]; i++)
        if (strcmp(d, known[i].name) == 0) {
            *t = known[i].t;
            return 0;
        }
    s_err(err, err_len, "descr: '%s' is not supported (%s); supported: '|u1' uint8, '|i1' int8, '<i4' int32, "
          "'<i8' int64, '<f4' float32: convert with arr.astype(numpy.float32) or arr.astype(numpy.int64)", d,
          d[0] == '>' ? "big-endian" : "another type");
    return -EINVAL;
}

static int s_shape(s_cur_t *c, npy_header_t *h, char *err, size_t err_len) {
    if (s_peek(c) != '(') {
        s_err(err, err_len, "shape: expected a tuple such as (60000, 28, 28)");
        return -EINVAL;
    }
    c->p++;
    h->ndim = 0;
    int64_t total = 1;
    int last_comma = 0;
    for (;;) {
        int ch = s_peek(c);
        if (ch == ')') {
            c->p++;
            if (h->ndim == 1 && !last_comma) { /* "(5)" is just 5 in Python */
                s_err(err, err_len, "shape: a one-dimensional shape is written (N,), with a comma");
                return -EINVAL;
            }
            return 0;
        }
        if (ch < '0' || ch > '9') {
            s_err(err, err_len, "shape: expected a non-negative integer or ')'");
            return -EINVAL;
        }
        int64_t v = 0;
        while (c->p < c->end && *c->p >= '0' && *c->p <= '9') {
            if (v > (INT64_MAX - 9) / 10) {
                s_err(err, err_len, "shape: dimension too large");
                return -EINVAL;
            }
            v = v * 10 + (*c->p++ - '0');
        }
        if (c->p < c->end && *c->p == 'L') c->p++; /* written by Python 2 */
        if (h->ndim == NPY_MAX_DIMS) {
            s_err(err, err_len, "shape: more than %d dimensions", NPY_MAX_DIMS);
            return -EINVAL;
        }
        if (v > 0 && total > INT64_MAX / 8 / v) {
            s_err(err, err_len, "shape: too many elements");
            return -EINVAL;
        }
        total *= v > 0 ? v : 1;
        h->shape[h->ndim++] = v;
        ch = s_peek(c);
        last_comma = ch == ',';
        if (last_comma) {
            c->p++;
        } else if (ch != ')') {
            s_err(err, err_len, "shape: expected ',' or ')' after a dimension");
            return -EINVAL;
        }
    }
}

int npy_parse_dict(const char *dict, size_t len, npy_header_t *h, char *err, size_t err_len) {
    s_cur_t c = {dict, dict + len};
    int have_descr = 0, have_fortran = 0, have_shape = 0;
    if (s_peek(&c) != '{') {
        s_err(err, err_len, "header: expected a dict starting with '{'");
        return -EINVAL;
    }
    c.p++;
    for (;;) {
        int ch = s_peek(&c);
        if (ch == '}') {
            c.p++;
            break;
        }
        char key[32];
        if (s_string(&c, key, sizeof key, "header key", err, err_len) < 0) return -EINVAL;
        if (s_peek(&c) != ':') {
            s_err(err, err_len, "%s: expected ':' after the key", key);
            return -EINVAL;
        }
        c.p++;
        if (strcmp(key, "descr") == 0) {
            char d[32];
            if (have_descr++) goto dup;
            if (s_string(&c, d, sizeof d, "descr", err, err_len) < 0 || s_descr(d, &h->dtype, err, err_len) < 0)
                return -EINVAL;
        } else if (strcmp(key, "fortran_order") == 0) {
            if (have_fortran++) goto dup;
            if (s_word(&c, "True")) {
                s_err(err, err_len, "fortran_order: True (column-major) is not supported: save a C-ordered "
                      "copy with numpy.save(path, numpy.ascontiguousarray(arr))");
                return -EINVAL;
            }
            if (!s_word(&c, "False")) {
                s_err(err, err_len, "fortran_order: expected True or False");
                return -EINVAL;
            }
        } else if (strcmp(key, "shape") == 0) {
            if (have_shape++) goto dup;
            if (s_shape(&c, h, err, err_len) < 0) return -EINVAL;
        } else {
            s_err(err, err_len, "header: unknown key '%s' (expected descr, fortran_order, shape)", key);
            return -EINVAL;
        }
        ch = s_peek(&c);
        if (ch == ',') {
            c.p++;
        } else if (ch != '}') {
            s_err(err, err_len, "%s: expected ',' or '}' after the value", key);
            return -EINVAL;
        }
        continue;
    dup:
        s_err(err, err_len, "%s: the key appears twice", key);
        return -EINVAL;
    }
    if (s_peek(&c) != -1) {
        s_err(err, err_len, "header: unexpected text after the dict");
        return -EINVAL;
    }
    if (!have_descr || !have_fortran || !have_shape) {
        s_err(err, err_len, "%s: missing from the header", !have_descr ? "descr" : !have_fortran ? "fortran_order" : "shape");
        return -EINVAL;
    }
    return 0;
}

int64_t npy_count(const npy_header_t *h) {
    int64_t n = 1;
    for (int d = 0; d < h->ndim; d++) n *= h->shape[d];
    return n;
}

void npy_shape_text(const npy_header_t *h, char *buf, size_t len) {
    if (!buf || !len) return;
    size_t used = 0;
    buf[0] = 0;
    used += (size_t)snprintf(buf, len, "(");
    for (int d = 0; d < h->ndim && used < len; d++)
        used += (size_t)snprintf(buf + used, len - used, "%s%lld", d ? ", " : "", (long long)h->shape[d]);
    if (used < len) snprintf(buf + used, len - used, "%s)", h->ndim == 1 ? "," : "");
}
