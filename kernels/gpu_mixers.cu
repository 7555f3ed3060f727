// gpu_mixers.cu: gpu_mixer_run, the host-array entry point that mirrors a CPU mixer's step and
// prefill. It uploads the inputs (rounding q/k/v, and Parallax's r, to bf16 when asked), runs the
// mixer's kernels, and downloads the output, the state and the probes. Each mixer family's kernels
// live in their own .cu file: delta.cu (gdn, deltanet, kaczmarz), linear_decay.cu (gla, mamba2),
// kalman.cu, kata.cu, attention.cu (softmax, parallax).
#include <cuda_bf16.h>
#include <cuda_runtime.h>
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "../mixers/kata.h"
#include "gpu.h"
#include "gpu_common.cuh"
#include "step_kernels.cuh"

extern "C" int gpu_delta_run_probed(const mixer_ops *m, const mixer_cfg *c, float *state,
                                    const mixer_seq *x, float *o, float *probes, err *e);
extern "C" int gpu_kaczmarz_rescale(size_t tokens_heads, int dk, int dv, float eps, int bf16,
                                    const void *k, const void *v, void *k_out, void *v_out,
                                    void *stream, err *e);
extern "C" int gpu_attn_to_bf16(size_t n, const float *x, void *y, void *stream, err *e);

// Device buffers of one run, freed together.
struct dev_bufs {
    void *p[32];
    int n;
    dev_bufs() : n(0) {}
    ~dev_bufs() {
        for (int i = 0; i < n; i++) cudaFree(p[i]);
    }
    void *alloc(size_t bytes, err *e) {
        void *d = gpu_malloc(bytes, e);
        if (d) p[n++] = d;
        return d;
    }
};

// Uploads count floats, as fp32 or rounded to bf16. NULL host pointer -> NULL device pointer.
static void *upload(dev_bufs &b, const float *h, size_t count, int bf16, err *e, int *fail) {
    if (!h || *fail) return NULL;
    void *d = b.alloc(count * (bf16 ? 2 : 4), e);
    if (!d) {
        *fail = 1;
        return NULL;
    }
    if (!bf16) {
        if (gpu_copy_to_device(d, h, count * 4, e)) *fail = 1;
        return d;
    }
    __nv_bfloat16 *tmp = (__nv_bfloat16 *)malloc(count * 2 + 2);
    if (!tmp) {
        err_set(e, "out of memory");
        *fail = 1;
        return NULL;
    }
    for (size_t i = 0; i < count; i++) tmp[i] = __float2bfloat16(h[i]);
    if (gpu_copy_to_device(d, tmp, count * 2, e)) *fail = 1;
    free(tmp);
    return d;
}

static int is_delta(const char *name) {
    return !strcmp(name, "gdn") || !strcmp(name, "deltanet") || !strcmp(name, "kaczmarz");
}

static int is_ld(const char *name) {
    return !strcmp(name, "gla") || !strcmp(name, "mamba2");
}

static int is_attn(const char *name) {
    return !strcmp(name, "softmax") || !strcmp(name, "parallax");
}

extern "C" int gpu_mixer_supported(const mixer_ops *m, int mode) {
    (void)mode;
    return m && (is_delta(m->name) || is_ld(m->name) || is_attn(m->name) ||
                 !strcmp(m->name, "kalman") || !strcmp(m->name, "kata"));
}

