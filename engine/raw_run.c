/* raw_run.c: raw-mixer mode. The lanes (scenes/raw.h), their stream, and stepping them token by
 * token into the trace (lane l = layer l), with the selection of engine/probes.c. */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "../kernels/gpu.h"
#include "../kernels/gpu_lanes.h"
#include "../mixers/record.h"
#include "../viz/recall.h"
#include "internal.h"
#include "nonfinite.h"

static void glanes_free(raw_mode *r);

static void lanes_free(raw_mode *r) {
    glanes_free(r);
    for (int i = 0; i < r->nl; i++) raw_lane_free(&r->lane[i]);
    r->nl = 0;
}

void engine_raw_free(engine *g) {
    if (!g->raw) return;
    lanes_free(g->raw);
    stream_free(&g->raw->st);
    free(g->raw->scratch);
    free(g->raw);
    g->raw = NULL;
}

int engine_raw_active(const engine *g) {
    return g->raw && g->raw->on && g->raw->nl > 0;
}

void engine_raw_leave(engine *g) {
    if (!engine_raw_active(g)) return;
    glanes_free(g->raw); /* the host holds their state: the GPU's memory goes to the model */
    g->raw->on = 0;
    engine_trace_restart(g);
}

/* (Re)builds every lane for dims H, dk, dv; all or nothing. */
static int lanes_build(engine *g, raw_mode *r, char specs[][64], int nl, const char *shared, int H,
                       int dk, int dv, err *e) {
    raw_lane nw[RAW_MAX_LANES];
    int max_t = r->st.T > ENGINE_MIN_MAX_T ? r->st.T : ENGINE_MIN_MAX_T;
    for (int i = 0; i < nl; i++)
        if (raw_lane_build(&nw[i], specs[i], shared, H, dk, dv, max_t, g->chunk, e)) {
            for (int j = 0; j < i; j++) raw_lane_free(&nw[j]);
            return -1;
        }
    float *scratch = malloc(raw_scratch_floats(H, dk, dv) * sizeof *scratch);
    if (!scratch) {
        for (int j = 0; j < nl; j++) raw_lane_free(&nw[j]);
        return err_set(e, "out of memory");
    }
    lanes_free(r);
    free(r->scratch);
    r->scratch = scratch;
    for (int i = 0; i < nl; i++) {
        r->lane[i] = nw[i];
        if (specs != r->specs) snprintf(r->specs[i], sizeof r->specs[i], "%s", specs[i]);
    }
    r->nl = nl;
    if (shared != r->shared) snprintf(r->shared, sizeof r->shared, "%s", shared);
    r->H = H, r->dk = dk, r->dv = dv, r->pos = 0;
    return 0;
}

int engine_raw_select(engine *g, char specs[][64], int nl, const char *shared, int H, int dk,
                      int dv, err *e) {
    if (H > ENGINE_RAW_MAX_HEADS)
        return err_set(e, "heads=%d: at most %d in raw-mixer mode", H, ENGINE_RAW_MAX_HEADS);
    if (!g->raw && !(g->raw = calloc(1, sizeof *g->raw))) return err_set(e, "out of memory");
    raw_mode *r = g->raw;
    /* a stream of other dimensions cannot feed the new lanes */
    if (r->st.T && (r->st.H != H || r->st.dk != dk || r->st.dv != dv)) stream_free(&r->st);
    if (lanes_build(g, r, specs, nl, shared, H, dk, dv, e)) return -1;
    r->on = 1;
    engine_iv_free(g); /* edits and snapshots belong to the previous lanes */
    engine_trace_restart(g);
    return 0;
}

int engine_raw_stream(engine *g, raw_stream *st, err *e) {
    raw_mode *r = g->raw;
    if (!engine_raw_active(g)) {
        stream_free(st);
        return err_set(e, "no mixer (mixer NAME dk= dv= first)");
    }
    if (st->H > ENGINE_RAW_MAX_HEADS) {
        stream_free(st);
        return err_set(e, "heads=%d: at most %d in raw-mixer mode", st->H, ENGINE_RAW_MAX_HEADS);
    }
    raw_stream old = r->st;
    r->st = *st;
    /* the lanes again: new dimensions, or a KV cache sized for the stream */
    if (lanes_build(g, r, r->specs, r->nl, r->shared, st->H, st->dk, st->dv, e)) {
        r->st = old;
        stream_free(st);
        return -1;
    }
    stream_free(&old);
    memset(st, 0, sizeof *st);
    engine_trace_restart(g);
    return 0;
}

