// kata_tc.cu: KATA's chunked form on tensor cores (bf16 inputs, fp32 accumulators) for the PSD
// concat maps (m1, mg: kappa = sum_m (s q_m.k_m)^2), dk in {64, 128}, group width E a multiple of
// 16, dv in {64, 128}. kata.cu's gpu_kata_chunked takes this path for bf16 inputs unless
// MIXSCOPE_KATA_TC=0; tests/gpu checks it against the CPU like every other form.
//
// Features. psi(x) = svec(x_m x_m^T) packs each group's entries (i >= j) with weights s on the
// diagonal and s sqrt2 below. Here the features are 8 x 8 blocks (m, I, J), J <= I, of each group's
// x_m x_m^T: a tile of 64 features, psi_tile(x)[a 8 + b] = x_m[8 I + a] x_m[8 J + b], unweighted,
// so that a tile needs 16 entries of x and a warp's product is a plain matrix product. A diagonal
// block keeps both (a, b) and (b, a), each counted once with weight s^2 on the read; a block
// below the diagonal counts twice: weight 2 s^2. The state in this basis, S_int = sum_s
// psi_tile(k_s) v_s^T and z_int = sum_s psi_tile(k_s), is the packed state divided by the packed
// weight (s or s sqrt2), entry by entry, so it is converted on the way in and out. z and the
// read's denominators run on the CUDA cores in fp32 beside the products (from the feature map's
// fp32 values, as it is built).
//
// Three kernels, in order (time cut into chunks of CL tokens, CL a multiple of 128):
//   kt_state  block (two tiles, head): S_int [128 features, dv] in registers from the first token
//             to the last, 64 tokens a step: S_int += psi_tile(K)^T V (mma.sync, psi_tile(K)
//             built in shared memory from the tiles' 32 key columns), z_int in per-thread shares.
//             At the start of each chunk the exclusive prefixes go to Sc [chunk][head][feature][dv]
//             (bf16) and Zc [chunk][head][feature] (fp32); at the end the state goes back to the
//             packed layout.
//   kt_read   block (128 tokens, head): o = psi_w(Q) Sc[chunk], den = psi_w(Q) Zc[chunk] over
//             every tile (psi_w: the tile's read weight folded in), both written.
//   kt_local  block (64 queries, head): the keys of the query's own chunk up to itself, as a
//             flash pass without a maximum: kappa = sum_m (s Q_m K_m^T)^2 (masked), den += its
//             row sums, O += kappa V; then o = (o + O) / max(den + row sums, eps). On sm_90
//             with dv = 128 kata_tc_wgmma.cu's kt_local_wgmma runs instead (MIXSCOPE_KATA_LOCAL=0
//             keeps this one).
// The chunked algebra is spec kata-parallax.md §A.7 with chunk CL: exclusive prefixes built
// directly (never inclusive minus own), chunk-local terms exact in the products' rounding.
#include <cuda_bf16.h>
#include <cuda_runtime.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "../mixers/kata.h"
#include "gpu.h"
#include "gpu_common.cuh"
#include "kata_feat.cuh"
#include "kata_tc.cuh"
#include "kata_tc_shared.cuh"
#include "mma.cuh"

// A warp takes NW = dv / 16 n8 blocks of value columns (half of them), in shared rows of
// LDV = dv + 8 (an odd number of 16-byte units: ldmatrix's eight rows fall in distinct banks), and
// two m16 blocks: each B fragment feeds two products. z rides beside on the CUDA cores, in fp32.
template <int DV> struct kt_cols { static constexpr int NW = DV / 16, LDV = DV + 8; };

// acc[m][j] += A_m B_j over one k16 block: A_m (m < 2) in registers, B_j the n8 block of columns
// 8 j past the lane's column of a K-major shared tile: b is the lane's ldmatrix address (row
// k0 + (lane & 15), column c0 + 8 (lane >> 4)), every other load an immediate offset from it.
template <int NW>
__device__ __forceinline__ void kt_mma_k16(float (&acc)[2][NW][4], const uint32_t (&af)[2][4],
                                           unsigned b) {
#pragma unroll
    for (int j = 0; j < NW; j += 2) {
        uint32_t bfr[4];
        ldsm_x4_trans(bfr, b + 16 * j);
#pragma unroll
        for (int m = 0; m < 2; m++) {
            mma_bf16(acc[m][j], af[m], bfr[0], bfr[1]);
            mma_bf16(acc[m][j + 1], af[m], bfr[2], bfr[3]);
        }
    }
}

