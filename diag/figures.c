/* figures.c: per layer and head figures from a probe trace, and the findings they imply.
 *
 * Every figure is read off the probe series by name (the mixers' probe tables, docs/mixers/NAME.md,
 * and the model's layer probes), so the same code serves a checkpoint run, the session's model
 * and a raw-mixer session. A series counts for a layer only when that layer's core has the probe
 * (or the series comes from the model or the stream), so a layer swapped to another core is not
 * read through series it never wrote.
 *
 * Findings are plain sentences with the numbers and the layer, head and token they are about.
 * When many heads share a finding, the three worst are named and the rest counted. */
#include <math.h>
#include <stdarg.h>
#include <stdlib.h>
#include <string.h>

#include "../models/model.h"
#include "diag.h"

const diag_fig_def diag_figs[DF_COUNT] = {
    [DF_BETA] = {"beta_median", "beta", 0, 0},
    [DF_BETA_SAT] = {"beta_saturated", "beta sat", 1, 0},
    [DF_ETA] = {"eta_median", "eta", 0, 0},
    [DF_RHO_MAX] = {"rho_max", "rho max", 1, 0},
    [DF_HL] = {"half_life_median", "half-life", -1, 0},
    [DF_HL_MIN] = {"half_life_min", "hl min", -1, 0},
    [DF_K] = {"k_norm_median", "|k|", 0, 0},
    [DF_K_MIN] = {"k_norm_min", "|k| min", -1, 0},
    [DF_K_SMALL] = {"k_small_fraction", "|k|<1e-2", 1, 0},
    [DF_Q] = {"q_norm_median", "|q|", 0, 0},
    [DF_GROWTH] = {"state_growth", "state x", 1, 0},
    [DF_STATE_MAX] = {"state_norm_max", "|S| max", 1, 0},
    [DF_SPECTRAL] = {"spectral_bound", "spectral", 1, 0},
    [DF_WRITE_GAIN] = {"write_gain_max", "write gain", 1, 0},
    [DF_LAM_MIN] = {"lambda_min", "lambda min", -1, 0},
    [DF_LAM_MAX] = {"lambda_max", "lambda max", 1, 0},
    [DF_WGATE] = {"write_gate_mean", "write gate", 0, 0},
    [DF_GATE_SAT] = {"gate_saturated", "gate sat", 1, 0},
    [DF_DEN_MIN] = {"kata_den_min", "den min", -1, 0},
    [DF_COR] = {"cor_median", "COR", 1, 0},
    [DF_COR_MAX] = {"cor_max", "COR max", 1, 0},
    [DF_OGATE] = {"output_gate_mean", "out gate", -1, 0},
    [DF_RSTD_MAX] = {"o_rstd_max", "o rstd max", 1, 0},
    [DF_DT] = {"dt_median", "dt", 0, 0},
    [DF_KRAW_MIN] = {"k_raw_norm_min", "|k'| min", -1, 0},
    [DF_NORM_MIN] = {"rmsnorm_min", "norm min", -1, 1},
    [DF_NORM_MAX] = {"rmsnorm_max", "norm max", 1, 1},
};

int diag_ckpt_alloc(diag_ckpt *ck, int layers, int H, err *e) {
    ck->layers = layers, ck->H = H;
    size_t n = (size_t)DF_COUNT * (size_t)layers * (size_t)H;
    ck->fig = malloc(n * sizeof *ck->fig);
    ck->mixer = calloc((size_t)layers, sizeof *ck->mixer);
    if (!ck->fig || !ck->mixer) return err_set(e, "out of memory");
    for (size_t i = 0; i < n; i++) ck->fig[i] = NAN;
    return 0;
}

void diag_ckpt_free(diag_ckpt *ck) {
    free(ck->fig), free(ck->mixer);
    ck->fig = NULL, ck->mixer = NULL;
}

/* ---- reading series ---- */

/* Series `name` when it holds scalar values for layer l (and, for a mixer probe, layer l's core
 * has it), else -1. */