/* ---- recording ---- */

/* Registers the series a run of these lanes records under the selection (sel: NULL records
 * everything). Probes whose name another lane already registered with another width are skipped
 * for that lane (their values stay NaN). */
static int raw_register(const engine *sel, trace *tr, raw_lane *lanes, int nl, err *e) {
    for (int l = 0; l < nl; l++) {
        const raw_lane *L = &lanes[l];
        if (trace_set_label(tr, l, L->label, e)) return -1;
        for (int i = 0; i < L->m->nprobes; i++) {
            const probe_def *p = &L->m->probes[i];
            if (sel && !engine_core_probe_wanted(sel, &L->c, p)) continue;
            int w = mixer_width_floats(&L->c, p->width), k = trace_find(tr, p->name);
            if (k >= 0 && tr->series[k].width != w) continue; /* another lane's shape wins */
            if (trace_add_series(tr, p->name, p->meaning, L->m->name, nl, L->c.H, w, e) < 0)
                return -1;
        }
        if (!sel || engine_probe_wanted(sel, "state")) {
            state_part parts[MIXER_MAX_STATE_PARTS];
            int np = L->m->state_parts ? L->m->state_parts(&L->c, parts) : 0, snap = -1;
            for (int i = 0; i < np && snap < 0; i++)
                if (parts[i].ndim == 3 && parts[i].shape[0] == L->c.H) snap = i;
            int k = trace_find_snapshot(tr, "state");
            if (snap >= 0 && (k < 0 || (tr->snaps[k].rows == parts[snap].shape[1] &&
                                        tr->snaps[k].cols == parts[snap].shape[2])))
                if (probe_register_state(tr, L->m, &L->c, nl, e)) return -1;
        }
        if ((!sel || engine_probe_wanted(sel, "attn")) &&
            probe_register_attn(tr, L->m, &L->c, nl, e))
            return -1;
    }
    int H = nl ? lanes[0].c.H : 1;
    if (trace_add_series(tr, "recall_err", "|o - v*| / |v*| on query tokens (v* the right answer)",
                         "stream", nl, H, 1, e) < 0 ||
        trace_add_series(tr, "key_norm", "|k| of the stream's key at this token", "stream", nl, H,
                         1, e) < 0 ||
        trace_add_series(tr, "out_norm", "|o|, the mixer's output", "stream", nl, H, 1, e) < 0)
        return -1;
    return 0;
}

static void put(trace *tr, const char *name, int64_t t, int l, const float *v, int H) {
    int k = trace_find(tr, name);
    if (k < 0 || l >= tr->series[k].layers || tr->series[k].heads != H) return;
    memcpy(trace_at_lh(tr, k, t, l, 0), v, (size_t)H * sizeof *v);
}

/* Token t (already pushed into tr) through every lane, recorded. g: the session's engine (its
 * recall trackers and selection), or NULL (compare's own runs: everything, the readback direct).
 * nf (may be NULL) gets the first non-finite quantity of the lanes (layer = lane). */
