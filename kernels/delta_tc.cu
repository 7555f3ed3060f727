// delta_tc.cu: the chunked gated delta rule on the tensor cores, for bf16 inputs (spec
// delta-family.md §2.5, Kaczmarz through §8.5). The fp32 kernels of delta.cu stay the exact path;
// this one is what gpu_delta_prefill runs for bf16 q/k/v with chunk 64, dk in {64, 128} and
// dv in {64, 128}, and it follows fla's chunk_gated_delta_rule_fwd in what it rounds to bf16:
// the products run as bf16 x bf16 -> fp32 (mma.sync m16n8k16), the state stays fp32 in registers
// and is rounded to bf16 only as an operand.
//
// Per head n and chunk c of C = 64 tokens (G = chunk-local cumsum of g, gamma_i = exp(G_i),
// kc_i = 1 or, for Kaczmarz, (|k_i|^2 + eps)^-1/2, which rescales k and v of token i):
//   delta_tc_prep   all chunks in parallel:
//       M_ij = beta_i kc_i kc_j (k_i.k_j) exp(G_i - G_j) (i > j);  A = (I + M)^-1
//       W = A diag(beta kc gamma) K;  U = A diag(beta kc) V       (bf16 [C, dk], [C, dv])
//       P_ij = kc_j (q_i.k_j) exp(G_i - G_j) (i >= j)              (bf16 [C, C])
//       gamma_i and ks_i = kc_i exp(G_last - G_i)                  (fp32 [2C])
//   delta_tc_state  per head and value slice of BV columns, chunks in order:
//       Sc = S^T (bf16 [dv, dk]);  Delta = U - W S (bf16, stored as Delta^T [dv, C]);
//       S <- gamma_last S + K^T diag(ks) Delta
//   delta_tc_out    all chunks in parallel:  O = scale (diag(gamma) Q Sc^T + P Delta)
// The state pass holds S^T (value rows x key columns) as mma accumulators: the C fragments of
// two neighbouring key blocks are the A fragment of the next product, so S never leaves the
// registers between chunks; each row group's key columns are split over KS warps. Rows past T are
// zero (beta = 0, g = 0), so a last partial chunk needs no special case. The three kernels run
// side by side, handing chunks over through flags in the scratch (launch_tc). On Hopper, for
// dk = 128, the state pass is delta_state_wgmma.cu's instead (the same arithmetic on warpgroup
// products, 1.3x faster end to end at 128K; MIXSCOPE_DELTA_WGMMA=0 keeps this one), and where a
// gate is (gdn, kaczmarz) the default is its fused form: prepare writes only AU = A diag(beta kc)
// and the decays, and the state blocks form W S, U and the output themselves, in segments that
// fill the machine (2.2x faster for gdn at 32K and 128K, 16 heads; MIXSCOPE_DELTA_FUSED=0 keeps
// the three kernels). Measured on the H200: docs/gpu-results.md.
#include <cuda_bf16.h>
#include <algorithm>
#include <cuda_runtime.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>

#include "delta_state_wgmma.cuh"
#include "delta_tc.cuh"
#include "delta_tc_shared.cuh"
#include "gpu_common.cuh"
#include "mma.cuh"

#define TC_BV            32 // value columns of a state-pass block (two row groups of 16)
#define TC_FUSED_DEFAULT 1  // the fused form by default where a gate is (launch_tc)

static size_t tc_bf16_per_chunk(int dk, int dv) {
    return (size_t)TC_C * dk + (size_t)TC_C * dv + (size_t)TC_C * TC_C + (size_t)dv * dk +
           (size_t)dv * TC_C;
}

extern "C" int delta_tc_supported(int dk, int dv, int chunk, int bf16) {
    return bf16 && chunk == TC_C && (dk == 64 || dk == 128) && (dv == 64 || dv == 128);
}

extern "C" size_t delta_tc_scratch_bytes(int B, int T, int H, int dk, int dv) {
    size_t N = (size_t)B * H, per = N * ((T + TC_C - 1) / TC_C);
    return per * (tc_bf16_per_chunk(dk, dv) * 2 + (2 * TC_C + 1) * sizeof(float) + sizeof(int)) +
           N * dk * dv * sizeof(float) + N * (dv / TC_BV) * TC_CP_MAX * sizeof(int) + 1024;
}

// N heads of nchunks chunks: the per-chunk arrays, then GK, lb, state0 [N][dk][dv] and the flags
static tc_scratch tc_layout(void *scratch, int N, int nchunks, int dk, int dv) {
    const size_t NC = (size_t)N * nchunks;
    tc_scratch s;
    s.W = (bf16_t *)scratch;
    s.U = s.W + NC * TC_C * dk;
    s.P = s.U + NC * TC_C * dv;
    s.Sc = s.P + NC * TC_C * TC_C;
    s.Dt = s.Sc + NC * dv * dk;
    s.AU = s.W, s.GC = (float *)s.U; // the fused form's, in place of W and U (tc_scratch)
    uintptr_t f = (uintptr_t)(s.Dt + NC * dv * TC_C);
    s.GK = (float *)((f + 255) & ~(uintptr_t)255);
    s.lb = s.GK + NC * 2 * TC_C;
    f = (uintptr_t)(s.lb + NC);
    s.state0 = (float *)((f + 255) & ~(uintptr_t)255);
    s.ready = (int *)(s.state0 + (size_t)N * dk * dv);
    s.done = s.ready + NC;
    s.nseg = 1, s.seglen = nchunks;
    s.trace = NULL;
    return s;
}

// ---------------------------------------------------------------- prepare

#define TC_LOG2E 1.4426950408889634f

// d[nt] = A B for 16 rows of A (fp32, leading dimension lda, from its first row) over K and the
// 8 NT columns of B (fp32, ldb, from its first column), by tf32 mma.sync m16n8k8: the products of
// prepare's blocked inverse
template <int K, int NT>
__device__ __forceinline__ void tf32_rows16(float (*d)[4], const float *A, int lda, const float *B,
                                            int ldb, int gid, int tig) {
#pragma unroll
    for (int nt = 0; nt < NT; nt++) d[nt][0] = d[nt][1] = d[nt][2] = d[nt][3] = 0.0f;
#pragma unroll
    for (int ks = 0; ks < K / 8; ks++) {
        const float *ar = A + gid * lda + 8 * ks + tig;
        const uint32_t af[4] = {to_tf32(ar[0]), to_tf32(ar[8 * lda]), to_tf32(ar[4]),
                                to_tf32(ar[8 * lda + 4])};
#pragma unroll
        for (int nt = 0; nt < NT; nt++) {
            const float *br = B + (8 * ks + tig) * ldb + 8 * nt + gid;
            const uint32_t bf[2] = {to_tf32(br[0]), to_tf32(br[4 * ldb])};
            mma_tf32(d[nt], af, bf);
        }
    }
}

// grid (N, slots), 128 threads: warp w owns rows 16 w .. 16 w + 15 of every C x C and C x d
// product. Shared (bf16 rows padded by 8 so that ldmatrix rows hit distinct banks):
// K [C][DK+8], Q [C][DK+8] (later M fp32 [C][C+4], later V [C][DV+8]: V's rows go into L2 at the
// start and into Q's place once M is dead, which leaves room for 4 blocks a multiprocessor; 6a0a825
// timed it the same as 3 with a place of its own), AW, AU [C][C+8], then fp32 G, beta, kc and the
// tokens' norm terms [C].
// FUSED: no Q or V, so M alone in Q's place; A (fp32) in K's place, dead once K K^T is in
// registers (dk = 128): 36 KB, so that registers, not shared memory, bound the blocks.
template <int DK, int DV, bool FUSED = false> struct prep_smem {
    static constexpr int LK = DK + 8, LV = DV + 8, LA = TC_C + 8, LM = TC_C + 4, LT = TC_C + 4;
    static constexpr size_t QK = (size_t)TC_C * LK * 2, QMM = (size_t)TC_C * LM * 4,
                            VB = (size_t)TC_C * LV * 2;
    static constexpr size_t QM0 = QK > QMM ? QK : QMM;
    static constexpr size_t QM = FUSED ? QMM : (VB > QM0 ? VB : QM0);
    static constexpr bool AT_IN_K = FUSED && (size_t)TC_C * LT * 4 <= (size_t)TC_C * LK * 2;
    static constexpr size_t AWB = AT_IN_K ? 0 : 2 * (size_t)TC_C * LA * 2;
    static constexpr size_t bytes = (size_t)TC_C * LK * 2 + QM + AWB + 4 * TC_C * 4;
};

