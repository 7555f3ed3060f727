/* model.c: the stack. Embedding, then per layer a pre-norm residual mixer block and a pre-norm
 * residual MLP block, then the final norm and the head (spec/delta-family.md §1.3):
 *
 *   h  = x + Layer(RMSNorm_attn(x))          Layer = family prep -> mixer core -> family post
 *   x' = h + MLP(RMSNorm_mlp(h))             (Mamba2 has no MLP block)
 *   logits = W_head RMSNorm_final(x_L)
 *
 * model_step runs one token with each core's step; model_prefill runs T tokens layer by layer
 * with each core's parallel form. Both advance the same caches, so they can be mixed freely. */
#include "model.h"

#include <math.h>
#include <stdarg.h>
#include <stdlib.h>
#include <string.h>

#include "../kernels/gpu.h"
#include "../mixers/record.h"
#include "blocks.h"
#include "family.h"
#include "internal.h"

/* Each model type: fla's config name and the mixer core its layers use, one row per model_kind
 * (indexed by it; the assert below says a row was not forgotten). */
static const struct {
    model_kind kind;
    const char *name, *mixer;
} KINDS[] = {
    [MK_GATED_DELTANET] = {MK_GATED_DELTANET, "gated_deltanet", "gdn"},
    [MK_DELTA_NET] = {MK_DELTA_NET, "delta_net", "deltanet"},
    [MK_KACZMARZ_DELTANET] = {MK_KACZMARZ_DELTANET, "kaczmarz_deltanet", "kaczmarz"},
    [MK_GLA] = {MK_GLA, "gla", "gla"},
    [MK_MAMBA2] = {MK_MAMBA2, "mamba2", "mamba2"},
    [MK_TRANSFORMER] = {MK_TRANSFORMER, "transformer", "softmax"},
    [MK_PARALLAX] = {MK_PARALLAX, "parallax", "parallax"},
    [MK_KALMAN] = {MK_KALMAN, "kalman", "kalman"},
    [MK_KATA] = {MK_KATA, "kata", "kata"},
};
_Static_assert(sizeof KINDS / sizeof KINDS[0] == MK_COUNT, "one KINDS row per model_kind");

const char *model_kind_name(model_kind k) {
    return (unsigned)k < MK_COUNT ? KINDS[k].name : "?";
}

const char *model_kind_mixer(model_kind k) {
    return (unsigned)k < MK_COUNT ? KINDS[k].mixer : "?";
}

int model_kind_parse(const char *name, model_kind *k) {
    for (int i = 0; i < MK_COUNT; i++)
        if (strcmp(name, KINDS[i].name) == 0) return *k = KINDS[i].kind, 0;
    return -1;
}

int model_kind_of_mixer(const char *mixer, model_kind *k) {
    for (int i = 0; i < MK_COUNT; i++)
        if (strcmp(mixer, KINDS[i].mixer) == 0) return *k = KINDS[i].kind, 0;
    return -1;
}

const family_ops *family_of(layer_family f) {
    switch (f) {
    case FAM_GDN:
        return &family_gdn;
    case FAM_GLA:
        return &family_gla;
    case FAM_MAMBA2:
        return &family_mamba2;
    case FAM_ATTN:
        return &family_attn;
    case FAM_KALMAN:
        return &family_kalman;
    case FAM_KATA:
        return &family_kata;
    }
    return NULL;
}

int opts_given(const opts *o, const char *key) {
    for (int i = 0; o && i < o->n; i++)
        if (strcmp(o->key[i], key) == 0) return 1;
    return 0;
}

int mixer_reads(const mixer_ops *mx, mixer_input w) {
    for (int i = 0; i < mx->ninputs; i++)
        if (mx->inputs[i].which == w) return 1;
    return 0;
}

/* ---- the slot list ---- */

int model_slot(model *m, float **dst, init_kind init, float ia, float ib, int ndim,
               const int64_t *shape, err *e, const char *fmt, ...) {
    if (m->nslots == m->slots_cap) {
        int nc = m->slots_cap ? m->slots_cap * 2 : 64;
        wslot *ns = realloc(m->slots, (size_t)nc * sizeof *ns);
        if (!ns) return err_set(e, "out of memory");
        m->slots = ns, m->slots_cap = nc;
    }
    wslot *s = &m->slots[m->nslots];
    memset(s, 0, sizeof *s);
    va_list ap;
    va_start(ap, fmt);
    int n = vsnprintf(s->name, sizeof s->name, fmt, ap);
    va_end(ap);
    if (n < 0 || (size_t)n >= sizeof s->name) return err_set(e, "tensor name too long");
    s->ndim = ndim;
    for (int i = 0; i < ndim; i++) {
        if (shape[i] < 1) return err_set(e, "tensor '%s': empty dimension", s->name);
        s->shape[i] = shape[i];
    }
    s->dst = dst, s->init = init, s->ia = ia, s->ib = ib;
    m->nslots++;
    return 0;
}

int slot1(model *m, float **dst, init_kind ik, float a, int64_t d0, err *e, const char *prefix,
          const char *name) {
    int64_t s[1] = {d0};
    return model_slot(m, dst, ik, a, 0, 1, s, e, "%s%s", prefix, name);
}

int slot2(model *m, float **dst, init_kind ik, float a, int64_t d0, int64_t d1, err *e,
          const char *prefix, const char *name) {
    int64_t s[2] = {d0, d1};
    return model_slot(m, dst, ik, a, 0, 2, s, e, "%s%s", prefix, name);
}