static int record_token(engine *g, trace *tr, raw_lane *lanes, int nl, const raw_stream *st, int t,
                        float *scratch, diag_nf *nf, err *e) {
    const int H = st->H, dk = st->dk, dv = st->dv;
    int core = 1, kv = 1, recall = t < ENGINE_RECALL_MAX_TOKENS;
    if (g) {
        kv = g->probes.mode != ENGINE_PROBES_NONE;
        recall = engine_recall_at(g, t);
    }
    for (int l = 0; l < nl; l++) {
        raw_lane *L = &lanes[l];
        mixer_tok x;
        raw_lane_inputs(L, st, t, scratch, &x);
        int want_core = core;
        if (g) {
            want_core = 0;
            for (int i = 0; i < L->m->nprobes && !want_core; i++)
                want_core = engine_core_probe_wanted(g, &L->c, &L->m->probes[i]);
        }
        if (g && recall && L->keymajor) engine_recall_before(g, l, &L->c, L->m, &x, L->state, t);
        mixer_step_par(L->m, &L->c, L->state, &x, t, L->o, want_core ? L->probes : NULL);
        if (nf)
            diag_nf_scan_core(nf, L->m, &L->c, &x, L->state, L->o, want_core ? L->probes : NULL, t,
                              l);
        if (want_core) probe_record(tr, L->m, &L->c, L->probes, t, l);
        probe_record_state(tr, L->m, &L->c, L->state, t, l); /* no-ops when not registered */
        probe_record_attn(tr, L->m, &L->c, L->state, &x, t, l);
        if (kv) {
            int rc;
            if (g) {
                rc = engine_record_kv_recall(g, nl, l, L->m, &L->c, &x, L->state, t,
                                             recall && L->keymajor, e);
            } else {
                rc = L->keymajor && recall
                         ? recall_record(tr, nl, l, H, dk, dv, x.in[IN_K], x.in[IN_V], L->state, t,
                                         e)
                         : recall_record_kv(tr, nl, l, H, dk, dv, x.in[IN_K], x.in[IN_V], t, e);
            }
            if (rc) return -1;
        }
        float re[ENGINE_RAW_MAX_HEADS], kn[ENGINE_RAW_MAX_HEADS], on[ENGINE_RAW_MAX_HEADS];
        for (int h = 0; h < H && h < ENGINE_RAW_MAX_HEADS; h++) {
            re[h] = raw_recall_error(L, st, t, h);
            kn[h] = st->knorm[(size_t)t * H + h];
            double n = 0;
            for (int i = 0; i < dv; i++) n += (double)L->o[h * dv + i] * L->o[h * dv + i];
            on[h] = (float)sqrt(n);
        }
        put(tr, "recall_err", t, l, re, H);
        put(tr, "key_norm", t, l, kn, H);
        put(tr, "out_norm", t, l, on, H);
    }
    return 0;
}

int engine_raw_run_all(engine *g, trace *tr, raw_lane *lanes, int nl, const raw_stream *st,
                       err *e) {
    for (int l = 0; l < nl; l++) raw_lane_reset(&lanes[l]);
    if (raw_register(NULL, tr, lanes, nl, e)) return -1;
    float *scratch = malloc(raw_scratch_floats(st->H, st->dk, st->dv) * sizeof *scratch);
    if (!scratch) return err_set(e, "out of memory");
    int rc = 0;
    for (int t = 0; t < st->T && !rc; t++) {
        if (engine_tick(g, t, st->T)) {
            rc = err_set(e, "interrupted at token %d", t);
            break;
        }
        if (trace_push_token(tr, e) < 0 ||
            record_token(NULL, tr, lanes, nl, st, t, scratch, NULL, e))
            rc = -1;
    }
    if (!rc) engine_tick(g, st->T, st->T);
    free(scratch);
    return rc;
}

/* ---- device gpu: the lanes' steps on the GPU, a batch of tokens a call ----
 *
 * Each lane's state (or KV cache) stays on the GPU between batches and calls
 * (kernels/gpu_lanes.h): a batch moves its tokens' inputs up and their outputs and probes down,
 * nothing else. The host copy of the state (what views, `device cpu`, reset and the "state"
 * snapshot read) is brought up to date at the end of every advance (a KV cache: the slots written
 * since); after the host changed it (reset, CPU steps) it is uploaded before the next GPU step. */

#define RAW_GPU_BATCH 64

static void glanes_free(raw_mode *r) {
    for (int l = 0; l < RAW_MAX_LANES; l++) {
        gpu_lane_free(r->glane[l]);
        r->glane[l] = NULL;
    }
    r->gl_valid = 0;
}

