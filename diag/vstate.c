/* vstate.c: a copy of a model's running state (every layer's recurrent state and convolution
 * caches), so several runs of the same weights can go in lockstep: before each run's step the
 * layers are pointed at its buffers (diag_vstate_install), which swaps pointers and copies
 * nothing. Used by the precision replay and the CPU / GPU comparison. */
#include <stdlib.h>
#include <string.h>

#include "../models/model.h"
#include "internal.h"

void diag_vstate_free(diag_vstate *v, int layers) {
    for (int l = 0; v->state && l < layers; l++) free(v->state[l]);
    for (int l = 0; v->conv && l < 3 * layers; l++) free(v->conv[l]);
    free(v->state), free(v->conv);
    memset(v, 0, sizeof *v);
}

static size_t conv_floats(const model *m, const layer *L, int s) {
    return (size_t)L->conv_dim[s] * (size_t)m->c.conv_size;
}

/* A copy of the model's current (reset) state. */
int diag_vstate_copy(diag_vstate *v, const model *m) {
    int n = m->c.layers;
    v->state = calloc((size_t)n, sizeof *v->state);
    v->conv = calloc((size_t)n * 3, sizeof *v->conv);
    if (!v->state || !v->conv) return -1;
    for (int l = 0; l < n; l++) {
        const layer *L = &m->layers[l];
        size_t sf = L->mx->state_floats(&L->mc);
        if (!(v->state[l] = malloc((sf ? sf : 1) * sizeof(float)))) return -1;
        memcpy(v->state[l], L->state, sf * sizeof(float));
        for (int s = 0; s < 3; s++) {
            if (!L->conv_cache[s]) continue;
            size_t cf = conv_floats(m, L, s);
            if (!(v->conv[3 * l + s] = malloc((cf ? cf : 1) * sizeof(float)))) return -1;
            memcpy(v->conv[3 * l + s], L->conv_cache[s], cf * sizeof(float));
        }
    }
    return 0;
}

/* Points the model's layers at a variant's buffers (the buffers are swapped, not copied). */
void diag_vstate_install(model *m, const diag_vstate *v) {
    for (int l = 0; l < m->c.layers; l++) {
        layer *L = &m->layers[l];
        L->state = v->state[l];
        for (int s = 0; s < 3; s++) L->conv_cache[s] = v->conv[3 * l + s];
    }
}

/* The model's own buffers, remembered so they can be put back. */
int diag_vstate_borrow(diag_vstate *v, const model *m) {
    int n = m->c.layers;
    v->state = calloc((size_t)n, sizeof *v->state);
    v->conv = calloc((size_t)n * 3, sizeof *v->conv);
    if (!v->state || !v->conv) return -1;
    for (int l = 0; l < n; l++) {
        v->state[l] = m->layers[l].state;
        for (int s = 0; s < 3; s++) v->conv[3 * l + s] = m->layers[l].conv_cache[s];
    }
    return 0;
}
