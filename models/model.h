/* model.h: a whole language model as flash-linear-attention builds it, run token by token.
 *
 *   token -> embedding -> N x [ x += layer(RMSNorm(x)); x += MLP(RMSNorm(x)) ] -> RMSNorm -> head
 *
 * A layer is a *family* of projections (GDN-like, GLA, Mamba2, attention, Kalman, KATA) around a
 * mixer core taken from the registry (mixers/). The family computes the mixer's per-token inputs
 * from the normalised hidden state (projections, short convolutions, gates, head mapping), the
 * core runs its step (or prefill), and the family turns the core's output back into the residual
 * stream (output norm and gate, output projection). `swap` replaces a layer's core by another that
 * can be fed from the same projections (e.g. kaczmarz on a Gated DeltaNet layer).
 *
 * Checkpoints are read and written in fla's layout: a folder with config.json and
 * model.safetensors (or a sharded model.safetensors.index.json). Every tensor a config implies is
 * declared once, in a slot list; loading, saving, random initialisation and the error messages
 * ("missing tensor", "unexpected tensor", "shape ... but config implies ...") all walk that list.
 * docs/models.md lists the model types, config keys and tensor names. */
#ifndef MIXSCOPE_MODEL_H
#define MIXSCOPE_MODEL_H

#include <stddef.h>
#include <stdint.h>
#include <stdio.h>

#include "../core/err.h"
#include "../core/opts.h"
#include "../core/trace.h"
#include "../mixers/mixer.h"

struct st_file;
struct config;

/* The model types: fla's six plus three defined here in fla's style. */
typedef enum model_kind {
    MK_GATED_DELTANET,    /* "gated_deltanet" */
    MK_DELTA_NET,         /* "delta_net" */
    MK_KACZMARZ_DELTANET, /* "kaczmarz_deltanet" (ours: GDN layer, raw keys, eta + bias) */
    MK_GLA,               /* "gla" */
    MK_MAMBA2,            /* "mamba2" */
    MK_TRANSFORMER,       /* "transformer" */
    MK_PARALLAX,          /* "parallax" */
    MK_KALMAN,            /* "kalman" (ours) */
    MK_KATA,              /* "kata" (ours) */
    MK_COUNT
} model_kind;

/* Which projections a layer has; decides which mixers it can feed. */
typedef enum layer_family {
    FAM_GDN,
    FAM_GLA,
    FAM_MAMBA2,
    FAM_ATTN,
    FAM_KALMAN,
    FAM_KATA
} layer_family;

/* Everything config.json says, resolved to integers. Fields a family does not use stay 0. */
typedef struct model_config {
    model_kind kind;
    layer_family family;
    int vocab, hidden, layers, tie;
    float norm_eps; /* block norms, final norm, output norms */
    int inter;      /* MLP intermediate size; 0: no MLP (Mamba2) */
    /* heads: H query/key heads, Hv value heads (GVA), Hkv key/value heads (GQA) */
    int H, Hv, Hkv, dk, dv;
    int key_dim, value_dim; /* projection widths */
    /* short convolution */
    int use_conv, conv_size, conv_bias;
    /* GDN family */
    int use_gate, allow_neg, has_decay, use_beta, b_bias, qk_act, qk_sum_norm;
    int raw_keys; /* gated_deltanet "l2norm_keys": false (ours): keys reach the core unnormalised */
    float kacz_eps;
    /* GLA */
    int gk_rank, use_output_gate, gate_named_fused, feature_map, has_clamp;
    float gate_norm, clamp_min;
    /* Mamba2 */
    int d_inner, d_state, n_groups, use_bias, D_has_hdim, norm_group;
    float dt_lo, dt_hi;
    /* attention */
    int qkv_bias, qk_norm, window, rope; /* rope: 0 none, 1 rotate-half, 2 interleaved */
    float rope_theta;
    /* Kalman */
    int use_gating;
    /* KATA */
    int kata_delta; /* has b_proj (delta variant) */
    char kata_variant[16];
    int kata_groups;
} model_config;

/* Random initialisation of one tensor (spec §2.2 and the families' own rules). */
typedef enum init_kind {
    INIT_NORMAL, /* N(0, a^2) */
    INIT_ONES,
    INIT_ZEROS,
    INIT_CONST,   /* a */
    INIT_UNIFORM, /* U(a, b) */
    INIT_A_LOG,   /* log U(a, b): GDN / Mamba2 A_log */
    INIT_DT_BIAS, /* softplus^-1 of exp(U(log a, log b)) floored at 1e-4: dt_bias, Kalman delta */
} init_kind;

/* One tensor of the checkpoint: its fla name, shape, and where the model keeps it. */
typedef struct wslot {
    char name[96];
    int ndim;
    int64_t shape[3];
    float **dst; /* the model field that points at data */
    float *data; /* owned, float32 */
    init_kind init;
    float ia, ib;
} wslot;

