/* internal.h: functions shared by the files of models/ (not part of the model interface). */
#ifndef MIXSCOPE_MODELS_INTERNAL_H
#define MIXSCOPE_MODELS_INTERNAL_H

#include "../core/config.h"
#include "model.h"

int model_kind_parse(const char *name, model_kind *k);
int model_kind_of_mixer(const char *mixer, model_kind *k);

/* Parses config.json text into a new model with its layers allocated and every tensor declared
 * (no data yet). */
int model_declare(model **out, const char *config_text, const char *label, err *e);
/* Declares every tensor of the configured model (called by model_declare). */
int model_declare_all(model *m, err *e);
/* After every slot has data: wires the weights, builds caches and cores, resets. */
int model_finish(model *m, err *e);

int64_t wslot_numel(const wslot *s);

#endif
