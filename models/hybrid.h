/* hybrid.h: fla's `attn` config key (hybrid.c). Internal to models/. */
#ifndef MIXSCOPE_HYBRID_H
#define MIXSCOPE_HYBRID_H

#include "../core/config.h"
#include "model.h"

/* Reads `attn` from the config (null or absent: none) into m->attn_cfg and points every layer's
 * cfg at its configuration. The layers must be allocated. */
int hybrid_parse(model *m, const config *cfg, err *e);

#endif
