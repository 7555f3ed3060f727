/* engine.c: the engine's lifetime, the device, model mode's stepping and recording, and the
 * dispatch of step / run / reset to whichever mode is active (raw mode: engine/raw_run.c). */
#include "engine.h"

#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "../core/parallel.h"
#include "../core/pool.h"
#include "../kernels/gpu.h"
#include "../mixers/record.h"
#include "../models/arith.h"
#include "../models/model.h"
#include "../models/model_gpu.h"
#include "../models/tokenizer.h"
#include "../viz/recall.h"
#include "internal.h"
#include "interv.h"
#include "nonfinite.h"

int engine_init(engine *g, err *e) {
    (void)e;
    memset(g, 0, sizeof *g);
    trace_init(&g->tr);
    g->device = ENGINE_CPU;
    g->recall_cheap = -1;
    return 0;
}

void engine_free(engine *g) {
    engine_iv_free(g);
    engine_raw_free(g);
    engine_free_model(g);
    trace_free(&g->tr);
    memset(g, 0, sizeof *g);
}

/* ---- shared by both modes (internal.h) ---- */

void engine_trace_restart(engine *g) {
    g->gen++;
    trace_free(&g->tr);
    trace_init(&g->tr);
    g->tr_ready = 0;
    g->recall_cheap = -1; /* the cores may have changed */
    engine_recall_free(g);
}

int engine_tick(engine *g, long done, long total) {
    return g->tick ? g->tick(g->tick_ctx, done, total) : 0;
}

/* ---- device ---- */

int engine_set_device(engine *g, int device, err *e) {
    if (device == ENGINE_GPU) {
        char why[200];
        if (!gpu_available(why, sizeof why)) return err_set(e, "device gpu: %s", why);
    } else {
        /* back on the CPU the model continues from the state the GPU reached */
        if (engine_sync_model(g, e)) return err_prefix(e, "device cpu");
        engine_gpu_drop(g);
    }
    /* what is recorded depends on the device (the GPU stepper has no block norms): a trace not
     * yet holding tokens is registered again for the new one */
    if (device != g->device && g->tr.T == 0) engine_trace_restart(g);
    g->device = device;
    return 0;
}

/* ---- threads ---- */

int engine_threads(void) {
    return pool_threads();
}

int engine_set_threads(int n, err *e) {
    if (pool_set_threads(n, e)) return -1;
    par_set_threads(n); /* the fills of model random and loading */
    return 0;
}

/* ---- model mode ---- */

void engine_free_model(engine *g) {
    engine_gpu_drop(g);
    model_free(g->model);
    free(g->tokens), free(g->logits), free(g->top), free(g->topp);
    engine_trace_restart(g);
    g->model = NULL, g->tokens = NULL, g->logits = NULL, g->top = NULL, g->topp = NULL;
    g->ntokens = 0;
}

/* Position 0 with caches sized for the tokens; the trace forgets its tokens; the interventions
 * made at 0 applied again. */
static int rewind_model(engine *g, err *e) {
    g->gen++;
    trace_clear(&g->tr);
    engine_recall_reset(g);
    if (!g->model) return 0;
    int cap = g->ntokens > ENGINE_MIN_MAX_T ? g->ntokens : ENGINE_MIN_MAX_T;
    if (model_reset(g->model, cap, e)) return -1;
    /* a KV cache of another capacity: the GPU copy is made again when next needed */
    if (g->gm && !model_gpu_matches(g->gm, g->model)) engine_gpu_drop(g);
    if (g->gm) g->gm_where = ENGINE_GM_CPU_AHEAD; /* uploaded before the GPU's next step */
    engine_iv_rewind(g);
    return engine_iv_apply_at(g, 0, e);
}

/* Logits, top-1 and its probability for the current tokens and model. */
static int size_outputs(engine *g, err *e) {
    free(g->logits), free(g->top), free(g->topp);
    g->logits = NULL, g->top = NULL, g->topp = NULL;
    if (!g->model || !g->ntokens) return 0;
    size_t n = (size_t)g->ntokens * (size_t)g->model->c.vocab;
    g->logits = malloc(n * sizeof(float));
    g->top = malloc((size_t)g->ntokens * sizeof *g->top);
    g->topp = malloc((size_t)g->ntokens * sizeof *g->topp);
    if (!g->logits || !g->top || !g->topp)
        return err_set(e, "out of memory for the logits of %d tokens (%.1f MiB)", g->ntokens,
                       (double)n * 4 / 1048576.0);
    return 0;
}

