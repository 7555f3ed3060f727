/* view_train.c: a training run against its steps (`view train`, `export png train FILE`).
 *
 * Top: the batch loss and the held-out loss (log scale), with ln(chance) when the accuracy series
 * says what chance is not known: the line is drawn only where it helps, at the first report's
 * held-out loss level. Middle: the held-out accuracy. Bottom: the gradient norm before clipping
 * (log scale). The x axis is the training step of each report. The series are those train/
 * history.h writes into the session's training trace; views never reach into the trainer. */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>

#include "plot.h"
#include "view.h"

/* x (steps) and y of series s over the reports, NaN-free pairs only; returns the count */
static int pairs(const trace *tr, int sx, int s, double *x, double *y) {
    int n = 0;
    for (int64_t t = 0; t < tr->T; t++) {
        double a = *trace_at(tr, sx, t), b = *trace_at(tr, s, t);
        if (isfinite(a) && isfinite(b)) x[n] = a, y[n] = b, n++;
    }
    return n;
}

/* one panel of up to two lines against the step */
static void panel(canvas *c, box b, const char *title, const char *ylabel, const trace *tr, int sx,
                  const int *s, const char *const *labels, int ns, int log, double ylo, double yhi,
                  unsigned flags) {
    double *x = malloc((size_t)(tr->T + 1) * sizeof *x), *y[2];
    y[0] = malloc((size_t)(tr->T + 1) * sizeof(double));
    y[1] = malloc((size_t)(tr->T + 1) * sizeof(double));
    double *xs[2] = {x, malloc((size_t)(tr->T + 1) * sizeof(double))};
    int n[2] = {0, 0};
    range rx, ry;
    range_init(&rx), range_init(&ry);
    for (int i = 0; i < ns; i++) {
        if (s[i] < 0) continue;
        n[i] = pairs(tr, sx, s[i], xs[i], y[i]);
        for (int j = 0; j < n[i]; j++) range_add(&rx, xs[i][j], 0), range_add(&ry, y[i][j], log);
    }
    if (ylo < yhi) range_add(&ry, ylo, log), range_add(&ry, yhi, log);
    axis ax = axis_fit(&rx, 0, 0, "step");
    ax.integer = 1;
    axis ay = axis_fit(&ry, log, 0, ylabel);
    plot pl;
    plot_begin(&pl, c, b.x, b.y, b.w, b.h, title, ax, ay, flags);
    legend_item li[2];
    int nl = 0;
    for (int i = 0; i < ns; i++) {
        if (!n[i]) continue;
        plot_xy(&pl, xs[i], y[i], n[i], STYLE_LINE, 1.8f, palette(i));
        if (n[i] < 40) plot_xy(&pl, xs[i], y[i], n[i], STYLE_MARKERS, 3.0f, palette(i));
        if (labels[i]) li[nl++] = (legend_item){labels[i], palette(i), STYLE_LINE};
    }
    if (!n[0] && !n[1]) plot_message(&pl, "no reports yet");
    if (nl > 1) plot_legend(&pl, li, nl, LEGEND_AUTO);
    plot_end(&pl);
    free(x), free(xs[1]), free(y[0]), free(y[1]);
}

static int draw(canvas *c, const trace *tr, view_params *p, err *e) {
    int sx = vu_series(tr, "train_step");
    if (sx < 0)
        return err_set(e, "view train: no training history (run `train MIXER ...` first, or give "
                          "run=DIR, a folder `train out=DIR` wrote)");
    p->shown_from = 0, p->shown_to = tr->T;
    p->layer = 0, p->head = 0, p->index = 0; /* one run: nothing to select */
    snprintf(p->mixer, sizeof p->mixer, "train");
    box area = vu_header(c, "training: loss, held-out accuracy, gradient norm", tr, p);
    box b0 = vu_cell(area, 3, 1, 0, 0), b1 = vu_cell(area, 3, 1, 1, 0),
        b2 = vu_cell(area, 3, 1, 2, 0);
    int sl[2] = {vu_series(tr, "train_loss"), vu_series(tr, "train_eval_loss")};
    const char *ll[2] = {"batch", "held-out"};
    panel(c, b0, "loss (mean cross-entropy at the scored positions)", "loss", tr, sx, sl, ll, 2, 2,
          0, 0, PLOT_NO_XTICKS);
    int sa[1] = {vu_series(tr, "train_accuracy")};
    const char *la[1] = {NULL};
    panel(c, b1, "held-out accuracy", "accuracy", tr, sx, sa, la, 1, 0, 0, 1, PLOT_NO_XTICKS);
    int sg[1] = {vu_series(tr, "train_grad_norm")};
    panel(c, b2, "gradient norm before clipping", "|g|", tr, sx, sg, la, 1, 2, 0, 0, 0);
    return 0;
}

const view view_train = {
    "train",
    "a training run: batch and held-out loss, held-out accuracy, gradient norm against the step",
    "run=DIR (a folder train out=DIR wrote; default: the session's last train)",
    draw,
    NULL,
    1,
};
