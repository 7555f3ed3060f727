/* cmd_stream.c: raw-mixer mode and the task generators.
 *
 *   mixer NAME [NAME ...] dk= dv= [heads=] [options]   select one or more cores ("lanes")
 *   stream keys|recall|overwrite ...                  the tokens to feed them (scenes/stream.h)
 *   step / run / reset in raw mode                     (called from cli/cmd_model.c)
 *   prompt mqar|niah|overwrite|a5 ...                  task prompts for models (scenes/prompts.h)
 *
 * The lanes are layers of the session's probe trace (scenes/session_raw.h), so `show`, the views
 * and `export csv` work on streams exactly as on models. Selecting a mixer enters raw mode;
 * `mixer off`, `load` or `model random` leave it. Like a model's, `step` and `run` stop after the
 * token where a lane first meets a NaN / Inf and name it (diag_nf_scan_core, diag/nonfinite.c). */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "../core/opts.h"
#include "../diag/diag.h"
#include "../mixers/kata_features.h"
#include "../mixers/record.h"
#include "../models/model.h"
#include "../scenes/prompts.h"
#include "../scenes/session_raw.h"
#include "../viz/recall.h"
#include "command.h"
#include "session.h"

/* The readback picture costs RECALL_WINDOW dk dv per head and token: the first tokens only. */
#define RAW_RECALL_MAX_TOKENS 1024

double raw_now(void) {
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec + 1e-9 * (double)ts.tv_nsec;
}

/* ---- the raw block ---- */

static void lanes_free(raw_mode *r) {
    for (int i = 0; i < r->nl; i++) raw_lane_free(&r->lane[i]);
    r->nl = 0;
}

void session_raw_free(session *s) {
    if (s->raw) {
        lanes_free(s->raw);
        stream_free(&s->raw->st);
        free(s->raw->scratch);
        free(s->raw);
        s->raw = NULL;
    }
    if (s->task) {
        task_free(s->task);
        free(s->task);
        s->task = NULL;
    }
}

int raw_active(session *s) {
    return s->raw && s->raw->on && s->raw->nl > 0;
}

/* A fresh trace for a new schema (new lanes or stream); model mode re-registers its own later. */
static void trace_restart(session *s) {
    trace_free(&s->tr);
    trace_init(&s->tr);
    s->tr_ready = 0;
}

void raw_leave(session *s) {
    if (!raw_active(s)) return;
    s->raw->on = 0;
    trace_restart(s);
}

const char *raw_layer_label(session *s, int l, char *buf, size_t n) {
    if (raw_active(s) && l >= 0 && l < s->raw->nl)
        snprintf(buf, n, "%s", s->raw->lane[l].label);
    else
        snprintf(buf, n, "l%d", l);
    return buf;
}

