/* precision.c: precision replay. The same tokens through the same model four ways, in lockstep:
 *
 *   fp32         the reference: what `run` computes
 *   bf16 state   after every core step the recurrent state is rounded to bf16 (what a kernel
 *                that keeps its state in the activation dtype does between chunks or steps)
 *   fp16 state   the same in fp16: 10 mantissa bits, but a range that ends at 65504
 *   bf16 inputs  fp32 state; the core's q, k, v, r, beta / eta and lambda_v are rounded to bf16
 *                before each step (as fla's kernels receive them from bf16 projections; the
 *                log-decays g, gk stay fp32, as fla computes them in fp32)
 *
 * Lockstep: the weights are shared and each variant owns a copy of every layer's state and
 * convolution caches; before a variant's step of token t the layers are pointed at its copies.
 * After all four have run token t, each variant's state is compared with the reference's, head
 * by head (|S - S_fp32|_F / |S_fp32|_F), and its logits likewise: the divergence over time, with
 * the first token, layer and head where it passes the threshold.
 *
 * Rounding the state happens in the model's layer_hook, which runs right after each core step;
 * rounding the inputs needs a step of its own, so the bf16-input variant runs each layer through
 * a copy of the core's ops whose step rounds the inputs and then calls the core's step. KV caches
 * (softmax, parallax) are left in fp32 by the state variants (counted in skipped_layers). */
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "../core/tensor.h"
#include "../models/model.h"
#include "diag.h"
#include "internal.h"

static const char *const VNAME[DIAG_PREC_N] = {"fp32", "bf16 state", "fp16 state", "bf16 inputs"};
static const char *const VSERIES[DIAG_PREC_N] = {"prec_fp32", "prec_bf16_state", "prec_fp16_state",
                                                 "prec_bf16_inputs"};

/* ---- bf16 inputs: a step that rounds the inputs first ---- */

static float round_bf16(float x) {
    return bf16_to_f32(f32_to_bf16(x));
}

static float round_f16(float x) {
    return f16_to_f32(f32_to_f16(x));
}

/* Rounds the inputs that a bf16 model hands its core in bf16. The pointers are the model's
 * per-token scratch (writable memory the step only reads), so the rounding is done in place. */
static void round_inputs(const mixer_cfg *c, const mixer_tok *x) {
    static const mixer_input WHICH[] = {IN_Q, IN_K, IN_V, IN_R, IN_BETA, IN_LV};
    for (size_t i = 0; i < sizeof WHICH / sizeof WHICH[0]; i++) {
        float *p = (float *)x->in[WHICH[i]];
        if (!p) continue;
        size_t n = (size_t)c->H * (size_t)mixer_input_floats(c, WHICH[i]);
        for (size_t j = 0; j < n; j++) p[j] = round_bf16(p[j]);
    }
}

/* One wrapper per registry slot: step has no context argument, so the core it wraps is the one
 * at its index in mixer_all. */
#define BF16_WRAP(i)                                                                               \
    static void bf16_step_##i(const mixer_cfg *c, float *state, const mixer_tok *x, int pos,       \
                              float *o, float *probes) {                                           \
        round_inputs(c, x);                                                                        \
        mixer_all[i]->step(c, state, x, pos, o, probes);                                           \
    }
BF16_WRAP(0)
BF16_WRAP(1)
BF16_WRAP(2)
BF16_WRAP(3)
BF16_WRAP(4)
BF16_WRAP(5)
BF16_WRAP(6)
BF16_WRAP(7)
BF16_WRAP(8)
BF16_WRAP(9)
BF16_WRAP(10)
BF16_WRAP(11)
BF16_WRAP(12)
BF16_WRAP(13)
BF16_WRAP(14)
BF16_WRAP(15)

typedef void (*step_fn)(const mixer_cfg *, float *, const mixer_tok *, int, float *, float *);
static const step_fn BF16_STEP[16] = {
    bf16_step_0,  bf16_step_1,  bf16_step_2,  bf16_step_3,  bf16_step_4,  bf16_step_5,
    bf16_step_6,  bf16_step_7,  bf16_step_8,  bf16_step_9,  bf16_step_10, bf16_step_11,
    bf16_step_12, bf16_step_13, bf16_step_14, bf16_step_15,
};

/* ---- the hook: rounding the state, finding the first non-finite value ---- */

typedef struct prec_hook {
    int variant;
    diag_nf nf;   /* the reference run's */
    int *skipped; /* [layers]: layers the state variants leave alone */
} prec_hook;

