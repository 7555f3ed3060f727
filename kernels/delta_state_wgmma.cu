// delta_state_wgmma.cu: the state pass of the chunked delta rule (delta_tc.cu) on Hopper's
// warpgroup products, for dk = 128. Built for sm_90a alone (the Makefile's *_wgmma rule); on other
// GPUs delta_state_wgmma_usable() says no and delta_tc.cu keeps its mma.sync state pass.
//
// Per head n and value slice of 64 rows (grid (dv / 64, N)), chunks in order, a block of three
// warpgroups (two with MIXSCOPE_DELTA_WG=2). The consumer holds S^T [64 value rows x 128 keys] in
// its registers as a wgmma m64n128 accumulator and runs, per chunk:
//   Sc = S^T (bf16, the A fragments of the first product, staged for the output pass)
//   D = S^T W^T                 m64n64k16 x 8: A = Sc from registers, B = W [C][128] K-major
//   Delta^T = U^T - D           staged as Dt (bf16) for the output pass
//   S^T <- gamma_last S^T + (Delta^T diag(ks)) K
//                               m64n128k16 x 4: A = Delta^T diag(ks) from registers, B = K
//                               [C][128] read N-major (imm-trans-b), so K needs no transpose
// the same arithmetic as delta_tc_state (bf16 operands, fp32 accumulators), in two products a
// chunk instead of 64 mma.sync a warp. The producer streams W, K (sw128 tiles) and U, GK (padded
// rows) through a ring of ST cp.async stages; the storer copies Sc and Dt out of two staging
// buffers; named barriers hand stages and buffers between them. The flags with prepare and output
// are delta_tc.cu's. Measured on the H200 (B = 1, H = 16, d = 128, 128K tokens): the state pass
// alone 2.36 ms against 3.60 for the mma.sync pass with two warpgroups, gdn's whole prefill 3.12
// ms against 4.15 (and fla's 4.97), 3.00 with the storer, 1.35 in the fused form (FUSED below);
// the steps and what ncu said at each: docs/gpu-results.md.
#include <cuda_bf16.h>
#include <cuda_runtime.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "delta_state_wgmma.cuh"
#include "gpu_common.cuh"
#include "mma.cuh"
#if defined(__CUDA_ARCH_FEAT_SM90_ALL) || !defined(__CUDA_ARCH__)
#include "wgmma.cuh"
#define DSW_HAVE_WGMMA 1
#endif

#define DSW_DK 128

// One ring stage: W, K [C][128] bf16 as sw128 tiles (16 KB each), U [C][64 + 8] bf16 (rows padded
// so that ldmatrix rows hit distinct banks), GK [2C] fp32; stages 1024-byte aligned.
// After the ring, two staging buffers, each Sc [64][128 + 8] and Dt [64][64 + 8] (bf16): the
// consumer writes its rows with stmatrix, the storer copies them out in 16-byte pieces.
// FUSED: a stage is Q (in W's place) and K as sw128 tiles, AU [C][C] as a sw128 tile at AT, V's
// slice [C][64 + 8] in U's place, GK and GC [2C] (fp32); a staging buffer is Sc [64][128] and Dt
// [64][C] as sw128 tiles (the B operands of the output's products): three stages and two
// buffers take 199 KB.
template <int ST, bool FUSED = false> struct dsw_smem {
    static constexpr int TILE = TC_C * DSW_DK * 2, LU = DSW_BV + 8, UB = TC_C * LU * 2;
    static constexpr int AT = 2 * TILE, UO = FUSED ? AT + TC_C * TC_C * 2 : 2 * TILE;
    static constexpr int GKO = UO + UB, GCO = GKO + 2 * TC_C * 4;
    static constexpr int STAGE = ((FUSED ? GCO : GKO) + 2 * TC_C * 4 + 1023) / 1024 * 1024;
    static constexpr int LS = DSW_DK + 8, LD = TC_C + 8;
    static constexpr int SC = 0, DT = TILE; // fused: the staging's tiles
    static constexpr int SBUF = FUSED ? TILE + TILE / 2 : DSW_BV * (LS + LD) * 2;
    static constexpr int BYTES = STAGE * ST + 2 * SBUF + 1024; // + the first stage's alignment
};

