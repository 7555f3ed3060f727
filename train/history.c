/* history.c: the training history trace (history.h). */
#include "history.h"

#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "../core/fileio.h"

/* the columns of log.csv, in order, and their series */
static const char *const COLS[] = {"step", "loss", "eval_loss", "accuracy", "grad_norm", "lr"};
static const char *const MEANING[] = {
    "training step of the report",
    "mean cross-entropy of the step's batch over its scored positions",
    "mean cross-entropy on the held-out prompts",
    "held-out accuracy (argmax at the scored positions)",
    "global gradient norm before clipping",
    "learning rate of the step",
};
#define NCOLS 6

int train_history_init(trace *tr, err *e) {
    trace_free(tr);
    trace_init(tr);
    char name[32];
    for (int i = 0; i < NCOLS; i++) {
        snprintf(name, sizeof name, "train_%s", COLS[i]);
        if (trace_add_series(tr, name, MEANING[i], "train", 1, 1, 1, e) < 0) return -1;
    }
    return 0;
}

static int push_row(trace *tr, const double *v, err *e) {
    int64_t t = trace_push_token(tr, e);
    if (t < 0) return -1;
    for (int i = 0; i < NCOLS; i++) *trace_at(tr, i, t) = (float)v[i];
    return 0;
}

int train_history_push(trace *tr, const train_status *st, err *e) {
    if (!isfinite(st->acc) && !st->final) return 0;
    double v[NCOLS] = {st->step, st->loss, st->eval_loss, st->acc, st->grad_norm, st->lr};
    return push_row(tr, v, e);
}

int train_history_load(trace *tr, const char *path, err *e) {
    char csv[4200];
    size_t n = strlen(path);
    if (n > 4 && !strcmp(path + n - 4, ".csv"))
        snprintf(csv, sizeof csv, "%s", path);
    else
        snprintf(csv, sizeof csv, "%s/log.csv", path);
    char *text = NULL;
    size_t size = 0;
    if (file_read_all(csv, (size_t)64 << 20, &text, &size, e)) return -1;
    if (train_history_init(tr, e)) {
        free(text);
        return -1;
    }
    char *line = text, *next;
    int row = 0, rc = 0;
    for (; line && *line; line = next, row++) {
        next = strchr(line, '\n');
        if (next) *next++ = '\0';
        if (row == 0) {
            if (strncmp(line, "step,loss,eval_loss,accuracy,grad_norm,lr", 41)) {
                rc = err_set(e, "%s: line 1: not a train log (expected the header step,loss,...)",
                             csv);
                break;
            }
            continue;
        }
        if (!*line) continue;
        double v[NCOLS];
        char *p = line;
        for (int i = 0; i < NCOLS; i++) {
            char *end;
            if (*p == ',' || *p == '\0') {
                v[i] = NAN; /* an empty field: not evaluated at this step */
                end = p;
            } else {
                v[i] = strtod(p, &end);
                if (end == p) {
                    rc =
                        err_set(e, "%s: line %d: column %s is not a number", csv, row + 1, COLS[i]);
                    break;
                }
            }
            p = *end == ',' ? end + 1 : end;
        }
        if (rc || (rc = push_row(tr, v, e))) break;
    }
    free(text);
    if (!rc && tr->T == 0) rc = err_set(e, "%s: no rows", csv);
    return rc;
}