// gdn, deltanet, kaczmarz: one kernel family (kaczmarz through its rescaled form, spec §8.5).
static int run_delta(const mixer_ops *m, const mixer_cfg *c, float *state, const mixer_seq *x,
                     float *o, int mode, int bf16, err *e) {
    int T = x->T, H = c->H, dk = c->dk, dv = c->dv;
    size_t nk = (size_t)T * H * dk, nv = (size_t)T * H * dv, ns = (size_t)H * dk * dv;
    dev_bufs b;
    int fail = 0;
    int kacz = !strcmp(m->name, "kaczmarz"), has_g = strcmp(m->name, "deltanet") != 0;
    void *dq = upload(b, x->in[IN_Q], nk, bf16, e, &fail);
    void *dk_ = upload(b, x->in[IN_K], nk, bf16, e, &fail);
    void *dv_ = upload(b, x->in[IN_V], nv, bf16, e, &fail);
    float *dg = has_g ? (float *)upload(b, x->in[IN_G], (size_t)T * H, 0, e, &fail) : NULL;
    float *dbeta = (float *)upload(b, x->in[IN_BETA], (size_t)T * H, 0, e, &fail);
    float *ds = (float *)upload(b, state, ns, 0, e, &fail);
    float *dout = fail ? NULL : (float *)b.alloc(nv * 4, e);
    if (fail || !dout || !dq || !dk_ || !dv_ || !dbeta) return -1;
    if (!x->in[IN_BETA]) return err_set(e, "gpu %s: no beta input", m->name);
    if (mode == GPU_PREFILL && kacz) { // raw keys, beta = eta (the rescale is inside)
        void *scratch = b.alloc(gpu_kaczmarz_scratch_bytes(1, T, H, dk, dv, c->chunk), e);
        if (!scratch) return -1;
        if (gpu_kaczmarz_prefill(1, T, H, dk, dv, c->chunk, c->scale, bf16, c->eps, dq, dk_, dv_,
                                 dg, dbeta, ds, dout, scratch, NULL, e))
            return -1;
    } else if (kacz) { // step: k, v -> (k, v) / sqrt(|k|^2 + eps), beta = eta
        void *k2 = b.alloc(nk * (bf16 ? 2 : 4), e), *v2 = b.alloc(nv * (bf16 ? 2 : 4), e);
        if (!k2 || !v2) return -1;
        if (gpu_kaczmarz_rescale((size_t)T * H, dk, dv, c->eps, bf16, dk_, dv_, k2, v2, NULL, e))
            return -1;
        dk_ = k2, dv_ = v2;
    }
    if (mode == GPU_PREFILL && !kacz) {
        void *scratch = b.alloc(gpu_delta_scratch_bytes(1, T, H, dk, dv, c->chunk), e);
        if (!scratch) return -1;
        if (gpu_delta_prefill(1, T, H, dk, dv, c->chunk, c->scale, bf16, dq, dk_, dv_, dg, dbeta,
                              ds, dout, scratch, NULL, e))
            return -1;
    } else if (mode != GPU_PREFILL) {
        size_t es = bf16 ? 2 : 4;
        for (int t = 0; t < T; t++)
            if (gpu_delta_step(1, H, dk, dv, c->scale, bf16, (char *)dq + (size_t)t * H * dk * es,
                               (char *)dk_ + (size_t)t * H * dk * es,
                               (char *)dv_ + (size_t)t * H * dv * es,
                               dg ? dg + (size_t)t * H : NULL, dbeta + (size_t)t * H, ds,
                               dout + (size_t)t * H * dv, NULL, e))
                return -1;
    }
    if (gpu_sync(e)) return -1;
    if (gpu_copy_to_host(o, dout, nv * 4, e) || gpu_copy_to_host(state, ds, ns * 4, e)) return -1;
    return 0;
}

// Downloads n floats of a device buffer into a host array.
static int download(float *h, const float *d, size_t n, err *e) {
    return n ? gpu_copy_to_host(h, d, n * sizeof(float), e) : 0;
}

