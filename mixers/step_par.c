/* step_par.c: a core's step split over its heads across threads (core/pool.h).
 *
 * The heads of the cores below never read one another, so heads [h0, h1) step as a core of
 * h1 - h0 heads on the slices of the inputs, state, output and probes that belong to them.
 * A state of one part ([H, ...]) is sliced in place; one of several parts (Kalman's lambda and
 * eta, KATA's S and z) is gathered into a per-thread buffer, stepped and put back. Probes are laid
 * out probe by probe ([H, width] each), so each slice steps into its own buffer and its rows are
 * copied into place. The result is the same bits as one call: each head's arithmetic is the
 * same, only which thread does it changes. */
#include <stdlib.h>
#include <string.h>

#include "../core/pool.h"
#include "mixer.h"

/* Cores whose heads are independent and whose state is head-major. KV caches ([max_t, H, d]:
 * softmax, parallax) are not, and step whole. */
static int splittable(const mixer_ops *m) {
    static const char *const OK[] = {"gdn",    "deltanet", "kaczmarz", "gla",
                                     "mamba2", "kalman",   "kata",     NULL};
    for (int i = 0; OK[i]; i++)
        if (!strcmp(m->name, OK[i])) return 1;
    return 0;
}

typedef struct sp_ctx {
    const mixer_ops *m;
    const mixer_cfg *c;
    float *state;
    const mixer_tok *x;
    int pos, hper, nparts;
    state_part parts[MIXER_MAX_STATE_PARTS];
    float *o, *probes;
    float *buf; /* each chunk's probes and gathered state, chunk_floats apart */
    size_t chunk_floats;
} sp_ctx;

/* Floats of one head in part p. */
static size_t head_floats(const state_part *p) {
    size_t n = 1;
    for (int d = 1; d < p->ndim; d++) n *= (size_t)p->shape[d];
    return n;
}

static void step_slice(sp_ctx *s, int h0, int h1, float *buf) {
    const mixer_ops *m = s->m;
    mixer_cfg c = *s->c;
    int Hs = h1 - h0;
    c.H = Hs;
    for (int i = 0; i < m->nparams; i++)
        if (c.params[i]) c.params[i] += (size_t)h0 * mixer_width_floats(s->c, m->params[i].width);
    mixer_tok x = {{0}};
    for (int i = 0; i < IN_COUNT; i++)
        if (s->x->in[i])
            x.in[i] = s->x->in[i] + (size_t)h0 * mixer_input_floats(s->c, (mixer_input)i);
    size_t pf = s->probes ? mixer_probe_floats(m, &c) : 0, sf = 0;
    if (s->nparts > 1)
        for (int p = 0; p < s->nparts; p++) sf += head_floats(&s->parts[p]) * (size_t)Hs;
    (void)sf;
    float *st = s->state + (s->nparts == 1 ? (size_t)h0 * head_floats(&s->parts[0]) : 0);
    if (s->nparts > 1) { /* gather this slice of every part */
        float *d = buf + pf;
        for (int p = 0; p < s->nparts; p++) {
            size_t hf = head_floats(&s->parts[p]);
            memcpy(d, s->state + s->parts[p].offset + (size_t)h0 * hf, (size_t)Hs * hf * 4);
            d += (size_t)Hs * hf;
        }
        st = buf + pf;
    }
    m->step(&c, st, &x, s->pos, s->o + (size_t)h0 * s->c->dv, s->probes ? buf : NULL);
    if (s->nparts > 1) {
        const float *d = buf + pf;
        for (int p = 0; p < s->nparts; p++) {
            size_t hf = head_floats(&s->parts[p]);
            memcpy(s->state + s->parts[p].offset + (size_t)h0 * hf, d, (size_t)Hs * hf * 4);
            d += (size_t)Hs * hf;
        }
    }
    if (s->probes)
        for (int i = 0; i < m->nprobes; i++) {
            int w = mixer_width_floats(&c, m->probes[i].width);
            memcpy(s->probes + mixer_probe_offset(m, s->c, i) + (size_t)h0 * w,
                   buf + mixer_probe_offset(m, &c, i), (size_t)Hs * w * sizeof(float));
        }
}

static void sp_run(void *ctx, int lo, int hi) {
    sp_ctx *s = ctx;
    for (int k = lo; k < hi; k++) {
        int h0 = (int)k * s->hper, h1 = h0 + s->hper;
        if (h1 > s->c->H) h1 = s->c->H;
        step_slice(s, h0, h1, s->buf + (size_t)k * s->chunk_floats);
    }
}

void mixer_step_par(const mixer_ops *m, const mixer_cfg *c, float *state, const mixer_tok *x,
                    int pos, float *o, float *probes) {
    int T = pool_threads();
    size_t work = m->state_floats(c);
    sp_ctx s = {.m = m, .c = c, .state = state, .x = x, .pos = pos, .o = o, .probes = probes};
    s.nparts = splittable(m) && m->state_parts ? m->state_parts(c, s.parts) : 0;
    int ok = T > 1 && c->H > 1 && work >= 32768 && s.nparts >= 1;
    size_t total = 0;
    for (int p = 0; ok && p < s.nparts; p++) {
        ok = s.parts[p].shape[0] == c->H && s.parts[p].offset == total;
        total += head_floats(&s.parts[p]) * (size_t)c->H;
    }
    if (!ok || total != work) {
        m->step(c, state, x, pos, o, probes);
        return;
    }
    int chunks = T < c->H ? T : c->H;
    s.hper = (c->H + chunks - 1) / chunks;
    chunks = (c->H + s.hper - 1) / s.hper;
    mixer_cfg cs = *c;
    cs.H = s.hper;
    s.chunk_floats = (probes ? mixer_probe_floats(m, &cs) : 0) + 1;
    if (s.nparts > 1) s.chunk_floats += total / (size_t)c->H * (size_t)s.hper;
    s.buf = malloc((size_t)chunks * s.chunk_floats * sizeof(float));
    if (!s.buf) { /* no room for the slices' buffers: one call does the same */
        m->step(c, state, x, pos, o, probes);
        return;
    }
    pool_for(chunks, sp_run, &s);
    free(s.buf);
}
