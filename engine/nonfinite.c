/* nonfinite.c: the first NaN / Inf of a run, and where it came from.
 *
 * After each core step the layer is scanned in the order the recurrence computes its quantities,
 * so the name given is the first link of the chain that broke, not the last:
 *   1. the residual entering the layer (a NaN made by the previous layer's output projection or
 *      MLP, or by the embedding, arrives here);
 *   2. the core's inputs as the core read them (q, k, v, the decay g, beta / eta, ...);
 *   3. when the state or the output went non-finite with finite inputs: the derived quantities in
 *      recurrence order (key norm, beta, rho, alpha, residual e, write, state norm, output norm),
 *      read from the probes; the first non-finite one is named;
 *   4. the state, then the output.
 * Probes that are legitimately infinite (a half-life at g = 0, Kalman's memory, a COR over a zero
 * output) or NaN by definition (KATA's beta outside its delta variant) are consulted only in
 * step 3, where something else is already broken.
 *
 * A scan costs one pass over the inputs, the state and the output: O(H dk dv) per layer, what
 * the step itself costs. KV caches (softmax, parallax) are not scanned: they only gain the new
 * token's k and v, which step 2 has checked. */
#include <math.h>
#include <stdio.h>
#include <string.h>

#include "../mixers/kata.h"
#include "../models/model.h"
#include "nonfinite.h"

void diag_nf_clear(diag_nf *r) {
    memset(r, 0, sizeof *r);
    r->token = -1, r->layer = -1, r->head = -1;
}

/* Index of the first non-finite value of x[n], or -1. */
static long first_bad(const float *x, size_t n) {
    for (size_t i = 0; i < n; i++)
        if (!isfinite(x[i])) return (long)i;
    return -1;
}

/* The quantity behind an input or probe name, in words. */
static const char *describe(const char *name) {
    static const struct {
        const char *name, *desc;
    } D[] = {
        {"q", "the query q (core input)"},
        {"k", "the key k (core input)"},
        {"v", "the value v (core input)"},
        {"r", "Parallax's probe r (core input)"},
        {"g", "the decay g (log-decay input; the chunked form takes its cumsum)"},
        {"gk", "the per-key decay gk (log-decay input; the chunked form takes its cumsum)"},
        {"beta", "beta, the write strength"},
        {"eta", "eta, the Kaczmarz relaxation (core input)"},
        {"lambda_v", "the value precision lambda_v (core input)"},
        {"k_norm", "the key norm |k| (|k|^2 overflows float32)"},
        {"q_norm", "the query norm |q|"},
        {"rho", "rho = beta |k|^2"},
        {"alpha", "the decay alpha = exp(g)"},
        {"kappa", "the KATA kernel kappa(q, k)"},
        {"den", "the KATA denominator z^T psi(q)"},
        {"lambda_prior", "the Kalman predicted precision"},
        {"lambda", "the Kalman precision lambda"},
        {"lambda_min", "the Kalman precision lambda"},
        {"lambda_max", "the Kalman precision lambda"},
        {"phi", "the Kalman token information phi"},
        {"e_norm", "the residual e = v - S^T k"},
        {"write_norm", "the write beta k e^T"},
        {"erase_removed", "the delta erase term"},
        {"forget_removed", "the decay's removal (1 - alpha) |S|"},
        {"state_norm", "the state norm |S|"},
        {"z_norm", "the KATA normaliser z"},
        {"o_norm", "the output norm |o|"},
        {"state", "the recurrent state S"},
        {"o", "the core output o"},
    };
    for (size_t i = 0; i < sizeof D / sizeof D[0]; i++)
        if (strcmp(D[i].name, name) == 0) return D[i].desc;
    return NULL;
}

/* Derived quantities worth naming, in the order a step computes them. */
static const char *const DERIVED[] = {
    "k_norm",     "q_norm",        "beta",           "eta",        "rho",        "alpha",  "kappa",
    "den",        "lambda_prior",  "lambda",         "lambda_min", "lambda_max", "phi",    "e_norm",
    "write_norm", "erase_removed", "forget_removed", "state_norm", "z_norm",     "o_norm",
};