__device__ __forceinline__ float2 lds_f2(uint32_t a) {
    float2 v;
    asm volatile("ld.shared.v2.f32 {%0, %1}, [%2];\n" : "=f"(v.x), "=f"(v.y) : "r"(a));
    return v;
}
__device__ __forceinline__ float lds_f(uint32_t a) {
    float v;
    asm volatile("ld.shared.f32 %0, [%1];\n" : "=f"(v) : "r"(a));
    return v;
}
__device__ __forceinline__ uint4 lds_u4(uint32_t a) {
    uint4 v;
    asm volatile("ld.shared.v4.u32 {%0, %1, %2, %3}, [%4];\n"
                 : "=r"(v.x), "=r"(v.y), "=r"(v.z), "=r"(v.w)
                 : "r"(a));
    return v;
}
// Named barriers (wgmma.cuh's bar_sync, bar_arrive) between two warpgroups (256 threads: one side
// arrives, the other syncs): the ring's between consumer and producer, the staging's between
// consumer and whoever copies it out (the producer, or with NWG = 3 the storer); and among the
// 128 threads that copy out.
// ids: 0 is __syncthreads'; ring stage s full / empty; staging buffer b full / empty; copiers
#define DSW_FULL(s)   (1 + (s))
#define DSW_EMPTY(s)  (5 + (s))
#define DSW_SFULL(b)  (9 + (b))
#define DSW_SEMPTY(b) (11 + (b))
#define DSW_PROD      13