// FUSED (the fused form, tc_scratch): only what the state block cannot form itself, AU and GC,
// beside GK and lb; no Q, V, P, W or U. Blocks a multiprocessor: 4 (128 registers at most), 5 when
// FUSED (96, no spills; 6 at 80 spilled 8 bytes for gdn and timed no better: gpu-results.md).
template <int DK, int DV, bool KACZ, bool FUSED>
__global__ void __launch_bounds__(128, FUSED ? 5 : 4)
    delta_tc_prep(int T, int H, int nchunks, float eps, const bf16_t *q, const bf16_t *k,
                  const bf16_t *v, const float *g, const float *beta, tc_scratch sc) {
    typedef prep_smem<DK, DV, FUSED> L;
    extern __shared__ __align__(16) unsigned char smem[];
    bf16_t *Ks = (bf16_t *)smem;
    bf16_t *Qs = (bf16_t *)(smem + (size_t)TC_C * L::LK * 2);
    float *Ms = (float *)Qs; // Q is dead once Q K^T is in registers
    bf16_t *Vs = Qs;         // and M once the inverse's corner has read it
    bf16_t *AW = (bf16_t *)((unsigned char *)Qs + L::QM), *AU = AW + TC_C * L::LA;
    float *Gs = (float *)((unsigned char *)AW + L::AWB), *Bs = Gs + TC_C, *Cs = Bs + TC_C,
          *Es = Cs + TC_C;

    // grid (N, slots): blocks go out head-fastest, so the early chunks of every head come first
    // (and with segments, the early chunks of every segment: tc_prep_chunk)
    const int n = blockIdx.x, c = tc_prep_chunk(blockIdx.y, nchunks, sc.nseg, sc.seglen);
    if (c < 0) return;
    const int b = n / H, hh = n % H;
    const int tid = threadIdx.x, warp = tid >> 5, lane = tid & 31, gid = lane >> 2, tig = lane & 3;
    const size_t nc = (size_t)n * nchunks + c;
    const int t0 = c * TC_C;
    if (tid == 0) tc_trace(sc.trace, 0, 0);

    // inputs of the chunk; rows past T are zero. A thread copies the same 16-byte piece of rows
    // r0, r0 + RS, ... (a base pointer and a constant stride: ncu at 6a0a825 had index arithmetic
    // of the copies at 11% of the samples)
    constexpr int PK = DK / 8, RS = 128 / PK, PV = DV / 8, RV = 128 / PV;
    static_assert(TC_C % RS == 0 && TC_C % RV == 0, "copy pieces");
    const int kr0 = tid / PK, kcol = (tid % PK) * 8, vr0 = tid / PV, vcol = (tid % PV) * 8;
    const size_t row0 = (size_t)b * T + t0; // token t0 of sequence b
    {
        const bf16_t *kp = k + ((row0 + kr0) * H + hh) * DK + kcol;
        const bf16_t *qp = q + ((row0 + kr0) * H + hh) * DK + kcol;
#pragma unroll
        for (int it = 0; it < TC_C / RS; it++) {
            const int r = kr0 + RS * it;
            const size_t off = (size_t)RS * it * H * DK;
            if (t0 + r < T) {
                cp_async16(Ks + r * L::LK + kcol, kp + off);
                if (!FUSED) cp_async16(Qs + r * L::LK + kcol, qp + off);
            } else {
                *(uint4 *)(Ks + r * L::LK + kcol) = make_uint4(0, 0, 0, 0);
                if (!FUSED) *(uint4 *)(Qs + r * L::LK + kcol) = make_uint4(0, 0, 0, 0);
            }
        }
    }
    const bf16_t *vp = v + ((row0 + vr0) * H + hh) * DV + vcol;
    auto load_v = [&]() {
#pragma unroll
        for (int it = 0; it < TC_C / RV; it++) {
            const int r = vr0 + RV * it;
            if (t0 + r < T)
                cp_async16(Vs + r * L::LV + vcol, vp + (size_t)RV * it * H * DV);
            else
                *(uint4 *)(Vs + r * L::LV + vcol) = make_uint4(0, 0, 0, 0);
        }
    };
    if (!FUSED) { // V's rows into L2 now, into shared memory once M is dead
        constexpr int LINES = DV * 2 / 128 > 0 ? DV * 2 / 128 : 1; // 128-byte lines a row
        for (int i = tid; i < TC_C * LINES; i += 128) {
            const int r = i / LINES;
            if (t0 + r < T)
                asm volatile("prefetch.global.L2 [%0];" ::"l"(v + ((row0 + r) * H + hh) * DV +
                                                              (i % LINES) * 64));
        }
    }
    cp_async_commit();
    if (tid < TC_C) {
        const int t = t0 + tid;
        const size_t th = ((size_t)b * T + t) * H + hh;
        Gs[tid] = (g && t < T) ? g[th] * TC_LOG2E : 0.0f; // log2 domain: exp2 below
        Bs[tid] = t < T ? beta[th] : 0.0f;
    }
    __syncthreads();
    if (warp == 0) { // inclusive cumsum of g (log2 e) over the chunk, two tokens per lane
        const float g0 = Gs[2 * lane], g1 = Gs[2 * lane + 1];
        float x = g0 + g1;
#pragma unroll
        for (int off = 1; off < 32; off <<= 1) {
            const float y = __shfl_up_sync(0xffffffffu, x, off);
            if (lane >= off) x += y;
        }
        __syncwarp();
        Gs[2 * lane] = x - g1, Gs[2 * lane + 1] = x;
    }
    cp_async_wait<0>();
    __syncthreads();
    if (!KACZ && tid < TC_C) Cs[tid] = 1.0f; // Kaczmarz's kc: from K K^T's diagonal, below

    // K K^T and Q K^T for the warp's 16 rows (8 column blocks of 8 tokens each)
    float kk[8][4], qk[8][4];
#pragma unroll
    for (int j = 0; j < 8; j++)
#pragma unroll
        for (int e = 0; e < 4; e++) kk[j][e] = qk[j][e] = 0.0f;
    {
        uint32_t ak[DK / 16][4], aq[DK / 16][4];
#pragma unroll
        for (int kb = 0; kb < DK / 16; kb++) {
            ldmatrix_x4(ak[kb], frag_a(Ks, L::LK, warp * 16, kb * 16, lane));
            if (!FUSED) ldmatrix_x4(aq[kb], frag_a(Qs, L::LK, warp * 16, kb * 16, lane));
        }
        auto bk = [&](int kb, int np) { return frag_b_nk(Ks, L::LK, np * 16, kb * 16, lane); };
        mma_sweep<DK / 16, 4, false>(
            kk, [&](int kb) { return (const uint32_t *)ak[kb]; }, bk);
        if (!FUSED)
            mma_sweep<DK / 16, 4, false>(
                qk, [&](int kb) { return (const uint32_t *)aq[kb]; }, bk);
    }
    if (KACZ) // kc_i = (|k_i|^2 + eps)^-1/2 from the bf16 key, as gpu_kaczmarz_rescale: |k_i|^2 is
              // K K^T's diagonal (16 rows a warp, each a warp reduction before: 1 us a block)
#pragma unroll
        for (int j = 0; j < 8; j++)
#pragma unroll
            for (int e = 0; e < 4; e++) {
                const int i = warp * 16 + gid + (e >> 1) * 8, jj = j * 8 + 2 * tig + (e & 1);
                if (i == jj) Cs[i] = rsqrtf(kk[j][e] + eps);
            }
    __syncthreads(); // every warp is done with Q (and Cs is written): M overwrites it

    // M and P. The 16 key columns jj = 8 j + 2 tig + e of this thread: their G and kc once, in
    // registers (ncu at 6a0a825: this loop reloaded them per element and was 32% of the samples,
    // most of it waiting on those loads and on __expf's range fix-up)
    bf16_t *P = sc.P + nc * TC_C * TC_C;
    float gj[8][2], cj[8][2];
#pragma unroll
    for (int j = 0; j < 8; j++)
#pragma unroll
        for (int e = 0; e < 2; e++)
            gj[j][e] = Gs[j * 8 + 2 * tig + e], cj[j][e] = Cs[j * 8 + 2 * tig + e];
#pragma unroll
    for (int half = 0; half < 2; half++) {
        const int i = warp * 16 + gid + half * 8;
        const float Gi = Gs[i], bi = Bs[i] * Cs[i];
#pragma unroll
        for (int j = 0; j < 8; j++) {
            float pv[2];
#pragma unroll
            for (int e = 0; e < 2; e++) {
                const int jj = j * 8 + 2 * tig + e;
                const float dec = i >= jj ? ex2(Gi - gj[j][e]) : 0.0f;
                Ms[i * L::LM + jj] = i > jj ? bi * cj[j][e] * kk[j][half * 2 + e] * dec : 0.0f;
                if (i == jj) // log2 |I - beta kc^2 k k^T| = log2 max(1, |1 - beta kc^2 |k|^2|)
                    Es[i] = __log2f(fmaxf(1.0f, fabsf(1.0f - bi * cj[j][e] * kk[j][half * 2 + e])));
                pv[e] = cj[j][e] * qk[j][half * 2 + e] * dec;
            }
            if (!FUSED) *(uint32_t *)(P + i * TC_C + j * 8 + 2 * tig) = pack_bf16(pv[0], pv[1]);
        }
    }
    __syncthreads();

    // A = (I + M)^-1, unit lower triangular, by blocks. The four Q4 x Q4 diagonal blocks (Q4 =
    // C / 4) by forward substitution side by side (thread c < C owns column c % Q4 of block c / Q4,
    // kept in registers; four partial sums shorten the dependent chain), then two merges, each
    //   [X11 0; X21 X22]^-1 = [Y11 0; Y21 Y22],  Y21 = -Y22 (X21 Y11):
    // Q4 -> H2 (both halves at once, a warp a half and eight columns) and H2 -> C (a warp 16 rows
    // and 16 columns), the products by tf32 mma.sync with fp32 accumulators (ncu at e0f3ece: the
    // 32 x 32 substitution and the corner's two products on the CUDA cores were 35% of the
    // samples). fla bc3b101's solve_tril runs its merges in fp32 by default (FLA_TRIL_PRECISION
    // ieee; tf32 and tf32x3 on request): tf32's rounding (2^-11) lies under the bf16 rounding of A
    // into AW and AU that follows (2^-9), which fla does too, and test_gpu's correlated keys give
    // the same error both ways (docs/gpu-results.md). A lives in fp32 where AW and AU go
    // afterwards.
    constexpr int Q4 = TC_C / 4, H2 = TC_C / 2, LT = TC_C + 4;
    float *At = L::AT_IN_K ? (float *)Ks : (float *)AW; // [C][LT] fp32: in AW and AU, or K
    static_assert(L::AT_IN_K || (size_t)TC_C * LT * 4 <= 2 * (size_t)TC_C * L::LA * 2, "A's place");
    if (tid < TC_C) {
        const int blk = tid / Q4, cc = tid % Q4, off = blk * Q4;
        float col[Q4];
#pragma unroll
        for (int i = 0; i < Q4; i++) {
            const float *mi = Ms + (off + i) * L::LM + off;
            float s0 = i == cc ? 1.0f : 0.0f, s1 = 0.0f, s2 = 0.0f, s3 = 0.0f;
#pragma unroll
            for (int j = 0; j + 3 < i; j += 4) {
                const float4 m4 = *(const float4 *)(mi + j);
                s0 -= m4.x * col[j], s1 -= m4.y * col[j + 1];
                s2 -= m4.z * col[j + 2], s3 -= m4.w * col[j + 3];
            }
#pragma unroll
            for (int j = i & ~3; j < i; j++) s0 -= mi[j] * col[j];
            col[i] = (s0 + s1) + (s2 + s3);
        }
#pragma unroll
        for (int i = 0; i < Q4; i++) {
            float *row = At + (off + i) * LT;
            row[off + cc] = col[i];
            if (!(blk & 1)) row[off + Q4 + cc] = 0.0f; // above the next block, within the half
            if (blk < 2) row[H2 + cc] = row[H2 + Q4 + cc] = 0.0f; // A12
        }
    }
    __syncthreads();
    // Y21 of every merge: d = A B (16 rows x 8 NT columns over K), then d (times sign) into At
    auto put = [&](float(*d)[4], float *dst, int nt_count, float sign) {
        for (int nt = 0; nt < nt_count; nt++) {
            float *o = dst + gid * LT + 8 * nt + 2 * tig;
            *(float2 *)o = make_float2(sign * d[nt][0], sign * d[nt][1]);
            *(float2 *)(o + 8 * LT) = make_float2(sign * d[nt][2], sign * d[nt][3]);
        }
    };
    {
        const int h = warp >> 1, c0 = 32 * h, n0 = 8 * (warp & 1); // Q4 -> H2
        float y[1][4];
        float *y21 = At + (c0 + Q4) * LT + c0 + n0;
        tf32_rows16<Q4, 1>(y, Ms + (c0 + Q4) * L::LM + c0, L::LM, At + c0 * LT + c0 + n0, LT, gid,
                           tig); // X21 Y11
        put(y, y21, 1, 1.0f);
        __syncthreads();
        tf32_rows16<Q4, 1>(y, At + (c0 + Q4) * LT + c0 + Q4, LT, y21, LT, gid, tig);
        __syncthreads(); // every thread has read X21 Y11
        put(y, y21, 1, -1.0f);
        __syncthreads();
    }
    {
        const int wr = 16 * (warp >> 1), wc = 16 * (warp & 1); // H2 -> C
        float y[2][4];
        float *y21 = At + (H2 + wr) * LT + wc;
        tf32_rows16<H2, 2>(y, Ms + (H2 + wr) * L::LM, L::LM, At + wc, LT, gid, tig); // M21 A11
        put(y, y21, 2, 1.0f);
        __syncthreads();
        if (!FUSED) load_v(); // every thread is past its last read of M: V takes its place
        cp_async_commit();
        tf32_rows16<H2, 2>(y, At + (H2 + wr) * LT + H2, LT, At + H2 * LT + wc, LT, gid, tig);
        __syncthreads(); // every thread has read M21 A11
        put(y, y21, 2, -1.0f);
    }
    __syncthreads();
    {
        // AW = A diag(beta kc gamma), AU = A diag(beta kc) in bf16, over the fp32 A they replace:
        // thread: column cc, rows i0, i0 + 2, ... (read all first, then write)
        const int cc = tid % TC_C, i0 = tid / TC_C;
        float a[TC_C / 2];
#pragma unroll
        for (int r = 0; r < TC_C / 2; r++) a[r] = At[(i0 + 2 * r) * LT + cc];
        const float su = Bs[cc] * Cs[cc], sw = su * ex2(Gs[cc]);
        __syncthreads();
        if (FUSED) { // AU alone, straight out: a row's 64 columns by 64 threads
            bf16_t *au = sc.AU + nc * TC_C * TC_C;
#pragma unroll
            for (int r = 0; r < TC_C / 2; r++)
                au[(i0 + 2 * r) * TC_C + cc] = __float2bfloat16_rn(a[r] * su);
        } else {
#pragma unroll
            for (int r = 0; r < TC_C / 2; r++) {
                AW[(i0 + 2 * r) * L::LA + cc] = __float2bfloat16_rn(a[r] * sw);
                AU[(i0 + 2 * r) * L::LA + cc] = __float2bfloat16_rn(a[r] * su);
            }
        }
    }
    __syncthreads();

    // W = AW K and U = AU V for the warp's 16 rows; K and V are K-major: ldmatrix .trans
    if (!FUSED) {
        float acc[DK / 8][4];
#pragma unroll
        for (int j = 0; j < DK / 8; j++) acc[j][0] = acc[j][1] = acc[j][2] = acc[j][3] = 0.0f;
        uint32_t a[TC_C / 16][4];
#pragma unroll
        for (int kb = 0; kb < TC_C / 16; kb++)
            ldmatrix_x4(a[kb], frag_a(AW, L::LA, warp * 16, kb * 16, lane));
        mma_sweep<TC_C / 16, DK / 16, true>(
            acc, [&](int kb) { return (const uint32_t *)a[kb]; },
            [&](int kb, int np) { return frag_a(Ks, L::LK, kb * 16, np * 16, lane); });
        bf16_t *W = sc.W + nc * TC_C * DK;
        const int i0 = warp * 16 + gid;
#pragma unroll
        for (int j = 0; j < DK / 8; j++) {
            *(uint32_t *)(W + i0 * DK + j * 8 + 2 * tig) = pack_bf16(acc[j][0], acc[j][1]);
            *(uint32_t *)(W + (i0 + 8) * DK + j * 8 + 2 * tig) = pack_bf16(acc[j][2], acc[j][3]);
        }
    }
    cp_async_wait<0>(); // V is in
    __syncthreads();
    if (!FUSED) {
        float acc[DV / 8][4];
#pragma unroll
        for (int j = 0; j < DV / 8; j++) acc[j][0] = acc[j][1] = acc[j][2] = acc[j][3] = 0.0f;
        uint32_t a[TC_C / 16][4];
#pragma unroll
        for (int kb = 0; kb < TC_C / 16; kb++)
            ldmatrix_x4(a[kb], frag_a(AU, L::LA, warp * 16, kb * 16, lane));
        mma_sweep<TC_C / 16, DV / 16, true>(
            acc, [&](int kb) { return (const uint32_t *)a[kb]; },
            [&](int kb, int np) { return frag_a(Vs, L::LV, kb * 16, np * 16, lane); });
        bf16_t *U = sc.U + nc * TC_C * DV;
        const int i0 = warp * 16 + gid;
#pragma unroll
        for (int j = 0; j < DV / 8; j++) {
            *(uint32_t *)(U + i0 * DV + j * 8 + 2 * tig) = pack_bf16(acc[j][0], acc[j][1]);
            *(uint32_t *)(U + (i0 + 8) * DV + j * 8 + 2 * tig) = pack_bf16(acc[j][2], acc[j][3]);
        }
    }
    if (warp == 0) { // the chunk's transition bound: its decay (log2) and the tokens' norms
        const float x = warp_sumf(Es[lane] + Es[lane + 32]);
        if (lane == 0) sc.lb[nc] = x + Gs[TC_C - 1];
    }
    if (tid < TC_C) {
        float *GK = sc.GK + nc * 2 * TC_C;
        const float Gl = Gs[TC_C - 1];
        GK[tid] = ex2(Gs[tid]);
        GK[TC_C + tid] = t0 + tid < T ? Cs[tid] * ex2(Gl - Gs[tid]) : 0.0f;
        if (FUSED) { // G and kc, for the state block's P
            float *GC = sc.GC + nc * 2 * TC_C;
            GC[tid] = Gs[tid], GC[TC_C + tid] = Cs[tid];
        }
    }
    __syncthreads();
    if (tid == 0) st_release(sc.ready + nc, 1), tc_trace(sc.trace, 0, 1);
}

