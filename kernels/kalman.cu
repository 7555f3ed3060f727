// kalman.cu: Kalman linear attention on the GPU (spec kalman.md). Twin of mixers/kalman.c:
// tests/gpu checks it against the CPU reference.
//
// Every lane (b, h, m, s) is an independent scalar filter in information form (§3): with
// phi = lambda_v k_s^2 and r = (v lambda_v) k_s,
//   d = a^2 + p lambda,  lambda^- = lambda / d,  alpha = a / d,  eta <- alpha eta + r,
//   lambda <- lambda^- + phi,  y_m = scale sum_s q_s eta / lambda   (times a: decode_from_prior).
// Layout (fla-like): q, k [B, T, H, S]; v [B, T, H, M]; lambda_v [B, T, H, M] fp32 (NULL: 1);
// a, p [H, M, S] fp32 (NULL: 0.9 and 0.05, as the CPU); state lambda [B, H, M, S] then
// eta [B, H, M, S]; o [B, T, H, M] fp32. S = the mixer's dk, M = its dv.
//
// Three forms:
//   kalman_walk  one thread per lane walks the tokens in order (the recurrence itself). The
//                readout sums over s with warp shuffles. The decode step (T = 1) in the CPU's
//                exact rounding, and gpu_kalman_walk.
//   kx_*         gpu_kalman_scan for S in {8, 16, 32, 64, 128}: the lane in homogeneous
//                coordinates (N, D, E) with lambda = N / D, eta = E / D (§4.4's 3x3 map), where a
//                token is the division-free linear map
//                  D' = a^2 D + p N,  N' = N + phi D',  E' = a E + r D'
//                and the readout is mu = E' / N' (one reciprocal per lane and token; the vector is
//                renormalised to N = 1 every KX_R tokens with that same reciprocal). The inputs
//                stream through shared memory a few tiles ahead (kx_ring, cp.async). Time is cut
//                into chunks only when the lanes give fewer than 4 warps per SM (kx_chunks):
//                (1) kx_compose: every (lane, chunk) composes its chunk's maps (7 floats,
//                trace-renormalised every KX_R tokens); (2) kx_carry: each lane applies them in
//                order to get every chunk's starting (lambda, eta); (3) kx_apply: every (lane,
//                chunk) walks its tokens from its start and reads out, the sum over s through
//                shared memory for S <= 16 (after one shuffle round, or at S = 16 with plenty of
//                lanes, two lanes a thread added in registers: kx_lanes) and a reduce-scatter of
//                KX_U tokens by shuffles otherwise (shared memory across warps). One chunk:
//                kx_apply alone, from the state. What bounds it at S = 16: the issue of the warps a
//                scheduler holds (two at B = 1, H = 16, M = 128: 56% of cycles issue, ~18 warp
//                instructions a lane-step; neither a shorter chain nor fewer instructions with
//                fewer warps helped, docs/gpu-results.md).
//   kalman_scan  the former block scan (Mobius + affine warp scans per tile); gpu_kalman_scan
//                for the other S.
#include <cuda_bf16.h>
#include <cuda_runtime.h>
#include <math.h>
#include <stdlib.h>

#include <type_traits>

#include "gpu.h"
#include "gpu_common.cuh"
#include "mma.cuh"

#define KF       1e-12f // the floors of spec §7.2
#define KA_DEF   0.9f   // defaults without static parameters (mixers/kalman.c)
#define KP_DEF   0.05f
#define KW_NT    256 // threads of a walk block
#define KW_U     8   // tokens whose inputs a walk thread loads at once
#define KS_WARPS 8   // channels (warps) of a scan block
#define KS_IT    16  // tokens of a thread's run
#define KS_TILE  (32 * KS_IT)
#define KS_SB    16                          // states staged in shared memory at a time
#define KS_TILEP (KS_TILE + KS_TILE / KS_IT) // a tile's rows with one pad per run
// Shared row of token t of a tile: one pad row after each thread's run of KS_IT tokens, so that
// the 32 threads of a warp, reading token j KS_IT + i each, hit 32 different banks.
#define KS_ROW(t) ((t) + (t) / KS_IT)
#define FULL_MASK 0xffffffffu

__device__ __forceinline__ void kalman_params(const float *a_, const float *p_, size_t i, float *a,
                                              float *a2, float *p) {
    *a = a_ ? a_[i] : KA_DEF;
    *a2 = fmaxf(*a * *a, KF);
    *p = fmaxf(p_ ? p_[i] : KP_DEF, KF);
}

// The sum of x over the S lanes of one channel, in the lane with s == 0 (or in every lane that
// adds into o with an atomic): mode 0 segments of S <= 32 lanes inside a warp (32 % S == 0),
// mode 1 whole warps (S % 32 == 0), mode 2 no reduction.
__device__ __forceinline__ float kalman_reduce(float x, int S, int mode) {
    if (mode == 0)
        for (int off = S / 2; off > 0; off >>= 1) x += __shfl_xor_sync(FULL_MASK, x, off);
    else if (mode == 1)
        for (int off = 16; off > 0; off >>= 1) x += __shfl_xor_sync(FULL_MASK, x, off);
    return x;
}

// Steady state of the precision under a constant phi (§4.5), as mixers/kalman.c.
__device__ static double kalman_lambda_star(double a2, double p, double phi) {
    double b = a2 - 1.0 - p * phi, sq = sqrt(b * b + 4.0 * p * phi * a2);
    if (b <= 0) return (-b + sq) / (2.0 * p);
    return b + sq > 0 ? 2.0 * phi * a2 / (b + sq) : 0.0;
}

// ---------------------------------------------------------------- the lane walk

// grid ceil(lanes / KW_NT), lanes = B H M S with s fastest. lp: NULL, or the lane probes of one
// token (T = 1): probe i at lp[i B H M S + lane] (fp32 path only). EXACT: every operation rounds
// as mixers/kalman.c's (no fused multiply-add, IEEE division), so a decode step reproduces the
// CPU's state bit for bit and the probes that divide by small differences (memory = 1 / (1 - f))
// agree; otherwise fast reciprocals and fused multiply-adds (prefill, benchmarks).
template <typename T, bool EXACT>
__global__ void __launch_bounds__(KW_NT)
    kalman_walk_kernel(int B, int T_, int H, int M, int S, float scale, int prior, int mode,
                       const T *q, const T *k, const T *v, const float *lv, const float *a_,
                       const float *p_, float *lam_st, float *eta_st, float *o, float *lp) {
    __shared__ float red[KW_NT / 32][KW_U];
    const size_t lanes = (size_t)B * H * M * S;
    const size_t L = (size_t)blockIdx.x * KW_NT + threadIdx.x;
    const int live = L < lanes;
    const size_t Lc = live ? L : 0;
    const int s = (int)(Lc % S), m = (int)((Lc / S) % M), h = (int)((Lc / ((size_t)S * M)) % H);
    const int b = (int)(Lc / ((size_t)S * M * H));
    float a, a2, p;
    kalman_params(a_, p_, ((size_t)h * M + m) * S + s, &a, &a2, &p);
    float lam = live ? lam_st[L] : 1.0f, eta = live ? eta_st[L] : 0.0f;
    for (int t0 = 0; t0 < T_; t0 += KW_U) {
        // the next KW_U tokens' inputs first, so that their loads overlap
        float kk[KW_U], qq[KW_U], lvm[KW_U], vv[KW_U];
#pragma unroll
        for (int u = 0; u < KW_U; u++) {
            const size_t tk = ((size_t)b * T_ + min(t0 + u, T_ - 1)) * H + h;
            kk[u] = ld(k + tk * S + s), qq[u] = ld(q + tk * S + s);
            lvm[u] = lv ? lv[tk * M + m] : 1.0f, vv[u] = ld(v + tk * M + m);
        }
#pragma unroll
        for (int u = 0; u < KW_U; u++) {
            if (t0 + u >= T_) break; // uniform over the block
            const size_t tk = ((size_t)b * T_ + t0 + u) * H + h;
            const float lam0 = lam, eta0 = eta;
            float phi, lamm, alpha, lamc, term;
            if (EXACT) {
                phi = __fmul_rn(__fmul_rn(lvm[u], kk[u]), kk[u]);
                const float r = __fmul_rn(__fmul_rn(vv[u], lvm[u]), kk[u]);
                const float den = fmaxf(__fadd_rn(a2, __fmul_rn(p, lam0)), KF);
                lamm = lam0 / den, alpha = a / den;
                eta = __fadd_rn(__fmul_rn(alpha, eta0), r);
                lam = __fadd_rn(lamm, phi);
                lamc = fmaxf(lam, KF);
                float mean = __fmul_rn(eta, 1.0f / lamc);
                if (prior) mean = __fmul_rn(a, mean);
                term = __fmul_rn(__fmul_rn(scale, qq[u]), mean);
            } else {
                phi = lvm[u] * kk[u] * kk[u];
                const float rd = __fdividef(1.0f, fmaxf(a2 + p * lam0, KF));
                lamm = lam0 * rd, alpha = a * rd;
                eta = alpha * eta0 + (vv[u] * lvm[u]) * kk[u];
                lam = lamm + phi;
                lamc = fmaxf(lam, KF);
                float mean = eta * __fdividef(1.0f, lamc);
                if (prior) mean = a * mean;
                term = scale * qq[u] * mean;
            }
            const float y = kalman_reduce(live ? term : 0.0f, S, mode);
            if (mode == 1 && (threadIdx.x & 31) == 0)
                red[threadIdx.x / 32][u] = y;
            else if (live && mode == 0 && s == 0)
                o[tk * M + m] = y;
            else if (live && mode == 2)
                atomicAdd(o + tk * M + m, y);
            if (EXACT && lp &&
                live) { // the lane probes, mixers/kalman.c's definitions and roundings
                const size_t W = (size_t)M * S, at = (L / W) * W + L % W;
                const float lammc = fmaxf(lamm, KF), w = phi / lamc, f = __fmul_rn(a, lamm) / lamc;
                const float e =
                    __fsub_rn(vv[u], __fmul_rn(__fmul_rn(kk[u], a), eta0 / fmaxf(lam0, KF)));
                const float z =
                    lvm[u] > 0
                        ? e / sqrtf(__fadd_rn(__fmul_rn(kk[u], kk[u]) / lammc, 1.0f / lvm[u]))
                        : 0.0f;
                const float vals[14] = {lam,
                                        lamm,
                                        1.0f / lamc,
                                        phi,
                                        w,
                                        f,
                                        alpha,
                                        __fmul_rn(kk[u], lvm[u]) / lamc,
                                        0.5f * log1pf(phi / lammc),
                                        1.0f / fmaxf(__fsub_rn(1.0f, f), KF),
                                        eta / lamc,
                                        e,
                                        z,
                                        (float)kalman_lambda_star(a2, p, phi)};
                for (int i = 0; i < 14; i++) lp[(size_t)i * B * H * W + at] = vals[i];
            }
        }
        if (mode == 1) { // a channel's S / 32 warps meet in shared memory: no atomics
            __syncthreads();
            const int wpc = S / 32, nch = KW_NT / S;
            for (int x = threadIdx.x; x < nch * KW_U; x += KW_NT) {
                const int c = x / KW_U, u = x % KW_U;
                const size_t L0 = (size_t)blockIdx.x * KW_NT + (size_t)c * S; // lane s = 0
                if (L0 >= lanes || t0 + u >= T_) continue;
                float y = 0.0f;
                for (int w = 0; w < wpc; w++) y += red[c * wpc + w][u];
                const int mm = (int)((L0 / S) % M), hh = (int)((L0 / ((size_t)S * M)) % H);
                const int bb = (int)(L0 / ((size_t)S * M * H));
                o[(((size_t)bb * T_ + t0 + u) * H + hh) * M + mm] = y;
            }
            __syncthreads();
        }
    }
    if (live) lam_st[L] = lam, eta_st[L] = eta;
}