static void hook(void *ctx, const model *m, int li, const mixer_tok *in, const float *state) {
    prec_hook *h = ctx;
    const layer *L = &m->layers[li];
    if (h->variant == DIAG_PREC_F32) {
        diag_nf_scan_layer(&h->nf, m, li, in, state);
        return;
    }
    if (h->variant != DIAG_PREC_BF16_STATE && h->variant != DIAG_PREC_F16_STATE) return;
    if (diag_state_grows(L->mx, &L->mc)) {
        h->skipped[li] = 1;
        return;
    }
    size_t n = L->mx->state_floats(&L->mc);
    float *s = L->state; /* the variant's own copy (vstate_install) */
    if (h->variant == DIAG_PREC_BF16_STATE)
        for (size_t i = 0; i < n; i++) s[i] = round_bf16(s[i]);
    else
        for (size_t i = 0; i < n; i++) s[i] = round_f16(s[i]);
}

/* ---- divergences ---- */

static double rel_diff(const float *a, const float *ref, size_t n) {
    double num = 0, den = 0;
    for (size_t i = 0; i < n; i++) {
        double d = (double)a[i] - (double)ref[i];
        num += d * d, den += (double)ref[i] * ref[i];
    }
    if (!isfinite(den)) return NAN; /* the reference itself broke */
    if (!isfinite(num)) return INFINITY;
    if (den == 0) return num == 0 ? 0 : INFINITY;
    return sqrt(num / den);
}

static float *state_div_at(const diag_prec *r, int v, int64_t t, int l) {
    return r->state_div + (((size_t)v * (size_t)r->T + (size_t)t) * (size_t)r->layers + l) * r->H;
}

/* Head-by-head state divergence of variant vs the reference at token t. */
static void compare_states(diag_prec *r, const model *m, int v, int64_t t, const diag_vstate *var,
                           const diag_vstate *ref) {
    for (int l = 0; l < m->c.layers; l++) {
        const layer *L = &m->layers[l];
        state_part parts[MIXER_MAX_STATE_PARTS];
        int np = diag_head_parts(L->mx, &L->mc, parts);
        float *out = state_div_at(r, v, t, l);
        for (int h = 0; h < L->mc.H && np > 0; h++) {
            double num = 0, den = 0;
            for (int p = 0; p < np; p++) {
                size_t n = diag_part_head_floats(&parts[p]), off = parts[p].offset + (size_t)h * n;
                for (size_t i = 0; i < n; i++) {
                    double a = var->state[l][off + i], b = ref->state[l][off + i];
                    num += (a - b) * (a - b), den += b * b;
                }
            }
            out[h] = !isfinite(den)   ? NAN
                     : !isfinite(num) ? INFINITY
                     : den == 0       ? (num == 0 ? 0.0f : INFINITY)
                                      : (float)sqrt(num / den);
        }
    }
}

/* Updates variant v's summary with token t. */
static void summarise(diag_prec *r, int v, int64_t t) {
    diag_prec_variant *s = &r->v[v];
    for (int l = 0; l < r->layers; l++) {
        const float *d = state_div_at(r, v, t, l);
        for (int h = 0; h < r->H; h++) {
            float x = d[h];
            if (isnan(x)) continue;
            if (x > s->max_state || (isinf(x) && !isinf(s->max_state)))
                s->max_state = x, s->max_state_token = t;
            if (s->first_state < 0 && !(x <= r->threshold))
                s->first_state = t, s->first_layer = l, s->first_head = h, s->first_value = x;
        }
    }
    double lg = r->logits_div[(size_t)v * r->T + t];
    if (!isnan(lg)) {
        if (lg > s->max_logits) s->max_logits = lg;
        if (s->first_logits < 0 && !(lg <= r->threshold))
            s->first_logits = t, s->first_logits_value = lg;
    }
}