static int series_for(const trace *tr, const char *name, int l, const mixer_ops *const *mx) {
    int s = trace_find(tr, name);
    if (s < 0) return -1;
    const trace_series *se = &tr->series[s];
    if (se->width != 1 || l >= se->layers) return -1;
    if (!mx || !mx[l] || mixer_probe_index(mx[l], name) >= 0) return s;
    /* a probe of some core, but not of layer l's: another layer wrote it */
    for (int i = 0; i < mixer_count; i++)
        if (mixer_all[i] && mixer_probe_index(mixer_all[i], name) >= 0) return -1;
    return s; /* a model or stream series */
}

static float val(const trace *tr, int s, int64_t t, int l, int h) {
    const trace_series *se = &tr->series[s];
    if (h >= se->heads) return NAN;
    return *trace_at_lh(tr, s, t, l, h);
}

/* The values of series s at (l, h) over [0, T) into buf; keep_inf keeps +-inf (half-lives).
 * Returns the count. */
static int gather(const trace *tr, int s, int l, int h, int64_t T, float *buf, int keep_inf) {
    int n = 0;
    for (int64_t t = 0; t < T; t++) {
        float v = val(tr, s, t, l, h);
        if (isnan(v) || (!keep_inf && isinf(v))) continue;
        buf[n++] = v;
    }
    return n;
}

static int cmp_float(const void *a, const void *b) {
    float x = *(const float *)a, y = *(const float *)b;
    return (x > y) - (x < y);
}

static float quantile(float *v, int n, double q) {
    if (n == 0) return NAN;
    qsort(v, (size_t)n, sizeof *v, cmp_float);
    int i = (int)floor(q * (n - 1) + 0.5);
    return v[i < 0 ? 0 : (i >= n ? n - 1 : i)];
}

static float vmin(const float *v, int n) {
    float m = NAN;
    for (int i = 0; i < n; i++)
        if (isnan(m) || v[i] < m) m = v[i];
    return m;
}

static float vmax(const float *v, int n) {
    float m = NAN;
    for (int i = 0; i < n; i++)
        if (isnan(m) || v[i] > m) m = v[i];
    return m;
}

static float vmean(const float *v, int n) {
    double s = 0;
    for (int i = 0; i < n; i++) s += v[i];
    return n ? (float)(s / n) : NAN;
}

/* The first series of a list that exists for layer l. */
static int series_any(const trace *tr, const char *const *names, int l,
                      const mixer_ops *const *mx) {
    for (int i = 0; names[i]; i++) {
        int s = series_for(tr, names[i], l, mx);
        if (s >= 0) return s;
    }
    return -1;
}