// How the walk sums a channel's S lanes: 0 warp segments (S divides 32), 1 whole warps met in
// shared memory (S a multiple of 32 that divides KW_NT), 2 an atomic per lane.
static int kalman_mode(int S) {
    return S <= 32 && 32 % S == 0 ? 0 : S % 32 == 0 && KW_NT % S == 0 ? 1 : 2;
}

template <typename T, bool EXACT>
static int kalman_launch_walk(int B, int T_, int H, int M, int S, float scale, int prior,
                              const void *q, const void *k, const void *v, const float *lv,
                              const float *a, const float *p, float *state, float *o, float *lp,
                              cudaStream_t st, err *e) {
    const size_t lanes = (size_t)B * H * M * S;
    const int mode = kalman_mode(S);
    if (mode == 2)
        CUDA_TRY(cudaMemsetAsync(o, 0, (size_t)B * T_ * H * M * sizeof(float), st),
                 "gpu kalman walk");
    kalman_walk_kernel<T, EXACT><<<(unsigned)((lanes + KW_NT - 1) / KW_NT), KW_NT, 0, st>>>(
        B, T_, H, M, S, scale, prior, mode, (const T *)q, (const T *)k, (const T *)v, lv, a, p,
        state, state + lanes, o, lp);
    CUDA_LAUNCHED("gpu kalman walk");
    return 0;
}

extern "C" int gpu_kalman_walk(int B, int T, int H, int M, int S, float scale, int prior, int bf16,
                               const void *q, const void *k, const void *v, const float *lv,
                               const float *a, const float *p, float *state, float *o, void *stream,
                               err *e) {
    if (T < 1) return 0;
    cudaStream_t st = (cudaStream_t)stream;
    return bf16 ? kalman_launch_walk<__nv_bfloat16, false>(B, T, H, M, S, scale, prior, q, k, v, lv,
                                                           a, p, state, o, NULL, st, e)
                : kalman_launch_walk<float, false>(B, T, H, M, S, scale, prior, q, k, v, lv, a, p,
                                                   state, o, NULL, st, e);
}

// One decode step (batch 1) in the CPU's exact arithmetic (gpu_mixer_run's step).
extern "C" int gpu_kalman_step(int H, int M, int S, float scale, int prior, int bf16, const void *q,
                               const void *k, const void *v, const float *lv, const float *a,
                               const float *p, float *state, float *o, void *stream, err *e) {
    cudaStream_t st = (cudaStream_t)stream;
    return bf16 ? kalman_launch_walk<__nv_bfloat16, true>(1, 1, H, M, S, scale, prior, q, k, v, lv,
                                                          a, p, state, o, NULL, st, e)
                : kalman_launch_walk<float, true>(1, 1, H, M, S, scale, prior, q, k, v, lv, a, p,
                                                  state, o, NULL, st, e);
}

// ---------------------------------------------------------------- probes of one step

// Channel and head probes from the lane probes lp (14 [B H, M S] arrays, written by the walk):
// one block per (b, h). out_ch [4][B H, M]: yvar, innovation, innovation_z, lambda_v;
// out_hd [6][B H]: lambda_min, lambda_max, write_mean, forget_mean, info_gain_sum, lambda_star_gap.
__global__ void kalman_probe_finalize(int BH, int H, int M, int S, float scale, int prior,
                                      const float *q, const float *lv, const float *a_,
                                      const float *p_, const float *lp, float *out_ch,
                                      float *out_hd) {
    const int n = blockIdx.x, h = n % H, tid = threadIdx.x;
    const size_t W = (size_t)M * S, base = (size_t)n * W, plane = (size_t)BH * W;
    const float *lam = lp + 0 * plane + base, *pvar = lp + 2 * plane + base;
    const float *wr = lp + 4 * plane + base, *fo = lp + 5 * plane + base;
    const float *gain = lp + 8 * plane + base, *en = lp + 11 * plane + base;
    const float *zz = lp + 12 * plane + base, *star = lp + 13 * plane + base;
    // channel probes, summed over s in the CPU's order and rounding
    for (int m = tid; m < M; m += KW_NT) {
        const float lvm = lv ? lv[(size_t)n * M + m] : 1.0f;
        float yvar = 0, q2sum = 0, esum = 0, zsum = 0;
        for (int s = 0; s < S; s++) {
            float a, a2, p;
            kalman_params(a_, p_, ((size_t)h * M + m) * S + s, &a, &a2, &p);
            const float qs = __fmul_rn(scale, q[(size_t)n * S + s]), q2 = __fmul_rn(qs, qs);
            float var = pvar[(size_t)m * S + s];
            if (prior) var = __fadd_rn(__fmul_rn(a2, var), p);
            yvar = __fadd_rn(yvar, __fmul_rn(q2, var));
            q2sum = __fadd_rn(q2sum, q2);
            esum = __fadd_rn(esum, __fmul_rn(q2, en[(size_t)m * S + s]));
            zsum = __fadd_rn(zsum, __fmul_rn(q2, zz[(size_t)m * S + s]));
        }
        out_ch[0 * (size_t)BH * M + (size_t)n * M + m] = yvar;
        out_ch[1 * (size_t)BH * M + (size_t)n * M + m] = q2sum > 0 ? esum / q2sum : 0.0f;
        out_ch[2 * (size_t)BH * M + (size_t)n * M + m] = q2sum > 0 ? zsum / q2sum : 0.0f;
        out_ch[3 * (size_t)BH * M + (size_t)n * M + m] = lvm;
    }
    // head probes over the head's M S lanes, reduced over the block: min / max and the largest
    // gap exactly, the sums in double (as mixers/kalman.c sums them; one thread walking 32K lanes
    // in order cost 4.5 ms a token at M = 2048, S = 16)
    __shared__ double dsh[KW_NT / 32];
    __shared__ float fsh[3][KW_NT / 32];
    float lmin = INFINITY, lmax = -INFINITY, gap = 0;
    double ws = 0, fs = 0, gs = 0;
    for (size_t j = tid; j < W; j += KW_NT) {
        lmin = fminf(lmin, lam[j]), lmax = fmaxf(lmax, lam[j]);
        ws += wr[j], fs += fo[j], gs += gain[j];
        gap = fmaxf(gap, (float)(fabs((double)lam[j] - (double)star[j]) /
                                 fmax((double)star[j], (double)KF)));
    }
    ws = block_sum(ws, dsh), fs = block_sum(fs, dsh), gs = block_sum(gs, dsh);
    for (int o = 16; o > 0; o >>= 1) { // min / max: over the warp, then over the warps
        lmin = fminf(lmin, __shfl_xor_sync(0xffffffffu, lmin, o));
        lmax = fmaxf(lmax, __shfl_xor_sync(0xffffffffu, lmax, o));
        gap = fmaxf(gap, __shfl_xor_sync(0xffffffffu, gap, o));
    }
    const int w = tid >> 5;
    if ((tid & 31) == 0) fsh[0][w] = lmin, fsh[1][w] = lmax, fsh[2][w] = gap;
    __syncthreads();
    if (tid != 0) return;
    for (int i = 1; i < KW_NT / 32; i++)
        lmin = fminf(lmin, fsh[0][i]), lmax = fmaxf(lmax, fsh[1][i]), gap = fmaxf(gap, fsh[2][i]);
    const double cnt = (double)M * (double)S;
    out_hd[0 * BH + n] = lmin;
    out_hd[1 * BH + n] = lmax;
    out_hd[2 * BH + n] = (float)(ws / cnt);
    out_hd[3 * BH + n] = (float)(fs / cnt);
    out_hd[4 * BH + n] = (float)gs;
    out_hd[5 * BH + n] = gap;
}

