/* interv.c: edits, snapshots, restores and ablations (interv.h), and the list that replays them. */
#include "interv.h"

#include <limits.h>
#include <math.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "../mixers/record.h"
#include "../models/model.h"
#include "internal.h"

/* A copy of the run's state at one position. */
typedef struct engine_snap {
    char name[ENGINE_SNAP_NAME];
    int refs; /* the snapshot list and every restore that names it */
    int pos, raw, nl;
    const mixer_ops **mx; /* [nl] */
    mixer_cfg *mc;        /* [nl] */
    float **state;        /* [nl][state_floats] */
    size_t *nstate;       /* [nl] */
    float *(*conv)[3];    /* [nl][3] short-convolution buffers (model mode) */
    size_t (*nconv)[3];   /* [nl][3] */
} engine_snap;

typedef struct engine_ivs {
    engine_iv *iv;
    int n, cap;
    engine_snap **snap;
    int nsnap;
    /* mean ablation: per layer the sum of the head outputs entering the output projection over
     * tokens 0..abl_n[l]-1 of the run, in double */
    double **abl_sum;
    int *abl_width, *abl_n, abl_layers;
    float *orig; /* [orig_n] the outputs of the token before the ablations */
    int orig_n;
} engine_ivs;

static engine_ivs *ivs_of(engine *g) {
    if (!g->ivs) g->ivs = calloc(1, sizeof(engine_ivs));
    return g->ivs;
}

static void snap_unref(engine_snap *s) {
    if (!s || --s->refs > 0) return;
    for (int l = 0; l < s->nl; l++) {
        free(s->state[l]);
        for (int i = 0; i < 3; i++) free(s->conv[l][i]);
    }
    free(s->mx), free(s->mc), free(s->state), free(s->nstate), free(s->conv), free(s->nconv);
    free(s);
}

static void iv_release(engine_iv *iv) {
    free(iv->k), free(iv->v);
    snap_unref(iv->snap);
    memset(iv, 0, sizeof *iv);
}

int engine_iv_count(const engine *g) {
    return g->ivs ? g->ivs->n : 0;
}

const engine_iv *engine_iv_at(const engine *g, int i) {
    return g->ivs && i >= 0 && i < g->ivs->n ? &g->ivs->iv[i] : NULL;
}

void engine_iv_clear(engine *g) {
    engine_ivs *s = g->ivs;
    if (!s) return;
    for (int i = 0; i < s->n; i++) iv_release(&s->iv[i]);
    s->n = 0;
    engine_iv_publish(g);
}

static void abl_free(engine_ivs *s) {
    for (int l = 0; l < s->abl_layers; l++) free(s->abl_sum[l]);
    free(s->abl_sum), free(s->abl_width), free(s->abl_n);
    s->abl_sum = NULL, s->abl_width = NULL, s->abl_n = NULL, s->abl_layers = 0;
}

void engine_iv_free(engine *g) {
    engine_ivs *s = g->ivs;
    if (!s) return;
    engine_iv_clear(g);
    for (int i = 0; i < s->nsnap; i++) snap_unref(s->snap[i]);
    abl_free(s);
    free(s->orig), free(s->snap), free(s->iv), free(s);
    g->ivs = NULL;
}

const char *engine_iv_text(const engine_iv *iv, char *buf, size_t n) {
    char h[24] = "";
    if (iv->head >= 0) snprintf(h, sizeof h, " head %d", iv->head);
    switch (iv->kind) {
    case IV_ERASE:
        snprintf(buf, n, "at %d: edit erase layer %d head %d key %d", iv->pos, iv->layer, iv->head,
                 iv->key);
        break;
    case IV_WRITE:
        snprintf(buf, n, "at %d: edit write layer %d head %d key %d value %d", iv->pos, iv->layer,
                 iv->head, iv->key, iv->value);
        break;
    case IV_RESTORE:
        if (iv->layer >= 0)
            snprintf(buf, n, "at %d: restore %s layer %d%s", iv->pos, iv->snap->name, iv->layer, h);
        else
            snprintf(buf, n, "at %d: restore %s", iv->pos, iv->snap->name);
        break;
    case IV_ABLATE:
        snprintf(buf, n, "at %d: ablate layer %d%s tokens %d..%d mode %s", iv->pos, iv->layer, h,
                 iv->from, iv->to, iv->mean ? "mean" : "zero");
        break;
    }
    return buf;
}

static engine_iv *iv_push(engine *g, err *e) {
    engine_ivs *s = ivs_of(g);
    if (!s) return err_set(e, "out of memory"), NULL;
    if (s->n == s->cap) {
        int cap = s->cap ? 2 * s->cap : 16;
        engine_iv *n = realloc(s->iv, (size_t)cap * sizeof *n);
        if (!n) return err_set(e, "out of memory"), NULL;
        s->iv = n, s->cap = cap;
    }
    engine_iv *iv = &s->iv[s->n];
    memset(iv, 0, sizeof *iv);
    return iv;
}

