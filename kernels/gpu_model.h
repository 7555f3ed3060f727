/* gpu_model.h: the device side of the GPU-resident model stepper (models/model_gpu.h) for every
 * layer family (the delta rule, gla, mamba2, attention, kata, kalman) and hybrids (attention layers
 * among another family's: one description per attention specification beside the model's).
 * kernels/ knows no models/ types: models/model_gpu.c describes the model with the plain structs
 * below (dimensions, flags and host weight pointers) and kernels/gpu_model.cu uploads and runs
 * it.
 *
 * One call steps n tokens layer by layer: the dense parts (norms, projections, MLP, head) of all n
 * tokens at once (their weights read once per call), each layer's recurrence token by token inside
 * one kernel whose blocks keep their slice of the state in registers across the n tokens. The
 * arithmetic is fp32 as the CPU reference computes it (norm sums in double, no TF32); probes are
 * computed on the device and copied back once per call. A call's launches are captured as a CUDA
 * graph per (n, probes) the second time that shape is met (MIXSCOPE_GM_GRAPH=0: never), and the
 * dense products of n <= MIXSCOPE_GM_SKINNY tokens (default 8) run on a matrix-vector kernel of
 * ours, larger n through cuBLAS in pedantic fp32. */
#ifndef MIXSCOPE_GPU_MODEL_H
#define MIXSCOPE_GPU_MODEL_H

#include <stddef.h>
#include <stdint.h>

#include "../core/err.h"