// gla, mamba2: the chunk form for prefill, the decode step token by token (with the probes on
// the GPU when asked, fp32).
static int run_ld(const mixer_ops *m, const mixer_cfg *c, float *state, const mixer_seq *x,
                  float *o, float *probes, int mode, int bf16, err *e) {
    const int T = x->T, H = c->H, dk = c->dk, dv = c->dv, per_key = !strcmp(m->name, "gla");
    const int gw = per_key ? dk : 1;
    const size_t nk = (size_t)T * H * dk, nv = (size_t)T * H * dv, ns = (size_t)H * dk * dv;
    const float *g = x->in[per_key ? IN_GK : IN_G];
    if (!x->in[IN_Q] || !x->in[IN_K] || !x->in[IN_V] || !g)
        return err_set(e, "gpu %s: missing input", m->name);
    if (probes && bf16) return err_set(e, "gpu %s: probes need fp32 inputs", m->name);
    dev_bufs b;
    int fail = 0;
    void *dq = upload(b, x->in[IN_Q], nk, bf16, e, &fail);
    void *dk_ = upload(b, x->in[IN_K], nk, bf16, e, &fail);
    void *dv_ = upload(b, x->in[IN_V], nv, bf16, e, &fail);
    float *dg = (float *)upload(b, g, (size_t)T * H * gw, 0, e, &fail);
    float *ds = (float *)upload(b, state, ns, 0, e, &fail);
    float *dout = fail ? NULL : (float *)b.alloc(nv * 4, e);
    if (fail || !dout) return -1;
    const size_t es = bf16 ? 2 : 4, np = mixer_probe_floats(m, c);
    float *dp = NULL, *acc = NULL;
    if (probes && (!(dp = (float *)b.alloc((size_t)T * np * 4, e)) ||
                   !(acc = (float *)b.alloc((size_t)H * (8 + dk) * 4, e))))
        return -1;
    if (mode == GPU_PREFILL) {
        void *scratch = b.alloc(gpu_ld_scratch_bytes(1, T, H, dk, dv, c->chunk), e);
        if (!scratch || gpu_ld_prefill(1, T, H, dk, dv, c->chunk, c->scale, bf16, per_key, dq, dk_,
                                       dv_, dg, ds, dout, scratch, NULL, e))
            return -1;
    } else {
        for (int t = 0; t < T; t++) {
            const size_t ok = (size_t)t * H * dk, ov = (size_t)t * H * dv, og = (size_t)t * H * gw;
            int rc = probes ? gpu_ld_step_probes(H, dk, dv, c->scale, per_key, (float *)dq + ok,
                                                 (float *)dk_ + ok, (float *)dv_ + ov, dg + og, ds,
                                                 dout + ov, acc, dp + (size_t)t * np, NULL, e)
                            : gpu_ld_step(1, H, dk, dv, c->scale, bf16, per_key,
                                          (char *)dq + ok * es, (char *)dk_ + ok * es,
                                          (char *)dv_ + ov * es, dg + og, ds, dout + ov, NULL, e);
            if (rc) return -1;
        }
    }
    if (gpu_sync(e) || download(o, dout, nv, e) || download(state, ds, ns, e)) return -1;
    return probes ? download(probes, dp, (size_t)T * np, e) : 0;
}

// kalman: the scan for prefill (gpu_kalman_scan: the division-free walk, time-chunked when the
// lanes do not fill the device), the lane walk token by token for the step (in the CPU's exact
// arithmetic: the step reproduces mixers/kalman.c's state and probes).
static int run_kalman(const mixer_ops *m, const mixer_cfg *c, float *state, const mixer_seq *x,
                      float *o, float *probes, int mode, int bf16, err *e) {
    const int T = x->T, H = c->H, S = c->dk, M = c->dv, prior = (c->variant & 2) != 0;
    const size_t nk = (size_t)T * H * S, nv = (size_t)T * H * M, lanes = (size_t)H * M * S;
    if (!x->in[IN_Q] || !x->in[IN_K] || !x->in[IN_V])
        return err_set(e, "gpu %s: missing input", m->name);
    if (probes && bf16) return err_set(e, "gpu %s: probes need fp32 inputs", m->name);
    dev_bufs b;
    int fail = 0;
    void *dq = upload(b, x->in[IN_Q], nk, bf16, e, &fail);
    void *dk_ = upload(b, x->in[IN_K], nk, bf16, e, &fail);
    void *dv_ = upload(b, x->in[IN_V], nv, bf16, e, &fail);
    float *dlv = (float *)upload(b, x->in[IN_LV], nv, 0, e, &fail);
    float *da = (float *)upload(b, c->params[0], lanes, 0, e, &fail);
    float *dpp = (float *)upload(b, c->params[1], lanes, 0, e, &fail);
    float *ds = (float *)upload(b, state, 2 * lanes, 0, e, &fail);
    float *dout = fail ? NULL : (float *)b.alloc(nv * 4, e);
    if (fail || !dout) return -1;
    const size_t es = bf16 ? 2 : 4, np = mixer_probe_floats(m, c);
    float *dp = NULL;
    if (probes && !(dp = (float *)b.alloc((size_t)T * np * 4, e))) return -1;
    if (mode == GPU_PREFILL) {
        if (gpu_kalman_scan(1, T, H, M, S, c->scale, prior, bf16, dq, dk_, dv_, dlv, da, dpp, ds,
                            dout, NULL, e))
            return -1;
    } else {
        for (int t = 0; t < T; t++) {
            const size_t ok = (size_t)t * H * S, ov = (size_t)t * H * M;
            const float *lvt = dlv ? dlv + ov : NULL;
            int rc = probes
                         ? gpu_kalman_step_probes(H, M, S, c->scale, prior, (float *)dq + ok,
                                                  (float *)dk_ + ok, (float *)dv_ + ov, lvt, da,
                                                  dpp, ds, dout + ov, dp + (size_t)t * np, NULL, e)
                         : gpu_kalman_step(H, M, S, c->scale, prior, bf16, (char *)dq + ok * es,
                                           (char *)dk_ + ok * es, (char *)dv_ + ov * es, lvt, da,
                                           dpp, ds, dout + ov, NULL, e);
            if (rc) return -1;
        }
    }
    if (gpu_sync(e) || download(o, dout, nv, e) || download(state, ds, 2 * lanes, e)) return -1;
    return probes ? download(probes, dp, (size_t)T * np, e) : 0;
}