int slot3(model *m, float **dst, init_kind ik, float a, int64_t d0, int64_t d1, int64_t d2, err *e,
          const char *prefix, const char *name) {
    int64_t s[3] = {d0, d1, d2};
    return model_slot(m, dst, ik, a, 0, 3, s, e, "%s%s", prefix, name);
}

wslot *model_find_slot(const model *m, const char *name) {
    for (int i = 0; i < m->nslots; i++)
        if (strcmp(m->slots[i].name, name) == 0) return &m->slots[i];
    return NULL;
}

int64_t wslot_numel(const wslot *s) {
    int64_t n = 1;
    for (int i = 0; i < s->ndim; i++) n *= s->shape[i];
    return n;
}

int64_t model_param_count(const model *m) {
    int64_t n = 0;
    for (int i = 0; i < m->nslots; i++) n += wslot_numel(&m->slots[i]);
    return n;
}

/* Declares every tensor the config implies: embedding, per layer the block norms, the family's
 * mixer tensors and the MLP, the final norm and (untied) the head. */
int model_declare_all(model *m, err *e) {
    const model_config *c = &m->c;
    int mamba = c->kind == MK_MAMBA2;
    const char *root = mamba ? "backbone" : "model";
    char pre[80], blk[80];
    snprintf(pre, sizeof pre, "%s.", root);
    if (slot2(m, &m->embed, INIT_NORMAL, 0.02f, c->vocab, c->hidden, e, pre, "embeddings.weight"))
        return -1;
    for (int li = 0; li < c->layers; li++) {
        layer *L = &m->layers[li];
        snprintf(blk, sizeof blk, "%s.layers.%d.", root, li);
        if (mamba) {
            if (slot1(m, &L->attn_norm, INIT_ONES, 0, c->hidden, e, blk, "norm.weight")) return -1;
            snprintf(pre, sizeof pre, "%smixer.", blk);
        } else {
            if (slot1(m, &L->attn_norm, INIT_ONES, 0, c->hidden, e, blk, "attn_norm.weight"))
                return -1;
            snprintf(pre, sizeof pre, "%sattn.", blk);
        }
        if (family_of(L->cfg->family)->declare(m, li, pre, e)) return -1;
        if (c->inter > 0) {
            if (slot1(m, &L->mlp_norm, INIT_ONES, 0, c->hidden, e, blk, "mlp_norm.weight") ||
                slot2(m, &L->gate_proj, INIT_NORMAL, 0.02f, c->inter, c->hidden, e, blk,
                      "mlp.gate_proj.weight") ||
                slot2(m, &L->up_proj, INIT_NORMAL, 0.02f, c->inter, c->hidden, e, blk,
                      "mlp.up_proj.weight") ||
                slot2(m, &L->down_proj, INIT_NORMAL, 0.02f, c->hidden, c->inter, e, blk,
                      "mlp.down_proj.weight"))
                return -1;
        }
    }
    snprintf(pre, sizeof pre, "%s.", root);
    if (slot1(m, &m->norm_f, INIT_ONES, 0, c->hidden, e, pre,
              mamba ? "norm_f.weight" : "norm.weight"))
        return -1;
    if (!c->tie &&
        slot2(m, &m->lm_head, INIT_NORMAL, 0.02f, c->vocab, c->hidden, e, "", "lm_head.weight"))
        return -1;
    return 0;
}

/* ---- mixers ---- */

/* The user's options plus the family's defaults for keys the user left out. */
static int merged_opts(const layer *L, const mixer_ops *mx, const opts *user, opts *out, err *e) {
    const family_ops *f = family_of(L->cfg->family);
    char kv[4][64], *argv[OPTS_MAX + 4];
    int n = f->default_opts ? f->default_opts(L->cfg, mx->name, kv) : 0, argc = 0;
    char *owned[OPTS_MAX] = {0};
    for (int i = 0; i < n; i++) {
        char key[64];
        snprintf(key, sizeof key, "%.*s", (int)strcspn(kv[i], "="), kv[i]);
        if (!opts_given(user, key)) argv[argc++] = kv[i];
    }
    int no = 0;
    for (int i = 0; user && i < user->n; i++) {
        size_t len = strlen(user->key[i]) + strlen(user->val[i]) + 2;
        if (!(owned[no] = malloc(len))) break;
        snprintf(owned[no], len, "%s=%s", user->key[i], user->val[i]);
        argv[argc++] = owned[no++];
    }
    int rc = user && no < user->n ? err_set(e, "out of memory") : opts_parse(out, argc, argv, e);
    for (int i = 0; i < no; i++) free(owned[i]);
    return rc;
}

static const char *layer_swappable(const layer *L, char *buf, size_t n);

