/* history.h: a training run's reports as a trace, for `view train` and `export png train`.
 *
 * One "token" of the trace is one report (a log line of `train`, a row of DIR/log.csv); every
 * series is [1][1][1]: train_step (the step), train_loss (the batch loss), train_eval_loss and
 * train_accuracy (held-out; NaN when not evaluated), train_grad_norm (before clipping), train_lr.
 * The session keeps it apart from the probe trace, so running tokens after training keeps it. */
#ifndef MIXSCOPE_TRAIN_HISTORY_H
#define MIXSCOPE_TRAIN_HISTORY_H

#include "../core/err.h"
#include "../core/trace.h"
#include "train.h"

/* Empties tr and defines the series. */
int train_history_init(trace *tr, err *e);
/* Appends one report (a report without a held-out evaluation is skipped unless it is final). */
int train_history_push(trace *tr, const train_status *st, err *e);
/* Replaces tr with PATH/log.csv (PATH a run folder) or PATH itself (a .csv file). */
int train_history_load(trace *tr, const char *path, err *e);

#endif