void diag_figures_from_trace(diag_ckpt *ck, const trace *tr, const mixer_ops *const *mx) {
    int64_t T = ck->T < tr->T ? ck->T : tr->T;
    if (T <= 0) return;
    float *buf = malloc((size_t)T * sizeof *buf);
    if (!buf) return;
    static const char *const KN[] = {"k_norm", "key_norm", NULL};
    static const char *const HL[] = {"half_life", "half_life_mean", NULL};
    static const char *const HLMIN[] = {"half_life", "half_life_min", NULL};
    for (int l = 0; l < ck->layers; l++) {
        int sb = series_for(tr, "beta", l, mx), se = series_for(tr, "eta", l, mx);
        int sr = series_for(tr, "rho", l, mx), sa = series_for(tr, "alpha", l, mx);
        int shl = series_any(tr, HL, l, mx), shm = series_any(tr, HLMIN, l, mx);
        int sk = series_any(tr, KN, l, mx), sq = series_for(tr, "q_norm", l, mx);
        int ss = series_for(tr, "state_norm", l, mx);
        int slmin = series_for(tr, "lambda_min", l, mx),
            slmax = series_for(tr, "lambda_max", l, mx);
        int sw = series_for(tr, "write_mean", l, mx), sf = series_for(tr, "forget_mean", l, mx);
        int sd = series_for(tr, "den", l, mx), sc = series_for(tr, "cor", l, mx);
        int sg = series_for(tr, "gate_mean", l, mx), so = series_for(tr, "o_rstd", l, mx);
        int sdt = series_for(tr, "dt", l, mx), skr = series_for(tr, "k_raw_norm", l, mx);
        int heads = ck->H;
        for (int h = 0; h < heads; h++) {
            int n;
#define SET(f, v) (*diag_fig_at(ck, (f), l, h) = (v))
            if (sb >= 0 && (n = gather(tr, sb, l, h, T, buf, 0)) > 0)
                SET(DF_BETA, quantile(buf, n, 0.5));
            int sgate = se >= 0 ? se : sb;
            /* a gate that never moves was set, not learned (a raw stream's beta=): no figure */
            if (sgate >= 0 && (n = gather(tr, sgate, l, h, T, buf, 0)) > 0 &&
                vmin(buf, n) != vmax(buf, n)) {
                float top = vmax(buf, n) > 1.001f ? 2.0f : 1.0f, sat = 0;
                for (int i = 0; i < n; i++) sat += buf[i] < 0.01f * top || buf[i] > 0.99f * top;
                SET(DF_BETA_SAT, sat / n);
            }
            if (se >= 0 && (n = gather(tr, se, l, h, T, buf, 0)) > 0)
                SET(DF_ETA, quantile(buf, n, 0.5));
            if (sr >= 0 && (n = gather(tr, sr, l, h, T, buf, 1)) > 0) SET(DF_RHO_MAX, vmax(buf, n));
            if (shl >= 0 && (n = gather(tr, shl, l, h, T, buf, 1)) > 0)
                SET(DF_HL, quantile(buf, n, 0.5));
            if (shm >= 0 && (n = gather(tr, shm, l, h, T, buf, 1)) > 0)
                SET(DF_HL_MIN, vmin(buf, n));
            if (sk >= 0 && (n = gather(tr, sk, l, h, T, buf, 1)) > 0) {
                float small = 0;
                for (int i = 0; i < n; i++) small += buf[i] < 1e-2f;
                SET(DF_K_SMALL, small / n);
                SET(DF_K_MIN, vmin(buf, n));
                SET(DF_K, quantile(buf, n, 0.5));
            }
            if (sq >= 0 && (n = gather(tr, sq, l, h, T, buf, 1)) > 0)
                SET(DF_Q, quantile(buf, n, 0.5));
            if (ss >= 0) {
                /* growth: the largest state norm over the first positive one (inf once it
                 * overflowed) */
                float first = NAN, mx_ = NAN;
                for (int64_t t = 0; t < T; t++) {
                    float v = val(tr, ss, t, l, h);
                    if (isnan(v)) continue;
                    if (isnan(first) && v > 0 && isfinite(v)) first = v;
                    if (isnan(mx_) || v > mx_) mx_ = v;
                }
                if (!isnan(mx_)) SET(DF_STATE_MAX, mx_);
                if (!isnan(first)) SET(DF_GROWTH, mx_ / first);
            }
            if (sr >= 0) {
                /* |A|_2 for A = alpha (I - beta k k^T): alpha max(1, |1 - rho|) */
                float m = NAN;
                for (int64_t t = 0; t < T; t++) {
                    float rho = val(tr, sr, t, l, h), a = sa >= 0 ? val(tr, sa, t, l, h) : 1.0f;
                    if (isnan(rho) || isnan(a)) continue;
                    float b = a * fmaxf(1.0f, fabsf(1.0f - rho));
                    if (isnan(m) || b > m) m = b;
                }
                if (!isnan(m)) SET(DF_SPECTRAL, m);
            }
            if (sb >= 0 && sk >= 0 && sr >= 0) {
                float m = NAN;
                for (int64_t t = 0; t < T; t++) {
                    float g = val(tr, sb, t, l, h) * val(tr, sk, t, l, h);
                    if (!isnan(g) && (isnan(m) || g > m)) m = g;
                }
                if (!isnan(m)) SET(DF_WRITE_GAIN, m);
            }
            if (slmin >= 0 && (n = gather(tr, slmin, l, h, T, buf, 1)) > 0)
                SET(DF_LAM_MIN, vmin(buf, n));
            if (slmax >= 0 && (n = gather(tr, slmax, l, h, T, buf, 1)) > 0)
                SET(DF_LAM_MAX, vmax(buf, n));
            if (sw >= 0 && (n = gather(tr, sw, l, h, T, buf, 0)) > 0) {
                SET(DF_WGATE, vmean(buf, n));
                float sat = 0;
                int cnt = 0;
                for (int64_t t = 0; t < T; t++) {
                    float w = val(tr, sw, t, l, h), f = sf >= 0 ? val(tr, sf, t, l, h) : NAN;
                    if (isnan(w)) continue;
                    cnt++;
                    sat += w > 0.99f || (!isnan(f) && f < 0.01f);
                }
                if (cnt) SET(DF_GATE_SAT, sat / cnt);
            }
            if (sd >= 0) {
                float m = NAN; /* after the first token: before it z = 0 and den = 0 by design */
                for (int64_t t = 1; t < T; t++) {
                    float v = val(tr, sd, t, l, h);
                    if (!isnan(v) && (isnan(m) || v < m)) m = v;
                }
                if (!isnan(m)) SET(DF_DEN_MIN, m);
            }
            if (sc >= 0 && (n = gather(tr, sc, l, h, T, buf, 1)) > 0) {
                SET(DF_COR_MAX, vmax(buf, n));
                SET(DF_COR, quantile(buf, n, 0.5));
            }
            if (sg >= 0 && (n = gather(tr, sg, l, h, T, buf, 0)) > 0) SET(DF_OGATE, vmean(buf, n));
            if (so >= 0 && (n = gather(tr, so, l, h, T, buf, 1)) > 0)
                SET(DF_RSTD_MAX, vmax(buf, n));
            if (sdt >= 0 && (n = gather(tr, sdt, l, h, T, buf, 0)) > 0)
                SET(DF_DT, quantile(buf, n, 0.5));
            if (skr >= 0 && (n = gather(tr, skr, l, h, T, buf, 1)) > 0)
                SET(DF_KRAW_MIN, vmin(buf, n));
#undef SET
        }
    }
    free(buf);
}

