/* cmd_show.c: `show PROBE` (a probe's numbers as a table), `show state` (the state matrix), `show`
 * (the probes recorded), and `figure VIEW FILE` (a PNG always, a live window too when a display
 * and a terminal are there: how scenes write figures and still demo live). */
#include <limits.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>

#include "../core/opts.h"
#include "../scenes/raw.h"
#include "../viz/window.h"
#include "../core/names.h"
#include "../engine/interv.h"
#include "../models/tokenizer.h"
#include "command.h"
#include "session.h"

/* Completion of probe names (cli/repl.c): the series of the session's trace. */
const char *const *session_probe_names(session *s) {
    static const char *names[257];
    int n = 0;
    if (s)
        for (int i = 0; i < s->eng.tr.nseries && n < 255; i++)
            names[n++] = s->eng.tr.series[i].name;
    if (s && trace_find_snapshot(&s->eng.tr, "state") >= 0) names[n++] = "state";
    names[n] = NULL;
    return names;
}

static void list_probes(session *s) {
    const trace *tr = &s->eng.tr;
    fprintf(s->out, "%d probe series over %lld tokens (show PROBE for the numbers):\n", tr->nseries,
            (long long)tr->T);
    for (int i = 0; i < tr->nseries; i++) {
        const trace_series *se = &tr->series[i];
        char shape[48];
        snprintf(shape, sizeof shape, "[%d][%d][%d]", se->layers, se->heads, se->width);
        fprintf(s->out, "  %-18s %-9s %-14s %s\n", se->name, se->source, shape, se->meaning);
    }
    for (int i = 0; i < tr->nsnap; i++)
        fprintf(s->out, "  %-18s %-9s [%d][%d][%d x %d] %s\n", tr->snaps[i].name, "snapshot",
                tr->snaps[i].layers, tr->snaps[i].heads, tr->snaps[i].rows, tr->snaps[i].cols,
                strcmp(tr->snaps[i].name, "state") ? "latest attention rows (view parallax)"
                                                   : "latest value (show state)");
}

static void print_num_w(FILE *f, float x, int w) {
    if (isnan(x))
        fprintf(f, " %*s", w, "-");
    else
        fprintf(f, " %*.5g", w, x);
}

static void print_num(FILE *f, float x) {
    print_num_w(f, x, 11);
}

static int show_state(session *s, long layer, long head, err *e) {
    int k = trace_find_snapshot(&s->eng.tr, "state");
    if (k < 0 || s->eng.tr.snaps[k].t < 0)
        return err_set(e, "show state: no state recorded yet (step first)");
    const trace_snapshot *sn = &s->eng.tr.snaps[k];
    if (layer < 0) layer = 0;
    if (head < 0) head = 0;
    if (layer >= sn->layers || head >= sn->heads)
        return err_set(e, "show state: layer %ld head %ld out of range (%d layers, %d heads)",
                       layer, head, sn->layers, sn->heads);
    const float *S = trace_snapshot_at(&s->eng.tr, k, (int)layer, (int)head);
    char lab[64];
    fprintf(s->out, "state of layer %ld (%s) head %ld after token %lld: %d x %d", layer,
            session_layer_label(s, (int)layer, lab, sizeof lab), head, (long long)sn->t, sn->rows,
            sn->cols);
    int rmax = sn->rows > 16 ? 16 : sn->rows, cmax = sn->cols > 10 ? 10 : sn->cols;
    if (rmax < sn->rows || cmax < sn->cols) fprintf(s->out, " (first %d x %d shown)", rmax, cmax);
    double fro = 0;
    for (int i = 0; i < sn->rows * sn->cols; i++) fro += (double)S[i] * S[i];
    fprintf(s->out, ", Frobenius norm %.6g\n", sqrt(fro));
    fprintf(s->out, "%5s", "");
    for (int c = 0; c < cmax; c++) fprintf(s->out, " %11d", c);
    fputc('\n', s->out);
    for (int r = 0; r < rmax; r++) {
        fprintf(s->out, "%5d", r);
        for (int c = 0; c < cmax; c++) print_num(s->out, S[(size_t)r * sn->cols + c]);
        fputc('\n', s->out);
    }
    return 0;
}