/* One layer: the family's weights (NULL when absent), its mixer and the caches. */
typedef struct layer {
    /* the layer's configuration: the model's (&model.c), or in a hybrid model an attention
     * layer's (&model.attn_cfg[k], family FAM_ATTN); the family code reads this, not model.c */
    const model_config *cfg;
    /* block norms and MLP */
    float *attn_norm, *mlp_norm, *gate_proj, *up_proj, *down_proj;
    /* projections shared by several families */
    float *q_proj, *k_proj, *v_proj, *r_proj, *o_proj, *g_proj;
    float *q_bias, *k_bias, *v_bias, *r_bias;
    float *q_conv, *k_conv, *v_conv, *q_conv_b, *k_conv_b, *v_conv_b;
    float *o_norm, *q_norm, *k_norm, *r_norm;
    /* GDN family */
    float *a_proj, *b_proj, *b_bias, *A_log, *dt_bias;
    /* GLA */
    float *gk0, *gk1, *gk1_b;
    /* Mamba2 and Kalman */
    float *in_proj, *in_proj_b, *conv_w, *conv_b, *out_proj, *out_proj_b, *norm_w, *D;
    float *sensor_proj, *delta, *lambda_log, *process_noise, *skip;
    float *kal_a, *kal_p; /* derived: discrete decay and process noise [M, S] (owned) */

    /* the core */
    const mixer_ops *mx;
    mixer_cfg mc;
    int grows;            /* the mixer's state grows with tokens (a KV cache): capped by max_t */
    float *state;         /* mx->state_floats(&mc) */
    float *conv_cache[3]; /* [D, conv_size] per convolved stream (q, k, v or the one stream) */
    int conv_dim[3];
    float *probes; /* [mixer_probe_floats] */
} layer;

/* Specifications in a hybrid model's "attn" key (models/hybrid.c). */
#define MODEL_MAX_ATTN_SPECS 8

typedef struct model {
    model_config c;
    /* hybrid models (fla's "attn" key): softmax attention layers with their own heads, window and
     * RoPE at the listed indices; layer.cfg points at their configuration */
    int nattn;
    model_config attn_cfg[MODEL_MAX_ATTN_SPECS];
    char *config_json; /* config.json as loaded or generated; written back by save */
    char source[512];  /* where it came from, for info and provenance */
    /* The file whose bytes are the weights (absolute; model_load: model.safetensors, else
     * model.safetensors.index.json, else the .safetensors file given), its size and mtime when it
     * was read, and its hex SHA-256 once model_weights_sha256 computed it. "" for random models. */
    char weights_path[4096];
    int64_t weights_size, weights_mtime_ns;
    char sha256[65];
    int nslots, slots_cap;
    wslot *slots;
    float *embed, *norm_f, *lm_head; /* lm_head == embed when tied */
    layer *layers;
    int pos;   /* tokens stepped since reset */
    int gpu;   /* run each core on the GPU where kernels/ has it (device gpu); else the CPU */
    int max_t; /* KV capacity of growing mixers */
    /* Called by model_step after each layer's core step (NULL: nobody): the inputs the core
     * read and its state after the token, for recordings beyond the probes (viz/recall.h). */
    void (*layer_hook)(void *ctx, const struct model *m, int layer, const mixer_tok *in,
                       const float *state);
    void *layer_hook_ctx;
    /* Called by the families right before the output projection (NULL: nobody), with the layer's
     * head outputs z [width] (the core's H heads of width / H each, after the output norm and
     * gate) as they enter it, to change in place: the engine's ablations. Only model_step calls
     * it, at token m->pos. */
    void (*out_hook)(void *ctx, const struct model *m, int layer, float *z, int width);
    /* Called by model_step right before each layer's core step (NULL: nobody), with the state
     * before the token: recorders that update incrementally (viz/recall.h) need both sides. */
    void (*layer_pre_hook)(void *ctx, const struct model *m, int layer, const mixer_tok *in,
                           const float *state);
    /* What model_step leaves out of a trace it is given (MODEL_REC_* bits; 0: records all): the
     * engine's probe selection (`set probes`) sets what nobody asked for. */
    unsigned rec_skip;
    /* the families' own probes of the current layer and token (family.h), when fprobe_on */
    float *fprobe;
    int fprobe_on;
    /* scratch for one token */
    float *x, *xn, *y, *h1, *h2, *o, *aux, *in[IN_COUNT];
    size_t in_floats[IN_COUNT], aux_floats, o_floats;
} model;

/* model->rec_skip bits: the cores' probes (computed only when set), the state snapshot, the
 * attention rows of softmax / Parallax layers, the families' and blocks' probes. */
enum {
    MODEL_REC_CORE = 1u << 0,
    MODEL_REC_STATE = 1u << 1,
    MODEL_REC_ATTN = 1u << 2,
    MODEL_REC_FAMILY = 1u << 3,
    MODEL_REC_ALL = 0xfu
};

/* The largest state (or KV cache) one layer may hold: 2^28 floats, 1 GiB. */
#define MODEL_MAX_STATE_FLOATS (1 << 28)

