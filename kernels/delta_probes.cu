// delta_probes.cu: the delta family's decode steps with probes, host side: the T tokens through
// delta_steps.cuh (the lane prep, the recurrence in one launch, the probes in one more; what the
// raw lanes and the model stepper run) and the probe values laid out as the CPU mixer does
// (mixer_probe_offset order, [H] per probe), matching probes by name.
#include <cuda_runtime.h>
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "delta_steps.cuh"
#include "gpu.h"
#include "gpu_common.cuh"

static const char *const GDP_NAMES[GDP_COUNT] = {
    "beta",        "eta",        "rho",        "k_norm",     "q_norm",         "g",
    "alpha",       "half_life",  "e_norm",     "e_rel",      "r_norm",         "r_check",
    "loss_before", "loss_after", "write_norm", "state_norm", "forget_removed", "erase_removed",
    "o_norm"};

extern "C" int gpu_delta_run_probed(const mixer_ops *m, const mixer_cfg *c, float *state,
                                    const mixer_seq *x, float *o, float *probes, err *e) {
    const int T = x->T, H = c->H, dk = c->dk, dv = c->dv;
    if (T < 1) return 0;
    const int kacz = !strcmp(m->name, "kaczmarz"), has_g = strcmp(m->name, "deltanet") != 0;
    const size_t nk = (size_t)T * H * dk, nv = (size_t)T * H * dv, ns = (size_t)H * dk * dv;
    const size_t np = mixer_probe_floats(m, c);
    int map[64];
    for (int i = 0; i < m->nprobes && i < 64; i++) {
        map[i] = -1;
        for (int g = 0; g < GDP_COUNT; g++)
            if (!strcmp(m->probes[i].name, GDP_NAMES[g])) map[i] = g;
    }
    const int nblk = (dv + 31) / 32;
    float *d[12] = {0};
    size_t sizes[12] = {nk,
                        nk,
                        nv,
                        (size_t)T * H,
                        (size_t)T * H,
                        ns,
                        nv,
                        (size_t)T * H,
                        (size_t)T * H * GDP_COUNT,
                        (size_t)T * H,
                        (size_t)T * H,
                        (size_t)T * H * nblk * GM_NACC * 2}; // the last: doubles
    int rc = -1;
    float *host = (float *)malloc(sizes[8] * sizeof(float));
    if (!host) return err_set(e, "out of memory");
    for (int i = 0; i < 12; i++)
        if (!(d[i] = (float *)gpu_malloc(sizes[i] * sizeof(float), e))) goto done;
    {
        float *dq = d[0], *dkk = d[1], *dvv = d[2], *dg = d[3], *db = d[4], *ds = d[5],
              *dout = d[6];
        const float *src[5] = {x->in[IN_Q], x->in[IN_K], x->in[IN_V], x->in[IN_G], x->in[IN_BETA]};
        for (int i = 0; i < 5; i++) {
            if (i == 3 && (!has_g || !src[3])) continue;
            if (!src[i]) {
                err_set(e, "gpu %s: missing input", m->name);
                goto done;
            }
            if (gpu_copy_to_device(d[i], src[i], sizes[i] * sizeof(float), e)) goto done;
        }
        if (gpu_copy_to_device(ds, state, ns * sizeof(float), e)) goto done;
        const float *g = has_g && x->in[IN_G] ? dg : NULL;
        float *beff = d[7], *q2 = d[9], *k2 = d[10];
        double *part = (double *)d[11];
        if (gm_lane_prep_run(T, H, dk, kacz, c->eps, dq, dkk, db, q2, k2, beff, NULL, e)) goto done;
        gm_core_args a;
        memset(&a, 0, sizeof a);
        a.n = T, a.H = a.Hv = H, a.rep = 1, a.dk = dk, a.dv = dv, a.nblk = nblk;
        a.decay = g != NULL, a.scale = c->scale;
        a.Q = dq, a.K = dkk, a.V = dvv, a.ldqk = (size_t)H * dk, a.ldv = a.ldo = (size_t)H * dv;
        a.G = g, a.Beff = beff, a.K2 = k2, a.state = ds, a.O = dout, a.part = part;
        if (gm_core_run(a, true, false, NULL, e)) goto done;
        gm_fin_args f;
        f.H = f.Hv = H, f.rep = 1, f.nblk = nblk, f.decay = a.decay;
        f.G = g, f.Bin = db, f.Beff = beff, f.Q2 = q2, f.K2 = k2, f.part = part, f.probes = d[8];
        gm_probe_map pm;
        pm.n = GDP_COUNT, pm.layer_off = 0, pm.tok_stride = H * GDP_COUNT,
        pm.head_stride = GDP_COUNT;
        for (int p = 0; p < GDP_COUNT; p++) pm.map[p] = p, pm.off[p] = p;
        if (gm_probe_fin_run(f, pm, T, NULL, e)) goto done;
        if (gpu_sync(e) || gpu_copy_to_host(o, dout, nv * sizeof(float), e) ||
            gpu_copy_to_host(state, ds, ns * sizeof(float), e) ||
            gpu_copy_to_host(host, d[8], sizes[8] * sizeof(float), e))
            goto done;
        for (int t = 0; t < T; t++)
            for (int i = 0; i < m->nprobes && i < 64; i++) {
                float *dst = probes + (size_t)t * np + mixer_probe_offset(m, c, i);
                int w = mixer_width_floats(c, m->probes[i].width);
                for (int h = 0; h < H; h++)
                    for (int q = 0; q < w; q++)
                        dst[h * w + q] = map[i] >= 0 && w == 1
                                             ? host[((size_t)t * H + h) * GDP_COUNT + map[i]]
                                             : NAN;
            }
    }
    rc = 0;
done:
    for (int i = 0; i < 12; i++) gpu_free(d[i]);
    free(host);
    return rc;
}