// ---------------------------------------------------------------- the state pass

// grid (dv / BV, N), (BV / 16) KS warps. The BV value rows of the slice are split in row groups
// of 16 (rg); each row group's key columns are split among KS warps (kq), so that more of the
// multiprocessor's schedulers share the sequential work: warp (rg, kq) holds S^T rows
// bv0 + 16 rg .. + 15, key columns kq DKW .. + DKW - 1, as DKW / 8 accumulator tiles. Its part of
// (W S)^T sums over its own key columns; the KS partial sums meet in shared memory (red). Shared:
// a ring of ST stages, each W [C][DK+8], K [C][DK+8], U [C][BV+8] (bf16) and GK [2C] (fp32),
// filled by cp.async ST - 1 chunks ahead, then red.
template <int DK, int BV, int ST, int KS> struct state_smem {
    static constexpr int LK = DK + 8, LU = BV + 8, NW = BV / 16 * KS;
    static constexpr size_t stage =
        (size_t)TC_C * LK * 2 * 2 + (size_t)TC_C * LU * 2 + 2 * TC_C * 4;
    static constexpr size_t red = KS > 1 ? (size_t)NW * 32 * (TC_C / 2) * 4 : 0;
    static constexpr size_t bytes = stage * ST + red;
};

template <int DK, int BV, int ST, int KS>
__global__ void __launch_bounds__(BV * 2 * KS)
    delta_tc_state(int T, int H, int dv, int nchunks, const bf16_t *k, tc_scratch sc,
                   float *state) {
    typedef state_smem<DK, BV, ST, KS> L;
    constexpr int NT = BV * 2 * KS, DKW = DK / KS;
    extern __shared__ __align__(16) unsigned char smem[];
    const int n = blockIdx.y, bv0 = blockIdx.x * BV, b = n / H, hh = n % H;
    const int tid = threadIdx.x, warp = tid >> 5, lane = tid & 31, gid = lane >> 2, tig = lane & 3;
    const int rg = warp / KS, kq = warp % KS, kc0 = kq * DKW;
    float *red = (float *)(smem + L::stage * ST);
    if (tid == 0) tc_trace(sc.trace, 1, 0);

    auto stage_w = [&](int s) { return (bf16_t *)(smem + s * L::stage); };
    auto stage_k = [&](int s) { return stage_w(s) + TC_C * L::LK; };
    auto stage_u = [&](int s) { return stage_k(s) + TC_C * L::LK; };
    auto stage_g = [&](int s) { return (float *)(stage_u(s) + TC_C * L::LU); };

    // Each thread copies the same 16-byte column piece of rows ir, ir + IS, ... of W and K (and of
    // U), so a chunk's copy is a base pointer plus constant offsets.
    constexpr int PK = DK / 8, IS = NT / PK, PU = BV / 8, US = NT / PU;
    static_assert(NT % PK == 0 && NT % PU == 0 && TC_C % IS == 0 && TC_C % US == 0, "pieces");
    const int ir = tid / PK, ic = (tid % PK) * 8, ur = tid / PU, uc = (tid % PU) * 8;
    const size_t kstep = (size_t)H * DK; // one token of k
    const bf16_t *kthr = k + (((size_t)b * T + ir) * H + hh) * DK + ic;
    auto issue = [&](int c, int s) {
        const size_t nc = (size_t)n * nchunks + c;
        // prep has written this chunk: checked eight chunks at a time (one round trip)
        if (c % 8 == 0) {
            const int *f = sc.ready + nc;
            const int m = min(8, nchunks - c);
            unsigned spins = 0;
            for (;;) {
                int all = 1;
#pragma unroll
                for (int i = 0; i < 8; i++) all &= i >= m || ld_relaxed(f + i) != 0;
                if (all) break;
                __nanosleep(128);
                if (++spins > (1u << 26)) __trap();
            }
        }
        const bf16_t *W = sc.W + nc * TC_C * DK + ir * DK + ic;
        const bf16_t *K = kthr + (size_t)c * TC_C * kstep;
        const bf16_t *U = sc.U + nc * TC_C * dv + ur * dv + bv0 + uc;
        bf16_t *ws = stage_w(s) + ir * L::LK + ic, *ks = stage_k(s) + ir * L::LK + ic;
        bf16_t *us = stage_u(s) + ur * L::LU + uc;
        const bool whole = (c + 1) * TC_C <= T;
#pragma unroll
        for (int j = 0; j < TC_C / IS; j++) {
            cp_async16(ws + j * IS * L::LK, W + j * IS * DK);
            if (whole || c * TC_C + ir + j * IS < T)
                cp_async16(ks + j * IS * L::LK, K + (size_t)j * IS * kstep);
            else
                *(uint4 *)(ks + j * IS * L::LK) = make_uint4(0, 0, 0, 0);
        }
#pragma unroll
        for (int j = 0; j < TC_C / US; j++) cp_async16(us + j * US * L::LU, U + j * US * dv);
        if (tid < 2 * TC_C / 4) cp_async16(stage_g(s) + tid * 4, sc.GK + nc * 2 * TC_C + tid * 4);
    };

    // S^T rows r0 = bv0 + 16 rg + gid and r0 + 8, key columns kc0 + 8 j + 2 tig (+1)
    const int rl = rg * 16 + gid, r0 = bv0 + rl;
    float h[DKW / 8][4];
    const float *S = state + (size_t)n * DK * dv;
#pragma unroll
    for (int j = 0; j < DKW / 8; j++) {
        const int d = kc0 + j * 8 + 2 * tig;
        h[j][0] = S[(size_t)d * dv + r0], h[j][1] = S[(size_t)(d + 1) * dv + r0];
        h[j][2] = S[(size_t)d * dv + r0 + 8], h[j][3] = S[(size_t)(d + 1) * dv + r0 + 8];
    }
#pragma unroll
    for (int s = 0; s < ST - 1; s++) {
        if (s < nchunks) issue(s, s);
        cp_async_commit();
    }
    for (int c = 0; c < nchunks; c++) {
        cp_async_wait<ST - 2>();
        __syncthreads(); // stage c is in; every warp is done with chunk c - 1 (stage and red)
        // every 8 chunks (and at the end) publish how far Sc and Dt are written (the barrier
        // above ordered every thread's stores of the chunks before)
        if (tid == 0 && c > 0 && c % 8 == 0) st_release(sc.done + n * (dv / BV) + blockIdx.x, c);
        const int s = c % ST;
        const bf16_t *ws = stage_w(s), *ks = stage_k(s), *us = stage_u(s);
        const float *gk = stage_g(s);
        const size_t nc = (size_t)n * nchunks + c;
        // U^T of the row group in the accumulators' layout, loaded now for use after the
        // products: ldmatrix .trans of the token-major stage, matrices (tokens 16 jj .. + 7,
        // rows rg 16 .. + 7), (the same tokens, rows + 8), then tokens 16 jj + 8 .. + 15 alike:
        // uf[jj][0..1] are U^T's d[2 jj], uf[jj][2..3] its d[2 jj + 1] (bf16 pairs, token 2 tig
        // in the low half)
        uint32_t uf[TC_C / 16][4];
#pragma unroll
        for (int jj = 0; jj < TC_C / 16; jj++)
            ldmatrix_x4_trans(uf[jj], us + (jj * 16 + (lane >> 4) * 8 + (lane & 7)) * L::LU +
                                          rg * 16 + ((lane >> 3) & 1) * 8);

        // S^T as A fragments (bf16), also the chunk's saved state Sc [dv][DK]
        uint32_t ah[DKW / 16][4];
        bf16_t *Sc = sc.Sc + nc * dv * DK;
#pragma unroll
        for (int kb = 0; kb < DKW / 16; kb++) {
            ah[kb][0] = pack_bf16(h[2 * kb][0], h[2 * kb][1]);
            ah[kb][1] = pack_bf16(h[2 * kb][2], h[2 * kb][3]);
            ah[kb][2] = pack_bf16(h[2 * kb + 1][0], h[2 * kb + 1][1]);
            ah[kb][3] = pack_bf16(h[2 * kb + 1][2], h[2 * kb + 1][3]);
        }
        // (W S)^T = S^T W^T over this warp's key columns: [16 rows x C tokens]
        float d[TC_C / 8][4];
#pragma unroll
        for (int j = 0; j < TC_C / 8; j++) d[j][0] = d[j][1] = d[j][2] = d[j][3] = 0.0f;
        mma_sweep<DKW / 16, TC_C / 16, false>(
            d, [&](int kb) { return (const uint32_t *)ah[kb]; },
            [&](int kb, int np) { return frag_b_nk(ws, L::LK, np * 16, kc0 + kb * 16, lane); });
        // the copy of chunk c + ST - 1 into the stage chunk c - 1 used, while the products run
        if (c + ST - 1 < nchunks) issue(c + ST - 1, (c + ST - 1) % ST);
        cp_async_commit();
#pragma unroll
        for (int kb = 0; kb < DKW / 16; kb++) {
            const int col = kc0 + kb * 16 + 2 * tig;
            *(uint32_t *)(Sc + (size_t)r0 * DK + col) = ah[kb][0];
            *(uint32_t *)(Sc + (size_t)(r0 + 8) * DK + col) = ah[kb][1];
            *(uint32_t *)(Sc + (size_t)r0 * DK + col + 8) = ah[kb][2];
            *(uint32_t *)(Sc + (size_t)(r0 + 8) * DK + col + 8) = ah[kb][3];
        }
        if (KS > 1) { // the row group's KS partial sums: each warp adds the others'
            float4 *mine = (float4 *)red + (size_t)warp * 32 * (TC_C / 8);
#pragma unroll
            for (int j = 0; j < TC_C / 8; j++)
                mine[j * 32 + lane] = make_float4(d[j][0], d[j][1], d[j][2], d[j][3]);
            asm volatile("bar.sync %0, %1;" ::"r"(1 + rg), "r"(32 * KS) : "memory");
#pragma unroll
            for (int o = 1; o < KS; o++) {
                const float4 *other =
                    (const float4 *)red + (size_t)(rg * KS + (kq + o) % KS) * 32 * (TC_C / 8);
#pragma unroll
                for (int j = 0; j < TC_C / 8; j++) {
                    const float4 x = other[j * 32 + lane];
                    d[j][0] += x.x, d[j][1] += x.y, d[j][2] += x.z, d[j][3] += x.w;
                }
            }
        }
        // Delta^T = U^T - (W S)^T, stored for the output pass (token blocks j with j % KS == kq);
        // then scaled by ks for the update
        bf16_t *Dt = sc.Dt + nc * dv * TC_C;
        const float gl = gk[TC_C - 1];
        uint32_t ad[TC_C / 16][4];
#pragma unroll
        for (int j = 0; j < TC_C / 8; j++) {
            const int t = j * 8 + 2 * tig;
            const uint32_t ulo = uf[j >> 1][(j & 1) * 2], uhi = uf[j >> 1][(j & 1) * 2 + 1];
            d[j][0] = __uint_as_float(ulo << 16) - d[j][0];
            d[j][1] = __uint_as_float(ulo & 0xffff0000u) - d[j][1];
            d[j][2] = __uint_as_float(uhi << 16) - d[j][2];
            d[j][3] = __uint_as_float(uhi & 0xffff0000u) - d[j][3];
            if (j % KS == kq) {
                *(uint32_t *)(Dt + (size_t)r0 * TC_C + t) = pack_bf16(d[j][0], d[j][1]);
                *(uint32_t *)(Dt + (size_t)(r0 + 8) * TC_C + t) = pack_bf16(d[j][2], d[j][3]);
            }
            const float2 kk = *(const float2 *)(gk + TC_C + t);
            const float k0 = kk.x, k1 = kk.y;
            const uint32_t lo = pack_bf16(d[j][0] * k0, d[j][1] * k1);
            const uint32_t hi = pack_bf16(d[j][2] * k0, d[j][3] * k1);
            ad[j >> 1][(j & 1) * 2] = lo, ad[j >> 1][(j & 1) * 2 + 1] = hi;
        }
        // S^T <- gamma_last S^T + (diag(ks) Delta)^T K over this warp's key columns
#pragma unroll
        for (int j = 0; j < DKW / 8; j++)
            h[j][0] *= gl, h[j][1] *= gl, h[j][2] *= gl, h[j][3] *= gl;
        mma_sweep<TC_C / 16, DKW / 16, true>(
            h, [&](int kb) { return (const uint32_t *)ad[kb]; },
            [&](int kb, int np) { return frag_a(ks, L::LK, kb * 16, kc0 + np * 16, lane); });
    }
    cp_async_wait<0>();
    float *So = state + (size_t)n * DK * dv;
#pragma unroll
    for (int j = 0; j < DKW / 8; j++) {
        const int dd = kc0 + j * 8 + 2 * tig;
        So[(size_t)dd * dv + r0] = h[j][0], So[(size_t)(dd + 1) * dv + r0] = h[j][1];
        So[(size_t)dd * dv + r0 + 8] = h[j][2], So[(size_t)(dd + 1) * dv + r0 + 8] = h[j][3];
    }
    __syncthreads();
    if (tid == 0)
        st_release(sc.done + n * (dv / BV) + blockIdx.x, nchunks), tc_trace(sc.trace, 1, 1);
}

