/* family.h: what a layer family (models/layer_<family>.c) tells the model stack (model.c, load.c,
 * random.c). Internal to models/.
 *
 * A family owns: its config keys, the tensors of its layers, which mixers its projections can
 * feed and with which head layout, and the two per-token halves around the core:
 *   prep: normalised hidden x [C] -> the mixer's inputs for one token (+ aux kept for post)
 *   post: the core's output o [H, dv] (+ aux) -> the layer's contribution y [C]
 * prep advances the layer's convolution caches, so it must be called once per token in order. */
#ifndef MIXSCOPE_FAMILY_H
#define MIXSCOPE_FAMILY_H

#include <cjson/cJSON.h>

#include "../core/config.h"
#include "blocks.h"
#include "model.h"

typedef struct family_ops {
    layer_family fam;
    /* Probes of the layer around its core (one float per core head each, W_1): written by prep
     * and post into m->fprobe [nprobes][H] while m->fprobe_on (stepping with a trace). */
    const probe_def *probes;
    int nprobes;
    /* Reads the family's config keys (kind already set in c). */
    int (*parse)(model_config *c, const config *cfg, err *e);
    /* Declares layer li's mixer tensors, names starting with `prefix` ("model.layers.3.attn."). */
    int (*declare)(model *m, int li, const char *prefix, err *e);
    /* 1 when the family can feed `mixer`; sets the core's heads and widths. */
    int (*mixer_dims)(const model_config *c, const char *mixer, int *H, int *dk, int *dv);
    /* Options the family gives the core unless the user gave the same key: up to 4 "key=value"
     * strings into kv (e.g. KATA's variant=). May be NULL. */
    int (*default_opts)(const model_config *c, const char *mixer, char kv[4][64]);
    /* Sets what the core needs beyond its own options (scale, eps, static params...); keys the
     * user gave in `user` (may be NULL) are left as the user set them. */
    void (*tune)(const model *m, layer *L, const opts *user);
    /* Derived per-layer data after the weights are in (Kalman's discrete a, p). */
    int (*finish)(model *m, layer *L, err *e);
    /* Convolution streams: count and channel width of each (at most 3). */
    int (*conv_streams)(const model_config *c, int *dims);
    size_t (*aux_floats)(const model_config *c);
    size_t (*scratch_floats)(const model_config *c);
    void (*prep)(const model *m, layer *L, const float *x, int pos, float *const in[IN_COUNT],
                 float *aux, float *tmp);
    void (*post)(const model *m, const layer *L, const float *o, const float *aux, float *y,
                 float *tmp);
    /* `model random`: writes the family's keys into a config from the short options
     * (heads=, head_dim=, ... already removed from o by the caller and passed as ints; 0 = not
     * given). */
    int (*random_config)(cJSON *cfg, model_kind k, int hidden, int heads, int head_dim, err *e);
} family_ops;

extern const family_ops family_gdn, family_gla, family_mamba2, family_attn, family_kalman,
    family_kata;
const family_ops *family_of(layer_family f);

/* Adds a tensor to the model's slot list: name (printf), init, shape (ndim values). *dst will
 * point at its data once loaded or initialised. */
int model_slot(model *m, float **dst, init_kind init, float ia, float ib, int ndim,
               const int64_t *shape, err *e, const char *fmt, ...)
    __attribute__((format(printf, 9, 10)));
/* Shorthands for 1-, 2- and 3-d slots. */
int slot1(model *m, float **dst, init_kind ik, float a, int64_t d0, err *e, const char *prefix,
          const char *name);
int slot2(model *m, float **dst, init_kind ik, float a, int64_t d0, int64_t d1, err *e,
          const char *prefix, const char *name);
int slot3(model *m, float **dst, init_kind ik, float a, int64_t d0, int64_t d1, int64_t d2, err *e,
          const char *prefix, const char *name);

/* One projected stream of a token (q, k or v of a layer): out [D] = W x for the layer input x
 * [hidden]; then, with use_conv, the layer's short convolution number s (weights cw, bias cb or
 * NULL) with conv_act, and without it plain_act. tmp [D] is scratch. Advances the conv cache. */
void family_stream(const model *m, layer *L, int s, const float *x, const float *W, const float *cw,
                   const float *cb, int D, blk_act conv_act, blk_act plain_act, float *out,
                   float *tmp);

/* m->out_hook on the head outputs z [width] of layer L as they enter its output projection. */
void family_out_hook(const model *m, const layer *L, float *z, int width);

/* 1 when the user's options name `key` (without marking it used). */
int opts_given(const opts *o, const char *key);

/* 1 when the mixer reads input `w`. */
int mixer_reads(const mixer_ops *mx, mixer_input w);

/* Config helpers: an integer key that must lie in [lo, hi], and a string key matched against a
 * NULL-terminated list (returns the index). Both name the key in their error. */
int cfg_int_in(const config *cfg, const char *key, long def, long lo, long hi, int *out, err *e);
int cfg_choice(const config *cfg, const char *key, const char *def, const char *const *names,
               int *out, err *e);
/* Errors when the key is present and not null: a feature this lab does not implement. */
int cfg_require_null(const config *cfg, const char *key, err *e);

/* int(a * b) as Python computes it on doubles (fla's int(hidden_size * expand_k)). */
long py_int_mul(long a, double b);

/* Random config helpers: set a key (replacing any). */
void rc_num(cJSON *cfg, const char *key, double v);
void rc_bool(cJSON *cfg, const char *key, int v);
void rc_str(cJSON *cfg, const char *key, const char *v);
/* An expand ratio r with int(hidden * r) == want exactly (nudged up by ulps when needed). */
double rc_ratio(long want, long hidden);

#endif