/* 1 when every lane's core has GPU step kernels (kernels/gpu.h). */
static int lanes_on_gpu(const engine *g) {
    if (g->device != ENGINE_GPU) return 0;
    for (int l = 0; l < g->raw->nl; l++)
        if (!gpu_mixer_supported(g->raw->lane[l].m, GPU_STEP)) return 0;
    return 1;
}

/* Every lane resident on the GPU with the host's state: made on first use, uploaded when the host
 * changed the state since. */
static int glanes_ready(raw_mode *r, err *e) {
    for (int l = 0; l < r->nl; l++) {
        raw_lane *L = &r->lane[l];
        int rc = r->glane[l] ? !r->gl_valid && gpu_lane_upload(r->glane[l], L->state, e)
                             : gpu_lane_init(&r->glane[l], L->m, &L->c, L->state, RAW_GPU_BATCH, e);
        if (rc) {
            glanes_free(r);
            return err_prefix(e, "lane %s on the gpu", L->label);
        }
    }
    r->gl_valid = 1;
    return 0;
}

/* The host states brought up to date. On a failure the lanes go back to position 0 (the host
 * state would not match the position). */
static int glanes_sync(engine *g, err *e) {
    raw_mode *r = g->raw;
    for (int l = 0; l < r->nl; l++)
        if (r->glane[l] && gpu_lane_sync(r->glane[l], r->lane[l].state, e)) {
            glanes_free(r);
            for (int j = 0; j < r->nl; j++) raw_lane_reset(&r->lane[j]);
            r->pos = 0;
            trace_clear(&g->tr);
            engine_recall_reset(g);
            return err_prefix(e, "lane %s: the state back from the gpu (the lanes are reset)",
                              r->lane[l].label);
        }
    return 0;
}

/* The lane's batch begun on the GPU (the host records while it steps), and ended. */
static int lane_begin(gpu_lane *gl, const mixer_seq *x, int pos0, float *o, float *p, err *e) {
    (void)o;
    return gpu_lane_begin(gl, x, pos0, p != NULL, e);
}

static int lane_end(gpu_lane *gl, float *o, float *p, err *e) {
    return gpu_lane_end(gl, o, p, e);
}

/* One lane's share of an advance on the GPU: its batch's inputs, outputs and probes, and the
 * trace series it writes (found once per advance; -1: not recorded, as put / probe_record skip
 * a series that is missing or of another shape). */
typedef struct glane_run {
    int want_core;        /* probes computed and recorded */
    size_t np;            /* probe floats a token */
    size_t w[IN_COUNT];   /* floats a token of each input the core reads (0: none) */
    float *in[IN_COUNT];  /* [batch, w]: an input not laid out in the stream, gathered */
    mixer_seq seq;        /* the batch's inputs: into the stream, or in[] */
    float *obuf, *pbuf;   /* [batch, H, dv], [batch, np] */
    int *ps;              /* [nprobes]: the probe's series */
    size_t *poff;         /* [nprobes]: its offset in a token's probes */
    int s_re, s_kn, s_on; /* recall_err, key_norm, out_norm */
    int inputs_finite;    /* the batch's inputs hold no NaN / Inf */
} glane_run;

static void glane_runs_free(glane_run *lr, int nl) {
    for (int l = 0; lr && l < nl; l++) {
        for (int i = 0; i < IN_COUNT; i++) free(lr[l].in[i]);
        free(lr[l].obuf), free(lr[l].pbuf), free(lr[l].ps), free(lr[l].poff);
    }
    free(lr);
}

/* Series `name` if it takes lane l's [H] values (put's test), else -1. */
static int series_lh(const trace *tr, const char *name, int l, int H) {
    int k = trace_find(tr, name);
    return k < 0 || l >= tr->series[k].layers || tr->series[k].heads != H ? -1 : k;
}