int diag_precision_run(model *m, const int32_t *tokens, int T, double threshold, trace *tr,
                       float *logits_out, diag_prec *r, err *e) {
    memset(r, 0, sizeof *r);
    diag_nf_clear(&r->nf);
    if (T < 1) return err_set(e, "precision: no tokens");
    if (!(threshold > 0)) return err_set(e, "precision: threshold must be > 0");
    const int nl = m->c.layers, V = m->c.vocab;
    int H = 1;
    for (int l = 0; l < nl; l++)
        if (m->layers[l].mc.H > H) H = m->layers[l].mc.H;
    r->T = T, r->layers = nl, r->H = H, r->threshold = threshold;
    for (int v = 0; v < DIAG_PREC_N; v++) {
        r->v[v].name = VNAME[v], r->v[v].series = VSERIES[v];
        r->v[v].first_state = r->v[v].first_logits = r->v[v].nonfinite = -1;
        r->v[v].max_state_token = -1;
    }
    size_t nsd = (size_t)DIAG_PREC_N * (size_t)T * (size_t)nl * (size_t)H;
    r->state_div = malloc(nsd * sizeof(float));
    r->logits_div = malloc((size_t)DIAG_PREC_N * (size_t)T * sizeof(float));
    float *logits = malloc((size_t)DIAG_PREC_N * (size_t)V * sizeof(float)); /* [variant][V] */
    int *skipped = calloc((size_t)nl, sizeof *skipped);
    mixer_ops *wrapped = calloc((size_t)nl, sizeof *wrapped);
    const mixer_ops **orig_mx = calloc((size_t)nl, sizeof *orig_mx);
    diag_vstate vs[DIAG_PREC_N];
    memset(vs, 0, sizeof vs);
    int rc = -1, gpu = m->gpu, installed = 0;
    if (!r->state_div || !r->logits_div || !logits || !skipped || !wrapped || !orig_mx) goto oom;
    for (size_t i = 0; i < nsd; i++) r->state_div[i] = NAN;
    if (model_reset(m, 0, e)) goto done;
    if (diag_vstate_borrow(&vs[0], m)) goto oom;
    for (int v = 1; v < DIAG_PREC_N; v++)
        if (diag_vstate_copy(&vs[v], m)) goto oom;
    /* the bf16-input cores */
    int unwrapped = 0;
    for (int l = 0; l < nl; l++) {
        const mixer_ops *mx = m->layers[l].mx;
        orig_mx[l] = mx;
        wrapped[l] = *mx;
        int idx = -1;
        for (int i = 0; i < mixer_count && i < 16; i++)
            if (mixer_all[i] == mx) idx = i;
        if (idx < 0)
            unwrapped++; /* a core outside the registry: its inputs stay fp32 */
        else
            wrapped[l].step = BF16_STEP[idx];
    }
    r->v[DIAG_PREC_BF16_IN].skipped_layers = unwrapped;
    m->gpu = 0; /* the variants round on the CPU; the reference must be the same arithmetic */
    if (tr) trace_clear(tr);
    prec_hook ph = {.skipped = skipped};
    diag_nf_clear(&ph.nf);
    installed = 1;
    for (int t = 0; t < T; t++) {
        if (tr && trace_push_token(tr, e) < 0) goto done;
        for (int v = 0; v < DIAG_PREC_N; v++) {
            diag_vstate_install(m, &vs[v]);
            if (v == DIAG_PREC_BF16_IN)
                for (int l = 0; l < nl; l++) m->layers[l].mx = &wrapped[l];
            m->pos = t;
            ph.variant = v;
            m->layer_hook = hook, m->layer_hook_ctx = &ph;
            float *lg = logits + (size_t)v * V;
            int s = model_step(m, tokens[t], lg, v == 0 ? tr : NULL, e);
            m->layer_hook = NULL, m->layer_hook_ctx = NULL;
            for (int l = 0; l < nl; l++) m->layers[l].mx = orig_mx[l];
            if (s) {
                err_prefix(e, "precision (%s) at token %d", VNAME[v], t);
                goto done;
            }
            if (v == 0) {
                diag_nf_scan_end(&ph.nf, m, lg);
                if (logits_out) memcpy(logits_out + (size_t)t * V, lg, (size_t)V * sizeof *lg);
            }
            if (r->v[v].nonfinite < 0)
                for (int i = 0; i < V; i++)
                    if (!isfinite(lg[i])) {
                        r->v[v].nonfinite = t;
                        break;
                    }
        }
        for (int v = 0; v < DIAG_PREC_N; v++) {
            compare_states(r, m, v, t, &vs[v], &vs[0]);
            r->logits_div[(size_t)v * T + t] =
                (float)rel_diff(logits + (size_t)v * V, logits, (size_t)V);
            summarise(r, v, t);
        }
    }
    for (int v = 0; v < DIAG_PREC_N; v++) {
        double ms = 0;
        int any = 0;
        for (int l = 0; l < nl; l++)
            for (int h = 0; h < H; h++) {
                float x = state_div_at(r, v, T - 1, l)[h];
                if (!isnan(x)) any = 1, ms = x > ms || isinf(x) ? x : ms;
            }
        r->v[v].final_state = any ? ms : NAN;
        r->v[v].final_logits = r->logits_div[(size_t)v * T + T - 1];
    }
    for (int l = 0; l < nl; l++) {
        r->v[DIAG_PREC_BF16_STATE].skipped_layers += skipped[l];
        r->v[DIAG_PREC_F16_STATE].skipped_layers += skipped[l];
    }
    r->nf = ph.nf;
    rc = 0;
    goto done;
oom:
    err_set(e, "precision: out of memory");
done:
    if (installed) {
        diag_vstate_install(m, &vs[0]); /* the model keeps its own buffers: the fp32 run's state */
        m->pos = rc == 0 ? T : m->pos;
    } else if (vs[0].state) {
        diag_vstate_install(m, &vs[0]);
    }
    m->gpu = gpu;
    free(vs[0].state), free(vs[0].conv); /* borrowed pointers: only the arrays are ours */
    for (int v = 1; v < DIAG_PREC_N; v++) diag_vstate_free(&vs[v], nl);
    free(logits), free(skipped), free(wrapped), free(orig_mx);
    if (rc) diag_precision_free(r);
    return rc;
}

