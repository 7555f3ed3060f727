/* raw.c: lanes of raw-mixer mode: a mixer core configured from option words, fed from a stream. */
#include "../core/names.h"
#include "raw.h"

#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

void raw_lane_free(raw_lane *L) {
    free(L->state), free(L->probes), free(L->o), free(L->kal[0]), free(L->kal[1]);
    memset(L, 0, sizeof *L);
}

void raw_lane_reset(raw_lane *L) {
    L->m->state_init(&L->c, L->state);
    memset(L->o, 0, (size_t)L->c.H * L->c.dv * sizeof *L->o);
}

/* Is `key` among words (space separated "key=value")? */
static int has_key(const char *words, const char *key) {
    size_t n = strlen(key);
    for (const char *p = words; *p;) {
        while (*p == ' ') p++;
        if (!strncmp(p, key, n) && p[n] == '=') return 1;
        while (*p && *p != ' ') p++;
    }
    return 0;
}

/* Appends "word" to buf (space separated); -1 when it does not fit. */
static int add_word(char *buf, size_t cap, const char *w, size_t n) {
    size_t u = strlen(buf);
    if (u + n + 2 > cap) return -1;
    if (u) buf[u++] = ' ';
    memcpy(buf + u, w, n);
    buf[u + n] = '\0';
    return 0;
}

/* Does the mixer take option `key` (its options line mentions "key=")? */
static int takes(const mixer_ops *m, const char *key) {
    char pat[32];
    snprintf(pat, sizeof pat, "%s=", key);
    for (const char *p = m->options ? strstr(m->options, pat) : NULL; p; p = strstr(p + 1, pat))
        if (p == m->options || p[-1] == ' ') return 1;
    return 0;
}

