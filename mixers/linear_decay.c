/* linear_decay.c: the step and the probes shared by gla and mamba2 (see linear_decay.h). */
#include <math.h>
#include <string.h>

#include "linear_decay.h"

int ld_configure(mixer_cfg *c, opts *o, err *e) {
    long chunk = c->chunk;
    double scale = c->scale;
    /* o may be NULL when a caller has no options at all. */
    if (o && opts_int(o, "chunk", c->chunk, &chunk, e)) return -1;
    if (chunk != 16 && chunk != 32 && chunk != 64)
        return err_set(e, "chunk=%ld: must be 16, 32 or 64", chunk);
    if (o && opts_float(o, "scale", c->scale, &scale, e)) return -1;
    if (!(scale > 0.0) || scale > 1e30)
        return err_set(e, "scale=%g: must be a positive number", scale);
    c->chunk = (int)chunk;
    c->scale = (float)scale;
    return 0;
}

size_t ld_state_floats(const mixer_cfg *c) {
    return (size_t)c->H * (size_t)c->dk * (size_t)c->dv;
}

void ld_state_init(const mixer_cfg *c, float *state) {
    memset(state, 0, ld_state_floats(c) * sizeof *state);
}

int ld_state_parts(const mixer_cfg *c, state_part *parts) {
    parts[0] = (state_part){
        .name = "hT", .init_name = "h0", .offset = 0, .ndim = 3, .shape = {c->H, c->dk, c->dv}};
    return 1;
}

void ld_probes_store(const ld_probes *p, int first, int H, int h, float *probes) {
    const float v[LD_NPROBES] = {p->q_norm,         p->k_norm,     p->v_norm,
                                 p->write_norm,     p->e_norm,     p->e_rel,
                                 p->forget_removed, p->state_norm, p->o_norm};
    for (int i = 0; i < LD_NPROBES; i++) probes[(size_t)(first + i) * H + h] = v[i];
}

float ld_dot(const float *a, const float *b, int n) {
    float s = 0.0f;
    for (int i = 0; i < n; i++) s += a[i] * b[i];
    return s;
}

float ld_norm(const float *a, int n) {
    return sqrtf(ld_dot(a, a, n));
}

void ld_gather_head(float *dst, const float *src, int t0, int L, int H, int w, int h) {
    for (int i = 0; i < L; i++)
        memcpy(dst + (size_t)i * w, src + ((size_t)(t0 + i) * H + h) * w, (size_t)w * sizeof *dst);
}

void ld_readout_add(int dk, int dv, const float *S, const float *x, float scale, float *o) {
    for (int d = 0; d < dk; d++) {
        float xd = scale * x[d];
        const float *row = S + (size_t)d * dv; /* [dv] */
        for (int j = 0; j < dv; j++) o[j] += xd * row[j];
    }
}

void ld_step_head(int dk, int dv, float *S, const float *q, const float *k, const float *v,
                  const float *g, int gstride, float scale, float *o, ld_probes *p) {
    /* o [dv] doubles as scratch for S~^T k until the readout overwrites it (step must not
     * allocate). */
    memset(o, 0, (size_t)dv * sizeof *o);
    float forget2 = 0.0f, a0 = expf(g[0]);
    for (int d = 0; d < dk; d++) {
        float gd = g[(size_t)d * gstride], a = gstride ? expf(gd) : a0, kd = k[d];
        float *row = S + (size_t)d * dv; /* [dv] */
        if (p) {
            /* Before the write: what the decay removes (1 - alpha as -expm1(g), exact for weak
             * decays), and what the decayed state retrieves for k (row d contributes a k_d row). */
            float f = -expm1f(gd);
            forget2 += f * f * ld_dot(row, row, dv);
            for (int j = 0; j < dv; j++) o[j] += a * kd * row[j];
        }
        /* S = diag(alpha) S + k v^T: the new write itself is not decayed. */
        for (int j = 0; j < dv; j++) row[j] = a * row[j] + kd * v[j];
    }
    if (p) {
        float e2 = 0.0f;
        for (int j = 0; j < dv; j++) e2 += (v[j] - o[j]) * (v[j] - o[j]);
        p->q_norm = ld_norm(q, dk);
        p->k_norm = ld_norm(k, dk);
        p->v_norm = ld_norm(v, dv);
        p->write_norm = p->k_norm * p->v_norm;
        p->e_norm = sqrtf(e2);
        p->e_rel = p->v_norm > 0.0f ? p->e_norm / p->v_norm : 0.0f;
        p->forget_removed = sqrtf(forget2);
    }
    /* Read after write. */
    memset(o, 0, (size_t)dv * sizeof *o);
    ld_readout_add(dk, dv, S, q, scale, o);
    if (p) {
        float s2 = 0.0f;
        for (int d = 0; d < dk; d++) s2 += ld_dot(S + (size_t)d * dv, S + (size_t)d * dv, dv);
        p->state_norm = sqrtf(s2);
        p->o_norm = ld_norm(o, dv);
    }
}
