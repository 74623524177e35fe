/* common/kfac/kfac_linalg.c — packing, symmetrizing, finiteness, traces, the
 * factored-Tikhonov pi's and the Kronecker product identity. float32,
 * row-major, upper triangle authoritative (see kfac_linalg.h). */
#include "common/kfac/kfac_linalg.h"

#include <cblas.h>
#include <errno.h>
#include <math.h>
#include <stdint.h>
#include <string.h>

#include "common/base/log.h"

int kfac_linalg_pack_upper(const float *F, int n, float *packed) {
    if (!F || !packed || n <= 0) {
        log_error("kfac_linalg_pack_upper: bad arguments (n=%d)", n);
        return -EINVAL;
    }
    size_t k = 0;
    for (int i = 0; i < n; i++) {
        const float *row = F + (size_t)i * (size_t)n;
        for (int j = i; j < n; j++) packed[k++] = row[j];
    }
    return 0;
}

int kfac_linalg_unpack_upper(const float *packed, int n, float *F) {
    if (!F || !packed || n <= 0) {
        log_error("kfac_linalg_unpack_upper: bad arguments (n=%d)", n);
        return -EINVAL;
    }
    size_t k = 0;
    for (int i = 0; i < n; i++) {
        for (int j = i; j < n; j++) {
            float x = packed[k++];
            F[(size_t)i * (size_t)n + (size_t)j] = x;
            F[(size_t)j * (size_t)n + (size_t)i] = x;
        }
    }
    return 0;
}

/* Tile edge for the triangle mirror: a 32 x 32 tile of the source rows and
 * of the destination columns both stay in L1, so the strided writes hit cache. */
#define KFAC_LINALG_TILE 32

void kfac_linalg_symmetrize_upper(float *F, int n) {
    if (!F || n <= 0) return;
    const size_t N = (size_t)n;
    for (int ib = 0; ib < n; ib += KFAC_LINALG_TILE) {
        int ie = ib + KFAC_LINALG_TILE < n ? ib + KFAC_LINALG_TILE : n;
        for (int jb = ib; jb < n; jb += KFAC_LINALG_TILE) {
            int je = jb + KFAC_LINALG_TILE < n ? jb + KFAC_LINALG_TILE : n;
            for (int i = ib; i < ie; i++)
                for (int j = (jb > i + 1 ? jb : i + 1); j < je; j++)
                    F[(size_t)j * N + (size_t)i] = F[(size_t)i * N + (size_t)j];
        }
    }
}

void kfac_linalg_symmetrize_average(float *F, int n) {
    if (!F || n <= 0) return;
    for (int i = 0; i < n; i++) {
        for (int j = i + 1; j < n; j++) {
            float *u = &F[(size_t)i * (size_t)n + (size_t)j];
            float *l = &F[(size_t)j * (size_t)n + (size_t)i];
            float m = 0.5f * (*u + *l);
            *u = m;
            *l = m;
        }
    }
}

bool kfac_linalg_all_finite(const float *x, size_t n_elems) {
    if (n_elems == 0) return true;
    if (!x) return false;
    /* A float is NaN or +-Inf exactly when its exponent bits are all ones.
     * An integer OR-reduction vectorises (a float-sum trick would not,
     * without reassociation); scan in blocks so a bad value stops early. */
    const size_t block = 4096;
    for (size_t b = 0; b < n_elems; b += block) {
        size_t e = b + block < n_elems ? b + block : n_elems;
        uint32_t bad = 0;
        for (size_t i = b; i < e; i++) {
            uint32_t u;
            memcpy(&u, &x[i], sizeof u);
            bad |= (uint32_t)((u & 0x7f800000u) == 0x7f800000u);
        }
        if (bad) return false;
    }
    return true;
}

bool kfac_linalg_upper_finite(const float *F, int n) {
    if (n <= 0) return true;
    if (!F) return false;
    for (int i = 0; i < n; i++)
        if (!kfac_linalg_all_finite(F + (size_t)i * (size_t)n + (size_t)i, (size_t)(n - i)))
            return false;
    return true;
}

