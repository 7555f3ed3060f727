// kata_feat.cuh: KATA's feature maps as the kernels read them (kata.cu, kata_delta.cu): the
// variant's map (kfeat, from mixers/kata.c's kata_variant_fmap), each feature's code, psi(x)_r from
// a code, and kappa(x, y) = <psi(x), psi(y)> from group dot products (psi never formed); and the
// 4 x 4 register tiles the state passes of both files multiply in.
#pragma once

#include <cuda_runtime.h>
#include <math.h>

#include "../mixers/kata.h"

#define KA_SQRT2 1.41421356237309504880f

struct kfeat {
    int kind;    // kata_feat_kind
    int d, M, E; // input width, groups, group width
    float s, rs; // scale and sqrt(scale)
};

// The CPU's feature map of the variant (mixers/kata.c), in the form the kernels read.
static inline kfeat kfeat_of(int variant, int dk, int groups, float scale) {
    const kata_fmap m = kata_variant_fmap(variant, dk, groups, scale);
    kfeat f;
    f.kind = m.kind, f.d = dk, f.M = m.groups, f.E = dk / m.groups;
    f.s = scale, f.rs = sqrtf(scale);
    return f;
}

static inline size_t kfeat_dim(const kfeat &f) {
    const kata_fmap m = {(kata_feat_kind)f.kind, f.d, f.M, f.s};
    return kata_fmap_dim(&m);
}

// Feature r's code: (m << 20) | (i << 10) | j for the PSD maps (group m, entry (i, j), i >= j, in
// svec order: the diagonal first, then the strictly lower entries row by row); r for the others.
static __global__ void kata_index_kernel(kfeat f, int D, int *idx) {
    const int r = blockIdx.x * blockDim.x + threadIdx.x;
    if (r >= D) return;
    if (f.kind != KATA_FEAT_PSD_CONCAT && f.kind != KATA_FEAT_PSD_SUM) {
        idx[r] = r;
        return;
    }
    const int P = f.E * (f.E + 1) / 2, m = r / P, l = r % P;
    int i, j;
    if (l < f.E) {
        i = j = l;
    } else {
        const int rr = l - f.E; // row a >= 1 holds rr in [a (a-1)/2, a (a+1)/2)
        int a = (int)((1.0 + sqrt(1.0 + 8.0 * (double)rr)) / 2.0);
        while (a > 1 && a * (a - 1) / 2 > rr) a--;
        while (a * (a + 1) / 2 <= rr) a++;
        i = a, j = rr - a * (a - 1) / 2;
    }
    idx[r] = (m << 20) | (i << 10) | j;
}

// psi(x)_r of the PSD concat map (group m, entry (i, j) of the code): kata_psi's first case, and
// DeltaKATA's whole map (kata_delta.cu calls it without kata_psi's switch).
__device__ __forceinline__ float kata_psi_concat(const kfeat &f, const float *x, int code) {
    const int m = code >> 20, i = (code >> 10) & 1023, j = code & 1023;
    const float *xm = x + m * f.E;
    return (i == j ? f.s : f.s * KA_SQRT2) * xm[i] * xm[j];
}

// psi(x)_r from x [d] (shared memory); xn = |x_{1:d-1}| for Lorentz.
__device__ __forceinline__ float kata_psi(const kfeat &f, const float *x, float xn, int code) {
    switch (f.kind) {
    case KATA_FEAT_PSD_CONCAT:
        return kata_psi_concat(f, x, code);
    case KATA_FEAT_PSD_SUM: {
        const int i = (code >> 10) & 1023, j = code & 1023;
        float acc = 0.0f;
        for (int m = 0; m < f.M; m++) acc += x[m * f.E + i] * x[m * f.E + j];
        return (i == j ? f.s : f.s * KA_SQRT2) * acc;
    }
    case KATA_FEAT_ORTHANT: {
        const float y = f.rs * x[code];
        return (y > 0.0f ? y : 0.0f) + KATA_ORTHANT_EPS;
    }
    case KATA_FEAT_LORENTZ: {
        if (code + 1 < f.d) return f.rs * x[code];
        const float xd = f.rs * x[f.d - 1];
        return f.rs * xn * (1.0f + xd * xd);
    }
    default:
        return f.rs * x[code];
    }
}