/* Configures core `mx` for layer L (all or nothing: L is unchanged on failure). */
static int layer_set_mixer(model *m, layer *L, const mixer_ops *mx, const opts *user, err *e) {
    const family_ops *f = family_of(L->cfg->family);
    int H, dk, dv;
    if (!f->mixer_dims(L->cfg, mx->name, &H, &dk, &dv)) {
        char buf[160];
        return err_set(e, "a%s %s layer cannot feed the %s mixer (it can feed: %s)",
                       L->cfg == &m->c ? "" : "n", model_layer_kind(m, L), mx->name,
                       layer_swappable(L, buf, sizeof buf));
    }
    opts o;
    mixer_cfg mc;
    if (merged_opts(L, mx, user, &o, e)) return -1;
    int rc = mixer_configure(mx, &mc, H, dk, dv, &o, e);
    if (!rc) rc = opts_check_unused(&o, e);
    opts_free(&o);
    if (rc) return -1;
    layer tmp = *L;
    tmp.mx = mx, tmp.mc = mc;
    tmp.mc.max_t = m->max_t;
    f->tune(m, &tmp, user);
    /* a state that grows with max_t is a KV cache: stepping past max_t is refused */
    mixer_cfg a = tmp.mc, b = tmp.mc;
    a.max_t = 1, b.max_t = 2;
    tmp.grows = mx->state_floats(&a) != mx->state_floats(&b);
    size_t sf = mx->state_floats(&tmp.mc), pf = mixer_probe_floats(mx, &tmp.mc);
    if (sf > MODEL_MAX_STATE_FLOATS)
        return err_set(e, "%s: a state of %zu floats per layer is more than this lab holds (%d)",
                       mx->name, sf, MODEL_MAX_STATE_FLOATS);
    float *st = malloc((sf ? sf : 1) * sizeof *st), *pr = malloc((pf ? pf : 1) * sizeof *pr);
    if (!st || !pr) {
        free(st), free(pr);
        return err_set(e, "%s: out of memory for the state (%zu floats)", mx->name, sf);
    }
    free(L->state), free(L->probes);
    tmp.state = st, tmp.probes = pr;
    mx->state_init(&tmp.mc, tmp.state);
    *L = tmp;
    return 0;
}

/* Scratch sized for every layer's current core. */
static int model_alloc_scratch(model *m, err *e) {
    const model_config *c = &m->c;
    size_t need[IN_COUNT] = {0}, of = 0, tmpn = 0, auxn = 0;
    int nfp = 0;
    for (int li = 0; li < c->layers; li++) {
        const layer *L = &m->layers[li];
        for (int i = 0; i < IN_COUNT; i++) {
            size_t n = (size_t)L->mc.H * (size_t)mixer_input_floats(&L->mc, (mixer_input)i);
            if (n > need[i]) need[i] = n;
        }
        size_t n = (size_t)L->mc.H * (size_t)L->mc.dv;
        if (n > of) of = n;
        /* a hybrid model's layers are of two families: the largest of each need */
        const family_ops *f = family_of(L->cfg->family);
        if (f->scratch_floats(L->cfg) > tmpn) tmpn = f->scratch_floats(L->cfg);
        if (f->aux_floats(L->cfg) > auxn) auxn = f->aux_floats(L->cfg);
        if (f->nprobes > nfp) nfp = f->nprobes;
    }
    int Hmax = 1;
    for (int li = 0; li < c->layers; li++)
        if (m->layers[li].mc.H > Hmax) Hmax = m->layers[li].mc.H;
    free(m->fprobe);
    m->fprobe = malloc((size_t)(nfp + 1) * (size_t)Hmax * sizeof(float));
    size_t hidden = (size_t)c->hidden, inter = c->inter > 0 ? (size_t)c->inter : 1;
    free(m->x), free(m->xn), free(m->y), free(m->h1), free(m->h2), free(m->o), free(m->aux);
    m->x = malloc(hidden * sizeof(float));
    m->xn = malloc(hidden * sizeof(float));
    m->y = malloc(hidden * sizeof(float));
    m->h1 = malloc((inter > tmpn ? inter : tmpn) * sizeof(float)); /* MLP and family scratch */
    m->h2 = malloc(inter * sizeof(float));
    m->o = malloc((of ? of : 1) * sizeof(float));
    m->aux_floats = auxn;
    m->aux = malloc((m->aux_floats ? m->aux_floats : 1) * sizeof(float));
    m->o_floats = of;
    int bad = !m->x || !m->xn || !m->y || !m->h1 || !m->h2 || !m->o || !m->aux || !m->fprobe;
    for (int i = 0; i < IN_COUNT; i++) {
        free(m->in[i]);
        m->in_floats[i] = need[i];
        m->in[i] = calloc(need[i] ? need[i] : 1, sizeof(float));
        bad |= !m->in[i];
    }
    return bad ? err_set(e, "out of memory for the model's scratch") : 0;
}

/* After the weights are in: derived data, caches, default cores, scratch, position 0. */
int model_finish(model *m, err *e) {
    const model_config *c = &m->c;
    for (int i = 0; i < m->nslots; i++) *m->slots[i].dst = m->slots[i].data;
    if (c->tie) m->lm_head = m->embed;
    if (!m->max_t) m->max_t = MIXER_DEFAULT_MAX_T;
    for (int li = 0; li < c->layers; li++) {
        layer *L = &m->layers[li];
        if (!L->cfg) L->cfg = c;
        const family_ops *f = family_of(L->cfg->family);
        const mixer_ops *mx = mixer_find(model_kind_mixer(L->cfg->kind));
        if (!mx)
            return err_set(e, "the %s mixer (needed by %s layers) is not in this build",
                           model_kind_mixer(L->cfg->kind), model_kind_name(L->cfg->kind));
        int dims[3];
        int ns = f->conv_streams(L->cfg, dims);
        if (f->finish && f->finish(m, L, e)) return err_prefix(e, "layer %d", li);
        for (int s = 0; s < ns; s++) {
            L->conv_dim[s] = dims[s];
            L->conv_cache[s] = calloc((size_t)dims[s] * (size_t)L->cfg->conv_size, sizeof(float));
            if (!L->conv_cache[s]) return err_set(e, "out of memory");
        }
        if (layer_set_mixer(m, L, mx, NULL, e)) return err_prefix(e, "layer %d", li);
    }
    if (model_alloc_scratch(m, e)) return -1;
    return model_reset(m, 0, e);
}