int engine_set_model(engine *g, model *m, char *note, size_t note_n, err *e) {
    if (note_n) note[0] = '\0';
    engine_raw_leave(g); /* a model takes over from raw-mixer mode */
    engine_gpu_drop(g);
    engine_iv_free(g); /* edits and snapshots belong to the previous run */
    model_free(g->model);
    g->model = m;
    engine_trace_restart(g);
    if (g->tokens && tok_check(g->tokens, g->ntokens, m->c.vocab, e)) {
        free(g->tokens);
        g->tokens = NULL, g->ntokens = 0;
        if (note_n) snprintf(note, note_n, "tokens cleared: %s", e->msg);
        err_clear(e);
    }
    if (size_outputs(g, e)) return -1;
    return rewind_model(g, e);
}

int engine_set_tokens(engine *g, const int32_t *ids, int n, err *e) {
    if (n < 1) return err_set(e, "no tokens");
    if (g->model && tok_check(ids, n, g->model->c.vocab, e)) return -1;
    int32_t *copy = malloc((size_t)n * sizeof *copy);
    if (!copy) return err_set(e, "out of memory");
    memcpy(copy, ids, (size_t)n * sizeof *copy);
    free(g->tokens);
    g->tokens = copy, g->ntokens = n;
    if (size_outputs(g, e)) return -1;
    return rewind_model(g, e);
}

int engine_model_changed(engine *g, err *e) {
    engine_gpu_drop(g);
    engine_trace_restart(g);
    return rewind_model(g, e);
}

/* argmax and its probability */
static int top1(const float *l, int V, float *p) {
    int b = 0;
    double mx = l[0], z = 0;
    for (int i = 1; i < V; i++)
        if (l[i] > mx) mx = l[i], b = i;
    for (int i = 0; i < V; i++) z += exp((double)l[i] - mx);
    *p = (float)(1.0 / z);
    return b;
}

double engine_mean_nll(const engine *g, int pos) {
    if (!g->model || !g->logits) return NAN;
    int V = g->model->c.vocab;
    double sum = 0;
    for (int t = 0; t + 1 < pos; t++) {
        const float *l = g->logits + (size_t)t * V;
        double mx = l[0], z = 0;
        for (int i = 1; i < V; i++) mx = l[i] > mx ? l[i] : mx;
        for (int i = 0; i < V; i++) z += exp((double)l[i] - mx);
        sum += mx + log(z) - l[g->tokens[t + 1]];
    }
    return pos > 1 ? sum / (pos - 1) : NAN;
}

/* What the recall and KATA views need beyond the probes, and the first-NaN check: called by
 * model_step around each layer's core step. */
typedef struct layer_ctx {
    engine *g;
    err e;
    int failed;
    int want_recall, want_kv;
    diag_nf nf; /* the first NaN / Inf: step and run stop there */
} layer_ctx;

static void before_layer(void *ctx, const model *m, int li, const mixer_tok *in,
                         const float *state) {
    layer_ctx *lc = ctx;
    if (lc->want_recall && engine_recall_at(lc->g, m->pos))
        engine_recall_before(lc->g, li, &m->layers[li].mc, m->layers[li].mx, in, state, m->pos);
}

static void out_layer(void *ctx, const model *m, int li, float *z, int width) {
    layer_ctx *lc = ctx;
    engine_iv_out(lc->g, m, li, z, width);
}

static void after_layer(void *ctx, const model *m, int li, const mixer_tok *in,
                        const float *state) {
    layer_ctx *lc = ctx;
    const layer *L = &m->layers[li];
    engine *g = lc->g;
    diag_nf_scan_layer(&lc->nf, m, li, in, state);
    if (g->lla > 0) probe_record_lla(&g->tr, L->mx, &L->mc, state, in, m->pos, li, g->lla);
    if (lc->failed || !in->in[IN_K] || !in->in[IN_V] || !lc->want_kv) return;
    int recall = lc->want_recall && engine_recall_at(g, m->pos);
    if (engine_record_kv_recall(g, m->c.layers, li, L->mx, &L->mc, in, state, m->pos, recall,
                                &lc->e))
        lc->failed = 1;
}