// ---------------------------------------------------------------- the output pass

// grid (N, nchunks), 128 threads: warp w owns tokens 16 w .. + 15 of the chunk, all DV columns.
// Shared: Q [C][DK+8], Sc [DV][DK+8], P [C][C+8], Dt [DV][C+8] (bf16), gamma [C].
template <int DK, int DV> struct out_smem {
    static constexpr int LK = DK + 8, LC = TC_C + 8;
    static constexpr size_t bytes =
        ((size_t)TC_C * LK + (size_t)DV * LK + (size_t)TC_C * LC + (size_t)DV * LC) * 2 + TC_C * 4;
};

template <int DK, int DV>
__global__ void __launch_bounds__(128)
    delta_tc_out(int T, int H, int nchunks, int nslices, float scale, const bf16_t *q,
                 tc_scratch sc, float *o) {
    typedef out_smem<DK, DV> L;
    extern __shared__ __align__(16) unsigned char smem[];
    bf16_t *Qs = (bf16_t *)smem, *Ss = Qs + TC_C * L::LK, *Ps = Ss + DV * L::LK;
    bf16_t *Ds = Ps + TC_C * L::LC;
    float *gam = (float *)(Ds + DV * L::LC);
    const int n = blockIdx.x, c = tc_out_chunk(blockIdx.y, nchunks, sc.nseg, sc.seglen);
    if (c < 0) return;
    const int b = n / H, hh = n % H, t0 = c * TC_C;
    const int tid = threadIdx.x, warp = tid >> 5, lane = tid & 31, gid = lane >> 2, tig = lane & 3;
    const size_t nc = (size_t)n * nchunks + c;
    if (tid == 0) tc_trace(sc.trace, 2, 0);
    // the state pass (c's segment) of every value slice of this head is past chunk c
    if (tid < nslices)
        wait_at_least(sc.done + ((size_t)n * sc.nseg + c / sc.seglen) * nslices + tid, c + 1);
    __syncthreads();
    const bf16_t *Sc = sc.Sc + nc * DV * DK, *P = sc.P + nc * TC_C * TC_C;
    const bf16_t *Dt = sc.Dt + nc * DV * TC_C;

    for (int i = tid; i < TC_C * DK / 8; i += 128) {
        const int r = i / (DK / 8), col = (i % (DK / 8)) * 8, t = t0 + r;
        if (t < T)
            cp_async16(Qs + r * L::LK + col, q + (((size_t)b * T + t) * H + hh) * DK + col);
        else
            *(uint4 *)(Qs + r * L::LK + col) = make_uint4(0, 0, 0, 0);
    }
    for (int i = tid; i < DV * DK / 8; i += 128) {
        const int r = i / (DK / 8), col = (i % (DK / 8)) * 8;
        cp_async16(Ss + r * L::LK + col, Sc + r * DK + col);
    }
    for (int i = tid; i < TC_C * TC_C / 8; i += 128) {
        const int r = i / (TC_C / 8), col = (i % (TC_C / 8)) * 8;
        cp_async16(Ps + r * L::LC + col, P + r * TC_C + col);
    }
    for (int i = tid; i < DV * TC_C / 8; i += 128) {
        const int r = i / (TC_C / 8), col = (i % (TC_C / 8)) * 8;
        cp_async16(Ds + r * L::LC + col, Dt + r * TC_C + col);
    }
    cp_async_commit();
    if (tid < TC_C) gam[tid] = sc.GK[nc * 2 * TC_C + tid];
    cp_async_wait<0>();
    __syncthreads();

    float acc[DV / 8][4];
#pragma unroll
    for (int j = 0; j < DV / 8; j++) acc[j][0] = acc[j][1] = acc[j][2] = acc[j][3] = 0.0f;
    {
        uint32_t a[DK / 16][4];
#pragma unroll
        for (int kb = 0; kb < DK / 16; kb++)
            ldmatrix_x4(a[kb], frag_a(Qs, L::LK, warp * 16, kb * 16, lane));
        mma_sweep<DK / 16, DV / 16, false>(
            acc, [&](int kb) { return (const uint32_t *)a[kb]; },
            [&](int kb, int np) { return frag_b_nk(Ss, L::LK, np * 16, kb * 16, lane); });
    }
    const int i0 = warp * 16 + gid;
    const float g0 = gam[i0], g1 = gam[i0 + 8];
#pragma unroll
    for (int j = 0; j < DV / 8; j++)
        acc[j][0] *= g0, acc[j][1] *= g0, acc[j][2] *= g1, acc[j][3] *= g1;
    {
        uint32_t a[TC_C / 16][4];
#pragma unroll
        for (int kb = 0; kb < TC_C / 16; kb++)
            ldmatrix_x4(a[kb], frag_a(Ps, L::LC, warp * 16, kb * 16, lane));
        mma_sweep<TC_C / 16, DV / 16, false>(
            acc, [&](int kb) { return (const uint32_t *)a[kb]; },
            [&](int kb, int np) { return frag_b_nk(Ds, L::LC, np * 16, kb * 16, lane); });
    }
#pragma unroll
    for (int half = 0; half < 2; half++) {
        const int t = t0 + i0 + half * 8;
        if (t >= T) continue;
        float *orow = o + (((size_t)b * T + t) * H + hh) * DV;
#pragma unroll
        for (int j = 0; j < DV / 8; j++)
            *(float2 *)(orow + j * 8 + 2 * tig) =
                make_float2(scale * acc[j][half * 2], scale * acc[j][half * 2 + 1]);
    }
    if (tid == 0) tc_trace(sc.trace, 2, 1);
}