// One fp32 decode step for H heads (batch 1) with every probe, in the mixer's layout: probes
// holds the 14 lane probes [H, M, S] each, then 4 channel probes [H, M], then 6 head probes [H].
extern "C" int gpu_kalman_step_probes(int H, int M, int S, float scale, int prior, const float *q,
                                      const float *k, const float *v, const float *lv,
                                      const float *a, const float *p, float *state, float *o,
                                      float *probes, void *stream, err *e) {
    cudaStream_t st = (cudaStream_t)stream;
    const size_t W = (size_t)M * S;
    if (kalman_launch_walk<float, true>(1, 1, H, M, S, scale, prior, q, k, v, lv, a, p, state, o,
                                        probes, st, e))
        return -1;
    float *ch = probes + 14 * (size_t)H * W, *hd = ch + 4 * (size_t)H * M;
    kalman_probe_finalize<<<H, KW_NT, 0, st>>>(H, H, M, S, scale, prior, q, lv, a, p, probes, ch,
                                               hd);
    CUDA_LAUNCHED("gpu kalman probes");
    return 0;
}

// ---------------------------------------------------------------- the scan

// Mobius maps [A, B, C, D]: l earlier, r later, o = r l / tr(r l) (§4.2).
__device__ __forceinline__ void mob_combine(const float *l, const float *r, float *o) {
    const float A = r[0] * l[0] + r[1] * l[2], Bq = r[0] * l[1] + r[1] * l[3];
    const float C = r[2] * l[0] + r[3] * l[2], D = r[2] * l[1] + r[3] * l[3];
    const float inv = __fdividef(1.0f, fmaxf(A + D, KF));
    o[0] = A * inv, o[1] = Bq * inv, o[2] = C * inv, o[3] = D * inv;
}

// grid (ceil(M / KS_WARPS), H, B), block 32 x KS_WARPS. Warp w owns channel m; thread j of the
// warp owns tokens [j KS_IT, (j + 1) KS_IT) of each tile. Shared: k, q of the tile for KS_SB states
// [KS_TILEP][KS_SB + 1], v, lambda_v of the tile [KS_WARPS][KS_TILEP] (rows KS_ROW(t)), the
// carried (lambda, eta) [KS_WARPS][S][2].
template <typename T>
__global__ void __launch_bounds__(32 * KS_WARPS)
    kalman_scan_kernel(int T_, int H, int M, int S, float scale, int prior, const T *q, const T *k,
                       const T *v, const float *lv, const float *a_, const float *p_, float *lam_st,
                       float *eta_st, float *o) {
    extern __shared__ __align__(16) float sm[];
    float *sk = sm, *sq = sk + KS_TILEP * (KS_SB + 1), *sv = sq + KS_TILEP * (KS_SB + 1);
    float *slv = sv + KS_WARPS * KS_TILEP, *carry = slv + KS_WARPS * KS_TILEP;
    const int w = threadIdx.y, j = threadIdx.x, tid = w * 32 + j;
    const int h = blockIdx.y, b = blockIdx.z, m = blockIdx.x * KS_WARPS + w, live = m < M;
    const size_t lane0 = (((size_t)b * H + h) * M + (live ? m : 0)) * S; // lane (b, h, m, 0)
    for (int s = j; s < S; s += 32) {
        carry[(w * S + s) * 2 + 0] = live ? lam_st[lane0 + s] : 1.0f;
        carry[(w * S + s) * 2 + 1] = live ? eta_st[lane0 + s] : 0.0f;
    }
    for (int t0 = 0; t0 < T_; t0 += KS_TILE) {
        const int nt = min(KS_TILE, T_ - t0);
        __syncthreads(); // the previous tile is done with sv, slv
        for (int x = tid; x < KS_WARPS * KS_TILE; x += 32 * KS_WARPS) {
            const int ww = x / KS_TILE, i = x % KS_TILE, mm = blockIdx.x * KS_WARPS + ww;
            const size_t tk = ((size_t)b * T_ + t0 + i) * H + h;
            const int ok = i < nt && mm < M;
            sv[ww * KS_TILEP + KS_ROW(i)] = ok ? ld(v + tk * M + mm) : 0.0f;
            slv[ww * KS_TILEP + KS_ROW(i)] = ok ? (lv ? lv[tk * M + mm] : 1.0f) : 1.0f;
        }
        float y[KS_IT];
#pragma unroll
        for (int i = 0; i < KS_IT; i++) y[i] = 0.0f;
        for (int s0 = 0; s0 < S; s0 += KS_SB) {
            const int ns = min(KS_SB, S - s0);
            __syncthreads(); // the previous states are done with sk, sq
            for (int x = tid; x < KS_TILE * KS_SB; x += 32 * KS_WARPS) {
                const int i = x / KS_SB, u = x % KS_SB;
                const size_t tk = ((size_t)b * T_ + t0 + i) * H + h;
                const int ok = i < nt && u < ns;
                sk[KS_ROW(i) * (KS_SB + 1) + u] = ok ? ld(k + tk * S + s0 + u) : 0.0f;
                sq[KS_ROW(i) * (KS_SB + 1) + u] = ok ? ld(q + tk * S + s0 + u) : 0.0f;
            }
            __syncthreads();
            if (!live) continue; // a whole warp: no shuffle partner is missing
            for (int u = 0; u < ns; u++) {
                const int s = s0 + u;
                float a, a2, p;
                kalman_params(a_, p_, ((size_t)h * M + m) * S + s, &a, &a2, &p);
                const float lam0 = carry[(w * S + s) * 2], eta0 = carry[(w * S + s) * 2 + 1];
                // (A) the Mobius aggregate of this thread's run; tokens past the end are identity
                float P[4] = {1.0f, 0.0f, 0.0f, 1.0f};
#pragma unroll
                for (int i = 0; i < KS_IT; i++) {
                    const int t = j * KS_IT + i;
                    if (t < nt) {
                        const float kk = sk[KS_ROW(t) * (KS_SB + 1) + u];
                        const float phi = slv[w * KS_TILEP + KS_ROW(t)] * kk * kk;
                        const float leaf[4] = {1.0f + p * phi, phi * a2, p, a2};
                        mob_combine(P, leaf, P);
                    }
                }
                // (B) inclusive warp scan of the aggregates, then shifted by one: exclusive
#pragma unroll
                for (int off = 1; off < 32; off <<= 1) {
                    float l[4];
#pragma unroll
                    for (int c = 0; c < 4; c++) l[c] = __shfl_up_sync(FULL_MASK, P[c], off);
                    if (j >= off) mob_combine(l, P, P);
                }
                float E[4];
#pragma unroll
                for (int c = 0; c < 4; c++) E[c] = __shfl_up_sync(FULL_MASK, P[c], 1);
                if (j == 0) E[0] = 1.0f, E[1] = 0.0f, E[2] = 0.0f, E[3] = 1.0f;
                // (C) walk the run from its starting lambda: alpha_t needs lambda_{t-1}
                float lam = __fdividef(E[0] * lam0 + E[1], fmaxf(E[2] * lam0 + E[3], KF));
                float al[KS_IT], lt[KS_IT], g = 1.0f, bb = 0.0f;
#pragma unroll
                for (int i = 0; i < KS_IT; i++) {
                    const int t = j * KS_IT + i;
                    al[i] = 1.0f, lt[i] = lam;
                    if (t < nt) {
                        const float kk = sk[KS_ROW(t) * (KS_SB + 1) + u],
                                    lvm = slv[w * KS_TILEP + KS_ROW(t)];
                        const float rd = __fdividef(1.0f, fmaxf(a2 + p * lam, KF));
                        al[i] = a * rd;
                        lam = lam * rd + lvm * kk * kk;
                        lt[i] = lam;
                        // (D) the affine aggregate (g, b): eta -> g eta + b
                        const float r = (sv[w * KS_TILEP + KS_ROW(t)] * lvm) * kk;
                        g = al[i] * g, bb = al[i] * bb + r;
                    }
                }
                // (E) exclusive warp scan of (g, b)
#pragma unroll
                for (int off = 1; off < 32; off <<= 1) {
                    const float lg = __shfl_up_sync(FULL_MASK, g, off);
                    const float lb = __shfl_up_sync(FULL_MASK, bb, off);
                    if (j >= off) bb = g * lb + bb, g = g * lg;
                }
                float eg = __shfl_up_sync(FULL_MASK, g, 1), eb = __shfl_up_sync(FULL_MASK, bb, 1);
                if (j == 0) eg = 1.0f, eb = 0.0f;
                // (F) walk eta and read out
                float eta = eg * eta0 + eb;
#pragma unroll
                for (int i = 0; i < KS_IT; i++) {
                    const int t = j * KS_IT + i;
                    if (t < nt) {
                        const float kk = sk[KS_ROW(t) * (KS_SB + 1) + u],
                                    lvm = slv[w * KS_TILEP + KS_ROW(t)];
                        eta = al[i] * eta + (sv[w * KS_TILEP + KS_ROW(t)] * lvm) * kk;
                        float mean = eta * __fdividef(1.0f, fmaxf(lt[i], KF));
                        if (prior) mean = a * mean;
                        y[i] += scale * sq[KS_ROW(t) * (KS_SB + 1) + u] * mean;
                    }
                }
                __syncwarp();
                if (j == 31) carry[(w * S + s) * 2] = lam, carry[(w * S + s) * 2 + 1] = eta;
                __syncwarp();
            }
        }
        if (live)
#pragma unroll
            for (int i = 0; i < KS_IT; i++) {
                const int t = j * KS_IT + i;
                if (t < nt) o[(((size_t)b * T_ + t0 + t) * H + h) * M + m] = y[i];
            }
    }
    __syncwarp();
    if (live)
        for (int s = j; s < S; s += 32) {
            lam_st[lane0 + s] = carry[(w * S + s) * 2];
            eta_st[lane0 + s] = carry[(w * S + s) * 2 + 1];
        }
}

