// attention_rows.cuh: what the flash forwards of attention.cu and attention_wgmma.cu share about
// query rows: which keys a row sees, whether a key tile needs the mask, and the end of the
// forward (the row sums, then the output rows) from accumulators in the mma fragment layout (a
// thread holds rows lo and lo + 8; for n8 block t, O[4t], O[4t+1] of row lo at columns 8t + 2 tig,
// + 1, and O[4t+2], O[4t+3] of row lo + 8).
#pragma once

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
