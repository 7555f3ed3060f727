// delta_probes.cu: the delta family's decode steps with probes, host side: runs
// gpu_delta_step_probes token by token and lays the probe values out as the CPU mixer does
// (mixer_probe_offset order, [H] per probe), matching probes by name.
#include <cuda_runtime.h>
#include <math.h>
#include <stdlib.h>
#include <string.h>

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
    const int kacz = !strcmp(m->name, "kaczmarz"), has_g = strcmp(m->name, "deltanet") != 0;
    const size_t nk = (size_t)T * H * dk, nv = (size_t)T * H * dv, ns = (size_t)H * dk * dv;
    const size_t np = mixer_probe_floats(m, c);
    int map[64];
    for (int i = 0; i < m->nprobes && i < 64; i++) {
        map[i] = -1;
        for (int g = 0; g < GDP_COUNT; g++)
            if (!strcmp(m->probes[i].name, GDP_NAMES[g])) map[i] = g;
    }
    float *d[9] = {0};
    size_t sizes[9] = {
        nk, nk, nv, (size_t)T * H, (size_t)T * H, ns, nv, (size_t)H * 8, (size_t)T * H * GDP_COUNT};
    int rc = -1;
    float *host = (float *)malloc(sizes[8] * sizeof(float));
    if (!host) return err_set(e, "out of memory");
    for (int i = 0; i < 9; i++)
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
        for (int t = 0; t < T; t++)
            if (gpu_delta_step_probes(H, dk, dv, c->scale, kacz, c->eps, dq + (size_t)t * H * dk,
                                      dkk + (size_t)t * H * dk, dvv + (size_t)t * H * dv,
                                      has_g && x->in[IN_G] ? dg + (size_t)t * H : NULL,
                                      db + (size_t)t * H, ds, dout + (size_t)t * H * dv, d[7],
                                      d[8] + (size_t)t * H * GDP_COUNT, NULL, e))
                goto done;
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
    for (int i = 0; i < 9; i++) gpu_free(d[i]);
    free(host);
    return rc;
}
