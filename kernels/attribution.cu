// attribution.cu: exact attribution (mixers/attribution.h) on the GPU for the delta family, GLA
// and Mamba2: M [H, T, T] with o_i = sum_j M_ij v_j + o_init_i, its decay-only part and o_init.
//
// One warp per output row (head h, token i): the warp holds u = A_{j+1} ... A_i q_i, dk / 32
// values a lane, and sweeps j = i, i-1, ..., 0:
//     M_ij = scale w_j (k_j . u),      u <- A_j u
// with A_j = alpha_j (I - w_j k_j k_j^T) (delta family), diag(exp(gk_j)) (GLA) or exp(g_j) I
// (Mamba2). The decay-only part scale w_j (prod_{t=j+1..i} alpha_t) (q_i . k_j) rides along: a
// second dot product reduced in the same shuffles and a running product of the decays. Each lane
// keeps one M value of the current aligned block of 32 columns and the warp stores the block at
// once (coalesced). Rows run longest first (i descending) so the last wave is short. After the
// sweep, o_init_i = scale S0^T u from u staged in shared memory, a lane per value column.
//
// Work: H T (T + 1) / 2 steps of about 6 dk flops; every step reads k_j (dk floats, from L2).
#include <cuda_runtime.h>
#include <string.h>

#include "gpu.h"
#include "gpu_common.cuh"

#define AT_WARPS 4 // warps a block
#define AT_MAXK  8 // dk / 32 at most: dk <= 256

enum { AT_DELTA = 0, AT_GLA = 1, AT_SCALAR = 2 };

// w [T, H] the write strengths and a [T, H] the scalar decays of every token and head.
__global__ void at_prep(int T, int H, int dk, int kacz, float eps, const float *k, const float *g,
                        const float *beta, float *w, float *a) {
    int th = blockIdx.x * blockDim.x + threadIdx.x;
    if (th >= T * H) return;
    float ww = beta ? beta[th] : 1.0f;
    if (kacz) {
        const float *kk = k + (size_t)th * dk;
        float n = 0;
        for (int d = 0; d < dk; d++) n += kk[d] * kk[d];
        ww = ww / (n + eps);
    }
    w[th] = ww;
    a[th] = g ? expf(g[th]) : 1.0f;
}

template <int NK>
__global__ void __launch_bounds__(AT_WARPS * 32)
    at_rows(int kind, int T, int H, int dk, int dv, float scale, const float *__restrict__ q,
            const float *__restrict__ k, const float *__restrict__ gk, const float *__restrict__ w,
            const float *__restrict__ a, const float *__restrict__ S0, float *__restrict__ M,
            float *__restrict__ Md, float *__restrict__ o_init) {
    __shared__ float us[AT_WARPS][AT_MAXK * 32];
    const int lane = threadIdx.x & 31, wib = threadIdx.x >> 5;
    const long r = (long)blockIdx.x * AT_WARPS + wib;
    if (r >= (long)T * H) return;
    const int i = T - 1 - (int)(r / H), h = (int)(r % H);
    float u[NK], qi[NK];
    const float *qrow = q + ((size_t)i * H + h) * dk;
#pragma unroll
    for (int c = 0; c < NK; c++) {
        int d = c * 32 + lane;
        u[c] = qi[c] = d < dk ? qrow[d] : 0.0f;
    }
    float *Mrow = M + ((size_t)h * T + i) * T, *Mdrow = Md ? Md + ((size_t)h * T + i) * T : NULL;
    float mv = 0.0f, mdv = 0.0f, dec = 1.0f;
    for (int j = i; j >= 0; j--) {
        const float *kj = k + ((size_t)j * H + h) * dk;
        float kv[NK], s1 = 0.0f, s2 = 0.0f;
#pragma unroll
        for (int c = 0; c < NK; c++) {
            int d = c * 32 + lane;
            kv[c] = d < dk ? kj[d] : 0.0f;
            s1 += kv[c] * u[c];
            s2 += kv[c] * qi[c];
        }
#pragma unroll
        for (int o = 16; o > 0; o >>= 1) {
            s1 += __shfl_xor_sync(0xffffffffu, s1, o);
            s2 += __shfl_xor_sync(0xffffffffu, s2, o);
        }
        const size_t th = (size_t)j * H + h;
        const float wj = w[th], m = scale * wj * s1;
        const float md = kind == AT_DELTA ? scale * wj * dec * s2 : m;
        if ((j & 31) == lane) mv = m, mdv = md;
        if ((j & 31) == 0) { // the block [j, j + 32) is complete: store it at once
            int col = j + lane;
            if (col <= i) {
                Mrow[col] = mv;
                if (Mdrow) Mdrow[col] = mdv;
            }
        }
        // u <- A_j u
        if (kind == AT_DELTA) {
            const float aj = a[th], bd = wj * s1;
            dec *= aj;
#pragma unroll
            for (int c = 0; c < NK; c++) u[c] = aj * (u[c] - bd * kv[c]);
        } else if (kind == AT_GLA) {
            const float *gj = gk + th * dk;
#pragma unroll
            for (int c = 0; c < NK; c++) {
                int d = c * 32 + lane;
                u[c] *= d < dk ? __expf(gj[d]) : 1.0f;
            }
        } else {
            const float aj = a[th];
#pragma unroll
            for (int c = 0; c < NK; c++) u[c] *= aj;
        }
    }
    // o_init_i = scale S0^T u
    float *oi = o_init + ((size_t)i * H + h) * dv;
    if (!S0) {
        for (int c = lane; c < dv; c += 32) oi[c] = 0.0f;
        return;
    }
#pragma unroll
    for (int c = 0; c < NK; c++) us[wib][c * 32 + lane] = u[c];
    __syncwarp();
    const float *S = S0 + (size_t)h * dk * dv;
    for (int c = lane; c < dv; c += 32) {
        float s = 0.0f;
        for (int d = 0; d < dk; d++) s += us[wib][d] * S[(size_t)d * dv + c];
        oi[c] = scale * s;
    }
}