/* The list into the trace, for the views: snapshot "interventions" [1 + n, 5], row 0 = {n},
 * then per intervention {position, kind (engine_iv_kind), layer, head, key token}. */
void engine_iv_publish(engine *g) {
    int n = engine_iv_count(g);
    err e = {{0}};
    int k = trace_add_snapshot(&g->tr, "interventions", 1, 1, 1 + n, 5, &e);
    if (k < 0) return;
    float *d = trace_snapshot_at(&g->tr, k, 0, 0);
    memset(d, 0, (size_t)(1 + n) * 5 * sizeof(float));
    d[0] = (float)n;
    for (int i = 0; i < n; i++) {
        const engine_iv *iv = &g->ivs->iv[i];
        float *r = d + (size_t)(1 + i) * 5;
        r[0] = (float)iv->pos, r[1] = (float)iv->kind, r[2] = (float)iv->layer;
        r[3] = (float)iv->head, r[4] = (float)iv->key;
    }
    g->tr.snaps[k].t = g->tr.T - 1;
}

/* ---- the cores' states ---- */

typedef struct core_ref {
    float *state;
    size_t nstate;
    const mixer_ops *mx;
    const mixer_cfg *mc;
    float *conv[3];
    size_t nconv[3];
} core_ref;

static int nlayers(const engine *g) {
    if (engine_raw_active(g)) return g->raw->nl;
    return g->model ? g->model->c.layers : 0;
}

static int need_run(const engine *g, err *e) {
    if (engine_raw_active(g)) return 0;
    if (!g->model) return err_set(e, "no model (load PATH or model random MIXER first)");
    return 0;
}

/* Layer (lane) li's core, with the host state up to date. */
static int core_of(engine *g, int li, core_ref *c, err *e) {
    memset(c, 0, sizeof *c);
    if (need_run(g, e)) return -1;
    int nl = nlayers(g);
    if (li < 0 || li >= nl)
        return err_set(e, "layer %d: the %s has %d (0..%d)", li,
                       engine_raw_active(g) ? "run has lanes" : "model has layers", nl, nl - 1);
    if (engine_raw_active(g)) {
        raw_lane *L = &g->raw->lane[li];
        c->state = L->state, c->mx = L->m, c->mc = &L->c;
    } else {
        if (engine_sync_model(g, e)) return -1;
        layer *L = &g->model->layers[li];
        c->state = L->state, c->mx = L->mx, c->mc = &L->mc;
        for (int s = 0; s < 3; s++)
            if (L->conv_cache[s]) {
                c->conv[s] = L->conv_cache[s];
                c->nconv[s] = (size_t)L->conv_dim[s] * (size_t)g->model->c.conv_size;
            }
    }
    c->nstate = c->mx->state_floats(c->mc);
    return 0;
}

/* The host state of layer li changed: the GPU copy, the readback tracker and the live heatmap
 * follow. */
static void state_changed(engine *g, int li, const core_ref *c) {
    g->gen++;
    if (engine_raw_active(g))
        g->raw->gl_valid = 0;
    else if (g->gm)
        g->gm_where = ENGINE_GM_CPU_AHEAD;
    engine_recall_invalidate(g, li);
    int pos = engine_pos(g);
    if (pos > 0 && pos <= g->tr.T) probe_record_state(&g->tr, c->mx, c->mc, c->state, pos - 1, li);
}

/* The key-major [H, dk, dv] part of a core's state ("hT"), or -1. */
static long hT_offset(const mixer_ops *mx, const mixer_cfg *mc) {
    state_part parts[MIXER_MAX_STATE_PARTS];
    int n = mx->state_parts ? mx->state_parts(mc, parts) : 0;
    for (int i = 0; i < n; i++)
        if (!strcmp(parts[i].name, "hT") && parts[i].ndim == 3 && parts[i].shape[0] == mc->H &&
            parts[i].shape[1] == mc->dk && parts[i].shape[2] == mc->dv)
            return (long)parts[i].offset;
    return -1;
}

/* ---- edits ---- */

/* r [dv] = S^T k, in double */
static void readback(const float *S, const float *k, int dk, int dv, double *r) {
    for (int c = 0; c < dv; c++) r[c] = 0;
    for (int i = 0; i < dk; i++) {
        double ki = k[i];
        const float *row = S + (size_t)i * dv;
        for (int c = 0; c < dv; c++) r[c] += ki * row[c];
    }
}

static double vnorm(const double *x, int n) {
    double s = 0;
    for (int i = 0; i < n; i++) s += x[i] * x[i];
    return sqrt(s);
}

/* The edit itself on one head's S [dk][dv]: erase when v is NULL. d [dv] scratch. Returns -1 for
 * a zero key. */