/* show attribution token=i [layer= head= top=]: the writes that make up o_i. */
static int show_attribution(session *s, int argc, char **argv, err *e) {
    opts o;
    if (opts_parse(&o, argc - 2, argv + 2, e)) return err_prefix(e, "show attribution");
    long layer, head, token, top;
    int rc = opts_int_in(&o, "layer", 0, 0, INT_MAX, &layer, e) ||
             opts_int_in(&o, "head", 0, 0, INT_MAX, &head, e) ||
             opts_int_in(&o, "token", -1, 0, INT_MAX, &token, e) ||
             opts_int_in(&o, "top", 10, 1, 1000, &top, e) || opts_check_unused(&o, e);
    opts_free(&o);
    if (rc) return err_prefix(e, "show attribution");
    int T = engine_pos(&s->eng);
    if (token < 0) token = T - 1;
    if (token >= T && T > 0)
        return err_set(e, "show attribution: token=%ld: the tokens run are 0..%d", token, T - 1);
    if (engine_attribution(&s->eng, (int)layer, (int)head, e)) return -1;
    const trace *tr = &s->eng.tr;
    int km = trace_find_snapshot(tr, "attribution"),
        kd = trace_find_snapshot(tr, "attribution_decay");
    int ko = trace_find_snapshot(tr, "attribution_oinit"),
        kv = trace_find_snapshot(tr, "attribution_vnorm");
    const float *M = trace_snapshot_at(tr, km, 0, 0) + (size_t)token * T;
    const float *Md = trace_snapshot_at(tr, kd, 0, 0) + (size_t)token * T;
    const float *vn = trace_snapshot_at(tr, kv, 0, 0);
    const float *oi = trace_snapshot_at(tr, ko, 0, 0) + (size_t)token * tr->snaps[ko].cols;
    double on = 0, sum_abs = 0;
    for (int c = 0; c < tr->snaps[ko].cols; c++) on += (double)oi[c] * oi[c];
    int *idx = malloc((size_t)(token + 1) * sizeof *idx);
    if (!idx) return err_set(e, "out of memory");
    for (int j = 0; j <= token; j++) idx[j] = j, sum_abs += fabs(M[j]) * vn[j];
    /* the largest |M_ij| |v_j| first (insertion into the top list) */
    int n = (int)(top < token + 1 ? top : token + 1);
    for (int a = 0; a < n; a++) {
        int b = a;
        for (int j = a + 1; j <= token; j++)
            if (fabs(M[idx[j]]) * vn[idx[j]] > fabs(M[idx[b]]) * vn[idx[b]]) b = j;
        int t = idx[a];
        idx[a] = idx[b], idx[b] = t;
    }
    char lab[64], tb[32];
    fprintf(s->out,
            "attribution, %s head %ld: o_%ld = sum_j M_%ld,j v_j + o_init (|o_init| %.4g); the %d "
            "largest writes of %ld:\n",
            session_layer_label(s, (int)layer, lab, sizeof lab), head, token, token, sqrt(on), n,
            token + 1);
    fprintf(s->out, "  %6s %-8s %12s %12s %12s %12s %8s\n", "j", "token", "M_ij", "decay-only",
            "key removal", "|M_ij v_j|", "share");
    for (int a = 0; a < n; a++) {
        int j = idx[a];
        const char *tok = "";
        if (!engine_raw_active(&s->eng) && s->eng.tokens)
            tok = session_tok(s, s->eng.tokens[j], tb, sizeof tb);
        else if (engine_raw_active(&s->eng))
            tok = s->eng.raw->st.query[j] ? "query" : "write";
        fprintf(s->out, "  %6d %-8s %12.5g %12.5g %12.5g %12.5g %7.1f%%\n", j, tok, M[j], Md[j],
                M[j] - Md[j], fabs(M[j]) * vn[j],
                sum_abs > 0 ? 100.0 * fabs(M[j]) * vn[j] / sum_abs : 0.0);
    }
    free(idx);
    return 0;
}