// kata: the chunked state form for prefill; the step is the same kernels on one token.
static int run_kata(const mixer_ops *m, const mixer_cfg *c, float *state, const mixer_seq *x,
                    float *o, float *probes, int mode, int bf16, err *e) {
    const int T = x->T, H = c->H, dk = c->dk, dv = c->dv;
    const size_t nk = (size_t)T * H * dk, nv = (size_t)T * H * dv, ns = m->state_floats(c);
    if (!x->in[IN_Q] || !x->in[IN_K] || !x->in[IN_V])
        return err_set(e, "gpu %s: missing input", m->name);
    if (probes && bf16) return err_set(e, "gpu %s: probes need fp32 inputs", m->name);
    dev_bufs b;
    int fail = 0;
    void *dq = upload(b, x->in[IN_Q], nk, bf16, e, &fail);
    void *dk_ = upload(b, x->in[IN_K], nk, bf16, e, &fail);
    void *dv_ = upload(b, x->in[IN_V], nv, bf16, e, &fail);
    float *ds = (float *)upload(b, state, ns, 0, e, &fail);
    float *dout = fail ? NULL : (float *)b.alloc(nv * 4, e);
    if (fail || !dout) return -1;
    const int chunk = mode == GPU_PREFILL ? c->chunk : 16, Tk = mode == GPU_PREFILL ? T : 1;
    void *scratch =
        b.alloc(gpu_kata_scratch_bytes(1, Tk, H, dk, dv, c->variant, c->groups, bf16), e);
    if (!scratch) return -1;
    const size_t es = bf16 ? 2 : 4, np = mixer_probe_floats(m, c);
    float *dp = NULL;
    if (probes && !(dp = (float *)b.alloc((size_t)T * np * 4, e))) return -1;
    if (mode == GPU_PREFILL) {
        if (gpu_kata_chunked(1, T, H, dk, dv, c->variant, c->groups, chunk, c->scale, c->eps, bf16,
                             dq, dk_, dv_, ds, dout, scratch, NULL, e))
            return -1;
    } else {
        for (int t = 0; t < T; t++) {
            const size_t ok = (size_t)t * H * dk, ov = (size_t)t * H * dv;
            int rc =
                probes
                    ? gpu_kata_step_probes(H, dk, dv, c->variant, c->groups, c->scale, c->eps,
                                           (float *)dq + ok, (float *)dk_ + ok, (float *)dv_ + ov,
                                           ds, dout + ov, dp + (size_t)t * np, scratch, NULL, e)
                    : gpu_kata_chunked(1, 1, H, dk, dv, c->variant, c->groups, chunk, c->scale,
                                       c->eps, bf16, (char *)dq + ok * es, (char *)dk_ + ok * es,
                                       (char *)dv_ + ov * es, ds, dout + ov, scratch, NULL, e);
            if (rc) return -1;
        }
    }
    if (gpu_sync(e) || download(o, dout, nv, e) || download(state, ds, ns, e)) return -1;
    return probes ? download(probes, dp, (size_t)T * np, e) : 0;
}