/* Each lane's buffers and series for an advance. */
static glane_run *glane_runs_make(engine *g, err *e) {
    raw_mode *r = g->raw;
    const int H = r->H;
    glane_run *lr = calloc((size_t)r->nl, sizeof *lr);
    if (!lr) {
        err_set(e, "out of memory for a gpu batch");
        return NULL;
    }
    for (int l = 0; l < r->nl; l++) {
        glane_run *R = &lr[l];
        const raw_lane *L = &r->lane[l];
        const mixer_ops *m = L->m;
        for (int i = 0; i < m->nprobes && !R->want_core; i++)
            R->want_core = engine_core_probe_wanted(g, &L->c, &m->probes[i]);
        R->np = mixer_probe_floats(m, &L->c);
        for (int i = 0; i < m->ninputs; i++) {
            const mixer_input w = m->inputs[i].which;
            R->w[w] = (size_t)mixer_input_floats(&L->c, w) * H;
        }
        R->obuf = malloc((size_t)RAW_GPU_BATCH * H * r->dv * sizeof(float));
        R->pbuf = R->want_core ? malloc((size_t)RAW_GPU_BATCH * R->np * sizeof(float)) : NULL;
        R->ps = malloc(((size_t)m->nprobes + 1) * sizeof *R->ps);
        R->poff = malloc(((size_t)m->nprobes + 1) * sizeof *R->poff);
        if (!R->obuf || (R->want_core && !R->pbuf) || !R->ps || !R->poff) {
            glane_runs_free(lr, r->nl);
            err_set(e, "out of memory for a gpu batch");
            return NULL;
        }
        const trace *tr = &g->tr;
        for (int i = 0; i < m->nprobes; i++) { /* probe_record's tests */
            int s = trace_find(tr, m->probes[i].name);
            if (s >= 0 && (l >= tr->series[s].layers || L->c.H != tr->series[s].heads ||
                           mixer_width_floats(&L->c, m->probes[i].width) != tr->series[s].width))
                s = -1;
            R->ps[i] = s;
            R->poff[i] = mixer_probe_offset(m, &L->c, i);
        }
        R->s_re = series_lh(tr, "recall_err", l, H);
        R->s_kn = series_lh(tr, "key_norm", l, H);
        R->s_on = series_lh(tr, "out_norm", l, H);
    }
    return lr;
}

/* 1 when x[n] holds no NaN nor Inf: one branch-free pass (an exponent of all ones carries into
 * the sign bit when one is added to it). */
static int all_finite(const float *x, size_t n) {
    uint32_t acc = 0;
    for (size_t i = 0; i < n; i++) {
        uint32_t b;
        memcpy(&b, x + i, sizeof b);
        acc |= (b & 0x7f800000u) + 0x00800000u;
    }
    return !(acc & 0x80000000u);
}

/* Lane l's inputs for tokens [t0, t0 + nb) into R->seq: an input that the stream holds token
 * after token (q, k, v) is read in place, the others (gates, zeroed keys, ...) are gathered into
 * R->in. The first token's is kept in R->in in any case: raw_lane_inputs reuses its scratch. */
static int gather_inputs(raw_mode *r, int l, glane_run *R, int t0, int nb, err *e) {
    const raw_lane *L = &r->lane[l];
    const float *base[IN_COUNT] = {0};
    int direct[IN_COUNT];
    memset(&R->seq, 0, sizeof R->seq);
    R->seq.T = nb;
    for (int i = 0; i < IN_COUNT; i++) {
        direct[i] = 1;
        if (R->w[i] && !R->in[i] &&
            !(R->in[i] = malloc((size_t)RAW_GPU_BATCH * R->w[i] * sizeof(float))))
            return err_set(e, "out of memory for a gpu batch");
    }
    for (int t = 0; t < nb; t++) {
        mixer_tok x;
        raw_lane_inputs(L, &r->st, t0 + t, r->scratch, &x);
        for (int i = 0; i < IN_COUNT; i++) {
            const size_t w = R->w[i];
            if (!x.in[i] || !w) continue;
            if (t == 0) {
                base[i] = x.in[i];
                memcpy(R->in[i], x.in[i], w * sizeof(float));
                continue;
            }
            if (direct[i] && x.in[i] == base[i] + (size_t)t * w) continue;
            if (direct[i]) { /* tokens 1 .. t - 1 were in place: gathered too */
                memcpy(R->in[i] + w, base[i] + w, (size_t)(t - 1) * w * sizeof(float));
                direct[i] = 0;
            }
            memcpy(R->in[i] + (size_t)t * w, x.in[i], w * sizeof(float));
        }
    }
    for (int i = 0; i < IN_COUNT; i++)
        if (base[i]) R->seq.in[i] = direct[i] && nb > 1 ? base[i] : R->in[i];
    return 0;
}