// ---------------------------------------------------------------- kt_state

// grid (ceil(ntile / 2), B H), 256 threads: warp w holds features 32 ((w / 2) % 2) .. + 32 of
// local tile w / 4 and half of the value columns (w % 2); z (psi's column sums) in each thread's
// share (kt_z_sum). Shared: the key columns of two stages [2][KT_S][KT_LK], V of two stages
// [2][KT_S][LDV], psi_tile(K) [KT_S][2 KT_F + 8], z's sums [8][2][KT_F] (fp32).
template <int DV> __global__ void __launch_bounds__(256, 2) kt_state_kernel(kt_args a) {
    using CC = kt_cols<DV>;
    constexpr int NW = CC::NW, LDV = CC::LDV, LDP = 2 * KT_F + 8;
    extern __shared__ __align__(16) unsigned char kt_sm[];
    bf16_t *sK = (bf16_t *)kt_sm;       // [2][KT_S][KT_LK]
    bf16_t *sV = sK + 2 * KT_S * KT_LK; // [2][KT_S][LDV]
    bf16_t *sP = sV + 2 * KT_S * LDV;   // [KT_S][LDP]
    float *sRed = (float *)(sP + KT_S * LDP);
    const int tid = threadIdx.x, lane = tid & 31, w = tid >> 5, g = lane >> 2, tg = lane & 3;
    const int n = blockIdx.y, b = n / a.H, h = n % a.H, N = a.B * a.H;
    const int tile0 = 2 * blockIdx.x, tl = w >> 2, fr0 = ((w >> 1) & 1) * 32, c0 = (w & 1) * NW * 8;
    const bool valid1 = tile0 + 1 < a.ntile, mine = tl == 0 || valid1;
    const kt_tile ti0 = kt_tile_of(tile0, a.nb), ti1 = kt_tile_of(valid1 ? tile0 + 1 : tile0, a.nb);
    float acc[2][NW][4], zp[2][8];
    {
        // the state in (kt_s_in, kt_z_in)
        const kt_tile my = tl ? ti1 : ti0;
#pragma unroll
        for (int m = 0; m < 2; m++)
#pragma unroll
            for (int j = 0; j < NW; j++)
#pragma unroll
                for (int e = 0; e < 4; e++)
                    acc[m][j][e] = kt_s_in<DV>(a, n, my, fr0 + 16 * m + g + (e >> 1) * 8,
                                               c0 + 8 * j + 2 * tg + (e & 1), mine);
        kt_z_in(a, n, ti0, ti1, valid1, tid, zp);
    }
    // this thread's key chunk (kt_key_off) and value chunks (tokens tid / (DV / 8) + 256 u /
    // (DV / 8), 8 columns): offsets from the row of token 0 of sequence b, head h
    const size_t koff = kt_key_off(a, b, h, tid, ti0, ti1);
    const size_t voff = ((size_t)b * a.T * a.H + h) * DV + (tid % (DV / 8)) * 8;
    auto issue = [&](int step, int st) {
        const int t0 = step * KT_S;
        kt_key_issue(a, sK, koff, tid, t0, st);
#pragma unroll
        for (int u = 0; u < KT_S * DV / 8 / 256; u++) {
            const int tok = (tid + 256 * u) / (DV / 8), t = t0 + tok;
            const bool ok = t < a.T;
            cp_async16_zfill(sV + (st * KT_S + tok) * LDV + (tid % (DV / 8)) * 8,
                             a.v + voff + (size_t)(ok ? t : 0) * a.H * DV, ok);
        }
        cp_async_commit();
    };
    // per-lane bases: psi's source (key row of token tid / 8, entry a = tid % 8) and destination,
    // the A fragments' ldmatrix address (psi^T: row (q4 / 2) 8 + r8 of a k16 block, features
    // fr0 + (q4 % 2) 8 of the warp's tile) and the B fragments' (V: row lane % 16, column
    // c0 + 8 (lane / 16))
    const int q4 = lane >> 3, r8 = lane & 7;
    const bf16_t *kp = sK + (tid >> 3) * KT_LK + (tid & 7);
    bf16_t *pp = sP + (tid >> 3) * LDP + (tid & 7) * 8;
    const unsigned av = smem_u32(sP + ((q4 >> 1) * 8 + r8) * LDP + tl * KT_F + fr0 + (q4 & 1) * 8);
    const unsigned bv = smem_u32(sV + (lane & 15) * LDV + c0 + (lane >> 4) * 8);
    const int nsteps = (a.T + KT_S - 1) / KT_S;
    issue(0, 0);
    for (int step = 0; step < nsteps; step++) {
        const int st = step & 1, t0 = step * KT_S;
        cp_async_wait<0>();
        __syncthreads(); // stage st landed; the previous step is done with sP and stage st ^ 1
        if (step + 1 < nsteps) issue(step + 1, st ^ 1);
        if (t0 % a.CL == 0) { // the exclusive prefix of chunk t0 / CL (every thread: kt_z_sum)
            const size_t c = (size_t)(t0 / a.CL) * N + n;
            kt_z_prefix(a, c, tile0, valid1, tid, kt_z_sum(zp, sRed, tid));
            if (mine) {
                bf16_t *Sc = a.Sc + ((c * a.ntile + tile0 + tl) * KT_F) * DV;
#pragma unroll
                for (int m = 0; m < 2; m++)
#pragma unroll
                    for (int j = 0; j < NW; j++) {
                        const int col = c0 + 8 * j + 2 * tg, fr = fr0 + 16 * m + g;
                        *reinterpret_cast<uint32_t *>(Sc + (size_t)fr * DV + col) =
                            pack_bf16(acc[m][j][0], acc[m][j][1]);
                        *reinterpret_cast<uint32_t *>(Sc + (size_t)(fr + 8) * DV + col) =
                            pack_bf16(acc[m][j][2], acc[m][j][3]);
                    }
            }
        }
        // psi_tile(K): items (local tile u / 2, token tid / 8 + 32 (u % 2), a = tid % 8) -> 8
        // products each, their fp32 values added to z's shares
        const bf16_t *sKs = kp + st * KT_S * KT_LK;
#pragma unroll
        for (int u = 0; u < 4; u++) {
            const bf16_t *row = sKs + (u & 1) * 32 * KT_LK + (u >> 1) * 16;
            const uint4 y = *reinterpret_cast<const uint4 *>(row + 8 - (tid & 7));
            float p[8];
            *reinterpret_cast<uint4 *>(pp + (u & 1) * 32 * LDP + (u >> 1) * KT_F) =
                kt_psi8(__bfloat162float(row[0]), y, 1.0f, p);
#pragma unroll
            for (int bb = 0; bb < 8; bb++) zp[u >> 1][bb] += p[bb];
        }
        __syncthreads();
        const unsigned bst = bv + st * KT_S * LDV * 2;
#pragma unroll
        for (int kk = 0; kk < KT_S / 16; kk++) {
            uint32_t af[2][4];
#pragma unroll
            for (int m = 0; m < 2; m++) ldsm_x4_trans(af[m], av + kk * 16 * LDP * 2 + m * 32);
            kt_mma_k16<NW>(acc, af, bst + kk * 16 * LDV * 2);
        }
    }
    // the state out, packed (the tiles found again: nothing of them stays live through the loop)
    kt_z_out(a, n, tile0, valid1, tid, kt_z_sum(zp, sRed, tid));
    if (!a.S || !mine) return;
    const kt_tile mo = kt_tile_of(tile0 + tl, a.nb);
#pragma unroll
    for (int m = 0; m < 2; m++)
#pragma unroll
        for (int j = 0; j < NW; j++)
#pragma unroll
            for (int e = 0; e < 4; e++)
                kt_s_out<DV>(a, n, mo, fr0 + 16 * m + g + (e >> 1) * 8,
                             c0 + 8 * j + 2 * tg + (e & 1), acc[m][j][e]);
}

