/* gpu_none.c: the GPU backend of a build without CUDA (make CUDA=0). Every entry answers that
 * there is no GPU, so `device gpu` falls back to the CPU with a clear message. */
#include "gpu.h"
#include "gpu_lanes.h"

#include <string.h>
#include "gpu_model.h"

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

size_t gpu_kaczmarz_scratch_bytes(int B, int T, int H, int dk, int dv, int chunk) {
    (void)B, (void)T, (void)H, (void)dk, (void)dv, (void)chunk;
    return 0;
}

int gpu_kaczmarz_prefill(int B, int T, int H, int dk, int dv, int chunk, float scale, int bf16,
                         float eps, const void *q, const void *k, const void *v, const float *g,
                         const float *eta, float *state, float *o, void *scratch, void *stream,
                         err *e) {
    (void)B, (void)T, (void)H, (void)dk, (void)dv, (void)chunk, (void)scale, (void)bf16, (void)q;
    (void)eps, (void)k, (void)v, (void)g, (void)eta, (void)state, (void)o, (void)scratch;
    (void)stream;
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

void gpu_release_weights(void) {}

size_t gpu_ld_scratch_bytes(int B, int T, int H, int dk, int dv, int chunk) {
    (void)B, (void)T, (void)H, (void)dk, (void)dv, (void)chunk;
    return 0;
}

int gpu_ld_prefill(int B, int T, int H, int dk, int dv, int chunk, float scale, int bf16,
                   int per_key, const void *q, const void *k, const void *v, const float *g,
                   float *state, float *o, void *scratch, void *stream, err *e) {
    (void)B, (void)T, (void)H, (void)dk, (void)dv, (void)chunk, (void)scale, (void)bf16;
    (void)per_key, (void)q, (void)k, (void)v, (void)g, (void)state, (void)o, (void)scratch;
    (void)stream;
    return err_set(e, "%s", NO_CUDA);
}

int gpu_ld_step(int B, int H, int dk, int dv, float scale, int bf16, int per_key, const void *q,
                const void *k, const void *v, const float *g, float *state, float *o, void *stream,
                err *e) {
    (void)B, (void)H, (void)dk, (void)dv, (void)scale, (void)bf16, (void)per_key, (void)q;
    (void)k, (void)v, (void)g, (void)state, (void)o, (void)stream;
    return err_set(e, "%s", NO_CUDA);
}

int gpu_kalman_walk(int B, int T, int H, int M, int S, float scale, int prior, int bf16,
                    const void *q, const void *k, const void *v, const float *lv, const float *a,
                    const float *p, float *state, float *o, void *stream, err *e) {
    (void)B, (void)T, (void)H, (void)M, (void)S, (void)scale, (void)prior, (void)bf16, (void)q;
    (void)k, (void)v, (void)lv, (void)a, (void)p, (void)state, (void)o, (void)stream;
    return err_set(e, "%s", NO_CUDA);
}

int gpu_kalman_scan(int B, int T, int H, int M, int S, float scale, int prior, int bf16,
                    const void *q, const void *k, const void *v, const float *lv, const float *a,
                    const float *p, float *state, float *o, void *stream, err *e) {
    return gpu_kalman_walk(B, T, H, M, S, scale, prior, bf16, q, k, v, lv, a, p, state, o, stream,
                           e);
}

size_t gpu_kata_scratch_bytes(int B, int T, int H, int dk, int dv, int variant, int groups,
                              int bf16) {
    (void)B, (void)T, (void)H, (void)dk, (void)dv, (void)variant, (void)groups, (void)bf16;
    return 0;
}

int gpu_kata_chunked(int B, int T, int H, int dk, int dv, int variant, int groups, int chunk,
                     float scale, float eps, int bf16, const void *q, const void *k, const void *v,
                     float *state, float *o, void *scratch, void *stream, err *e) {
    (void)B, (void)T, (void)H, (void)dk, (void)dv, (void)variant, (void)groups, (void)chunk;
    (void)scale, (void)eps, (void)bf16, (void)q, (void)k, (void)v, (void)state, (void)o;
    (void)scratch, (void)stream;
    return err_set(e, "%s", NO_CUDA);
}

int gpu_kata_flash(int B, int T, int H, int dk, int dv, int variant, int groups, float scale,
                   float eps, int bf16, const void *q, const void *k, const void *v,
                   const float *state0, float *o, void *scratch, void *stream, err *e) {
    (void)B, (void)T, (void)H, (void)dk, (void)dv, (void)variant, (void)groups, (void)scale;
    (void)eps, (void)bf16, (void)q, (void)k, (void)v, (void)state0, (void)o, (void)scratch;
    (void)stream;
    return err_set(e, "%s", NO_CUDA);
}

int gpu_attn_forward(int B, int Tq, int Tk, int H, int dk, int dv, int pos0, int window,
                     float scale, int bf16, const void *q, const void *r, const void *k,
                     const void *v, float *o, void *stream, err *e) {
    (void)B, (void)Tq, (void)Tk, (void)H, (void)dk, (void)dv, (void)pos0, (void)window;
    (void)scale, (void)bf16, (void)q, (void)r, (void)k, (void)v, (void)o, (void)stream;
    return err_set(e, "%s", NO_CUDA);
}

size_t gpu_attn_decode_scratch_bytes(int H, int dv, int max_t) {
    (void)H, (void)dv, (void)max_t;
    return 0;
}

int gpu_attn_decode(int H, int dk, int dv, int max_t, int pos, int window, float scale,
                    const float *q, const float *r, const float *cache, float *o, float *probes,
                    void *scratch, void *stream, err *e) {
    (void)H, (void)dk, (void)dv, (void)max_t, (void)pos, (void)window, (void)scale, (void)q;
    (void)r, (void)cache, (void)o, (void)probes, (void)scratch, (void)stream;
    return err_set(e, "%s", NO_CUDA);
}

/* kernels/gpu_model.h: the GPU-resident model stepper */

int gm_compiled(void) {
    return 0;
}

int gm_create(gm_model **out, const gm_model_desc *d, int max_batch, err *e) {
    (void)d, (void)max_batch;
    *out = NULL;
    return err_set(e, "no GPU in this build (built with CUDA=0)");
}

void gm_destroy(gm_model *g) {
    (void)g;
}

int gm_upload(gm_model *g, const float *const *state, const float *const *conv, err *e) {
    (void)g, (void)state, (void)conv;
    return err_set(e, "no GPU in this build (built with CUDA=0)");
}

int gm_download(gm_model *g, float *const *state, float *const *conv, err *e) {
    (void)g, (void)state, (void)conv;
    return err_set(e, "no GPU in this build (built with CUDA=0)");
}

int gm_step(gm_model *g, const int32_t *tokens, int n, int pos, const int32_t *next,
            const gm_outputs *out, err *e) {
    (void)g, (void)tokens, (void)n, (void)pos, (void)next, (void)out;
    return err_set(e, "no GPU in this build (built with CUDA=0)");
}

/* kernels/gpu_lanes.h */
int gpu_lane_init(gpu_lane **out, const mixer_ops *m, const mixer_cfg *c, const float *state_host,
                  int max_batch, err *e) {
    (void)m, (void)c, (void)state_host, (void)max_batch;
    *out = NULL;
    return err_set(e, "no GPU in this build (built with CUDA=0)");
}

int gpu_lane_step(gpu_lane *L, const mixer_seq *x, int pos0, float *o_host, float *probes_host,
                  err *e) {
    (void)L, (void)x, (void)pos0, (void)o_host, (void)probes_host;
    return err_set(e, "no GPU in this build (built with CUDA=0)");
}

int gpu_lane_begin(gpu_lane *L, const mixer_seq *x, int pos0, int probes, err *e) {
    (void)L, (void)x, (void)pos0, (void)probes;
    return err_set(e, "no GPU in this build (built with CUDA=0)");
}

int gpu_lane_end(gpu_lane *L, float *o_host, float *probes_host, err *e) {
    (void)L, (void)o_host, (void)probes_host;
    return err_set(e, "no GPU in this build (built with CUDA=0)");
}

void gpu_lane_get_stats(const gpu_lane *L, gpu_lane_stats *s) {
    (void)L;
    memset(s, 0, sizeof *s);
}

int gpu_lane_download(gpu_lane *L, float *state_host, err *e) {
    (void)L, (void)state_host;
    return err_set(e, "no GPU in this build (built with CUDA=0)");
}

int gpu_lane_upload(gpu_lane *L, const float *state_host, err *e) {
    (void)L, (void)state_host;
    return err_set(e, "no GPU in this build (built with CUDA=0)");
}

int gpu_lane_sync(gpu_lane *L, float *state_host, err *e) {
    (void)L, (void)state_host;
    return err_set(e, "no GPU in this build (built with CUDA=0)");
}

size_t gpu_lane_device_bytes(const gpu_lane *L) {
    (void)L;
    return 0;
}

void gpu_lane_traffic(const gpu_lane *L, size_t *up, size_t *down) {
    (void)L;
    if (up) *up = 0;
    if (down) *down = 0;
}

void gpu_lane_free(gpu_lane *L) {
    (void)L;
}

int gpu_mem_info(size_t *free_bytes, size_t *total_bytes, err *e) {
    (void)free_bytes, (void)total_bytes;
    return err_set(e, "no GPU in this build (built with CUDA=0)");
}

int gm_recall_fill(gm_model *g, const float *k, const float *v, int n, err *e) {
    (void)g, (void)k, (void)v, (void)n;
    return err_set(e, "no GPU in this build (built with CUDA=0)");
}

int gm_recall_held(const gm_model *g) {
    (void)g;
    return 0;
}

/* ---- the trainer (gpu_train.h) ---- */
#include "gpu_train.h"

int gpu_train_init(gpu_train **out, const gpu_train_desc *d, int B, int T, int chunk, err *e) {
    (void)d, (void)B, (void)T, (void)chunk;
    *out = NULL;
    return err_set(e, "%s", NO_CUDA);
}
void gpu_train_free(gpu_train *g) {
    (void)g;
}
int gpu_train_pass(gpu_train *g, const int32_t *ids, const int32_t *target, float wgt, int backward,
                   double *loss, int *correct, float *logits, err *e) {
    (void)g, (void)ids, (void)target, (void)wgt, (void)backward, (void)loss, (void)correct;
    (void)logits;
    return err_set(e, "%s", NO_CUDA);
}
int gpu_train_zero_grads(gpu_train *g, err *e) {
    (void)g;
    return err_set(e, "%s", NO_CUDA);
}
int gpu_train_grad_norm(gpu_train *g, double *norm, err *e) {
    (void)g, (void)norm;
    return err_set(e, "%s", NO_CUDA);
}
int gpu_train_adamw(gpu_train *g, double lr, double wd, float gscale, int t, err *e) {
    (void)g, (void)lr, (void)wd, (void)gscale, (void)t;
    return err_set(e, "%s", NO_CUDA);
}
int gpu_train_download(gpu_train *g, err *e) {
    (void)g;
    return err_set(e, "%s", NO_CUDA);
}
int gpu_train_download_grads(gpu_train *g, float *buf, err *e) {
    (void)g, (void)buf;
    return err_set(e, "%s", NO_CUDA);
}

/* ---- exact attribution (kernels/attribution.cu) ---- */
size_t gpu_attribution_scratch_bytes(int T, int H) {
    (void)T, (void)H;
    return 0;
}

int gpu_attribution(int kind, int T, int H, int dk, int dv, float scale, int kacz, float eps,
                    const float *q, const float *k, const float *g, const float *gk,
                    const float *beta, const float *S0, float *M, float *Md, float *o_init,
                    void *scratch, void *stream, err *e) {
    (void)kind, (void)T, (void)H, (void)dk, (void)dv, (void)scale, (void)kacz, (void)eps, (void)q;
    (void)k, (void)g, (void)gk, (void)beta, (void)S0, (void)M, (void)Md, (void)o_init;
    (void)scratch, (void)stream;
    return err_set(e, "no GPU in this build (built with CUDA=0)");
}

int gpu_attribution_host(const mixer_ops *m, const mixer_cfg *c, const float *init,
                         const mixer_seq *x, float *M, float *Md, float *o_init, err *e) {
    (void)m, (void)c, (void)init, (void)x, (void)M, (void)Md, (void)o_init;
    return err_set(e, "no GPU in this build (built with CUDA=0)");
}

void gm_kv_shape(const gm_model *g, int *heads, int *dk, int *dv) {
    (void)g;
    *heads = *dk = *dv = 0;
}
