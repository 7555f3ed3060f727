/* cmd_step.c: step, run, reset and info, in model and raw-mixer mode alike. The engine
 * (engine/engine.h) steps and records; these commands print what it recorded: a line per token
 * for `step`, a summary for `run`, what is loaded for `info`. */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "../models/arith.h"
#include "../models/model.h"
#include "../models/tokenizer.h"
#include "../scenes/prompts.h"
#include "command.h"
#include "session.h"

/* The value of a series at (t, layer, head), NaN when absent. */
static float val(const trace *tr, const char *name, int64_t t, int l, int h) {
    int k = trace_find(tr, name);
    if (k < 0 || t < 0 || t >= tr->T || l >= tr->series[k].layers || h >= tr->series[k].heads)
        return NAN;
    return *trace_at_lh(tr, k, t, l, h);
}

/* One line per token for `step`: head 0 of every lane. */
static void print_raw_token(session *s, const raw_mode *r, int t) {
    const raw_stream *st = &r->st;
    if (st->query[t])
        fprintf(s->out, "token %d query key %d:", t, st->key_id[t]);
    else
        fprintf(s->out, "token %d write key %d |k| %.3g:", t, st->key_id[t],
                st->knorm[(size_t)t * st->H]);
    for (int l = 0; l < r->nl; l++) {
        fprintf(s->out, "%s %s", l ? " |" : "", r->lane[l].label);
        if (st->query[t]) {
            fprintf(s->out, " err %.4g", val(&s->eng.tr, "recall_err", t, l, 0));
        } else {
            float rho = val(&s->eng.tr, "rho", t, l, 0),
                  sn = val(&s->eng.tr, "state_norm", t, l, 0);
            if (!isnan(rho) && mixer_probe_index(r->lane[l].m, "rho") >= 0)
                fprintf(s->out, " rho %.4g", rho);
            if (!isnan(sn) && mixer_probe_index(r->lane[l].m, "state_norm") >= 0)
                fprintf(s->out, " state %.4g", sn);
        }
        fprintf(s->out, " |o| %.4g", val(&s->eng.tr, "out_norm", t, l, 0));
    }
    fputc('\n', s->out);
}