void diag_precision_free(diag_prec *r) {
    free(r->state_div), free(r->logits_div);
    r->state_div = r->logits_div = NULL;
}

int diag_precision_record(const diag_prec *r, trace *tr, err *e) {
    if (tr->T < r->T) return err_set(e, "precision: the trace holds fewer tokens than the run");
    for (int v = 0; v < DIAG_PREC_N; v++) {
        char meaning[160];
        snprintf(meaning, sizeof meaning,
                 "|S - S_fp32|_F / |S_fp32|_F per head: the state of the %s run against fp32",
                 VNAME[v]);
        int s = trace_add_series(tr, VSERIES[v], meaning, "precision", r->layers, r->H, 1, e);
        if (s < 0) return -1;
        for (int64_t t = 0; t < r->T; t++)
            for (int l = 0; l < r->layers; l++)
                memcpy(trace_at_lh(tr, s, t, l, 0), state_div_at(r, v, t, l),
                       (size_t)r->H * sizeof(float));
    }
    int s = trace_add_series(tr, "prec_logits",
                             "|logits - logits_fp32| / |logits_fp32|; head = variant (0 fp32, 1 "
                             "bf16 state, 2 fp16 state, 3 bf16 inputs)",
                             "precision", 1, DIAG_PREC_N, 1, e);
    if (s < 0) return -1;
    for (int64_t t = 0; t < r->T; t++)
        for (int v = 0; v < DIAG_PREC_N; v++)
            *trace_at_lh(tr, s, t, 0, v) = r->logits_div[(size_t)v * r->T + t];
    return 0;
}

static const char *num(char *b, size_t n, double x) {
    if (isnan(x))
        snprintf(b, n, "-");
    else if (isinf(x))
        snprintf(b, n, "inf");
    else
        snprintf(b, n, "%.3g", x);
    return b;
}

void diag_precision_print(const diag_prec *r, FILE *out) {
    char a[32], b[32], c[32], d[32];
    fprintf(out,
            "precision replay over %d tokens, %d layers; divergence from fp32 (state: max over "
            "heads of |S - S_fp32|/|S_fp32|), threshold %g\n",
            r->T, r->layers, r->threshold);
    fprintf(out, "  %-12s %10s %10s %10s %10s  %s\n", "variant", "state end", "state max",
            "logits end", "logits max", "first past the threshold");
    for (int v = 0; v < DIAG_PREC_N; v++) {
        const diag_prec_variant *s = &r->v[v];
        char first[200];
        if (s->first_state >= 0)
            snprintf(first, sizeof first, "state at token %lld, layer %d, head %d (%s)",
                     (long long)s->first_state, s->first_layer, s->first_head,
                     num(a, sizeof a, s->first_value));
        else
            snprintf(first, sizeof first, "state never");
        size_t u = strlen(first);
        if (s->first_logits >= 0)
            snprintf(first + u, sizeof first - u, "; logits at token %lld (%s)",
                     (long long)s->first_logits, num(a, sizeof a, s->first_logits_value));
        else
            snprintf(first + u, sizeof first - u, "; logits never");
        fprintf(out, "  %-12s %10s %10s %10s %10s  %s\n", s->name, num(a, sizeof a, s->final_state),
                num(b, sizeof b, s->max_state), num(c, sizeof c, s->final_logits),
                num(d, sizeof d, s->max_logits), first);
        if (s->nonfinite >= 0)
            fprintf(out, "  %-12s non-finite logits from token %lld\n", "",
                    (long long)s->nonfinite);
        if (s->skipped_layers > 0)
            fprintf(out,
                    "  %-12s (%d layer%s left in fp32: KV caches or cores outside the "
                    "registry)\n",
                    "", s->skipped_layers, s->skipped_layers > 1 ? "s" : "");
    }
    if (r->nf.found) {
        char m[ERR_MSG_MAX];
        fprintf(out, "  the fp32 run itself: %s\n", diag_nf_message(&r->nf, m, sizeof m));
    }
}
