/* view_recall.c: how well the state at token t reads back the value of every earlier key i.
 *
 * Reads the "recall" series (viz/recall.h: entry j at token t is |S_t^T k_(t-j) - v_(t-j)| /
 * |v_(t-j)|, for the last RECALL_WINDOW keys). Top: the t x i heatmap (x: the state's token t,
 * y: the key's token i <= t; 0 = read back exactly, 1 = nothing left). Below: the readback of
 * every key by the latest state, and the mean readback error over the keys in the window per t. */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>

#include "plot.h"
#include "recall.h"
#include "view.h"

#define RECALL_SHOWN 1536

static int draw(canvas *c, const trace *tr, view_params *p, err *e) {
    int s = vu_series(tr, "recall");
    if (s < 0)
        return err_set(e, "view recall: the trace has no 'recall' series (it is recorded while "
                          "stepping a mixer whose state is [dk, dv]: gdn, deltanet, kaczmarz, "
                          "gla, mamba2)");
    vu_select(tr, s, p);
    /* the heatmap is T x T: beyond RECALL_SHOWN tokens show the latest ones */
    if (p->shown_to - p->shown_from > RECALL_SHOWN) p->shown_from = p->shown_to - RECALL_SHOWN;
    vu_note_mixer(p, tr, vu_series(tr, "k"));
    const trace_series *se = &tr->series[s];
    int W = se->width;
    box area = vu_header(
        c, "recall: readback error ‖S_{t}ᵀk_{i} − v_{i}‖ / ‖v_{i}‖ of earlier keys", tr, p);
    box top = {area.x, area.y, area.w, area.h * 58 / 100};
    box bl = {area.x, top.y + top.h + 14, area.w / 2 - 7, area.h - top.h - 14};
    box br = {area.x + area.w / 2 + 7, bl.y, area.w / 2 - 7, bl.h};
    int64_t from = p->shown_from, to = p->shown_to, T = to - from;

    /* heatmap: rows = key token i in [from, to), columns = state token t */
    float *v = T > 0 ? malloc((size_t)T * (size_t)T * sizeof *v) : NULL; /* [i][t] */
    float *last = T > 0 ? malloc((size_t)T * sizeof *last) : NULL;       /* [i] */
    float *mean = T > 0 ? malloc((size_t)T * sizeof *mean) : NULL;       /* [t] */
    if (T > 0 && (!v || !last || !mean)) {
        free(v), free(last), free(mean);
        return err_set(e, "view recall: out of memory for %lld tokens", (long long)T);
    }
    for (int64_t t = 0; t < T; t++) {
        double acc = 0;
        int n = 0;
        for (int64_t i = 0; i < T; i++) {
            int64_t j = t - i;
            float x = j >= 0 && j < W ? vu_at(tr, s, from + t, p->layer, p->head, (int)j) : NAN;
            v[(size_t)i * (size_t)T + (size_t)t] = x;
            if (isfinite(x)) acc += x, n++;
        }
        mean[t] = n ? (float)(acc / n) : NAN;
    }
    for (int64_t i = 0; i < T; i++) last[i] = v[(size_t)i * (size_t)T + (size_t)(T - 1)];

    plot pl;
    int cbw = 92;
    axis ax = {
        (double)from - 0.5, (double)(T > 0 ? to : from + 1) - 0.5, 0, 0, "state after token t", 0};
    axis ay = {(double)from - 0.5, (double)(T > 0 ? to : from + 1) - 0.5, 0, 1, "key token i", 0};
    plot_begin(
        &pl, c, top.x, top.y, top.w - cbw, top.h,
        "readback error of key i from the state after token t (dark: recalled, yellow: lost)", ax,
        ay, PLOT_NO_GRID);
    if (T > 0) {
        plot_heatmap(&pl, v, (int)T, (int)T, T, 1, (double)from, 1, (double)from, 1, CMAP_VIRIDIS,
                     0, 1, 0);
        if (T > W) {
            char lab[64];
            snprintf(lab, sizeof lab, "keys older than %d tokens are not tracked", W);
            plot_message(&pl, lab);
        }
    } else
        plot_message(&pl, "no tokens yet");
    /* edits of this layer and head (engine/interv.h): a line where the state was edited, between
     * the state after token pos - 1 (before) and after token pos, and a mark at the edited key */
    int ki = trace_find_snapshot(tr, "interventions");
    const float *iv = ki >= 0 ? trace_snapshot_at(tr, ki, 0, 0) : NULL;
    for (int n = iv ? (int)iv[0] : 0, i = 0; i < n; i++) {
        const float *r = iv + (size_t)(1 + i) * 5;
        int kind = (int)r[1], pos = (int)r[0], key = (int)r[4];
        if (kind > 1 || (int)r[2] != p->layer || (int)r[3] != p->head) continue; /* edits only */
        if (pos <= from || pos >= to) continue;
        char lab[48];
        snprintf(lab, sizeof lab, "%s key %d", kind == 0 ? "erase" : "write", key);
        plot_vline(&pl, pos - 0.5, palette(3), STYLE_DASHED, lab);
        double xs[1] = {pos - 0.5}, ys[1] = {key};
        if (key >= from && key < to) plot_xy(&pl, xs, ys, 1, STYLE_MARKERS, 7.0f, palette(3));
    }
    plot_end(&pl);
    plot_colorbar(c, top.x + top.w - cbw + 34, pl.y - 8, cbw - 34, pl.h + 16, CMAP_VIRIDIS, 0, 1, 0,
                  "error (≥ 1 saturates)");
    vu_note_crange(p, "recall error", 0, 1, 0);

    range r;
    range_init(&r);
    for (int64_t i = 0; i < T; i++) range_add(&r, last[i], 0);
    range_add(&r, 0, 0), range_add(&r, 1, 0);
    axis ai = {(double)from - 0.5, (double)(T > 0 ? to : from + 1) - 0.5, 0, 0, "key token i", 0};
    char t1[96];
    snprintf(t1, sizeof t1, "readback by the latest state (t = %lld)", (long long)(to - 1));
    plot_begin(&pl, c, bl.x, bl.y, bl.w, bl.h, t1, ai, axis_fit(&r, 0, 0, "error"), 0);
    if (T > 0) plot_series(&pl, last, 1, T, (double)from, 1, STYLE_LINE, 1.6f, palette(0));
    plot_hline(&pl, 1, theme_faint(), STYLE_DASHED, "1: nothing recalled");
    plot_end(&pl);

    range_init(&r);
    for (int64_t t = 0; t < T; t++) range_add(&r, mean[t], 0);
    range_add(&r, 0, 0);
    axis at = {(double)from - 0.5, (double)(T > 0 ? to : from + 1) - 0.5, 0, 0, "token t", 0};
    plot_begin(&pl, c, br.x, br.y, br.w, br.h, "mean readback error over the keys so far", at,
               axis_fit(&r, 0, 0, "mean error"), 0);
    if (T > 0) plot_series(&pl, mean, 1, T, (double)from, 1, STYLE_LINE, 1.6f, palette(1));
    plot_end(&pl);
    free(v), free(last), free(mean);
    return 0;
}

const view view_recall = {
    "recall", "t × i heatmap of how well the state after token t reads back the value of key i",
    "",       draw,
    "recall", 0,
};