static int run_show(session *s, int argc, char **argv, const char *rest, err *e) {
    (void)rest;
    if (argc == 1) {
        list_probes(s);
        return 0;
    }
    if (!strcmp(argv[1], "attribution")) return show_attribution(s, argc, argv, e);
    opts o;
    if (opts_parse(&o, argc - 2, argv + 2, e)) return err_prefix(e, "show");
    long layer, head, from, to, index;
    int rc = opts_int_in(&o, "layer", -1, 0, INT_MAX, &layer, e) ||
             opts_int_in(&o, "head", -1, 0, INT_MAX, &head, e) ||
             opts_int_in(&o, "from", 0, 0, INT_MAX, &from, e) ||
             opts_int_in(&o, "to", -1, 0, INT_MAX, &to, e) ||
             opts_int_in(&o, "index", 0, 0, INT_MAX, &index, e) || opts_check_unused(&o, e);
    opts_free(&o);
    if (rc) return err_prefix(e, "show");
    if (!strcmp(argv[1], "state")) return show_state(s, layer, head, e);
    const trace *tr = &s->eng.tr;
    int k = trace_find(tr, argv[1]);
    if (k < 0) {
        if (!tr->nseries)
            return err_set(e, "show: nothing recorded yet (step or run a model or a stream)");
        char names[400] = "";
        const char *cand[256];
        int nc = 0;
        for (int i = 0; i < tr->nseries && nc < 256; i++) cand[nc++] = tr->series[i].name;
        const char *near = names_closest(argv[1], cand, nc);
        if (near) return err_set(e, "show: no probe '%.60s' (did you mean %s?)", argv[1], near);
        for (int i = 0; i < tr->nseries && strlen(names) < 330; i++) {
            size_t u = strlen(names);
            snprintf(names + u, sizeof names - u, "%s%s", i ? " " : "", tr->series[i].name);
        }
        return err_set(e, "show: no probe '%.60s' (have: %s)", argv[1], names);
    }
    const trace_series *se = &tr->series[k];
    if (layer >= se->layers || head >= se->heads)
        return err_set(e, "show: '%s' has %d layers and %d heads", se->name, se->layers, se->heads);
    if (from < 0 || (to >= 0 && to <= from))
        return err_set(e, "show: need 0 <= from < to (got from=%ld to=%ld)", from, to);
    int64_t f = from > tr->T ? tr->T : from, t = to < 0 || to > tr->T ? tr->T : to;
    if (t <= f)
        return err_set(e, "show: no tokens in %lld..%lld (%lld recorded)", (long long)f,
                       (long long)t - 1, (long long)tr->T);

    /* Columns: width-1 probes show every head (or layers side by side, when one head is
     * picked or there is only one); wider probes show the elements of one head. */
    enum { MAXCOL = 8 };
    int cl[MAXCOL], ch[MAXCOL], ci[MAXCOL], nc = 0;
    char hdr[MAXCOL][40];
    int by_layer = se->width == 1 && layer < 0 && se->layers > 1 && (head >= 0 || se->heads == 1);
    int L0 = layer < 0 ? 0 : (int)layer, H0 = head < 0 ? 0 : (int)head;
    char lab[64];
    if (by_layer) {
        for (int l = 0; l < se->layers && nc < MAXCOL; l++, nc++) {
            cl[nc] = l, ch[nc] = H0, ci[nc] = 0;
            snprintf(hdr[nc], sizeof hdr[nc], "%.32s", session_layer_label(s, l, lab, sizeof lab));
        }
    } else if (se->width == 1) {
        for (int h = head < 0 ? 0 : H0; h < (head < 0 ? se->heads : H0 + 1) && nc < MAXCOL;
             h++, nc++) {
            cl[nc] = L0, ch[nc] = h, ci[nc] = 0;
            snprintf(hdr[nc], sizeof hdr[nc], "h%d", h);
        }
    } else {
        if (index < 0 || index >= se->width) index = 0;
        for (int i = (int)index; i < se->width && nc < MAXCOL; i++, nc++) {
            cl[nc] = L0, ch[nc] = H0, ci[nc] = i;
            snprintf(hdr[nc], sizeof hdr[nc], "[%d]", i);
        }
    }
    if (by_layer)
        fprintf(s->out, "%s (layers side by side, head %d", se->name, H0);
    else
        fprintf(s->out, "%s (%s, layer %d %s", se->name, se->source, L0,
                session_layer_label(s, L0, lab, sizeof lab));
    if (!by_layer && (se->width > 1 || head >= 0)) fprintf(s->out, ", head %d", H0);
    if (se->width > 1)
        fprintf(s->out, ", elements %ld..%d of %d", index, (int)index + nc - 1, se->width);
    fprintf(s->out, "): %s\n", se->meaning);
    /* columns as wide as the widest lane name (parallax:rscale=0.5 is not cut to parallax:rs) */
    int cw = 11;
    for (int c = 0; c < nc; c++)
        if ((int)strlen(hdr[c]) > cw) cw = (int)strlen(hdr[c]);
    fprintf(s->out, "%7s", "token");
    for (int c = 0; c < nc; c++) fprintf(s->out, " %*s", cw, hdr[c]);
    fputc('\n', s->out);

    int rows = setting_rows(s);
    int64_t n = t - f, skip_from = t, skip_to = t;
    if (rows > 0 && n > rows && to < 0 && from == 0) /* head and tail of a long series */
        skip_from = f + rows / 2, skip_to = t - (rows - rows / 2);
    else if (rows > 0 && n > rows)
        skip_from = f + rows, skip_to = t; /* an explicit range: its first rows */
    double mn[MAXCOL], mx[MAXCOL], sum[MAXCOL];
    int cnt[MAXCOL];
    for (int c = 0; c < nc; c++) mn[c] = INFINITY, mx[c] = -INFINITY, sum[c] = 0, cnt[c] = 0;
    for (int64_t tok = f; tok < t; tok++) {
        int print = tok < skip_from || tok >= skip_to;
        if (tok == skip_from && skip_to > skip_from)
            fprintf(s->out, "%7s (%lld rows; set rows all, or from= to=)\n", "...",
                    (long long)(skip_to - skip_from));
        if (print) fprintf(s->out, "%7lld", (long long)tok);
        for (int c = 0; c < nc; c++) {
            float x = trace_at_lh(tr, k, tok, cl[c], ch[c])[ci[c]];
            if (print) print_num_w(s->out, x, cw);
            if (!isnan(x)) {
                if (x < mn[c]) mn[c] = x;
                if (x > mx[c]) mx[c] = x;
                sum[c] += x, cnt[c]++;
            }
        }
        if (print) fputc('\n', s->out);
    }
    const char *stat[3] = {"min", "mean", "max"};
    for (int r = 0; r < 3; r++) {
        fprintf(s->out, "%7s", stat[r]);
        for (int c = 0; c < nc; c++)
            print_num_w(s->out,
                        !cnt[c]  ? NAN
                        : r == 0 ? (float)mn[c]
                        : r == 1 ? (float)(sum[c] / cnt[c])
                                 : (float)mx[c],
                        cw);
        fputc('\n', s->out);
    }
    return 0;
}