int diag_nf_probe_checked(const mixer_ops *mx, const mixer_cfg *c, const char *name) {
    /* KATA's beta is NaN outside the delta variant by definition */
    if (!strcmp(name, "beta") && !strcmp(mx->name, "kata") && c->variant != KATA_DELTA) return 0;
    for (size_t k = 0; k < sizeof DERIVED / sizeof DERIVED[0]; k++)
        if (!strcmp(name, DERIVED[k])) return 1;
    return 0;
}

static void set_found(diag_nf *r, const char *what, const char *desc, int64_t token, int layer,
                      int head, int nheads, float value) {
    r->found = 1;
    r->token = token, r->layer = layer, r->head = head, r->nheads = nheads, r->value = value;
    snprintf(r->what, sizeof r->what, "%s", what);
    if (!desc) desc = describe(what);
    if (desc)
        snprintf(r->desc, sizeof r->desc, "%s", desc);
    else
        snprintf(r->desc, sizeof r->desc, "the probe %s", what);
    r->cause[0] = '\0';
}

int diag_state_grows(const mixer_ops *mx, const mixer_cfg *c) {
    mixer_cfg one = *c, two = *c;
    one.max_t = 1, two.max_t = 2;
    return mx->state_floats(&one) != mx->state_floats(&two);
}

int diag_head_parts(const mixer_ops *mx, const mixer_cfg *c, state_part *parts) {
    if (diag_state_grows(mx, c)) return 0;
    int n = mx->state_parts ? mx->state_parts(c, parts) : 0, k = 0;
    for (int i = 0; i < n; i++)
        if (parts[i].ndim >= 2 && parts[i].shape[0] == c->H) parts[k++] = parts[i];
    return k;
}

size_t diag_part_head_floats(const state_part *p) {
    size_t n = 1;
    for (int j = 1; j < p->ndim; j++) n *= (size_t)p->shape[j];
    return n;
}

/* 1 when head h's state (every per-head part) holds a non-finite value; *v gets it. */
static int state_bad(const state_part *parts, int np, const float *state, int h, float *v) {
    for (int p = 0; p < np; p++) {
        size_t n = diag_part_head_floats(&parts[p]);
        const float *s = state + parts[p].offset + (size_t)h * n;
        long i = first_bad(s, n);
        if (i >= 0) return *v = s[i], 1;
    }
    return 0;
}

/* The head's key norm, write strength and rho at this token, as context for a state or output
 * that went non-finite with finite inputs (the usual story: |k| or rho out of range). */
static void context(diag_nf *r, const mixer_ops *mx, const mixer_cfg *c, const float *probes,
                    int h) {
    static const char *const NAMES[] = {"k_norm", "beta", "eta", "rho", "alpha", "den"};
    size_t o = 0;
    for (size_t k = 0; k < sizeof NAMES / sizeof NAMES[0] && probes; k++) {
        int pi = mixer_probe_index(mx, NAMES[k]);
        if (pi < 0 || mx->probes[pi].width != W_1) continue;
        float v = probes[mixer_probe_offset(mx, c, pi) + (size_t)h];
        if (!isfinite(v)) continue;
        int w = snprintf(r->cause + o, sizeof r->cause - o, "%s%s = %.3g",
                         o ? ", " : "at this token ", NAMES[k], (double)v);
        if (w < 0 || (size_t)w >= sizeof r->cause - o) break;
        o += (size_t)w;
    }
}