static int edit_apply(float *S, const float *k, const float *v, int dk, int dv, double *d) {
    double kk = 0;
    for (int i = 0; i < dk; i++) kk += (double)k[i] * k[i];
    if (!(kk > 0) || !isfinite(kk)) return -1;
    readback(S, k, dk, dv, d);
    for (int c = 0; c < dv; c++) d[c] = ((v ? (double)v[c] : 0.0) - d[c]) / kk;
    for (int i = 0; i < dk; i++) {
        float *row = S + (size_t)i * dv;
        double ki = k[i];
        for (int c = 0; c < dv; c++) row[c] = (float)((double)row[c] + ki * d[c]);
    }
    return 0;
}

/* The series value of token t, layer li, head h ("k" or "v"), or NULL. */
static const float *kv_at(const engine *g, const char *name, int t, int li, int h, int width) {
    int s = trace_find(&g->tr, name);
    if (s < 0 || t < 0 || t >= g->tr.T) return NULL;
    const trace_series *ts = &g->tr.series[s];
    if (li >= ts->layers || h >= ts->heads || ts->width != width) return NULL;
    return trace_at_lh(&g->tr, s, t, li, h);
}

/* Tokens whose keys count as stored: every token run, or the stream's writes in raw mode. */
static int stored_key(const engine *g, int t) {
    return !engine_raw_active(g) || !g->raw->st.query[t];
}

int engine_edit(engine *g, int li, int h, int key, int value, engine_edit_report *rep, err *e) {
    const char *what = value < 0 ? "edit erase" : "edit write";
    core_ref c;
    if (core_of(g, li, &c, e)) return err_prefix(e, "%s", what);
    const mixer_cfg *mc = c.mc;
    long off = hT_offset(c.mx, mc);
    if (off < 0)
        return err_set(e,
                       "%s: layer %d's core %s keeps no key-value matrix [H, dk, dv] to edit (gdn, "
                       "deltanet, kaczmarz, gla and mamba2 do)",
                       what, li, c.mx->name);
    if (h < 0 || h >= mc->H)
        return err_set(e, "%s: head %d: layer %d has heads 0..%d", what, h, li, mc->H - 1);
    int pos = engine_pos(g);
    if (key < 0 || key >= pos)
        return err_set(e, "%s: key=%d: the tokens run are 0..%d", what, key, pos - 1);
    if (value >= pos)
        return err_set(e, "%s: value=%d: the tokens run are 0..%d", what, value, pos - 1);
    int dk = mc->dk, dv = mc->dv;
    const float *k = kv_at(g, "k", key, li, h, dk),
                *v = value >= 0 ? kv_at(g, "v", value, li, h, dv) : NULL;
    if (!k || (value >= 0 && !v))
        return err_set(e,
                       "%s: the keys and values of layer %d were not recorded (set probes default, "
                       "then reset and run)",
                       what, li);
    engine_iv *iv = iv_push(g, e);
    if (!iv) return -1;
    iv->kind = value < 0 ? IV_ERASE : IV_WRITE;
    iv->pos = pos, iv->layer = li, iv->head = h, iv->key = key, iv->value = value;
    iv->k = malloc((size_t)dk * sizeof(float));
    iv->v = v ? malloc((size_t)dv * sizeof(float)) : NULL;
    double *buf = malloc((size_t)3 * dv * sizeof(double));
    if (!iv->k || (v && !iv->v) || !buf) {
        free(buf), iv_release(iv);
        return err_set(e, "out of memory");
    }
    memcpy(iv->k, k, (size_t)dk * sizeof(float));
    if (v) memcpy(iv->v, v, (size_t)dv * sizeof(float));
    float *S = c.state + off + (size_t)h * dk * dv;
    const float *target = value >= 0 ? iv->v : kv_at(g, "v", key, li, h, dv);
    double *rb = buf, *d = buf + dv, *rb2 = buf + 2 * dv;

    readback(S, iv->k, dk, dv, rb);
    engine_edit_report r = {.coll_key = -1};
    r.rb_before = vnorm(rb, dv);
    double tn = 0, eb = 0;
    for (int i = 0; target && i < dv; i++)
        tn += (double)target[i] * target[i], eb += (rb[i] - target[i]) * (rb[i] - target[i]);
    r.err_before = target && tn > 0 ? sqrt(eb / tn) : NAN;
    if (edit_apply(S, iv->k, iv->v, dk, dv, d)) {
        free(buf), iv_release(iv);
        return err_set(e, "%s: the key of token %d at layer %d head %d is zero or not finite", what,
                       key, li, h);
    }
    /* d holds the change per unit of k: delta(S^T k_i) = (k . k_i) d, exact in double */
    readback(S, iv->k, dk, dv, rb2);
    r.rb_after = vnorm(rb2, dv);
    double ea = 0;
    for (int i = 0; target && i < dv; i++) ea += (rb2[i] - target[i]) * (rb2[i] - target[i]);
    r.err_after = target && tn > 0 ? sqrt(ea / tn) : NAN;
    if (value < 0) r.err_after = NAN; /* erased: what reads back is 0 by construction */
    double dn = vnorm(d, dv);
    for (int t = 0; t < pos; t++) {
        if (t == key || !stored_key(g, t)) continue;
        const float *ki = kv_at(g, "k", t, li, h, dk);
        if (!ki) continue;
        double dot = 0;
        for (int i = 0; i < dk; i++) dot += (double)iv->k[i] * ki[i];
        double ch = fabs(dot) * dn;
        r.nkeys++;
        if (ch > r.coll_max || r.coll_key < 0) {
            readback(S, ki, dk, dv, rb); /* after; before = after - change */
            for (int i = 0; i < dv; i++) rb[i] -= dot * d[i];
            double b = vnorm(rb, dv);
            r.coll_max = ch, r.coll_key = t, r.coll_rel = b > 0 ? ch / b : NAN;
        }
    }
    free(buf);
    iv->done = 1;
    g->ivs->n++;
    state_changed(g, li, &c);
    engine_iv_publish(g);
    if (rep) *rep = r;
    return 0;
}

