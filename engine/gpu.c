/* gpu.c: `device gpu` stepping of a whole model resident on the GPU (models/model_gpu.h), where it
 * supports the model (every family, hybrids too; what it refuses, e.g. `set arith tf32` or
 * attention heads wider than 256, steps through the CPU path with its cores on the GPU).
 *
 * Tokens go to the GPU in batches of ENGINE_GPU_BATCH (fewer when a token's probes are large:
 * model_gpu_max_batch): one call per batch, whose results (logits,
 * top-1, the cores' and families' probes, the keys and values the cores saw, the readback errors,
 * the states after the batch's last token) come back in one copy each. Recorded per token: the
 * core and family probes, the logits, "k" and "v" (whenever anything is recorded, as the CPU path
 * does) and "recall" where engine_recall_at wants it (the series viz/recall.c writes, same names,
 * meanings and shapes, computed on the GPU by model_gpu_step_ex); per batch: the state snapshot.
 * The GPU's readback window is refilled from the trace's "k" / "v" when the model arrives on the
 * GPU at a position past 0 (after CPU steps, a reset or `device gpu` again), as the CPU tracker
 * reloads its window after a gap. Models it does not cover step on the CPU (gm_why says why): a
 * core on the GPU token by token costs its state or cache up and down each token, slower than the
 * CPU. Not recorded on this path: the blocks' norms (register_model leaves them out). A NaN / Inf
 * in a token's probes or logits stops the run after the batch that met it, naming the first token,
 * layer and head. */
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "../mixers/record.h"
#include "../models/model.h"
#include "../models/model_gpu.h"
#include "../viz/recall.h"
#include "internal.h"
#include "nonfinite.h"

#define ENGINE_GPU_BATCH 64
#define W                MODEL_GPU_RECALL_WINDOW

_Static_assert(MODEL_GPU_RECALL_WINDOW == RECALL_WINDOW, "the GPU's window is the recall view's");

/* The series of viz/recall.c's add_kv and add_recall, the same names, meanings, sources and
 * shapes (the recall and kata views read them): "k" and "v" as wide as the GPU's layout (the most
 * heads and widest keys and values of any layer, as the CPU's layers widen them), "recall" with
 * the heads of the model's own layers (a hybrid's attention layers have no readback). */
static int add_kv(trace *tr, const engine *g, int *sk, int *sv, err *e) {
    const model *m = g->model;
    int H, dk, dv;
    model_gpu_kv_shape(g->gm, &H, &dk, &dv);
    *sk = trace_add_series(tr, "k", "key of the token, as the mixer saw it", "input", m->c.layers,
                           H, dk, e);
    *sv = *sk < 0 ? -1
                  : trace_add_series(tr, "v", "value of the token, as the mixer saw it", "input",
                                     m->c.layers, H, dv, e);
    if (*sv < 0) return -1;
    const trace_series *k = &tr->series[*sk], *v = &tr->series[*sv];
    if (k->heads != H || k->width != dk || v->heads != H || v->width != dv)
        return err_set(e,
                       "the trace's k / v series ([%d, %d], [%d, %d]) are not the GPU's [%d, "
                       "%d], [%d, %d] (reset, then run again)",
                       k->heads, k->width, v->heads, v->width, H, dk, H, dv);
    return 0;
}

/* The heads of the model's own layers (a hybrid's attention layers aside). */
static int own_heads(const model *m) {
    const int li = model_first_own_layer(m);
    return m->layers[li >= 0 ? li : 0].mc.H;
}

static int add_recall(trace *tr, const model *m, err *e) {
    return trace_add_series(tr, "recall",
                            "|S_t^T k_(t-j) - v_(t-j)| / |v_(t-j)|: readback error of the key j "
                            "tokens back",
                            "recall", m->c.layers, own_heads(m), W, e);
}

/* The window of the GPU holds fewer of the tokens before pos than the trace may: put the trace's
 * "k" / "v" of the last W - 1 tokens back (NaN where not recorded). */
static int refill_window(engine *g, int pos, err *e) {
    int m = pos < W - 1 ? pos : W - 1;
    if (model_gpu_recall_held(g->gm) >= m) return 0;
    int sk = trace_find(&g->tr, "k"), sv = trace_find(&g->tr, "v");
    if (sk < 0 || sv < 0 || g->tr.T < pos) return 0; /* nothing recorded: the window stays empty */
    /* a series' tokens lie one after the other: [T][layers][H][width] */
    return model_gpu_recall_fill(g->gm, trace_at(&g->tr, sk, pos - m),
                                 trace_at(&g->tr, sv, pos - m), m, e);
}