void diag_figures_from_weights(diag_ckpt *ck, const model *m) {
    for (int l = 0; l < ck->layers && l < m->c.layers; l++) {
        char key[48];
        snprintf(key, sizeof key, ".layers.%d.", l);
        float lo = NAN, hi = NAN;
        for (int i = 0; i < m->nslots; i++) {
            const wslot *s = &m->slots[i];
            const char *dot = strrchr(s->name, '.');
            if (!strstr(s->name, key) || !dot || s->ndim != 1 || !s->data) continue;
            /* the last component before ".weight" names a norm: attn_norm, mlp_norm, o_norm,
             * q_norm, k_norm, mixer.norm */
            const char *prev = dot - 1;
            while (prev > s->name && *prev != '.') prev--;
            if (strcmp(dot, ".weight") != 0 || !strstr(prev, "norm")) continue;
            for (int64_t j = 0; j < s->shape[0]; j++) {
                float a = fabsf(s->data[j]);
                if (isnan(a)) continue;
                if (isnan(lo) || a < lo) lo = a;
                if (isnan(hi) || a > hi) hi = a;
            }
        }
        *diag_fig_at(ck, DF_NORM_MIN, l, 0) = lo;
        *diag_fig_at(ck, DF_NORM_MAX, l, 0) = hi;
    }
}

/* ---- the first non-finite value from a trace ---- */

void diag_nf_from_trace(diag_nf *r, const trace *tr, const mixer_ops *const *mx) {
    static const char *const ORDER[] = {
        "g",      "beta",       "eta",        "key_norm", "k_norm",     "q_norm",
        "rho",    "alpha",      "kappa",      "den",      "lambda_min", "lambda_max",
        "e_norm", "write_norm", "state_norm", "z_norm",   "o_norm",     "out_norm",
    };
    diag_nf_clear(r);
    int layers = 0;
    for (int i = 0; i < tr->nseries; i++)
        if (tr->series[i].layers > layers) layers = tr->series[i].layers;
    for (int64_t t = 0; t < tr->T; t++)
        for (int l = 0; l < layers; l++)
            for (size_t k = 0; k < sizeof ORDER / sizeof ORDER[0]; k++) {
                int s = series_for(tr, ORDER[k], l, mx);
                if (s < 0) continue;
                /* KATA's beta is NaN outside its delta variant by definition */
                if (strcmp(ORDER[k], "beta") == 0 && strcmp(tr->series[s].source, "kata") == 0)
                    continue;
                int first = -1, nh = 0;
                float v = 0;
                for (int h = 0; h < tr->series[s].heads; h++) {
                    float x = val(tr, s, t, l, h);
                    if (isfinite(x)) continue;
                    if (first < 0) first = h, v = x;
                    nh++;
                }
                if (first < 0) continue;
                r->found = 1, r->token = t, r->layer = l, r->head = first, r->nheads = nh;
                r->value = v;
                snprintf(r->what, sizeof r->what, "%s", ORDER[k]);
                snprintf(r->desc, sizeof r->desc, "the probe %s (%s)", ORDER[k],
                         tr->series[s].meaning);
                return;
            }
}