/* What lane l records of tokens [t0, t0 + nb) from its inputs alone (while the GPU steps them):
 * the keys and values, the key norms, and whether the inputs are finite. */
static int record_inputs(engine *g, int l, glane_run *R, int t0, int nb, err *e) {
    raw_mode *r = g->raw;
    const raw_lane *L = &r->lane[l];
    const raw_stream *st = &r->st;
    const int H = st->H, dk = st->dk, dv = st->dv;
    int kv = g->probes.mode != ENGINE_PROBES_NONE;
    for (int t = 0; t < nb; t++) {
        int tt = t0 + t;
        mixer_tok x = mixer_seq_at(&L->c, &R->seq, t);
        if (kv && recall_record_kv(&g->tr, r->nl, l, H, dk, dv, x.in[IN_K], x.in[IN_V], tt, e))
            return -1;
        if (R->s_kn >= 0)
            memcpy(trace_at_lh(&g->tr, R->s_kn, tt, l, 0), st->knorm + (size_t)tt * H,
                   (size_t)H * sizeof(float));
    }
    R->inputs_finite = 1;
    for (int i = 0; i < L->m->ninputs && R->inputs_finite; i++) {
        const int w = L->m->inputs[i].which;
        int seen = 0; /* the same array as an input before (q = k) */
        for (int j = 0; j < i && !seen; j++)
            seen = R->seq.in[L->m->inputs[j].which] == R->seq.in[w] &&
                   R->w[L->m->inputs[j].which] == R->w[w];
        if (R->seq.in[w] && !seen)
            R->inputs_finite = all_finite(R->seq.in[w], (size_t)nb * R->w[w]);
    }
    return 0;
}

/* What lane l records of tokens [t0, t0 + nb) from the outputs and probes the GPU gave back:
 * each token as the CPU path records it. The state is not on the host here: the first-NaN scan
 * reads the inputs and outputs (the state is scanned once at the end of the advance); the
 * readback picture is not recorded on this path (it needs every token's state). */
static void record_outputs(engine *g, int l, glane_run *R, int t0, int nb, diag_nf *nf) {
    raw_mode *r = g->raw;
    raw_lane *L = &r->lane[l];
    const raw_stream *st = &r->st;
    const int H = st->H, dv = st->dv;
    const size_t sv = (size_t)H * dv;
    raw_lane at = *L; /* raw_recall_error reads the output at at.o */
    trace *tr = &g->tr;
    for (int t = 0; t < nb; t++) {
        int tt = t0 + t;
        const float *o = R->obuf + (size_t)t * sv;
        if (R->want_core) {
            const float *pt = R->pbuf + (size_t)t * R->np;
            for (int i = 0; i < L->m->nprobes; i++)
                if (R->ps[i] >= 0)
                    memcpy(trace_at_lh(tr, R->ps[i], tt, l, 0), pt + R->poff[i],
                           (size_t)tr->series[R->ps[i]].heads * tr->series[R->ps[i]].width *
                               sizeof(float));
        }
        if (R->s_re >= 0) {
            float *re = trace_at_lh(tr, R->s_re, tt, l, 0);
            at.o = (float *)o;
            for (int h = 0; h < H; h++) re[h] = raw_recall_error(&at, st, tt, h);
        }
        if (R->s_on >= 0) { /* |o| per head: each head's squares summed in order, in double */
            double s2[ENGINE_RAW_MAX_HEADS] = {0};
            for (int i = 0; i < dv; i++)
                for (int h = 0; h < H; h++)
                    s2[h] += (double)o[(size_t)h * dv + i] * o[(size_t)h * dv + i];
            float *on = trace_at_lh(tr, R->s_on, tt, l, 0);
            for (int h = 0; h < H; h++) on[h] = (float)sqrt(s2[h]);
        }
    }
    memcpy(L->o, R->obuf + (size_t)(nb - 1) * sv, sv * sizeof(float)); /* the last token's */
    /* the first NaN: token by token only when the batch holds one */
    if (nf->found || (R->inputs_finite && all_finite(R->obuf, (size_t)nb * sv))) return;
    for (int t = 0; t < nb && !nf->found; t++) {
        mixer_tok x = mixer_seq_at(&L->c, &R->seq, t);
        diag_nf_scan_core(nf, L->m, &L->c, &x, NULL, R->obuf + (size_t)t * sv,
                          R->want_core ? R->pbuf + (size_t)t * R->np : NULL, t0 + t, l);
    }
}

