/* registry.c: the list of mixers, and the helpers every mixer shares. */
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "mixer.h"

/* Each mixer file defines one of these. */
extern const mixer_ops mixer_gdn, mixer_deltanet, mixer_kaczmarz, mixer_gla, mixer_mamba2,
    mixer_softmax, mixer_kalman, mixer_kata, mixer_parallax;

const mixer_ops *const mixer_all[] = {
    &mixer_gdn,     &mixer_deltanet, &mixer_kaczmarz, &mixer_gla,      &mixer_mamba2,
    &mixer_softmax, &mixer_kalman,   &mixer_kata,     &mixer_parallax,
};
const int mixer_count = (int)(sizeof mixer_all / sizeof mixer_all[0]);

const mixer_ops *mixer_find(const char *name) {
    for (int i = 0; i < mixer_count; i++)
        if (mixer_all[i] && strcmp(mixer_all[i]->name, name) == 0) return mixer_all[i];
    return NULL;
}

int mixer_configure(const mixer_ops *m, mixer_cfg *c, int H, int dk, int dv, opts *o, err *e) {
    memset(c, 0, sizeof *c);
    if (H < 1 || dk < 1 || dv < 1 || H > 4096 || dk > 65536 || dv > 65536)
        return err_set(e, "%s: bad dimensions H=%d dk=%d dv=%d", m->name, H, dk, dv);
    c->H = H, c->dk = dk, c->dv = dv;
    c->scale = 1.0f / sqrtf((float)dk);
    c->chunk = 64;
    c->max_t = MIXER_DEFAULT_MAX_T;
    c->rope_theta = 10000.0f;
    if (m->configure(c, o, e)) return err_prefix(e, "%s", m->name);
    return 0;
}

int mixer_width_floats(const mixer_cfg *c, mixer_width w) {
    switch (w) {
    case W_1:
        return 1;
    case W_DK:
        return c->dk;
    case W_DV:
        return c->dv;
    case W_LANES:
        return c->dk * c->dv;
    }
    return 0;
}

int mixer_input_floats(const mixer_cfg *c, mixer_input which) {
    switch (which) {
    case IN_Q:
    case IN_K:
    case IN_R:
    case IN_GK:
        return c->dk;
    case IN_V:
    case IN_LV:
        return c->dv;
    case IN_G:
    case IN_BETA:
        return 1;
    default:
        return 0;
    }
}

size_t mixer_probe_offset(const mixer_ops *m, const mixer_cfg *c, int i) {
    size_t off = 0;
    for (int j = 0; j < i && j < m->nprobes; j++)
        off += (size_t)c->H * (size_t)mixer_width_floats(c, m->probes[j].width);
    return off;
}

size_t mixer_probe_floats(const mixer_ops *m, const mixer_cfg *c) {
    return mixer_probe_offset(m, c, m->nprobes);
}

int mixer_probe_index(const mixer_ops *m, const char *name) {
    for (int i = 0; i < m->nprobes; i++)
        if (strcmp(m->probes[i].name, name) == 0) return i;
    return -1;
}

mixer_tok mixer_seq_at(const mixer_cfg *c, const mixer_seq *s, int t) {
    mixer_tok x;
    for (int i = 0; i < IN_COUNT; i++)
        x.in[i] = s->in[i] ? s->in[i] + (size_t)t * (size_t)c->H *
                                            (size_t)mixer_input_floats(c, (mixer_input)i)
                           : NULL;
    return x;
}

void mixer_run_steps(const mixer_ops *m, const mixer_cfg *c, float *state, const mixer_seq *s,
                     int pos0, float *o, float *probes) {
    size_t np = mixer_probe_floats(m, c), ostride = (size_t)c->H * (size_t)c->dv;
    for (int t = 0; t < s->T; t++) {
        mixer_tok x = mixer_seq_at(c, s, t);
        m->step(c, state, &x, pos0 + t, o + (size_t)t * ostride,
                probes ? probes + (size_t)t * np : NULL);
    }
}