void model_free(model *m) {
    if (!m) return;
    gpu_release_weights(); /* device copies are keyed by these host addresses, soon reused */
    for (int i = 0; i < m->nslots; i++) free(m->slots[i].data);
    free(m->slots);
    if (m->layers)
        for (int li = 0; li < m->c.layers; li++) {
            layer *L = &m->layers[li];
            free(L->state), free(L->probes), free(L->kal_a), free(L->kal_p);
            for (int s = 0; s < 3; s++) free(L->conv_cache[s]);
        }
    free(m->layers);
    free(m->x), free(m->xn), free(m->y), free(m->h1), free(m->h2), free(m->o), free(m->aux);
    free(m->fprobe);
    for (int i = 0; i < IN_COUNT; i++) free(m->in[i]);
    free(m->config_json);
    free(m);
}

int model_reset(model *m, int max_t, err *e) {
    if (max_t > 0 && max_t != m->max_t) {
        /* KV caches are sized by max_t: reallocate those that grow */
        for (int li = 0; li < m->c.layers; li++) {
            layer *L = &m->layers[li];
            if (!L->grows) continue;
            mixer_cfg mc = L->mc;
            mc.max_t = max_t;
            size_t sf = L->mx->state_floats(&mc);
            if (sf > MODEL_MAX_STATE_FLOATS)
                return err_set(e, "a %d-token KV cache of %zu floats is more than this lab holds",
                               max_t, sf);
            float *st = malloc((sf ? sf : 1) * sizeof *st);
            if (!st)
                return err_set(e, "out of memory for a %d-token KV cache (%zu floats)", max_t, sf);
            free(L->state);
            L->state = st, L->mc = mc;
        }
        m->max_t = max_t;
        for (int li = 0; li < m->c.layers; li++) m->layers[li].mc.max_t = max_t;
    }
    for (int li = 0; li < m->c.layers; li++) {
        layer *L = &m->layers[li];
        L->mx->state_init(&L->mc, L->state);
        for (int s = 0; s < 3; s++)
            if (L->conv_cache[s])
                memset(L->conv_cache[s], 0,
                       (size_t)L->conv_dim[s] * (size_t)L->cfg->conv_size * sizeof(float));
    }
    m->pos = 0;
    return 0;
}

/* ---- swap ---- */

static const char *cfg_swappable(const model_config *c, char *buf, size_t n) {
    const family_ops *f = family_of(c->family);
    size_t o = 0;
    buf[0] = '\0';
    for (int i = 0; i < mixer_count; i++) {
        const mixer_ops *mx = mixer_all[i];
        int H, dk, dv;
        if (!mx || !f->mixer_dims(c, mx->name, &H, &dk, &dv)) continue;
        int w = snprintf(buf + o, n - o, "%s%s", o ? ", " : "", mx->name);
        if (w < 0 || (size_t)w >= n - o) break;
        o += (size_t)w;
    }
    return buf;
}

const char *model_swappable(const model *m, char *buf, size_t n) {
    return cfg_swappable(&m->c, buf, n);
}

static const char *layer_swappable(const layer *L, char *buf, size_t n) {
    return cfg_swappable(L->cfg, buf, n);
}

int model_layer_hybrid_attn(const model *m, const layer *L) {
    return L->cfg && L->cfg != &m->c;
}

int model_first_own_layer(const model *m) {
    for (int li = 0; li < m->c.layers; li++)
        if (!model_layer_hybrid_attn(m, &m->layers[li])) return li;
    return -1;
}

const char *model_layer_kind(const model *m, const layer *L) {
    return model_layer_hybrid_attn(m, L) ? "attention (hybrid)" : model_kind_name(m->c.kind);
}

int model_swap(model *m, int li, const char *mixer, opts *o, err *e) {
    const mixer_ops *mx = mixer_find(mixer);
    if (!mx) return err_set(e, "unknown mixer '%.40s'", mixer);
    return model_swap_ops(m, li, mx, o, e);
}

int model_swap_ops(model *m, int li, const mixer_ops *mx, opts *o, err *e) {
    if (li >= m->c.layers) return err_set(e, "no layer %d (the model has %d)", li, m->c.layers);
    /* all or nothing: configure into copies first */
    int lo = li < 0 ? 0 : li, hi = li < 0 ? m->c.layers : li + 1;
    layer *copy = malloc((size_t)(hi - lo) * sizeof *copy);
    if (!copy) return err_set(e, "out of memory");
    for (int i = lo; i < hi; i++) {
        copy[i - lo] = m->layers[i];
        copy[i - lo].state = NULL, copy[i - lo].probes = NULL;
        if (layer_set_mixer(m, &copy[i - lo], mx, o, e)) {
            for (int j = lo; j <= i; j++) free(copy[j - lo].state), free(copy[j - lo].probes);
            free(copy);
            return err_prefix(e, "layer %d", i);
        }
    }
    for (int i = lo; i < hi; i++) {
        free(m->layers[i].state), free(m->layers[i].probes);
        m->layers[i] = copy[i - lo];
    }
    free(copy);
    if (model_alloc_scratch(m, e)) return -1;
    return model_reset(m, 0, e);
}