const command cmd_show = {
    "show",
    "[PROBE|state|attribution] [layer= head= from= to= index= token= top=]",
    "a probe's numbers as a table (tokens x heads, layers or elements)",
    "  show                the recorded probe series: name, source,\n"
    "                      [layers][heads][width], meaning\n"
    "  show PROBE [layer=L head=H from=A to=B index=I]\n"
    "      one row per token, then min, mean and max over the range. A scalar probe\n"
    "      shows every head of layer L (default 0); with head=H, or with one head,\n"
    "      every layer side by side (in raw-mixer mode the lanes, e.g. gdn beside\n"
    "      kaczmarz). A wider probe (Kalman's per-lane values, o_hat) shows 8\n"
    "      elements of one head from index I. '-' is a value not recorded (recall_err\n"
    "      on writes). Long series print their head and tail (set rows).\n"
    "  show state [layer=L head=H]\n"
    "      the latest state matrix of a layer and head (its top-left 16 x 10) and its\n"
    "      norm.\n"
    "  show attribution [token=i layer=L head=H top=10]\n"
    "      the writes that make up the core's output at token i (default the last):\n"
    "      o_i = sum_j M_ij v_j + o_init exactly, decay and key removal included\n"
    "      (replay ... attribution=1 for files); each j with M_ij, its decay-only\n"
    "      part, what the key removal changes, |M_ij v_j| and its share. gdn,\n"
    "      deltanet, kaczmarz, gla, mamba2, softmax, parallax. view attribution\n"
    "      draws M; export csv attribution writes it.\n"
    "Examples: show rho   show recall_err head=0   show lambda index=8\n"
    "          show state",
    0,
    -1,
    run_show,
    COMPLETE_PROBE,
    "layer head from to index token top"};

