/* device.c: the same input on the CPU and on the GPU, and the first token where they part.
 *
 * A raw core: the CPU step (or prefill) against gpu_mixer_run from the same initial state; per
 * token the relative difference of the outputs, max over heads, with the head named.
 * A model: model_step with m->gpu = 0 against m->gpu = 1 (the cores that kernels/ has run on the
 * GPU, dense layers through cuBLAS) in lockstep, each with its own states (vstate.c); per token
 * the relative difference of the logits, and per layer that of the core output, so the first
 * disagreement is placed at the first layer where it shows.
 * Without a GPU (no device, or a build with CUDA=0) nothing runs and r->why says why. */
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "../kernels/gpu.h"
#include "../models/model.h"
#include "diag.h"
#include "internal.h"

void diag_device_free(diag_device *r) {
    free(r->err_t);
    r->err_t = NULL;
}

static double rel_diff(const float *a, const float *ref, size_t n) {
    double num = 0, den = 0;
    for (size_t i = 0; i < n; i++) {
        double d = (double)a[i] - (double)ref[i];
        num += d * d, den += (double)ref[i] * ref[i];
    }
    if (isnan(num) || isnan(den)) return NAN;
    if (den == 0) return num == 0 ? 0 : INFINITY;
    return sqrt(num / den);
}

static int init(diag_device *r, int T, double tol, err *e) {
    memset(r, 0, sizeof *r);
    r->T = T, r->tol = tol, r->first = -1, r->max_token = -1, r->first_layer = -1;
    r->first_head = -1;
    if (T < 1) return err_set(e, "compare device: no tokens");
    if (!(tol > 0)) return err_set(e, "compare device: tol must be > 0");
    r->gpu = gpu_available(r->why, sizeof r->why);
    if (!(r->err_t = malloc((size_t)T * sizeof *r->err_t))) return err_set(e, "out of memory");
    for (int t = 0; t < T; t++) r->err_t[t] = NAN;
    return 0;
}

/* Token t's difference d (first past tol, max). */
static void note(diag_device *r, int64_t t, double d, int layer, int head) {
    r->err_t[t] = (float)d;
    if (r->first < 0 && !(d <= r->tol))
        r->first = t, r->first_err = d, r->first_layer = layer, r->first_head = head;
    if (!isnan(d) && (r->max_token < 0 || d > r->max_err)) r->max_err = d, r->max_token = t;
}

int diag_device_mixer(const mixer_ops *mx, const mixer_cfg *c, const mixer_seq *x, int mode,
                      double tol, diag_device *r, err *e) {
    if (init(r, x->T, tol, e)) return -1;
    if (!r->gpu) return 0;
    if (!gpu_mixer_supported(mx, mode)) {
        r->gpu = 0;
        snprintf(r->why, sizeof r->why, "kernels/ has no %s kernel for %s",
                 mode == GPU_STEP ? "step" : "prefill", mx->name);
        return 0;
    }
    size_t sf = mx->state_floats(c), on = (size_t)x->T * (size_t)c->H * (size_t)c->dv;
    float *s_cpu = malloc((sf ? sf : 1) * sizeof(float)),
          *s_gpu = malloc((sf ? sf : 1) * sizeof(float));
    float *o_cpu = malloc(on * sizeof(float)), *o_gpu = malloc(on * sizeof(float));
    int rc = -1;
    if (!s_cpu || !s_gpu || !o_cpu || !o_gpu) {
        err_set(e, "out of memory");
        goto done;
    }
    mx->state_init(c, s_cpu);
    memcpy(s_gpu, s_cpu, sf * sizeof(float));
    if (mode == GPU_STEP)
        mixer_run_steps(mx, c, s_cpu, x, 0, o_cpu, NULL);
    else
        mx->prefill(c, s_cpu, x, 0, o_cpu);
    if (gpu_mixer_run(mx, c, s_gpu, x, 0, o_gpu, NULL, mode, GPU_F32, e)) goto done;
    size_t hd = (size_t)c->dv;
    for (int t = 0; t < x->T; t++) {
        double worst = 0;
        int wh = 0;
        for (int h = 0; h < c->H; h++) {
            size_t off = ((size_t)t * c->H + h) * hd;
            double d = rel_diff(o_gpu + off, o_cpu + off, hd);
            if (isnan(d) || d > worst) worst = d, wh = h;
            if (isnan(d)) break;
        }
        note(r, t, worst, -1, wh);
    }
    rc = 0;
done:
    free(s_cpu), free(s_gpu), free(o_cpu), free(o_gpu);
    return rc;
}