int raw_lane_build(raw_lane *L, const char *spec, const char *shared, int H, int dk, int dv,
                   int max_t, int chunk, err *e) {
    memset(L, 0, sizeof *L);
    char name[32];
    const char *colon = strchr(spec, ':');
    size_t nl = colon ? (size_t)(colon - spec) : strlen(spec);
    if (nl == 0 || nl >= sizeof name) return err_set(e, "bad mixer '%.40s'", spec);
    memcpy(name, spec, nl), name[nl] = '\0';
    L->m = mixer_find(name);
    if (!L->m) {
        char list[200] = "";
        for (int i = 0; i < mixer_count; i++)
            if (mixer_all[i]) {
                size_t u = strlen(list);
                snprintf(list + u, sizeof list - u, "%s%s", u ? " " : "", mixer_all[i]->name);
            }
        const char *cand[32];
        int nc = 0;
        for (int i = 0; i < mixer_count && nc < 32; i++)
            if (mixer_all[i]) cand[nc++] = mixer_all[i]->name;
        const char *near = names_closest(name, cand, nc);
        if (near) return err_set(e, "unknown mixer '%s' (did you mean %s?)", name, near);
        return err_set(e, "unknown mixer '%s' (%s)", name, list);
    }
    snprintf(L->label, sizeof L->label, "%s", spec);
    /* own words (after ':', comma separated) first, then the shared ones they do not override */
    char own[256] = "";
    if (colon) {
        for (const char *p = colon + 1; *p;) {
            const char *end = strchr(p, ',');
            size_t n = end ? (size_t)(end - p) : strlen(p);
            if (n && add_word(own, sizeof own, p, n))
                return err_set(e, "%s: too many options", spec);
            p += n + (end != NULL);
        }
    }
    snprintf(L->words, sizeof L->words, "%s", own);
    for (const char *p = shared ? shared : ""; *p;) {
        while (*p == ' ') p++;
        const char *end = p;
        while (*end && *end != ' ') end++;
        const char *eq = memchr(p, '=', (size_t)(end - p));
        if (eq) {
            char key[32];
            size_t kn = (size_t)(eq - p) < sizeof key - 1 ? (size_t)(eq - p) : sizeof key - 1;
            memcpy(key, p, kn), key[kn] = '\0';
            if (!has_key(own, key) && add_word(L->words, sizeof L->words, p, (size_t)(end - p)))
                return err_set(e, "%s: too many options", spec);
        }
        p = end;
    }
    /* raw-mode defaults, unless given */
    char def[64];
    int attention = !strcmp(name, "softmax") || !strcmp(name, "parallax");
    if (takes(L->m, "scale") && !has_key(L->words, "scale")) {
        snprintf(def, sizeof def, "scale=%d", attention ? dk : 1);
        add_word(L->words, sizeof L->words, def, strlen(def));
    }
    if (chunk > 0 && takes(L->m, "chunk") && !has_key(L->words, "chunk")) {
        snprintf(def, sizeof def, "chunk=%d", chunk);
        add_word(L->words, sizeof L->words, def, strlen(def));
    }
    if (takes(L->m, "max_t") && !has_key(L->words, "max_t")) {
        snprintf(def, sizeof def, "max_t=%d", max_t > 0 ? max_t : MIXER_DEFAULT_MAX_T);
        add_word(L->words, sizeof L->words, def, strlen(def));
    }

    /* parse: the gates first, then the mixer's own options, then anything left is a typo */
    char *argv[OPTS_MAX + 1], buf[sizeof L->words];
    int argc = 0;
    snprintf(buf, sizeof buf, "%s", L->words);
    for (char *p = strtok(buf, " "); p && argc < OPTS_MAX + 1; p = strtok(NULL, " "))
        argv[argc++] = p;
    opts o;
    if (opts_parse(&o, argc, argv, e)) return err_prefix(e, "%s", spec);
    raw_gates *g = &L->g;
    int rc = opts_float(&o, "decay", 1.0, &g->decay, e) ||
             opts_float(&o, "beta", 1.0, &g->beta, e) || opts_float(&o, "eta", 1.0, &g->eta, e) ||
             opts_float(&o, "lambda_v", 1.0, &g->lambda_v, e) ||
             opts_float(&o, "a", -1.0, &g->a, e) || opts_float(&o, "p", -1.0, &g->p, e) ||
             opts_float(&o, "rscale", 1.0, &g->rscale, e);
    if (!rc && !(g->decay > 0 && g->decay <= 1))
        rc = err_set(e, "decay=%g must lie in (0, 1]", g->decay);
    if (!rc && !(isfinite(g->beta) && isfinite(g->eta) && isfinite(g->rscale)))
        rc = err_set(e, "beta, eta and rscale must be finite");
    if (!rc && !(g->lambda_v > 0 && isfinite(g->lambda_v)))
        rc = err_set(e, "lambda_v=%g must be > 0", g->lambda_v);
    if (!rc && opts_has(&o, "a") && !(g->a > 0 && g->a <= 1))
        rc = err_set(e, "a=%g must lie in (0, 1]", g->a);
    if (!rc && opts_has(&o, "p") && !(g->p >= 0 && isfinite(g->p)))
        rc = err_set(e, "p=%g must be >= 0", g->p);
    if (!rc) rc = mixer_configure(L->m, &L->c, H, dk, dv, &o, e);
    if (!rc) rc = opts_check_unused(&o, e);
    opts_free(&o);
    if (rc) return err_prefix(e, "%s", spec);

    L->delta = !strcmp(name, "gdn") || !strcmp(name, "deltanet") || !strcmp(name, "kaczmarz");
    state_part parts[MIXER_MAX_STATE_PARTS];
    int np = L->m->state_parts ? L->m->state_parts(&L->c, parts) : 0;
    for (int i = 0; i < np; i++)
        if (!strcmp(parts[i].name, "hT") && parts[i].ndim == 3 && parts[i].shape[1] == dk &&
            parts[i].shape[2] == dv)
            L->keymajor = 1;
    size_t sf = L->m->state_floats(&L->c);
    /* raw mode is for looking at a memory, not for benchmarks: 64 MiB of state per lane */
    if (sf > RAW_MAX_STATE_FLOATS)
        return err_set(e, "%s: a state of %zu floats is more than raw mode holds (%d)", spec, sf,
                       RAW_MAX_STATE_FLOATS);
    L->state = malloc((sf ? sf : 1) * sizeof *L->state);
    L->probes = malloc((mixer_probe_floats(L->m, &L->c) + 1) * sizeof *L->probes);
    L->o = calloc((size_t)H * dv, sizeof *L->o);
    if (!L->state || !L->probes || !L->o) {
        raw_lane_free(L);
        return err_set(e, "%s: out of memory", spec);
    }
    /* Kalman's static dynamics, when asked for (the mixer's defaults otherwise) */
    if (L->m->nparams >= 2 && (g->a > 0 || g->p >= 0)) {
        size_t n = (size_t)H * dv * dk;
        for (int j = 0; j < 2; j++) {
            double val = j == 0 ? g->a : g->p;
            if (val < 0) continue;
            if (!(L->kal[j] = malloc(n * sizeof(float)))) {
                raw_lane_free(L);
                return err_set(e, "%s: out of memory", spec);
            }
            for (size_t i = 0; i < n; i++) L->kal[j][i] = (float)val;
            L->c.params[j] = L->kal[j];
        }
    }
    raw_lane_reset(L);
    return 0;
}