template <typename T>
static int kalman_launch_scan(int B, int T_, int H, int M, int S, float scale, int prior,
                              const void *q, const void *k, const void *v, const float *lv,
                              const float *a, const float *p, float *state, float *o,
                              cudaStream_t st, err *e) {
    const size_t lanes = (size_t)B * H * M * S;
    const size_t smem = (2 * (size_t)KS_TILEP * (KS_SB + 1) + 2 * (size_t)KS_WARPS * KS_TILEP +
                         2 * (size_t)KS_WARPS * S) *
                        sizeof(float);
    if (smem > 227 * 1024) return err_set(e, "gpu kalman scan: S=%d is too large", S);
    CUDA_TRY(cudaFuncSetAttribute(kalman_scan_kernel<T>,
                                  cudaFuncAttributeMaxDynamicSharedMemorySize, (int)smem),
             "gpu kalman scan: shared memory");
    kalman_scan_kernel<T>
        <<<dim3((M + KS_WARPS - 1) / KS_WARPS, H, B), dim3(32, KS_WARPS), smem, st>>>(
            T_, H, M, S, scale, prior, (const T *)q, (const T *)k, (const T *)v, lv, a, p, state,
            state + lanes, o);
    CUDA_LAUNCHED("gpu kalman scan");
    return 0;
}

// ---------------------------------------------------------------- the chunked scan (kx_*)

#define KX_U     16 // tokens of one readout reduction
#define KX_R     4  // tokens between two renormalisations (the float4 loads of the inputs)
#define KX_MAXCH 64 // most time chunks
#ifndef KX_TT_SMALL
#define KX_TT_SMALL 64 // tokens of a tile at S <= 16 (a build-time knob for the benchmarks)
#endif
#define KX_CHUNK (KX_TT_SMALL > 32 ? KX_TT_SMALL : 32) // chunk lengths: multiples of every tile
#define KX_NST   4                                     // tiles of inputs in flight (kx_ring)

// Shape of a block for S states per channel: NT threads of P lanes each (states s, s + S / P, ...;
// P = 2 where kx_lanes asks for it, at S = 16), C channels of SP = S / P threads (s fastest); W
// threads of a channel share a warp, WPC warps make a channel; tiles of TT tokens staged in shared
// memory, rows of TP floats (the pad keeps the float4 reads of 8 consecutive states on distinct
// banks).
template <int S, int P = 1> struct kx {
    static constexpr int NT = (S >= 128 ? 256 : 128) / P;
    static constexpr int SP = S / P;
    static constexpr int C = NT / SP;
    static constexpr int W = SP < 32 ? SP : 32;
    static constexpr int WPC = SP / W;
    static constexpr int TT = S >= 64 ? 16 : S <= 16 ? KX_TT_SMALL : 32;
    static constexpr int TP = TT + 4;
    // kx_apply blocks a multiprocessor should hold (register caps). At S = 16 the walk is
    // issue-bound and 6 blocks (80 registers) hide its latencies better than 5 (H200, T = 64K:
    // 4.04 -> 3.89 ms); at S = 8, 32, 64 that cap spills, and 4 blocks (<= 128 registers, as the
    // compiler chose before the reduce-scatter was unrolled) keep their occupancy. At S = 128
    // two 256-thread blocks need <= 128 registers: one more (131, with no cap) halved the
    // resident warps and took 37.0 to 65.3 ms. The compose walk gained nothing from a cap.
    // (Since a3ca396 shared memory holds an S = 16 block to 3 a multiprocessor anyway, and at
    // T = 64K one time chunk runs 2; its 80 registers still spill nothing.) Two lanes a thread
    // (64 threads) have no cap that binds: 91-103 registers, no spills.
    static constexpr int APPLY_BLOCKS = P == 2 ? 4 : S == 16 ? 6 : NT == 256 ? 2 : 4;
    // The readout's sums over the W threads of a channel (kx_apply). W <= KX_U: with P = 1 one
    // shuffle round adds lane pairs s, s + W / 2 (each lane keeping half the tokens), with P = 2
    // each thread adds its two lanes' terms; then shared memory: per warp two buffers of CW
    // channels, each NH halves of KH token rows of HW floats (rows RP apart, halves HS, channels
    // CS: the pads keep both the threads' stores and the rows' float4 loads on distinct banks).
    // Otherwise a reduce-scatter by shuffles, and for WPC > 1 two buffers [NT / 32][KX_U] across
    // the warps.
    static constexpr bool TRANSPOSE = W <= KX_U;
    static constexpr int NH = P == 1 ? 2 : 1, CW = 32 / W, HW = W / NH, KH = KX_U / NH;
    static constexpr int RP = HW + 4, HS = KH * RP + ((HW - KH * RP) % 32 + 32) % 32;
    static constexpr int CS = NH * HS + ((NH * HW - NH * HS) % 32 + 32) % 32, RB = CW * CS;
    static constexpr int RED = TRANSPOSE ? NT / 32 * 2 * RB : WPC > 1 ? 2 * (NT / 32) * KX_U : 0;
    static_assert(S >= 8 && S <= 128 && (S & (S - 1)) == 0, "S");
    static_assert(P == 1 || (P == 2 && TRANSPOSE), "two lanes a thread only with the transpose");
    static_assert(TT % KX_U == 0 && KX_CHUNK % TT == 0 && KX_U % KX_R == 0 && KX_R == 4, "tiles");
};

__device__ __forceinline__ float kx_rcp(float x) {
    float r;
    asm("rcp.approx.ftz.f32 %0, %1;" : "=f"(r) : "f"(x));
    return r;
}

// W 32-bit words of shared memory (W = 1, 2, 4: one load), as floats: one per word for fp32, two
// for bf16 (the low half first), unpacked by shifts rather than through memory.
template <typename T, int W>
__device__ __forceinline__ void kx_get(const unsigned char *p, float *x) {
    unsigned w[W];
    if constexpr (W == 4) {
        const uint4 b = *reinterpret_cast<const uint4 *>(p);
        w[0] = b.x, w[1] = b.y, w[2] = b.z, w[3] = b.w;
    } else if constexpr (W == 2) {
        const uint2 b = *reinterpret_cast<const uint2 *>(p);
        w[0] = b.x, w[1] = b.y;
    } else {
        w[0] = *reinterpret_cast<const unsigned *>(p);
    }
#pragma unroll
    for (int i = 0; i < W; i++) {
        if constexpr (std::is_same<T, float>::value) {
            x[i] = __uint_as_float(w[i]);
        } else {
            x[2 * i] = __uint_as_float(w[i] << 16);
            x[2 * i + 1] = __uint_as_float(w[i] & 0xffff0000u);
        }
    }
}

