// attention_rows.cuh: what the flash forwards of attention.cu and attention_wgmma.cu share about
// query rows: which keys a row sees, whether a key tile needs the mask, and the end of the
// forward (the row sums, then the output rows) from accumulators in the mma fragment layout (a
// thread holds rows lo and lo + 8; for n8 block t, O[4t], O[4t+1] of row lo at columns 8t + 2 tig,
// + 1, and O[4t+2], O[4t+3] of row lo + 8).
#pragma once

#include "gpu_common.cuh" // ex2

// The keys a query at position p sees: [first, p], first = max(0, p - window + 1) with a window.
__device__ __forceinline__ int attn_first(int p, int window) {
    return window > 0 ? max(0, p - window + 1) : 0;
}

// Key `key` (of Tk) is visible from the query at position p.
__device__ __forceinline__ bool attn_visible(int key, int p, int Tk, int window) {
    return key < Tk && key <= p && key >= attn_first(p, window);
}

// Every row of a block (positions p0 .. p0 + rows - 1) sees every key of the tile k0 .. k0 + n - 1:
// the tile needs no mask.
__device__ __forceinline__ bool attn_tile_whole(int k0, int n, int p0, int rows, int Tk,
                                                int window) {
    return k0 + n - 1 <= p0 && k0 + n <= Tk && (window == 0 || k0 >= p0 + rows - window);
}

// The wgmma forwards' mask: in a tile of 8 NT keys from k0 (S in the layout above), the keys the
// thread's rows (positions p_lo, p_hi) do not see get -inf, unless every row of the block
// (p0 .. p0 + rows - 1) sees the whole tile.
template <int NT>
__device__ __forceinline__ void attn_mask_tile(float *S, int k0, int p0, int rows, int tig,
                                               int p_lo, int p_hi, int Tk, int window) {
    if (attn_tile_whole(k0, 8 * NT, p0, rows, Tk, window)) return;
#pragma unroll
    for (int t = 0; t < NT; t++)
#pragma unroll
        for (int e = 0; e < 4; e++) {
            const int key = k0 + t * 8 + 2 * tig + (e & 1), p = e < 2 ? p_lo : p_hi;
            if (!attn_visible(key, p, Tk, window)) S[4 * t + e] = -INFINITY;
        }
}

// The wgmma forwards' running maximum in base 2, rows lo and hi: mt, this thread's raw maxima of
// a tile, taken over the quad; m = max(m, mt scale_l2) (scale > 0); al the factor for what was
// summed before, with d1 and d2 rescaled by it; ms the value the tile's weights subtract. A row
// that has seen no key keeps m = -inf and uses 0 in its place (al = 1).
__device__ __forceinline__ void attn_max_step(float *mt, float *mrow, float scale_l2, float *al,
                                              float *ms, float *d1, float *d2) {
#pragma unroll
    for (int hr = 0; hr < 2; hr++) {
        mt[hr] = fmaxf(mt[hr], __shfl_xor_sync(0xffffffffu, mt[hr], 1));
        mt[hr] = fmaxf(mt[hr], __shfl_xor_sync(0xffffffffu, mt[hr], 2));
        const float mn = fmaxf(mrow[hr], mt[hr] * scale_l2);
        al[hr] = mn == -INFINITY ? 1.0f : ex2(mrow[hr] - mn);
        mrow[hr] = mn;
        ms[hr] = mn == -INFINITY ? 0.0f : mn;
        d1[hr] *= al[hr], d2[hr] *= al[hr];
    }
}

// The 2 NT values a thread holds of row half hr of a tile of 8 NT keys (x[4 t + 2 hr + e], t < NT,
// e < 2; the accumulator layout above), combined by op: pairwise (TREE), log2(2 NT) dependent
// steps instead of 2 NT - 1, since the row maxima and sums are on every tile's critical path and
// a scheduler has few warps to hide them with (softmax 16K on the H200: 2.20-2.31 ms against
// 2.41-2.56 in one run, docs/gpu-runs/ab-attn-2c8c32e.txt); in order otherwise, which
// attention_wgmma.cu's Parallax keeps (its tree form timed 3-9% slower in the same run). The tree
// is written out step by step: as a loop over the widths nvcc left it rolled at NT = 16, in local
// memory.
template <int NT, bool TREE, typename F>
__device__ __forceinline__ float attn_row_reduce(const float *x, int hr, F op) {
    static_assert(NT == 8 || NT == 16, "tiles of 64 or 128 keys");
    if constexpr (!TREE) {
        float a = x[2 * hr];
#pragma unroll
        for (int i = 1; i < 2 * NT; i++) a = op(a, x[4 * (i >> 1) + 2 * hr + (i & 1)]);
        return a;
    } else {
        float a[NT];
#pragma unroll
        for (int t = 0; t < NT; t++) a[t] = op(x[4 * t + 2 * hr], x[4 * t + 2 * hr + 1]);
        if constexpr (NT == 16) {
#pragma unroll
            for (int t = 0; t < 8; t++) a[t] = op(a[t], a[t + 8]);
        }
#pragma unroll
        for (int t = 0; t < 4; t++) a[t] = op(a[t], a[t + 4]);
        a[0] = op(a[0], a[2]), a[1] = op(a[1], a[3]);
        return op(a[0], a[1]);
    }
}
__device__ __forceinline__ float attn_max(float a, float b) {
    return fmaxf(a, b);
}
__device__ __forceinline__ float attn_add(float a, float b) {
    return a + b;
}

// d1, d2 [2] (rows lo, hi): this thread's partial sums, summed here over the 4 threads of the
// quad. O1, O2 [4 NO]: the accumulators. orow[hr]: the output row (NULL: past the end).
//   softmax   o = O1 / d1
//   parallax  o = vbar - (O2 / d1 - ubar vbar), vbar = O1 / d1, ubar = d2 / d1
// Rows that saw no key (d1 = 0) get 0.
template <bool PLX, int NO>
__device__ __forceinline__ void attn_store_rows(float *d1, float *d2, const float *O1,
                                                const float *O2, float *const orow[2], int tig) {
#pragma unroll
    for (int hr = 0; hr < 2; hr++) {
        d1[hr] += __shfl_xor_sync(0xffffffffu, d1[hr], 1);
        d1[hr] += __shfl_xor_sync(0xffffffffu, d1[hr], 2);
        if constexpr (PLX) {
            d2[hr] += __shfl_xor_sync(0xffffffffu, d2[hr], 1);
            d2[hr] += __shfl_xor_sync(0xffffffffu, d2[hr], 2);
        }
    }
#pragma unroll
    for (int hr = 0; hr < 2; hr++) {
        if (!orow[hr]) continue;
        const float inv = d1[hr] > 0.0f ? 1.0f / d1[hr] : 0.0f, ub = d2[hr] * inv;
#pragma unroll
        for (int t = 0; t < NO; t++) {
            float x0 = O1[4 * t + 2 * hr] * inv, x1 = O1[4 * t + 2 * hr + 1] * inv;
            if constexpr (PLX) {
                x0 = x0 - (O2[4 * t + 2 * hr] * inv - ub * x0);
                x1 = x1 - (O2[4 * t + 2 * hr + 1] * inv - ub * x1);
            }
            *reinterpret_cast<float2 *>(orow[hr] + t * 8 + 2 * tig) = make_float2(x0, x1);
        }
    }
}