/* ---- running ---- */

/* Probes of the block around the cores, one per layer (source "model"). */
static const probe_def BLOCK_PROBES[] = {
    {"mix_out_norm", W_1, "|y| of the mixer block's contribution to the residual stream"},
    {"mlp_out_norm", W_1, "|y| of the MLP block's contribution to the residual stream"},
    {"resid_norm", W_1, "|x| of the residual stream after the layer"},
};
enum { NBLOCK = 3 };

const probe_def *model_block_probes(int *n) {
    *n = NBLOCK;
    return BLOCK_PROBES;
}

int model_probe_name_known(const char *name) {
    for (int i = 0; i < NBLOCK; i++)
        if (!strcmp(BLOCK_PROBES[i].name, name)) return 1;
    const layer_family fams[] = {FAM_GDN, FAM_GLA, FAM_MAMBA2, FAM_ATTN, FAM_KALMAN, FAM_KATA};
    for (size_t f = 0; f < sizeof fams / sizeof fams[0]; f++) {
        const family_ops *ops = family_of(fams[f]);
        for (int i = 0; i < ops->nprobes; i++)
            if (!strcmp(ops->probes[i].name, name)) return 1;
    }
    return 0;
}

const probe_def *model_family_probes(const model *m, int *n) {
    const family_ops *f = family_of(m->c.family);
    *n = f->nprobes;
    return f->probes;
}

int model_register_probes(const model *m, trace *tr, err *e) {
    for (int li = 0; li < m->c.layers; li++) {
        const layer *L = &m->layers[li];
        const family_ops *f = family_of(L->cfg->family);
        if (probe_register(tr, L->mx, &L->mc, m->c.layers, e) ||
            probe_register_state(tr, L->mx, &L->mc, m->c.layers, e) ||
            probe_register_attn(tr, L->mx, &L->mc, m->c.layers, e))
            return err_prefix(e, "layer %d (%s)", li, L->mx->name);
        for (int i = 0; i < f->nprobes; i++)
            if (trace_add_series(tr, f->probes[i].name, f->probes[i].meaning, "model", m->c.layers,
                                 L->mc.H, 1, e) < 0)
                return -1;
    }
    for (int i = 0; i < NBLOCK; i++)
        if (trace_add_series(tr, BLOCK_PROBES[i].name, BLOCK_PROBES[i].meaning, "model",
                             m->c.layers, 1, 1, e) < 0)
            return -1;
    return 0;
}

/* Copies [H] values of a named series into token t, layer li (when registered that way). */
static void put_series(trace *tr, const char *name, int64_t t, int li, const float *v, int H) {
    int s = trace_find(tr, name);
    if (s >= 0 && tr->series[s].width == 1) trace_put_heads(tr, s, t, li, v, H, 1);
}

static float norm2(const float *x, int n) {
    double s = 0;
    for (int i = 0; i < n; i++) s += (double)x[i] * x[i];
    return (float)sqrt(s);
}

static void tok_inputs(const layer *L, float *const in[IN_COUNT], mixer_tok *tok) {
    for (int i = 0; i < IN_COUNT; i++)
        tok->in[i] = mixer_reads(L->mx, (mixer_input)i) ? in[i] : NULL;
}

static void mlp_block(model *m, const layer *L, float *x) {
    const model_config *c = &m->c;
    if (c->inter <= 0) return;
    blk_rmsnorm(m->xn, x, L->mlp_norm, c->hidden, c->norm_eps);
    blk_mlp(m->y, m->xn, L->gate_proj, L->up_proj, L->down_proj, c->hidden, c->inter, m->h1, m->h2);
    for (int i = 0; i < c->hidden; i++) x[i] += m->y[i];
}

static void head(model *m, float *x, float *logits) {
    const model_config *c = &m->c;
    blk_rmsnorm(m->xn, x, m->norm_f, c->hidden, c->norm_eps);
    blk_linear(logits, m->xn, m->lm_head, NULL, c->vocab, c->hidden);
}

static int check_room(const model *m, int T, err *e) {
    for (int li = 0; li < m->c.layers; li++)
        if (m->layers[li].grows && (int64_t)m->pos + T > m->max_t)
            return err_set(e,
                           "layer %d (%s) keeps a KV cache of %d tokens; %d are needed "
                           "(reset with a larger capacity)",
                           li, m->layers[li].mx->name, m->max_t, m->pos + T);
    return 0;
}

static int check_token(const model *m, int32_t t, err *e) {
    if (t < 0 || t >= m->c.vocab)
        return err_set(e, "token id %d outside the vocabulary [0, %d)", (int)t, m->c.vocab);
    return 0;
}

/* The dense layers under `device gpu`: one cuBLAS product per call (weights stay on the device). */
static int gpu_dense(float *y, const float *x, const float *W, const float *b, int out, int in) {
    return gpu_linear(y, x, W, b, 1, out, in, NULL);
}

static int model_step_impl(model *m, int32_t token, float *logits, trace *tr, err *e);
static int model_prefill_impl(model *m, const int32_t *tokens, int T, float *logits, err *e);