/* Replays an edit (the same arithmetic as when it was made). */
static int edit_replay(engine *g, const engine_iv *iv, err *e) {
    core_ref c;
    if (core_of(g, iv->layer, &c, e)) return -1;
    long off = hT_offset(c.mx, c.mc);
    if (off < 0 || iv->head >= c.mc->H)
        return err_set(e, "layer %d's core %s no longer has that head's key-value matrix",
                       iv->layer, c.mx->name);
    double *d = malloc((size_t)c.mc->dv * sizeof(double));
    if (!d) return err_set(e, "out of memory");
    float *S = c.state + off + (size_t)iv->head * c.mc->dk * c.mc->dv;
    int rc = edit_apply(S, iv->k, iv->v, c.mc->dk, c.mc->dv, d);
    free(d);
    if (rc) return err_set(e, "zero key");
    state_changed(g, iv->layer, &c);
    return 0;
}

/* ---- snapshots ---- */

static engine_snap *snap_find(const engine *g, const char *name, int *index) {
    for (int i = 0; g->ivs && i < g->ivs->nsnap; i++)
        if (!strcmp(g->ivs->snap[i]->name, name)) {
            if (index) *index = i;
            return g->ivs->snap[i];
        }
    return NULL;
}

/* A snapshot of the run now, not yet listed. */
static engine_snap *snap_take(engine *g, const char *name, err *e) {
    int nl = nlayers(g);
    engine_snap *sn = calloc(1, sizeof *sn);
    if (!sn) return err_set(e, "out of memory"), NULL;
    snprintf(sn->name, sizeof sn->name, "%s", name);
    sn->refs = 1, sn->pos = engine_pos(g), sn->raw = engine_raw_active(g), sn->nl = nl;
    sn->mx = calloc((size_t)nl, sizeof *sn->mx);
    sn->mc = calloc((size_t)nl, sizeof *sn->mc);
    sn->state = calloc((size_t)nl, sizeof *sn->state);
    sn->nstate = calloc((size_t)nl, sizeof *sn->nstate);
    sn->conv = calloc((size_t)nl, sizeof *sn->conv);
    sn->nconv = calloc((size_t)nl, sizeof *sn->nconv);
    int bad = !sn->mx || !sn->mc || !sn->state || !sn->nstate || !sn->conv || !sn->nconv;
    for (int l = 0; !bad && l < nl; l++) {
        core_ref c;
        if (core_of(g, l, &c, e)) {
            snap_unref(sn);
            return NULL;
        }
        sn->mx[l] = c.mx, sn->mc[l] = *c.mc, sn->nstate[l] = c.nstate;
        sn->state[l] = malloc(c.nstate * sizeof(float));
        bad |= !sn->state[l];
        if (!bad) memcpy(sn->state[l], c.state, c.nstate * sizeof(float));
        for (int i = 0; !bad && i < 3; i++) {
            if (!c.conv[i]) continue;
            sn->nconv[l][i] = c.nconv[i];
            sn->conv[l][i] = malloc(c.nconv[i] * sizeof(float));
            bad |= !sn->conv[l][i];
            if (!bad) memcpy(sn->conv[l][i], c.conv[i], c.nconv[i] * sizeof(float));
        }
    }
    if (bad) {
        snap_unref(sn);
        return err_set(e, "out of memory for the state"), NULL;
    }
    return sn;
}