/* Registers what the selection records for the model's layers. */
static int register_model(engine *g, err *e) {
    model *m = g->model;
    trace *tr = &g->tr;
    int nf, nb;
    const probe_def *fp = model_family_probes(m, &nf), *bp = model_block_probes(&nb);
    unsigned skip = MODEL_REC_ALL;
    for (int li = 0; li < m->c.layers; li++) {
        const layer *L = &m->layers[li];
        if (trace_set_label(tr, li, L->mx->name, e)) return -1;
        for (int i = 0; i < L->mx->nprobes; i++) {
            const probe_def *p = &L->mx->probes[i];
            if (!engine_core_probe_wanted(g, &L->mc, p)) continue;
            skip &= ~(unsigned)MODEL_REC_CORE;
            if (trace_add_series(tr, p->name, p->meaning, L->mx->name, m->c.layers, L->mc.H,
                                 mixer_width_floats(&L->mc, p->width), e) < 0)
                return err_prefix(e, "layer %d (%s)", li, L->mx->name);
        }
        if (engine_probe_wanted(g, "state")) {
            skip &= ~(unsigned)MODEL_REC_STATE;
            if (probe_register_state(tr, L->mx, &L->mc, m->c.layers, e))
                return err_prefix(e, "layer %d (%s)", li, L->mx->name);
        }
        if (engine_probe_wanted(g, "attn")) {
            skip &= ~(unsigned)MODEL_REC_ATTN;
            if (probe_register_attn(tr, L->mx, &L->mc, m->c.layers, e))
                return err_prefix(e, "layer %d (%s)", li, L->mx->name);
        }
        for (int i = 0; i < nf; i++) {
            if (!engine_probe_wanted(g, fp[i].name)) continue;
            skip &= ~(unsigned)MODEL_REC_FAMILY;
            if (trace_add_series(tr, fp[i].name, fp[i].meaning, "model", m->c.layers, L->mc.H, 1,
                                 e) < 0)
                return -1;
        }
        if (g->lla > 0 && probe_register_lla(tr, L->mx, &L->mc, m->c.layers, e)) return -1;
    }
    /* the blocks' norms: model_step's alone (the GPU-resident stepper does not compute them) */
    int resident = g->device == ENGINE_GPU && engine_gpu_usable(g);
    for (int i = 0; !resident && i < nb; i++) {
        if (!engine_probe_wanted(g, bp[i].name)) continue;
        skip &= ~(unsigned)MODEL_REC_FAMILY;
        if (trace_add_series(tr, bp[i].name, bp[i].meaning, "model", m->c.layers, 1, 1, e) < 0)
            return -1;
    }
    m->rec_skip = skip;
    return 0;
}

/* One token on the CPU (model_step): device cpu, or a model the resident stepper does not
 * cover. */
static int step_one_cpu(engine *g, int want_kv, int want_recall, err *e) {
    model *m = g->model;
    int V = m->c.vocab, pos = m->pos;
    float *lg = g->logits + (size_t)pos * V;
    /* Token by token, a core on the GPU costs its state (or KV cache) up and down and a dozen
     * launches and copies a layer: slower than the CPU. Models the resident stepper does not
     * cover step here; `run prefill` still runs on the GPU. */
    m->gpu = 0;
    layer_ctx lc = {.g = g, .want_recall = want_recall, .want_kv = want_kv};
    diag_nf_clear(&lc.nf);
    m->layer_hook = after_layer, m->layer_pre_hook = before_layer, m->layer_hook_ctx = &lc;
    m->out_hook = out_layer;
    int r = model_step(m, g->tokens[pos], lg, &g->tr, e);
    m->layer_hook = NULL, m->layer_pre_hook = NULL, m->layer_hook_ctx = NULL, m->out_hook = NULL;
    if (r) return -1;
    if (lc.failed) return err_set(e, "%s", lc.e.msg);
    g->top[pos] = top1(lg, V, &g->topp[pos]);
    if (diag_nf_scan_end(&lc.nf, m, lg)) {
        char b[ERR_MSG_MAX];
        return err_set(e, "stopped after token %d: %s", pos, diag_nf_message(&lc.nf, b, sizeof b));
    }
    return 0;
}

/* Steps n tokens of the model recording the selection. */
static int model_advance(engine *g, int n, err *e) {
    model *m = g->model;
    if (!g->tr_ready) {
        if (register_model(g, e)) return -1;
        g->tr_ready = 1;
    }
    int want_kv = g->probes.mode != ENGINE_PROBES_NONE;
    int want_recall = engine_probe_wanted(g, "recall");
    /* ablations act inside model_step, on the CPU */
    if (g->device == ENGINE_GPU && !engine_iv_ablating(g) && engine_gpu_usable(g))
        return engine_gpu_advance(g, n, e);
    /* the CPU steps from the newest state: the GPU's, when it stepped last (an ablation moved
     * stepping here), and the GPU takes the CPU's up before it steps again */
    if (engine_sync_model(g, e)) return -1;
    if (g->gm) g->gm_where = ENGINE_GM_CPU_AHEAD;
    for (int i = 0; i < n; i++) {
        int pos = m->pos;
        if (engine_tick(g, i, n)) return err_set(e, "interrupted at token %d", pos);
        if (g->tr.T != pos) trace_clear(&g->tr); /* keep the trace aligned with the model */
        while (g->tr.T < pos)
            if (trace_push_token(&g->tr, e) < 0) return -1;
        if (trace_push_token(&g->tr, e) < 0) return -1;
        if (step_one_cpu(g, want_kv, want_recall, e)) return -1;
    }
    engine_tick(g, n, n);
    return 0;
}