// The inputs of a tile of TT tokens go global -> shared raw (cp.async, KX_NST tiles in flight, so
// that one time chunk of 32768 lanes, two blocks a multiprocessor, still hides the memory's
// latency) -> shared fp32 (convert). Each thread copies and converts the same pieces of every tile,
// so neither step needs a barrier of its own: the block syncs only around the fp32 buffers. The
// pieces go token-fastest over the threads, so that a warp's conversions store to consecutive
// columns of the [state][token] buffers (state-fastest put 16 threads on one bank at S = 128: 68.5
// against 37.2 ms at T = 64K).
// Raw stage (bytes): k [TT][S] T, q [TT][S] T (Q only), v [TT][C] T, lambda_v [TT][C] fp32 (LV
// only). A piece is G contiguous bytes of one token's row: GK for k and q, GV for v (with the
// matching EV floats of lambda_v, in NL copies of GL bytes). fp32 buffer: k [S][TP], q [S][TP] (Q
// only), v lambda_v [C][TP], lambda_v [C][TP] (LV only); the walks square k themselves (a multiply
// was cheaper than the shared-memory traffic of a k^2 row while L1 was 80% busy, 7c708ee). Tokens
// at or past tend read as 0. vec (kx_run's check): every piece aligned and no channel group cut
// by M; otherwise the pieces load element by element (synchronously; correct, slower).
template <typename T, int S, bool LV, bool Q, int P = 1> struct kx_ring {
    static constexpr int NT = kx<S, P>::NT, C = kx<S, P>::C, TT = kx<S>::TT, TP = kx<S>::TP;
    static constexpr int ES = (int)sizeof(T);
    static constexpr int GK = 16, EK = GK / ES, PK = S / EK, NPK = TT * PK;
    static constexpr int GV = C * ES < 16 ? C * ES : 16, EV = GV / ES, PV = C / EV, NPV = TT * PV;
    static constexpr int GL = EV * 4 < 16 ? EV * 4 : 16, NL = EV * 4 / GL;
    static constexpr int OQ = TT * S * ES, OV = OQ + (Q ? TT * S * ES : 0), OL = OV + TT * C * ES;
    static constexpr int RAW = (OL + (LV ? TT * C * 4 : 0) + 15) / 16 * 16; // bytes a stage
    static constexpr int BUF = ((Q ? 2 : 1) * S + (LV ? 2 : 1) * C) * TP;   // floats
    static_assert(S * ES % GK == 0 && C * ES % GV == 0 && GV >= 4, "pieces");

    // kb, qb: (token 0, head h, state 0); vb, lb: (token 0, head h, channel m0); strides HS, HM
    // per token; mleft = M - m0 channels exist.
    static __device__ __forceinline__ void issue(unsigned char *raw, const T *kb, const T *qb,
                                                 const T *vb, const float *lb, size_t HS, size_t HM,
                                                 int mleft, int t0, int tend, bool vec) {
        for (int e = (int)threadIdx.x; e < NPK; e += NT) {
            const int t = e % TT, s0 = e / TT * EK;
            const bool ok = t0 + t < tend;
            const size_t g = (size_t)(ok ? t0 + t : t0) * HS + s0;
            T *dk = (T *)(raw + (t * S + s0) * ES), *dq = (T *)(raw + OQ + (t * S + s0) * ES);
            if (vec) {
                cp_async_zfill<GK>(dk, kb + g, ok);
                if (Q) cp_async_zfill<GK>(dq, qb + g, ok);
            } else {
#pragma unroll
                for (int j = 0; j < EK; j++) {
                    dk[j] = ok ? kb[g + j] : T(0.0f);
                    if (Q) dq[j] = ok ? qb[g + j] : T(0.0f);
                }
            }
        }
        for (int e = (int)threadIdx.x; e < NPV; e += NT) {
            const int t = e % TT, c0 = e / TT * EV;
            const bool ok = t0 + t < tend;
            const size_t g = (size_t)(ok ? t0 + t : t0) * HM + c0;
            T *dv = (T *)(raw + OV + (t * C + c0) * ES);
            float *dl = (float *)(raw + OL + (t * C + c0) * 4);
            if (vec) {
                cp_async_zfill<GV>(dv, vb + g, ok);
                if (LV)
#pragma unroll
                    for (int j = 0; j < NL; j++)
                        cp_async_zfill<GL>(dl + j * (GL / 4), lb + g + j * (GL / 4), ok);
            } else {
#pragma unroll
                for (int j = 0; j < EV; j++) {
                    const bool in = ok && c0 + j < mleft;
                    dv[j] = in ? vb[g + j] : T(0.0f);
                    if (LV) dl[j] = in ? lb[g + j] : 0.0f;
                }
            }
        }
    }
    // this thread's pieces of a landed raw stage -> the fp32 buffer
    static __device__ __forceinline__ void convert(const unsigned char *raw, float *buf) {
        float *sk = buf, *sq = sk + S * TP;
        float *svl = buf + (Q ? 2 : 1) * S * TP, *slv = svl + C * TP;
        for (int e = (int)threadIdx.x; e < NPK; e += NT) {
            const int t = e % TT, s0 = e / TT * EK;
            float x[EK], y[EK];
            kx_get<T, GK / 4>(raw + (t * S + s0) * ES, x);
            if (Q) kx_get<T, GK / 4>(raw + OQ + (t * S + s0) * ES, y);
#pragma unroll
            for (int j = 0; j < EK; j++) {
                sk[(s0 + j) * TP + t] = x[j];
                if (Q) sq[(s0 + j) * TP + t] = y[j];
            }
        }
        for (int e = (int)threadIdx.x; e < NPV; e += NT) {
            const int t = e % TT, c0 = e / TT * EV;
            float x[EV];
            kx_get<T, GV / 4>(raw + OV + (t * C + c0) * ES, x);
            const float *l = (const float *)(raw + OL + (t * C + c0) * 4);
#pragma unroll
            for (int j = 0; j < EV; j++) {
                svl[(c0 + j) * TP + t] = LV ? x[j] * l[j] : x[j];
                if (LV) slv[(c0 + j) * TP + t] = l[j];
            }
        }
    }
    // The pipeline over a block's tiles [tbeg, tend), one slot of the KX_NST-stage ring a tile:
    // start puts the first KX_NST - 1 tiles in flight and converts the first into buf; at the
    // tile t0 read from slot ri, ahead puts the tile KX_NST - 1 further into the slot before ri
    // (converted two tiles ago), and next converts the tile after t0 into buf once it has landed.
    // The block syncs after start and after every next (the fp32 buffers change hands).
    static __device__ __forceinline__ void start(unsigned char *ring, float *buf, const T *kb,
                                                 const T *qb, const T *vb, const float *lb,
                                                 size_t HS, size_t HM, int mleft, int tbeg,
                                                 int tend, bool vec) {
#pragma unroll
        for (int i = 0; i < KX_NST - 1; i++) {
            if (tbeg + i * TT < tend)
                issue(ring + i * RAW, kb, qb, vb, lb, HS, HM, mleft, tbeg + i * TT, tend, vec);
            cp_async_commit();
        }
        cp_async_wait<KX_NST - 2>();
        convert(ring, buf);
    }
    static __device__ __forceinline__ void ahead(unsigned char *ring, int ri, const T *kb,
                                                 const T *qb, const T *vb, const float *lb,
                                                 size_t HS, size_t HM, int mleft, int t0, int tend,
                                                 bool vec) {
        const int t = t0 + (KX_NST - 1) * TT;
        if (t < tend)
            issue(ring + (ri == 0 ? KX_NST - 1 : ri - 1) * RAW, kb, qb, vb, lb, HS, HM, mleft, t,
                  tend, vec);
        cp_async_commit();
    }
    static __device__ __forceinline__ void next(unsigned char *ring, int ri, float *buf, int t0,
                                                int tend) {
        if (t0 + TT < tend) {
            cp_async_wait<KX_NST - 2>();
            convert(ring + (ri == KX_NST - 1 ? 0 : ri + 1) * RAW, buf);
        }
    }
};

// Reduce-scatter over the W lanes of a channel inside a warp: y[i] holds this lane's term of
// token i < KX_U; afterwards y[0 .. HELD) hold the sums over the W lanes of tokens base + i
// (HELD = KX_U / W when W < KX_U, else 1 and W / KX_U lanes, differing in their low bits, hold
// the same token). Each round halves the tokens a lane holds: it keeps one half, sends the other
// to its partner and adds what it receives. The rounds are templates so that every index into y
// is a constant (a run-time index turns the array into predicated moves: 3x the instructions).
template <int OFF, int HH>
__device__ __forceinline__ void kx_scatter_round(float (&y)[KX_U], int lane, int &base) {
    if constexpr (OFF >= 1) {
        if constexpr (HH > 1) {
            constexpr int half = HH / 2;
            const bool hi = (lane & OFF) != 0;
#pragma unroll
            for (int i = 0; i < half; i++) {
                const float send = hi ? y[i] : y[i + half], keep = hi ? y[i + half] : y[i];
                y[i] = keep + __shfl_xor_sync(FULL_MASK, send, OFF);
            }
            base += hi ? half : 0;
            kx_scatter_round<OFF / 2, half>(y, lane, base);
        } else {
            y[0] += __shfl_xor_sync(FULL_MASK, y[0], OFF);
            kx_scatter_round<OFF / 2, 1>(y, lane, base);
        }
    }
}
template <int W> __device__ __forceinline__ int kx_scatter(float (&y)[KX_U], int lane) {
    int base = 0;
    kx_scatter_round<W / 2, KX_U>(y, lane, base);
    return base;
}

// Static dynamics, start state and pointers of one of a thread's P lanes (j < P).
struct kx_lane {
    int s, c, m, live;
    size_t lane;
    float a, a2, p;
};

template <int S, int P = 1>
__device__ __forceinline__ kx_lane kx_lane_of(int H, int M, int m0, const float *a_,
                                              const float *p_, int j = 0) {
    kx_lane L;
    constexpr int SP = S / P;
    L.s = (int)threadIdx.x % SP + j * SP, L.c = (int)threadIdx.x / SP, L.m = m0 + L.c;
    L.live = L.m < M;
    const int h = blockIdx.y, b = blockIdx.z, mc = L.live ? L.m : M - 1;
    L.lane = (((size_t)b * H + h) * M + mc) * S + L.s;
    kalman_params(a_, p_, ((size_t)h * M + mc) * S + L.s, &L.a, &L.a2, &L.p);
    return L;
}