/* "gated_deltanet", ... */
const char *model_kind_name(model_kind k);
/* 1 when some layers are fla hybrid attention layers (config key "attn"). */
int model_is_hybrid(const model *m);
/* The default mixer of a model type ("gdn" for gated_deltanet, ...). */
const char *model_kind_mixer(model_kind k);

/* Builds a model from config.json text and an open checkpoint: every tensor checked (name,
 * shape, float dtype, finite), nothing missing, nothing extra. `label` names the source. */
int model_from_checkpoint(model **out, const char *config_text, const struct st_file *f,
                          const char *label, err *e);
/* PATH: a folder with config.json and model.safetensors / model.safetensors.index.json, or a
 * .safetensors file with config.json beside it. */
int model_load(model **out, const char *path, err *e);
/* The hex SHA-256 (64 lowercase digits) of the weights file the model was loaded from, computed
 * on the first call (one read of the file) and kept in m->sha256. NULL, with e untouched, for a
 * model that has no weights file (model random, a checkpoint parsed from memory); NULL with e set
 * when the file cannot be read or has changed (size or mtime) since the model was loaded. */
const char *model_weights_sha256(struct model *m, err *e);
/* A random model whose layers use MIXER (spec init). Options: layers= hidden= heads= head_dim=
 * vocab= seed=, and any other config.json key=value. Deterministic from the seed. */
int model_random(model **out, const char *mixer, opts *o, err *e);
/* Elements [0, n) of a normal tensor named `name` of a random model with this seed, N(0, sigma^2),
 * exactly as model_random fills it (over all cores; core/parallel.h). */
void model_random_normal(float *dst, int64_t n, uint64_t seed, const char *name, float sigma);
/* Writes PATH/config.json and PATH/model.safetensors (float32, fla names). */
int model_save(const model *m, const char *path, err *e);
void model_free(model *m);

/* Replaces the core of layer `li` (-1: every layer) by `mixer`, configured with `o` (the mixer's
 * own options). Fails, changing nothing, when the layer's projections cannot feed that mixer.
 * Resets the model. */
int model_swap(model *m, int li, const char *mixer, opts *o, err *e);
/* The same with the core given by its ops rather than its registry name (another backend of a
 * registered mixer, or a test double with the same name and inputs). */
int model_swap_ops(model *m, int li, const mixer_ops *mx, opts *o, err *e);
/* Comma-separated mixers a layer's projections can feed, into buf. */
const char *model_swappable(const model *m, char *buf, size_t n);
/* What layer L is, for messages: the model type's name, or "attention (hybrid)". */
const char *model_layer_kind(const model *m, const layer *L);
/* 1 for a hybrid's attention layer (fla's attn key: a configuration of its own, m->attn_cfg[k]),
 * 0 for the model's own layers. */
int model_layer_hybrid_attn(const model *m, const layer *L);
/* The first of the model's own layers (not a hybrid's attention layer); -1: none. */
int model_first_own_layer(const model *m);

/* Back to position 0: states to their prior, caches to zero. max_t: KV capacity of mixers whose
 * state grows with tokens (softmax, parallax); 0 keeps the current one. */
int model_reset(model *m, int max_t, err *e);

/* One token at position m->pos through every layer with the mixers' step; logits: [vocab].
 * With a trace, every layer's probes are recorded at token m->pos (the caller registered them
 * with model_register_probes and pushed the token). */
int model_step(model *m, int32_t token, float *logits, trace *tr, err *e);
/* T tokens from m->pos with the mixers' parallel forms (prefill); logits: [T, vocab]. Equals T
 * calls of model_step. */
int model_prefill(model *m, const int32_t *tokens, int T, float *logits, err *e);
/* The probes model_step records around the cores: one per layer for the blocks (source
 * "model": mix_out_norm, mlp_out_norm, resid_norm), one per layer and head for the family. */
const probe_def *model_block_probes(int *n);
const probe_def *model_family_probes(const model *m, int *n);
/* 1 when name is a block probe or a probe of any layer family. */
int model_probe_name_known(const char *name);
/* Registers every layer's probes (and the state snapshot) in a trace. */
int model_register_probes(const model *m, trace *tr, err *e);

/* A logit lens on layer li's memory: readbacks r [H, dv] (one per head, e.g. S^T k) through the
 * head's output norm (the gate open: the lens asks what the memory holds, not whether the token
 * lets it out), that head's columns of the output projection (h -1: every head), the final norm
 * and the LM head, into logits [vocab]. The direct path only: no residual, no later layers.
 * Layers whose core keeps a key-value matrix (GDN family, GLA, Mamba2: there the head's slice of
 * the grouped norm, alone). */
int model_lens(const model *m, int li, int h, const float *r, float *logits, err *e);

/* Recomputes what the layers derive from their weights (Kalman's discrete a and p) after the
 * weights changed in place (train). */
int model_refresh(model *m, err *e);

/* A few lines: type, sizes, each layer's mixer, parameter count. */
void model_print_info(const model *m, FILE *out);
/* Parameters (floats in the slot list). */
int64_t model_param_count(const model *m);
/* The slot named `name`, or NULL (tests). */
wslot *model_find_slot(const model *m, const char *name);

#endif