// ---------------------------------------------------------------- kt_read

// grid (ceil(T / KT_R), B H), 256 threads: warp w reads tokens 32 (w / 2) .. + 32 of the block
// into half of the value columns (w % 2); den on the CUDA cores: thread tid's share for tokens
// tid / 8 + 32 u (u < 4), entries 8 (tid % 8) .. + 8 of each tile, added up over the 8 threads of a
// token at the end. Shared: Q [KT_R][dk + 8], psi_w(Q) [KT_R][KT_F + 8], Sc tiles [2][KT_F][LDV],
// Zc tiles [2][KT_F] (fp32).
template <int DK, int DV> __global__ void __launch_bounds__(256, 2) kt_read_kernel(kt_args a) {
    using CC = kt_cols<DV>;
    constexpr int NW = CC::NW, LDV = CC::LDV, LDP = KT_F + 8;
    constexpr int ldq = DK + 8;
    extern __shared__ __align__(16) unsigned char kt_sm[];
    bf16_t *sQ = (bf16_t *)kt_sm;               // [KT_R][ldq]
    bf16_t *sP = sQ + KT_R * ldq;               // [KT_R][LDP]
    bf16_t *sS = sP + KT_R * LDP;               // [2][KT_F][LDV]
    float *sZ = (float *)(sS + 2 * KT_F * LDV); // [2][KT_F]
    const int tid = threadIdx.x, lane = tid & 31, w = tid >> 5, g = lane >> 2, tg = lane & 3;
    const int n = blockIdx.y, b = n / a.H, h = n % a.H, N = a.B * a.H, t0 = blockIdx.x * KT_R;
    const int tq = (w >> 1) * 32, c0 = (w & 1) * NW * 8;
    const size_t cn = (size_t)(t0 / a.CL) * N + n;
    const bf16_t *Sc = a.Sc + cn * a.ntile * KT_F * DV;
    const float *Zc = a.Zc + cn * a.ntile * KT_F;
    kt_load_q<DK>(a, sQ, b, h, t0, tid);
    auto issue = [&](int tile, int st) {
        const bf16_t *src = Sc + (size_t)tile * KT_F * DV;
        bf16_t *dst = sS + st * KT_F * LDV;
        for (int x = tid; x < KT_F * (DV / 8); x += 256) {
            const int row = x / (DV / 8), c8 = x % (DV / 8);
            cp_async16(dst + row * LDV + c8 * 8, src + row * DV + c8 * 8);
        }
        if (tid < KT_F / 4)
            cp_async16(sZ + st * KT_F + 4 * tid, Zc + (size_t)tile * KT_F + 4 * tid);
        cp_async_commit();
    };
    issue(0, 0);
    float acc[2][NW][4], dp[4] = {0.0f, 0.0f, 0.0f, 0.0f};
#pragma unroll
    for (int m = 0; m < 2; m++)
#pragma unroll
        for (int j = 0; j < NW; j++)
            acc[m][j][0] = acc[m][j][1] = acc[m][j][2] = acc[m][j][3] = 0.0f;
    kt_tile ti = kt_tile_of(0, a.nb);
    const float s2 = a.s * a.s;
    // per-lane bases: psi's items (token tid / 8 + 32 u, entry a = tid % 8), the A fragments'
    // ldmatrix address (row tq + lane % 16, column 8 (lane / 16)) and the B fragments' (Sc: row
    // lane % 16, column c0 + 8 (lane / 16))
    const bf16_t *qp = sQ + (tid >> 3) * ldq;
    bf16_t *pp = sP + (tid >> 3) * LDP + (tid & 7) * 8;
    const unsigned av = smem_u32(sP + (tq + (lane & 15)) * LDP + (lane >> 4) * 8);
    const unsigned bv = smem_u32(sS + (lane & 15) * LDV + c0 + (lane >> 4) * 8);
    for (int tile = 0; tile < a.ntile; tile++, kt_tile_next(ti, a.nb)) {
        const int st = tile & 1;
        cp_async_wait<0>();
        __syncthreads(); // Sc tile (and Q) landed; the previous tile is done with sP and st ^ 1
        if (tile + 1 < a.ntile) issue(tile + 1, st ^ 1);
        const float wgt = ti.I == ti.J ? s2 : 2.0f * s2;
        const int ci = ti.m * a.E + 8 * ti.I + (tid & 7), cj = ti.m * a.E + 8 * ti.J;
        const float4 z0 = *reinterpret_cast<const float4 *>(sZ + st * KT_F + (tid & 7) * 8);
        const float4 z1 = *reinterpret_cast<const float4 *>(sZ + st * KT_F + (tid & 7) * 8 + 4);
        const float zz[8] = {z0.x, z0.y, z0.z, z0.w, z1.x, z1.y, z1.z, z1.w};
#pragma unroll
        for (int u = 0; u < 4; u++) {
            const bf16_t *row = qp + u * 32 * ldq;
            const uint4 y = *reinterpret_cast<const uint4 *>(row + cj);
            float p[8];
            *reinterpret_cast<uint4 *>(pp + u * 32 * LDP) =
                kt_psi8(__bfloat162float(row[ci]), y, wgt, p);
#pragma unroll
            for (int bb = 0; bb < 8; bb++) dp[u] += p[bb] * zz[bb];
        }
        __syncthreads();
        const unsigned bst = bv + st * KT_F * LDV * 2;
#pragma unroll
        for (int kk = 0; kk < KT_F / 16; kk++) {
            uint32_t af[2][4];
#pragma unroll
            for (int m = 0; m < 2; m++) ldsm_x4(af[m], av + m * 16 * LDP * 2 + kk * 32);
            kt_mma_k16<NW>(acc, af, bst + kk * 16 * LDV * 2);
        }
    }
    kt_den_out(a, dp, b, h, t0, tid);
#pragma unroll
    for (int m = 0; m < 2; m++)
#pragma unroll
        for (int half = 0; half < 2; half++) {
            const int t = t0 + tq + 16 * m + g + 8 * half;
            if (t >= a.T) continue;
            const size_t row = ((size_t)b * a.T + t) * a.H + h;
#pragma unroll
            for (int j = 0; j < NW; j++)
                *reinterpret_cast<float2 *>(a.o + row * DV + c0 + 8 * j + 2 * tg) =
                    make_float2(acc[m][j][2 * half], acc[m][j][2 * half + 1]);
        }
}