// Phase 3: grid (nch * groups, H, B), groups = ceil(M / C); block x = chunk j * groups + channel
// group. Chunk j covers tokens [j CL, min(T, (j + 1) CL)); its lanes start from st0: lambda at
// st0[2 j lanes + lane], eta at st0[(2 j + 1) lanes + lane] (st0 = state itself when nch = 1:
// each thread reads its lane before it writes it). The last chunk writes the final state.
template <typename T, int S, bool LV, bool PRIOR, int P>
__global__ void __launch_bounds__(kx<S, P>::NT, kx<S, P>::APPLY_BLOCKS)
    kx_apply_kernel(int T_, int H, int M, int CL, int nch, float scale, const T *q, const T *k,
                    const T *v, const float *lv, const float *a_, const float *p_, const float *st0,
                    float *state, float *o, int vec) {
    using K = kx<S, P>;
    using Tile = kx_ring<T, S, LV, true, P>;
    constexpr int NT = K::NT, C = K::C, W = K::W, WPC = K::WPC, TT = K::TT, TP = K::TP;
    constexpr int HELD = W < KX_U ? KX_U / W : 1, DUP = W > KX_U ? W / KX_U : 1;
    extern __shared__ __align__(16) float kx_sm[];
    float *red = kx_sm + 2 * Tile::BUF; // K::RED floats
    unsigned char *ring = (unsigned char *)(red + K::RED);
    const int groups = (M + C - 1) / C, j = (int)blockIdx.x / groups;
    const int m0 = ((int)blockIdx.x % groups) * C, h = blockIdx.y, b = blockIdx.z;
    const int lane_w = (int)threadIdx.x & 31, warp = (int)threadIdx.x / 32;
    const size_t lanes = (size_t)gridDim.z * H * M * S, HS = (size_t)H * S, HM = (size_t)H * M;
    kx_lane L[P];
#pragma unroll
    for (int l = 0; l < P; l++) L[l] = kx_lane_of<S, P>(H, M, m0, a_, p_, l);
    const size_t tok0 = (size_t)b * T_;
    const T *kb = k + tok0 * HS + (size_t)h * S, *qb = q + tok0 * HS + (size_t)h * S;
    const T *vb = v + tok0 * HM + (size_t)h * M + m0;
    const float *lb = LV ? lv + tok0 * HM + (size_t)h * M + m0 : NULL;
    float *ob = o + tok0 * HM + (size_t)h * M + m0;
    const int tbeg = j * CL, tend = min(T_, tbeg + CL);
    // each lane in homogeneous coordinates: (N, D, E) = (lambda, 1, eta)
    float N[P], Dn[P], E[P];
#pragma unroll
    for (int l = 0; l < P; l++) {
        N[l] = st0[2 * (size_t)j * lanes + L[l].lane], Dn[l] = 1.0f;
        E[l] = st0[(2 * (size_t)j + 1) * lanes + L[l].lane];
    }
    Tile::start(ring, kx_sm, kb, qb, vb, lb, HS, HM, M - m0, tbeg, tend, vec);
    __syncthreads();
    int bi = 0, gi = 0, ri = 0; // ri: the ring slot of the tile being read
    for (int t0 = tbeg; t0 < tend; t0 += TT, bi ^= 1, ri = ri == KX_NST - 1 ? 0 : ri + 1) {
        Tile::ahead(ring, ri, kb, qb, vb, lb, HS, HM, M - m0, t0, tend, vec);
        const float *buf = kx_sm + bi * Tile::BUF;
        const float *sk = buf + L[0].s * TP, *sq = sk + S * TP;
        const float *svl = buf + 2 * S * TP + L[0].c * TP, *slv = svl + C * TP;
        const int nv = tend - t0; // tokens of this tile: >= TT except in the last tile
        // one group of KX_U tokens: this thread's readout term of token g0 + i (the sum over its
        // lanes) goes to sink(i, y); FULL: no token past the end
        auto walk = [&](auto full, int g0, int gn, auto sink) {
#pragma unroll
            for (int i0 = 0; i0 < KX_U; i0 += KX_R) {
                float kk[P][4], qq[P][4];
#pragma unroll
                for (int l = 0; l < P; l++) {
                    const float4 k4 =
                        *reinterpret_cast<const float4 *>(sk + l * K::SP * TP + g0 + i0);
                    const float4 q4 =
                        *reinterpret_cast<const float4 *>(sq + l * K::SP * TP + g0 + i0);
                    kk[l][0] = k4.x, kk[l][1] = k4.y, kk[l][2] = k4.z, kk[l][3] = k4.w;
                    qq[l][0] = q4.x, qq[l][1] = q4.y, qq[l][2] = q4.z, qq[l][3] = q4.w;
                }
                const float4 vl4 = *reinterpret_cast<const float4 *>(svl + g0 + i0);
                float4 l4 = make_float4(1.0f, 1.0f, 1.0f, 1.0f);
                if (LV) l4 = *reinterpret_cast<const float4 *>(slv + g0 + i0);
                const float vl[4] = {vl4.x, vl4.y, vl4.z, vl4.w}, ll[4] = {l4.x, l4.y, l4.z, l4.w};
#pragma unroll
                for (int u = 0; u < KX_R; u++) {
                    const int i = i0 + u;
                    if (decltype(full)::value || i < gn) { // uniform over the block
                        float term = 0.0f;
#pragma unroll
                        for (int l = 0; l < P; l++) {
                            // phi D' = (lambda_v k) kd and r D' = v kd with kd = k D': one
                            // product where k^2 and v k took two
                            Dn[l] = fmaf(L[l].a2, Dn[l], L[l].p * N[l]);
                            const float kd = kk[l][u] * Dn[l];
                            N[l] = fmaf(LV ? ll[u] * kk[l][u] : kk[l][u], kd, N[l]);
                            E[l] = fmaf(vl[u], kd, L[l].a * E[l]);
                            const float rn = kx_rcp(N[l]), mu = E[l] * rn;
                            const float x = PRIOR ? L[l].a * mu : mu;
                            term = l == 0 ? qq[l][u] * x : fmaf(qq[l][u], x, term);
                            if (u == KX_R - 1) // renormalise: N = 1
                                Dn[l] *= rn, E[l] = mu, N[l] = 1.0f;
                        }
                        sink(i, term);
                    }
                }
            }
        };
        if constexpr (K::TRANSPOSE) {
            // after one shuffle round the lanes store their pair sums [channel][half][token][lane];
            // after a warp sync lane (rj, rc) sums the rows of tokens rj + W hh of channel rc of
            // its warp (consecutive lanes: neighbouring channels of one token). Buffer pb of the
            // warp's two: a group writes the one its predecessor did not read, so one sync a
            // group suffices.
            static_assert(TT / KX_U % 2 == 0, "groups of a tile alternate the two buffers");
            auto group = [&](auto full, int g0, int gn, int pb) {
                float y[KX_U];
#pragma unroll
                for (int i = 0; i < KX_U; i++) y[i] = 0.0f;
                walk(full, g0, gn, [&](int i, float x) { y[i] = x; });
                float *tb = red + (warp * 2 + pb) * K::RB;
                if constexpr (P == 1) {
                    // lanes s and s + HW: the low one keeps tokens [0, KH), the high one the rest
                    const int hi = L[0].s >= K::HW;
                    float *wr = tb + (lane_w / W) * K::CS + hi * K::HS + L[0].s % K::HW;
#pragma unroll
                    for (int i = 0; i < K::KH; i++) {
                        const float send = hi ? y[i] : y[i + K::KH];
                        const float keep = hi ? y[i + K::KH] : y[i];
                        wr[i * K::RP] = keep + __shfl_xor_sync(FULL_MASK, send, K::HW);
                    }
                } else {
                    float *wr = tb + (lane_w / W) * K::CS + lane_w % W;
#pragma unroll
                    for (int i = 0; i < KX_U; i++) wr[i * K::RP] = y[i];
                }
                __syncwarp();
                const int rc = lane_w % K::CW, rj = lane_w / K::CW, ch = warp * K::CW + rc;
#pragma unroll
                for (int hh = 0; hh < HELD; hh++) {
                    const int i = rj + W * hh;
                    const float4 *row = reinterpret_cast<const float4 *>(
                        tb + rc * K::CS + (i / K::KH) * K::HS + (i % K::KH) * K::RP);
                    float4 acc = row[0];
#pragma unroll
                    for (int f = 1; f < K::HW / 4; f++) {
                        const float4 x = row[f];
                        acc.x += x.x, acc.y += x.y, acc.z += x.z, acc.w += x.w;
                    }
                    if (m0 + ch < M && i < gn)
                        ob[(size_t)(t0 + g0 + i) * HM + ch] =
                            scale * ((acc.x + acc.y) + (acc.z + acc.w));
                }
            };
            if (nv >= TT) {
#pragma unroll
                for (int g = 0; g < TT / KX_U; g++) group(std::true_type(), g * KX_U, KX_U, g & 1);
            } else {
#pragma unroll 1
                for (int g = 0; g * KX_U < nv; g++)
                    group(std::false_type(), g * KX_U, nv - g * KX_U, g & 1);
            }
        } else {
#pragma unroll 1
            for (int g0 = 0; g0 < TT && g0 < nv; g0 += KX_U, gi++) {
                float y[KX_U];
                const int gn = nv - g0; // tokens of this group (>= KX_U: all)
                auto keep = [&](int i, float x) { y[i] = x; };
#pragma unroll
                for (int i = 0; i < KX_U; i++) y[i] = 0.0f;
                if (gn >= KX_U)
                    walk(std::true_type(), g0, gn, keep);
                else
                    walk(std::false_type(), g0, gn, keep);
                const int base = kx_scatter<W>(y, lane_w);
                if (WPC == 1) {
                    if (L[0].live && (lane_w & (DUP - 1)) == 0)
#pragma unroll
                        for (int i = 0; i < HELD; i++)
                            if (base + i < gn)
                                ob[(size_t)(t0 + g0 + base + i) * HM + L[0].c] = scale * y[i];
                } else { // the WPC warps of a channel meet in shared memory (two buffers: one sync)
                    float *rb = red + (gi & 1) * (NT / 32) * KX_U;
                    if ((lane_w & (DUP - 1)) == 0) rb[warp * KX_U + base] = y[0];
                    __syncthreads();
                    if ((int)threadIdx.x < C * KX_U) {
                        const int cc = (int)threadIdx.x / KX_U, i = (int)threadIdx.x % KX_U;
                        float sum = 0.0f;
#pragma unroll
                        for (int w = 0; w < WPC; w++) sum += rb[(cc * WPC + w) * KX_U + i];
                        if (m0 + cc < M && i < gn)
                            ob[(size_t)(t0 + g0 + i) * HM + cc] = scale * sum;
                    }
                }
            }
        }
        Tile::next(ring, ri, kx_sm + (bi ^ 1) * Tile::BUF, t0, tend);
        __syncthreads();
    }
    if (j == nch - 1 && L[0].live)
#pragma unroll
        for (int l = 0; l < P; l++)
            state[L[l].lane] = N[l] / Dn[l], state[lanes + L[l].lane] = E[l] / Dn[l];
}