/* Per lane: the state norm's course (blow-up), the output, and recall over the queries. */
static void raw_print_summary(session *s, int from, int to) {
    const raw_mode *r = s->eng.raw;
    const trace *tr = &s->eng.tr;
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
        int has_sn = mixer_probe_index(r->lane[l].m, "state_norm") >= 0 &&
                     trace_find(tr, "state_norm") >= 0; /* recorded under set probes */
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
        int cw = 12; /* as wide as the widest lane name */
        for (int l = 0; l < r->nl; l++)
            if ((int)strlen(r->lane[l].label) > cw) cw = (int)strlen(r->lane[l].label);
        if (cw > 40) cw = 40;
        fprintf(s->out, "  %-6s %-5s", "token", "key");
        for (int l = 0; l < r->nl; l++) fprintf(s->out, " %*.*s", cw, cw, r->lane[l].label);
        fputc('\n', s->out);
        for (int t = from; t < to; t++) {
            if (!st->query[t]) continue;
            fprintf(s->out, "  %-6d %-5d", t, st->key_id[t]);
            for (int l = 0; l < r->nl; l++) {
                double m = 0;
                for (int h = 0; h < H; h++) m += val(tr, "recall_err", t, l, h);
                fprintf(s->out, " %*.4g", cw, m / H);
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

static double mib(double bytes) {
    return bytes / (1024.0 * 1024.0);
}

static void raw_print_info(session *s) {
    const raw_mode *r = s->eng.raw;
    double lanes_b = 0, stream_b = 0, trace_b = 0;
    for (int i = 0; i < s->eng.tr.nseries; i++)
        trace_b += 4.0 * s->eng.tr.series[i].layers * s->eng.tr.series[i].heads *
                   s->eng.tr.series[i].width * (double)s->eng.tr.cap;
    for (int i = 0; i < s->eng.tr.nsnap; i++)
        trace_b += 4.0 * s->eng.tr.snaps[i].layers * s->eng.tr.snaps[i].heads *
                   s->eng.tr.snaps[i].rows * s->eng.tr.snaps[i].cols;
    if (engine_raw_active(&s->eng)) {
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
        int same =
            s->task->n == s->eng.ntokens && s->eng.tokens &&
            !memcmp(s->task->ids, s->eng.tokens, (size_t)s->eng.ntokens * sizeof *s->eng.tokens);
        fprintf(s->out, "task: %s%s\n", s->task->desc, same ? "" : " (not the current tokens)");
        if (same && s->eng.model && s->eng.logits && s->eng.model->pos > 0) {
            int c, n;
            double acc = task_accuracy(s->task, s->eng.logits, s->eng.model->c.vocab,
                                       s->eng.model->pos, &c, &n);
            fprintf(s->out, "  accuracy so far: %d/%d (%.3f) at the scored positions run\n", c, n,
                    acc);
        }
    }
    double model_b = s->eng.model ? 4.0 * (double)model_param_count(s->eng.model) : 0;
    if (s->eng.model)
        for (int l = 0; l < s->eng.model->c.layers; l++)
            model_b +=
                4.0 * (double)s->eng.model->layers[l].mx->state_floats(&s->eng.model->layers[l].mc);
    if (s->eng.logits && s->eng.model)
        model_b += 4.0 * s->eng.ntokens * (double)s->eng.model->c.vocab;
    fprintf(s->out,
            "memory: model %.2f MiB (weights, states, logits), trace %.2f MiB, raw lanes %.2f "
            "MiB, stream %.2f MiB\n",
            mib(model_b), mib(trace_b), mib(lanes_b), mib(stream_b));
}

/* One line per raw token stepped. */
static void raw_print_tokens(session *s, int from, int to) {
    for (int t = from; t < to; t++) print_raw_token(s, s->eng.raw, t);
}

/* ---- step / run / reset ---- */

/* step's optional N (default 1), in model and raw mode alike */
static int step_count(int argc, char **argv, long *n, err *e) {
    *n = 1;
    if (argc == 2) {
        char *end;
        *n = strtol(argv[1], &end, 10);
        if (*end || end == argv[1] || *n < 1)
            return err_set(e, "step: N must be a positive integer");
    }
    if (*n > 1 << 30) *n = 1 << 30;
    return 0;
}

/* One line per token stepped in model mode: the token and the top next-token prediction. */
static void print_model_tokens(session *s, int from, int to) {
    /* a long step: its head and tail (set rows) */
    int rows = setting_rows(s), head = rows < 0 || to - from <= rows ? to - from : rows / 2;
    for (int pos = from; pos < to; pos++) {
        char a[48], b[48];
        if (pos == from + head && pos < to - (rows - head)) {
            fprintf(s->out, "... %d tokens (set rows all prints every one) ...\n",
                    to - from - rows);
            pos = to - (rows - head);
        }
        fprintf(s->out, "token %d %s -> %s p=%.3f\n", pos,
                session_tok(s, s->eng.tokens[pos], a, sizeof a),
                session_tok(s, s->eng.top[pos], b, sizeof b), s->eng.topp[pos]);
    }
}

/* Once per model: under device gpu, a model the GPU-resident stepper does not cover steps on the
 * CPU (engine/gpu.c), and the user should know why it is not faster. */
static void note_gpu(session *s) {
    engine *g = &s->eng;
    if (g->device != ENGINE_GPU || !g->model || g->gm || !g->gm_why[0] || g->gm_noted) return;
    fprintf(s->out, "device gpu: stepping on the cpu (%s); run prefill uses the gpu\n", g->gm_why);
    g->gm_noted = 1;
}

/* A stop on `set stop-on`: where, and how to take that step outside. */
static void print_stop(session *s) {
    const engine *g = &s->eng;
    if (!g->stopped[0]) return;
    fprintf(s->out, "%s\n", g->stopped);
    int l = g->stop_layer >= 0 ? g->stop_layer : 0;
    fprintf(s->out,
            "  that step for replay: export inputs FILE.safetensors layer=%d from=%d to=%d; the "
            "whole run: export inputs FILE.safetensors layer=%d\n",
            l, g->stop_token, g->stop_token, l);
}

static int run_step(session *s, int argc, char **argv, const char *rest, err *e) {
    (void)rest;
    long n;
    if (step_count(argc, argv, &n, e)) return -1;
    int from = engine_pos(&s->eng);
    int rc = engine_step(&s->eng, (int)n, e);
    int to = engine_pos(&s->eng); /* a step that stopped on a NaN still shows its tokens */
    note_gpu(s);
    if (engine_raw_active(&s->eng))
        raw_print_tokens(s, from, to);
    else if (s->eng.model && s->eng.top)
        print_model_tokens(s, from, to);
    if (!rc) print_stop(s);
    return rc;
}

const command cmd_step = {
    "step",
    "[N]",
    "advance N tokens (default 1), recording the selected probes",
    "Runs the next N tokens through the model one at a time with each core's step,\n"
    "recording the probes `set probes` selects (default: what the views draw); prints\n"
    "the top next-token prediction of each. In raw-mixer mode, one line per token for\n"
    "every lane.",
    0,
    1,
    run_step,
    0,
    NULL};

static int run_run(session *s, int argc, char **argv, const char *rest, err *e) {
    (void)rest;
    int prefill = argc == 2 && strcmp(argv[1], "prefill") == 0;
    if (engine_raw_active(&s->eng)) {
        if (argc == 2)
            return err_set(
                e, "run: raw-mixer mode steps every token (no '%.20s'; prefill is for models)",
                argv[1]);
        int from = engine_pos(&s->eng);
        if (engine_run(&s->eng, 0, e)) return -1;
        raw_print_summary(s, from, engine_pos(&s->eng));
        print_stop(s);
        return 0;
    }
    if (argc == 2 && !prefill) return err_set(e, "run: expected nothing or 'prefill'");
    model *m = s->eng.model;
    /* a delta-rule core with arith=tf32 (load ... arith=tf32): fla's layer runs its chunk kernels
     * for more than 64 tokens and its exact recurrent kernel otherwise; run follows it */
    int left = m && s->eng.tokens ? s->eng.ntokens - m->pos : 0;
    int chunked = !prefill && left > 64 && model_arith_chunked(m);
    int from = engine_pos(&s->eng);
    if (engine_run(&s->eng, prefill || chunked, e)) return -1;
    if (!prefill && !chunked) note_gpu(s);
    fprintf(s->out, "ran tokens %d..%d (%s), next-token loss %.4f nats\n", from, m->pos - 1,
            prefill   ? "prefill, no probes"
            : chunked ? "prefill as fla's chunk mode under arith=tf32, no probes"
                      : "step",
            engine_mean_nll(&s->eng, m->pos));
    print_stop(s);
    /* a task prompt: its score at the positions it scores (info says the same) */
    if (s->task && s->task->n == s->eng.ntokens && s->eng.logits &&
        !memcmp(s->task->ids, s->eng.tokens, (size_t)s->eng.ntokens * sizeof *s->eng.tokens)) {
        int c, n;
        double acc = task_accuracy(s->task, s->eng.logits, m->c.vocab, m->pos, &c, &n);
        if (n > 0)
            fprintf(s->out, "%s accuracy: %d/%d (%.3f) at its scored positions\n", s->task->name, c,
                    n, acc);
        /* the misses by name (a few): which query an intervention broke */
        int shown = 0;
        for (int t = 0; t < m->pos && n - c <= 8 && c < n; t++) {
            if (s->task->target[t] < 0 || s->eng.top[t] == s->task->target[t]) continue;
            char a[32], b[32], w[32];
            fprintf(s->out, "%s token %d %s -> %s (want %s, p %.3f)", shown ? ";" : "  missed:", t,
                    session_tok(s, s->eng.tokens[t], a, sizeof a),
                    session_tok(s, s->eng.top[t], b, sizeof b),
                    session_tok(s, s->task->target[t], w, sizeof w), s->eng.topp[t]);
            shown++;
        }
        if (shown) fputc('\n', s->out);
    }
    return 0;
}

const command cmd_run = {
    "run",
    "[prefill]",
    "run every remaining token",
    "Steps every remaining token, recording the selected probes (set probes). `run\n"
    "prefill` uses the cores' parallel forms instead: the same logits (to rounding),\n"
    "no probes. After `load PATH arith=tf32` on a delta-rule model, more than 64\n"
    "remaining tokens run as prefill (fla's chunk mode). In raw-mixer mode: every\n"
    "token of the stream, then a summary per lane.",
    0,
    1,
    run_run,
    0,
    NULL};

static int run_reset(session *s, int argc, char **argv, const char *rest, err *e) {
    (void)argc, (void)argv, (void)rest;
    if (engine_reset(&s->eng, e)) return -1;
    fprintf(s->out, "position 0\n");
    return 0;
}

const command cmd_reset = {"reset",   "", "back to the first token (states and caches cleared)",
                           NULL,      0,  0,
                           run_reset, 0,  NULL};

static int run_info(session *s, int argc, char **argv, const char *rest, err *e) {
    (void)argc, (void)argv, (void)rest, (void)e;
    char how[400];
    engine_gpu_status(&s->eng, how, sizeof how);
    fprintf(s->out, "device: %s%s%s\n", s->eng.device == DEVICE_GPU ? "gpu" : "cpu",
            how[0] ? "; the model steps " : "", how);
    if (s->eng.model)
        model_print_info(s->eng.model, s->out);
    else
        fprintf(s->out, "model: none\n");
    fprintf(s->out, "tokens: %d\n", s->eng.ntokens);
    fprintf(s->out, "trace: %lld tokens, %d probe series\n", (long long)s->eng.tr.T,
            s->eng.tr.nseries);
    fprintf(s->out, "probes: %s; threads: %d\n", engine_probes_text(&s->eng), engine_threads());
    raw_print_info(s); /* raw-mixer mode, task, memory */
    return 0;
}

const command cmd_info = {"info", "",  "what is loaded: model, tokens, trace", NULL, 0, 0, run_info,
                          0,      NULL};
