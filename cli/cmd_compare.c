/* cmd_compare.c: `compare MIXER MIXER ...`: the same stream (raw-mixer mode) or the same prompt
 * (a model) through several mixers, side by side.
 *
 * Raw mode: each MIXER is built like a lane of `mixer` (the current dimensions and shared options,
 * plus its own after ':'), runs the whole stream from its prior state into a private trace, and
 * becomes one column. Model mode: every layer's core is swapped to MIXER in turn (`swap all`),
 * the tokens run with probes, and the cores are put back afterwards. The session's own trace and
 * position are left as they were in raw mode; a model goes back to position 0. */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "../core/opts.h"
#include "../models/model.h"
#include "../scenes/prompts.h"
#include "../scenes/raw.h"
#include "command.h"
#include "session.h"

#define MAXCMP  12
#define LABEL_W 24

typedef struct column {
    char name[64];
    int ok;
    char why[160]; /* when !ok */
    trace tr;
} column;

/* Mean, min, max, final of a series over tokens where mask allows (NULL: all), every head of one
 * layer. Returns the count. */
typedef struct stats {
    double mean, min, max, final;
    int n, argmax, first_above;
} stats;

static stats series_stats(const trace *tr, const char *name, int layer, const uint8_t *query,
                          int want_query, double above) {
    stats st = {NAN, NAN, NAN, NAN, 0, -1, -1};
    int k = trace_find(tr, name);
    if (k < 0 || layer >= tr->series[k].layers) return st;
    const trace_series *se = &tr->series[k];
    double sum = 0, mn = INFINITY, mx = -INFINITY;
    for (int64_t t = 0; t < tr->T; t++) {
        if (query && query[t] != want_query) continue;
        for (int h = 0; h < se->heads; h++) {
            float x = trace_at_lh(tr, k, t, layer, h)[0];
            if (isnan(x)) continue;
            if (st.first_above < 0 && !(x <= above)) st.first_above = (int)t;
            sum += x, st.n++;
            if (x < mn) mn = x;
            if (x > mx) mx = x, st.argmax = (int)t;
            if (t == tr->T - 1 && (h == 0 || x > st.final)) st.final = x;
        }
    }
    if (st.n) st.mean = sum / st.n, st.min = mn, st.max = mx;
    return st;
}

static void row_label(session *s, const char *label) {
    fprintf(s->out, "%-*s", LABEL_W, label);
}

static void cell(session *s, int w, double x) {
    if (isnan(x))
        fprintf(s->out, " %*s", w, "-");
    else
        fprintf(s->out, " %*.5g", w, x);
}

static void cell_text(session *s, int w, const char *t) {
    fprintf(s->out, " %*.*s", w, w, t);
}

/* The column width: the longest mixer label, at least 12. */
static int col_width(char **specs, int n) {
    int w = 12;
    for (int i = 0; i < n; i++)
        if ((int)strlen(specs[i]) > w) w = (int)strlen(specs[i]);
    return w > 40 ? 40 : w;
}

/* Splits "a,b,c" into at most n names. */
static int split_list(const char *v, char names[][32], int n) {
    int c = 0;
    for (const char *p = v; *p && c < n;) {
        const char *end = strchr(p, ',');
        size_t l = end ? (size_t)(end - p) : strlen(p);
        if (l && l < 32) memcpy(names[c], p, l), names[c][l] = '\0', c++;
        p += l + (end != NULL);
    }
    return c;
}

static void header(session *s, int w, column *col, int nc) {
    row_label(s, "");
    for (int c = 0; c < nc; c++) fprintf(s->out, " %*.*s", w, w, col[c].name);
    fputc('\n', s->out);
}

/* ---- raw mode ---- */

/* 1 when name is a probe of some mixer or one of the stream's own series. */
static int is_probe_name(const char *name) {
    static const char *const STREAM[] = {"recall_err", "key_norm", "out_norm", "recall", NULL};
    for (int i = 0; STREAM[i]; i++)
        if (!strcmp(STREAM[i], name)) return 1;
    for (int i = 0; i < mixer_count; i++)
        if (mixer_all[i] && mixer_probe_index(mixer_all[i], name) >= 0) return 1;
    return 0;
}