/* Tokens [t0, t0 + nb) through every lane: each lane's inputs up and its steps launched (no
 * wait), then, while the GPU steps, the tokens pushed and what the inputs alone give recorded,
 * then each lane's outputs and probes back and recorded. *begun: the lanes' device states may
 * have moved past t0 (a failure from there leaves them out of step with the host). The tokens are
 * pushed once any lane began, also when another failed to begin: the trace is then ahead of the
 * lanes, and the next advance starts again from position 0. */
static int gpu_batch(engine *g, glane_run *lr, int t0, int nb, diag_nf *nf, int *begun, err *e) {
    raw_mode *r = g->raw;
    for (int l = 0; l < r->nl; l++)
        if (gather_inputs(r, l, &lr[l], t0, nb, e)) return -1;
    *begun = 1;
    int brc = 0;
    for (int l = 0; l < r->nl && !brc; l++) {
        glane_run *R = &lr[l];
        if (lane_begin(r->glane[l], &R->seq, t0, R->obuf, R->want_core ? R->pbuf : NULL, e))
            brc = err_prefix(e, "lane %s on the gpu", r->lane[l].label);
    }
    err pe = {{0}};
    for (int t = 0; t < nb; t++)
        if (trace_push_token(&g->tr, brc ? &pe : e) < 0) return -1;
    if (brc) return -1;
    for (int l = 0; l < r->nl; l++)
        if (record_inputs(g, l, &lr[l], t0, nb, e)) return -1;
    for (int l = 0; l < r->nl; l++) {
        glane_run *R = &lr[l];
        if (lane_end(r->glane[l], R->obuf, R->want_core ? R->pbuf : NULL, e))
            return err_prefix(e, "lane %s on the gpu", r->lane[l].label);
        record_outputs(g, l, R, t0, nb, nf);
    }
    return 0;
}

static int gpu_advance(engine *g, int n, err *e) {
    raw_mode *r = g->raw;
    int rc = glanes_ready(r, e);
    glane_run *lr = rc ? NULL : glane_runs_make(g, e);
    if (!lr) rc = -1;
    int done = 0, lane_failed = 0;
    diag_nf nf;
    diag_nf_clear(&nf);
    while (!rc && done < n) {
        int t0 = r->pos, nb = n - done < RAW_GPU_BATCH ? n - done : RAW_GPU_BATCH;
        if (engine_tick(g, done, n)) {
            rc = err_set(e, "interrupted at token %d", t0);
            break;
        }
        int begun = 0;
        if (gpu_batch(g, lr, t0, nb, &nf, &begun, e)) {
            rc = -1, lane_failed = begun;
            break;
        }
        r->pos += nb, done += nb;
        if (nf.found) {
            char m[ERR_MSG_MAX];
            rc = err_set(e, "stopped after token %d (the end of a gpu batch): %s", r->pos - 1,
                         diag_nf_message(&nf, m, sizeof m));
        }
    }
    glane_runs_free(lr, r->nl);
    if (lane_failed) {
        /* a lane's step failed part way, or the batch's recording did after the lanes began: the
         * device states are past the position. The trace holds tokens the lanes did not finish,
         * so the next advance starts again from position 0. */
        glanes_free(r);
        if (g->tr.T == r->pos && done > 0) { /* no token pushed: the host states are behind */
            for (int l = 0; l < r->nl; l++) raw_lane_reset(&r->lane[l]);
            r->pos = 0;
            trace_clear(&g->tr);
            engine_recall_reset(g);
        }
    } else if (done > 0) {
        err se = {{0}};
        if (glanes_sync(g, &se)) {
            if (!rc) rc = err_set(e, "%s", se.msg);
        } else {
            for (int l = 0; l < r->nl; l++) {
                raw_lane *L = &r->lane[l];
                probe_record_state(&g->tr, L->m, &L->c, L->state, r->pos - 1, l);
                /* the state itself, once (a NaN that reached no output nor probe) */
                if (!rc && !nf.found) {
                    mixer_tok x;
                    raw_lane_inputs(L, &r->st, r->pos - 1, r->scratch, &x);
                    if (diag_nf_scan_core(&nf, L->m, &L->c, &x, L->state, NULL, NULL, r->pos - 1,
                                          l)) {
                        char m[ERR_MSG_MAX];
                        rc = err_set(e, "stopped after token %d (the end of a gpu advance): %s",
                                     r->pos - 1, diag_nf_message(&nf, m, sizeof m));
                    }
                }
            }
        }
    }
    if (!rc) engine_tick(g, n, n);
    return rc;
}

