/* train_gpu.c: the model as the GPU trainer sees it (kernels/gpu_train.h): where each weight sits
 * in one flat buffer in slot order, found through the same mapping as train_grads (a gradient
 * buffer laid out like the model). */
#include "train_gpu.h"

#include <stdlib.h>
#include <string.h>

#include "model_grad.h"

void train_gpu_desc_free(train_gpu_desc *t) {
    free(t->slot_off), free(t->slot_n), free(t->slot_decay), free(t->slot_data), free(t->lay);
    memset(t, 0, sizeof *t);
}

int train_gpu_desc_init(train_gpu_desc *t, model *m, err *e) {
    memset(t, 0, sizeof *t);
    train_grads g;
    if (train_grads_init(&g, m, e)) return -1;
    const model_config *c = &m->c;
    int ns = m->nslots;
    t->slot_off = calloc((size_t)ns, sizeof *t->slot_off);
    t->slot_n = calloc((size_t)ns, sizeof *t->slot_n);
    t->slot_decay = calloc((size_t)ns, sizeof *t->slot_decay);
    t->slot_data = calloc((size_t)ns, sizeof *t->slot_data);
    t->lay = calloc((size_t)c->layers, sizeof *t->lay);
    if (!t->slot_off || !t->slot_n || !t->slot_decay || !t->slot_data || !t->lay) {
        train_grads_free(&g);
        train_gpu_desc_free(t);
        return err_set(e, "train: out of memory");
    }
    for (int i = 0; i < ns; i++) {
        const wslot *s = &m->slots[i];
        int64_t n = 1;
        for (int d = 0; d < s->ndim; d++) n *= s->shape[d];
        t->slot_off[i] = g.of[i] - g.buf, t->slot_n[i] = n;
        t->slot_decay[i] = s->ndim >= 2;
        t->slot_data[i] = s->data;
    }
#define OFF(p) ((p) ? (int64_t)((p)-g.buf) : -1)
    for (int l = 0; l < c->layers; l++) {
        const layer *G = &g.L[l], *L = &m->layers[l];
        gpu_train_layer *o = &t->lay[l];
        o->attn_norm = OFF(G->attn_norm), o->q_proj = OFF(G->q_proj), o->k_proj = OFF(G->k_proj);
        o->v_proj = OFF(G->v_proj), o->a_proj = OFF(G->a_proj), o->b_proj = OFF(G->b_proj);
        o->b_bias = OFF(G->b_bias), o->A_log = OFF(G->A_log), o->dt_bias = OFF(G->dt_bias);
        o->q_conv = OFF(G->q_conv), o->k_conv = OFF(G->k_conv), o->v_conv = OFF(G->v_conv);
        o->q_conv_b = OFF(G->q_conv_b), o->k_conv_b = OFF(G->k_conv_b);
        o->v_conv_b = OFF(G->v_conv_b), o->g_proj = OFF(G->g_proj), o->o_norm = OFF(G->o_norm);
        o->o_proj = OFF(G->o_proj), o->mlp_norm = OFF(G->mlp_norm);
        o->gate_proj = OFF(G->gate_proj), o->up_proj = OFF(G->up_proj);
        o->down_proj = OFF(G->down_proj);
        const char *core = L->mx->name;
        o->core = !strcmp(core, "deltanet") ? 1 : !strcmp(core, "kaczmarz") ? 2 : 0;
        o->scale = L->mc.scale, o->kacz_eps = o->core == 2 ? L->mc.eps : 0.0f;
        o->raw_k = o->core == 2 || c->raw_keys;
    }
    gpu_train_desc *d = &t->d;
    d->layers = c->layers, d->C = c->hidden, d->H = c->Hv, d->dk = c->dk, d->dv = c->dv;
    d->Kd = c->key_dim, d->Vd = c->value_dim, d->I = c->inter > 0 ? c->inter : 0, d->V = c->vocab;
    d->conv = c->use_conv, d->W = c->conv_size, d->use_gate = c->use_gate;
    d->has_decay = c->has_decay, d->use_beta = c->use_beta, d->allow_neg = c->allow_neg;
    d->norm_eps = c->norm_eps, d->n = g.n;
    d->embed = OFF(g.embed), d->norm_f = OFF(g.norm_f), d->lm_head = OFF(g.lm_head);
#undef OFF
    d->nslots = ns, d->slot_off = t->slot_off, d->slot_n = t->slot_n;
    d->slot_decay = t->slot_decay, d->slot_data = t->slot_data, d->lay = t->lay;
    train_grads_free(&g);
    return 0;
}
