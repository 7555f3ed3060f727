// ld_steps.cu: the decayed linear-attention recurrence over n tokens in one launch and its probes
// (ld_steps.cuh); mixers/linear_decay.c's ld_step_head is the CPU reference.
#include <cuda_runtime.h>
#include <math.h>

#include "gpu_common.cuh"
#include "ld_steps.cuh"

// ld_step_head for n tokens. Block (column slice x, head y), threads (32, GM_RG): thread (tx, ty)
// owns column j = 32 x + tx and rows ty, ty + GM_RG, ... of the head's state, in registers from
// the first token to the last. Per token, with alpha_i = exp(g_i):
//   S = diag(alpha) S + k v^T,   o = S^T (scale q),
// with PROBES also the per-column sums of the slice (|e|^2 with e = v - (diag(alpha) S_(t-1))^T k
// the decayed state's readback before the write, |v|^2, |o|^2, |S_t|^2 and
// sum_i (1 - alpha_i)^2 S_(t-1)[i, j]^2) into part[t][h][x][LD_NACC]; with STORE the state after
// each token into Sout.
template <int MAXR, bool PROBES, bool STORE>
__global__ void __launch_bounds__(32 * GM_RG) ld_core(ld_core_args a) {
    __shared__ float sk[MAXR * GM_RG], sq[MAXR * GM_RG], sa[MAXR * GM_RG], sf[MAXR * GM_RG];
    __shared__ float ra[GM_RG][33], rb[4][GM_RG][33];
    const int h = blockIdx.y, tx = threadIdx.x, ty = threadIdx.y, tid = ty * 32 + tx;
    const int j = blockIdx.x * 32 + tx, dk = a.dk, dv = a.dv;
    const bool jin = j < dv;
    float *S = a.state + (size_t)h * dk * dv;
    float col[MAXR];
#pragma unroll
    for (int r = 0; r < MAXR; r++) {
        const int i = ty + r * GM_RG;
        col[r] = (i < dk && jin) ? S[(size_t)i * dv + j] : 0.0f;
    }
    // Token t + 1's inputs are loaded into registers while token t runs.
    float nk = 0.0f, nq = 0.0f, nv = 0.0f, ng = 0.0f;
    auto fetch = [&](int t) {
        const size_t qk = (size_t)t * a.ldqk + (size_t)h * dk;
        if (tid < dk) {
            nk = a.K[qk + tid], nq = a.Q[qk + tid];
            ng = a.G[(size_t)t * a.ldg + (a.row_decay ? (size_t)h * dk + tid : (size_t)h)];
        }
        nv = jin ? a.V[(size_t)t * a.ldv + (size_t)h * dv + j] : 0.0f;
    };
    fetch(0);
    for (int t = 0; t < a.n; t++) {
        __syncthreads(); // (A) the previous token is done with sk, sq, sa, sf
        if (tid < dk) {
            sk[tid] = nk, sq[tid] = a.scale * nq, sa[tid] = expf(ng);
            if (PROBES) {
                const float f = -expm1f(ng); // 1 - alpha, exact for weak decays
                sf[tid] = f * f;
            }
        }
        const float vj = nv;
        if (t + 1 < a.n) fetch(t + 1);
        __syncthreads(); // (B)
        float pa = 0.0f, fo = 0.0f, po = 0.0f, sn = 0.0f;
#pragma unroll
        for (int r = 0; r < MAXR; r++) {
            const int i = ty + r * GM_RG;
            if (i < dk) {
                const float al = sa[i], ki = sk[i];
                if (PROBES) {
                    pa += (al * ki) * col[r];
                    fo += sf[i] * (col[r] * col[r]);
                }
                col[r] = al * col[r] + ki * vj;
                po += col[r] * sq[i];
                if (PROBES) sn += col[r] * col[r];
            }
        }
        if (STORE && jin) {
            float *sst = a.Sout + (size_t)t * a.sf + (size_t)h * dk * dv + j;
#pragma unroll
            for (int r = 0; r < MAXR; r++) {
                const int i = ty + r * GM_RG;
                if (i < dk) sst[(size_t)i * dv] = col[r];
            }
        }
        rb[0][ty][tx] = po;
        if (PROBES) ra[ty][tx] = pa, rb[2][ty][tx] = sn, rb[3][ty][tx] = fo;
        __syncthreads(); // (D)
        if (ty == 0) {
            float oj = 0.0f;
#pragma unroll
            for (int y = 0; y < GM_RG; y++) oj += rb[0][y][tx];
            if (jin) a.O[(size_t)t * a.ldo + (size_t)h * dv + j] = oj;
            if (PROBES) {
                float pre = 0.0f, s2n = 0.0f, f2 = 0.0f;
#pragma unroll
                for (int y = 0; y < GM_RG; y++) {
                    pre += ra[y][tx];
                    s2n += rb[2][y][tx];
                    f2 += rb[3][y][tx];
                }
                const double e = jin ? (double)vj - (double)pre : 0.0;
                double v[LD_NACC];
                v[LA_E2] = e * e;
                v[LA_V2] = (double)vj * vj;
                v[LA_O2] = jin ? (double)oj * oj : 0.0;
                v[LA_SNEW2] = s2n;
                v[LA_FORGET2] = f2;
#pragma unroll
                for (int q = 0; q < LD_NACC; q++) v[q] = warp_sum(v[q]);
                if (tx == 0) {
                    double *dst =
                        a.part + (((size_t)t * gridDim.y + h) * a.nblk + blockIdx.x) * LD_NACC;
#pragma unroll
                    for (int q = 0; q < LD_NACC; q++) dst[q] = v[q];
                }
            }
        }
    }
#pragma unroll
    for (int r = 0; r < MAXR; r++) {
        const int i = ty + r * GM_RG;
        if (i < dk && jin) S[(size_t)i * dv + j] = col[r];
    }
}