// ---------------------------------------------------------------- kt_local

// grid (ceil(T / KT_L), B H), 128 threads: warp w owns queries 16 w .. + 16 of the block. The keys
// of the block's chunk from its first token to the block's last, 64 at a time (two stages).
// Shared: Q [KT_L][DK + 8] (then in registers), K [2][64][DK + 8], V [2][64][DV + 8].
template <int DK, int DV> __global__ void __launch_bounds__(128) kt_local_kernel(kt_args a) {
    constexpr int LDK = DK + 8, LDV = DV + 8, NO = DV / 8;
    extern __shared__ __align__(16) unsigned char kt_sm[];
    bf16_t *sQ = (bf16_t *)kt_sm;   // [KT_L][LDK]
    bf16_t *sK = sQ + KT_L * LDK;   // [2][64][LDK]
    bf16_t *sV = sK + 2 * 64 * LDK; // [2][64][LDV]
    const int tid = threadIdx.x, lane = tid & 31, w = tid >> 5, g = lane >> 2, tg = lane & 3;
    const int n = blockIdx.y, b = n / a.H, h = n % a.H, q0 = blockIdx.x * KT_L;
    const size_t tokk = (size_t)a.H * DK, tokv = (size_t)a.H * DV;
    const bf16_t *qb = a.q + (size_t)b * a.T * tokk + (size_t)h * DK;
    const bf16_t *kb = a.k + (size_t)b * a.T * tokk + (size_t)h * DK;
    const bf16_t *vb = a.v + (size_t)b * a.T * tokv + (size_t)h * DV;
    for (int x = tid; x < KT_L * DK / 8; x += 128) {
        const int tok = x / (DK / 8), c8 = x % (DK / 8), t = q0 + tok;
        const bool ok = t < a.T;
        cp_async16_zfill(sQ + tok * LDK + c8 * 8, qb + (size_t)(ok ? t : q0) * tokk + c8 * 8, ok);
    }
    const int kfirst = q0 / a.CL * a.CL;
    auto issue = [&](int k0, int st) {
        for (int x = tid; x < 64 * DK / 8; x += 128) {
            const int tok = x / (DK / 8), c8 = x % (DK / 8), t = k0 + tok;
            const bool ok = t < a.T;
            cp_async16_zfill(sK + (st * 64 + tok) * LDK + c8 * 8,
                             kb + (size_t)(ok ? t : k0) * tokk + c8 * 8, ok);
        }
        for (int x = tid; x < 64 * DV / 8; x += 128) {
            const int tok = x / (DV / 8), c8 = x % (DV / 8), t = k0 + tok;
            const bool ok = t < a.T;
            cp_async16_zfill(sV + (st * 64 + tok) * LDV + c8 * 8,
                             vb + (size_t)(ok ? t : k0) * tokv + c8 * 8, ok);
        }
        cp_async_commit();
    };
    issue(kfirst, 0);
    // per-lane ldmatrix addresses: K as B of two key blocks (frag_b_nk), V as B (frag_a)
    const unsigned bk = smem_u32(sK + ((lane >> 4) * 8 + (lane & 7)) * LDK + ((lane >> 3) & 1) * 8);
    const unsigned bvv = smem_u32(sV + (lane & 15) * LDV + (lane >> 4) * 8);
    uint32_t qf[DK / 16][4];
    float accO[NO][4], dsum[2] = {0.0f, 0.0f};
#pragma unroll
    for (int nt = 0; nt < NO; nt++) accO[nt][0] = accO[nt][1] = accO[nt][2] = accO[nt][3] = 0.0f;
    for (int k0 = kfirst, it = 0; k0 <= q0; k0 += 64, it++) {
        const int st = it & 1;
        cp_async_wait<0>();
        __syncthreads(); // K, V (and Q) landed; the previous tile is done with stage st ^ 1
        if (it == 0)
#pragma unroll
            for (int kk = 0; kk < DK / 16; kk++)
                ldmatrix_x4(qf[kk], frag_a(sQ, LDK, w * 16, kk * 16, lane));
        if (k0 + 64 <= q0) issue(k0 + 64, st ^ 1);
        const unsigned bks = bk + st * 64 * LDK * 2, bvs = bvv + st * 64 * LDV * 2;
        float kap[8][4];
#pragma unroll
        for (int nt = 0; nt < 8; nt++) kap[nt][0] = kap[nt][1] = kap[nt][2] = kap[nt][3] = 0.0f;
        for (int m = 0; m < a.M; m++) {
            float sc[8][4];
#pragma unroll
            for (int nt = 0; nt < 8; nt++) sc[nt][0] = sc[nt][1] = sc[nt][2] = sc[nt][3] = 0.0f;
            const int kb0 = m * a.E / 16, kb1 = kb0 + a.E / 16;
#pragma unroll
            for (int kk = 0; kk < DK / 16; kk++) {
                if (kk < kb0 || kk >= kb1) continue;
#pragma unroll
                for (int np = 0; np < 4; np++) {
                    uint32_t bfr[4];
                    ldsm_x4(bfr, bks + np * 16 * LDK * 2 + kk * 32);
                    mma_bf16(sc[2 * np], qf[kk], bfr[0], bfr[1]);
                    mma_bf16(sc[2 * np + 1], qf[kk], bfr[2], bfr[3]);
                }
            }
#pragma unroll
            for (int nt = 0; nt < 8; nt++)
#pragma unroll
                for (int e = 0; e < 4; e++) {
                    const float c = a.s * sc[nt][e];
                    kap[nt][e] += c * c;
                }
        }
        if (k0 == q0) // the diagonal tile: keys after the query count nothing
#pragma unroll
            for (int nt = 0; nt < 8; nt++)
#pragma unroll
                for (int e = 0; e < 4; e++)
                    if (nt * 8 + 2 * tg + (e & 1) > w * 16 + g + (e >> 1) * 8) kap[nt][e] = 0.0f;
#pragma unroll
        for (int nt = 0; nt < 8; nt++) {
            dsum[0] += kap[nt][0] + kap[nt][1];
            dsum[1] += kap[nt][2] + kap[nt][3];
        }
#pragma unroll
        for (int kk = 0; kk < 4; kk++) {
            const uint32_t pa[4] = {pack_bf16(kap[2 * kk][0], kap[2 * kk][1]),
                                    pack_bf16(kap[2 * kk][2], kap[2 * kk][3]),
                                    pack_bf16(kap[2 * kk + 1][0], kap[2 * kk + 1][1]),
                                    pack_bf16(kap[2 * kk + 1][2], kap[2 * kk + 1][3])};
#pragma unroll
            for (int np = 0; np < NO / 2; np++) {
                uint32_t bfr[4];
                ldsm_x4_trans(bfr, bvs + kk * 16 * LDV * 2 + np * 32);
                mma_bf16(accO[2 * np], pa, bfr[0], bfr[1]);
                mma_bf16(accO[2 * np + 1], pa, bfr[2], bfr[3]);
            }
        }
    }
    kt_local_out<DV>(a, b, h, q0 + w * 16 + g, tg, dsum, &accO[0][0]);
}

