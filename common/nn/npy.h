/* common/nn/npy.h — the header of a NumPy .npy file, parsed with care.
 *
 * Format (numpy.lib.format, versions 1.0 and 2.0):
 *     "\x93NUMPY"  major  minor  HEADER_LEN  DICT
 * where HEADER_LEN is a little-endian uint16 (1.0) or uint32 (2.0) giving
 * the length of DICT, an ASCII Python literal such as
 *     {'descr': '<f4', 'fortran_order': False, 'shape': (60000, 28, 28), }
 * padded with spaces and ending in '\n'. The array's bytes follow, row-major
 * (C order) unless fortran_order is True, which this reader refuses.
 *
 * Accepted dtypes (descr): '|u1' (also 'u1', '<u1'), '|i1', '<i4', '<i8',
 * '<f4'. Big-endian and every other type are refused with a message that
 * says how to convert (arr.astype(...)).
 *
 * Errors: every function writes a one-line message into err (err_len bytes,
 * may be NULL/0) naming the field that is wrong ("magic", "version",
 * "header length", "descr", "fortran_order", "shape", a missing or unknown
 * key) and returns -EINVAL. The caller prefixes the file name. Nothing is
 * allocated; no function keeps a pointer to its input.
 */
#ifndef KFAC_NPY_H
#define KFAC_NPY_H

#include <stddef.h>
#include <stdint.h>

#define NPY_MAGIC_LEN 6         /* "\x93NUMPY" */
#define NPY_PREAMBLE_V1 10      /* magic + 2 version bytes + uint16 length */
#define NPY_PREAMBLE_V2 12      /* magic + 2 version bytes + uint32 length */
#define NPY_MAX_DICT 65536      /* longest DICT accepted (numpy writes < 200 bytes) */
#define NPY_MAX_DIMS 8

typedef enum {
    NPY_DTYPE_U8 = 0, /* '|u1' */
    NPY_DTYPE_I8,     /* '|i1' */
    NPY_DTYPE_I32,    /* '<i4' */
    NPY_DTYPE_I64,    /* '<i8' */
    NPY_DTYPE_F32,    /* '<f4' */
} npy_dtype_t;

typedef struct npy_header {
    int major, minor;          /* 1.0 or 2.0 */
    npy_dtype_t dtype;
    int ndim;                  /* 0 ..NPY_MAX_DIMS (0: a scalar, shape ()) */
    int64_t shape[NPY_MAX_DIMS];
    size_t data_offset;        /* bytes before the array: preamble + DICT */
} npy_header_t;

/* Bytes per element of a dtype (1, 4 or 8). */
size_t npy_dtype_size(npy_dtype_t t);

/* Name of a dtype as numpy spells it ("uint8", "int32", "float32", ...). */
const char *npy_dtype_name(npy_dtype_t t);

/* The fixed part of the file: p holds the first n bytes (n >= 8 to decide
 * the version; the whole preamble is NPY_PREAMBLE_V1 or _V2 bytes). On
 * success fills h->major, h->minor, *dict_len and *preamble_len (10 or 12)
 * and returns 0. -EINVAL for a wrong magic (with the bytes found), a version
 * other than 1.0 and 2.0, a short preamble, or a DICT longer than
 * NPY_MAX_DICT. */
int npy_parse_preamble(const uint8_t *p, size_t n, npy_header_t *h, size_t *dict_len, size_t *preamble_len,
                       char *err, size_t err_len);

/* Parse DICT (len bytes, not NUL-terminated): exactly the keys 'descr',
 * 'fortran_order' and 'shape', each once, in any order; a trailing comma
 * and trailing spaces/newline allowed. Fills h->dtype, h->ndim and h->shape
 * (every dimension >= 0, their product at most INT64_MAX / 8). Returns 0 or
 * -EINVAL naming the field. */
int npy_parse_dict(const char *dict, size_t len, npy_header_t *h, char *err, size_t err_len);

/* Elements in the array (product of the shape; 1 for a scalar). */
int64_t npy_count(const npy_header_t *h);

/* The shape as text, "(60000, 28, 28)", into buf. */
void npy_shape_text(const npy_header_t *h, char *buf, size_t len);

#endif
