/* gpu_none.c: the GPU backend of a build without CUDA (make CUDA=0). Every entry answers that
 * there is no GPU, so `device gpu` falls back to the CPU with a clear message. */
#include "gpu.h"

static const char NO_CUDA[] = "this build has no CUDA support (built with CUDA=0)";

int gpu_available(char *why, size_t n) {
    if (why && n) snprintf(why, n, "%s", NO_CUDA);
    return 0;
}

int gpu_mixer_supported(const mixer_ops *m, int mode) {
    (void)m, (void)mode;
    return 0;
}

int gpu_mixer_run(const mixer_ops *m, const mixer_cfg *c, float *state, const mixer_seq *x,
                  int pos0, float *o, float *probes, int mode, int precision, err *e) {
    (void)m, (void)c, (void)state, (void)x, (void)pos0, (void)o, (void)probes, (void)mode;
    (void)precision;
    return err_set(e, "%s", NO_CUDA);
}

size_t gpu_delta_scratch_bytes(int B, int T, int H, int dk, int dv, int chunk) {
    (void)B, (void)T, (void)H, (void)dk, (void)dv, (void)chunk;
    return 0;
}

int gpu_delta_prefill(int B, int T, int H, int dk, int dv, int chunk, float scale, int bf16,
                      const void *q, const void *k, const void *v, const float *g,
                      const float *beta, float *state, float *o, void *scratch, void *stream,
                      err *e) {
    (void)B, (void)T, (void)H, (void)dk, (void)dv, (void)chunk, (void)scale, (void)bf16, (void)q;
    (void)k, (void)v, (void)g, (void)beta, (void)state, (void)o, (void)scratch, (void)stream;
    return err_set(e, "%s", NO_CUDA);
}

int gpu_delta_step(int B, int H, int dk, int dv, float scale, int bf16, const void *q,
                   const void *k, const void *v, const float *g, const float *beta, float *state,
                   float *o, void *stream, err *e) {
    (void)B, (void)H, (void)dk, (void)dv, (void)scale, (void)bf16, (void)q, (void)k, (void)v;
    (void)g, (void)beta, (void)state, (void)o, (void)stream;
    return err_set(e, "%s", NO_CUDA);
}

void *gpu_malloc(size_t bytes, err *e) {
    (void)bytes;
    err_set(e, "%s", NO_CUDA);
    return NULL;
}

void gpu_free(void *p) {
    (void)p;
}

int gpu_copy_to_device(void *dst, const void *src, size_t bytes, err *e) {
    (void)dst, (void)src, (void)bytes;
    return err_set(e, "%s", NO_CUDA);
}

int gpu_copy_to_host(void *dst, const void *src, size_t bytes, err *e) {
    (void)dst, (void)src, (void)bytes;
    return err_set(e, "%s", NO_CUDA);
}

int gpu_sync(err *e) {
    return err_set(e, "%s", NO_CUDA);
}

int gpu_linear(float *y, const float *x, const float *W, const float *b, int T, int out, int in,
               err *e) {
    (void)y, (void)x, (void)W, (void)b, (void)T, (void)out, (void)in;
    return err_set(e, "%s", NO_CUDA);
}

void gpu_release_weights(void) {
}