int engine_snapshot(engine *g, const char *name, err *e) {
    if (!name[0] || strlen(name) >= ENGINE_SNAP_NAME)
        return err_set(e, "snapshot: a name of 1 to %d characters", ENGINE_SNAP_NAME - 1);
    if (need_run(g, e)) return err_prefix(e, "snapshot");
    engine_ivs *s = ivs_of(g);
    if (!s) return err_set(e, "out of memory");
    engine_snap *sn = snap_take(g, name, e);
    if (!sn) return err_prefix(e, "snapshot %s", name);
    engine_snap **ns = realloc(s->snap, (size_t)(s->nsnap + 1) * sizeof *ns);
    if (!ns) {
        snap_unref(sn);
        return err_set(e, "snapshot %s: out of memory", name);
    }
    s->snap = ns;
    int old;
    if (snap_find(g, name, &old)) {
        snap_unref(s->snap[old]);
        s->snap[old] = sn;
    } else {
        s->snap[s->nsnap++] = sn;
    }
    return 0;
}

int engine_snap_count(const engine *g) {
    return g->ivs ? g->ivs->nsnap : 0;
}

const char *engine_snap_info(const engine *g, int i, int *pos) {
    if (!g->ivs || i < 0 || i >= g->ivs->nsnap) return NULL;
    if (pos) *pos = g->ivs->snap[i]->pos;
    return g->ivs->snap[i]->name;
}

/* Whether snapshot sn fits the current run's layers (a one-line reason otherwise). */
static int snap_fits(engine *g, const engine_snap *sn, int li, err *e) {
    if (sn->raw != engine_raw_active(g))
        return err_set(e, "snapshot %s was taken in %s mode", sn->name,
                       sn->raw ? "raw-mixer" : "model");
    if (sn->nl != nlayers(g))
        return err_set(e, "snapshot %s has %d layers, the run %d", sn->name, sn->nl, nlayers(g));
    for (int l = 0; l < sn->nl; l++) {
        if (li >= 0 && l != li) continue;
        core_ref c;
        if (core_of(g, l, &c, e)) return -1;
        if (c.mx != sn->mx[l] || c.nstate != sn->nstate[l] || c.mc->H != sn->mc[l].H)
            return err_set(e,
                           "snapshot %s: layer %d was %s with %zu state floats, now %s with %zu "
                           "(another core, or a KV capacity for a prompt of another length)",
                           sn->name, l, sn->mx[l]->name, sn->nstate[l], c.mx->name, c.nstate);
        for (int i = 0; i < 3; i++)
            if (c.nconv[i] != sn->nconv[l][i])
                return err_set(e, "snapshot %s: layer %d's convolution buffers differ", sn->name,
                               l);
    }
    return 0;
}

/* The head-major parts of a core's state (shape[0] == H): 0 and their count, or -1 with a
 * reason when another part is not. */
static int head_slices(const mixer_ops *mx, const mixer_cfg *mc, state_part *parts, int *np,
                       err *e) {
    int n = mx->state_parts ? mx->state_parts(mc, parts) : 0;
    size_t covered = 0;
    for (int i = 0; i < n; i++) {
        if (parts[i].shape[0] != mc->H)
            return err_set(e, "%s keeps its state part %s with heads not first", mx->name,
                           parts[i].name);
        size_t f = 1;
        for (int d = 0; d < parts[i].ndim; d++) f *= (size_t)parts[i].shape[d];
        covered += f;
    }
    if (covered != mx->state_floats(mc))
        return err_set(e, "%s keeps state beyond its described parts", mx->name);
    *np = n;
    return 0;
}

static int restore_apply(engine *g, const engine_snap *sn, int li, int h, err *e) {
    if (snap_fits(g, sn, li, e)) return -1;
    for (int l = 0; l < sn->nl; l++) {
        if (li >= 0 && l != li) continue;
        core_ref c;
        if (core_of(g, l, &c, e)) return -1;
        if (h < 0) {
            memcpy(c.state, sn->state[l], c.nstate * sizeof(float));
            for (int i = 0; i < 3; i++)
                if (c.conv[i]) memcpy(c.conv[i], sn->conv[l][i], c.nconv[i] * sizeof(float));
        } else {
            state_part parts[MIXER_MAX_STATE_PARTS];
            int np = 0;
            if (h >= c.mc->H)
                return err_set(e, "head %d: layer %d has heads 0..%d", h, l, c.mc->H - 1);
            if (head_slices(c.mx, c.mc, parts, &np, e)) return err_prefix(e, "head restore");
            for (int i = 0; i < np; i++) {
                size_t per = 1;
                for (int d = 1; d < parts[i].ndim; d++) per *= (size_t)parts[i].shape[d];
                size_t o = parts[i].offset + (size_t)h * per;
                memcpy(c.state + o, sn->state[l] + o, per * sizeof(float));
            }
        }
        state_changed(g, l, &c);
    }
    return 0;
}