// ---------------------------------------------------------------- launch

template <typename K> static int tc_smem(K kernel, size_t bytes, const char *what, err *e) {
    CUDA_TRY(cudaFuncSetAttribute(kernel, cudaFuncAttributeMaxDynamicSharedMemorySize, (int)bytes),
             what);
    return 0;
}

// Tuning knobs read from the environment (benchmarks compare them): the depth of the state pass's
// copy ring (MIXSCOPE_DELTA_ST: 2, 3 or 4 chunks), the warps that share a row group's key columns
// (MIXSCOPE_DELTA_KS: 1, 2 or 4; the mma.sync pass) and the wgmma pass's warpgroups
// (MIXSCOPE_DELTA_WG: 3, or 2 without the storer).
static int tc_env(const char *name, int def) {
    const char *s = getenv(name);
    return s ? atoi(s) : def;
}

template <int DK, int BV, int ST, int KS>
static int launch_state(int T, int H, int N, int dv, int nchunks, const bf16_t *k, tc_scratch s,
                        float *state, cudaStream_t st, err *e) {
    const size_t bytes = state_smem<DK, BV, ST, KS>::bytes;
    if (tc_smem(delta_tc_state<DK, BV, ST, KS>, bytes,
                "gpu delta prefill: shared memory (state pass)", e))
        return -1;
    delta_tc_state<DK, BV, ST, KS>
        <<<dim3(dv / BV, N), BV * 2 * KS, bytes, st>>>(T, H, dv, nchunks, k, s, state);
    CUDA_LAUNCHED("gpu delta prefill: state pass");
    return 0;
}