void engine_gpu_drop(engine *g) {
    g->gm_why[0] = '\0', g->gm_noted = 0; /* asked again for the next model */
    if (!g->gm) return;
    model_gpu_free(g->gm);
    g->gm = NULL, g->gm_where = ENGINE_GM_SYNC;
}

int engine_sync_model(engine *g, err *e) {
    if (!g->gm || !g->model || g->gm_where != ENGINE_GM_GPU_AHEAD) return 0;
    if (model_gpu_download(g->gm, g->model, e)) return -1;
    g->gm_where = ENGINE_GM_SYNC;
    return 0;
}

void engine_gpu_status(const engine *g, char *buf, size_t n) {
    if (!n) return;
    buf[0] = '\0';
    if (g->device != ENGINE_GPU || !g->model) return;
    char why[300] = "";
    if (g->gm)
        snprintf(buf, n, "resident on the gpu, up to %d tokens a call", model_gpu_max_batch(g->gm));
    else if (g->gm_why[0])
        snprintf(buf, n, "on the cpu: %s", g->gm_why);
    else if (model_gpu_supported(g->model, why, sizeof why))
        snprintf(buf, n, "resident on the gpu from the next step");
    else
        snprintf(buf, n, "on the cpu: %s", why);
}

int engine_gpu_usable(engine *g) {
    if (!g->model) return 0;
    if (g->gm) return 1;
    if (g->gm_why[0]) return 0; /* asked before: not this model */
    if (!model_gpu_supported(g->model, g->gm_why, sizeof g->gm_why)) return 0;
    err e = {{0}};
    if (model_gpu_init(&g->gm, g->model, ENGINE_GPU_BATCH, &e)) {
        snprintf(g->gm_why, sizeof g->gm_why, "%s", e.msg);
        g->gm = NULL;
        return 0;
    }
    g->gm_where = ENGINE_GM_SYNC;
    return 1;
}

/* The first non-finite value of token t's probes (per layer) or logits: 1 and a message. */
static int scan_token(const engine *g, const float *probes, const float *fprobes,
                      const float *logits, int pos, int no_lanes, char *msg, size_t n) {
    const model *m = g->model;
    const float *p = probes;
    for (int li = 0; li < m->c.layers; li++) {
        const layer *L = &m->layers[li];
        for (int i = 0; i < L->mx->nprobes; i++) {
            const float *v = p + mixer_probe_offset(L->mx, &L->mc, i);
            int w = mixer_width_floats(&L->mc, L->mx->probes[i].width);
            const char *name = L->mx->probes[i].name;
            /* the probes the CPU's scan names (finite in a healthy run), those that came back */
            if (!diag_nf_probe_checked(L->mx, &L->mc, name)) continue;
            if (no_lanes && L->mx->probes[i].width == W_LANES) continue;
            for (int h = 0; h < L->mc.H; h++)
                for (int j = 0; j < w; j++)
                    if (!isfinite(v[h * w + j])) {
                        snprintf(msg, n,
                                 "first non-finite value at token %d, layer %d, head %d, in the "
                                 "probe %s: %g",
                                 pos, li, h, name, (double)v[h * w + j]);
                        return 1;
                    }
        }
        p += mixer_probe_floats(L->mx, &L->mc);
    }
    (void)fprobes;
    for (int i = 0; i < m->c.vocab; i++)
        if (!isfinite(logits[i])) {
            snprintf(msg, n, "first non-finite value at token %d in the logits: %g", pos,
                     (double)logits[i]);
            return 1;
        }
    return 0;
}

/* A layer's row of one probe, sl = {series, offset, heads, floats a head}, into token t's row of
 * the series (its heads and width at least the layer's). */
static void put_heads(trace *tr, const int *sl, int64_t t, int li, const float *src) {
    const trace_series *s = &tr->series[sl[0]];
    const size_t H = (size_t)sl[2], w = (size_t)sl[3];
    float *dst = trace_at_lh(tr, sl[0], t, li, 0);
    if (s->width == (int)w) {
        memcpy(dst, src, H * w * sizeof(float));
        return;
    }
    for (size_t h = 0; h < H; h++) memcpy(dst + h * s->width, src + h * w, w * sizeof(float));
}