int engine_restore(engine *g, const char *name, int li, int h, err *e) {
    engine_snap *sn = snap_find(g, name, NULL);
    if (!sn) {
        if (!engine_snap_count(g)) return err_set(e, "restore: no snapshot %s (none taken)", name);
        return err_set(e, "restore: no snapshot %s (`snapshot` lists them)", name);
    }
    if (h >= 0 && li < 0) return err_set(e, "restore: head= needs layer=");
    if (li >= sn->nl)
        return err_set(e, "restore: layer %d: snapshot %s has layers 0..%d", li, name, sn->nl - 1);
    int pos = engine_pos(g);
    if (pos != sn->pos)
        return err_set(e,
                       "restore: snapshot %s is at position %d, the run at %d (reset and step %d "
                       "tokens first)",
                       name, sn->pos, pos, sn->pos);
    engine_iv *iv = iv_push(g, e);
    if (!iv) return -1;
    if (restore_apply(g, sn, li, h, e)) return err_prefix(e, "restore %s", name);
    iv->kind = IV_RESTORE, iv->pos = pos, iv->layer = li, iv->head = h, iv->snap = sn;
    iv->key = iv->value = -1, iv->done = 1;
    sn->refs++;
    g->ivs->n++;
    engine_iv_publish(g);
    return 0;
}

/* ---- ablation ---- */

int engine_ablate(engine *g, int li, int h, int from, int to, int mean, err *e) {
    if (engine_raw_active(g))
        return err_set(e, "ablate: raw-mixer lanes have no output projection (load a model)");
    if (!g->model) return err_set(e, "ablate: no model (load PATH or model random MIXER first)");
    const model *m = g->model;
    if (li < 0 || li >= m->c.layers)
        return err_set(e, "ablate: layer %d: the model has layers 0..%d", li, m->c.layers - 1);
    const layer *L = &m->layers[li];
    if (h >= L->mc.H)
        return err_set(e, "ablate: head %d: layer %d has heads 0..%d", h, li, L->mc.H - 1);
    int pos = engine_pos(g), last = g->ntokens > 0 ? g->ntokens - 1 : INT_MAX;
    if (from < 0) from = pos;
    if (to < 0) to = last;
    if (to < from) return err_set(e, "ablate: to=%d is before from=%d", to, from);
    if (mean && pos > 0 && !(g->ivs && g->ivs->abl_layers > li && g->ivs->abl_n[li] == pos))
        return err_set(e,
                       "ablate mode=mean: the head outputs of tokens 0..%d were not all stepped on "
                       "the CPU (run prefill or device gpu); reset first",
                       pos - 1);
    engine_iv *iv = iv_push(g, e);
    if (!iv) return -1;
    iv->kind = IV_ABLATE, iv->pos = pos, iv->layer = li, iv->head = h, iv->from = from;
    iv->to = to, iv->mean = mean, iv->key = iv->value = -1, iv->done = 1;
    g->ivs->n++;
    engine_iv_publish(g);
    return 0;
}

int engine_iv_ablating(const engine *g) {
    for (int i = 0; g->ivs && i < g->ivs->n; i++)
        if (g->ivs->iv[i].kind == IV_ABLATE) return 1;
    return 0;
}

/* The running sums of layer li, [width], sized on first use; NULL: no memory. */
static double *abl_sum(engine_ivs *s, int layers, int li, int width) {
    if (s->abl_layers != layers) {
        abl_free(s);
        s->abl_sum = calloc((size_t)layers, sizeof *s->abl_sum);
        s->abl_width = calloc((size_t)layers, sizeof *s->abl_width);
        s->abl_n = calloc((size_t)layers, sizeof *s->abl_n);
        if (!s->abl_sum || !s->abl_width || !s->abl_n) {
            abl_free(s);
            return NULL;
        }
        s->abl_layers = layers;
    }
    if (s->abl_width[li] != width) {
        free(s->abl_sum[li]);
        s->abl_sum[li] = calloc((size_t)width, sizeof(double));
        s->abl_width[li] = width, s->abl_n[li] = 0;
    }
    return s->abl_sum[li];
}

void engine_iv_out(engine *g, const model *m, int li, float *z, int width) {
    engine_ivs *s = ivs_of(g);
    if (!s) return;
    int pos = m->pos, H = m->layers[li].mc.H;
    double *sum = abl_sum(s, m->c.layers, li, width);
    if (!sum) return;
    if (pos == 0 || s->abl_n[li] != pos) { /* a new run (or a gap): the mean starts again */
        memset(sum, 0, (size_t)width * sizeof(double));
        s->abl_n[li] = pos == 0 ? 0 : -1;
    }
    int n = s->abl_n[li];
    int hw = H > 0 && width % H == 0 ? width / H : width;
    /* the mean is over tokens 0..pos-1: the sums are read before this token's outputs (before
     * any ablation) join them, once every ablation of the token is done */
    if (s->orig_n < width) {
        float *o = realloc(s->orig, (size_t)width * sizeof(float));
        if (!o) return;
        s->orig = o, s->orig_n = width;
    }
    memcpy(s->orig, z, (size_t)width * sizeof(float));
    for (int i = 0; i < s->n; i++) {
        const engine_iv *iv = &s->iv[i];
        if (iv->kind != IV_ABLATE || iv->layer != li || pos < iv->from || pos > iv->to) continue;
        int h0 = iv->head < 0 ? 0 : iv->head, h1 = iv->head < 0 ? width / hw : iv->head + 1;
        for (int c = h0 * hw; c < h1 * hw; c++)
            z[c] = iv->mean && n > 0 ? (float)(sum[c] / n) : 0.0f;
    }
    if (n < 0) return;
    for (int c = 0; c < width; c++) sum[c] += s->orig[c];
    s->abl_n[li] = n + 1;
}