/* ---- findings ---- */

void diag_add_finding(diag_ckpt *ck, const char *kind, int layer, int head, int64_t token,
                      double value, const char *fmt, ...) {
    if (ck->nfind >= DIAG_MAX_FINDINGS) return;
    diag_finding *f = &ck->find[ck->nfind++];
    snprintf(f->kind, sizeof f->kind, "%s", kind);
    f->layer = layer, f->head = head, f->token = token, f->value = value;
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(f->text, sizeof f->text, fmt, ap);
    va_end(ap);
}

/* "x1e4" style for growth factors, "12%" for fractions. */
static const char *fmt_times(char *b, size_t n, double x) {
    if (isinf(x))
        snprintf(b, n, "past float32's range (inf)");
    else if (x >= 1e3)
        snprintf(b, n, "x%.0e", x);
    else
        snprintf(b, n, "x%.3g", x);
    return b;
}

typedef struct cand {
    int l, h;
    int64_t t;
    double v, severity;
    char text[400];
} cand;

typedef struct cands {
    int n, cap;
    cand *c;
} cands;

static cand *cand_add(cands *cs) {
    if (cs->n == cs->cap) {
        int nc = cs->cap ? cs->cap * 2 : 16;
        cand *p = realloc(cs->c, (size_t)nc * sizeof *p);
        if (!p) return NULL;
        cs->c = p, cs->cap = nc;
    }
    cand *c = &cs->c[cs->n++];
    memset(c, 0, sizeof *c);
    return c;
}

static int cmp_severity(const void *a, const void *b) {
    double x = ((const cand *)a)->severity, y = ((const cand *)b)->severity;
    return (x < y) - (x > y);
}

/* The three worst of a kind as findings, the rest counted in a fourth. */
static void emit(diag_ckpt *ck, const char *kind, cands *cs, const char *rest) {
    if (cs->n == 0) return;
    qsort(cs->c, (size_t)cs->n, sizeof *cs->c, cmp_severity);
    for (int i = 0; i < cs->n && i < 3; i++)
        diag_add_finding(ck, kind, cs->c[i].l, cs->c[i].h, cs->c[i].t, cs->c[i].v, "%s",
                         cs->c[i].text);
    if (cs->n > 3)
        diag_add_finding(ck, kind, -1, -1, -1, (double)(cs->n - 3), "... and %d more heads %s",
                         cs->n - 3, rest);
    cs->n = 0;
}

/* The first token t where series s at (l, h) satisfies pred(v, a). */
static int64_t first_token(const trace *tr, int s, int l, int h, int64_t T,
                           int (*pred)(float, double), double a) {
    if (s < 0) return -1;
    for (int64_t t = 0; t < T; t++)
        if (pred(val(tr, s, t, l, h), a)) return t;
    return -1;
}

static int above(float v, double a) {
    return !isnan(v) && v > a;
}

static int below(float v, double a) {
    return !isnan(v) && v < a;
}

