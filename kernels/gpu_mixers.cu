// gpu_mixers.cu: gpu_mixer_run, the host-array entry point that mirrors a CPU mixer's step and
// prefill. It uploads the inputs (rounding q/k/v to bf16 when asked), runs the mixer's kernels,
// and downloads the output and the state. Each mixer family's kernels live in their own .cu file.
#include <cuda_bf16.h>
#include <cuda_runtime.h>
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "gpu.h"
#include "gpu_common.cuh"

extern "C" int gpu_delta_run_probed(const mixer_ops *m, const mixer_cfg *c, float *state,
                                    const mixer_seq *x, float *o, float *probes, err *e);
extern "C" int gpu_kaczmarz_rescale(size_t tokens_heads, int dk, int dv, float eps, int bf16,
                                    const void *k, const void *v, void *k_out, void *v_out,
                                    void *stream, err *e);

// Device buffers of one run, freed together.
struct dev_bufs {
    void *p[16];
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

extern "C" int gpu_mixer_supported(const mixer_ops *m, int mode) {
    (void)mode;
    return m && is_delta(m->name);
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
    if (kacz) { // k, v -> (k, v) / sqrt(|k|^2 + eps), beta = eta
        void *k2 = b.alloc(nk * (bf16 ? 2 : 4), e), *v2 = b.alloc(nv * (bf16 ? 2 : 4), e);
        if (!k2 || !v2) return -1;
        if (gpu_kaczmarz_rescale((size_t)T * H, dk, dv, c->eps, bf16, dk_, dv_, k2, v2, NULL, e))
            return -1;
        dk_ = k2, dv_ = v2;
    }
    if (mode == GPU_PREFILL) {
        void *scratch = b.alloc(gpu_delta_scratch_bytes(1, T, H, dk, dv, c->chunk), e);
        if (!scratch) return -1;
        if (gpu_delta_prefill(1, T, H, dk, dv, c->chunk, c->scale, bf16, dq, dk_, dv_, dg, dbeta,
                              ds, dout, scratch, NULL, e))
            return -1;
    } else {
        size_t es = bf16 ? 2 : 4;
        for (int t = 0; t < T; t++)
            if (gpu_delta_step(1, H, dk, dv, c->scale, bf16, (char *)dq + (size_t)t * H * dk * es,
                               (char *)dk_ + (size_t)t * H * dk * es,
                               (char *)dv_ + (size_t)t * H * dv * es, dg ? dg + (size_t)t * H : NULL,
                               dbeta + (size_t)t * H, ds, dout + (size_t)t * H * dv, NULL, e))
                return -1;
    }
    if (gpu_sync(e)) return -1;
    if (gpu_copy_to_host(o, dout, nv * 4, e) || gpu_copy_to_host(state, ds, ns * 4, e)) return -1;
    return 0;
}

extern "C" int gpu_mixer_run(const mixer_ops *m, const mixer_cfg *c, float *state,
                             const mixer_seq *x, int pos0, float *o, float *probes, int mode,
                             int precision, err *e) {
    (void)pos0;
    char why[256];
    if (!gpu_available(why, sizeof why)) return err_set(e, "%s", why);
    if (is_delta(m->name) && mode == GPU_STEP && probes && precision == GPU_F32)
        return gpu_delta_run_probed(m, c, state, x, o, probes, e); // probes computed on the GPU
    if (is_delta(m->name)) return run_delta(m, c, state, x, o, mode, precision == GPU_BF16, e);
    return err_set(e, "gpu: no kernels for mixer '%s' yet", m->name);
}