/* ---- the list, replayed ---- */

int engine_iv_next_pos(const engine *g, int pos) {
    int best = INT_MAX;
    for (int i = 0; g->ivs && i < g->ivs->n; i++) {
        const engine_iv *iv = &g->ivs->iv[i];
        if (iv->kind != IV_ABLATE && !iv->done && iv->pos > pos && iv->pos < best) best = iv->pos;
    }
    return best;
}

/* The edits and restores made at pos: those not yet applied, or with force all of them (without
 * marking them). */
static int apply_at(engine *g, int pos, int force, err *e) {
    for (int i = 0; g->ivs && i < g->ivs->n; i++) {
        engine_iv *iv = &g->ivs->iv[i];
        if (iv->kind == IV_ABLATE || (iv->done && !force) || iv->pos != pos) continue;
        int rc = iv->kind == IV_RESTORE ? restore_apply(g, iv->snap, iv->layer, iv->head, e)
                                        : edit_replay(g, iv, e);
        if (rc) {
            char b[160];
            return err_prefix(e, "%s", engine_iv_text(iv, b, sizeof b));
        }
        if (!force) iv->done = 1;
    }
    return 0;
}

int engine_iv_apply_at(engine *g, int pos, err *e) {
    return apply_at(g, pos, 0, e);
}

/* ---- capture: the tokens run so far again, watching one layer's core ---- */

typedef struct cap_ctx {
    engine *g;
    int li, from, to;
    engine_capture_fn fn;
    void *ctx;
} cap_ctx;

static void cap_pre(void *ctx, const model *m, int li, const mixer_tok *in, const float *state) {
    cap_ctx *c = ctx;
    if (li == c->li && m->pos >= c->from && m->pos <= c->to) c->fn(c->ctx, m->pos, in, state);
}

static void cap_out(void *ctx, const model *m, int li, float *z, int width) {
    cap_ctx *c = ctx;
    engine_iv_out(c->g, m, li, z, width);
}

int engine_capture(engine *g, int li, int from, int to, engine_capture_fn fn, void *ctx, err *e) {
    int pos = engine_pos(g);
    if (need_run(g, e)) return -1;
    if (li < 0 || li >= nlayers(g))
        return err_set(e, "layer %d: the run has layers 0..%d", li, nlayers(g) - 1);
    if (from < 0 || to < from || to >= pos)
        return err_set(e, "tokens %d..%d: the tokens run are 0..%d", from, to, pos - 1);
    engine_snap *sn = snap_take(g, "(capture)", e);
    if (!sn) return -1;
    int rc = 0;
    if (engine_raw_active(g)) {
        raw_mode *r = g->raw;
        raw_lane *L = &r->lane[li];
        raw_lane_reset(L);
        for (int t = 0; t <= to && !rc; t++) {
            if ((rc = apply_at(g, t, 1, e))) break;
            if (t >= from) {
                mixer_tok x;
                raw_lane_inputs(L, &r->st, t, r->scratch, &x);
                fn(ctx, t, &x, L->state);
            }
            raw_lane_step(L, &r->st, t, r->scratch);
        }
    } else {
        model *m = g->model;
        float *lg = malloc((size_t)m->c.vocab * sizeof(float));
        if (!lg) rc = err_set(e, "out of memory");
        cap_ctx cc = {.g = g, .li = li, .from = from, .to = to, .fn = fn, .ctx = ctx};
        if (!rc) rc = model_reset(m, 0, e);
        m->gpu = 0;
        m->layer_pre_hook = cap_pre, m->out_hook = cap_out, m->layer_hook_ctx = &cc;
        /* every token run so far, so the mean-ablation sums end where they were */
        for (int t = 0; t < pos && !rc; t++) {
            if ((rc = apply_at(g, t, 1, e))) break;
            rc = model_step(m, g->tokens[t], lg, NULL, e);
        }
        m->layer_pre_hook = NULL, m->out_hook = NULL, m->layer_hook_ctx = NULL;
        m->pos = pos;
        free(lg);
    }
    /* the run as it was, whatever happened */
    err e2 = {{0}};
    if (restore_apply(g, sn, -1, -1, rc ? &e2 : e)) rc = -1;
    if (engine_raw_active(g))
        g->raw->pos = pos;
    else
        g->model->pos = pos;
    snap_unref(sn);
    return rc ? -1 : 0;
}