int engine_raw_advance(engine *g, int n, err *e) {
    raw_mode *r = g->raw;
    if (!r || !r->on || !r->nl) return err_set(e, "no mixer (mixer NAME dk= dv= first)");
    if (!r->st.T) return err_set(e, "no stream (stream keys N, stream recall pairs=N, ...)");
    if (!g->tr_ready) {
        if (raw_register(g, &g->tr, r->lane, r->nl, e)) return -1;
        g->tr_ready = 1;
    }
    if (g->tr.T != r->pos) { /* keep the trace aligned with the lanes */
        trace_clear(&g->tr);
        engine_recall_reset(g);
        for (int l = 0; l < r->nl; l++) raw_lane_reset(&r->lane[l]);
        r->pos = 0;
        r->gl_valid = 0;
        engine_iv_rewind(g);
        if (engine_iv_apply_at(g, 0, e)) return -1;
        int stop = engine_iv_next_pos(g, 0);
        if (n > stop) n = stop; /* the caller's segment assumed the old position */
    }
    int left = r->st.T - r->pos;
    if (n > left) n = left;
    if (lanes_on_gpu(g)) return gpu_advance(g, n, e);
    glanes_free(r); /* the CPU steps the host state from here */
    for (int i = 0; i < n; i++) {
        if (engine_tick(g, i, n)) return err_set(e, "interrupted at token %d", r->pos);
        diag_nf nf;
        diag_nf_clear(&nf);
        if (trace_push_token(&g->tr, e) < 0 ||
            record_token(g, &g->tr, r->lane, r->nl, &r->st, r->pos, r->scratch, &nf, e))
            return -1;
        r->pos++;
        if (nf.found) {
            /* as model mode does: stop after the token (it is in the trace, for show / views /
             * diagnose), naming the lane beside its layer index */
            char m[ERR_MSG_MAX], where[32];
            diag_nf_message(&nf, m, sizeof m);
            snprintf(where, sizeof where, "layer %d", nf.layer);
            char *at = strstr(m, where);
            if (at) {
                at += strlen(where);
                return err_set(e, "stopped after token %d: %.*s (lane %s)%s", r->pos - 1,
                               (int)(at - m), m, r->lane[nf.layer].label, at);
            }
            return err_set(e, "stopped after token %d: %s", r->pos - 1, m);
        }
    }
    engine_tick(g, n, n);
    return 0;
}

int engine_raw_reset(engine *g, err *e) {
    g->gen++;
    raw_mode *r = g->raw;
    for (int l = 0; l < r->nl; l++) raw_lane_reset(&r->lane[l]);
    r->pos = 0;
    r->gl_valid = 0; /* uploaded before the next GPU step */
    if (g->device != ENGINE_GPU) glanes_free(r);
    trace_clear(&g->tr);
    engine_recall_reset(g);
    engine_iv_rewind(g);
    return engine_iv_apply_at(g, 0, e);
}
