// delta_steps.cu: the delta rule over n tokens in one launch and its probes (delta_steps.cuh).
#include <cuda_runtime.h>
#include <math.h>

#include "delta_steps.cuh"
#include "gpu_common.cuh"

// The delta rule of delta_step_head for n tokens. Block (column slice x, value head y), threads
// (32, GM_RG): thread (tx, ty) owns column j = 32 x + tx and rows ty, ty + GM_RG, ... of the
// head's state, in registers from the first token to the last. Per token: a = S^T k,
// e = v - alpha a, S = alpha S + beta k e^T, o = S^T (scale q); with PROBES also the per-column
// sums (|e|^2, |v|^2, |alpha a|^2, |r|^2, |r + (1-rho) e|^2, |o|^2, |S_t|^2, |S_t-1|^2) of the
// slice into part[t][hv][x][8]; with STORE the state after each token into Sout.
template <int MAXR, bool PROBES, bool STORE>
__global__ void __launch_bounds__(32 * GM_RG) gm_core(gm_core_args a) {
    __shared__ float sk[MAXR * GM_RG], sq[MAXR * GM_RG];
    __shared__ float ra[GM_RG][33], rb[4][GM_RG][33];
    const int hv = blockIdx.y, tx = threadIdx.x, ty = threadIdx.y, tid = ty * 32 + tx;
    const int j = blockIdx.x * 32 + tx, h = hv / a.rep, dk = a.dk, dv = a.dv;
    const bool jin = j < dv;
    float *S = a.state + (size_t)hv * dk * dv;
    float col[MAXR];
#pragma unroll
    for (int r = 0; r < MAXR; r++) {
        const int i = ty + r * GM_RG;
        col[r] = (i < dk && jin) ? S[(size_t)i * dv + j] : 0.0f;
    }
    // Token t + 1's inputs are loaded into registers while token t runs (dk <= 32 GM_RG: one key
    // and query element per thread).
    float nk = 0.0f, nq = 0.0f, nv = 0.0f, ng = 0.0f, nb = 0.0f, nk2 = 0.0f;
    auto fetch = [&](int t) {
        const size_t th = (size_t)t * a.Hv + hv, qk = (size_t)t * a.ldqk + (size_t)h * dk;
        if (tid < dk) nk = a.K[qk + tid], nq = a.Q[qk + tid];
        nv = jin ? a.V[(size_t)t * a.ldv + (size_t)hv * dv + j] : 0.0f;
        ng = a.decay ? a.G[th] : 0.0f;
        nb = a.Beff[th];
        if (PROBES) nk2 = a.K2[(size_t)t * a.H + h];
    };
    fetch(0);
    for (int t = 0; t < a.n; t++) {
        const size_t th = (size_t)t * a.Hv + hv;
        __syncthreads(); // (A) the previous token is done with sk, sq
        if (tid < dk) sk[tid] = nk, sq[tid] = a.scale * nq;
        const float vj = nv, alpha = a.decay ? expf(ng) : 1.0f, b = nb, k2 = nk2;
        if (t + 1 < a.n) fetch(t + 1);
        __syncthreads(); // (B)
        float pa = 0.0f, so = 0.0f;
#pragma unroll
        for (int r = 0; r < MAXR; r++) {
            const int i = ty + r * GM_RG;
            if (i < dk) {
                pa += col[r] * sk[i];
                if (PROBES) so += col[r] * col[r];
            }
        }
        ra[ty][tx] = pa;
        if (PROBES) rb[3][ty][tx] = so;
        __syncthreads(); // (C)
        float acc = 0.0f;
#pragma unroll
        for (int y = 0; y < GM_RG; y++) acc += ra[y][tx];
        const float e = vj - alpha * acc;
        float po = 0.0f, pr = 0.0f, sn = 0.0f;
        float *sst = STORE ? a.Sout + (size_t)t * a.sf + (size_t)hv * dk * dv + j : NULL;
#pragma unroll
        for (int r = 0; r < MAXR; r++) {
            const int i = ty + r * GM_RG;
            if (i < dk) {
                const float bk = b * sk[i];
                col[r] = alpha * col[r] + bk * e;
                if (STORE && jin) sst[(size_t)i * dv] = col[r];
                po += col[r] * sq[i];
                if (PROBES) {
                    pr += col[r] * sk[i];
                    sn += col[r] * col[r];
                }
            }
        }
        rb[0][ty][tx] = po;
        if (PROBES) rb[1][ty][tx] = pr, rb[2][ty][tx] = sn;
        __syncthreads(); // (D)
        if (ty == 0) {
            float oj = 0.0f;
#pragma unroll
            for (int y = 0; y < GM_RG; y++) oj += rb[0][y][tx];
            if (jin) a.O[(size_t)t * a.ldo + (size_t)hv * dv + j] = oj;
            if (PROBES) {
                float skn = 0.0f, s2n = 0.0f, s2o = 0.0f;
#pragma unroll
                for (int y = 0; y < GM_RG; y++) {
                    skn += rb[1][y][tx];
                    s2n += rb[2][y][tx];
                    s2o += rb[3][y][tx];
                }
                const float rho = b * k2;
                const double r = jin ? (double)skn - (double)vj : 0.0;
                const double rc = jin ? r + (1.0 - (double)rho) * (double)e : 0.0;
                const double pred = (double)alpha * (double)acc;
                double v[GM_NACC];
                v[AC_E2] = (double)e * e;
                v[AC_V2] = (double)vj * vj;
                v[AC_PRED2] = pred * pred;
                v[AC_R2] = r * r;
                v[AC_RC2] = rc * rc;
                v[AC_O2] = (double)oj * oj;
                v[AC_SNEW2] = s2n;
                v[AC_SOLD2] = s2o;
#pragma unroll
                for (int q = 0; q < GM_NACC; q++) v[q] = warp_sum(v[q]);
                if (tx == 0) {
                    double *dst = a.part + (th * a.nblk + blockIdx.x) * GM_NACC;
#pragma unroll
                    for (int q = 0; q < GM_NACC; q++) dst[q] = v[q];
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

// The probes of delta_rule.c's delta_probes_write from the column sums, into the CPU layout.
static __global__ void gm_probe_fin(gm_fin_args a, gm_probe_map pm) {
    const int t = blockIdx.x;
    for (int hv = threadIdx.x; hv < a.Hv; hv += blockDim.x) {
        const size_t th = (size_t)t * a.Hv + hv;
        double s[GM_NACC];
        for (int q = 0; q < GM_NACC; q++) s[q] = 0.0;
        for (int b = 0; b < a.nblk; b++)
            for (int q = 0; q < GM_NACC; q++) s[q] += a.part[(th * a.nblk + b) * GM_NACC + q];
        const float k2 = a.K2[(size_t)t * a.H + hv / a.rep],
                    q2 = a.Q2[(size_t)t * a.H + hv / a.rep];
        const float g = a.decay ? a.G[th] : 0.0f, alpha = expf(g);
        const float bin = a.Bin[th], b = a.Beff[th], rho = b * k2;
        const float kn = sqrtf(k2), en = (float)sqrt(s[AC_E2]), vn = (float)sqrt(s[AC_V2]);
        const float rn = (float)sqrt(s[AC_R2]);
        float val[GDP_COUNT];
        val[GDP_BETA] = b;
        val[GDP_ETA] = bin;
        val[GDP_RHO] = rho;
        val[GDP_K_NORM] = kn;
        val[GDP_Q_NORM] = sqrtf(q2);
        val[GDP_G] = g;
        val[GDP_ALPHA] = alpha;
        val[GDP_HALF_LIFE] = g < 0.0f ? -logf(2.0f) / g : INFINITY;
        val[GDP_E_NORM] = en;
        val[GDP_E_REL] = vn > 0.0f ? en / vn : (en > 0.0f ? INFINITY : 0.0f);
        val[GDP_R_NORM] = rn;
        val[GDP_R_CHECK] = (float)sqrt(s[AC_RC2]);
        val[GDP_LOSS_BEFORE] = 0.5f * en * en;
        val[GDP_LOSS_AFTER] = 0.5f * rn * rn;
        val[GDP_WRITE_NORM] = b * kn * en;
        val[GDP_STATE_NORM] = (float)sqrt(s[AC_SNEW2]);
        val[GDP_FORGET_REMOVED] = (1.0f - alpha) * (float)sqrt(s[AC_SOLD2]);
        val[GDP_ERASE_REMOVED] = b * kn * (float)sqrt(s[AC_PRED2]);
        val[GDP_O_NORM] = (float)sqrt(s[AC_O2]);
        float *dst = a.probes + (size_t)t * pm.tok_stride + pm.layer_off;
        for (int p = 0; p < pm.n; p++)
            dst[pm.off[p] + (size_t)hv * pm.head_stride] = pm.map[p] >= 0 ? val[pm.map[p]] : NAN;
    }
}

// One thread per (token, head): the squared norms in fp32, summed in order without fused
// multiply-adds, as mixers/delta_rule.c's dot does them, so that rho = beta |k|^2 and Kaczmarz's
// beta = eta / (|k|^2 + eps) round as on the CPU (the r_check probe is a rounding residual and
// sees any difference in rho).
static __global__ void gm_lane_prep(int n, int H, int dk, int kacz, float eps, const float *q,
                                    const float *k, const float *beta, float *Q2, float *K2,
                                    float *Beff) {
    const int w = blockIdx.x * blockDim.x + threadIdx.x;
    if (w >= n * H) return;
    const float *qw = q + (size_t)w * dk, *kw = k + (size_t)w * dk;
    float q2 = 0.0f, k2 = 0.0f;
    for (int i = 0; i < dk; i++) {
        q2 = __fadd_rn(q2, __fmul_rn(qw[i], qw[i]));
        k2 = __fadd_rn(k2, __fmul_rn(kw[i], kw[i]));
    }
    Q2[w] = q2, K2[w] = k2;
    Beff[w] = kacz ? beta[w] / (k2 + eps) : beta[w];
}

int gm_core_run(const gm_core_args &a, bool probes, bool store, cudaStream_t st, err *e) {
    if (a.dk > 32 * GM_RG) return err_set(e, "gpu delta rule: dk=%d above %d", a.dk, 32 * GM_RG);
    dim3 grid(a.nblk, a.Hv), block(32, GM_RG);
    gm_core_dispatch(a.dk, probes, store, [&](auto r, auto p, auto s) {
        gm_core<decltype(r)::value, decltype(p)::value, decltype(s)::value>
            <<<grid, block, 0, st>>>(a);
    });
    CUDA_LAUNCHED("gpu delta rule");
    return 0;
}

int gm_probe_fin_run(const gm_fin_args &a, const gm_probe_map &pm, int n, cudaStream_t st, err *e) {
    gm_probe_fin<<<n, 128, 0, st>>>(a, pm);
    CUDA_LAUNCHED("gpu delta probes");
    return 0;
}

int gm_lane_prep_run(int n, int H, int dk, int kacz, float eps, const float *q, const float *k,
                     const float *beta, float *Q2, float *K2, float *Beff, cudaStream_t st,
                     err *e) {
    gm_lane_prep<<<(n * H + 127) / 128, 128, 0, st>>>(n, H, dk, kacz, eps, q, k, beta, Q2, K2,
                                                      Beff);
    CUDA_LAUNCHED("gpu delta lane prep");
    return 0;
}