// Phase 1: grid ((nch - 1) * groups, H, B). Chunk j < nch - 1 (all CL tokens, whole tiles)
// composes its maps: the images of (1, 0, 0) -> (NN, DN, EN) and (0, 1, 0) -> (ND, DD, ED), and
// EE, the E entry of (0, 0, 1)'s image, with one common scale (trace-normalised every KX_R
// tokens). X[(7 j + i) lanes + lane] for i = NN, DN, EN, ND, DD, ED, EE.
template <typename T, int S, bool LV>
__global__ void __launch_bounds__(kx<S>::NT)
    kx_compose_kernel(int T_, int H, int M, int CL, const T *k, const T *v, const float *lv,
                      const float *a_, const float *p_, float *X, int vec) {
    using K = kx<S>;
    using Tile = kx_ring<T, S, LV, false>;
    constexpr int C = K::C, TT = K::TT, TP = K::TP;
    extern __shared__ __align__(16) float kx_sm[];
    const int groups = (M + C - 1) / C, j = (int)blockIdx.x / groups;
    const int m0 = ((int)blockIdx.x % groups) * C, h = blockIdx.y, b = blockIdx.z;
    const size_t lanes = (size_t)gridDim.z * H * M * S, HS = (size_t)H * S, HM = (size_t)H * M;
    const kx_lane L = kx_lane_of<S>(H, M, m0, a_, p_);
    const size_t tok0 = (size_t)b * T_;
    const T *kb = k + tok0 * HS + (size_t)h * S, *vb = v + tok0 * HM + (size_t)h * M + m0;
    const float *lb = LV ? lv + tok0 * HM + (size_t)h * M + m0 : NULL;
    const int tbeg = j * CL, tend = tbeg + CL;
    const float a4 = (L.a * L.a) * (L.a * L.a);
    float NN = 1.0f, DN = 0.0f, EN = 0.0f, ND = 0.0f, DD = 1.0f, ED = 0.0f, EE = 1.0f;
    unsigned char *ring = (unsigned char *)(kx_sm + 2 * Tile::BUF);
    Tile::start(ring, kx_sm, kb, NULL, vb, lb, HS, HM, M - m0, tbeg, tend, vec);
    __syncthreads();
    int bi = 0, ri = 0;
    for (int t0 = tbeg; t0 < tend; t0 += TT, bi ^= 1, ri = ri == KX_NST - 1 ? 0 : ri + 1) {
        Tile::ahead(ring, ri, kb, NULL, vb, lb, HS, HM, M - m0, t0, tend, vec);
        const float *buf = kx_sm + bi * Tile::BUF;
        const float *sk = buf + L.s * TP;
        const float *svl = buf + S * TP + L.c * TP, *slv = svl + C * TP;
#pragma unroll 2
        for (int i0 = 0; i0 < TT; i0 += KX_R) {
            const float4 k4 = *reinterpret_cast<const float4 *>(sk + i0);
            const float4 vl4 = *reinterpret_cast<const float4 *>(svl + i0);
            float4 l4 = make_float4(1.0f, 1.0f, 1.0f, 1.0f);
            if (LV) l4 = *reinterpret_cast<const float4 *>(slv + i0);
            const float kk[4] = {k4.x, k4.y, k4.z, k4.w};
            const float vl[4] = {vl4.x, vl4.y, vl4.z, vl4.w}, ll[4] = {l4.x, l4.y, l4.z, l4.w};
#pragma unroll
            for (int u = 0; u < KX_R; u++) {
                const float k2 = kk[u] * kk[u], phi = LV ? ll[u] * k2 : k2;
                const float r = vl[u] * kk[u];
                float d = fmaf(L.a2, DN, L.p * NN);
                NN = fmaf(phi, d, NN), EN = fmaf(r, d, L.a * EN), DN = d;
                d = fmaf(L.a2, DD, L.p * ND);
                ND = fmaf(phi, d, ND), ED = fmaf(r, d, L.a * ED), DD = d;
            }
            const float f = kx_rcp(NN + DD); // the trace: > 0, every entry of the block is >= 0
            NN *= f, DN *= f, EN *= f, ND *= f, DD *= f, ED *= f, EE *= a4 * f;
        }
        Tile::next(ring, ri, kx_sm + (bi ^ 1) * Tile::BUF, t0, tend);
        __syncthreads();
    }
    if (!L.live) return;
    float *x = X + 7 * (size_t)j * lanes + L.lane;
    x[0] = NN, x[lanes] = DN, x[2 * lanes] = EN, x[3 * lanes] = ND;
    x[4 * lanes] = DD, x[5 * lanes] = ED, x[6 * lanes] = EE;
}

// Phase 2: one thread per lane applies the chunk maps in order to its state: the starting
// (lambda, eta) of every chunk, st0[2 j lanes + lane] and st0[(2 j + 1) lanes + lane].
__global__ void __launch_bounds__(256)
    kx_carry_kernel(size_t lanes, int nch, const float *__restrict__ X,
                    const float *__restrict__ state, float *__restrict__ st0) {
    const size_t L = (size_t)blockIdx.x * 256 + threadIdx.x;
    if (L >= lanes) return;
    float lam = state[L], eta = state[lanes + L];
    for (int j = 0; j < nch; j++) {
        st0[2 * (size_t)j * lanes + L] = lam, st0[(2 * (size_t)j + 1) * lanes + L] = eta;
        if (j + 1 == nch) break;
        const float *x = X + 7 * (size_t)j * lanes + L;
        const float N = fmaf(x[0], lam, x[3 * lanes]), Dn = fmaf(x[lanes], lam, x[4 * lanes]);
        const float E = fmaf(x[2 * lanes], lam, fmaf(x[6 * lanes], eta, x[5 * lanes]));
        lam = N / Dn, eta = E / Dn;
    }
}

// Time chunks of the scan: one when the lanes alone give 4 warps per SM or more, else enough for
// about 128 warps' worth of work per SM, at most KX_MAXCH and none shorter than KX_CHUNK tokens.
// Chunks cost a second walk (the chunk maps) and pay only where one walk's latencies show: with
// kx_ring's inputs 3 tiles ahead, 32768 lanes (T = 64K, S = 16; 7.8 warps per SM) took 2.93-2.97 ms
// in one chunk against 3.52-3.81 in 2, 4, 8 or 16 (H200, docs/gpu-results.md). The environment
// variable MIXSCOPE_KALMAN_CHUNKS (a positive integer) asks for a count instead: a tuning knob for
// the benchmarks. *CL: the tokens of a chunk (a multiple of KX_CHUNK; the last may be shorter).
static int kx_chunks(int sms, size_t threads, int T_, int *CL) {
    size_t want = 1;
    if (threads < (size_t)sms * 128) want = ((size_t)sms * 4096 + threads - 1) / threads;
    const char *env = getenv("MIXSCOPE_KALMAN_CHUNKS");
    if (env && atoi(env) > 0) want = (size_t)atoi(env);
    const size_t most = ((size_t)T_ + KX_CHUNK - 1) / KX_CHUNK;
    if (want > KX_MAXCH) want = KX_MAXCH;
    if (want > most) want = most;
    const size_t per = ((size_t)T_ + want - 1) / want;
    *CL = (int)((per + KX_CHUNK - 1) / KX_CHUNK * KX_CHUNK);
    return (int)(((size_t)T_ + *CL - 1) / *CL);
}

static bool kx_aligned(const void *p, int G) {
    return (uintptr_t)p % (uintptr_t)G == 0;
}