void family_out_hook(const model *m, const layer *L, float *z, int width) {
    if (m->out_hook) m->out_hook(m->layer_hook_ctx, m, (int)(L - m->layers), z, width);
}

int model_step(model *m, int32_t token, float *logits, trace *tr, err *e) {
    blk_set_linear_backend(m->gpu ? gpu_dense : NULL);
    int rc = model_step_impl(m, token, logits, tr, e);
    blk_set_linear_backend(NULL);
    return rc;
}

int model_prefill(model *m, const int32_t *tokens, int T, float *logits, err *e) {
    blk_set_linear_backend(m->gpu ? gpu_dense : NULL);
    int rc = model_prefill_impl(m, tokens, T, logits, e);
    blk_set_linear_backend(NULL);
    return rc;
}

static int model_step_impl(model *m, int32_t token, float *logits, trace *tr, err *e) {
    const model_config *c = &m->c;
    if (check_token(m, token, e) || check_room(m, 1, e)) return -1;
    memcpy(m->x, m->embed + (size_t)token * (size_t)c->hidden, (size_t)c->hidden * sizeof(float));
    /* what goes into the trace (rec_skip: the engine's probe selection) */
    unsigned rec = tr ? MODEL_REC_ALL & ~m->rec_skip : 0;
    m->fprobe_on = (rec & MODEL_REC_FAMILY) != 0;
    for (int li = 0; li < c->layers; li++) {
        layer *L = &m->layers[li];
        const family_ops *f = family_of(L->cfg->family);
        mixer_tok tok;
        float *probes = rec & MODEL_REC_CORE ? L->probes : NULL;
        if (m->fprobe_on)
            for (int i = 0; i < f->nprobes * L->mc.H; i++) m->fprobe[i] = NAN;
        blk_rmsnorm(m->xn, m->x, L->attn_norm, c->hidden, c->norm_eps);
        f->prep(m, L, m->xn, m->pos, m->in, m->aux, m->h1);
        tok_inputs(L, m->in, &tok);
        if (m->layer_pre_hook) m->layer_pre_hook(m->layer_hook_ctx, m, li, &tok, L->state);
        if (m->gpu && gpu_mixer_supported(L->mx, GPU_STEP)) {
            mixer_seq one = {.T = 1};
            for (int i = 0; i < IN_COUNT; i++) one.in[i] = tok.in[i];
            if (gpu_mixer_run(L->mx, &L->mc, L->state, &one, m->pos, m->o, probes, GPU_STEP,
                              GPU_F32, e))
                return err_prefix(e, "layer %d (%s on the gpu)", li, L->mx->name);
        } else {
            mixer_step_par(L->mx, &L->mc, L->state, &tok, m->pos, m->o, probes);
        }
        if (probes) probe_record(tr, L->mx, &L->mc, L->probes, m->pos, li);
        if (rec & MODEL_REC_STATE) probe_record_state(tr, L->mx, &L->mc, L->state, m->pos, li);
        if (rec & MODEL_REC_ATTN) probe_record_attn(tr, L->mx, &L->mc, L->state, &tok, m->pos, li);
        if (m->layer_hook) m->layer_hook(m->layer_hook_ctx, m, li, &tok, L->state);
        f->post(m, L, m->o, m->aux, m->y, m->h1);
        for (int i = 0; i < c->hidden; i++) m->x[i] += m->y[i];
        if (!(rec & MODEL_REC_FAMILY)) {
            mlp_block(m, L, m->x);
            continue;
        }
        float bp[NBLOCK] = {norm2(m->y, c->hidden), NAN, NAN};
        mlp_block(m, L, m->x);
        if (c->inter > 0) bp[1] = norm2(m->y, c->hidden);
        bp[2] = norm2(m->x, c->hidden);
        for (int i = 0; i < f->nprobes; i++)
            put_series(tr, f->probes[i].name, m->pos, li, m->fprobe + (size_t)i * L->mc.H, L->mc.H);
        for (int i = 0; i < NBLOCK; i++)
            put_series(tr, BLOCK_PROBES[i].name, m->pos, li, &bp[i], 1);
    }
    m->fprobe_on = 0;
    head(m, m->x, logits);
    m->pos++;
    return 0;
}

/* ---- prefill's dense products, a block of tokens at a time ----
 *
 * blk_linear_batch gives, bit for bit, what blk_linear gives token by token, so these change no
 * number of prefill: they only read each weight once per block of tokens instead of once a token.
 * PREFILL_BLOCK tokens bound the scratch. */
#define PREFILL_BLOCK 256
#define PF_MAX_PROJ   16

/* The family's projections of the normalised input. prep runs token by token (its short
 * convolutions keep state) and calls blk_linear. While it runs, pf_backend answers each call whose
 * input is, bit for bit, the current token's normalised input and whose weights were seen on the
 * block's first token, from products batched over the block's other tokens. Anything else (a
 * product of another vector, new weights) declines and runs on the CPU as before. */
typedef struct pf_proj {
    const float *W, *b;
    int out;
    float *Y; /* [block tokens, out]; NULL: not batched */
} pf_proj;

typedef struct pf_memo {
    int C;           /* the input width: hidden */
    const float *xn; /* the current token's normalised input */
    int t;           /* its row in the block; -1: recording (the block's first token) */
    int nproj;
    pf_proj proj[PF_MAX_PROJ];
} pf_memo;