// Block: two warpgroups. The consumer (warps 0-3) holds S^T and runs the products and Delta; the
// producer (warps 4-7) fills the ring by cp.async (checking prepare's flags), copies each chunk's
// Sc and Dt out of the staging and publishes the done flags, so that the consumer's instruction
// stream is the chain alone (one warpgroup doing both issued an instruction every 3.4 cycles, ncu
// at 9653370, most of them addresses and copies).
//
// NWG = 3: the copies out move to a third warpgroup (warps 8-11), so that the producer's loop is
// the ring alone: FULL arrives as soon as a chunk's copies are in, never behind a store. 384
// threads leave 168 registers a thread, so the warpgroups trade them (setmaxnreg): the producer
// 80 (at 56 and less ptxas spills), the consumer 232, the storer 168: 480 of the 512 a lane.
//
// FUSED (NWG = 3; FlashQLA's reformulation of the chunk): prepare has written only AU and GC
// (tc_scratch), and the block forms W S and U from K, V and AU itself and the output too, so that
// no W, U, P, Sc or Dt goes through memory and there is no output pass:
//   D = S^T K^T;  X^T = V^T - D diag(gamma) (bf16);  Delta^T = X^T AU^T
//       (since W = AU diag(gamma) K and U = AU V)
//   S^T <- gamma_last S^T + (Delta^T diag(ks)) K                  (as unfused)
//   O = scale (diag(gamma) Q Sc^T + P Delta),  P_ij = kc_j (q_i.k_j) 2^(G_i - G_j) (i >= j)
// The consumer runs the first three and the update (one m64n64k16 x 4 more on the chain); the
// third warpgroup, the output, runs Q K^T, P and O from the stage (Q, K, G, kc) and the staging
// (Sc, Dt), and frees a stage beside the consumer. Segments of time (tc_scratch) are what make
// this pay: each block's chain is longer, but the blocks fill the machine.
template <int ST, int NWG, bool FUSED>
__global__ void __launch_bounds__(128 * NWG, 1)
    delta_state_wgmma(int T, int H, int dv, int nchunks, const bf16_t *k, tc_scratch sc,
                      float *state, float scale, const bf16_t *q, const bf16_t *v, float *o) {
#ifdef DSW_HAVE_WGMMA
    static_assert(ST >= 2 && ST <= 4, "barrier ids for four stages");
    static_assert(NWG == 2 || NWG == 3, "a consumer, a producer and perhaps a storer");
    static_assert(!FUSED || (NWG == 3 && ST <= 3), "fused: three warpgroups, 199 KB at 3 stages");
    typedef dsw_smem<ST, FUSED> L;
    constexpr int NE = FUSED ? 384 : 256; // threads of an EMPTY: the output frees stages too
    extern __shared__ unsigned char dsw_raw[];
    unsigned char *base = (unsigned char *)(((uintptr_t)dsw_raw + 1023) & ~(uintptr_t)1023);
    const uint32_t abase = (uint32_t)__cvta_generic_to_shared(base);
    const int n = blockIdx.y, nsl = gridDim.x, bv0 = blockIdx.x * DSW_BV, b = n / H, hh = n % H;
    const int tid = threadIdx.x % 128, warp = tid >> 5, lane = tid & 31, gid = lane >> 2,
              tig = lane & 3;
    if (threadIdx.x == 0) tc_trace(sc.trace, 1, 0);
    // segment seg of the chunks: writes chunks lo .. hi - 1, walks from chunk c0 (<= lo: a
    // warm-up from a zero state where the chunks between have decayed enough, else from the first
    // chunk and the state there; tc_scratch says why)
    const int seg = blockIdx.z, lo = seg * sc.seglen, hi = min(nchunks, lo + sc.seglen);
    __shared__ int from_s;
    if (threadIdx.x == 0) {
        int c = lo;
        if (seg > 0) {
            float sum = 0.0f;
            while (c > 0 && lo - c < TC_CP_WARM && sum > TC_CP_LOG2TOL) {
                c--;
                wait_at_least(sc.ready + (size_t)n * nchunks + c, 1);
                sum += sc.lb[(size_t)n * nchunks + c];
            }
            if (sum > TC_CP_LOG2TOL) c = 0; // not enough decay: from the first chunk
        }
        from_s = c;
    }
    __syncthreads();
    const int c0 = from_s, cnt = hi - c0; // chunks walked
    int *done = sc.done + ((size_t)n * sc.nseg + seg) * nsl + blockIdx.x;
    auto stage_w = [&](int s) { return base + s * L::STAGE; };
    auto stage_u = [&](int s) { return (bf16_t *)(stage_w(s) + L::UO); };
    auto sbuf_s = [&](int bb) { return (bf16_t *)(base + L::STAGE * ST + bb * L::SBUF); };
    auto sbuf_d = [&](int bb) { return sbuf_s(bb) + DSW_BV * L::LS; };
    const size_t kstep = (size_t)H * DSW_DK, nc0 = (size_t)n * nchunks; // kstep: a token of k

    if (FUSED && threadIdx.x >= 256) { // ---------------------------------------------- output
        // O rows row, row + 8 of the chunk's tokens, value columns bv0 + 8 j + 2 tig (+1)
        const int row = warp * 16 + gid;
        for (int i = 0; i < cnt; i++) {
            const int s = i % ST, bb = i & 1, m = c0 + i;
            bar_sync(DSW_SFULL(bb), 256); // the consumer has staged chunk m (and is past its FULL)
            if (m >= lo) {
                const uint32_t aq = abase + s * L::STAGE, ak = aq + L::TILE;
                const uint32_t sb = abase + L::STAGE * ST + bb * L::SBUF;
                const uint64_t dQ = wgmma_desc(aq, 16, 1024), dK = wgmma_desc(ak, 16, 1024),
                               dS = wgmma_desc(sb + L::SC, 16, 1024),
                               dD = wgmma_desc(sb + L::DT, 16, 1024);
                float qk[32], o1[32], o2[32];
                wgmma_fence();
#pragma unroll
                for (int ks = 0; ks < DSW_DK / 16; ks++) { // Q K^T: k16 steps over the keys
                    const uint64_t off = ((ks >> 2) * TC_C * 128 + (ks & 3) * 32) >> 4;
                    wgmma_ss_n64(qk, dQ + off, dK + off, ks > 0);
                }
                wgmma_commit();
#pragma unroll
                for (int ks = 0; ks < DSW_DK / 16; ks++) { // Q Sc^T
                    const uint64_t off = ((ks >> 2) * TC_C * 128 + (ks & 3) * 32) >> 4;
                    wgmma_ss_n64(o1, dQ + off, dS + off, ks > 0);
                }
                wgmma_commit();
                // G and kc of the thread's rows and columns, gamma of its rows
                const uint32_t agk = aq + L::GKO, agc = aq + L::GCO;
                const float Gr0 = lds_f(agc + row * 4), Gr1 = lds_f(agc + (row + 8) * 4);
                const float g0 = scale * lds_f(agk + row * 4),
                            g1 = scale * lds_f(agk + (row + 8) * 4);
                float2 gc[TC_C / 8], kc[TC_C / 8];
#pragma unroll
                for (int j = 0; j < TC_C / 8; j++) {
                    gc[j] = lds_f2(agc + (j * 8 + 2 * tig) * 4);
                    kc[j] = lds_f2(agc + (TC_C + j * 8 + 2 * tig) * 4);
                }
                wgmma_wait<1>();
                wgmma_fence_regs<32>(qk);
                // P as the A fragments of P Delta (the accumulators' n8 blocks 2 q, 2 q + 1)
                uint32_t ap[TC_C / 16][4];
#pragma unroll
                for (int j = 0; j < TC_C / 8; j++) {
                    const int c = j * 8 + 2 * tig;
                    const float p0 = row >= c ? kc[j].x * qk[4 * j] * ex2(Gr0 - gc[j].x) : 0.0f;
                    const float p1 =
                        row >= c + 1 ? kc[j].y * qk[4 * j + 1] * ex2(Gr0 - gc[j].y) : 0.0f;
                    const float p2 =
                        row + 8 >= c ? kc[j].x * qk[4 * j + 2] * ex2(Gr1 - gc[j].x) : 0.0f;
                    const float p3 =
                        row + 8 >= c + 1 ? kc[j].y * qk[4 * j + 3] * ex2(Gr1 - gc[j].y) : 0.0f;
                    ap[j >> 1][(j & 1) * 2] = pack_bf16(p0, p1);
                    ap[j >> 1][(j & 1) * 2 + 1] = pack_bf16(p2, p3);
                }
                wgmma_fence();
#pragma unroll
                for (int ks = 0; ks < TC_C / 16; ks++) // P Delta: over the chunk's tokens
                    wgmma_rs_n64(o2, ap[ks], dD + ks * 2, ks > 0);
                wgmma_commit();
                wgmma_wait<0>();
                wgmma_fence_regs<32>(o1);
                wgmma_fence_regs<32>(o2);
#pragma unroll
                for (int half = 0; half < 2; half++) {
                    const int t = m * TC_C + row + 8 * half;
                    if (t >= T) continue;
                    const float gh = half ? g1 : g0;
                    float *orow = o + (((size_t)b * T + t) * H + hh) * dv + bv0 + 2 * tig;
#pragma unroll
                    for (int j = 0; j < DSW_BV / 8; j++)
                        *(float2 *)(orow + 8 * j) = make_float2(
                            gh * o1[4 * j + 2 * half] + scale * o2[4 * j + 2 * half],
                            gh * o1[4 * j + 2 * half + 1] + scale * o2[4 * j + 2 * half + 1]);
                }
            }
            if (i + 2 < cnt) bar_arrive(DSW_SEMPTY(bb), 256);
            if (i + ST < cnt) bar_arrive(DSW_EMPTY(s), NE);
        }
        return;
    }
    if (threadIdx.x >= 128) { // ---------------------------------------------- producer
        // Every address below is a per-thread base, set once, plus a chunk's stride and constant
        // offsets (ncu at 0ca8b73: index arithmetic redone per copy made this side 408
        // instructions a warp a chunk, and the consumer waited on it half the time). Copies in:
        // W (fused: Q) and K, 16-byte chunk lc of rows lr + 8 i (rows 8 apart share their swizzle,
        // so the shared offsets step by 1024 bytes); U (fused: V's slice), piece uc of rows
        // ur + 16 j; fused: AU, piece ur % 8 of rows ur + 16 j; GK (and GC), 32 threads each.
        // Copies out: Sc rows lr + 8 i, Dt rows ur + 16 j, the same pieces.
        const unsigned ut = tid, lc = ut % 16, lr = ut / 16, ur = ut / 8, uc = ut % 8 * 8;
        const bf16_t *Wt = FUSED ? q + (((size_t)b * T + lr) * H + hh) * DSW_DK + lc * 8
                                 : sc.W + nc0 * TC_C * DSW_DK + lr * DSW_DK + lc * 8;
        const size_t wstep = FUSED ? (size_t)TC_C * kstep : (size_t)TC_C * DSW_DK; // a chunk
        const bf16_t *Kt = k + (((size_t)b * T + lr) * H + hh) * DSW_DK + lc * 8;
        const size_t ustep = FUSED ? (size_t)H * dv : (size_t)dv; // a row of V, of U
        const bf16_t *Ut = FUSED ? v + (((size_t)b * T + ur) * H + hh) * dv + bv0 + uc
                                 : sc.U + nc0 * TC_C * dv + (size_t)ur * dv + bv0 + uc;
        const bf16_t *At = sc.AU + nc0 * TC_C * TC_C + ur * TC_C + ut % 8 * 8;
        const float *Gt =
            (FUSED && ut >= 32 ? sc.GC + (ut - 32) * 4 : sc.GK + ut * 4) + nc0 * 2 * TC_C;
        bf16_t *St = sc.Sc + (nc0 * dv + bv0 + lr) * DSW_DK + lc * 8;
        bf16_t *Dtt = sc.Dt + (nc0 * dv + bv0 + ur) * TC_C + uc;
        // this thread's pieces of stage 0 (W, U, AU, GK) and of the staging (Sc, Dt)
        const uint32_t sws = abase + sw128_chunk(TC_C, lr, lc);
        const uint32_t sus = abase + L::UO + (ur * L::LU + uc) * 2;
        const uint32_t sas = abase + L::AT + sw128_chunk(TC_C, ur, ut % 8);
        const uint32_t sgs =
            abase + (FUSED && ut >= 32 ? L::GCO + (ut - 32) * 16 : L::GKO + ut * 16);
        const uint32_t sso = abase + L::STAGE * ST + (lr * L::LS + lc * 8) * 2,
                       sdo = abase + L::STAGE * ST + DSW_BV * L::LS * 2 + (ur * L::LD + uc) * 2;
        int pre[8]; // ready flags of the next group of eight chunks
#pragma unroll
        for (int i = 0; i < 8; i++) pre[i] = c0 + i < hi ? ld_relaxed(sc.ready + nc0 + c0 + i) : 1;
        auto issue = [&](int c, int s) {
            // prep has written this chunk: checked eight chunks at a time, on flags loaded a
            // group ahead (pre), polled again only when one was 0
            if ((c - c0) % 8 == 0) {
                const int *f = sc.ready + nc0 + c;
                const int m = min(8, hi - c);
                int all = 1;
#pragma unroll
                for (int i = 0; i < 8; i++) all &= i >= m || pre[i] != 0;
                for (unsigned spins = 0; !all;) {
                    __nanosleep(128);
                    if (++spins > (1u << 26)) __trap();
                    all = 1;
#pragma unroll
                    for (int i = 0; i < 8; i++) all &= i >= m || ld_relaxed(f + i) != 0;
                }
#pragma unroll
                for (int i = 0; i < 8; i++) pre[i] = c + 8 + i < hi ? ld_relaxed(f + 8 + i) : 1;
            }
            const bf16_t *W = Wt + (size_t)c * wstep, *K = Kt + (size_t)c * TC_C * kstep;
            const bf16_t *U = Ut + (size_t)c * TC_C * ustep;
            const uint32_t ws = sws + s * L::STAGE, ks = ws + L::TILE, us = sus + s * L::STAGE;
            const int left = T - c * TC_C - (int)lr; // rows lr + 8 i < left are in the sequence
#pragma unroll
            for (int i = 0; i < TC_C / 8; i++) {
                if (!FUSED || 8 * i < left) // W has every row (zero past T); Q is the input's
                    cp_async16_s(ws + 1024 * i, W + 8 * i * (FUSED ? kstep : DSW_DK));
                else
                    sts_zero16(ws + 1024 * i);
                if (8 * i < left)
                    cp_async16_s(ks + 1024 * i, K + 8 * i * kstep);
                else // rows past T: zero (0 x garbage could be NaN)
                    sts_zero16(ks + 1024 * i);
            }
            const int uleft = T - c * TC_C - (int)ur;
#pragma unroll
            for (int j = 0; j < TC_C / 16; j++) {
                if (!FUSED || 16 * j < uleft)
                    cp_async16_s(us + 16 * j * L::LU * 2, U + (size_t)16 * j * ustep);
                else
                    sts_zero16(us + 16 * j * L::LU * 2);
            }
            if (FUSED) {
                const bf16_t *A = At + (size_t)c * TC_C * TC_C;
#pragma unroll
                for (int j = 0; j < TC_C / 16; j++)
                    cp_async16_s(sas + s * L::STAGE + 2048 * j, A + 16 * j * TC_C);
            }
            if (ut < (FUSED ? 4 : 2) * TC_C / 4)
                cp_async16_s(sgs + s * L::STAGE, Gt + (size_t)c * 2 * TC_C);
        };
        // the i-th chunk walked, m = c0 + i: its Sc and Dt from staging buffer i % 2 to the
        // scratch (all twelve pieces read, then written; none in the warm-up, m < lo); every 8
        // chunks (and at the last) the done flag (the producer's barrier orders its threads'
        // stores before)
        auto store_out = [&](int i) {
            const int bb = i & 1, m = c0 + i;
            bar_sync(DSW_SFULL(bb), 256);
            uint4 vs[DSW_BV * DSW_DK / 8 / 128], vd[DSW_BV * TC_C / 8 / 128];
#pragma unroll
            for (int i = 0; i < DSW_BV * DSW_DK / 8 / 128; i++)
                vs[i] = lds_u4(sso + bb * L::SBUF + 8 * i * L::LS * 2);
#pragma unroll
            for (int j = 0; j < DSW_BV * TC_C / 8 / 128; j++)
                vd[j] = lds_u4(sdo + bb * L::SBUF + 16 * j * L::LD * 2);
            if (i + 2 < cnt) bar_arrive(DSW_SEMPTY(bb), 256);
            if (m < lo) return;
            bf16_t *Sc = St + (size_t)m * dv * DSW_DK, *Dt = Dtt + (size_t)m * dv * TC_C;
#pragma unroll
            for (int i = 0; i < DSW_BV * DSW_DK / 8 / 128; i++)
                *(uint4 *)(Sc + 8 * i * DSW_DK) = vs[i];
#pragma unroll
            for (int j = 0; j < DSW_BV * TC_C / 8 / 128; j++)
                *(uint4 *)(Dt + 16 * j * TC_C) = vd[j];
            if ((m + 1) % 8 == 0 || m + 1 == hi) {
                bar_sync(DSW_PROD, 128);
                if (ut == 0) st_release(done, m + 1);
            }
        };
        if (!FUSED && NWG == 3 && threadIdx.x >= 256) { // the storer
            for (int i = 0; i < cnt; i++) store_out(i);
            return;
        }
        if (NWG == 3) setmaxnreg_dec<80>();
#pragma unroll
        for (int s = 0; s < ST - 1; s++) {
            if (s < cnt) issue(c0 + s, s);
            cp_async_commit();
        }
        for (int i = 0; i < cnt; i++) {
            cp_async_wait<ST - 2>(); // chunk c0 + i is in
            fence_proxy_async();     // its cp.async and zero stores, read next by wgmma
            bar_arrive(DSW_FULL(i % ST), 256);
            if (NWG == 2 && i >= 1) store_out(i - 1);
            const int in = i + ST - 1; // into the stage chunk i - 1 used, once the consumer is done
            if (in < cnt) {
                if (in >= ST) bar_sync(DSW_EMPTY(in % ST), NE);
                issue(c0 + in, in % ST);
            }
            cp_async_commit();
        }
        if (NWG == 2) store_out(cnt - 1);
        cp_async_wait<0>();
        return;
    }
    if (NWG == 3) setmaxnreg_inc<232>();

    // ------------------------------------------------------------------------- consumer
    // S^T rows r0 = bv0 + 16 warp + gid and r0 + 8; h[4 j ..] key columns 8 j + 2 tig (+1)
    const int r0 = bv0 + warp * 16 + gid;
    // this lane's stmatrix row in the staging: lane 8 i + j gives row j of matrix i, i.e. row
    // (i & 1) 8 + j, cols (i >> 1) 8 of a 16 x 16 block
    const int mr = warp * 16 + ((lane >> 3) & 1) * 8 + (lane & 7), mc = (lane >> 4) * 8;
    float h[64], d[32];
    // the state at chunk c0: the launch's (its copy when the segments' last overwrites it), or 0
    const float *S = (sc.nseg > 1 ? sc.state0 : state) + (size_t)n * DSW_DK * dv;
#pragma unroll
    for (int jj = 0; jj < 16; jj++) {
        const int k0 = 8 * jj + 2 * tig;
        h[4 * jj] = c0 == 0 ? S[(size_t)k0 * dv + r0] : 0.0f;
        h[4 * jj + 1] = c0 == 0 ? S[(size_t)(k0 + 1) * dv + r0] : 0.0f;
        h[4 * jj + 2] = c0 == 0 ? S[(size_t)k0 * dv + r0 + 8] : 0.0f;
        h[4 * jj + 3] = c0 == 0 ? S[(size_t)(k0 + 1) * dv + r0 + 8] : 0.0f;
    }
#pragma unroll
    for (int x = 0; x < 32; x++) d[x] = 0.0f;
    for (int i = 0; i < cnt; i++) {
        const int s = i % ST, bb = i & 1;
        bar_sync(DSW_FULL(s), 256); // stage s holds chunk c0 + i
        const uint32_t aw = abase + s * L::STAGE, ak = aw + L::TILE;
        // B of the first product: W, or (fused) K, both [C][128] K-major
        const uint64_t dW = wgmma_desc(FUSED ? ak : aw, 16, 1024),
                       dK = wgmma_desc(ak, TC_C * 128, 1024);

        // S^T as bf16 A fragments: k16 step ks is n8 blocks 2 ks, 2 ks + 1 of the accumulator
        uint32_t ah[DSW_DK / 16][4];
#pragma unroll
        for (int ks = 0; ks < DSW_DK / 16; ks++) {
            ah[ks][0] = pack_bf16(h[8 * ks], h[8 * ks + 1]);
            ah[ks][1] = pack_bf16(h[8 * ks + 2], h[8 * ks + 3]);
            ah[ks][2] = pack_bf16(h[8 * ks + 4], h[8 * ks + 5]);
            ah[ks][3] = pack_bf16(h[8 * ks + 6], h[8 * ks + 7]);
        }
        // D = S^T W^T [64 rows x C tokens] (fused: S^T K^T)
        wgmma_fence();
#pragma unroll
        for (int ks = 0; ks < DSW_DK / 16; ks++)
            wgmma_rs_n64(d, ah[ks], dW + (((ks >> 2) * TC_C * 128 + (ks & 3) * 32) >> 4), ks > 0);
        wgmma_commit();
        // while the products run: U^T (fused: V^T) of the warp's rows in the accumulators'
        // layout (ldmatrix .trans of the token-major stage: uf[jj][0..1] are U^T's n8 block 2 jj,
        // uf[jj][2..3] block 2 jj + 1, bf16 pairs with token 2 tig in the low half), ks,
        // gamma_last (fused: and gamma), and Sc into the staging (once it is free)
        const bf16_t *us = stage_u(s);
        uint32_t uf[TC_C / 16][4];
#pragma unroll
        for (int jj = 0; jj < TC_C / 16; jj++)
            ldmatrix_x4_trans(uf[jj], us + (jj * 16 + (lane >> 4) * 8 + (lane & 7)) * L::LU +
                                          warp * 16 + ((lane >> 3) & 1) * 8);
        const uint32_t agk = abase + s * L::STAGE + L::GKO;
        float2 kk[TC_C / 8], gm[FUSED ? TC_C / 8 : 1];
#pragma unroll
        for (int j = 0; j < TC_C / 8; j++) kk[j] = lds_f2(agk + (TC_C + j * 8 + 2 * tig) * 4);
        if (FUSED)
#pragma unroll
            for (int j = 0; j < TC_C / 8; j++) gm[j] = lds_f2(agk + (j * 8 + 2 * tig) * 4);
        const float gl = lds_f(agk + (TC_C - 1) * 4);
        if (i >= 2) bar_sync(DSW_SEMPTY(bb), 256);
        // this lane's rows in the staging: padded rows, or (fused) sw128 tiles, where the 16-byte
        // piece 2 ks + (lane >> 4) of row mr is at sw128_chunk
        bf16_t *sts = sbuf_s(bb) + mr * L::LS + mc, *dts = sbuf_d(bb) + mr * L::LD + mc;
        unsigned char *sb = base + L::STAGE * ST + bb * L::SBUF;
#pragma unroll
        for (int ks = 0; ks < DSW_DK / 16; ks++) {
            if constexpr (FUSED)
                stmatrix_x4(sb + L::SC + sw128_chunk(DSW_BV, mr, 2 * ks + (lane >> 4)), ah[ks]);
            else
                stmatrix_x4(sts + ks * 16, ah[ks]);
        }
        wgmma_wait<0>();
        wgmma_fence_regs<32>(d);
        // Delta^T into d: U^T - D, or (fused) X^T AU^T with X^T = V^T - D diag(gamma) as the A
        // fragments (B: AU [C][C], K-major)
        if constexpr (FUSED) {
            uint32_t ax[TC_C / 16][4];
#pragma unroll
            for (int j = 0; j < TC_C / 8; j++) {
                const uint32_t ulo = uf[j >> 1][(j & 1) * 2], uhi = uf[j >> 1][(j & 1) * 2 + 1];
                ax[j >> 1][(j & 1) * 2] =
                    pack_bf16(__uint_as_float(ulo << 16) - gm[j].x * d[4 * j],
                              __uint_as_float(ulo & 0xffff0000u) - gm[j].y * d[4 * j + 1]);
                ax[j >> 1][(j & 1) * 2 + 1] =
                    pack_bf16(__uint_as_float(uhi << 16) - gm[j].x * d[4 * j + 2],
                              __uint_as_float(uhi & 0xffff0000u) - gm[j].y * d[4 * j + 3]);
            }
            const uint64_t dA = wgmma_desc(aw + L::AT, 16, 1024);
            wgmma_fence();
#pragma unroll
            for (int ks = 0; ks < TC_C / 16; ks++) wgmma_rs_n64(d, ax[ks], dA + ks * 2, ks > 0);
            wgmma_commit();
            wgmma_wait<0>();
            wgmma_fence_regs<32>(d);
        } else {
#pragma unroll
            for (int j = 0; j < TC_C / 8; j++) {
                const uint32_t ulo = uf[j >> 1][(j & 1) * 2], uhi = uf[j >> 1][(j & 1) * 2 + 1];
                d[4 * j] = __uint_as_float(ulo << 16) - d[4 * j];
                d[4 * j + 1] = __uint_as_float(ulo & 0xffff0000u) - d[4 * j + 1];
                d[4 * j + 2] = __uint_as_float(uhi << 16) - d[4 * j + 2];
                d[4 * j + 3] = __uint_as_float(uhi & 0xffff0000u) - d[4 * j + 3];
            }
        }
        // Delta^T into the staging; scaled by ks, the A fragments of the update
        uint32_t ad[TC_C / 16][4], dq[TC_C / 16][4];
#pragma unroll
        for (int j = 0; j < TC_C / 8; j++) {
            const float x0 = d[4 * j], x1 = d[4 * j + 1], x2 = d[4 * j + 2], x3 = d[4 * j + 3];
            dq[j >> 1][(j & 1) * 2] = pack_bf16(x0, x1);
            dq[j >> 1][(j & 1) * 2 + 1] = pack_bf16(x2, x3);
            ad[j >> 1][(j & 1) * 2] = pack_bf16(x0 * kk[j].x, x1 * kk[j].y);
            ad[j >> 1][(j & 1) * 2 + 1] = pack_bf16(x2 * kk[j].x, x3 * kk[j].y);
        }
        // S^T <- gamma_last S^T + (Delta^T diag(ks)) K
#pragma unroll
        for (int x = 0; x < 64; x++) h[x] *= gl;
        wgmma_fence();
#pragma unroll
        for (int q = 0; q < TC_C / 16; q++) wgmma_rs_n128_tb(h, ad[q], dK + (q * 2048 >> 4));
        wgmma_commit();
#pragma unroll
        for (int q = 0; q < TC_C / 16; q++) {
            if constexpr (FUSED)
                stmatrix_x4(sb + L::DT + sw128_chunk(DSW_BV, mr, 2 * q + (lane >> 4)), dq[q]);
            else
                stmatrix_x4(dts + q * 16, dq[q]);
        }
        if (FUSED) fence_proxy_async(); // read next by the output warpgroup's wgmma
        bar_arrive(DSW_SFULL(bb), 256); // the staging holds chunk c's Sc and Dt
        wgmma_wait<0>();                // h is read next; ad and the stage untouched until then
        wgmma_fence_regs<64>(h);
        if (i + ST < cnt) bar_arrive(DSW_EMPTY(s), NE);
    }
    if (seg + 1 == (int)gridDim.z) { // the last segment: the state past the last chunk
        float *So = state + (size_t)n * DSW_DK * dv;
#pragma unroll
        for (int jj = 0; jj < 16; jj++) {
            const int k0 = 8 * jj + 2 * tig;
            So[(size_t)k0 * dv + r0] = h[4 * jj];
            So[(size_t)(k0 + 1) * dv + r0] = h[4 * jj + 1];
            So[(size_t)k0 * dv + r0 + 8] = h[4 * jj + 2];
            So[(size_t)(k0 + 1) * dv + r0 + 8] = h[4 * jj + 3];
        }
    }
    if (threadIdx.x == 0) tc_trace(sc.trace, 1, 1);
#else
    __trap(); // no wgmma in this image: delta_state_wgmma_usable() keeps launches away
#endif
}