// kx_apply over P lanes a thread: its shared memory, and its launch from chunk starts st0.
template <typename T, int S, bool LV, int P> static size_t kx_apply_smem() {
    using R = kx_ring<T, S, LV, true, P>;
    return (2 * (size_t)R::BUF + kx<S, P>::RED) * sizeof(float) + KX_NST * (size_t)R::RAW;
}
template <typename T, int S, bool LV, bool PRIOR, int P>
static cudaError_t kx_apply_launch(dim3 g, int T_, int H, int M, int CL, int nch, float scale,
                                   const void *q, const void *k, const void *v, const float *lv,
                                   const float *a, const float *p, const float *st0, float *state,
                                   float *o, int vec, cudaStream_t st) {
    const size_t smem = kx_apply_smem<T, S, LV, P>();
    cudaError_t rc = cudaFuncSetAttribute(kx_apply_kernel<T, S, LV, PRIOR, P>,
                                          cudaFuncAttributeMaxDynamicSharedMemorySize, (int)smem);
    if (rc != cudaSuccess) return rc;
    kx_apply_kernel<T, S, LV, PRIOR, P>
        <<<g, kx<S, P>::NT, smem, st>>>(T_, H, M, CL, nch, scale, (const T *)q, (const T *)k,
                                        (const T *)v, lv, a, p, st0, state, o, vec);
    return cudaGetLastError();
}

// Lanes a thread of kx_apply walks. Two (S = 16 only) take a lane-step from ~18 warp instructions
// to 15 (k and q loaded once for both, the readout's first sum an FFMA in registers instead of a
// shuffle round), but halve the warps, and the walk is bound by the issue of the warps a scheduler
// holds: so two only where the lanes still give two warps a scheduler at two lanes a thread. H200,
// S = 16, same run: 4 sequences of 16K (131072 lanes) 1.79-1.80 ms against 1.92 with one lane a
// thread; one of 64K (32768 lanes) 2.56-2.58 against 2.22 (docs/gpu-results.md).
// MIXSCOPE_KALMAN_LANES=1 or 2 asks for that many where S allows (a knob for the benchmarks and
// the tests).
static int kx_lanes(int sms, int S, size_t lanes) {
    if (S != 16) return 1;
    const char *env = getenv("MIXSCOPE_KALMAN_LANES");
    if (env && (atoi(env) == 1 || atoi(env) == 2)) return atoi(env);
    return lanes >= (size_t)sms * 4 * 2 * 32 * 2 ? 2 : 1; // 2 warps a scheduler, 2 lanes
}
// kx_apply with P lanes a thread (kx_lanes' answer).
template <typename T, int S, bool LV, bool PRIOR>
static cudaError_t kx_apply_any(int P, dim3 g, int T_, int H, int M, int CL, int nch, float scale,
                                const void *q, const void *k, const void *v, const float *lv,
                                const float *a, const float *p, const float *st0, float *state,
                                float *o, int vec, cudaStream_t st) {
    if constexpr (S == 16)
        if (P == 2)
            return kx_apply_launch<T, S, LV, PRIOR, 2>(g, T_, H, M, CL, nch, scale, q, k, v, lv, a,
                                                       p, st0, state, o, vec, st);
    return kx_apply_launch<T, S, LV, PRIOR, 1>(g, T_, H, M, CL, nch, scale, q, k, v, lv, a, p, st0,
                                               state, o, vec, st);
}

template <typename T, int S, bool LV, bool PRIOR>
static int kx_run(int B, int T_, int H, int M, float scale, const void *q, const void *k,
                  const void *v, const float *lv, const float *a, const float *p, float *state,
                  float *o, cudaStream_t st, err *e) {
    using K = kx<S>;
    const size_t lanes = (size_t)B * H * M * S;
    const int groups = (M + K::C - 1) / K::C;
    if (B > 65535 || H > 65535) return err_set(e, "gpu kalman scan: B=%d H=%d too large", B, H);
    int CL;
    const int n_sm = gpu_sm_count(), sms = n_sm ? n_sm : 132; // 132 when the GPU cannot say
    const int P = kx_lanes(sms, S, lanes);
    const int nch = kx_chunks(sms, (size_t)groups * K::NT * H * B, T_, &CL);
    using R3 = kx_ring<T, S, LV, true>;
    using R1 = kx_ring<T, S, LV, false>;
    const size_t smem1 = 2 * (size_t)R1::BUF * sizeof(float) + KX_NST * (size_t)R1::RAW;
    // the pieces of kx_ring as cp.async copies: every one aligned, no channel group cut by M
    const int vec = M % K::C == 0 && kx_aligned(q, 16) && kx_aligned(k, 16) &&
                    kx_aligned(v, R3::GV) && (!LV || kx_aligned(lv, R3::GL));
    const dim3 g3((unsigned)(nch * groups), (unsigned)H, (unsigned)B);
    if (nch == 1) {
        const cudaError_t rc = kx_apply_any<T, S, LV, PRIOR>(P, g3, T_, H, M, CL, 1, scale, q, k, v,
                                                             lv, a, p, state, state, o, vec, st);
        CUDA_TRY(rc, "gpu kalman scan");
        return 0;
    }
    CUDA_TRY(cudaFuncSetAttribute(kx_compose_kernel<T, S, LV>,
                                  cudaFuncAttributeMaxDynamicSharedMemorySize, (int)smem1),
             "gpu kalman scan: shared memory");
    // scratch: the chunk maps X [nch - 1][7][lanes], the chunk starts [nch][2][lanes]
    float *X = NULL;
    CUDA_TRY(cudaMallocAsync((void **)&X,
                             (7 * (size_t)(nch - 1) + 2 * (size_t)nch) * lanes * sizeof(float), st),
             "gpu kalman scan: scratch");
    float *st0 = X + 7 * (size_t)(nch - 1) * lanes;
    kx_compose_kernel<T, S, LV>
        <<<dim3((unsigned)((nch - 1) * groups), (unsigned)H, (unsigned)B), K::NT, smem1, st>>>(
            T_, H, M, CL, (const T *)k, (const T *)v, lv, a, p, X, vec);
    cudaError_t rc = cudaGetLastError();
    if (rc == cudaSuccess) {
        kx_carry_kernel<<<(unsigned)((lanes + 255) / 256), 256, 0, st>>>(lanes, nch, X, state, st0);
        rc = cudaGetLastError();
    }
    if (rc == cudaSuccess)
        rc = kx_apply_any<T, S, LV, PRIOR>(P, g3, T_, H, M, CL, nch, scale, q, k, v, lv, a, p, st0,
                                           state, o, vec, st);
    const cudaError_t rf = cudaFreeAsync(X, st);
    if (rc != cudaSuccess) return err_set(e, "gpu kalman scan: %s", cudaGetErrorString(rc));
    CUDA_TRY(rf, "gpu kalman scan: scratch");
    return 0;
}

template <typename T, bool LV, bool PRIOR>
static int kx_dispatch(int B, int T_, int H, int M, int S, float scale, const void *q,
                       const void *k, const void *v, const float *lv, const float *a,
                       const float *p, float *state, float *o, cudaStream_t st, err *e) {
    switch (S) {
    case 8:
        return kx_run<T, 8, LV, PRIOR>(B, T_, H, M, scale, q, k, v, lv, a, p, state, o, st, e);
    case 16:
        return kx_run<T, 16, LV, PRIOR>(B, T_, H, M, scale, q, k, v, lv, a, p, state, o, st, e);
    case 32:
        return kx_run<T, 32, LV, PRIOR>(B, T_, H, M, scale, q, k, v, lv, a, p, state, o, st, e);
    case 64:
        return kx_run<T, 64, LV, PRIOR>(B, T_, H, M, scale, q, k, v, lv, a, p, state, o, st, e);
    default:
        return kx_run<T, 128, LV, PRIOR>(B, T_, H, M, scale, q, k, v, lv, a, p, state, o, st, e);
    }
}

template <typename T>
static int kx_scan(int B, int T_, int H, int M, int S, float scale, int prior, const void *q,
                   const void *k, const void *v, const float *lv, const float *a, const float *p,
                   float *state, float *o, cudaStream_t st, err *e) {
    if (lv)
        return prior ? kx_dispatch<T, true, true>(B, T_, H, M, S, scale, q, k, v, lv, a, p, state,
                                                  o, st, e)
                     : kx_dispatch<T, true, false>(B, T_, H, M, S, scale, q, k, v, lv, a, p, state,
                                                   o, st, e);
    return prior ? kx_dispatch<T, false, true>(B, T_, H, M, S, scale, q, k, v, lv, a, p, state, o,
                                               st, e)
                 : kx_dispatch<T, false, false>(B, T_, H, M, S, scale, q, k, v, lv, a, p, state, o,
                                                st, e);
}

extern "C" int gpu_kalman_scan(int B, int T, int H, int M, int S, float scale, int prior, int bf16,
                               const void *q, const void *k, const void *v, const float *lv,
                               const float *a, const float *p, float *state, float *o, void *stream,
                               err *e) {
    if (T < 1) return 0;
    cudaStream_t st = (cudaStream_t)stream;
    if (S >= 8 && S <= 128 && (S & (S - 1)) == 0)
        return bf16 ? kx_scan<__nv_bfloat16>(B, T, H, M, S, scale, prior, q, k, v, lv, a, p, state,
                                             o, st, e)
                    : kx_scan<float>(B, T, H, M, S, scale, prior, q, k, v, lv, a, p, state, o, st,
                                     e);
    return bf16 ? kalman_launch_scan<__nv_bfloat16>(B, T, H, M, S, scale, prior, q, k, v, lv, a, p,
                                                    state, o, st, e)
                : kalman_launch_scan<float>(B, T, H, M, S, scale, prior, q, k, v, lv, a, p, state,
                                            o, st, e);
}