int diag_nf_scan_core(diag_nf *r, const mixer_ops *mx, const mixer_cfg *c, const mixer_tok *in,
                      const float *state, const float *o, const float *probes, int64_t token,
                      int layer) {
    if (r->found) return 1;
    const int H = c->H;
    /* 2. inputs, quantity by quantity, lowest head first */
    for (int i = 0; i < mx->ninputs; i++) {
        const input_def *d = &mx->inputs[i];
        const float *x = in->in[d->which];
        if (!x) continue;
        int w = mixer_input_floats(c, d->which), first = -1, nh = 0;
        float v = 0;
        for (int h = 0; h < H; h++) {
            long j = first_bad(x + (size_t)h * w, (size_t)w);
            if (j < 0) continue;
            if (first < 0) first = h, v = x[(size_t)h * w + j];
            nh++;
        }
        if (first >= 0) {
            set_found(r, d->name, NULL, token, layer, first, nh, v);
            return 1;
        }
    }
    /* 3, 4. the state and the output; the probes name the step inside the recurrence */
    state_part parts[MIXER_MAX_STATE_PARTS];
    int np = state ? diag_head_parts(mx, c, parts) : 0;
    /* a finite state_norm of every head means a finite state (a NaN or Inf anywhere makes the
     * sum of squares non-finite): the pass over the state is needed only when it is not */
    int sn = probes ? mixer_probe_index(mx, "state_norm") : -1;
    if (sn >= 0 && mx->probes[sn].width == W_1 && np == 1) {
        const float *p = probes + mixer_probe_offset(mx, c, sn);
        int ok = 1;
        for (int h = 0; h < H && ok; h++) ok = isfinite(p[h]);
        if (ok) np = 0;
    }
    int first = -1, nh = 0, bad_state = 0;
    float v = 0;
    for (int h = 0; h < H; h++) {
        float sv = 0;
        int sb = np > 0 && state_bad(parts, np, state, h, &sv);
        long j = o ? first_bad(o + (size_t)h * c->dv, (size_t)c->dv) : -1;
        if (!sb && j < 0) continue;
        if (first < 0) first = h, bad_state = sb, v = sb ? sv : o[(size_t)h * c->dv + j];
        nh++;
    }
    if (first < 0) return 0;
    if (probes) {
        for (size_t k = 0; k < sizeof DERIVED / sizeof DERIVED[0]; k++) {
            int pi = mixer_probe_index(mx, DERIVED[k]);
            if (pi < 0 || mx->probes[pi].width != W_1) continue;
            const float *p = probes + mixer_probe_offset(mx, c, pi);
            if (!isfinite(p[first])) {
                /* KATA's beta is NaN outside the delta variant by definition */
                if (isnan(p[first]) && strcmp(mx->name, "kata") == 0 &&
                    strcmp(DERIVED[k], "beta") == 0)
                    continue;
                set_found(r, DERIVED[k], NULL, token, layer, first, nh, p[first]);
                context(r, mx, c, probes, first);
                return 1;
            }
        }
    }
    set_found(r, bad_state ? "state" : "o", NULL, token, layer, first, nh, v);
    context(r, mx, c, probes, first);
    return 1;
}

/* Layer li's tensors with non-finite values, named into buf. Returns how many. */
static int bad_weights(const model *m, int li, char *buf, size_t n) {
    char key[48];
    snprintf(key, sizeof key, ".layers.%d.", li);
    int count = 0;
    size_t o = 0;
    buf[0] = '\0';
    for (int i = 0; i < m->nslots; i++) {
        const wslot *s = &m->slots[i];
        if (!strstr(s->name, key) || !s->data) continue;
        int64_t k = 1;
        for (int d = 0; d < s->ndim; d++) k *= s->shape[d];
        if (first_bad(s->data, (size_t)k) < 0) continue;
        if (count++ < 3 && o < n) {
            int w = snprintf(buf + o, n - o, "%s%s", o ? ", " : "", s->name);
            if (w > 0) o += (size_t)w;
        }
    }
    return count;
}