#ifdef __cplusplus
extern "C" {
#endif

enum {
    GM_CORE_GDN = 0,
    GM_CORE_DELTANET = 1,
    GM_CORE_KACZMARZ = 2,
    GM_CORE_GLA,
    GM_CORE_MAMBA2,
    GM_CORE_SOFTMAX,
    GM_CORE_PARALLAX,
    GM_CORE_KATA,
    GM_CORE_KALMAN
};
/* Layer families: models/layer_gdn.c, layer_gla.c, layer_mamba2.c, layer_attn.c (transformer and
 * parallax), layer_kata.c, layer_kalman.c. */
enum {
    GM_FAM_DELTA = 0,
    GM_FAM_GLA = 1,
    GM_FAM_MAMBA2 = 2,
    GM_FAM_ATTN = 3,
    GM_FAM_KATA = 4,
    GM_FAM_KALMAN = 5
};
/* Feature maps, numbered as models/blocks.h's blk_act. */
enum { GM_ACT_NONE = 0, GM_ACT_SILU, GM_ACT_RELU, GM_ACT_ELU_P1, GM_ACT_SIGMOID };
/* The largest key width the core kernel holds (8 row groups of 32 rows). */
enum { GM_MAX_DK = 256, GM_MAX_PROBES = 32, GM_FAMILY_PROBES = 4 /* the most of any family */ };
/* The values gla's and mamba2's probes are read from (gm_layer_desc.probe_map; -1: NaN): the
 * decay statistics of gla (over dk) and mamba2 (the head's one decay), then linear_decay.h's
 * shared probes. */
enum {
    LDP_G_MIN,
    LDP_G_MEAN,
    LDP_G_MAX,
    LDP_ALPHA_MIN,
    LDP_ALPHA_MEAN,
    LDP_ALPHA_MAX,
    LDP_HALF_LIFE_MIN,
    LDP_HALF_LIFE_MEAN,
    LDP_HALF_LIFE_MAX,
    LDP_G,
    LDP_ALPHA,
    LDP_HALF_LIFE,
    LDP_Q_NORM,
    LDP_K_NORM,
    LDP_V_NORM,
    LDP_WRITE_NORM,
    LDP_E_NORM,
    LDP_E_REL,
    LDP_FORGET_REMOVED,
    LDP_STATE_NORM,
    LDP_O_NORM,
    LDP_COUNT
};

/* The readback window of gm_outputs.recall (viz/recall.h's RECALL_WINDOW). */
enum { GM_RECALL_W = 256 };

/* One layer: host fp32 weights in fla's shapes (NULL where the config has none) and its core.
 * The delta family fills the first block; gla q/k/v/g_proj (k and v [kd/g, C], [vd/g, C] for
 * g = H / Hkv), the convolutions, gk0 / gk1 / gk1_b, o_norm, o_proj and the MLP; mamba2 in_proj
 * (and its bias), conv_w / conv_b, A_log, dt_bias, D, norm_w, out_proj (and its bias); attention
 * q/k/v_proj ([C, C], [Hkv d, C], [Hkv d, C]), r_proj [C, C] (parallax; NULL: r = 0), their
 * biases, q/k/r_norm [d], o_proj and the MLP; kata q/k/v_proj [D, C], the convolutions, b_proj
 * [H, C] (DeltaKATA), o_proj and the MLP; kalman in_proj [2M, C], conv_w / conv_b [M, 1, W] / [M],
 * sensor_proj [2M + 2S, M], the discrete dynamics kal_a / kal_p [M, S], skip [1], out_proj. */
typedef struct gm_layer_desc {
    const float *attn_norm;                                  /* [C] */
    const float *q_proj, *k_proj, *v_proj;                   /* [kd, C], [kd, C], [vd, C] */
    const float *a_proj, *b_proj, *g_proj;                   /* [Hv, C], [Hv, C], [vd, C] */
    const float *b_bias, *A_log, *dt_bias;                   /* [Hv] */
    const float *q_conv, *k_conv, *v_conv;                   /* [D, 1, W] */
    const float *q_conv_b, *k_conv_b, *v_conv_b;             /* [D] */
    const float *o_norm, *o_proj;                            /* [dv], [C, vd] */
    const float *mlp_norm, *gate_proj, *up_proj, *down_proj; /* [C], [I, C], [I, C], [C, I] */
    const float *gk0, *gk1, *gk1_b;     /* gla: [rank, C], [kd/g, rank], [kd/g] */
    const float *in_proj, *in_proj_b;   /* mamba2: [2 di + 2 G N + H, C], [..]; kalman [2M, C] */
    const float *conv_w, *conv_b;       /* mamba2: [di + 2 G N, 1, W], [..]; kalman [M, 1, W] */
    const float *D, *norm_w;            /* mamba2: [H] or [di], [di] */
    const float *out_proj, *out_proj_b; /* mamba2: [C, di], [C]; kalman [C, M] */
    const float *r_proj, *q_bias, *k_bias, *v_bias, *r_bias, *q_norm, *k_norm, *r_norm;
    /* attention: the core's window (0: none), its own RoPE (mixer option rope=1) and theta */
    int window, core_rope;
    float core_theta;
    const float *sensor_proj, *kal_a, *kal_p, *skip; /* kalman */
    int prior;                                       /* kalman: the core's prior variant */
    int core;                                        /* GM_CORE_* */
    float scale, eps;                                /* the core's query scale; Kaczmarz's eps */
    /* the core's probes in the CPU layout: probe p (of nprobes) of head h goes to offset
     * probe_off[p] + h of the layer's block of probe_floats; probe_map[p] is its GDP_* value
     * (kernels/gpu.h; gla and mamba2: LDP_*), -1 for NaN */
    int nprobes, probe_floats;
    int probe_map[GM_MAX_PROBES], probe_off[GM_MAX_PROBES];
    /* the description the layer follows: 0 the model's, k > 0 gm_model_desc.sub[k - 1] (a
     * hybrid's attention layers) */
    int desc;
    /* where in the layer's probe block the probes after its lane-wide ones begin (every probe
     * from there on is not lane-wide; 0: no lane-wide probes, or not in one run at the head):
     * gm_outputs.probes_tail copies back from here on */
    int probe_tail;
} gm_layer_desc;

/* The model. The delta family: H key heads of dk, Hv value heads of dv (Hv a multiple of H),
 * key_dim = H dk, value_dim = Hv dv. Every other family: H = Hv heads; key_dim = H dk (gla: the
 * query projection, mamba2: H state_size, kalman: S), value_dim = H dv (mamba2: d_inner, kalman:
 * M). conv_dims: the channels of each stream of the in-projection that is convolved (delta, kata:
 * q, k, v; gla: q, k, v of the kv heads; mamba2: xBC; kalman: z'), also without the convolution
 * (they size the buffer the activations go to); their caches lie one after the other per layer.
 * family_probes: the family's probes (family.h) per layer and head in fprobes. */
typedef struct gm_model_desc {
    int family;                       /* GM_FAM_* */
    int layers, hidden, vocab, inter; /* inter 0: no MLP */
    int H, Hv, dk, dv, key_dim, value_dim;
    int use_conv, conv_size, conv_dims[3];
    int use_gate, has_decay, use_beta, allow_neg, qk_act, qk_sum_norm;
    int family_probes;
    float norm_eps;
    /* gla: kv heads, the gate's low rank, feature_map (GM_ACT_*), the decay's normaliser and
     * lower clamp */
    int Hkv, gk_rank, feature_map, has_clamp;
    float gate_norm, clamp_min;
    /* mamba2: groups (n_groups), the D skip per channel, biases on in_proj / out_proj, dt's
     * clamp, the gated norm's group */
    int n_groups, D_has_hdim, use_bias, norm_group;
    float dt_lo, dt_hi;
    /* attention (H = Hv query heads over Hkv kv heads of d = dk = dv): biases on q/k/v/r,
     * per-head RMSNorm of q/k/r, rotate-half RoPE at rope_theta, the KV cache's slots (a layer's
     * state: keys [max_t, H, d] then values [max_t, H, d], mixers/attention.h) */
    int qkv_bias, qk_norm, rope, max_t;
    float rope_theta;
    /* kata (H heads of d = dk = dv; rope 2: interleaved, qk_norm: l2): the cores' variant and
     * groups (mixers/kata.h), one for every layer */
    int kata_variant, kata_groups;
    /* kalman (one head: dk = S states, dv = M channels): the output gate SiLU(g') */
    int use_gating;
    size_t state_floats;                   /* a layer's state (mixer_state_floats) */
    const float *embed, *norm_f, *lm_head; /* [V, C], [C], [V, C] (lm_head may equal embed) */
    const gm_layer_desc *layer;            /* [layers] */
    /* A hybrid (fla's attn key): the descriptions of its other layers, one per attention
     * specification (family GM_FAM_ATTN; layers, hidden, vocab, inter and norm_eps the model's,
     * no family probes; their embed, norm_f, lm_head and layer unused). NULL: none. */
    int nsub;
    const struct gm_model_desc *sub; /* [nsub] */
} gm_model_desc;

/* The descriptions one model may hold: its own and one per attention specification. */
enum { GM_MAX_DESCS = 9 };

typedef struct gm_model gm_model;

/* 0 in a build without CUDA (kernels/gpu_none.c), 1 otherwise. */
int gm_compiled(void);
/* Uploads the weights, allocates the states, caches and buffers for up to max_batch tokens.
 * States and caches start at zero. */
int gm_create(gm_model **out, const gm_model_desc *d, int max_batch, err *e);
void gm_destroy(gm_model *g);
/* Per layer: state (the delta family, gla, mamba2: [Hv dk dv]; attention: the KV cache; kata: its
 * feature state) and the
 * convolution caches of the streams ([conv_dims[s], W];
 * conv[3 li + s], NULL without convolution or without that stream). */
int gm_upload(gm_model *g, const float *const *state, const float *const *conv, err *e);
int gm_download(gm_model *g, float *const *state, float *const *conv, err *e);

/* What one call copies back (each NULL: not copied). probes: [n][sum over layers of
 * probe_floats], the layers' blocks in order; fprobes [n][layers][GM_FAMILY_PROBES][Hv]; state:
 * every layer's state after the last token, one after the other.
 *
 * k [n][layers][KH][Kdk] and v [n][layers][KH][Kdv], KH, Kdk, Kdv the largest Hv, dk, dv of the
 * descriptions (gm_kv_shape; a hybrid's layers of fewer heads or narrower leave the rest NaN): the
 * key and value each value head's core saw (the key after the family's normalisation, Kaczmarz's
 * raw key; a key head repeated for its value heads). recall [n][layers][Hv][GM_RECALL_W] (the
 * model's Hv; a hybrid's attention layers NaN): entry j of token t is
 * |S_t^T k_(t-j) - v_(t-j)| / |v_(t-j)| from the state after token t, NaN for keys the window
 * does not hold. The window is a device ring of the last GM_RECALL_W - 1 keys and values per layer
 * and head, kept by every call that asks for k, v or recall (a call that asks for none of them
 * empties it), emptied by gm_upload and refilled by gm_recall_fill. recall is the fp32 product
 * K_window S_t (cuBLAS SGEMM, pedantic: no TF32) of each token's state, stored per token by the
 * recurrence kernel, and the error sums in double. */
typedef struct gm_outputs {
    float *logits; /* [n, vocab] */
    int32_t *top;
    float *topp, *nll; /* [n] */
    float *probes, *fprobes, *state;
    float *k, *v, *recall;
    /* 1: of probes, only each layer's block from its probe_tail on comes back (Kalman's lane-wide
     * probes, megabytes a token, are left as the host buffer had them) */
    int probes_tail;
} gm_outputs;
/* The layout of gm_outputs.k and v: [layers][*heads][*dk] and [layers][*heads][*dv] a token. */
void gm_kv_shape(const gm_model *g, int *heads, int *dk, int *dv);
/* n tokens (ids checked by the caller) at positions pos .. pos + n - 1 (RoPE; attention writes
 * its cache slots there and reads up to them); next [n] or NULL (nll NaN; an id < 0 also gives
 * NaN). */
int gm_step(gm_model *g, const int32_t *tokens, int n, int pos, const int32_t *next,
            const gm_outputs *out, err *e);
/* The window's keys and values from the host, in gm_outputs.k's and v's layout, of the
 * n tokens before the current position, oldest first (NaN rows: not recorded); the last
 * GM_RECALL_W - 1 are kept, older window rows are emptied. */
int gm_recall_fill(gm_model *g, const float *k, const float *v, int n, err *e);
/* How many tokens before the current position the window holds (0 .. GM_RECALL_W - 1). */
int gm_recall_held(const gm_model *g);

#ifdef __cplusplus
}
#endif

#endif