void diag_findings(diag_ckpt *ck, const trace *tr, const mixer_ops *const *mx) {
    char a[48], b[48];
    int64_t T = ck->T < tr->T ? ck->T : tr->T;
    if (ck->nf.found) {
        char m[ERR_MSG_MAX];
        diag_add_finding(ck, "nonfinite", ck->nf.layer, ck->nf.head, ck->nf.token, ck->nf.value,
                         "%s", diag_nf_message(&ck->nf, m, sizeof m));
    }
    cands cs = {0};
    /* state growth */
    for (int l = 0; l < ck->layers; l++)
        for (int h = 0; h < ck->H; h++) {
            float g = *diag_fig_at(ck, DF_GROWTH, l, h);
            if (!(g > 100)) continue;
            int s = series_for(tr, "state_norm", l, mx);
            float first = NAN;
            int64_t t0 = -1;
            for (int64_t t = 0; s >= 0 && t < T; t++) {
                float v = val(tr, s, t, l, h);
                if (v > 0 && isfinite(v)) {
                    first = v, t0 = t;
                    break;
                }
            }
            int64_t tc = first_token(tr, s, l, h, T, above, 100.0 * first);
            cand *c = cand_add(&cs);
            if (!c) break;
            *c = (cand){l, h, tc, g, g, ""};
            snprintf(c->text, sizeof c->text,
                     "layer %d head %d: state norm grows %s over %lld tokens (%.3g at token "
                     "%lld, x100 by token %lld, max %.3g)",
                     l, h, fmt_times(a, sizeof a, g), (long long)T, (double)first, (long long)t0,
                     (long long)tc, (double)*diag_fig_at(ck, DF_STATE_MAX, l, h));
        }
    emit(ck, "state_growth", &cs, "with a state norm growing more than x100");
    /* small keys */
    for (int l = 0; l < ck->layers; l++)
        for (int h = 0; h < ck->H; h++) {
            float f = *diag_fig_at(ck, DF_K_SMALL, l, h);
            if (!(f > 0.01f)) continue;
            static const char *const KN[] = {"k_norm", "key_norm", NULL};
            int sk = series_any(tr, KN, l, mx), sb = series_for(tr, "beta", l, mx);
            int se = series_for(tr, "eta", l, mx);
            int64_t t0 = first_token(tr, sk, l, h, T, below, 1e-2);
            cand *c = cand_add(&cs);
            if (!c) break;
            *c = (cand){l, h, t0, f, f, ""};
            if (se >= 0 && sb >= 0) {
                /* Kaczmarz: |write| = beta |k| |e| = eta |e| |k| / (|k|^2 + eps) */
                float gain = NAN;
                for (int64_t t = 0; t < T; t++) {
                    float eta = val(tr, se, t, l, h),
                          x = val(tr, sb, t, l, h) * val(tr, sk, t, l, h);
                    if (eta > 0 && !isnan(x) && (isnan(gain) || x / eta > gain)) gain = x / eta;
                }
                snprintf(c->text, sizeof c->text,
                         "layer %d head %d: keys with |k| < 1e-2 on %.0f%% of tokens (first at "
                         "token %lld, smallest %.2g): the Kaczmarz write can reach %.3g*eta*|e| "
                         "(|k|/(|k|^2+eps); 1 at |k| = 1)",
                         l, h, 100.0 * f, (long long)t0, (double)*diag_fig_at(ck, DF_K_MIN, l, h),
                         (double)gain);
            } else {
                snprintf(c->text, sizeof c->text,
                         "layer %d head %d: keys with |k| < 1e-2 on %.0f%% of tokens (first at "
                         "token %lld, smallest %.2g): those tokens write almost nothing (rho = "
                         "beta |k|^2 < 1e-4)",
                         l, h, 100.0 * f, (long long)t0, (double)*diag_fig_at(ck, DF_K_MIN, l, h));
            }
        }
    emit(ck, "small_keys", &cs, "with keys |k| < 1e-2 on more than 1% of tokens");
    /* an expanding transition */
    for (int l = 0; l < ck->layers; l++)
        for (int h = 0; h < ck->H; h++) {
            float sp = *diag_fig_at(ck, DF_SPECTRAL, l, h);
            if (!(sp > 1.001f)) continue;
            int sr = series_for(tr, "rho", l, mx);
            int64_t t0 = first_token(tr, sr, l, h, T, above, 2.0);
            int over = 0, cnt = 0;
            for (int64_t t = 0; sr >= 0 && t < T; t++) {
                float r = val(tr, sr, t, l, h);
                if (isnan(r)) continue;
                cnt++, over += r > 2.0f || r < 0.0f;
            }
            if (t0 < 0) t0 = first_token(tr, sr, l, h, T, below, 0.0);
            cand *c = cand_add(&cs);
            if (!c) break;
            *c = (cand){l, h, t0, sp, sp, ""};
            snprintf(c->text, sizeof c->text,
                     "layer %d head %d: the transition expands: alpha*|1 - rho| reaches %.3g "
                     "(rho up to %.3g; outside [0, 2] on %.0f%% of tokens, first at token %lld): "
                     "beta |k|^2 > 2 overshoots the delta rule's correction and the state grows "
                     "along k",
                     l, h, (double)sp, (double)*diag_fig_at(ck, DF_RHO_MAX, l, h),
                     cnt ? 100.0 * over / cnt : 0.0, (long long)t0);
        }
    emit(ck, "expanding", &cs, "whose transition expands");
    /* decay */
    for (int l = 0; l < ck->layers; l++)
        for (int h = 0; h < ck->H; h++) {
            float hl = *diag_fig_at(ck, DF_HL, l, h);
            if (!(hl < 1.0f)) continue;
            cand *c = cand_add(&cs);
            if (!c) break;
            *c = (cand){l, h, -1, hl, 1.0 / (hl + 1e-30), ""};
            snprintf(c->text, sizeof c->text,
                     "layer %d head %d: the decay forgets within a token (median half-life %.3g "
                     "tokens, shortest %.3g): the state holds almost nothing",
                     l, h, (double)hl, (double)*diag_fig_at(ck, DF_HL_MIN, l, h));
        }
    emit(ck, "decay_fast", &cs, "with a median half-life under one token");
    /* beta saturation */
    for (int l = 0; l < ck->layers; l++)
        for (int h = 0; h < ck->H; h++) {
            float s = *diag_fig_at(ck, DF_BETA_SAT, l, h);
            if (!(s > 0.5f)) continue;
            cand *c = cand_add(&cs);
            if (!c) break;
            *c = (cand){l, h, -1, s, s, ""};
            snprintf(c->text, sizeof c->text,
                     "layer %d head %d: the write gate is saturated on %.0f%% of tokens (%s < "
                     "0.01 or > 0.99 of its range; median %.3g)",
                     l, h, 100.0 * s, isnan(*diag_fig_at(ck, DF_ETA, l, h)) ? "beta" : "eta",
                     (double)(isnan(*diag_fig_at(ck, DF_ETA, l, h))
                                  ? *diag_fig_at(ck, DF_BETA, l, h)
                                  : *diag_fig_at(ck, DF_ETA, l, h)));
        }
    emit(ck, "beta_saturated", &cs, "with a saturated write gate");
    /* Kalman */
    for (int l = 0; l < ck->layers; l++)
        for (int h = 0; h < ck->H; h++) {
            float lo = *diag_fig_at(ck, DF_LAM_MIN, l, h), hi = *diag_fig_at(ck, DF_LAM_MAX, l, h);
            if (!(hi / lo > 1e6f) && !(lo <= 0) && !isinf(hi)) continue;
            if (isnan(lo) || isnan(hi)) continue;
            cand *c = cand_add(&cs);
            if (!c) break;
            *c = (cand){l, h, -1, hi / lo, hi / lo, ""};
            snprintf(c->text, sizeof c->text,
                     "layer %d head %d: the Kalman precision spans %.2g..%.2g (ratio %.2g): "
                     "write gates of low-precision lanes saturate, high ones freeze",
                     l, h, (double)lo, (double)hi, (double)(hi / lo));
        }
    emit(ck, "kalman_range", &cs, "with a precision range over 1e6");
    for (int l = 0; l < ck->layers; l++)
        for (int h = 0; h < ck->H; h++) {
            float s = *diag_fig_at(ck, DF_GATE_SAT, l, h);
            if (!(s > 0.5f)) continue;
            cand *c = cand_add(&cs);
            if (!c) break;
            *c = (cand){l, h, -1, s, s, ""};
            snprintf(c->text, sizeof c->text,
                     "layer %d head %d: Kalman gates saturated on %.0f%% of tokens (write gate > "
                     "0.99 or forget gate < 0.01; mean write gate %.3g)",
                     l, h, 100.0 * s, (double)*diag_fig_at(ck, DF_WGATE, l, h));
        }
    emit(ck, "gate_saturated", &cs, "with saturated Kalman gates");
    /* KATA */
    for (int l = 0; l < ck->layers; l++)
        for (int h = 0; h < ck->H; h++) {
            float d = *diag_fig_at(ck, DF_DEN_MIN, l, h);
            if (!(d < 1e-4f)) continue;
            int sd = series_for(tr, "den", l, mx);
            int64_t t0 = -1;
            for (int64_t t = 1; sd >= 0 && t < T && t0 < 0; t++)
                if (below(val(tr, sd, t, l, h), 1e-4)) t0 = t;
            cand *c = cand_add(&cs);
            if (!c) break;
            *c = (cand){l, h, t0, d, 1.0 / (fabs(d) + 1e-30), ""};
            snprintf(c->text, sizeof c->text,
                     "layer %d head %d: the KATA denominator z^T psi(q) falls to %.3g (first "
                     "under 1e-4 at token %lld): the normalised readout divides by its eps clamp",
                     l, h, (double)d, (long long)t0);
        }
    emit(ck, "kata_denominator", &cs, "with a KATA denominator under 1e-4");
    /* Parallax */
    for (int l = 0; l < ck->layers; l++)
        for (int h = 0; h < ck->H; h++) {
            float cm = *diag_fig_at(ck, DF_COR_MAX, l, h);
            if (!(cm > 1.0f)) continue;
            int sc = series_for(tr, "cor", l, mx);
            int64_t t0 = first_token(tr, sc, l, h, T, above, 1.0);
            cand *c = cand_add(&cs);
            if (!c) break;
            *c = (cand){l, h, t0, cm, cm, ""};
            snprintf(c->text, sizeof c->text,
                     "layer %d head %d: Parallax's correction outweighs the softmax output: COR "
                     "up to %.3g (median %.3g, first over 1 at token %lld)",
                     l, h, (double)cm, (double)*diag_fig_at(ck, DF_COR, l, h), (long long)t0);
        }
    emit(ck, "parallax_cor", &cs, "with COR over 1");
    /* the layer around the core */
    for (int l = 0; l < ck->layers; l++)
        for (int h = 0; h < ck->H; h++) {
            float g = *diag_fig_at(ck, DF_OGATE, l, h);
            if (!(fabsf(g) < 1e-3f)) continue;
            cand *c = cand_add(&cs);
            if (!c) break;
            *c = (cand){l, h, -1, g, 1.0 / (fabs(g) + 1e-30), ""};
            snprintf(c->text, sizeof c->text,
                     "layer %d head %d: the output gate is nearly closed (mean %.3g): the head "
                     "contributes almost nothing",
                     l, h, (double)g);
        }
    emit(ck, "output_gate", &cs, "with a closed output gate");
    for (int l = 0; l < ck->layers; l++)
        for (int h = 0; h < ck->H; h++) {
            float r = *diag_fig_at(ck, DF_RSTD_MAX, l, h);
            /* 1/sqrt(eps) caps it: 1e3 at fla's norm eps 1e-6, where random models sit */
            if (!(r > 1e4f)) continue;
            int so = series_for(tr, "o_rstd", l, mx);
            int64_t t0 = first_token(tr, so, l, h, T, above, 1e4);
            cand *c = cand_add(&cs);
            if (!c) break;
            *c = (cand){l, h, t0, r, r, ""};
            snprintf(c->text, sizeof c->text,
                     "layer %d head %d: the core output is near the output norm's eps: 1/RMS up "
                     "to %.3g (first over 1e4 at token %lld), so the norm amplifies noise",
                     l, h, (double)r, (long long)t0);
        }
    emit(ck, "output_rstd", &cs, "with 1/RMS over 1e4");
    for (int l = 0; l < ck->layers; l++) {
        float lo = *diag_fig_at(ck, DF_NORM_MIN, l, 0), hi = *diag_fig_at(ck, DF_NORM_MAX, l, 0);
        if (!(hi > 20.0f) && !(lo < 1e-3f)) continue;
        diag_add_finding(ck, "norm_scale", l, -1, -1, hi,
                         "layer %d: RMSNorm scales span |w| %s..%s (a scale past 20 or under "
                         "1e-3 amplifies or silences its channels)",
                         l, (snprintf(a, sizeof a, "%.3g", (double)lo), a),
                         (snprintf(b, sizeof b, "%.3g", (double)hi), b));
    }
    free(cs.c);
}