// Segments of time for the wgmma state pass (tc_scratch): MIXSCOPE_DELTA_CP=n asks for n (1: none).
// By default, the count that a cost model of the overlapped launch says is fastest. A state block
// holds its multiprocessor alone (its ring fills the shared memory) for the whole chain, so n
// segments of rows blocks each leave sms - n rows multiprocessors to prepare and output:
//   time(n) ~ max(A (nchunks / n + TC_CP_WARM / 2),  B N nchunks / (sms - n rows))
// with A = 1.3 us, the chain's time a chunk beside the other two, and B = 9 us dv / 128, the two
// passes' multiprocessor time a chunk and head (measured on the H200 at dk = dv = 128, 32K
// tokens: docs/gpu-results.md). A layer of 16 heads keeps one segment (the other passes need the
// multiprocessors); one of 4 heads runs four. Never more blocks than multiprocessors: every state
// block is resident at once, which the flags between the kernels need.
static int tc_cp_segments(int rows, int N, int nchunks, int dv) {
    const int sms = std::max(1, gpu_sm_count());
    const int most = std::min(TC_CP_MAX, std::min(nchunks, sms / rows));
    const char *env = getenv("MIXSCOPE_DELTA_CP");
    if (env) return std::max(1, std::min(atoi(env), most));
    const double A = 1.3, B = 9.0 * dv / 128;
    auto cost = [&](int n) {
        const double chain = A * ((nchunks + n - 1) / n + (n > 1 ? TC_CP_WARM / 2 : 0));
        return std::max(chain, B * N * nchunks / std::max(1, sms - n * rows));
    };
    int best = 1;
    for (int n = 2; n <= most && nchunks / n >= 2 * TC_CP_WARM; n++)
        if (cost(n) < 0.9 * cost(best)) best = n;
    return best;
}