// ---------------------------------------------------------------- host side

// The chunk length: MIXSCOPE_KATA_CL (a benchmark knob, a multiple of 128 from 256), else 1024.
// Longer chunks trade the prefixes' bytes for the local pass's work: m1 at 128 K tokens (H200,
// wgmma passes, fa761de) took 31.5-31.8 ms at 1024 (state 16.7-17.1, read 11.5-11.7, local
// 3.2), 32.6-32.9 at 2048 (15.5, 11.6, 5.6); with mma.sync 42.9 / 43.6-44.1 / 43.9-44.1 at
// 1024 / 2048 / 512 (7030ee9).
static int kt_chunk(void) {
    static int cl = 0;
    if (!cl) {
        const char *s = getenv("MIXSCOPE_KATA_CL");
        const int v = s ? atoi(s) : 0;
        cl = v >= 256 && v % 128 == 0 ? v : 1024;
    }
    return cl;
}

static int kt_groups(int variant, int dk, int groups) {
    const kata_fmap m = kata_variant_fmap(variant, dk, groups, 1.0f);
    return m.kind == KATA_FEAT_PSD_CONCAT ? m.groups : 0;
}

extern "C" int kata_tc_supported(int T, int dk, int dv, int variant, int groups, float scale) {
    const char *s = getenv("MIXSCOPE_KATA_TC");
    if (s && !strcmp(s, "0")) return 0;
    if (variant == KATA_DELTA || T < KT_S || !(scale > 0.0f)) return 0;
    const int M = kt_groups(variant, dk, groups);
    return M > 0 && (dk == 64 || dk == 128) && dk % M == 0 && (dk / M) % 16 == 0 &&
           (dv == 64 || dv == 128);
}