static int compare_raw(session *s, int nspec, char **specs, opts *o, err *e) {
    raw_mode *r = s->eng.raw;
    const raw_stream *st = &r->st;
    if (!st->T) return err_set(e, "compare: no stream (stream keys N, stream recall ...)");
    const char *plist = opts_str(o, "probe", "");
    const char *by = opts_str(o, "by", "");
    long bins, head;
    double tlo, thi;
    int has_tokens = opts_has(o, "tokens");
    if (opts_int(o, "bins", 4, &bins, e) || opts_int(o, "head", 0, &head, e) ||
        opts_range(o, "tokens", 0, 0, &tlo, &thi, e) || opts_check_unused(o, e))
        return err_prefix(e, "compare");
    if (bins < 1 || bins > 64) return err_set(e, "compare: bins=%ld must lie in 1..64", bins);
    if (head < 0 || head >= r->H) return err_set(e, "compare: head=%ld out of range", head);

    column col[MAXCMP];
    memset(col, 0, sizeof col);
    int w = col_width(specs, nspec);
    int rc = 0;
    for (int c = 0; c < nspec; c++) {
        column *C = &col[c];
        snprintf(C->name, sizeof C->name, "%s", specs[c]);
        trace_init(&C->tr);
        raw_lane L;
        err le = {{0}};
        if (raw_lane_build(&L, specs[c], r->shared, r->H, r->dk, r->dv, st->T, s->eng.chunk, &le)) {
            snprintf(C->why, sizeof C->why, "%s", le.msg);
            continue;
        }
        rc = engine_raw_run_all(&s->eng, &C->tr, &L, 1, st, e);
        raw_lane_free(&L);
        if (rc) break;
        C->ok = 1;
    }
    int nok = 0;
    for (int c = 0; c < nspec; c++) nok += col[c].ok;
    if (!rc && !nok) /* nothing compared is a failure, not a table of dashes */
        rc = err_set(e, "compare: no lane could run (%s: %s)", col[0].name, col[0].why);
    /* probe= names that are no probe at all */
    char pn[8][32];
    int npn = *plist ? split_list(plist, pn, 8) : 0;
    for (int i = 0; i < npn && !rc; i++)
        if (!is_probe_name(pn[i]))
            rc = err_set(e, "compare: probe=%.31s: no such probe (%s)", pn[i],
                         "state_norm, out_norm, rho, e_rel, r_norm, recall_err, ...");
    if (rc) {
        for (int c = 0; c < nspec; c++) trace_free(&col[c].tr);
        return -1;
    }
    fprintf(s->out, "compare on stream %s\n", st->desc);
    for (int c = 0; c < nspec; c++)
        if (!col[c].ok) fprintf(s->out, "  %s: %s\n", col[c].name, col[c].why);
    header(s, w, col, nspec);
    char lab[64];
    double limit = setting_blowup(s);
    if (st->nqueries) {
        const char *rl[3] = {"recall_err mean", "recall_err max", "recalled (< 0.1)"};
        for (int k = 0; k < 3; k++) {
            row_label(s, rl[k]);
            for (int c = 0; c < nspec; c++) {
                stats x = series_stats(&col[c].tr, "recall_err", 0, st->query, 1, 0.1);
                if (k == 2) {
                    int ok = 0, n = 0, si = trace_find(&col[c].tr, "recall_err");
                    for (int64_t t = 0; si >= 0 && t < col[c].tr.T; t++)
                        for (int h = 0; st->query[t] && h < r->H; h++) {
                            float v = trace_at_lh(&col[c].tr, si, t, 0, h)[0];
                            n++, ok += v < 0.1f;
                        }
                    char b[32];
                    snprintf(b, sizeof b, "%d/%d", ok, n);
                    cell_text(s, w, col[c].ok ? b : "-");
                } else {
                    cell(s, w, k == 0 ? x.mean : x.max);
                }
            }
            fputc('\n', s->out);
        }
    }
    char names[8][32];
    int np = *plist ? split_list(plist, names, 8) : 0;
    if (!np) {
        const char *def[] = {"state_norm", "out_norm", "rho", "e_rel", "r_norm"};
        for (int i = 0; i < 5; i++) snprintf(names[np++], 32, "%s", def[i]);
    }
    for (int i = 0; i < np; i++) {
        int any = 0;
        for (int c = 0; c < nspec; c++) any |= trace_find(&col[c].tr, names[i]) >= 0;
        if (!any) {
            if (*plist) fprintf(s->out, "  (no mixer here records '%s')\n", names[i]);
            continue;
        }
        int sn = !strcmp(names[i], "state_norm");
        const char *what[3] = {"mean (writes)", "final", "max"};
        for (int k = 0; k < (sn ? 3 : 1); k++) {
            snprintf(lab, sizeof lab, "%s %s", names[i], what[k]);
            row_label(s, lab);
            for (int c = 0; c < nspec; c++) {
                stats x =
                    series_stats(&col[c].tr, names[i], 0, k == 0 ? st->query : NULL, 0, INFINITY);
                cell(s, w, k == 0 ? x.mean : k == 1 ? x.final : x.max);
            }
            fputc('\n', s->out);
        }
        if (sn) {
            row_label(s, "blew up at token");
            for (int c = 0; c < nspec; c++) {
                stats x = series_stats(&col[c].tr, "state_norm", 0, NULL, 0, limit);
                char b[32];
                snprintf(b, sizeof b, "%d", x.first_above);
                cell_text(s, w, x.first_above >= 0 ? b : "-");
            }
            fputc('\n', s->out);
        }
    }

    /* by=PROBE: the first probe's mean over write tokens, in quantile bins of PROBE */
    if (*by) {
        const char *what = *plist ? names[0] : "rho";
        int kb = trace_find(&col[0].tr, by);
        if (kb < 0) {
            for (int c = 0; c < nspec; c++) trace_free(&col[c].tr);
            return err_set(e, "compare: by=%s: no such probe (key_norm, k_norm, ...)", by);
        }
        int n = 0;
        float *xs = malloc((size_t)st->T * r->H * sizeof *xs);
        for (int64_t t = 0; xs && t < col[0].tr.T; t++)
            for (int h = 0; h < r->H; h++) {
                float x = trace_at_lh(&col[0].tr, kb, t, 0, h)[0];
                if (!st->query[t] && !isnan(x)) xs[n++] = x;
            }
        /* bin edges at quantiles of the written tokens' values */
        double edge[65];
        if (xs && n) {
            for (int i = 1; i < n; i++) /* insertion sort: n is a stream length */
                for (int j = i; j > 0 && xs[j - 1] > xs[j]; j--) {
                    float tmp = xs[j];
                    xs[j] = xs[j - 1], xs[j - 1] = tmp;
                }
            for (int b = 0; b <= bins; b++) edge[b] = xs[(size_t)((double)b / bins * (n - 1))];
        }
        free(xs);
        fprintf(s->out, "%s mean over writes, by %s (quantile bins):\n", what, by);
        row_label(s, by);
        fprintf(s->out, " %6s", "tokens");
        for (int c = 0; c < nspec; c++) fprintf(s->out, " %*.*s", w, w, col[c].name);
        fputc('\n', s->out);
        for (int b = 0; n && b < bins; b++) {
            snprintf(lab, sizeof lab, "%.3g..%.3g", edge[b], edge[b + 1]);
            row_label(s, lab);
            int cnt = 0;
            double sums[MAXCMP] = {0};
            int cnts[MAXCMP] = {0};
            for (int64_t t = 0; t < col[0].tr.T; t++)
                for (int h = 0; h < r->H; h++) {
                    if (st->query[t]) continue;
                    float x = trace_at_lh(&col[0].tr, kb, t, 0, h)[0];
                    if (isnan(x) || x < edge[b] ||
                        (b < bins - 1 ? x >= edge[b + 1] : x > edge[b + 1]))
                        continue;
                    cnt++;
                    for (int c = 0; c < nspec; c++) {
                        int kw = trace_find(&col[c].tr, what);
                        if (kw < 0) continue;
                        float y = trace_at_lh(&col[c].tr, kw, t, 0, h)[0];
                        if (!isnan(y)) sums[c] += y, cnts[c]++;
                    }
                }
            fprintf(s->out, " %6d", cnt);
            for (int c = 0; c < nspec; c++) cell(s, w, cnts[c] ? sums[c] / cnts[c] : NAN);
            fputc('\n', s->out);
        }
    }

    /* tokens=A..B: the first probe per token at one head */
    if (has_tokens) {
        const char *what = *plist ? names[0] : "out_norm";
        int a = (int)tlo, b = (int)thi;
        if (a < 0) a = 0;
        if (b > st->T) b = st->T;
        fprintf(s->out, "%s at head %ld per token:\n", what, head);
        row_label(s, "token");
        for (int c = 0; c < nspec; c++) fprintf(s->out, " %*.*s", w, w, col[c].name);
        fputc('\n', s->out);
        for (int t = a; t < b; t++) {
            snprintf(lab, sizeof lab, "%d %s", t, st->query[t] ? "query" : "write");
            row_label(s, lab);
            for (int c = 0; c < nspec; c++) {
                int kw = trace_find(&col[c].tr, what);
                cell(s, w, kw < 0 ? NAN : trace_at_lh(&col[c].tr, kw, t, 0, (int)head)[0]);
            }
            fputc('\n', s->out);
        }
    }
    for (int c = 0; c < nspec; c++) trace_free(&col[c].tr);
    return 0;
}