/* (Re)builds every lane for dims H, dk, dv; all or nothing. */
static int lanes_build(session *s, raw_mode *r, char specs[][64], int nl, const char *shared, int H,
                       int dk, int dv, err *e) {
    raw_lane nw[RAW_MAX_LANES];
    int max_t = r->st.T > 4096 ? r->st.T : 4096;
    for (int i = 0; i < nl; i++)
        if (raw_lane_build(&nw[i], specs[i], shared, H, dk, dv, max_t, s->set_chunk, e)) {
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

/* ---- recording ---- */

int raw_register(trace *tr, raw_lane *lanes, int nl, const raw_stream *st, err *e) {
    (void)st;
    for (int l = 0; l < nl; l++) {
        const raw_lane *L = &lanes[l];
        for (int i = 0; i < L->m->nprobes; i++) {
            const probe_def *p = &L->m->probes[i];
            int w = mixer_width_floats(&L->c, p->width), k = trace_find(tr, p->name);
            if (k >= 0 && tr->series[k].width != w) continue; /* another lane's shape wins */
            if (trace_add_series(tr, p->name, p->meaning, L->m->name, nl, L->c.H, w, e) < 0)
                return -1;
        }
        state_part parts[MIXER_MAX_STATE_PARTS];
        int np = L->m->state_parts ? L->m->state_parts(&L->c, parts) : 0, snap = -1;
        for (int i = 0; i < np && snap < 0; i++)
            if (parts[i].ndim == 3 && parts[i].shape[0] == L->c.H) snap = i;
        int k = trace_find_snapshot(tr, "state");
        if (snap >= 0 && (k < 0 || (tr->snaps[k].rows == parts[snap].shape[1] &&
                                    tr->snaps[k].cols == parts[snap].shape[2])))
            if (probe_register_state(tr, L->m, &L->c, nl, e)) return -1;
        if (probe_register_attn(tr, L->m, &L->c, nl, e)) return -1;
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

/* raw_record_token; nf (when not NULL) gets the first non-finite quantity of the lanes, scanned
 * right after each lane's step while its inputs are still in scratch (layer = lane). */
static int record_token(trace *tr, raw_lane *lanes, int nl, const raw_stream *st, int t,
                        float *scratch, diag_nf *nf, err *e) {
    const int H = st->H, dk = st->dk, dv = st->dv;
    for (int l = 0; l < nl; l++) {
        raw_lane *L = &lanes[l];
        mixer_tok x;
        raw_lane_inputs(L, st, t, scratch, &x);
        L->m->step(&L->c, L->state, &x, t, L->o, L->probes);
        if (nf) diag_nf_scan_core(nf, L->m, &L->c, &x, L->state, L->o, L->probes, t, l);
        probe_record(tr, L->m, &L->c, L->probes, t, l);
        probe_record_state(tr, L->m, &L->c, L->state, t, l);
        probe_record_attn(tr, L->m, &L->c, L->state, &x, t, l);
        int rc = L->keymajor && t < RAW_RECALL_MAX_TOKENS
                     ? recall_record(tr, nl, l, H, dk, dv, x.in[IN_K], x.in[IN_V], L->state, t, e)
                     : recall_record_kv(tr, nl, l, H, dk, dv, x.in[IN_K], x.in[IN_V], t, e);
        if (rc) return -1;
        float re[64], kn[64], on[64];
        for (int h = 0; h < H && h < 64; h++) {
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

int raw_record_token(trace *tr, raw_lane *lanes, int nl, const raw_stream *st, int t,
                     float *scratch, err *e) {
    return record_token(tr, lanes, nl, st, t, scratch, NULL, e);
}

int raw_run_all(session *s, trace *tr, raw_lane *lanes, int nl, const raw_stream *st, err *e) {
    for (int l = 0; l < nl; l++) raw_lane_reset(&lanes[l]);
    if (raw_register(tr, lanes, nl, st, e)) return -1;
    float *scratch = malloc(raw_scratch_floats(st->H, st->dk, st->dv) * sizeof *scratch);
    if (!scratch) return err_set(e, "out of memory");
    int rc = 0;
    for (int t = 0; t < st->T && !rc; t++) {
        if (session_interrupted(s)) {
            rc = err_set(e, "interrupted at token %d", t);
            break;
        }
        if (trace_push_token(tr, e) < 0 || raw_record_token(tr, lanes, nl, st, t, scratch, e))
            rc = -1;
        if (session_progress) session_progress(s, t + 1, st->T);
    }
    free(scratch);
    return rc;
}

/* The value of a series at (t, layer, head), NaN when absent. */
static float val(const trace *tr, const char *name, int64_t t, int l, int h) {
    int k = trace_find(tr, name);
    if (k < 0 || t < 0 || t >= tr->T || l >= tr->series[k].layers || h >= tr->series[k].heads)
        return NAN;
    return *trace_at_lh(tr, k, t, l, h);
}

/* One line per token for `step`: head 0 of every lane. */
static void print_token(session *s, raw_mode *r, int t) {
    const raw_stream *st = &r->st;
    if (st->query[t])
        fprintf(s->out, "token %d query key %d:", t, st->key_id[t]);
    else
        fprintf(s->out, "token %d write key %d |k| %.3g:", t, st->key_id[t],
                st->knorm[(size_t)t * st->H]);
    for (int l = 0; l < r->nl; l++) {
        fprintf(s->out, "%s %s", l ? " |" : "", r->lane[l].label);
        if (st->query[t]) {
            fprintf(s->out, " err %.4g", val(&s->tr, "recall_err", t, l, 0));
        } else {
            float rho = val(&s->tr, "rho", t, l, 0), sn = val(&s->tr, "state_norm", t, l, 0);
            if (!isnan(rho) && mixer_probe_index(r->lane[l].m, "rho") >= 0)
                fprintf(s->out, " rho %.4g", rho);
            if (!isnan(sn) && mixer_probe_index(r->lane[l].m, "state_norm") >= 0)
                fprintf(s->out, " state %.4g", sn);
        }
        fprintf(s->out, " |o| %.4g", val(&s->tr, "out_norm", t, l, 0));
    }
    fputc('\n', s->out);
}

int raw_advance(session *s, int n, int verbose, err *e) {
    raw_mode *r = s->raw;
    if (!r || !r->on || !r->nl) return err_set(e, "no mixer (mixer NAME dk= dv= first)");
    if (!r->st.T) return err_set(e, "no stream (stream keys N, stream recall pairs=N, ...)");
    if (s->tr.nseries == 0 && raw_register(&s->tr, r->lane, r->nl, &r->st, e)) return -1;
    if (s->tr.T != r->pos) { /* keep the trace aligned with the lanes */
        trace_clear(&s->tr);
        for (int l = 0; l < r->nl; l++) raw_lane_reset(&r->lane[l]);
        r->pos = 0;
    }
    int left = r->st.T - r->pos;
    if (n > left) n = left;
    for (int i = 0; i < n; i++) {
        if (session_interrupted(s)) return err_set(e, "interrupted at token %d", r->pos);
        diag_nf nf;
        diag_nf_clear(&nf);
        if (trace_push_token(&s->tr, e) < 0 ||
            record_token(&s->tr, r->lane, r->nl, &r->st, r->pos, r->scratch, &nf, e))
            return -1;
        if (verbose) print_token(s, r, r->pos);
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
        if (session_progress) session_progress(s, i + 1, n);
    }
    return 0;
}

/* ---- step / run / reset / info in raw mode (called from cli/cmd_model.c) ---- */

int raw_step(session *s, long n, err *e) {
    if (s->raw->st.T && s->raw->pos >= s->raw->st.T)
        return err_set(e, "all %d tokens have run (reset to start again)", s->raw->st.T);
    return raw_advance(s, n > 1 << 30 ? 1 << 30 : (int)n, 1, e);
}

/* Per lane: the state norm's course (blow-up), the output, and recall over the queries. */
static void print_summary(session *s, raw_mode *r, int from, int to) {
    const trace *tr = &s->tr;
    const raw_stream *st = &r->st;
    int H = r->H, nq = 0, nw = 0;
    for (int t = from; t < to; t++) nq += st->query[t], nw += !st->query[t];
    fprintf(s->out, "ran tokens %d..%d of %d (%d writes, %d queries)\n", from, to - 1, st->T, nw,
            nq);
    double limit = setting_blowup(s);
    char lab[64];
    int width = 0;
    for (int l = 0; l < r->nl; l++)
        if ((int)strlen(r->lane[l].label) > width) width = (int)strlen(r->lane[l].label);
    for (int l = 0; l < r->nl; l++) {
        snprintf(lab, sizeof lab, "%s:", r->lane[l].label);
        fprintf(s->out, "  layer %d %-*s", l, width + 2, lab);
        int has_sn = mixer_probe_index(r->lane[l].m, "state_norm") >= 0;
        double omean = 0;
        int on = 0, blown = -1, nonfinite = -1, tmax = -1;
        double smax = -1, sfinal = NAN;
        for (int t = 0; t < to; t++)
            for (int h = 0; h < H; h++) {
                float o = val(tr, "out_norm", t, l, h);
                if (t >= from && isfinite(o)) omean += o, on++;
                if (!isfinite(o) && nonfinite < 0) nonfinite = t;
                if (!has_sn) continue;
                float sn = val(tr, "state_norm", t, l, h);
                if (!isfinite(sn) && nonfinite < 0) nonfinite = t;
                if (isfinite(sn) && sn > smax) smax = sn, tmax = t;
                if (sn > limit && blown < 0) blown = t;
                if (t == to - 1 && (h == 0 || sn > sfinal || isnan(sfinal))) sfinal = sn;
            }
        if (has_sn)
            fprintf(s->out, "state_norm final %.4g, max %.4g (token %d); ", sfinal, smax, tmax);
        fprintf(s->out, "|o| mean %.4g\n", on ? omean / on : NAN);
        if (blown >= 0) {
            float kn = val(tr, "key_norm", blown, l, 0), rho = val(tr, "rho", blown, l, 0);
            fprintf(s->out,
                    "  layer %d %s: state norm blew up at token %d (state_norm %.4g > %g; |k| "
                    "%.3g, rho %.3g)\n",
                    l, r->lane[l].label, blown, val(tr, "state_norm", blown, l, 0), limit, kn, rho);
        }
        if (nonfinite >= 0)
            fprintf(s->out, "  layer %d %s: non-finite values from token %d\n", l, r->lane[l].label,
                    nonfinite);
    }
    if (!nq) return;
    fprintf(s->out,
            "recall over %d queries (error |o - v*|/|v*|, mean over heads; recalled: < 0.1):\n",
            nq);
    int rows = setting_rows(s);
    if (rows < 0 || nq <= rows) {
        fprintf(s->out, "  %-6s %-5s", "token", "key");
        for (int l = 0; l < r->nl; l++) fprintf(s->out, " %12.12s", r->lane[l].label);
        fputc('\n', s->out);
        for (int t = from; t < to; t++) {
            if (!st->query[t]) continue;
            fprintf(s->out, "  %-6d %-5d", t, st->key_id[t]);
            for (int l = 0; l < r->nl; l++) {
                double m = 0;
                for (int h = 0; h < H; h++) m += val(tr, "recall_err", t, l, h);
                fprintf(s->out, " %12.4g", m / H);
            }
            fputc('\n', s->out);
        }
    }
    for (int l = 0; l < r->nl; l++) {
        double sum = 0, mx = 0;
        int ok = 0, n = 0;
        for (int t = from; t < to; t++) {
            if (!st->query[t]) continue;
            for (int h = 0; h < H; h++) {
                float x = val(tr, "recall_err", t, l, h);
                sum += x, n++, ok += x < 0.1f;
                if (!(x <= mx)) mx = x;
            }
        }
        snprintf(lab, sizeof lab, "%s:", r->lane[l].label);
        fprintf(s->out, "  recall %-*s mean error %.4g, max %.4g, recalled %d/%d\n", width + 2, lab,
                n ? sum / n : NAN, mx, ok, n);
    }
}

int raw_run(session *s, int argc, char **argv, err *e) {
    if (argc == 2)
        return err_set(e,
                       "run: raw-mixer mode steps every token (no '%.20s'; prefill is for models)",
                       argv[1]);
    raw_mode *r = s->raw;
    if (r->st.T && r->pos >= r->st.T)
        return err_set(e, "all %d tokens have run (reset to start again)", r->st.T);
    if (s->tr.T != r->pos) r->pos = 0; /* raw_advance realigns from 0 */
    int from = r->pos;
    if (raw_advance(s, r->st.T ? r->st.T : 1, 0, e)) return -1;
    print_summary(s, r, from, r->pos);
    return 0;
}

int raw_reset(session *s, err *e) {
    (void)e;
    raw_mode *r = s->raw;
    for (int l = 0; l < r->nl; l++) raw_lane_reset(&r->lane[l]);
    r->pos = 0;
    trace_clear(&s->tr);
    fprintf(s->out, "position 0\n");
    return 0;
}

static double mib(double bytes) {
    return bytes / (1024.0 * 1024.0);
}

void raw_info(session *s) {
    raw_mode *r = s->raw;
    double lanes_b = 0, stream_b = 0, trace_b = 0;
    for (int i = 0; i < s->tr.nseries; i++)
        trace_b += 4.0 * s->tr.series[i].layers * s->tr.series[i].heads * s->tr.series[i].width *
                   (double)s->tr.cap;
    for (int i = 0; i < s->tr.nsnap; i++)
        trace_b += 4.0 * s->tr.snaps[i].layers * s->tr.snaps[i].heads * s->tr.snaps[i].rows *
                   s->tr.snaps[i].cols;
    if (raw_active(s)) {
        fprintf(s->out, "raw-mixer mode: %d lane%s, heads %d, dk %d, dv %d (lane l = layer l)\n",
                r->nl, r->nl > 1 ? "s" : "", r->H, r->dk, r->dv);
        for (int l = 0; l < r->nl; l++) {
            const raw_lane *L = &r->lane[l];
            size_t sf = L->m->state_floats(&L->c);
            lanes_b += 4.0 * (sf + mixer_probe_floats(L->m, &L->c));
            fprintf(s->out, "  layer %d %s: %s; state %zu floats\n", l, L->label, L->words, sf);
        }
        if (r->st.T) {
            stream_b = 4.0 * r->st.T * r->st.H * (2.0 * r->st.dk + r->st.dv + 1);
            fprintf(s->out, "stream %s\n  position %d of %d\n", r->st.desc, r->pos, r->st.T);
        } else {
            fprintf(s->out, "stream: none (stream keys N, stream recall pairs=N, ...)\n");
        }
    }
    if (s->task) {
        int same = s->task->n == s->ntokens && s->tokens &&
                   !memcmp(s->task->ids, s->tokens, (size_t)s->ntokens * sizeof *s->tokens);
        fprintf(s->out, "task: %s%s\n", s->task->desc, same ? "" : " (not the current tokens)");
        if (same && s->model && s->logits && s->model->pos > 0) {
            int c, n;
            double acc =
                task_accuracy(s->task, s->logits, s->model->c.vocab, s->model->pos, &c, &n);
            fprintf(s->out, "  accuracy so far: %d/%d (%.3f) at the scored positions run\n", c, n,
                    acc);
        }
    }
    double model_b = s->model ? 4.0 * (double)model_param_count(s->model) : 0;
    if (s->model)
        for (int l = 0; l < s->model->c.layers; l++)
            model_b += 4.0 * (double)s->model->layers[l].mx->state_floats(&s->model->layers[l].mc);
    if (s->logits && s->model) model_b += 4.0 * s->ntokens * (double)s->model->c.vocab;
    fprintf(s->out,
            "memory: model %.2f MiB (weights, states, logits), trace %.2f MiB, raw lanes %.2f "
            "MiB, stream %.2f MiB\n",
            mib(model_b), mib(trace_b), mib(lanes_b), mib(stream_b));
}

/* ---- mixer ---- */

/* A word names a lane when it has no '=' or a ':' comes before its first '='. */
static int is_lane_word(const char *w) {
    const char *eq = strchr(w, '='), *colon = strchr(w, ':');
    return !eq || (colon && colon < eq);
}

static void print_selection(session *s) {
    raw_mode *r = s->raw;
    fprintf(s->out, "mixer");
    for (int l = 0; l < r->nl; l++) fprintf(s->out, "%s %s", l ? "," : "", r->lane[l].label);
    fprintf(s->out, ": heads %d, dk %d, dv %d", r->H, r->dk, r->dv);
    if (r->nl > 1) fprintf(s->out, " (lanes = layers 0..%d of the trace)", r->nl - 1);
    fputc('\n', s->out);
    for (int l = 0; l < r->nl; l++)
        fprintf(s->out, "  layer %d %s: %s\n", l, r->lane[l].label, r->lane[l].words);
}

static int run_mixer(session *s, int argc, char **argv, const char *rest, err *e) {
    (void)rest;
    if (argc == 1) {
        if (!raw_active(s)) {
            fprintf(s->out, "mixer: none selected (raw-mixer mode is off)\n");
            return 0;
        }
        print_selection(s);
        return 0;
    }
    if (argc == 2 && !strcmp(argv[1], "list")) {
        for (int i = 0; i < mixer_count; i++)
            if (mixer_all[i])
                fprintf(s->out, "  %-9s %s\n  %-9s options: %s\n", mixer_all[i]->name,
                        mixer_all[i]->summary, "", mixer_all[i]->options);
        fprintf(s->out, "  every lane also takes: %s (mixer help: help mixer)\n", RAW_GATE_KEYS);
        return 0;
    }
    if (argc == 2 && !strcmp(argv[1], "off")) {
        raw_leave(s);
        fprintf(s->out, "raw-mixer mode off%s\n", s->model ? " (back to the model)" : "");
        return 0;
    }
    char specs[RAW_MAX_LANES][64], shared[320] = "";
    int nl = 0;
    long H = 1, dk = 16, dv = 16;
    for (int i = 1; i < argc; i++) {
        const char *w = argv[i];
        if (is_lane_word(w)) {
            if (nl == RAW_MAX_LANES) return err_set(e, "mixer: at most %d lanes", RAW_MAX_LANES);
            if (strlen(w) >= sizeof specs[0]) return err_set(e, "mixer: '%.40s...' is too long", w);
            snprintf(specs[nl++], sizeof specs[0], "%s", w);
            continue;
        }
        long *dim = !strncmp(w, "heads=", 6) ? &H
                    : !strncmp(w, "dk=", 3)  ? &dk
                    : !strncmp(w, "dv=", 3)  ? &dv
                                             : NULL;
        if (dim) {
            char *end;
            const char *v = strchr(w, '=') + 1;
            *dim = strtol(v, &end, 10);
            if (*end || end == v || *dim < 1 || *dim > 1024)
                return err_set(e, "mixer: %s must be an integer in 1..1024", w);
            continue;
        }
        size_t u = strlen(shared);
        if (u + strlen(w) + 2 > sizeof shared) return err_set(e, "mixer: too many options");
        snprintf(shared + u, sizeof shared - u, "%s%s", u ? " " : "", w);
    }
    if (!nl) return err_set(e, "mixer: name a mixer (mixer list shows them)");
    if (H > 64) return err_set(e, "mixer: heads=%ld: at most 64", H);
    if (!s->raw) {
        if (!(s->raw = calloc(1, sizeof *s->raw))) return err_set(e, "out of memory");
    }
    raw_mode *r = s->raw;
    /* a stream of other dimensions cannot feed the new lanes */
    if (r->st.T && (r->st.H != H || r->st.dk != dk || r->st.dv != dv)) stream_free(&r->st);
    if (lanes_build(s, r, specs, nl, shared, (int)H, (int)dk, (int)dv, e)) {
        return err_prefix(e, "mixer");
    }
    r->on = 1;
    trace_restart(s);
    print_selection(s);
    if (r->st.T) fprintf(s->out, "stream kept: %s\n", r->st.desc);
    return 0;
}

const command cmd_mixer = {
    "mixer",
    "NAME[:k=v,...] [NAME ...] [heads=1 dk=16 dv=16] [options] | list | off",
    "raw-mixer mode: select mixer cores to feed raw streams (no model)",
    "  mixer NAME [NAME ...] [heads=1] [dk=16] [dv=16] [option=value ...]\n"
    "      selects one or more cores; each is a lane, recorded as layer 0, 1, ... of the trace,\n"
    "      all fed the same stream. Options after the names go to every lane; NAME:k=v,k=v gives\n"
    "      one lane its own (they win). Besides each mixer's options (mixer list) a lane takes\n"
    "      the stream's gates: decay= (alpha per write, g = log decay; default 1), beta= (gdn,\n"
    "      deltanet, kata delta; 1), eta= (kaczmarz; 1), lambda_v= (kalman; 1), a= p= (kalman\n"
    "      dynamics), rscale= (parallax probe |r|; 1). Linear memories read with scale=1, softmax\n"
    "      and parallax with scale=dk, unless scale= is given.\n"
    "  mixer          the selection      mixer list     mixers and their options\n"
    "  mixer off      leave raw-mixer mode (load / model random also leave it)\n"
    "Examples:\n"
    "  mixer gdn kaczmarz dk=16 dv=16            the Kaczmarz view's pair on one stream\n"
    "  mixer kata:variant=m1 kata:variant=linear dk=8 dv=8\n"
    "  mixer kalman dk=8 dv=8 a=0.95 p=0.01 lambda_v=4",
    0,
    -1,
    run_mixer,
    COMPLETE_MIXER,
    "heads dk dv decay beta eta lambda_v a p rscale scale chunk eps variant"};

/* ---- stream ---- */

static int run_stream(session *s, int argc, char **argv, const char *rest, err *e) {
    (void)rest;
    if (!raw_active(s)) return err_set(e, "stream: no mixer (mixer NAME dk= dv= first)");
    raw_mode *r = s->raw;
    const char *kind = argv[1];
    int first_opt = 2;
    long n = 0;
    if (!strcmp(kind, "keys")) {
        if (argc < 3 || strchr(argv[2], '='))
            return err_set(e, "usage: stream keys N [norms=LO..HI] [seed=] [dk= dv= heads=]");
        char *end;
        n = strtol(argv[2], &end, 10);
        if (*end || n < 1) return err_set(e, "stream keys: N must be a positive integer");
        first_opt = 3;
    } else if (strcmp(kind, "recall") && strcmp(kind, "overwrite")) {
        return err_set(e, "stream: expected keys, recall or overwrite, got '%.40s'", kind);
    }
    opts o;
    if (opts_parse(&o, argc - first_opt, argv + first_opt, e))
        return err_prefix(e, "stream %s", kind);
    long H, dk, dv, seed, a = 0, b = 0;
    double lo, hi;
    int rc = opts_int(&o, "heads", r->H, &H, e) || opts_int(&o, "dk", r->dk, &dk, e) ||
             opts_int(&o, "dv", r->dv, &dv, e) || opts_int(&o, "seed", setting_seed(s), &seed, e) ||
             opts_range(&o, "norms", 1.0, 1.0, &lo, &hi, e);
    if (!rc && !strcmp(kind, "recall"))
        rc = opts_int(&o, "pairs", 16, &a, e) || opts_int(&o, "queries", a, &b, e);
    if (!rc && !strcmp(kind, "overwrite"))
        rc = opts_int(&o, "keys", 8, &a, e) || opts_int(&o, "repeats", 2, &b, e);
    if (!rc) rc = opts_check_unused(&o, e);
    opts_free(&o);
    if (rc) return err_prefix(e, "stream %s", kind);
    if (H < 1 || H > 64 || dk < 1 || dk > 1024 || dv < 1 || dv > 1024)
        return err_set(e, "stream %s: heads, dk, dv out of range (1..64, 1..1024, 1..1024)", kind);
    if (a > 1 << 22 || b > 1 << 22 || n > 1 << 22)
        return err_set(e, "stream %s: at most %d tokens", kind, 1 << 22);
    raw_stream st;
    if (!strcmp(kind, "keys"))
        rc = stream_keys(&st, (int)n, (int)H, (int)dk, (int)dv, lo, hi, (uint64_t)seed, e);
    else if (!strcmp(kind, "recall"))
        rc =
            stream_recall(&st, (int)a, (int)b, (int)H, (int)dk, (int)dv, lo, hi, (uint64_t)seed, e);
    else
        rc = stream_overwrite(&st, (int)a, (int)b, (int)H, (int)dk, (int)dv, lo, hi, (uint64_t)seed,
                              e);
    if (rc) return -1;
    int redim = H != r->H || dk != r->dk || dv != r->dv;
    raw_stream old = r->st;
    r->st = st;
    /* the lanes again: new dimensions, or a KV cache sized for the stream */
    if (lanes_build(s, r, r->specs, r->nl, r->shared, (int)H, (int)dk, (int)dv, e)) {
        r->st = old;
        stream_free(&st);
        return err_prefix(e, "stream %s", kind);
    }
    stream_free(&old);
    trace_restart(s);
    fprintf(s->out, "stream %s\n", r->st.desc);
    if (r->st.nqueries || !strcmp(kind, "recall")) {
        double ma, ms, mean;
        stream_key_geometry(&r->st, 0, &ma, &ms, &mean);
        int N = r->st.nkeys;
        fprintf(s->out,
                "  keys (head 0): %d in R^%ld: max |cos| %.4f (Welch floor %.4f), max cos^2 %.4f "
                "(PSD floor %.4f), mean cos^2 %.4f (1/dk = %.4f)\n",
                N, dk, ma, kata_welch(N, (double)dk), ms, kata_psd_floor(N, (double)dk), mean,
                1.0 / (double)dk);
    }
    if (redim) fprintf(s->out, "  (lanes rebuilt for heads %ld, dk %ld, dv %ld)\n", H, dk, dv);
    return 0;
}

const command cmd_stream = {
    "stream",
    "keys N | recall | overwrite [key=value ...]",
    "a raw write/query stream for the selected mixer(s)",
    "  stream keys N [norms=LO..HI] [seed=S]\n"
    "      N writes of new random keys, |k| log-uniform in [LO, HI] (default 1..1), unit values:\n"
    "      the spread of key norms GDN's beta|k|^2 over- or under-corrects and Kaczmarz does not.\n"
    "  stream recall [pairs=16] [queries=pairs] [norms=] [seed=]\n"
    "      writes the pairs, then queries stored keys (each once per round); run reports the\n"
    "      recall error |o - v*|/|v*| per query and per lane, and the keys' interference against\n"
    "      the Welch floor.\n"
    "  stream overwrite [keys=8] [repeats=2] [norms=] [seed=]\n"
    "      the same keys written `repeats` times with new values, then each queried: the right\n"
    "      answer is the latest value.\n"
    "Every form takes heads= dk= dv= (default: the mixer's; other values rebuild the lanes) and\n"
    "seed= (default: set seed). The position goes back to 0. Then step, run, show, view.",
    1,
    -1,
    run_stream,
    COMPLETE_GENERATOR,
    "norms seed pairs queries keys repeats heads dk dv"};

/* ---- prompt generators (called by `prompt`, cli/cmd_model.c) ---- */

const char *const *generator_names(void) {
    static const char *const names[] = {"mqar", "niah", "overwrite", "a5", "keys", "recall", NULL};
    return names;
}

int prompt_generate(session *s, int argc, char **argv, err *e) {
    const char *g = argv[1];
    int known = 0;
    for (int i = 0; task_names[i]; i++) known |= !strcmp(task_names[i], g);
    if (!known) return 1;
    /* `prompt a5` alone is a generator; `prompt a5 is a group` is text: every other word must be
     * key=value */
    for (int i = 2; i < argc; i++)
        if (!strchr(argv[i], '=')) return 1;
    opts o;
    if (opts_parse(&o, argc - 2, argv + 2, e)) return err_prefix(e, "prompt %s", g);
    long seed, vocab, a = 0, b = 0;
    double depth = -1;
    int dv = s->model ? s->model->c.vocab : 256;
    int rc =
        opts_int(&o, "seed", setting_seed(s), &seed, e) || opts_int(&o, "vocab", dv, &vocab, e);
    if (!rc && (vocab < 1 || vocab > 1 << 24))
        rc = err_set(e, "vocab=%ld must lie in 1..%d", vocab, 1 << 24);
    task_prompt *p = calloc(1, sizeof *p);
    if (!p) rc = err_set(e, "out of memory");
    if (!rc && !strcmp(g, "mqar")) {
        rc = opts_int(&o, "pairs", 16, &a, e) || opts_int(&o, "queries", a, &b, e) ||
             opts_check_unused(&o, e) ||
             task_mqar(p, (int)a, (int)b, (int)vocab, (uint64_t)seed, e);
    } else if (!rc && !strcmp(g, "niah")) {
        rc = opts_int(&o, "len", 256, &a, e) || opts_float(&o, "depth", -1, &depth, e) ||
             opts_check_unused(&o, e) || task_niah(p, (int)a, (int)vocab, depth, (uint64_t)seed, e);
    } else if (!rc && !strcmp(g, "overwrite")) {
        rc = opts_int(&o, "keys", 8, &a, e) || opts_int(&o, "repeats", 3, &b, e) ||
             opts_check_unused(&o, e) ||
             task_overwrite(p, (int)a, (int)b, (int)vocab, (uint64_t)seed, e);
    } else if (!rc && !strcmp(g, "a5")) {
        if (opts_has(&o, "vocab") && vocab != A5_ORDER)
            rc = err_set(e, "a5 has its own vocabulary of %d (no vocab=)", A5_ORDER);
        if (!rc)
            rc = opts_int(&o, "len", 64, &a, e) || opts_check_unused(&o, e) ||
                 task_a5(p, (int)a, (uint64_t)seed, e);
    }
    opts_free(&o);
    if (!rc && p->vocab > 0 && s->model && p->vocab > s->model->c.vocab)
        rc = err_set(e, "the prompt's vocabulary %d is larger than the model's %d (give vocab=)",
                     p->vocab, s->model->c.vocab);
    if (!rc) rc = session_set_tokens(s, p->ids, p->n, e);
    if (rc) {
        if (p) task_free(p), free(p);
        return err_prefix(e, "prompt %s", g);
    }
    if (s->task) task_free(s->task), free(s->task);
    s->task = p;
    fprintf(s->out, "%s\n%d tokens, %d scored position%s (info shows the accuracy after run)\n",
            p->desc, p->n, p->nscored, p->nscored == 1 ? "" : "s");
    return 0;
}