static int kt_ntile(int dk, int M) {
    const int nb = dk / M / 8;
    return M * nb * (nb + 1) / 2;
}

extern "C" size_t kata_tc_scratch_bytes(int B, int T, int H, int dk, int dv, int variant,
                                        int groups) {
    if (!kata_tc_supported(T, dk, dv, variant, groups, 1.0f)) return 0;
    const int M = kt_groups(variant, dk, groups), CL = kt_chunk();
    const size_t nC = (size_t)(T + CL - 1) / CL;
    const size_t feats = nC * B * H * kt_ntile(dk, M) * KT_F;
    return feats * dv * sizeof(bf16_t) + feats * sizeof(float) + 512;
}

template <int DK, int DV> static int kt_launch(const kt_args &a, cudaStream_t st, err *e) {
    const int N = a.B * a.H;
    constexpr int LDV = kt_cols<DV>::LDV;
    const size_t sm1 =
        (2 * KT_S * KT_LK + 2 * KT_S * LDV + KT_S * (2 * KT_F + 8)) * 2 + 8 * 2 * KT_F * 4;
    const size_t sm2 = (KT_R * (DK + 8) + KT_R * (KT_F + 8) + 2 * KT_F * LDV) * 2 + 2 * KT_F * 4;
    const size_t sm3 = (KT_L * (DK + 8) + 2 * 64 * (DK + 8) + 2 * 64 * (DV + 8)) * 2;
    CUDA_TRY(cudaFuncSetAttribute(kt_state_kernel<DV>, cudaFuncAttributeMaxDynamicSharedMemorySize,
                                  (int)sm1),
             "gpu kata tc: shared memory");
    CUDA_TRY(cudaFuncSetAttribute(kt_read_kernel<DK, DV>,
                                  cudaFuncAttributeMaxDynamicSharedMemorySize, (int)sm2),
             "gpu kata tc: shared memory");
    CUDA_TRY(cudaFuncSetAttribute(kt_local_kernel<DK, DV>,
                                  cudaFuncAttributeMaxDynamicSharedMemorySize, (int)sm3),
             "gpu kata tc: shared memory");
    static const int profile = getenv("MIXSCOPE_KATA_PROFILE") != NULL;
    gpu_pass_timer<3> timer(profile, st);
    timer.mark(0);
    // dv = 128 on sm_90: the passes on warpgroup products (kata_tc_wgmma.cu)
    const bool wg = DV == 128 && kata_tc_wgmma_usable();
    if (wg) {
        if (kata_tc_wgmma_state(a, st, e)) return -1;
    } else {
        kt_state_kernel<DV><<<dim3((a.ntile + 1) / 2, N), 256, sm1, st>>>(a);
        CUDA_LAUNCHED("gpu kata tc: state pass");
    }
    timer.mark(1);
    if (wg) {
        if (kata_tc_wgmma_read(a, st, e)) return -1;
    } else {
        kt_read_kernel<DK, DV><<<dim3((a.T + KT_R - 1) / KT_R, N), 256, sm2, st>>>(a);
        CUDA_LAUNCHED("gpu kata tc: read pass");
    }
    timer.mark(2);
    if (wg && kata_tc_wgmma_local_form()) {
        if (kata_tc_wgmma_local(a, st, e)) return -1;
    } else {
        kt_local_kernel<DK, DV><<<dim3((a.T + KT_L - 1) / KT_L, N), 128, sm3, st>>>(a);
        CUDA_LAUNCHED("gpu kata tc: local pass");
    }
    if (profile) {
        float ms[3] = {0, 0, 0};
        timer.mark(3);
        timer.add(ms);
        fprintf(stderr, "kata tc%s T=%d chunk %d: state %.3f ms, read %.3f ms, local %.3f ms\n",
                wg ? " (wgmma)" : "", a.T, a.CL, ms[0], ms[1], ms[2]);
    }
    return 0;
}