/* ---- model mode ---- */

static double nll(const float *logits, int V, const int32_t *tokens, int T) {
    double sum = 0;
    for (int t = 0; t + 1 < T; t++) {
        const float *l = logits + (size_t)t * V;
        double mx = l[0], z = 0;
        for (int i = 1; i < V; i++) mx = l[i] > mx ? l[i] : mx;
        for (int i = 0; i < V; i++) z += exp((double)l[i] - mx);
        sum += mx + log(z) - l[tokens[t + 1]];
    }
    return T > 1 ? sum / (T - 1) : NAN;
}

/* Mean of a series over every layer, head and token. */
static double all_mean(const trace *tr, const char *name) {
    int k = trace_find(tr, name);
    if (k < 0) return NAN;
    const trace_series *se = &tr->series[k];
    double sum = 0;
    long n = 0;
    for (int64_t t = 0; t < tr->T; t++) {
        const float *b = trace_at(tr, k, t);
        for (int i = 0; i < se->layers * se->heads * se->width; i++)
            if (!isnan(b[i])) sum += b[i], n++;
    }
    return n ? sum / n : NAN;
}

static int compare_model(session *s, int nspec, char **specs, opts *o, err *e) {
    model *m = s->eng.model;
    if (!s->eng.tokens || !s->eng.ntokens)
        return err_set(e, "compare: no tokens (prompt ... or tokens FILE first)");
    if (opts_check_unused(o, e)) return err_prefix(e, "compare (model mode takes no options)");
    int T = s->eng.ntokens, V = m->c.vocab, NL = m->c.layers, w = col_width(specs, nspec);
    float *logits = malloc((size_t)T * V * sizeof *logits);
    column *col = calloc(MAXCMP, sizeof *col);
    double(*vals)[5] = calloc(MAXCMP, sizeof *vals);
    if (!logits || !col || !vals) {
        free(logits), free(col), free(vals);
        return err_set(e, "out of memory");
    }
    int task = s->task && s->task->n == T &&
               !memcmp(s->task->ids, s->eng.tokens, (size_t)T * sizeof *s->eng.tokens);
    int rc = 0;
    for (int c = 0; c < nspec && !rc; c++) {
        column *C = &col[c];
        snprintf(C->name, sizeof C->name, "%s", specs[c]);
        trace_init(&C->tr);
        int r = engine_try_cores(&s->eng, specs[c], &C->tr, logits, C->why, sizeof C->why, e);
        if (r < 0) rc = -1;
        if (r) continue;
        C->ok = 1;
        int corr = 0, sc = 0;
        vals[c][0] = nll(logits, V, s->eng.tokens, T);
        vals[c][1] = task ? task_accuracy(s->task, logits, V, T, &corr, &sc) : NAN;
        vals[c][2] = all_mean(&C->tr, "state_norm");
        vals[c][3] = all_mean(&C->tr, "mix_out_norm");
        vals[c][4] = all_mean(&C->tr, "resid_norm");
    }
    int nok = 0;
    for (int c = 0; c < nspec; c++) nok += col[c].ok;
    if (!rc && !nok)
        rc = err_set(e, "compare: no core could run (%s: %s)", col[0].name, col[0].why);
    if (!rc) {
        fprintf(s->out, "compare on %d tokens through %s (%d layers)%s\n", T,
                model_kind_name(m->c.kind), NL, task ? "" : " (no generated task: no accuracy)");
        if (task) fprintf(s->out, "task: %s\n", s->task->desc);
        for (int c = 0; c < nspec; c++)
            if (!col[c].ok) fprintf(s->out, "  %s: %s\n", col[c].name, col[c].why);
        header(s, w, col, nspec);
        const char *rows[5] = {"loss (nats/token)", "task accuracy", "state_norm mean",
                               "mix_out_norm mean", "resid_norm mean"};
        for (int k = 0; k < 5; k++) {
            if (k == 1 && !task) continue;
            row_label(s, rows[k]);
            for (int c = 0; c < nspec; c++) cell(s, w, col[c].ok ? vals[c][k] : NAN);
            fputc('\n', s->out);
        }
        fprintf(s->out, "cores restored; position back to 0\n");
    }
    for (int c = 0; c < nspec; c++) trace_free(&col[c].tr);
    free(logits), free(col), free(vals);
    return rc;
}