// -ln2 / g: tokens for exp(g) to halve a state row; +inf where it does not decay (gla.c).
__device__ __forceinline__ float ld_half_life(float g) {
    return g < 0.0f ? -0.693147180559945309f / g : INFINITY;
}

// The probes of gla_step / mamba2_step, one thread per (token, head): the decay statistics and
// the norms of q and k summed in order in fp32 as the CPU does, the rest from the column sums.
static __global__ void ld_probe_fin(ld_core_args a, gm_probe_map pm, float *probes) {
    const int t = blockIdx.x, dk = a.dk;
    for (int h = threadIdx.x; h < a.H; h += blockDim.x) {
        const float *q = a.Q + (size_t)t * a.ldqk + (size_t)h * dk;
        const float *k = a.K + (size_t)t * a.ldqk + (size_t)h * dk;
        const float *g = a.G + (size_t)t * a.ldg + (a.row_decay ? (size_t)h * dk : (size_t)h);
        float val[LDP_COUNT];
        float q2 = 0.0f, k2 = 0.0f;
        for (int i = 0; i < dk; i++) {
            q2 = __fadd_rn(q2, __fmul_rn(q[i], q[i]));
            k2 = __fadd_rn(k2, __fmul_rn(k[i], k[i]));
        }
        const int nd = a.row_decay ? dk : 1;
        float gmin = g[0], gmax = g[0], gsum = 0.0f, asum = 0.0f;
        for (int i = 0; i < nd; i++) {
            gmin = fminf(gmin, g[i]), gmax = fmaxf(gmax, g[i]);
            gsum = __fadd_rn(gsum, g[i]), asum = __fadd_rn(asum, expf(g[i]));
        }
        const float gmean = gsum / (float)nd;
        val[LDP_G_MIN] = gmin, val[LDP_G_MEAN] = gmean, val[LDP_G_MAX] = gmax;
        val[LDP_ALPHA_MIN] = expf(gmin), val[LDP_ALPHA_MEAN] = asum / (float)nd;
        val[LDP_ALPHA_MAX] = expf(gmax);
        val[LDP_HALF_LIFE_MIN] = ld_half_life(gmin);
        val[LDP_HALF_LIFE_MEAN] = ld_half_life(gmean);
        val[LDP_HALF_LIFE_MAX] = ld_half_life(gmax);
        val[LDP_G] = g[0], val[LDP_ALPHA] = expf(g[0]), val[LDP_HALF_LIFE] = ld_half_life(g[0]);
        double s[LD_NACC];
        for (int c = 0; c < LD_NACC; c++) s[c] = 0.0;
        const double *p = a.part + ((size_t)t * a.H + h) * a.nblk * LD_NACC;
        for (int b = 0; b < a.nblk; b++)
            for (int c = 0; c < LD_NACC; c++) s[c] += p[(size_t)b * LD_NACC + c];
        const float qn = sqrtf(q2), kn = sqrtf(k2), vn = (float)sqrt(s[LA_V2]);
        const float en = (float)sqrt(s[LA_E2]);
        val[LDP_Q_NORM] = qn, val[LDP_K_NORM] = kn, val[LDP_V_NORM] = vn;
        val[LDP_WRITE_NORM] = kn * vn;
        val[LDP_E_NORM] = en;
        val[LDP_E_REL] = vn > 0.0f ? en / vn : 0.0f;
        val[LDP_FORGET_REMOVED] = (float)sqrt(s[LA_FORGET2]);
        val[LDP_STATE_NORM] = (float)sqrt(s[LA_SNEW2]);
        val[LDP_O_NORM] = (float)sqrt(s[LA_O2]);
        float *d = probes + (size_t)t * pm.tok_stride + pm.layer_off;
        for (int q = 0; q < pm.n; q++)
            d[pm.off[q] + (size_t)h * pm.head_stride] = pm.map[q] >= 0 ? val[pm.map[q]] : NAN;
    }
}

int ld_core_run(const ld_core_args &a, bool probes, bool store, cudaStream_t st, err *e) {
    if (a.dk > 32 * GM_RG)
        return err_set(e, "gpu linear attention: dk=%d above %d", a.dk, 32 * GM_RG);
    dim3 grid(a.nblk, a.H), block(32, GM_RG);
    gm_core_dispatch(a.dk, probes, store, [&](auto r, auto p, auto s) {
        ld_core<decltype(r)::value, decltype(p)::value, decltype(s)::value>
            <<<grid, block, 0, st>>>(a);
    });
    CUDA_LAUNCHED("gpu linear attention");
    return 0;
}

int ld_probe_fin_run(const ld_core_args &a, const gm_probe_map &pm, float *probes, cudaStream_t st,
                     err *e) {
    ld_probe_fin<<<a.n, 128, 0, st>>>(a, pm, probes);
    CUDA_LAUNCHED("gpu linear attention probes");
    return 0;
}