double kfac_linalg_trace(const float *F, int n) {
    double t = 0.0;
    if (!F) return n > 0 ? NAN : 0.0;
    for (int i = 0; i < n; i++) t += (double)F[(size_t)i * (size_t)n + (size_t)i];
    return t;
}

void kfac_linalg_add_diagonal(float *F, int n, float d) {
    if (!F) return;
    for (int i = 0; i < n; i++) F[(size_t)i * (size_t)n + (size_t)i] += d;
}

static bool s_positive_finite(double x) { return isfinite(x) && x > 0.0; }

float kfac_pi_from_norms2(double rA, double rG) {
    if (!s_positive_finite(rA) || !s_positive_finite(rG)) return 1.0f;
    double pi = sqrt(rA / rG);
    /* The float conversion may still overflow or underflow to 0. */
    float f = (float)pi;
    if (!(isfinite(f) && f > 0.0f)) return 1.0f;
    return f;
}

float kfac_pi_trace(const float *A, int nA, const float *G, int nG) {
    if (!A || !G || nA <= 0 || nG <= 0) return 1.0f;
    return kfac_pi_from_norms2(kfac_linalg_trace(A, nA) / nA, kfac_linalg_trace(G, nG) / nG);
}

void kfac_pi_from_norms3(const double r[3], float pi[3]) {
    pi[0] = pi[1] = pi[2] = 1.0f;
    if (!r) return;
    for (int i = 0; i < 3; i++)
        if (!s_positive_finite(r[i])) return;
    /* pi_i = r_i / geomean(r); logs avoid overflow of the product r_a r_b r_c
     * and equal Eq. 12: cbrt(r_a^2 / (r_b r_c)) = r_a / cbrt(r_a r_b r_c). */
    double lg = (log(r[0]) + log(r[1]) + log(r[2])) / 3.0;
    float out[3];
    for (int i = 0; i < 3; i++) {
        out[i] = (float)exp(log(r[i]) - lg);
        if (!(isfinite(out[i]) && out[i] > 0.0f)) return;
    }
    pi[0] = out[0];
    pi[1] = out[1];
    pi[2] = out[2];
}

int kfac_pi_trace3(const float *A, int nA, const float *B, int nB,
                   const float *C, int nC, float pi[3]) {
    if (!pi) {
        log_error("kfac_pi_trace3: pi is NULL");
        return -EINVAL;
    }
    pi[0] = pi[1] = pi[2] = 1.0f;
    if (!A || !B || !C || nA <= 0 || nB <= 0 || nC <= 0) {
        log_error("kfac_pi_trace3: bad factor (nA=%d nB=%d nC=%d)", nA, nB, nC);
        return -EINVAL;
    }
    double r[3] = {kfac_linalg_trace(A, nA) / nA, kfac_linalg_trace(B, nB) / nB,
                   kfac_linalg_trace(C, nC) / nC};
    kfac_pi_from_norms3(r, pi);
    return 0;
}

int kfac_linalg_kron_apply(const float *A, int ma, int na,
                           const float *B, int mb, int nb,
                           const float *C, float *out, float *work) {
    if (!A || !B || !C || !out || !work || ma <= 0 || na <= 0 || mb <= 0 || nb <= 0) {
        log_error("kfac_linalg_kron_apply: bad arguments");
        return -EINVAL;
    }
    /* work (nb, ma) = C (nb, na) * A^T (na, ma); row-major, A read transposed. */
    cblas_sgemm(CblasRowMajor, CblasNoTrans, CblasTrans, nb, ma, na,
                1.0f, C, na, A, na, 0.0f, work, ma);
    /* out (mb, ma) = B (mb, nb) * work (nb, ma); row-major. */
    cblas_sgemm(CblasRowMajor, CblasNoTrans, CblasNoTrans, mb, ma, nb,
                1.0f, B, nb, work, ma, 0.0f, out, ma);
    return 0;
}
