/* lens.c: a logit lens on a layer's memory (model.h, model_lens). */
#include <stdlib.h>
#include <string.h>

#include "blocks.h"
#include "model.h"

int model_lens(const model *m, int li, int h, const float *r, float *logits, err *e) {
    const model_config *c = &m->c;
    if (li < 0 || li >= c->layers)
        return err_set(e, "layer %d: the model has layers 0..%d", li, c->layers - 1);
    const layer *L = &m->layers[li];
    int H = L->mc.H, dv = L->mc.dv, in;
    const float *W, *nw; /* the output projection [hidden, in]; the head norm's weights */
    size_t nstride;      /* nw's offset per head (0: shared by every head) */
    switch (c->family) {
    case FAM_GDN:
    case FAM_GLA:
        W = L->o_proj, in = c->value_dim, nw = L->o_norm, nstride = 0;
        break;
    case FAM_MAMBA2:
        W = L->out_proj, in = c->d_inner, nw = L->norm_w, nstride = (size_t)dv;
        break;
    default:
        return err_set(e,
                       "layer %d: the lens reads key-value memories (gdn, deltanet, kaczmarz, "
                       "gla, mamba2 layers)",
                       li);
    }
    if (in != H * dv)
        return err_set(e, "layer %d: %d output columns for %d heads of %d", li, in, H, dv);
    if (h >= H) return err_set(e, "head %d: layer %d has heads 0..%d", h, li, H - 1);
    float *z = calloc((size_t)in, sizeof(float)), *y = malloc((size_t)c->hidden * sizeof(float)),
          *yn = malloc((size_t)c->hidden * sizeof(float));
    if (!z || !y || !yn) {
        free(z), free(y), free(yn);
        return err_set(e, "out of memory");
    }
    for (int k = 0; k < H; k++) {
        if (h >= 0 && k != h) continue;
        size_t off = (size_t)k * dv;
        blk_rmsnorm(z + off, r + off, nw + (size_t)k * nstride, dv, c->norm_eps);
    }
    blk_linear(y, z, W, NULL, c->hidden, in);
    blk_rmsnorm(yn, y, m->norm_f, c->hidden, c->norm_eps);
    blk_linear(logits, yn, m->lm_head, NULL, c->vocab, c->hidden);
    free(z), free(y), free(yn);
    return 0;
}