// kappa(x, y) = <psi(x), psi(y)> from group dot products (kata_fmap_kernel). x, y [d] with the
// strides sx, sy between consecutive entries.
__device__ __forceinline__ float kata_kappa(const kfeat &f, const float *x, const float *y) {
    switch (f.kind) {
    case KATA_FEAT_PSD_CONCAT: {
        float acc = 0.0f;
        for (int m = 0; m < f.M; m++) {
            float c = 0.0f;
            for (int i = 0; i < f.E; i++) c += x[m * f.E + i] * y[m * f.E + i];
            c *= f.s;
            acc += c * c;
        }
        return acc;
    }
    case KATA_FEAT_PSD_SUM: {
        float acc = 0.0f;
        for (int m = 0; m < f.M; m++)
            for (int n = 0; n < f.M; n++) {
                float c = 0.0f;
                for (int i = 0; i < f.E; i++) c += x[m * f.E + i] * y[n * f.E + i];
                c *= f.s;
                acc += c * c;
            }
        return acc;
    }
    case KATA_FEAT_ORTHANT: {
        float acc = 0.0f;
        for (int i = 0; i < f.d; i++) {
            const float a = f.rs * x[i], b = f.rs * y[i];
            acc += ((a > 0.0f ? a : 0.0f) + KATA_ORTHANT_EPS) *
                   ((b > 0.0f ? b : 0.0f) + KATA_ORTHANT_EPS);
        }
        return acc;
    }
    case KATA_FEAT_LORENTZ: {
        float xy = 0.0f, xx = 0.0f, yy = 0.0f;
        for (int i = 0; i + 1 < f.d; i++) xy += x[i] * y[i], xx += x[i] * x[i], yy += y[i] * y[i];
        const float a = x[f.d - 1], b = y[f.d - 1];
        return f.s * xy + f.s * sqrtf(xx) * sqrtf(yy) * (1.0f + f.s * a * a) * (1.0f + f.s * b * b);
    }
    default: {
        float acc = 0.0f;
        for (int i = 0; i < f.d; i++) acc += x[i] * y[i];
        return f.s * acc;
    }
    }
}

// acc[u][c] += a_u b_c: a 4 x 4 register tile of products (the state passes' reads and writes).
__device__ __forceinline__ void kata_outer4(float (&acc)[4][4], const float4 a, const float4 b) {
    const float x[4] = {a.x, a.y, a.z, a.w};
#pragma unroll
    for (int u = 0; u < 4; u++) {
        acc[u][0] += x[u] * b.x, acc[u][1] += x[u] * b.y;
        acc[u][2] += x[u] * b.z, acc[u][3] += x[u] * b.w;
    }
}

// A write's token loop over L tokens, token by token as the CPU's write_state: four state rows'
// cells acc (four value columns) += psi * value and their z sums zz += psi, with p the rows' psi
// values of token 0 in a token-major tile (row stride ldp) and v the columns' values of token 0
// (row stride ldv); both 16-byte aligned.
__device__ __forceinline__ void kata_write_tokens(float (&acc)[4][4], float (&zz)[4],
                                                  const float *p, int ldp, const float *v, int ldv,
                                                  int L) {
    for (int t = 0; t < L; t++) {
        const float4 p4 = *reinterpret_cast<const float4 *>(p + t * ldp);
        const float4 v4 = *reinterpret_cast<const float4 *>(v + t * ldv);
        kata_outer4(acc, p4, v4);
        zz[0] += p4.x, zz[1] += p4.y, zz[2] += p4.z, zz[3] += p4.w;
    }
}