size_t raw_scratch_floats(int H, int dk, int dv) {
    return (size_t)IN_COUNT * H * (size_t)(dk > dv ? dk : dv);
}

void raw_lane_inputs(const raw_lane *L, const raw_stream *st, int t, float *scratch, mixer_tok *x) {
    const int H = st->H, dk = st->dk, dv = st->dv, query = st->query[t];
    const size_t slot = (size_t)H * (size_t)(dk > dv ? dk : dv);
    const float *k = st->k + (size_t)t * H * dk, *v = st->v + (size_t)t * H * dv;
    const int kacz = !strcmp(L->m->name, "kaczmarz");
    memset(x, 0, sizeof *x);
    for (int i = 0; i < L->m->ninputs; i++) {
        mixer_input w = L->m->inputs[i].which;
        float *s = scratch + (size_t)w * slot;
        switch (w) {
        case IN_Q:
            x->in[w] = k;
            break;
        case IN_K:
        case IN_V:
            if (!query || L->delta) {
                x->in[w] = w == IN_K ? k : v;
            } else {
                memset(s, 0, (size_t)H * (w == IN_K ? dk : dv) * sizeof *s);
                x->in[w] = s;
            }
            break;
        case IN_R:
            for (size_t j = 0; j < (size_t)H * dk; j++)
                s[j] = (float)(L->g.rscale * st->r[(size_t)t * H * dk + j]);
            x->in[w] = s;
            break;
        case IN_G:
            for (int h = 0; h < H; h++) s[h] = query ? 0.0f : (float)log(L->g.decay);
            x->in[w] = s;
            break;
        case IN_GK:
            for (size_t j = 0; j < (size_t)H * dk; j++)
                s[j] = query ? 0.0f : (float)log(L->g.decay);
            x->in[w] = s;
            break;
        case IN_BETA:
            for (int h = 0; h < H; h++) s[h] = query ? 0.0f : (float)(kacz ? L->g.eta : L->g.beta);
            x->in[w] = s;
            break;
        case IN_LV:
            for (size_t j = 0; j < (size_t)H * dv; j++) s[j] = (float)L->g.lambda_v;
            x->in[w] = s;
            break;
        default:
            break;
        }
    }
}

void raw_lane_step(raw_lane *L, const raw_stream *st, int t, float *scratch) {
    mixer_tok x;
    raw_lane_inputs(L, st, t, scratch, &x);
    L->m->step(&L->c, L->state, &x, t, L->o, L->probes);
}

float raw_recall_error(const raw_lane *L, const raw_stream *st, int t, int h) {
    if (!st->query[t]) return NAN;
    const int dv = st->dv;
    const float *o = L->o + (size_t)h * dv, *v = st->v + ((size_t)t * st->H + h) * dv;
    double d = 0, n = 0;
    for (int i = 0; i < dv; i++)
        d += ((double)o[i] - v[i]) * ((double)o[i] - v[i]), n += (double)v[i] * v[i];
    return n > 0 ? (float)sqrt(d / n) : NAN;
}