extern "C" int kata_tc_chunked(int B, int T, int H, int dk, int dv, int variant, int groups,
                               float scale, float eps, const void *q, const void *k, const void *v,
                               float *state, float *o, float *den, void *sc, void *stream, err *e) {
    if (!kata_tc_supported(T, dk, dv, variant, groups, scale))
        return err_set(e, "gpu kata tc: dk=%d dv=%d variant %d not supported", dk, dv, variant);
    kt_args a;
    a.B = B, a.T = T, a.H = H, a.dk = dk;
    a.M = kt_groups(variant, dk, groups), a.E = dk / a.M, a.nb = a.E / 8;
    a.ntile = kt_ntile(dk, a.M), a.CL = kt_chunk();
    a.D = (int)kfeat_dim(kfeat_of(variant, dk, groups, scale));
    a.s = scale, a.eps = eps;
    a.q = (const bf16_t *)q, a.k = (const bf16_t *)k, a.v = (const bf16_t *)v;
    a.S = state, a.z = state ? state + (size_t)B * H * a.D * dv : NULL;
    const size_t feats = (size_t)((T + a.CL - 1) / a.CL) * B * H * a.ntile * KT_F;
    a.Sc = (bf16_t *)sc, a.o = o, a.den = den;
    a.Zc = (float *)((char *)sc + (feats * dv * sizeof(bf16_t) + 255) / 256 * 256);
    cudaStream_t st = (cudaStream_t)stream;
    if (dk == 64 && dv == 64) return kt_launch<64, 64>(a, st, e);
    if (dk == 64 && dv == 128) return kt_launch<64, 128>(a, st, e);
    if (dk == 128 && dv == 64) return kt_launch<128, 64>(a, st, e);
    return kt_launch<128, 128>(a, st, e);
}