static _Thread_local pf_memo *pf_cur; /* another thread's blk_linear finds none and declines */

static int pf_backend(float *y, const float *x, const float *W, const float *b, int out, int in) {
    pf_memo *p = pf_cur;
    if (!p || in != p->C || memcmp(x, p->xn, (size_t)in * sizeof *x) != 0) return 1;
    for (int k = 0; k < p->nproj; k++) {
        pf_proj *q = &p->proj[k];
        if (q->W != W || q->b != b || q->out != out) continue;
        if (p->t < 0 || !q->Y) return 1;
        memcpy(y, q->Y + (size_t)p->t * (size_t)out, (size_t)out * sizeof *y);
        return 0;
    }
    if (p->t < 0 && p->nproj < PF_MAX_PROJ)
        p->proj[p->nproj++] = (pf_proj){.W = W, .b = b, .out = out};
    return 1;
}

/* prep for tokens [t0, t0 + n) of a layer: XN [n, C] holds their normalised inputs */
static void prefill_prep(model *m, layer *L, const float *XN, int t0, int n, float *SEQ[IN_COUNT],
                         const size_t stride[IN_COUNT], float *AUX) {
    const family_ops *f = family_of(L->cfg->family);
    size_t C = (size_t)m->c.hidden;
    pf_memo memo = {.C = m->c.hidden, .t = -1};
    /* under `device gpu` the products go to cuBLAS token by token */
    int memo_on = !m->gpu && n > 1;
    for (int j = 0; j < n; j++) {
        int t = t0 + j;
        float *in[IN_COUNT];
        for (int i = 0; i < IN_COUNT; i++) in[i] = SEQ[i] ? SEQ[i] + t * stride[i] : m->in[i];
        memo.xn = XN + (size_t)j * C, memo.t = j - 1;
        memcpy(m->xn, memo.xn, C * sizeof(float));
        if (memo_on) {
            pf_cur = &memo;
            blk_set_linear_backend(pf_backend);
        }
        f->prep(m, L, m->xn, m->pos + t, in, AUX + t * m->aux_floats, m->h1);
        if (memo_on) {
            blk_set_linear_backend(NULL);
            pf_cur = NULL;
        }
        if (j == 0 && memo_on) /* the rest of the block, for the weights seen on its first token */
            for (int k = 0; k < memo.nproj; k++) {
                pf_proj *q = &memo.proj[k];
                if ((q->Y = malloc((size_t)(n - 1) * (size_t)q->out * sizeof(float))))
                    blk_linear_batch(q->Y, XN + C, q->W, q->b, n - 1, q->out, m->c.hidden);
            }
    }
    for (int k = 0; k < memo.nproj; k++) free(memo.proj[k].Y);
}

/* x[t] += MLP(RMSNorm_mlp(x[t])) for n tokens: mlp_block's arithmetic, batched.
 * XN [n, C], H1, H2 [n, inter], Yb [n, C]: scratch. */
static void prefill_mlp(const model *m, const layer *L, float *X, int n, float *XN, float *H1,
                        float *H2, float *Yb) {
    const model_config *c = &m->c;
    size_t C = (size_t)c->hidden, I = (size_t)c->inter;
    if (c->inter <= 0) return;
    for (int t = 0; t < n; t++)
        blk_rmsnorm(XN + t * C, X + t * C, L->mlp_norm, c->hidden, c->norm_eps);
    blk_linear_batch(H1, XN, L->gate_proj, NULL, n, c->inter, c->hidden);
    blk_linear_batch(H2, XN, L->up_proj, NULL, n, c->inter, c->hidden);
    for (size_t i = 0; i < (size_t)n * I; i++) H1[i] = blk_silu(H1[i]) * H2[i];
    blk_linear_batch(Yb, H1, L->down_proj, NULL, n, c->hidden, c->inter);
    for (size_t i = 0; i < (size_t)n * C; i++) X[i] += Yb[i];
}

/* logits[t] = W_head RMSNorm_final(x[t]) for n tokens: head()'s arithmetic, batched */
static void prefill_head(const model *m, const float *X, int n, float *XN, float *logits) {
    const model_config *c = &m->c;
    size_t C = (size_t)c->hidden;
    for (int t = 0; t < n; t++)
        blk_rmsnorm(XN + t * C, X + t * C, m->norm_f, c->hidden, c->norm_eps);
    blk_linear_batch(logits, XN, m->lm_head, NULL, n, c->vocab, c->hidden);
}