/* ---- both modes ---- */

int engine_pos(const engine *g) {
    if (engine_raw_active(g)) return g->raw->pos;
    return g->model ? g->model->pos : 0;
}

int engine_len(const engine *g) {
    if (engine_raw_active(g)) return g->raw->st.T;
    return g->model ? g->ntokens : 0;
}

static int need_tokens(const engine *g, err *e) {
    if (!g->model) return err_set(e, "no model (load PATH or model random MIXER first)");
    if (!g->tokens) return err_set(e, "no tokens (tokens FILE or prompt TEXT first)");
    return 0;
}

/* n tokens (n <= what is left) in segments that end where an edit or restore waits: each is
 * applied as the run reaches its position (engine/interv.h). prefill: the model's parallel
 * forms. */
static int advance(engine *g, int n, int prefill, err *e);

int engine_step(engine *g, int n, err *e) {
    if (engine_raw_active(g)) {
        raw_mode *r = g->raw;
        if (r->st.T && r->pos >= r->st.T)
            return err_set(e, "all %d tokens have run (reset to start again)", r->st.T);
        if (!r->st.T) return engine_raw_advance(g, n, e); /* says what is missing */
        int left = r->st.T - r->pos;
        return advance(g, n > left ? left : n, 0, e);
    }
    if (need_tokens(g, e)) return -1;
    int left = g->ntokens - g->model->pos;
    if (left <= 0) return err_set(e, "all %d tokens have run (reset to start again)", g->ntokens);
    return advance(g, n > left ? left : n, 0, e);
}

int engine_run(engine *g, int prefill, err *e) {
    if (engine_raw_active(g)) {
        if (prefill)
            return err_set(e, "run: raw-mixer mode steps every token (prefill is for models)");
        raw_mode *r = g->raw;
        if (r->st.T && r->pos >= r->st.T)
            return err_set(e, "all %d tokens have run (reset to start again)", r->st.T);
        if (!r->st.T) return engine_raw_advance(g, 1, e); /* says what is missing */
        return advance(g, r->st.T - r->pos, 0, e);
    }
    if (need_tokens(g, e)) return -1;
    int left = g->ntokens - g->model->pos;
    if (left <= 0) return err_set(e, "all %d tokens have run (reset to start again)", g->ntokens);
    if (prefill && engine_iv_ablating(g))
        return err_set(e, "run prefill: ablations act on the step path (run, or edits clear)");
    return advance(g, left, prefill, e);
}

static int prefill_model(engine *g, int n, err *e) {
    model *m = g->model;
    int from = m->pos, left = n;
    if (engine_sync_model(g, e)) return -1;
    m->gpu = g->device == ENGINE_GPU;
    if (model_prefill(m, g->tokens + from, left, g->logits + (size_t)from * m->c.vocab, e))
        return -1;
    for (int t = from; t < m->pos; t++)
        g->top[t] = top1(g->logits + (size_t)t * m->c.vocab, m->c.vocab, &g->topp[t]);
    if (g->gm) g->gm_where = ENGINE_GM_CPU_AHEAD; /* the GPU takes the prefilled state next */
    return 0;
}