// DeltaKATA: a prefill without probes in the chunked form (gpu_kata_delta_chunked, inputs fp32 or
// bf16, chunk c->chunk), when its blocks hold dk and the chunk; otherwise the step token by
// token in fp32 (the step form, probes, or shapes the chunked form does not take), state resident
// for the call.
static int run_kata_delta(const mixer_ops *m, const mixer_cfg *c, float *state, const mixer_seq *x,
                          float *o, float *probes, int mode, int bf16, err *e) {
    const int T = x->T, H = c->H, dk = c->dk, dv = c->dv;
    const size_t nk = (size_t)T * H * dk, nv = (size_t)T * H * dv, ns = m->state_floats(c);
    if (!x->in[IN_Q] || !x->in[IN_K] || !x->in[IN_V])
        return err_set(e, "gpu %s: missing input", m->name);
    const int chunked = mode == GPU_PREFILL && !probes && gpu_kata_delta_chunked_fits(dk, c->chunk);
    if (!chunked) bf16 = 0;
    dev_bufs b;
    int fail = 0;
    const void *dq = upload(b, x->in[IN_Q], nk, bf16, e, &fail);
    const void *dk_ = upload(b, x->in[IN_K], nk, bf16, e, &fail);
    const void *dv_ = upload(b, x->in[IN_V], nv, bf16, e, &fail);
    const float *db = (const float *)upload(b, x->in[IN_BETA], (size_t)T * H, 0, e, &fail);
    float *ds = (float *)upload(b, state, ns, 0, e, &fail);
    float *dout = fail ? NULL : (float *)b.alloc(nv * 4, e);
    if (fail || !dout) return -1;
    if (chunked) {
        void *scratch =
            b.alloc(gpu_kata_delta_chunked_scratch_bytes(H, dk, dv, c->groups, c->chunk), e);
        if (!scratch || gpu_kata_delta_chunked(T, H, dk, dv, c->groups, c->chunk, c->scale, bf16,
                                               dq, dk_, dv_, db, ds, dout, scratch, NULL, e))
            return -1;
        if (gpu_sync(e) || download(o, dout, nv, e)) return -1;
        return download(state, ds, ns, e);
    }
    const size_t np = mixer_probe_floats(m, c);
    float *dp = NULL;
    if (probes && !(dp = (float *)b.alloc((size_t)T * np * 4, e))) return -1;
    void *scratch = b.alloc(gpu_kata_delta_scratch_bytes(H, dk, dv, c->groups), e);
    if (!scratch || gpu_kata_delta_prepare(H, dk, dv, c->groups, scratch, NULL, e)) return -1;
    const float *fq = (const float *)dq, *fk = (const float *)dk_, *fv = (const float *)dv_;
    for (int t = 0; t < T; t++)
        if (gpu_kata_delta_step(H, dk, dv, c->groups, c->scale, fq + (size_t)t * H * dk,
                                fk + (size_t)t * H * dk, fv + (size_t)t * H * dv,
                                db ? db + (size_t)t * H : NULL, ds, dout + (size_t)t * H * dv,
                                dp ? dp + (size_t)t * np : NULL, scratch, NULL, e))
            return -1;
    if (gpu_sync(e) || download(o, dout, nv, e) || download(state, ds, ns, e)) return -1;
    return probes ? download(probes, dp, (size_t)T * np, e) : 0;
}