extern "C" int gpu_attribution(int kind, int T, int H, int dk, int dv, float scale, int kacz,
                               float eps, const float *q, const float *k, const float *g,
                               const float *gk, const float *beta, const float *S0, float *M,
                               float *Md, float *o_init, void *scratch, void *stream, err *e) {
    if (dk > AT_MAXK * 32)
        return err_set(e, "gpu attribution: dk=%d (at most %d)", dk, AT_MAXK * 32);
    if (kind < AT_DELTA || kind > AT_SCALAR) return err_set(e, "gpu attribution: kind %d", kind);
    cudaStream_t st = (cudaStream_t)stream;
    float *w = (float *)scratch, *a = w + (size_t)T * H;
    at_prep<<<(T * H + 255) / 256, 256, 0, st>>>(T, H, dk, kacz, eps, k, g,
                                                 kind == AT_DELTA ? beta : NULL, w, a);
    CUDA_LAUNCHED("gpu attribution: prep");
    CUDA_TRY(cudaMemsetAsync(M, 0, (size_t)H * T * T * sizeof(float), st), "gpu attribution: M");
    if (Md)
        CUDA_TRY(cudaMemsetAsync(Md, 0, (size_t)H * T * T * sizeof(float), st),
                 "gpu attribution: Md");
    const long rows = (long)T * H;
    const unsigned blocks = (unsigned)((rows + AT_WARPS - 1) / AT_WARPS);
    const int nk = (dk + 31) / 32;
#define AT_LAUNCH(N)                                                                               \
    at_rows<N><<<blocks, AT_WARPS * 32, 0, st>>>(kind, T, H, dk, dv, scale, q, k, gk, w, a, S0, M, \
                                                 Md, o_init)
    if (nk <= 1)
        AT_LAUNCH(1);
    else if (nk <= 2)
        AT_LAUNCH(2);
    else if (nk <= 4)
        AT_LAUNCH(4);
    else
        AT_LAUNCH(8);
#undef AT_LAUNCH
    CUDA_LAUNCHED("gpu attribution: rows");
    return 0;
}

extern "C" size_t gpu_attribution_scratch_bytes(int T, int H) {
    return (size_t)2 * T * H * sizeof(float);
}