int engine_set_stop_on(engine *g, const char *spec, err *e) {
    struct engine_stop st[ENGINE_MAX_STOP];
    int n = 0;
    char buf[256];
    if (strlen(spec) >= sizeof buf) return err_set(e, "stop-on: too long");
    snprintf(buf, sizeof buf, "%s", spec);
    if (strcmp(buf, "none") && strcmp(buf, "off") && buf[0]) {
        for (char *save = NULL, *w = strtok_r(buf, ",", &save); w; w = strtok_r(NULL, ",", &save)) {
            if (n == ENGINE_MAX_STOP) return err_set(e, "stop-on: at most %d conditions", n);
            struct engine_stop *c = &st[n];
            memset(c, 0, sizeof *c);
            if (!strcmp(w, "nonfinite")) {
                c->op = 'n', n++;
                continue;
            }
            char *op = strpbrk(w, "<>");
            if (!op || op == w || (size_t)(op - w) >= sizeof c->name)
                return err_set(e,
                               "stop-on: '%.40s': nonfinite, NAME>X or NAME<X (NAME a recorded "
                               "probe such as state_norm, beta, rho)",
                               w);
            char *end;
            c->op = *op;
            c->x = strtod(op + 1, &end);
            if (end == op + 1 || *end || !isfinite(c->x))
                return err_set(e, "stop-on: '%.40s': expected a number after %c", w, *op);
            memcpy(c->name, w, (size_t)(op - w));
            n++;
        }
    }
    memcpy(g->stop, st, sizeof st);
    g->nstop = n;
    snprintf(g->stop_spec, sizeof g->stop_spec, "%s", n ? spec : "none");
    return 0;
}

static int stop_nonfinite(const engine *g) {
    for (int i = 0; i < g->nstop; i++)
        if (g->stop[i].op == 'n') return 1;
    return 0;
}

static int stop_thresholds(const engine *g) {
    for (int i = 0; i < g->nstop; i++)
        if (g->stop[i].op != 'n') return 1;
    return 0;
}

/* The conditions on token t's row of the trace: 1 (g->stopped says where) when one is met. */
static int stop_check(engine *g, int t, err *e) {
    const trace *tr = &g->tr;
    for (int i = 0; i < g->nstop; i++) {
        const struct engine_stop *c = &g->stop[i];
        if (c->op == 'n') continue;
        int s = trace_find(tr, c->name);
        if (s < 0)
            return err_set(e,
                           "stop-on %s: not recorded (a probe of the loaded cores? set probes "
                           "all, or add it to set probes)",
                           c->name);
        const trace_series *ts = &tr->series[s];
        if (t < 0 || t >= tr->T) continue;
        for (int l = 0; l < ts->layers; l++)
            for (int h = 0; h < ts->heads; h++) {
                const float *v = trace_at_lh(tr, s, t, l, h);
                for (int w = 0; w < ts->width; w++) {
                    double x = v[w];
                    if (!(c->op == '>' ? x > c->x : x < c->x)) continue;
                    g->stop_token = t, g->stop_layer = l, g->stop_head = h;
                    snprintf(g->stopped, sizeof g->stopped,
                             "stopped after token %d: layer %d head %d %s %.6g %c %g", t, l, h,
                             c->name, x, c->op, c->x);
                    return 1;
                }
            }
    }
    return 0;
}

static int advance(engine *g, int n, int prefill, err *e) {
    int end = engine_pos(g) + n;
    trace_reserve(&g->tr, g->tr.T + n); /* the run's length is known: one allocation */
    int watch = stop_thresholds(g) && !prefill;
    g->stopped[0] = '\0';
    while (engine_pos(g) < end) {
        int pos = engine_pos(g), stop = engine_iv_next_pos(g, pos);
        if (stop > end) stop = end;
        if (watch) stop = pos + 1; /* a token at a time: the stop is exact on every device */
        int rc = engine_raw_active(g) ? engine_raw_advance(g, stop - pos, e)
                 : prefill            ? prefill_model(g, stop - pos, e)
                                      : model_advance(g, stop - pos, e);
        if (rc && stop_nonfinite(g) && !strncmp(e->msg, "stopped after token ", 20)) {
            /* the first NaN / Inf, named by the step: a stop asked for, not an error */
            snprintf(g->stopped, sizeof g->stopped, "%s", e->msg);
            g->stop_token = engine_pos(g) - 1, g->stop_layer = g->stop_head = -1;
            sscanf(strstr(e->msg, "layer ") ? strstr(e->msg, "layer ") : "", "layer %d",
                   &g->stop_layer);
            err_clear(e);
            return 0;
        }
        if (rc) return -1;
        if (engine_pos(g) != stop) return 0; /* stopped early without an error: nothing to do */
        if (watch) {
            int hit = stop_check(g, stop - 1, e);
            if (hit < 0) return -1;
            if (hit) return 0;
        }
        if (engine_iv_apply_at(g, stop, e)) return err_prefix(e, "at position %d", stop);
    }
    if (engine_iv_count(g)) engine_iv_publish(g); /* a new trace (schema) lost it */
    return 0;
}

int engine_reset(engine *g, err *e) {
    if (engine_raw_active(g)) return engine_raw_reset(g, e);
    if (!g->model) return err_set(e, "no model (load PATH or model random MIXER first)");
    return rewind_model(g, e);
}