static int model_prefill_impl(model *m, const int32_t *tokens, int T, float *logits, err *e) {
    const model_config *c = &m->c;
    if (T <= 0) return 0;
    for (int t = 0; t < T; t++)
        if (check_token(m, tokens[t], e)) return -1;
    if (check_room(m, T, e)) return -1;
    size_t C = (size_t)c->hidden, tn = (size_t)T;
    size_t nb = (size_t)(T < PREFILL_BLOCK ? T : PREFILL_BLOCK), I = c->inter > 0 ? c->inter : 0;
    float *X = malloc(tn * C * sizeof *X);
    float *O = malloc(tn * (m->o_floats ? m->o_floats : 1) * sizeof *O);
    float *AUX = malloc(tn * (m->aux_floats ? m->aux_floats : 1) * sizeof *AUX);
    /* a block's scratch: normalised inputs, MLP hidden (twice) and outputs */
    float *XN = malloc(nb * C * sizeof *XN), *H1 = malloc((nb * I + 1) * sizeof *H1),
          *H2 = malloc((nb * I + 1) * sizeof *H2), *YB = malloc(nb * C * sizeof *YB);
    float *SEQ[IN_COUNT] = {0};
    int rc = -1;
    if (!X || !O || !AUX || !XN || !H1 || !H2 || !YB) goto oom;
    for (int i = 0; i < IN_COUNT; i++)
        if (m->in_floats[i] && !(SEQ[i] = malloc(tn * m->in_floats[i] * sizeof(float)))) goto oom;
    for (int t = 0; t < T; t++)
        memcpy(X + t * C, m->embed + (size_t)tokens[t] * C, C * sizeof(float));
    for (int li = 0; li < c->layers; li++) {
        layer *L = &m->layers[li];
        const family_ops *f = family_of(L->cfg->family);
        size_t stride[IN_COUNT], os = (size_t)L->mc.H * (size_t)L->mc.dv;
        mixer_seq seq = {.T = T};
        for (int i = 0; i < IN_COUNT; i++) {
            stride[i] = (size_t)L->mc.H * (size_t)mixer_input_floats(&L->mc, (mixer_input)i);
            seq.in[i] = mixer_reads(L->mx, (mixer_input)i) ? SEQ[i] : NULL;
        }
        for (int t0 = 0; t0 < T; t0 += (int)nb) {
            int n = T - t0 < (int)nb ? T - t0 : (int)nb;
            for (int j = 0; j < n; j++)
                blk_rmsnorm(XN + j * C, X + (t0 + j) * C, L->attn_norm, c->hidden, c->norm_eps);
            prefill_prep(m, L, XN, t0, n, SEQ, stride, AUX);
        }
        /* arith=tf32 (fla's chunk arithmetic) exists on the CPU only: the GPU kernels are exact */
        if (m->gpu && !L->mc.arith && gpu_mixer_supported(L->mx, GPU_PREFILL)) {
            if (gpu_mixer_run(L->mx, &L->mc, L->state, &seq, m->pos, O, NULL, GPU_PREFILL, GPU_F32,
                              e)) {
                err_prefix(e, "layer %d (%s on the gpu)", li, L->mx->name);
                goto done;
            }
        } else {
            L->mx->prefill(&L->mc, L->state, &seq, m->pos, O);
        }
        for (int t = 0; t < T; t++) {
            float *x = X + t * C;
            f->post(m, L, O + t * os, AUX + t * m->aux_floats, m->y, m->h1);
            for (size_t i = 0; i < C; i++) x[i] += m->y[i];
        }
        for (int t0 = 0; t0 < T; t0 += (int)nb)
            prefill_mlp(m, L, X + t0 * C, T - t0 < (int)nb ? T - t0 : (int)nb, XN, H1, H2, YB);
    }
    for (int t0 = 0; t0 < T; t0 += (int)nb)
        prefill_head(m, X + t0 * C, T - t0 < (int)nb ? T - t0 : (int)nb, XN,
                     logits + (size_t)t0 * (size_t)c->vocab);
    m->pos += T;
    rc = 0;
    goto done;
oom:
    err_set(e, "out of memory for a %d-token prefill", T);
done:
    free(X), free(O), free(AUX), free(XN), free(H1), free(H2), free(YB);
    for (int i = 0; i < IN_COUNT; i++) free(SEQ[i]);
    return rc;
}

/* ---- info ---- */

void model_print_info(const model *m, FILE *out) {
    const model_config *c = &m->c;
    fprintf(out, "model: %s from %s\n", model_kind_name(c->kind), m->source);
    fprintf(out, "  %d layers, hidden %d, vocab %d%s, MLP %d, %lld parameters\n", c->layers,
            c->hidden, c->vocab, c->tie ? " (tied head)" : "", c->inter,
            (long long)model_param_count(m));
    for (int li = 0; li < c->layers; li++) {
        const layer *L = &m->layers[li];
        fprintf(out, "  layer %d: %s core, %d heads, dk %d, dv %d%s%s\n", li, L->mx->name, L->mc.H,
                L->mc.dk, L->mc.dv, L->grows ? " (KV cache)" : "",
                L->cfg != c ? ", hybrid attention layer" : "");
    }
    char buf[160];
    fprintf(out, "  swappable cores: %s\n", model_swappable(m, buf, sizeof buf));
    fprintf(out, "  position %d\n", m->pos);
}

void family_stream(const model *m, layer *L, int s, const float *x, const float *W, const float *cw,
                   const float *cb, int D, blk_act conv_act, blk_act plain_act, float *out,
                   float *tmp) {
    if (m->c.use_conv) {
        blk_linear(tmp, x, W, NULL, D, m->c.hidden);
        blk_conv_step(out, L->conv_cache[s], tmp, cw, cb, D, m->c.conv_size, conv_act);
    } else {
        blk_linear(out, x, W, NULL, D, m->c.hidden);
        blk_act_apply(out, D, plain_act);
    }
}

int model_refresh(model *m, err *e) {
    for (int li = 0; li < m->c.layers; li++) {
        layer *L = &m->layers[li];
        const family_ops *f = family_of(L->cfg->family);
        if (!f->finish) continue;
        if (f->finish(m, L, e)) return -1;
        if (f->tune) f->tune(m, L, NULL); /* the core's parameters point at the new arrays */
    }
    return 0;
}