int engine_gpu_advance(engine *g, int n, err *e) {
    model *m = g->model;
    const int V = m->c.vocab, layers = m->c.layers;
    if (g->gm_where == ENGINE_GM_CPU_AHEAD) {
        if (model_gpu_upload(g->gm, m, e)) return -1;
        g->gm_where = ENGINE_GM_SYNC;
    }
    int want_core = !(m->rec_skip & MODEL_REC_CORE), want_fam = !(m->rec_skip & MODEL_REC_FAMILY),
        want_state = !(m->rec_skip & MODEL_REC_STATE) && model_gpu_has_snapshot(g->gm);
    /* what the CPU path's layer hook records: k and v whenever anything is, the readback picture
     * where engine_recall_at says so */
    int want_kv = g->probes.mode != ENGINE_PROBES_NONE,
        want_recall = engine_probe_wanted(g, "recall") && model_gpu_has_readback(g->gm);
    /* no lane-wide probe recorded (Kalman's [M, S] a head under the default, or a list without
     * them): they stay on the GPU, megabytes a token */
    int no_lanes = 1;
    for (int li = 0; li < layers; li++) {
        const layer *L = &m->layers[li];
        for (int i = 0; i < L->mx->nprobes; i++)
            if (L->mx->probes[i].width == W_LANES &&
                engine_core_probe_wanted(g, &L->mc, &L->mx->probes[i]))
                no_lanes = 0;
    }
    size_t pf = model_gpu_probe_floats(g->gm), ff = model_gpu_fprobe_floats(g->gm), sf = 0;
    size_t rf = (size_t)layers * own_heads(m) * W;
    for (int li = 0; li < layers; li++) sf += m->layers[li].mx->state_floats(&m->layers[li].mc);
    const int BATCH = model_gpu_max_batch(g->gm);
    float *probes = malloc((size_t)BATCH * (pf ? pf : 1) * sizeof(float));
    float *fprobes = malloc((size_t)BATCH * (ff ? ff : 1) * sizeof(float));
    float *state = want_state ? malloc(sf * sizeof(float)) : NULL;
    /* the readback rows of a batch that records them for some tokens only (k, v and the rows of
     * a batch that records them all go straight into the trace: its tokens lie one after the
     * other) */
    float *rb = want_recall ? malloc((size_t)BATCH * rf * sizeof(float)) : NULL;
    if (!probes || !fprobes || (want_state && !state) || (want_recall && !rb)) {
        free(probes), free(fprobes), free(state), free(rb);
        return err_set(e, "out of memory for the GPU's probes");
    }
    int nfam;
    const probe_def *fam = model_family_probes(m, &nfam);
    /* probe_record's and the family probes' series, looked up once: per layer and probe the
     * series (-1: not recorded), its offset in the layer's probe block, the layer's heads and the
     * floats a head (a hybrid's series are as wide as its widest layer: a narrower layer's row
     * goes head by head) */
    int np = 0;
    for (int li = 0; li < layers; li++)
        np = m->layers[li].mx->nprobes > np ? m->layers[li].mx->nprobes : np;
    int *slot = malloc(((size_t)layers * (np + nfam) + 1) * 4 * sizeof(int));
    if (!slot) {
        free(probes), free(fprobes), free(state), free(rb);
        return err_set(e, "out of memory for the GPU's probes");
    }
    for (int li = 0; li < layers; li++) {
        const layer *L = &m->layers[li];
        /* the family probes are the model's own layers' (a hybrid's attention layers have none) */
        const int own = !model_layer_hybrid_attn(m, L);
        for (int i = 0; i < np + nfam; i++) {
            int *sl = slot + ((size_t)li * (np + nfam) + i) * 4, sx = -1, w = 1;
            if (i < L->mx->nprobes) { /* probe_record's conditions, of what comes back */
                sx = want_core && !(no_lanes && L->mx->probes[i].width == W_LANES)
                         ? trace_find(&g->tr, L->mx->probes[i].name)
                         : -1;
                w = mixer_width_floats(&L->mc, L->mx->probes[i].width);
                sl[1] = (int)mixer_probe_offset(L->mx, &L->mc, i);
            } else if (i >= np && own) {
                sx = want_fam ? trace_find(&g->tr, fam[i - np].name) : -1;
            }
            if (sx >= 0 && (li >= g->tr.series[sx].layers || g->tr.series[sx].heads < L->mc.H ||
                            g->tr.series[sx].width < w))
                sx = -1;
            sl[0] = sx, sl[2] = L->mc.H, sl[3] = w;
        }
    }
    /* the state snapshot holds the state after the last token: the state comes back with the
     * advance's last batch, or after a stop by a download (snap_due) */
    int rc = 0, done = 0, snap_due = 0, failed = 0;
    char bad[ERR_MSG_MAX] = "";
    while (done < n && !rc) {
        int pos = m->pos, nb = n - done < BATCH ? n - done : BATCH;
        if (engine_tick(g, done, n)) {
            rc = err_set(e, "interrupted at token %d", pos);
            break;
        }
        if (g->tr.T != pos) trace_clear(&g->tr);
        while (g->tr.T < pos + nb)
            if (trace_push_token(&g->tr, e) < 0) {
                rc = -1;
                break;
            }
        if (rc) break;
        /* the batch's readback rows: any token of it that engine_recall_at wants (rec), all
         * (rec_all) */
        int rec = 0, rec_all = want_recall, sk = -1, sv = -1, sr = -1, last = done + nb >= n;
        for (int t = 0; want_recall && t < nb; t++) {
            int at = engine_recall_at(g, pos + t);
            rec |= at, rec_all &= at;
        }
        if (want_kv && (add_kv(&g->tr, g, &sk, &sv, e) || refill_window(g, pos, e))) {
            rc = err_prefix(e, "gpu");
            break;
        }
        if (rec && (sr = add_recall(&g->tr, m, e)) < 0) {
            rc = -1;
            break;
        }
        /* k, v, recall: a token's block [layers][H][width] is the trace's, and the series hold
         * their tokens one after the other */
        model_gpu_out out = {.logits = g->logits + (size_t)pos * V,
                             .top = g->top + pos,
                             .topp = g->topp + pos,
                             .probes = probes,
                             .probes_tail = no_lanes,
                             .fprobes = want_fam ? fprobes : NULL,
                             .state = last ? state : NULL,
                             .k = want_kv ? trace_at(&g->tr, sk, pos) : NULL,
                             .v = want_kv ? trace_at(&g->tr, sv, pos) : NULL,
                             .recall = rec_all ? trace_at(&g->tr, sr, pos)
                                       : rec   ? rb
                                               : NULL};
        if (model_gpu_step_ex(g->gm, g->tokens + pos, nb, NULL, &out, e)) {
            rc = err_prefix(e, "gpu");
            failed = 1;
            break;
        }
        g->gm_where = ENGINE_GM_GPU_AHEAD;
        m->pos = pos + nb;
        snap_due = want_state && !last;
        for (int t = 0; t < nb; t++) {
            if (rec && !rec_all && engine_recall_at(g, pos + t))
                memcpy(trace_at(&g->tr, sr, pos + t), rb + (size_t)t * rf, rf * sizeof(float));
            const float *pt = probes + (size_t)t * pf;
            if (!bad[0])
                scan_token(g, pt, NULL, g->logits + (size_t)(pos + t) * V, pos + t, no_lanes, bad,
                           sizeof bad);
            for (int li = 0; li < layers; li++) {
                const layer *L = &m->layers[li];
                const int *sl = slot + (size_t)li * (np + nfam) * 4;
                for (int i = 0; i < L->mx->nprobes; i++, sl += 4) /* probe_record */
                    if (sl[0] >= 0) put_heads(&g->tr, sl, pos + t, li, pt + sl[1]);
                pt += mixer_probe_floats(L->mx, &L->mc);
                sl = slot + ((size_t)li * (np + nfam) + np) * 4;
                for (int i = 0; i < nfam; i++, sl += 4)
                    if (sl[0] >= 0)
                        put_heads(&g->tr, sl, pos + t, li,
                                  fprobes + (size_t)t * ff + ((size_t)li * nfam + i) * L->mc.H);
            }
        }
        if (state && last) {
            const float *st = state;
            for (int li = 0; li < layers; li++) {
                const layer *L = &m->layers[li];
                probe_record_state(&g->tr, L->mx, &L->mc, st, pos + nb - 1, li);
                st += L->mx->state_floats(&L->mc);
            }
        }
        done += nb;
        if (bad[0]) rc = err_set(e, "stopped after token %d: %s", m->pos - 1, bad);
    }
    if (snap_due && !failed) { /* stopped early: the snapshot from the GPU's state */
        err e2 = {{0}};
        if (engine_sync_model(g, &e2) == 0)
            for (int li = 0; li < layers; li++) {
                const layer *L = &m->layers[li];
                probe_record_state(&g->tr, L->mx, &L->mc, L->state, m->pos - 1, li);
            }
        else if (!rc)
            rc = err_set(e, "%s", e2.msg);
    }
    if (!rc) engine_tick(g, n, n);
    free(probes), free(fprobes), free(state), free(rb), free(slot);
    return rc;
}