/* ---- figure ---- */

static int make_parent(const char *path, err *e) {
    char buf[512];
    if (snprintf(buf, sizeof buf, "%s", path) >= (int)sizeof buf)
        return err_set(e, "path too long");
    char *slash = strrchr(buf, '/');
    if (!slash || slash == buf) return 0;
    *slash = '\0';
    return session_make_dirs(buf, e);
}

/* Appends " word" to a command line, quoted when it holds a space or a quote. */
static void append_word(char *buf, size_t n, const char *w) {
    size_t u = strlen(buf);
    int q = strpbrk(w, " \t;#'") != NULL;
    snprintf(buf + u, n - u, q ? " \"%s\"" : " %s", w);
}

static int run_figure(session *s, int argc, char **argv, const char *rest, err *e) {
    (void)rest;
    if (make_parent(argv[2], e)) return err_prefix(e, "figure");
    /* the format from the file's extension: .svg, .pdf, else PNG */
    const char *dot = strrchr(argv[2], '.');
    const char *fmt = dot && !strcasecmp(dot, ".svg")   ? "svg"
                      : dot && !strcasecmp(dot, ".pdf") ? "pdf"
                                                        : "png";
    char cmd[2048];
    snprintf(cmd, sizeof cmd, "export %s", fmt);
    for (int i = 1; i < argc; i++) append_word(cmd, sizeof cmd, argv[i]);
    if (command_exec(s, cmd, e)) return -1;
    char why[256];
    if (!s->interactive || s->batch || !window_display_ok(why, sizeof why)) return 0;
    /* a display and a person at the terminal: the same view live (window sizes stay default) */
    snprintf(cmd, sizeof cmd, "view %s", argv[1]);
    for (int i = 3; i < argc; i++)
        if (strncmp(argv[i], "width=", 6) && strncmp(argv[i], "height=", 7) &&
            strncmp(argv[i], "demo=", 5))
            append_word(cmd, sizeof cmd, argv[i]);
    return command_exec(s, cmd, e);
}

const command cmd_figure = {
    "figure",
    "VIEW FILE.png|.svg|.pdf [layer= head= from= to= width= height= scale=]",
    "write a view to PNG, SVG or PDF; at a terminal with a display, show it too",
    "Runs `export png|svg|pdf VIEW FILE ...` (the format from FILE's extension, PNG\n"
    "when it has none of those; FILE's folder created), then, in the interactive\n"
    "REPL with a display, `view VIEW ...` too. Scenes use it so the same script\n"
    "writes its figures headless (make test, no display) and shows windows in a live\n"
    "demo.\n"
    "Example: figure kaczmarz $outdir/kaczmarz-vs-gdn.png head=0",
    2,
    -1,
    run_figure,
    COMPLETE_VIEW | COMPLETE_FILE,
    "layer head from to index probe dim seed width height scale dpi x y"};
