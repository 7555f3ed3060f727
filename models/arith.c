/* arith.c: fla's GPU arithmetic for a whole model (arith.h, mixers/tf32.h).
 *
 * What fla's forward pass computes with TF32 products on a Hopper GPU, per model type, and how
 * this was established (docs/models.md, "fla's GPU arithmetic"):
 *   gated_deltanet, kaczmarz_deltanet: the chunk kernels (attn_mode "chunk", fla's default, for
 *       more than 64 tokens); attn_mode "fused_recurrent" is exact float32.
 *   delta_net: exact. fla's DeltaNet chunk kernel refuses float32 inputs (chunk_delta_rule:
 *       "does not support float32"), so a float32 forward is always the recurrent kernel.
 *   parallax: naive_parallax, whose einsums ran with TF32.
 *   transformer: exact (its reference logits agree with exact float32 to 3e-7; TF32 products
 *       would move them by 5e-4).
 *   gla, mamba2, kalman, kata: no arith option in their cores; fla's references there are exact.
 * The cores keep every other option; only mixer_cfg.arith changes. */
#include "arith.h"

#include <string.h>

#include "../core/config.h"
#include "../mixers/tf32.h"

/* 1 when the core has the arith option: it configures with arith=tf32 and reads the key. */
static int core_has_arith(const layer *L) {
    char kv[] = "arith=tf32", *argv[1] = {kv};
    opts o;
    err e = {{0}};
    mixer_cfg c;
    if (opts_parse(&o, 1, argv, &e)) return 0;
    int ok = mixer_configure(L->mx, &c, L->mc.H, L->mc.dk, L->mc.dv, &o, &e) == 0 &&
             opts_check_unused(&o, &e) == 0 && c.arith == MIXER_ARITH_TF32;
    opts_free(&o);
    return ok;
}

/* 1 when fla's forward runs this model type's cores with TF32 products. */
static int fla_uses_tf32(const model *m, err *e, int *out) {
    *out = 0;
    switch (m->c.kind) {
    case MK_PARALLAX:
        *out = 1;
        return 0;
    case MK_GATED_DELTANET:
    case MK_KACZMARZ_DELTANET: {
        /* fla's layer: fused_recurrent for <= 64 tokens, else attn_mode (default "chunk") */
        config cfg;
        char mode[32] = "chunk";
        if (m->config_json && config_parse(&cfg, m->config_json, "config.json", e) == 0) {
            int rc = config_str(&cfg, "attn_mode", "chunk", mode, sizeof mode, e);
            config_free(&cfg);
            if (rc) return -1;
        }
        *out = strcmp(mode, "fused_recurrent") != 0;
        return 0;
    }
    default:
        return 0;
    }
}

int model_set_arith(model *m, int arith, err *e) {
    if (arith != MIXER_ARITH_FP32 && arith != MIXER_ARITH_TF32)
        return err_set(e, "arith: %d is neither fp32 nor tf32", arith);
    int tf = 1, n = 0;
    if (arith == MIXER_ARITH_TF32 && fla_uses_tf32(m, e, &tf)) return -1;
    for (int li = 0; li < m->c.layers; li++) {
        layer *L = &m->layers[li];
        if (!core_has_arith(L)) continue;
        L->mc.arith = tf ? arith : MIXER_ARITH_FP32;
        n += L->mc.arith == arith;
    }
    if (model_reset(m, 0, e)) return -1;
    return n;
}

int model_arith_chunked(const model *m) {
    for (int li = 0; li < m->c.layers; li++) {
        const layer *L = &m->layers[li];
        const char *nm = L->mx->name;
        if (L->mc.arith == MIXER_ARITH_TF32 &&
            (!strcmp(nm, "gdn") || !strcmp(nm, "deltanet") || !strcmp(nm, "kaczmarz")))
            return 1;
    }
    return 0;
}