/* ---- models ---- */

typedef struct dev_hook {
    int gpu;      /* this pass runs on the GPU */
    float *o_cpu; /* [layers][o_floats]: the CPU pass's core outputs of the current token */
    size_t ostride;
    int bad_layer, bad_head; /* first layer / head whose core output differs past tol */
    double tol;
} dev_hook;

static void dev_hook_fn(void *ctx, const model *m, int li, const mixer_tok *in,
                        const float *state) {
    (void)in, (void)state;
    dev_hook *h = ctx;
    const layer *L = &m->layers[li];
    size_t n = (size_t)L->mc.H * (size_t)L->mc.dv;
    float *ref = h->o_cpu + (size_t)li * h->ostride;
    if (!h->gpu) {
        memcpy(ref, m->o, n * sizeof(float));
        return;
    }
    if (h->bad_layer >= 0) return;
    for (int hd = 0; hd < L->mc.H; hd++) {
        size_t off = (size_t)hd * L->mc.dv;
        double d = rel_diff(m->o + off, ref + off, (size_t)L->mc.dv);
        if (!(d <= h->tol)) {
            h->bad_layer = li, h->bad_head = hd;
            return;
        }
    }
}

int diag_device_model(model *m, const int32_t *tokens, int T, double tol, diag_device *r, err *e) {
    if (init(r, T, tol, e)) return -1;
    if (!r->gpu) return 0;
    const int nl = m->c.layers, V = m->c.vocab;
    float *lc = malloc((size_t)V * sizeof *lc), *lg = malloc((size_t)V * sizeof *lg);
    float *o_cpu = malloc((size_t)nl * (m->o_floats ? m->o_floats : 1) * sizeof(float));
    diag_vstate own = {0}, gpu = {0};
    int rc = -1, installed = 0, was = m->gpu;
    if (!lc || !lg || !o_cpu) {
        err_set(e, "out of memory");
        goto done;
    }
    if (model_reset(m, T > m->max_t ? T : 0, e)) goto done;
    if (diag_vstate_borrow(&own, m) || diag_vstate_copy(&gpu, m)) {
        err_set(e, "out of memory");
        goto done;
    }
    installed = 1;
    dev_hook hk = {.o_cpu = o_cpu, .ostride = m->o_floats ? m->o_floats : 1, .tol = tol};
    for (int t = 0; t < T; t++) {
        hk.bad_layer = hk.bad_head = -1;
        for (int pass = 0; pass < 2; pass++) {
            diag_vstate_install(m, pass ? &gpu : &own);
            m->pos = t, m->gpu = pass;
            hk.gpu = pass;
            m->layer_hook = dev_hook_fn, m->layer_hook_ctx = &hk;
            int s = model_step(m, tokens[t], pass ? lg : lc, NULL, e);
            m->layer_hook = NULL, m->layer_hook_ctx = NULL;
            if (s) {
                err_prefix(e, "compare device (%s) at token %d", pass ? "gpu" : "cpu", t);
                goto done;
            }
        }
        note(r, t, rel_diff(lg, lc, (size_t)V), hk.bad_layer, hk.bad_head);
    }
    rc = 0;
done:
    if (installed) diag_vstate_install(m, &own);
    free(own.state), free(own.conv);
    diag_vstate_free(&gpu, nl);
    m->gpu = was, m->layer_hook = NULL, m->layer_hook_ctx = NULL;
    if (installed) model_reset(m, 0, NULL);
    free(lc), free(lg), free(o_cpu);
    return rc;
}