// softmax, parallax: RoPE and the cache write for all tokens first (a row never reads a later
// slot), then the flash forward (prefill) or the decode step token by token. Positions past the
// cache answer zeros, as the CPU does.
static int run_attn(const mixer_ops *m, const mixer_cfg *c, float *state, const mixer_seq *x,
                    int pos0, float *o, float *probes, int mode, int bf16, err *e) {
    const int T = x->T, H = c->H, dk = c->dk, dv = c->dv, max_t = c->max_t;
    const int plx = !strcmp(m->name, "parallax");
    int Tv = pos0 < 0 ? 0 : max_t - pos0 < T ? max_t - pos0 : T;
    if (Tv < 0) Tv = 0;
    const size_t np = mixer_probe_floats(m, c);
    memset(o + (size_t)Tv * H * dv, 0, (size_t)(T - Tv) * H * dv * sizeof(float));
    if (probes) memset(probes + (size_t)Tv * np, 0, (size_t)(T - Tv) * np * sizeof(float));
    if (Tv == 0) return 0;
    if (!x->in[IN_Q] || !x->in[IN_K] || !x->in[IN_V] || (plx && !x->in[IN_R]))
        return err_set(e, "gpu %s: missing input", m->name);
    const size_t nk = (size_t)Tv * H * dk, nv = (size_t)Tv * H * dv, ns = m->state_floats(c);
    dev_bufs b;
    int fail = 0;
    void *dq = upload(b, x->in[IN_Q], nk, bf16, e, &fail);
    void *dk_ = upload(b, x->in[IN_K], nk, bf16, e, &fail);
    void *dv_ = upload(b, x->in[IN_V], nv, bf16, e, &fail);
    void *dr = plx ? upload(b, x->in[IN_R], nk, bf16, e, &fail) : NULL;
    float *cache = (float *)upload(b, state, ns, 0, e, &fail);
    float *qr = fail ? NULL : (float *)b.alloc(nk * 4, e);
    float *rr = fail || !plx ? NULL : (float *)b.alloc(nk * 4, e);
    float *dout = fail ? NULL : (float *)b.alloc(nv * 4, e);
    if (fail || !qr || !dout || (plx && !rr)) return -1;
    if (gpu_attn_prep(Tv, H, dk, dv, pos0, c->rope, c->rope_theta, max_t, bf16, dq, dr, dk_, dv_,
                      cache, qr, rr, NULL, e))
        return -1;
    const float *cK = cache, *cV = cache + (size_t)max_t * H * dk;
    const int Tk = pos0 + Tv;
    float *dp = NULL;
    if (probes && !(dp = (float *)b.alloc((size_t)Tv * np * 4, e))) return -1;
    if (mode == GPU_PREFILL) {
        if (bf16 && dk == dv && (dk == 64 || dk == 128)) { // the tensor-core kernel reads bf16
            void *qb = b.alloc(nk * 2, e), *rb = plx ? b.alloc(nk * 2, e) : NULL;
            void *kb = b.alloc((size_t)Tk * H * dk * 2, e),
                 *vb = b.alloc((size_t)Tk * H * dv * 2, e);
            if (!qb || !kb || !vb || (plx && !rb) || gpu_attn_to_bf16(nk, qr, qb, NULL, e) ||
                (plx && gpu_attn_to_bf16(nk, rr, rb, NULL, e)) ||
                gpu_attn_to_bf16((size_t)Tk * H * dk, cK, kb, NULL, e) ||
                gpu_attn_to_bf16((size_t)Tk * H * dv, cV, vb, NULL, e) ||
                gpu_attn_forward(1, Tv, Tk, H, dk, dv, pos0, c->window, c->scale, 1, qb, rb, kb, vb,
                                 dout, NULL, e))
                return -1;
        } else if (gpu_attn_forward(1, Tv, Tk, H, dk, dv, pos0, c->window, c->scale, 0, qr, rr, cK,
                                    cV, dout, NULL, e)) {
            return -1;
        }
    } else {
        void *scratch = b.alloc(gpu_attn_decode_scratch_bytes(H, dv, max_t), e);
        if (!scratch) return -1;
        for (int t = 0; t < Tv; t++)
            if (gpu_attn_decode(H, dk, dv, max_t, pos0 + t, c->window, c->scale,
                                qr + (size_t)t * H * dk, plx ? rr + (size_t)t * H * dk : NULL,
                                cache, dout + (size_t)t * H * dv, dp ? dp + (size_t)t * np : NULL,
                                scratch, NULL, e))
                return -1;
    }
    if (gpu_sync(e) || download(o, dout, nv, e) || download(state, cache, ns, e)) return -1;
    return probes ? download(probes, dp, (size_t)Tv * np, e) : 0;
}

extern "C" int gpu_mixer_run(const mixer_ops *m, const mixer_cfg *c, float *state,
                             const mixer_seq *x, int pos0, float *o, float *probes, int mode,
                             int precision, err *e) {
    char why[256];
    if (!gpu_available(why, sizeof why)) return err_set(e, "%s", why);
    const int bf16 = precision == GPU_BF16;
    if (is_delta(m->name) && mode == GPU_STEP && probes && precision == GPU_F32)
        return gpu_delta_run_probed(m, c, state, x, o, probes, e); // probes computed on the GPU
    if (is_delta(m->name)) return run_delta(m, c, state, x, o, mode, bf16, e);
    if (x->T < 1) return 0;
    if (is_ld(m->name)) return run_ld(m, c, state, x, o, probes, mode, bf16, e);
    if (!strcmp(m->name, "kalman")) return run_kalman(m, c, state, x, o, probes, mode, bf16, e);
    if (!strcmp(m->name, "kata")) {
        if (c->variant == KATA_DELTA)
            return run_kata_delta(m, c, state, x, o, probes, mode, bf16, e);
        return run_kata(m, c, state, x, o, probes, mode, bf16, e);
    }
    if (is_attn(m->name)) return run_attn(m, c, state, x, pos0, o, probes, mode, bf16, e);
    return err_set(e, "gpu: no kernels for mixer '%s' yet", m->name);
}