// Host arrays in and out (tests, the session): the kind from the mixer, copies both ways.
extern "C" int gpu_attribution_host(const mixer_ops *m, const mixer_cfg *c, const float *init,
                                    const mixer_seq *x, float *M, float *Md, float *o_init,
                                    err *e) {
    int kind, kacz = 0, decay = 1;
    if (!strcmp(m->name, "gdn"))
        kind = AT_DELTA;
    else if (!strcmp(m->name, "deltanet"))
        kind = AT_DELTA, decay = 0;
    else if (!strcmp(m->name, "kaczmarz"))
        kind = AT_DELTA, kacz = 1;
    else if (!strcmp(m->name, "gla"))
        kind = AT_GLA;
    else if (!strcmp(m->name, "mamba2"))
        kind = AT_SCALAR;
    else
        return err_set(e, "gpu attribution: %s has no GPU attribution", m->name);
    const int T = x->T, H = c->H, dk = c->dk, dv = c->dv;
    const size_t nk = (size_t)T * H * dk, nth = (size_t)T * H, nm = (size_t)H * T * T,
                 no = (size_t)T * H * dv, ns = (size_t)H * dk * dv;
    const float *S0h = NULL;
    if (init && m->state_parts) {
        state_part parts[MIXER_MAX_STATE_PARTS];
        int np = m->state_parts(c, parts);
        for (int p = 0; p < np; p++)
            if (!strcmp(parts[p].name, "hT")) S0h = init + parts[p].offset;
    }
    const int has_g = kind == AT_SCALAR || (kind == AT_DELTA && decay);
    float *dq = NULL, *dk_ = NULL, *dg = NULL, *dgk = NULL, *db = NULL, *dS = NULL, *dM = NULL,
          *dMd = NULL, *dO = NULL, *scr = NULL;
    int rc = -1;
#define AT_ALLOC(p, n)                                                                             \
    if (cudaMalloc((void **)&(p), (n) * sizeof(float)) != cudaSuccess) {                           \
        err_set(e, "gpu attribution: out of device memory");                                       \
        goto done;                                                                                 \
    }
#define AT_UP(d, h, n)                                                                             \
    if (cudaMemcpy(d, h, (n) * sizeof(float), cudaMemcpyHostToDevice) != cudaSuccess) {            \
        err_set(e, "gpu attribution: copy to the device");                                         \
        goto done;                                                                                 \
    }
    AT_ALLOC(dq, nk);
    AT_ALLOC(dk_, nk);
    AT_ALLOC(dM, nm);
    AT_ALLOC(dO, no);
    AT_ALLOC(scr, 2 * nth);
    AT_UP(dq, x->in[IN_Q], nk);
    AT_UP(dk_, x->in[IN_K], nk);
    if (has_g) {
        AT_ALLOC(dg, nth);
        AT_UP(dg, x->in[IN_G], nth);
    }
    if (kind == AT_GLA) {
        AT_ALLOC(dgk, nk);
        AT_UP(dgk, x->in[IN_GK], nk);
    }
    if (kind == AT_DELTA) {
        AT_ALLOC(db, nth);
        AT_UP(db, x->in[IN_BETA], nth);
    }
    if (S0h) {
        AT_ALLOC(dS, ns);
        AT_UP(dS, S0h, ns);
    }
    if (Md) AT_ALLOC(dMd, nm);
    if (gpu_attribution(kind, T, H, dk, dv, c->scale, kacz, c->eps, dq, dk_, dg, dgk, db, dS, dM,
                        dMd, dO, scr, NULL, e))
        goto done;
    if (cudaMemcpy(M, dM, nm * sizeof(float), cudaMemcpyDeviceToHost) != cudaSuccess ||
        (Md && cudaMemcpy(Md, dMd, nm * sizeof(float), cudaMemcpyDeviceToHost) != cudaSuccess) ||
        cudaMemcpy(o_init, dO, no * sizeof(float), cudaMemcpyDeviceToHost) != cudaSuccess) {
        err_set(e, "gpu attribution: %s", cudaGetErrorString(cudaGetLastError()));
        goto done;
    }
    rc = 0;
done:
#undef AT_ALLOC
#undef AT_UP
    cudaFree(dq), cudaFree(dk_), cudaFree(dg), cudaFree(dgk), cudaFree(db), cudaFree(dS);
    cudaFree(dM), cudaFree(dMd), cudaFree(dO), cudaFree(scr);
    return rc;
}