/* `compare device ...`: the same input on the CPU and the GPU (cli/cmd_diagnose.c). */
extern int diag_compare_device(session *s, int argc, char **argv, err *e);

static int run_compare(session *s, int argc, char **argv, const char *rest, err *e) {
    (void)rest;
    if (argc >= 2 && strcmp(argv[1], "device") == 0)
        return diag_compare_device(s, argc - 2, argv + 2, e);
    char *specs[MAXCMP], *kv[OPTS_MAX];
    int ns = 0, nk = 0;
    for (int i = 1; i < argc; i++) {
        const char *eq = strchr(argv[i], '='), *colon = strchr(argv[i], ':');
        if (!eq || (colon && colon < eq)) {
            if (ns == MAXCMP) return err_set(e, "compare: at most %d mixers", MAXCMP);
            specs[ns++] = argv[i];
        } else if (nk < OPTS_MAX) {
            kv[nk++] = argv[i];
        }
    }
    if (ns < 1)
        return err_set(e, "usage: compare MIXER [MIXER ...] [probe= by= bins= tokens= head=]");
    opts o;
    if (opts_parse(&o, nk, kv, e)) return err_prefix(e, "compare");
    int rc;
    if (engine_raw_active(&s->eng))
        rc = compare_raw(s, ns, specs, &o, e);
    else if (s->eng.model)
        rc = compare_model(s, ns, specs, &o, e);
    else
        rc = err_set(e, "compare: nothing to compare on (mixer ... + stream ..., or a model + "
                        "prompt)");
    opts_free(&o);
    return rc;
}