int delta_state_wgmma_usable(void) {
    static const int usable =
        gpu_sm90a_usable("MIXSCOPE_DELTA_WGMMA", (const void *)delta_state_wgmma<4, 2, false>);
    return usable;
}

template <int ST, int NWG, bool FUSED>
static int dsw_launch(int T, int H, int N, int dv, int nchunks, const bf16_t *k, tc_scratch sc,
                      float *state, const dsw_fused *f, cudaStream_t stream, err *e) {
    const int bytes = dsw_smem<ST, FUSED>::BYTES;
    CUDA_TRY(cudaFuncSetAttribute(delta_state_wgmma<ST, NWG, FUSED>,
                                  cudaFuncAttributeMaxDynamicSharedMemorySize, bytes),
             "gpu delta prefill: shared memory (wgmma state pass)");
    delta_state_wgmma<ST, NWG, FUSED><<<dim3(dv / DSW_BV, N, sc.nseg), 128 * NWG, bytes, stream>>>(
        T, H, dv, nchunks, k, sc, state, f ? f->scale : 0.0f, f ? f->q : NULL, f ? f->v : NULL,
        f ? f->o : NULL);
    CUDA_LAUNCHED("gpu delta prefill: state pass (wgmma)");
    return 0;
}

// nwg = 3, the storer, is delta_tc.cu's default; 2 (MIXSCOPE_DELTA_WG=2) has the producer store too
// (gdn on the H200, 16 heads: 0.78 ms against 0.84 at 32K, 3.00 against 3.19 at 128K, same run).
// f: the fused form (three warpgroups, two or three stages whatever st asks).
int delta_state_wgmma_launch(int T, int H, int N, int dv, int nchunks, int st, int nwg,
                             const bf16_t *k, tc_scratch sc, float *state, const dsw_fused *f,
                             cudaStream_t stream, err *e) {
    if (dv % DSW_BV != 0)
        return err_set(e, "gpu delta prefill (wgmma state pass): dv=%d not a multiple of %d", dv,
                       DSW_BV);
#define DSW_GO(ST, NWG, F) dsw_launch<ST, NWG, F>(T, H, N, dv, nchunks, k, sc, state, f, stream, e)
    if (f) return st == 2 ? DSW_GO(2, 3, true) : DSW_GO(3, 3, true);
    if (nwg == 3)
        return st == 2 ? DSW_GO(2, 3, false) : st == 3 ? DSW_GO(3, 3, false) : DSW_GO(4, 3, false);
    return st == 2 ? DSW_GO(2, 2, false) : st == 3 ? DSW_GO(3, 2, false) : DSW_GO(4, 2, false);
#undef DSW_GO
}