// Segments for the fused form (delta_state_wgmma.cu): its blocks do all the work after prepare,
// which runs before them, so the count is the one whose longest segment walks the fewest chunks,
// warm-up included, with every block resident at once (the rows of a segment: heads x slices).
static int tc_fused_segments(int rows, int nchunks) {
    const int sms = std::max(1, gpu_sm_count());
    const int most = std::max(1, std::min(TC_CP_MAX, std::min(nchunks, sms / rows)));
    const char *env = getenv("MIXSCOPE_DELTA_CP");
    if (env) return std::max(1, std::min(atoi(env), most));
    auto walk = [&](int n) { return (nchunks + n - 1) / n + (n > 1 ? TC_CP_WARM : 0); };
    int best = 1;
    for (int n = 2; n <= most; n++)
        if (walk(n) < walk(best)) best = n;
    return best;
}

// The side stream the prepare and output kernels run on, beside the state pass (created once).
static int tc_side(cudaStream_t *side, cudaEvent_t *fork, cudaEvent_t *join, err *e) {
    static cudaStream_t s_side;
    static cudaEvent_t s_fork, s_join;
    static int made;
    if (!made) {
        CUDA_TRY(cudaStreamCreateWithFlags(&s_side, cudaStreamNonBlocking),
                 "gpu delta prefill: side stream");
        CUDA_TRY(cudaEventCreateWithFlags(&s_fork, cudaEventDisableTiming),
                 "gpu delta prefill: event");
        CUDA_TRY(cudaEventCreateWithFlags(&s_join, cudaEventDisableTiming),
                 "gpu delta prefill: event");
        made = 1;
    }
    *side = s_side, *fork = s_fork, *join = s_join;
    return 0;
}

