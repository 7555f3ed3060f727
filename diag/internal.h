/* internal.h: helpers shared by the files of diag/ (not part of its interface). */
#ifndef MIXSCOPE_DIAG_INTERNAL_H
#define MIXSCOPE_DIAG_INTERNAL_H

#include <stddef.h>

#include "../mixers/mixer.h"

#include "../engine/nonfinite.h" /* diag_head_parts, diag_part_head_floats, diag_state_grows */

struct model;

/* A copy of a model's running state: per layer the core's state and the convolution caches. */
typedef struct diag_vstate {
    float **state; /* [layers] */
    float **conv;  /* [layers * 3] */
} diag_vstate;

/* A copy of the model's current state (malloc'd buffers). */
int diag_vstate_copy(diag_vstate *v, const struct model *m);
/* The model's own buffers, remembered (not copied) so they can be put back. */
int diag_vstate_borrow(diag_vstate *v, const struct model *m);
/* Points the model's layers at v's buffers. */
void diag_vstate_install(struct model *m, const diag_vstate *v);
/* Frees a copy (a borrowed one: only free its two arrays). */
void diag_vstate_free(diag_vstate *v, int layers);

#endif