void engine_iv_rewind(engine *g) {
    for (int i = 0; g->ivs && i < g->ivs->n; i++) g->ivs->iv[i].done = 0;
}

void engine_iv_drop_all(engine *g) {
    engine_iv_free(g);
}

/* ---- the lens ---- */

int engine_lens(engine *g, int li, int h, int key, float *logits, err *e) {
    if (engine_raw_active(g) || !g->model)
        return err_set(e, "lens: needs a model (its output projection and LM head)");
    core_ref c;
    if (core_of(g, li, &c, e)) return err_prefix(e, "lens");
    long off = hT_offset(c.mx, c.mc);
    if (off < 0)
        return err_set(e, "lens: layer %d's core %s keeps no key-value matrix to read", li,
                       c.mx->name);
    int H = c.mc->H, dk = c.mc->dk, dv = c.mc->dv, pos = engine_pos(g);
    if (h >= H) return err_set(e, "lens: head %d: layer %d has heads 0..%d", h, li, H - 1);
    if (key < 0 || key >= pos)
        return err_set(e, "lens: key=%d: the tokens run are 0..%d", key, pos - 1);
    float *r = calloc((size_t)H * dv, sizeof(float));
    double *rb = malloc((size_t)dv * sizeof(double));
    int rc = !r || !rb ? err_set(e, "out of memory") : 0;
    for (int k = 0; !rc && k < H; k++) {
        if (h >= 0 && k != h) continue;
        const float *kk = kv_at(g, "k", key, li, k, dk);
        if (!kk) {
            rc = err_set(e,
                         "lens: the keys of layer %d were not recorded (set probes default, then "
                         "reset and run)",
                         li);
            break;
        }
        readback(c.state + off + (size_t)k * dk * dv, kk, dk, dv, rb);
        for (int i = 0; i < dv; i++) r[(size_t)k * dv + i] = (float)rb[i];
    }
    if (!rc && model_lens(g->model, li, h, r, logits, e)) rc = err_prefix(e, "lens");
    free(r), free(rb);
    return rc ? -1 : 0;
}

typedef struct lensq {
    engine *g;
    const mixer_ops *mx;
    mixer_cfg mc;
    int li, h, n, V;
    const int *at;             /* positions, ascending */
    float *logits;             /* [n, V] */
    float *state, *o, *probes; /* scratch */
    int failed;
    err e;
} lensq;

/* At each asked position: the core's step on a copy of its state gives o_t = scale S_t^T q_t
 * exactly as the run computed it; the lens reads that. */
static void lensq_token(void *ctx, int t, const mixer_tok *in, const float *state) {
    lensq *q = ctx;
    int i = 0;
    while (i < q->n && q->at[i] != t) i++;
    if (i == q->n || q->failed) return;
    memcpy(q->state, state, q->mx->state_floats(&q->mc) * sizeof(float));
    q->mx->step(&q->mc, q->state, in, t, q->o, NULL);
    if (model_lens(q->g->model, q->li, q->h, q->o, q->logits + (size_t)i * q->V, &q->e))
        q->failed = 1;
}

int engine_lens_queries(engine *g, int li, int h, const int *at, int n, float *logits, err *e) {
    if (engine_raw_active(g) || !g->model)
        return err_set(e, "lens: needs a model (its output projection and LM head)");
    core_ref c;
    if (core_of(g, li, &c, e)) return err_prefix(e, "lens");
    if (hT_offset(c.mx, c.mc) < 0)
        return err_set(e, "lens: layer %d's core %s keeps no key-value matrix to read", li,
                       c.mx->name);
    if (h >= c.mc->H)
        return err_set(e, "lens: head %d: layer %d has heads 0..%d", h, li, c.mc->H - 1);
    if (n < 1) return err_set(e, "lens: no positions");
    lensq q = {.g = g,
               .mx = c.mx,
               .mc = *c.mc,
               .li = li,
               .h = h,
               .n = n,
               .V = g->model->c.vocab,
               .at = at,
               .logits = logits};
    q.state = malloc(c.nstate * sizeof(float));
    q.o = malloc((size_t)c.mc->H * c.mc->dv * sizeof(float));
    if (!q.state || !q.o) {
        free(q.state), free(q.o);
        return err_set(e, "out of memory");
    }
    int rc = engine_capture(g, li, at[0], at[n - 1], lensq_token, &q, e);
    if (!rc && q.failed) rc = err_set(e, "lens: %s", q.e.msg);
    free(q.state), free(q.o);
    return rc;
}