// Three kernels, by default at the same time: the state pass (one block per head and value slice,
// on st) goes chunk by chunk as fast as the prepare kernel (on a side stream, all chunks) hands
// chunks over, and the output pass (on the side stream after prepare) follows the state pass.
// Why this cannot deadlock: prep blocks wait on nothing, so prep finishes once it has a
// multiprocessor, which the state blocks leave it (they overlap only while there are fewer of them
// than multiprocessors); the state pass is launched first and its blocks get their
// multiprocessors while prep runs at the latest; output blocks, which wait on state blocks, start
// only after prep has finished. (With the output pass on a stream of its own, the H200 gave its
// blocks the multiprocessors the state pass needed and the trap fired.) MIXSCOPE_DELTA_OVERLAP=0
// or MIXSCOPE_DELTA_PROFILE runs the three one after the other (MIXSCOPE_DELTA_PROFILE=1 then
// prints the time of each on stderr). The fused form (gdn's and kaczmarz's default on sm_90a) is
// two kernels on st, prepare and then the fused state blocks, which write the output themselves.
template <int DK, int DV>
static int launch_tc(int B, int T, int H, float scale, int kacz, float eps, const bf16_t *q,
                     const bf16_t *k, const bf16_t *v, const float *g, const float *beta,
                     float *state, float *o, void *scratch, cudaStream_t st, err *e) {
    const int N = B * H, nchunks = (T + TC_C - 1) / TC_C;
    tc_scratch s = tc_layout(scratch, N, nchunks, DK, DV);
    // MIXSCOPE_DELTA_TRACE=1: when each pass ran, in the overlapped launch (stderr; a diagnostic
    // that synchronises after the launch)
    static unsigned long long *trace_buf;
    static const int trace = getenv("MIXSCOPE_DELTA_TRACE") != NULL;
    if (trace) {
        if (!trace_buf)
            CUDA_TRY(cudaMalloc(&trace_buf, 6 * sizeof *trace_buf), "gpu delta prefill: trace");
        const unsigned long long init[6] = {~0ull, 0, ~0ull, 0, ~0ull, 0};
        CUDA_TRY(cudaMemcpyAsync(trace_buf, init, sizeof init, cudaMemcpyHostToDevice, st),
                 "gpu delta prefill: trace");
        s.trace = trace_buf;
    }
    const int ns = tc_env("MIXSCOPE_DELTA_ST", 4), ks = tc_env("MIXSCOPE_DELTA_KS", 2);
    const int nwg = tc_env("MIXSCOPE_DELTA_WG", 3) == 2 ? 2 : 3;
    // the state pass: Hopper's warpgroup products for dk = 128 where they run, mma.sync otherwise
    const bool wg = DK == 128 && delta_state_wgmma_usable();
    const int nslices = DV / (wg ? DSW_BV : TC_BV);
    // the fused form (delta_state_wgmma.cu): MIXSCOPE_DELTA_FUSED=1 for every mixer, 0 never; by
    // default where a gate lets segments start late (gdn 16 heads on the H200: 0.36 ms against
    // 0.78 at 32K, 1.35 against 3.00 at 128K; deltanet, whose segments walk from the first chunk,
    // the same either way, so it keeps the overlapped passes: docs/gpu-results.md)
    const int fenv = tc_env("MIXSCOPE_DELTA_FUSED", -1);
    const bool fused = wg && (fenv == 1 || (fenv < 0 && g != NULL && TC_FUSED_DEFAULT));
    if (wg) { // segments of time for the wgmma state pass (tc_cp_segments, tc_fused_segments)
        s.nseg = fused ? tc_fused_segments(N * nslices, nchunks)
                       : tc_cp_segments(N * nslices, N, nchunks, DV);
        s.seglen = (nchunks + s.nseg - 1) / s.nseg;
        s.nseg = (nchunks + s.seglen - 1) / s.seglen; // every segment has chunks
    }
    // prepare's slots: every segment's chunks from its warm-up on (tc_prep_chunk)
    int pslots = nchunks;
    if (s.nseg > 1) {
        int most = 0;
        for (int j = 0; j < s.nseg; j++) {
            const int end = j + 1 == s.nseg ? nchunks : tc_seg_from(j + 1, s.seglen);
            most = std::max(most, end - tc_seg_from(j, s.seglen));
        }
        pslots = s.nseg * most;
    }
    const int oslots = s.nseg > 1 ? s.nseg * s.seglen : nchunks;
    static const int profile = getenv("MIXSCOPE_DELTA_PROFILE") != NULL;
    // The fused form runs prepare first: its blocks fill the machine and would leave prepare none
    // (MIXSCOPE_DELTA_FUSED_OVERLAP=1 launches both at once, prepare first, on two streams). The
    // overlapped passes need a multiprocessor for prepare beside the state blocks, which wait on
    // it: with more state blocks than multiprocessors (each may hold one alone), prepare would get
    // none and the waits would trap (bench-gpu's 8 x 16 heads did), so they run one after the
    // other then.
    const int state_blocks = N * nslices * s.nseg;
    const int overlap = !profile && (fused ? tc_env("MIXSCOPE_DELTA_FUSED_OVERLAP", 0) != 0
                                           : tc_env("MIXSCOPE_DELTA_OVERLAP", 1) != 0 &&
                                                 state_blocks < gpu_sm_count());
    const size_t pb = fused ? prep_smem<DK, DV, true>::bytes : prep_smem<DK, DV>::bytes;
    const size_t ob = out_smem<DK, DV>::bytes;
    auto prep_kernel = [&]() {
        if (fused)
            return kacz ? delta_tc_prep<DK, DV, true, true> : delta_tc_prep<DK, DV, false, true>;
        return kacz ? delta_tc_prep<DK, DV, true, false> : delta_tc_prep<DK, DV, false, false>;
    };
    if (tc_smem(prep_kernel(), pb, "gpu delta prefill: shared memory (prepare)", e) ||
        (!fused &&
         tc_smem(delta_tc_out<DK, DV>, ob, "gpu delta prefill: shared memory (output pass)", e)))
        return -1;
    CUDA_TRY(cudaMemsetAsync(s.ready, 0,
                             ((size_t)N * nchunks + (size_t)N * nslices * s.nseg) * sizeof(int),
                             st),
             "gpu delta prefill: flags");
    if (s.nseg > 1) // the segments that walk from the first chunk read the state from a copy
        CUDA_TRY(cudaMemcpyAsync(s.state0, state, (size_t)N * DK * DV * sizeof(float),
                                 cudaMemcpyDeviceToDevice, st),
                 "gpu delta prefill: state copy");
    cudaStream_t side = st;
    cudaEvent_t fork, join;
    if (overlap) {
        if (tc_side(&side, &fork, &join, e)) return -1;
        CUDA_TRY(cudaEventRecord(fork, st), "gpu delta prefill: event");
        CUDA_TRY(cudaStreamWaitEvent(side, fork, 0), "gpu delta prefill: event");
    }
    auto prep = [&]() -> int {
        prep_kernel()<<<dim3(N, pslots), 128, pb, side>>>(T, H, nchunks, eps, q, k, v, g, beta, s);
        CUDA_LAUNCHED("gpu delta prefill: prepare");
        return 0;
    };
    const dsw_fused fz = {scale, q, v, o};
    auto state_pass = [&]() -> int {
        if (wg)
            return delta_state_wgmma_launch(T, H, N, DV, nchunks, ns, nwg, k, s, state,
                                            fused ? &fz : NULL, st, e);
#define TC_STATE(ST, KS) launch_state<DK, TC_BV, ST, KS>(T, H, N, DV, nchunks, k, s, state, st, e)
        if (ns == 3) return ks == 1 ? TC_STATE(3, 1) : ks == 4 ? TC_STATE(3, 4) : TC_STATE(3, 2);
        return ks == 1 ? TC_STATE(4, 1) : ks == 4 ? TC_STATE(4, 4) : TC_STATE(4, 2);
#undef TC_STATE
    };
    gpu_pass_timer<3> timer(profile, st); // prepare, state, output (profile runs no overlap)
    timer.mark(0);
    if (overlap && fused) {
        if (prep() || state_pass()) return -1; // prepare first: its blocks get the machine first
    } else if (overlap) {
        if (state_pass() || prep()) return -1; // the state pass first: its blocks wait on prep's
    } else {
        if (prep()) return -1;
        timer.mark(1);
        if (state_pass()) return -1;
        timer.mark(2);
    }
    if (!fused) {
        delta_tc_out<DK, DV>
            <<<dim3(N, oslots), 128, ob, side>>>(T, H, nchunks, nslices, scale, q, s, o);
        CUDA_LAUNCHED("gpu delta prefill: output pass");
    }
    if (overlap) {
        CUDA_TRY(cudaEventRecord(join, side), "gpu delta prefill: event");
        CUDA_TRY(cudaStreamWaitEvent(st, join, 0), "gpu delta prefill: event");
    }
    if (trace) {
        unsigned long long t[6];
        CUDA_TRY(cudaMemcpyAsync(t, trace_buf, sizeof t, cudaMemcpyDeviceToHost, st),
                 "gpu delta prefill: trace");
        CUDA_TRY(cudaStreamSynchronize(st), "gpu delta prefill: trace");
        unsigned long long t0 = t[0] < t[2] ? t[0] : t[2];
        t0 = t[4] < t0 ? t[4] : t0;
        if (fused) t[4] = t[5] = t0; // no output pass: the state blocks write the output
        auto ms = [&](int i) { return (double)(t[i] - t0) * 1e-6; };
        fprintf(stderr,
                "delta_tc trace T=%d: prepare %.3f-%.3f, state %.3f-%.3f, output %.3f-%.3f ms "
                "(%d segments)\n",
                T, ms(0), ms(1), ms(2), ms(3), ms(4), ms(5), s.nseg);
    }
    if (profile) {
        float ms[3] = {0, 0, 0};
        timer.mark(3);
        timer.add(ms);
        fprintf(stderr, "delta_tc T=%d: prepare %.3f ms, state %.3f ms, output %.3f ms\n", T, ms[0],
                ms[1], ms[2]);
    }
    return 0;
}

extern "C" int delta_tc_prefill(int B, int T, int H, int dk, int dv, float scale, int kacz,
                                float eps, const void *q, const void *k, const void *v,
                                const float *g, const float *beta, float *state, float *o,
                                void *scratch, void *stream, err *e) {
    if (!delta_tc_supported(dk, dv, TC_C, 1))
        return err_set(e, "gpu delta prefill (tensor cores): dk=%d dv=%d not supported", dk, dv);
    if (T < 1) return 0;
    cudaStream_t st = (cudaStream_t)stream;
    const bf16_t *bq = (const bf16_t *)q, *bk = (const bf16_t *)k, *bv = (const bf16_t *)v;
#define TC_CASE(DK, DV)                                                                            \
    if (dk == DK && dv == DV)                                                                      \
        return launch_tc<DK, DV>(B, T, H, scale, kacz, eps, bq, bk, bv, g, beta, state, o,         \
                                 scratch, st, e);
    TC_CASE(64, 64)
    TC_CASE(64, 128)
    TC_CASE(128, 64)
    TC_CASE(128, 128)
#undef TC_CASE
    return err_set(e, "gpu delta prefill (tensor cores): dk=%d dv=%d not supported", dk, dv);
}