/* The likely cause of a non-finite quantity in layer li, from its weights. */
static void explain(diag_nf *r, const model *m, int li) {
    const layer *L = &m->layers[li];
    char names[240];
    if (strcmp(r->what, "g") == 0 && L->A_log && r->head >= 0) {
        /* GDN and Mamba2 layers: g = -exp(A_log) * softplus(...) (Mamba2: dt * -exp(A_log)) */
        int nA = m->c.family == FAM_MAMBA2 ? m->c.H : m->c.Hv;
        if (r->head < nA && L->A_log[r->head] > 88.72f) {
            snprintf(r->cause, sizeof r->cause,
                     "exp(A_log[%d]) = exp(%.4g) overflows float32, so g = -exp(A_log) * "
                     "softplus(...) = -inf; the step survives it (alpha = 0), the chunked form's "
                     "cumsum does not (exp(-inf - -inf) = NaN)",
                     r->head, (double)L->A_log[r->head]);
            return;
        }
    }
    int nb = bad_weights(m, li, names, sizeof names);
    if (nb > 0)
        snprintf(r->cause, sizeof r->cause, "layer %d holds non-finite weights: %s%s", li, names,
                 nb > 3 ? ", ..." : "");
}

int diag_nf_scan_layer(diag_nf *r, const model *m, int li, const mixer_tok *in,
                       const float *state) {
    if (r->found) return 1;
    const layer *L = &m->layers[li];
    /* 1. the residual entering the layer */
    long j = first_bad(m->x, (size_t)m->c.hidden);
    if (j >= 0) {
        if (li == 0) {
            set_found(r, "residual", "the token's embedding row", m->pos, 0, -1, 0, m->x[j]);
            for (int i = 0; i < m->nslots; i++)
                if (m->slots[i].data == m->embed)
                    snprintf(r->cause, sizeof r->cause, "%s holds non-finite values",
                             m->slots[i].name);
        } else {
            char d[160];
            snprintf(d, sizeof d,
                     "the residual stream entering layer %d (made by layer %d's "
                     "output projection or MLP)",
                     li, li - 1);
            set_found(r, "residual", d, m->pos, li, -1, 0, m->x[j]);
            explain(r, m, li - 1);
        }
        return 1;
    }
    if (diag_nf_scan_core(r, L->mx, &L->mc, in, state, m->o, L->probes, m->pos, li)) {
        explain(r, m, li);
        return 1;
    }
    return 0;
}

int diag_nf_scan_end(diag_nf *r, const model *m, const float *logits) {
    if (r->found) return 1;
    int64_t t = m->pos - 1, last = m->c.layers - 1;
    long j = first_bad(m->x, (size_t)m->c.hidden);
    if (j >= 0) {
        char d[160];
        snprintf(d, sizeof d,
                 "the residual stream after the last layer (%d: its output "
                 "projection or MLP)",
                 (int)last);
        set_found(r, "residual", d, t, (int)last, -1, 0, m->x[j]);
        explain(r, m, (int)last);
        return 1;
    }
    j = first_bad(logits, (size_t)m->c.vocab);
    if (j >= 0) {
        set_found(r, "logits", "the logits (final norm or lm_head)", t, m->c.layers, -1, 0,
                  logits[j]);
        return 1;
    }
    return 0;
}

static const char *value_str(float v) {
    return isnan(v) ? "NaN" : (v > 0 ? "+inf" : "-inf");
}

const char *diag_nf_message(const diag_nf *r, char *buf, size_t n) {
    if (!r->found) {
        snprintf(buf, n, "no non-finite value");
        return buf;
    }
    char where[96];
    if (r->head >= 0 && r->nheads > 1)
        snprintf(where, sizeof where, "layer %d, head %d (and %d more heads)", r->layer, r->head,
                 r->nheads - 1);
    else if (r->head >= 0)
        snprintf(where, sizeof where, "layer %d, head %d", r->layer, r->head);
    else
        snprintf(where, sizeof where, "layer %d", r->layer);
    snprintf(buf, n, "first %s at token %lld, %s, in %s (%s)%s%s", isnan(r->value) ? "NaN" : "Inf",
             (long long)r->token, where, r->desc, value_str(r->value), r->cause[0] ? "; " : "",
             r->cause);
    return buf;
}

void diag_nf_hook_fn(void *ctx, const model *m, int layer, const mixer_tok *in,
                     const float *state) {
    diag_nf_hook *h = ctx;
    diag_nf_scan_layer(&h->nf, m, layer, in, state);
}
