// delta_state_wgmma.cu: the state pass of the chunked delta rule (delta_tc.cu) on Hopper's
// warpgroup products, for dk = 128. Built for sm_90a alone (the Makefile's *_wgmma rule); on other
// GPUs delta_state_wgmma_usable() says no and delta_tc.cu keeps its mma.sync state pass.
//
// Per head n and value slice of 64 rows (grid (dv / 64, N)), chunks in order, a block of two
// warpgroups. The consumer holds S^T [64 value rows x 128 keys] in its registers as a wgmma
// m64n128 accumulator and runs, per chunk:
//   Sc = S^T (bf16, the A fragments of the first product, staged for the output pass)
//   D = S^T W^T                 m64n64k16 x 8: A = Sc from registers, B = W [C][128] K-major
//   Delta^T = U^T - D           staged as Dt (bf16) for the output pass
//   S^T <- gamma_last S^T + (Delta^T diag(ks)) K
//                               m64n128k16 x 4: A = Delta^T diag(ks) from registers, B = K
//                               [C][128] read N-major (imm-trans-b), so K needs no transpose
// the same arithmetic as delta_tc_state (bf16 operands, fp32 accumulators), in two products a
// chunk instead of 64 mma.sync a warp. The producer streams W, K (sw128 tiles) and U, GK (padded
// rows) through a ring of ST cp.async stages and copies Sc and Dt out of two staging buffers;
// named barriers hand stages and buffers between the two. The flags with prepare and output are
// delta_tc.cu's. Measured on the H200 (B = 1, H = 16, d = 128, 128K tokens): the state pass alone
// 2.36 ms against 3.60 for the mma.sync pass, gdn's whole prefill 3.12 ms against 4.15 (and fla's
// 4.97); the steps and what ncu said at each: docs/gpu-results.md.
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
// After the ring, two staging buffers. Unfused (FUSE = 0): Sc [64][128 + 8] and Dt [64][64 + 8]
// (bf16), which the consumer writes with stmatrix and the producer copies out in 16-byte pieces.
// Fused: four sw128 tiles, the operands of the output products: Sc [64][128] (S^T, B of Q S) at
// SC, Dt [64][C] (Delta^T, B of P Delta) at DT, Q [C][128] at QT and P [C][C] at PT (A of each),
// and gamma at GM: 49 KB a buffer, so that three ring stages and two buffers fill the 227 KB a
// block may have.
template <int ST, bool FUSE> struct dsw_smem {
    static constexpr int TILE = TC_C * DSW_DK * 2, LU = DSW_BV + 8, UB = TC_C * LU * 2;
    static constexpr int STAGE = (2 * TILE + UB + 2 * TC_C * 4 + 1023) / 1024 * 1024;
    static constexpr int LS = DSW_DK + 8, LD = TC_C + 8;
    static constexpr int SC = 0, DT = TILE, QT = TILE + TILE / 2, PT = 2 * TILE + TILE / 2;
    static constexpr int GM = 3 * TILE; // fused: gamma [C] (fp32) of the chunk
    static constexpr int SBUF = FUSE ? 3 * TILE + 1024 : DSW_BV * (LS + LD) * 2;
    static constexpr int BYTES = STAGE * ST + 2 * SBUF + 1024; // + the first stage's alignment
    static_assert(!FUSE || ST == 3, "fused: three stages (the staging leaves room for no more)");
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
__device__ __forceinline__ void sts_zero16(uint32_t a) {
    asm volatile("st.shared.v4.u32 [%0], {%1, %1, %1, %1};\n" ::"r"(a), "r"(0) : "memory");
}
__device__ __forceinline__ void cp_async16_s(uint32_t a, const void *gmem) {
    asm volatile("cp.async.cg.shared.global [%0], [%1], 16;\n" ::"r"(a), "l"(gmem));
}
__device__ __forceinline__ float4 lds_f4(uint32_t a) {
    float4 v;
    asm volatile("ld.shared.v4.f32 {%0, %1, %2, %3}, [%4];\n"
                 : "=f"(v.x), "=f"(v.y), "=f"(v.z), "=f"(v.w)
                 : "r"(a));
    return v;
}
__device__ __forceinline__ void sts_f2(uint32_t a, float x, float y) {
    asm volatile("st.shared.v2.f32 [%0], {%1, %2};\n" ::"r"(a), "f"(x), "f"(y) : "memory");
}
// Bulk copies from shared to global memory (the async proxy: the writers fence first), a bulk
// group a thread: wait_read until the shared source may be written again, wait until done.
__device__ __forceinline__ void bulk_store(void *gmem, uint32_t a, int bytes) {
    asm volatile("cp.async.bulk.global.shared::cta.bulk_group [%0], [%1], %2;\n" ::"l"(gmem),
                 "r"(a), "r"(bytes)
                 : "memory");
}
__device__ __forceinline__ void bulk_commit() {
    asm volatile("cp.async.bulk.commit_group;\n" ::: "memory");
}
__device__ __forceinline__ void bulk_wait_read() {
    asm volatile("cp.async.bulk.wait_group.read 0;\n" ::: "memory");
}
__device__ __forceinline__ void bulk_wait() {
    asm volatile("cp.async.bulk.wait_group 0;\n" ::: "memory");
}
// Registers traded between warpgroups (sm_90a): a warpgroup's limit a thread, lowered or raised
template <int R> __device__ __forceinline__ void setmaxnreg_dec() {
    asm volatile("setmaxnreg.dec.sync.aligned.u32 %0;\n" ::"n"(R));
}
template <int R> __device__ __forceinline__ void setmaxnreg_inc() {
    asm volatile("setmaxnreg.inc.sync.aligned.u32 %0;\n" ::"n"(R));
}
// Named barriers (wgmma.cuh's bar_sync, bar_arrive) between the two warpgroups (256 threads: one
// side arrives, the other syncs), and among the producer's 128 threads.
// ids: 0 is __syncthreads'; ring stage s full / empty; staging buffer b full / empty; producer
#define DSW_FULL(s)   (1 + (s))
#define DSW_EMPTY(s)  (5 + (s))
#define DSW_SFULL(b)  (9 + (b))
#define DSW_SEMPTY(b) (11 + (b))
#define DSW_PROD      13
#define DSW_OUT       14 // fused: among the output warpgroup's 128 threads

// Block: two warpgroups. The consumer (warps 0-3) holds S^T and runs the products and Delta; the
// producer (warps 4-7) fills the ring by cp.async (checking prepare's flags), copies each chunk's
// Sc and Dt out of the staging and publishes the done flags, so that the consumer's instruction
// stream is the chain alone (one warpgroup doing both issued an instruction every 3.4 cycles, ncu
// at 9653370, most of them addresses and copies).
//
// FUSE: the output products too (delta_tc.cu's output pass, then not launched), by a third
// warpgroup (warps 8-11). It copies each chunk's Q, P and gamma into the staging buffer beside Sc
// and Dt and, once the consumer has staged those, runs O [C tokens x 64 value rows] =
// scale (diag(gamma) Q Sc^T + P Delta) as m64n64k16 x (8 + 4) from the shared tiles, puts O in
// the buffer's Sc and Dt place and stores it by bulk copies (cp.async.bulk, a row of 256 bytes
// each). Sc and Dt never leave the multiprocessor, and the output work runs where the consumer's
// chain leaves the tensor cores idle most of the time. A warpgroup of its own because whatever
// the producer waits on delays the ring, and the chain with it: with the output in the producer's
// loop, its stores alone cost 0.2 ms at 32K (docs/gpu-results.md). 384 threads leave 168
// registers a thread, so the warpgroups trade them (setmaxnreg): the producer 40, the output 168,
// the consumer 232.
template <int ST, bool FUSE>
__global__ void __launch_bounds__(FUSE ? 384 : 256, 1)
    delta_state_wgmma(int T, int H, int dv, int nchunks, float scale, const bf16_t *q,
                      const bf16_t *k, tc_scratch sc, float *state, float *o, int ovar) {
#ifdef DSW_HAVE_WGMMA
    static_assert(ST >= 2 && ST <= 4, "barrier ids for four stages");
    typedef dsw_smem<ST, FUSE> L;
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
    auto stage_u = [&](int s) { return (bf16_t *)(stage_w(s) + 2 * L::TILE); };
    auto sbuf_s = [&](int bb) { return (bf16_t *)(base + L::STAGE * ST + bb * L::SBUF); };
    auto sbuf_d = [&](int bb) { return sbuf_s(bb) + DSW_BV * L::LS; };

    if (FUSE && threadIdx.x >= 256) { // ---------------------------------------- output (fused)
        // Copies in: Q as the producer copies K (rows lr + 8 i, 16-byte piece lc), P [C][C] piece
        // pc of rows pr + 16 j (sw128: rows 8 apart share a swizzle, so the shared offsets step by
        // 1024 and 2048 bytes), gamma by 16 threads. O goes out through the buffer's Sc and Dt
        // place as rows of 64 floats, padded to 68 so that the accumulators' stores hit distinct
        // banks: row r at byte 272 r.
        const unsigned ut = tid, lc = ut % 16, lr = ut / 16, pr = ut / 8, pc = ut % 8;
        const size_t kstep = (size_t)H * DSW_DK, nc0 = (size_t)n * nchunks;
        const bf16_t *Qt = q + (((size_t)b * T + lr) * H + hh) * DSW_DK + lc * 8;
        const bf16_t *Pt = sc.P + nc0 * TC_C * TC_C + pr * TC_C + pc * 8;
        const float *Gt = sc.GK + nc0 * 2 * TC_C + ut * 4;
        const uint32_t sb0 = abase + L::STAGE * ST;
        const uint32_t sqs = sb0 + L::QT + sw128_chunk(TC_C, lr, lc),
                       sps = sb0 + L::PT + sw128_chunk(TC_C, pr, pc), sgs = sb0 + L::GM + ut * 16;
        constexpr int LO = DSW_BV + 4; // O's row in the staging, floats
        static_assert(TC_C * LO * 4 <= L::QT, "O fits in the Sc and Dt place");
        // Q, P and gamma of chunk c into buffer bb, once prepare has written it (the producer
        // checks the same flag, but may not have reached chunk c yet); Q's rows past T zero
        auto issue_qp = [&](int c, int bb) {
            for (unsigned spins = 0; ld_relaxed(sc.ready + nc0 + c) == 0;) {
                __nanosleep(128);
                if (++spins > (1u << 26)) __trap();
            }
            const bf16_t *Q = Qt + (size_t)c * TC_C * kstep, *P = Pt + (size_t)c * TC_C * TC_C;
            const uint32_t qs = sqs + bb * L::SBUF, ps = sps + bb * L::SBUF;
            const int left = T - c * TC_C - (int)lr;
#pragma unroll
            for (int i = 0; i < TC_C / 8; i++) {
                if (8 * i < left)
                    cp_async16_s(qs + 1024 * i, Q + 8 * i * kstep);
                else
                    sts_zero16(qs + 1024 * i);
            }
#pragma unroll
            for (int j = 0; j < TC_C / 16; j++) cp_async16_s(ps + 2048 * j, P + 16 * j * TC_C);
            if (ut < TC_C / 4) cp_async16_s(sgs + bb * L::SBUF, Gt + (size_t)c * 2 * TC_C);
        };
        // Commit groups: one a chunk walked, chunk i's Q, P and gamma (empty in the warm-up and
        // past the end); chunk i + 2's go in once chunk i's products have read the buffer. So
        // at chunk i all but the newest group are in.
        for (int i = 0; i < 2; i++) {
            if (i < cnt && c0 + i >= lo) issue_qp(c0 + i, i);
            cp_async_commit();
        }
        for (int i = 0; i < cnt; i++) {
            const int bb = i & 1, m = c0 + i, row = warp * 16 + gid; // O rows row, row + 8
            const uint32_t sb = sb0 + bb * L::SBUF;
            cp_async_wait<1>();
            fence_proxy_async();          // the copies and zero stores, read next by wgmma
            bar_sync(DSW_SFULL(bb), 256); // the consumer staged Sc and Dt; every copy above is in
            if (m >= lo && ovar != 4) {
                float o1[32], o2[32];
                const uint64_t dS = wgmma_desc(sb + L::SC, 16, 1024),
                               dD = wgmma_desc(sb + L::DT, 16, 1024),
                               dQ = wgmma_desc(sb + L::QT, 16, 1024),
                               dP = wgmma_desc(sb + L::PT, 16, 1024);
                wgmma_fence();
#pragma unroll
                for (int ks = 0; ks < DSW_DK / 16; ks++) { // Q Sc^T: k16 steps over the keys
                    const uint64_t off = ((ks >> 2) * TC_C * 128 + (ks & 3) * 32) >> 4;
                    wgmma_ss_n64(o1, dQ + off, dS + off, ks > 0);
                }
#pragma unroll
                for (int ks = 0; ks < TC_C / 16; ks++) // P Delta: over the chunk's tokens
                    wgmma_ss_n64(o2, dP + ks * 2, dD + ks * 2, ks > 0);
                wgmma_commit();
                const float g0 = scale * lds_f(sb + L::GM + row * 4),
                            g1 = scale * lds_f(sb + L::GM + (row + 8) * 4);
                wgmma_wait<0>();
                wgmma_fence_regs<32>(o1);
                wgmma_fence_regs<32>(o2);
                // O into the Sc and Dt place (the products have read it), then out by rows
                if (ovar == 3) { // variant: straight from the registers
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
                } else
#pragma unroll
                    for (int j = 0; j < DSW_BV / 8; j++) {
                        sts_f2(sb + (row * LO + 8 * j + 2 * tig) * 4,
                               g0 * o1[4 * j] + scale * o2[4 * j],
                               g0 * o1[4 * j + 1] + scale * o2[4 * j + 1]);
                        sts_f2(sb + ((row + 8) * LO + 8 * j + 2 * tig) * 4,
                               g1 * o1[4 * j + 2] + scale * o2[4 * j + 2],
                               g1 * o1[4 * j + 3] + scale * o2[4 * j + 3]);
                    }
                fence_proxy_async(); // read next by the bulk copies
                bar_sync(DSW_OUT, 128);
                const int t = m * TC_C + tid;
                if (ovar == 2) { // variant: 16-byte stores, a row by 16 threads
#pragma unroll
                    for (int x = 0; x < TC_C * DSW_BV / 4 / 128; x++) {
                        const int r = x * 8 + tid / 16, cc = tid % 16 * 4;
                        if (m * TC_C + r < T)
                            *(float4 *)(o + (((size_t)b * T + m * TC_C + r) * H + hh) * dv + bv0 +
                                        cc) = lds_f4(sb + (r * LO + cc) * 4);
                    }
                    bar_sync(DSW_OUT, 128);
                } else if (ovar != 1 && ovar != 3 && tid < TC_C && t < T) {
                    bulk_store(o + (((size_t)b * T + t) * H + hh) * dv + bv0, sb + tid * LO * 4,
                               DSW_BV * 4);
                    bulk_commit();
                    bulk_wait_read(); // the place is the consumer's again after this
                }
            }
            if (i + 2 < cnt) {
                bar_arrive(DSW_SEMPTY(bb), 256);
                if (m + 2 >= lo) issue_qp(m + 2, bb);
            }
            cp_async_commit();
        }
        cp_async_wait<0>();
        bulk_wait(); // o written before the block ends
        return;
    }
    if (threadIdx.x >= 128) { // ---------------------------------------------- producer
        if (FUSE) setmaxnreg_dec<40>();
        // Every address below is a per-thread base, set once, plus a chunk's stride and constant
        // offsets (ncu at 0ca8b73: index arithmetic redone per copy made this side 408
        // instructions a warp a chunk, and the consumer waited on it half the time). Copies in:
        // W and K, 16-byte chunk lc of rows lr + 8 i (rows 8 apart share their swizzle, so the
        // shared offsets step by 1024 bytes); U, piece uc of rows ur + 16 j; GK, 32 threads.
        // Copies out: Sc rows lr + 8 i, Dt rows ur + 16 j, the same pieces.
        const unsigned ut = tid, lc = ut % 16, lr = ut / 16, ur = ut / 8, uc = ut % 8 * 8;
        const size_t kstep = (size_t)H * DSW_DK, nc0 = (size_t)n * nchunks; // kstep: a token of k
        const bf16_t *Wt = sc.W + nc0 * TC_C * DSW_DK + lr * DSW_DK + lc * 8;
        const bf16_t *Kt = k + (((size_t)b * T + lr) * H + hh) * DSW_DK + lc * 8;
        const bf16_t *Ut = sc.U + nc0 * TC_C * dv + (size_t)ur * dv + bv0 + uc;
        const float *Gt = sc.GK + nc0 * 2 * TC_C + ut * 4;
        bf16_t *St = sc.Sc + (nc0 * dv + bv0 + lr) * DSW_DK + lc * 8;
        bf16_t *Dtt = sc.Dt + (nc0 * dv + bv0 + ur) * TC_C + uc;
        // this thread's pieces of stage 0 (W, U, GK) and of the staging (Sc, Dt)
        const uint32_t sws = abase + sw128_chunk(TC_C, lr, lc);
        const uint32_t sus = abase + 2 * L::TILE + (ur * L::LU + uc) * 2;
        const uint32_t sgs = abase + 2 * L::TILE + L::UB + ut * 16;
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
            const bf16_t *W = Wt + (size_t)c * (TC_C * DSW_DK), *K = Kt + (size_t)c * TC_C * kstep;
            const bf16_t *U = Ut + (size_t)c * TC_C * dv;
            const uint32_t ws = sws + s * L::STAGE, ks = ws + L::TILE, us = sus + s * L::STAGE;
            const int left = T - c * TC_C - (int)lr; // rows lr + 8 i < left are in the sequence
#pragma unroll
            for (int i = 0; i < TC_C / 8; i++) {
                cp_async16_s(ws + 1024 * i, W + 8 * i * DSW_DK);
                if (8 * i < left)
                    cp_async16_s(ks + 1024 * i, K + 8 * i * kstep);
                else // rows past T: zero (0 x garbage could be NaN)
                    sts_zero16(ks + 1024 * i);
            }
#pragma unroll
            for (int j = 0; j < TC_C / 16; j++)
                cp_async16_s(us + 16 * j * L::LU * 2, U + (size_t)16 * j * dv);
            if (ut < 2 * TC_C / 4) cp_async16_s(sgs + s * L::STAGE, Gt + (size_t)c * 2 * TC_C);
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
#pragma unroll
        for (int s = 0; s < ST - 1; s++) {
            if (s < cnt) issue(c0 + s, s);
            cp_async_commit();
        }
        for (int i = 0; i < cnt; i++) {
            cp_async_wait<ST - 2>(); // chunk c0 + i is in
            fence_proxy_async();     // its cp.async and zero stores, read next by wgmma
            bar_arrive(DSW_FULL(i % ST), 256);
            if (!FUSE && i >= 1) store_out(i - 1);
            const int in = i + ST - 1; // into the stage chunk i - 1 used, once the consumer is done
            if (in < cnt) {
                if (in >= ST) bar_sync(DSW_EMPTY(in % ST), 256);
                issue(c0 + in, in % ST);
            }
            cp_async_commit();
        }
        if (!FUSE) store_out(cnt - 1);
        cp_async_wait<0>();
        return;
    }
    if (FUSE) setmaxnreg_inc<232>();

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
        const uint64_t dW = wgmma_desc(aw, 16, 1024), dK = wgmma_desc(ak, TC_C * 128, 1024);

        // S^T as bf16 A fragments: k16 step ks is n8 blocks 2 ks, 2 ks + 1 of the accumulator
        uint32_t ah[DSW_DK / 16][4];
#pragma unroll
        for (int ks = 0; ks < DSW_DK / 16; ks++) {
            ah[ks][0] = pack_bf16(h[8 * ks], h[8 * ks + 1]);
            ah[ks][1] = pack_bf16(h[8 * ks + 2], h[8 * ks + 3]);
            ah[ks][2] = pack_bf16(h[8 * ks + 4], h[8 * ks + 5]);
            ah[ks][3] = pack_bf16(h[8 * ks + 6], h[8 * ks + 7]);
        }
        // D = S^T W^T [64 rows x C tokens]
        wgmma_fence();
#pragma unroll
        for (int ks = 0; ks < DSW_DK / 16; ks++)
            wgmma_rs_n64(d, ah[ks], dW + (((ks >> 2) * TC_C * 128 + (ks & 3) * 32) >> 4), ks > 0);
        wgmma_commit();
        // while the products run: U^T of the warp's rows in the accumulators' layout (ldmatrix
        // .trans of the token-major stage: uf[jj][0..1] are U^T's n8 block 2 jj, uf[jj][2..3]
        // block 2 jj + 1, bf16 pairs with token 2 tig in the low half), ks and gamma_last, and
        // Sc into the staging (once the producer has emptied it)
        const bf16_t *us = stage_u(s);
        uint32_t uf[TC_C / 16][4];
#pragma unroll
        for (int jj = 0; jj < TC_C / 16; jj++)
            ldmatrix_x4_trans(uf[jj], us + (jj * 16 + (lane >> 4) * 8 + (lane & 7)) * L::LU +
                                          warp * 16 + ((lane >> 3) & 1) * 8);
        const uint32_t agk = abase + s * L::STAGE + 2 * L::TILE + L::UB;
        float2 kk[TC_C / 8];
#pragma unroll
        for (int j = 0; j < TC_C / 8; j++) kk[j] = lds_f2(agk + (TC_C + j * 8 + 2 * tig) * 4);
        const float gl = lds_f(agk + (TC_C - 1) * 4);
        if (i >= 2) bar_sync(DSW_SEMPTY(bb), 256);
        // this lane's rows in the staging: padded rows, or (fused) sw128 tiles, where the 16-byte
        // piece 2 ks + (lane >> 4) of row mr is at sw128_chunk
        bf16_t *sts = sbuf_s(bb) + mr * L::LS + mc, *dts = sbuf_d(bb) + mr * L::LD + mc;
        unsigned char *sb = base + L::STAGE * ST + bb * L::SBUF;
#pragma unroll
        for (int ks = 0; ks < DSW_DK / 16; ks++) {
            if constexpr (FUSE)
                stmatrix_x4(sb + L::SC + sw128_chunk(DSW_BV, mr, 2 * ks + (lane >> 4)), ah[ks]);
            else
                stmatrix_x4(sts + ks * 16, ah[ks]);
        }
        wgmma_wait<0>();
        wgmma_fence_regs<32>(d);

        // Delta^T = U^T - D into the staging; scaled by ks, the A fragments of the update
        uint32_t ad[TC_C / 16][4], dq[TC_C / 16][4];
#pragma unroll
        for (int j = 0; j < TC_C / 8; j++) {
            const uint32_t ulo = uf[j >> 1][(j & 1) * 2], uhi = uf[j >> 1][(j & 1) * 2 + 1];
            const float x0 = __uint_as_float(ulo << 16) - d[4 * j];
            const float x1 = __uint_as_float(ulo & 0xffff0000u) - d[4 * j + 1];
            const float x2 = __uint_as_float(uhi << 16) - d[4 * j + 2];
            const float x3 = __uint_as_float(uhi & 0xffff0000u) - d[4 * j + 3];
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
            if constexpr (FUSE)
                stmatrix_x4(sb + L::DT + sw128_chunk(DSW_BV, mr, 2 * q + (lane >> 4)), dq[q]);
            else
                stmatrix_x4(dts + q * 16, dq[q]);
        }
        if (FUSE) fence_proxy_async();  // read next by the output warpgroup's wgmma
        bar_arrive(DSW_SFULL(bb), 256); // the staging holds chunk c's Sc and Dt
        wgmma_wait<0>();                // h is read next; ad and the stage untouched until then
        wgmma_fence_regs<64>(h);
        if (i + ST < cnt) bar_arrive(DSW_EMPTY(s), 256);
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
        gpu_sm90a_usable("MIXSCOPE_DELTA_WGMMA", (const void *)delta_state_wgmma<4, false>);
    return usable;
}

template <int ST, bool FUSE>
static int dsw_launch(int T, int H, int N, int dv, int nchunks, float scale, const bf16_t *q,
                      const bf16_t *k, tc_scratch sc, float *state, float *o, cudaStream_t stream,
                      err *e) {
    const int bytes = dsw_smem<ST, FUSE>::BYTES;
    CUDA_TRY(cudaFuncSetAttribute(delta_state_wgmma<ST, FUSE>,
                                  cudaFuncAttributeMaxDynamicSharedMemorySize, bytes),
             "gpu delta prefill: shared memory (wgmma state pass)");
    delta_state_wgmma<ST, FUSE><<<dim3(dv / DSW_BV, N, sc.nseg), FUSE ? 384 : 256, bytes, stream>>>(
        T, H, dv, nchunks, scale, q, k, sc, state, o,
        getenv("MIXSCOPE_DELTA_OVAR") ? atoi(getenv("MIXSCOPE_DELTA_OVAR")) : 0);
    CUDA_LAUNCHED("gpu delta prefill: state pass (wgmma)");
    return 0;
}

int delta_state_wgmma_launch(int T, int H, int N, int dv, int nchunks, int st, int fuse,
                             float scale, const bf16_t *q, const bf16_t *k, tc_scratch sc,
                             float *state, float *o, cudaStream_t stream, err *e) {
    if (dv % DSW_BV != 0)
        return err_set(e, "gpu delta prefill (wgmma state pass): dv=%d not a multiple of %d", dv,
                       DSW_BV);
#define DSW_GO(ST, F) dsw_launch<ST, F>(T, H, N, dv, nchunks, scale, q, k, sc, state, o, stream, e)
    if (fuse) return DSW_GO(3, true);
    return st == 2 ? DSW_GO(2, false) : st == 3 ? DSW_GO(3, false) : DSW_GO(4, false);
#undef DSW_GO
}
