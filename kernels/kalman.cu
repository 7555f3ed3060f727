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
// Two forms:
//   kalman_walk  one thread per lane walks the tokens in order (the recurrence itself). The
//                readout sums over s with warp shuffles. Also the decode step (T = 1).
//   kalman_scan  a block scan per lane over time: one warp per channel m, its 32 threads own
//                consecutive runs of IT tokens of a tile. Per state s: each thread composes the
//                Mobius leaves of its run (§4.1, trace-normalised §4.2), a warp scan gives every
//                run its starting lambda, the run walks it; then the same for the affine pair
//                (alpha, r) of eta (§4.3). (lambda, eta) is carried from tile to tile.
#include <cuda_bf16.h>
#include <cuda_runtime.h>
#include <math.h>

#include "gpu.h"
#include "gpu_common.cuh"

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
    if (tid != 0) return;
    // head probes: one thread, lanes in the CPU's order (m outer, s inner)
    float lmin = INFINITY, lmax = -INFINITY, ws = 0, fs = 0, gs = 0, gap = 0;
    for (size_t j = 0; j < W; j++) {
        lmin = fminf(lmin, lam[j]), lmax = fmaxf(lmax, lam[j]);
        ws = __fadd_rn(ws, wr[j]), fs = __fadd_rn(fs, fo[j]), gs = __fadd_rn(gs, gain[j]);
        gap = fmaxf(gap, (float)(fabs((double)lam[j] - (double)star[j]) /
                                 fmax((double)star[j], (double)KF)));
    }
    const float cnt = (float)M * (float)S;
    out_hd[0 * BH + n] = lmin;
    out_hd[1 * BH + n] = lmax;
    out_hd[2 * BH + n] = ws / cnt;
    out_hd[3 * BH + n] = fs / cnt;
    out_hd[4 * BH + n] = gs;
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

extern "C" int gpu_kalman_scan(int B, int T, int H, int M, int S, float scale, int prior, int bf16,
                               const void *q, const void *k, const void *v, const float *lv,
                               const float *a, const float *p, float *state, float *o, void *stream,
                               err *e) {
    if (T < 1) return 0;
    cudaStream_t st = (cudaStream_t)stream;
    return bf16 ? kalman_launch_scan<__nv_bfloat16>(B, T, H, M, S, scale, prior, q, k, v, lv, a, p,
                                                    state, o, st, e)
                : kalman_launch_scan<float>(B, T, H, M, S, scale, prior, q, k, v, lv, a, p, state,
                                            o, st, e);
}