const command cmd_compare = {
    "compare",
    "MIXER[:k=v,...] ... [probe=P,P by=PROBE bins=4 tokens=A..B head=H]",
    "the same stream or prompt through several mixers, side by side",
    "Raw-mixer mode (after mixer and stream): each MIXER runs the whole stream from\n"
    "its prior state with the current dimensions and shared options (its own after\n"
    "':'), into its own trace; the session's trace and position are untouched. Rows,\n"
    "  one column per mixer:\n"
    "  recall_err mean / max, recalled (< 0.1)     over the query tokens (recall,\n"
    "                                              overwrite)\n"
    "  P mean (writes) for each probe of probe= (default state_norm out_norm rho\n"
    "  e_rel r_norm); state_norm also final, max and the token where it passed `set\n"
    "  blowup`.\n"
    "  by=PROBE [bins=4]   the first probe= (default rho) over writes in quantile\n"
    "                      bins of PROBE (key_norm: over- and under-correction by key\n"
    "                      norm)\n"
    "  tokens=A..B         the first probe= (default out_norm) per token at head=\n"
    "Model mode (a model and tokens): every layer's core is swapped to MIXER in turn,\n"
    "the tokens run with probes, and the cores are restored; rows: next-token loss,\n"
    "the task accuracy of a generated prompt (prompt mqar ...), mean state_norm,\n"
    "mix_out_norm and resid_norm.\n"
    "Examples:\n"
    "  compare gdn kaczmarz probe=rho,r_norm by=key_norm\n"
    "  compare kata:variant=m1 kata:variant=linear deltanet\n"
    "  compare gdn kaczmarz deltanet            (a gated_deltanet model and prompt\n"
    "                                           mqar)\n"
    "compare device [tol=1e-4] [tokens=N] [mode=step|prefill]: the same input on the\n"
    "CPU and the GPU, the first token where they differ (help diagnose).",
    1,
    -1,
    run_compare,
    COMPLETE_MIXER,
    "probe by bins tokens head"};
