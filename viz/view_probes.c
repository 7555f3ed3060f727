/* view_probes.c: any probe series.
 *
 * With probe=NAME: a one-value-per-head probe is drawn over tokens for the selected layer and head
 * (the other heads of that layer faint behind it), above a heatmap of every layer and head over
 * tokens; a wider probe ([dk], [dv] or Kalman's lanes) is a heatmap of its elements over tokens,
 * above the line of element `index`. Without a probe: small multiples of every per-head scalar
 * probe that has data at the selected layer. */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "plot.h"
#include "view.h"

/* v [rows][T] of series s over the shown tokens: rows are layer*heads + head (by_layer_head) or
 * the elements of the selected layer and head. NULL when there are no tokens or no memory. */
static float *gather(const trace *tr, const view_params *p, int s, int rows, int by_layer_head) {
    int64_t T = p->shown_to - p->shown_from;
    const trace_series *se = &tr->series[s];
    float *v = T > 0 ? malloc((size_t)rows * (size_t)T * sizeof *v) : NULL; /* [rows][T] */
    for (int i = 0; v && i < rows; i++)
        for (int64_t t = 0; t < T; t++)
            v[(size_t)i * (size_t)T + (size_t)t] =
                by_layer_head ? vu_at(tr, s, p->shown_from + t, i / se->heads, i % se->heads, 0)
                              : vu_at(tr, s, p->shown_from + t, p->layer, p->head, i);
    return v;
}

static int draw_one(canvas *c, const trace *tr, view_params *p, int s, err *e) {
    (void)e;
    const trace_series *se = &tr->series[s];
    vu_select(tr, s, p);
    vu_note_mixer(p, tr, s);
    char title[200];
    snprintf(title, sizeof title, "probe %s (%s): %s", se->name, se->source, se->meaning);
    box area = vu_header(c, title, tr, p);
    box top = vu_cell(area, 2, 1, 0, 0), bot = vu_cell(area, 2, 1, 1, 0);
    plot pl;
    char t1[160];
    if (se->width == 1) {
        vu_line L[65];
        int n = 0;
        for (int h = 0; h < se->heads && n < 64; h++) {
            if (h == p->head) continue;
            rgba faint = rgb(200, 200, 200);
            L[n++] = (vu_line){s, p->layer, h, 0, NULL, faint, STYLE_LINE, 1.0f, 0};
        }
        char lab[64];
        snprintf(lab, sizeof lab, "head %d", p->head);
        L[n++] = (vu_line){s,          p->layer,   p->head, 0, se->heads > 1 ? lab : NULL,
                           palette(0), STYLE_LINE, 1.8f,    0};
        if (se->heads > 1)
            snprintf(t1, sizeof t1, "%s, layer %d (other heads grey)", se->name, p->layer);
        else
            snprintf(t1, sizeof t1, "%s, layer %d", se->name, p->layer);
        vu_lines(&pl, c, top, t1, se->name, tr, p, L, n, NULL, 0, 1, 0);
        plot_end(&pl);
        snprintf(t1, sizeof t1, "%s for every layer × head (row = layer · %d + head)", se->name,
                 se->heads);
        float *v = gather(tr, p, s, se->layers * se->heads, 1);
        vu_heatmap_tokens(c, bot, t1, "layer·head", p, v, se->layers * se->heads, VU_AUTO,
                          se->name);
        free(v);
    } else {
        if (p->index >= se->width) p->index = se->width - 1;
        if (p->index < 0) p->index = 0;
        snprintf(t1, sizeof t1, "%s elements over tokens, layer %d head %d", se->name, p->layer,
                 p->head);
        float *v = gather(tr, p, s, se->width, 0);
        vu_heatmap_tokens(c, top, t1, "element", p, v, se->width, VU_AUTO, se->name);
        free(v);
        snprintf(t1, sizeof t1, "%s[%d] (index=%d)", se->name, p->index, p->index);
        vu_line l = {s, p->layer, p->head, p->index, NULL, palette(0), STYLE_LINE, 1.8f, 0};
        vu_lines(&pl, c, bot, t1, se->name, tr, p, &l, 1, NULL, 0, 1, 0);
        plot_end(&pl);
    }
    return 0;
}

static int draw(canvas *c, const trace *tr, view_params *p, err *e) {
    if (tr->nseries == 0)
        return err_set(e, "view probes: the trace is empty (run a mixer or a model first)");
    if (p->probe[0]) {
        int s = vu_series(tr, p->probe);
        if (s < 0) {
            char names[400] = "";
            for (int i = 0; i < tr->nseries && strlen(names) < 300; i++)
                snprintf(names + strlen(names), sizeof names - strlen(names), "%s%s", i ? " " : "",
                         tr->series[i].name);
            return err_set(e, "view probes: no probe '%.60s' in the trace (have: %s)", p->probe,
                           names);
        }
        return draw_one(c, tr, p, s, e);
    }
    /* overview: every scalar series with data at the selected layer */
    vu_select(tr, -1, p);
    int idx[20], n = 0;
    for (int i = 0; i < tr->nseries && n < 20; i++) {
        const trace_series *se = &tr->series[i];
        if (se->width != 1 || p->layer >= se->layers || p->head >= se->heads) continue;
        int any = 0;
        for (int64_t t = p->shown_from; t < p->shown_to && !any; t++)
            any = isfinite(vu_at(tr, i, t, p->layer, p->head, 0));
        if (any || p->shown_to == p->shown_from) idx[n++] = i, vu_note_mixer(p, tr, i);
    }
    box area = vu_header(c, "probes: every per-head scalar series", tr, p);
    if (n == 0) {
        vu_message(c, area, "no scalar probe has data at this layer and head");
        return 0;
    }
    int cols = n <= 4 ? 2 : (n <= 9 ? 3 : (n <= 16 ? 4 : 5));
    int rows = (n + cols - 1) / cols;
    for (int k = 0; k < n; k++) {
        box b = vu_cell(area, rows, cols, k / cols, k % cols);
        plot pl;
        vu_line l = {idx[k], p->layer, p->head, 0, NULL, palette(0), STYLE_LINE, 1.4f, 0};
        vu_lines(&pl, c, b, tr->series[idx[k]].name, NULL, tr, p, &l, 1, NULL, 0, 1,
                 k / cols == rows - 1 || k + cols >= n ? 0 : PLOT_NO_XTICKS);
        plot_end(&pl);
    }
    return 0;
}

const view view_probes = {
    "probes",
    "any probe series over tokens (probe=NAME), or small multiples of every scalar probe",
    "probe=NAME index=I",
    draw,
    NULL,
    0,
};
