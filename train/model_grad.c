/* model_grad.c: the model stack over B sequences forwards and backwards (model_grad.h).
 *
 * The forward mirrors models/model.c (model_step) and models/layer_gdn.c (prep, post) one
 * operation at a time, over N = B T rows instead of one token:
 *
 *   x = embed[ids]                                                        [N, C]
 *   per layer:  xn = RMSNorm(x) ;  q', k', v' = SiLU(conv(xn W^T))       [N, Kd] [N, Kd] [N, Vd]
 *               q = L2N(q'), k = L2N(k') (kaczmarz: k = k' raw)
 *               g = -exp(A_log) softplus(xn W_a^T + dt_bias), beta = sigmoid(xn W_b^T + b)
 *               o = core(q, k, v, g, beta) per sequence and head       [N, Vd]
 *               x += RMSNormGated(o, xn W_g^T) W_o^T
 *               x += W_down (silu(xn2 W_gate^T) * xn2 W_up^T),  xn2 = RMSNorm(x)
 *   logits = RMSNorm(x) W_head^T                                          [N, V]
 *
 * and the backward walks the same list in reverse (ops.h has each step's derivative). */
#include "model_grad.h"

#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "../core/pool.h"
#include "../mixers/kata.h"
#include "../models/family.h"
#include "ops.h"

/* ---- gradients laid out like the model ---- */

int train_grads_init(train_grads *g, const model *m, err *e) {
    memset(g, 0, sizeof *g);
    int64_t n = model_param_count(m);
    g->n = n;
    g->buf = calloc((size_t)n, sizeof(float));
    g->of = calloc((size_t)m->nslots, sizeof *g->of);
    g->L = calloc((size_t)m->c.layers, sizeof *g->L);
    if (!g->buf || !g->of || !g->L) {
        train_grads_free(g);
        return err_set(e, "train: out of memory for %lld gradients", (long long)n);
    }
    int64_t off = 0;
    for (int i = 0; i < m->nslots; i++) {
        const wslot *s = &m->slots[i];
        int64_t numel = 1;
        for (int d = 0; d < s->ndim; d++) numel *= s->shape[d];
        float *gp = g->buf + off;
        g->of[i] = gp;
        off += numel;
        /* the field s->dst names, at the same place in the gradient's structs */
        const char *dst = (const char *)s->dst;
        if (s->dst == &m->embed) {
            g->embed = gp;
        } else if (s->dst == &m->norm_f) {
            g->norm_f = gp;
        } else if (s->dst == &m->lm_head) {
            g->lm_head = gp;
        } else {
            int found = 0;
            for (int li = 0; li < m->c.layers && !found; li++) {
                const char *lo = (const char *)&m->layers[li];
                if (dst >= lo && dst < lo + sizeof(layer)) {
                    *(float **)((char *)&g->L[li] + (dst - lo)) = gp;
                    found = 1;
                }
            }
            if (!found) {
                train_grads_free(g);
                return err_set(e, "train: tensor '%s' is not a weight the trainer knows", s->name);
            }
        }
    }
    if (m->c.tie) g->lm_head = g->embed;
    return 0;
}

void train_grads_zero(train_grads *g) {
    memset(g->buf, 0, (size_t)g->n * sizeof(float));
}

void train_grads_free(train_grads *g) {
    free(g->buf), free(g->of), free(g->L);
    memset(g, 0, sizeof *g);
}

/* ---- what can be trained ---- */

static int core_kind(const layer *L) {
    /* 0 gdn, 1 deltanet, 2 kaczmarz, -1 other */
    const char *n = L->mx->name;
    return !strcmp(n, "gdn") ? 0 : !strcmp(n, "deltanet") ? 1 : !strcmp(n, "kaczmarz") ? 2 : -1;
}

int train_model_check(const model *m, err *e) {
    const model_config *c = &m->c;
    if (model_is_hybrid(m))
        return err_set(e, "train: hybrid models (attention layers, attn=) do not train yet");
    if (c->kind == MK_TRANSFORMER || c->kind == MK_PARALLAX) {
        const char *core = c->kind == MK_PARALLAX ? "parallax" : "softmax";
        if (c->Hkv != c->H)
            return err_set(e,
                           "train: num_kv_heads (%d) different from num_heads (%d) is not "
                           "supported",
                           c->Hkv, c->H);
        for (int li = 0; li < c->layers; li++)
            if (strcmp(m->layers[li].mx->name, core) || m->layers[li].mc.window)
                return err_set(e, "train: layer %d runs %s%s, which has no backward pass", li,
                               m->layers[li].mx->name,
                               m->layers[li].mc.window ? " with a window" : "");
        return 0;
    }
    if (c->kind == MK_KATA) {
        for (int li = 0; li < c->layers; li++) {
            const layer *L = &m->layers[li];
            const char *v = strcmp(L->mx->name, "kata") ? NULL : kata_variant_name(L->mc.variant);
            if (!v)
                return err_set(e, "train: layer %d runs %s, which has no backward pass", li,
                               L->mx->name);
        }
        return 0;
    }
    if (c->kind == MK_KALMAN) {
        for (int li = 0; li < c->layers; li++)
            if (strcmp(m->layers[li].mx->name, "kalman") || m->layers[li].mc.variant)
                return err_set(e, "train: layer %d runs %s%s, which has no backward pass", li,
                               m->layers[li].mx->name,
                               m->layers[li].mc.variant ? " with its scan or prior options" : "");
        return 0;
    }
    if (c->kind == MK_MAMBA2) {
        if (c->norm_group != c->d_inner)
            return err_set(e,
                           "train: Mamba2's norm in groups (norm_group %d of %d) is not "
                           "supported",
                           c->norm_group, c->d_inner);
        for (int li = 0; li < c->layers; li++)
            if (strcmp(m->layers[li].mx->name, "mamba2"))
                return err_set(e, "train: layer %d runs %s, which has no backward pass", li,
                               m->layers[li].mx->name);
        return 0;
    }
    if (c->kind == MK_GLA) {
        if (c->Hkv != c->H)
            return err_set(e,
                           "train: num_kv_heads (%d) different from num_heads (%d) is not "
                           "supported",
                           c->Hkv, c->H);
        if (c->feature_map != ACT_NONE)
            return err_set(e, "train: GLA's feature_map must be none (the trainer's choice)");
        for (int li = 0; li < c->layers; li++)
            if (strcmp(m->layers[li].mx->name, "gla"))
                return err_set(e, "train: layer %d runs %s, which has no backward pass", li,
                               m->layers[li].mx->name);
        return 0;
    }
    if (c->family != FAM_GDN)
        return err_set(e,
                       "train: %s models have no backward pass yet (the trainer differentiates "
                       "gated_deltanet, delta_net, kaczmarz_deltanet, gla, mamba2, transformer, "
                       "parallax, kalman and kata)",
                       model_kind_name(c->kind));
    if (c->Hv != c->H)
        return err_set(e, "train: num_v_heads (%d) different from num_heads (%d) is not supported",
                       c->Hv, c->H);
    if (c->qk_act != ACT_SILU)
        return err_set(e,
                       "train: DeltaNet's qk_activation must be silu (the trainer's feature map)");
    for (int li = 0; li < c->layers; li++)
        if (core_kind(&m->layers[li]) < 0)
            return err_set(e, "train: layer %d runs the %s core, which has no backward pass", li,
                           m->layers[li].mx->name);
    return 0;
}

/* ---- activations ---- */

typedef struct m2_bufs {
    float *zx;         /* [N, Dtot]: z | xBC | dt_raw, the in-projection */
    float *xc;         /* [N, cd]: xBC after the convolution, before SiLU */
    float *xs;         /* [N, cd]: after SiLU: x | B | C */
    float *dt;         /* [N, H] */
    float *q, *k, *gk; /* [N, H N]: C and B read by each head, dt A broadcast over N */
    float *v;          /* [N, d_inner]: dt x */
    float *y;          /* [N, d_inner]: o + D x */
    float *gu;         /* [N, d_inner]: y silu(z) */
    float *rs;         /* [N]: the gated norm's rstd */
} m2_bufs;

static int m2_dtot(const model_config *c) {
    return 2 * c->d_inner + 2 * c->n_groups * c->d_state + c->H;
}

/* a Kalman layer's activations */
typedef struct kal_bufs {
    float *h;       /* [N, 2M]: z' | g', the in-projection */
    float *zc, *z;  /* [N, M]: z' after the convolution, before and after SiLU */
    float *sens;    /* [N, 2M + 2S]: v | u | k | q from sensor_proj */
    float *kn, *qn; /* [N]: the norms k and q were divided by (qk_norm) */
    float *lv;      /* [N, M]: lambda_v */
    float *y0;      /* [N, M]: o + skip z, before the gate */
    float *ka, *kp; /* [M, S]: the static a, p of this pass */
} kal_bufs;

typedef struct lacts {
    float *x_in, *xn, *rs1;        /* [N, C], [N, C], [N] */
    float *qp, *kp, *vp;           /* projections (conv inputs) [N, Kd], [N, Kd], [N, Vd] */
    float *qc, *kc, *vc;           /* after the conv, before SiLU (= qp.. without conv) */
    float *qs, *ks, *v;            /* after SiLU */
    float *q, *k, *qinv, *kinv;    /* after the L2 norm [N, Kd], inverse norms [N, H] */
    float *ga, *g, *bb, *beta;     /* [N, Hv] each */
    float *z;                      /* output gate [N, Vd] (use_gate) */
    float *o, *rso, *on;           /* core output [N, Vd], its norm's rstd [N Hv], normed [N, Vd] */
    float *ckpt;                   /* [B Hv, nck, dk, dv] */
    float *x_mid, *xn2, *rs2;      /* after the mixer residual; MLP norm */
    float *P;                      /* attention: the probabilities [B H, T, T] */
    float *glr, *gkr, *gk;         /* GLA: low-rank gate [N, rank], its logits and gk [N, Kd] */
    float *h1, *h2, *act;          /* [N, I] */
    m2_bufs m2;                    /* Mamba2 */
    kal_bufs kal;                  /* Kalman */
    float *U, *rp, *rn, *r, *rinv; /* Parallax: u = r.k [B H, T, T]; r before and after its norm
                                    * and after RoPE [N, C]; the norm's rstd [N H] */
} lacts;

struct train_pass {
    int B, T, N, chunk, nck;
    lacts *la;
    float *x_out, *xf, *rsf, *logits; /* [N, C], [N, C], [N], [N, V] */
    /* backward scratch */
    float *dx, *dxn, *dlog, *s[6], *dh1, *dh2, *dact, *dg, *dbeta, *dga;
    float *dgk, *dlr; /* GLA: gk's and the low-rank gate's gradients */
    float *kal_dh, *kal_dz, *kal_dlv, *kal_da, *kal_dp, *kal_dsens; /* Kalman */
    float *kata_t;                                                  /* KATA: stream scratch */
    float *all; /* one allocation behind every array above */
};

/* the next n floats of one allocation (all NULL: counting) */
static float *take(float *all, int64_t *off, int64_t n) {
    float *r = all ? all + *off : NULL;
    *off += (n + 15) & ~(int64_t)15;
    return r;
}

void train_pass_free(train_pass *p) {
    if (!p) return;
    free(p->all), free(p->la), free(p);
}

int train_pass_init(train_pass **out, const model *m, int B, int T, int chunk, err *e) {
    const model_config *c = &m->c;
    *out = NULL;
    if (train_model_check(m, e)) return -1;
    train_pass *p = calloc(1, sizeof *p);
    if (!p) return err_set(e, "train: out of memory");
    p->B = B, p->T = T, p->N = B * T, p->chunk = chunk, p->nck = (T + chunk - 1) / chunk;
    p->la = calloc((size_t)c->layers, sizeof *p->la);
    if (!p->la) {
        free(p);
        return err_set(e, "train: out of memory");
    }
    int64_t N = p->N, C = c->hidden, Kd = c->key_dim, Vd = c->value_dim, Hv = c->Hv,
            I = c->inter > 0 ? c->inter : 0, V = c->vocab, KV = Kd > Vd ? Kd : Vd;
    int64_t Dt = 0, cd = 0;
    if (c->kind == MK_KALMAN) /* one head: S key channels, M value channels */
        Kd = c->d_state, Vd = c->d_inner, KV = Kd > Vd ? Kd : Vd;
    if (c->kind == MK_MAMBA2) { /* heads read N state channels; the scratch holds xBC rows too */
        Kd = (int64_t)c->H * c->d_state, Vd = c->d_inner;
        cd = c->d_inner + 2 * (int64_t)c->n_groups * c->d_state, Dt = m2_dtot(c);
        KV = Kd > Vd ? Kd : Vd;
        if (cd > KV) KV = cd;
        if (Dt > KV) KV = Dt;
    }
    /* two passes: count, then carve the one allocation */
    for (int pass = 0; pass < 2; pass++) {
        int64_t off = 0;
#define TAKE(ptr, n) ((ptr) = take(p->all, &off, (int64_t)(n)))
        for (int li = 0; li < c->layers; li++) {
            lacts *a = &p->la[li];
            TAKE(a->x_in, N * C), TAKE(a->xn, N * C), TAKE(a->rs1, N);
            TAKE(a->qp, N * Kd), TAKE(a->kp, N * Kd), TAKE(a->vp, N * Vd);
            if (c->use_conv) (void)(TAKE(a->qc, N * Kd), TAKE(a->kc, N * Kd), TAKE(a->vc, N * Vd));
            TAKE(a->qs, N * Kd), TAKE(a->ks, N * Kd), TAKE(a->v, N * Vd);
            TAKE(a->q, N * Kd), TAKE(a->k, N * Kd), TAKE(a->qinv, N * c->H),
                TAKE(a->kinv, N * c->H);
            TAKE(a->ga, N * Hv), TAKE(a->g, N * Hv), TAKE(a->bb, N * Hv), TAKE(a->beta, N * Hv);
            if (c->use_gate || c->use_output_gate) (void)TAKE(a->z, N * Vd);
            TAKE(a->o, N * Vd), TAKE(a->rso, N * Hv), TAKE(a->on, N * Vd);
            TAKE(a->ckpt,
                 (c->kind == MK_KALMAN ? 2 : 1) * (int64_t)B * Hv * p->nck * c->dk * c->dv);
            TAKE(a->x_mid, N * C), TAKE(a->xn2, N * C), TAKE(a->rs2, N);
            if (I) (void)(TAKE(a->h1, N * I), TAKE(a->h2, N * I), TAKE(a->act, N * I));
            if (c->kind == MK_TRANSFORMER || c->kind == MK_PARALLAX ||
                (c->kind == MK_KATA && m->layers[li].mc.variant != KATA_DELTA))
                (void)TAKE(a->P, (int64_t)B * c->H * T * T);
            if (c->kind == MK_KATA && c->rope) (void)(TAKE(a->rn, N * Kd), TAKE(a->rp, N * Kd));
            if (c->kind == MK_PARALLAX)
                (void)(TAKE(a->U, (int64_t)B * c->H * T * T), TAKE(a->rp, N * C),
                       TAKE(a->rn, N * C), TAKE(a->r, N * C), TAKE(a->rinv, N * c->H));
            if (c->kind == MK_GLA)
                (void)(TAKE(a->glr, N * c->gk_rank), TAKE(a->gkr, N * Kd), TAKE(a->gk, N * Kd));
            if (c->kind == MK_KALMAN) {
                kal_bufs *k = &a->kal;
                int64_t M = c->d_inner, S = c->d_state;
                (void)(TAKE(k->h, N * 2 * M), TAKE(k->zc, N * M), TAKE(k->z, N * M));
                (void)(TAKE(k->sens, N * (2 * M + 2 * S)), TAKE(k->kn, N), TAKE(k->qn, N));
                (void)(TAKE(k->lv, N * M), TAKE(k->y0, N * M), TAKE(k->ka, M * S),
                       TAKE(k->kp, M * S));
            }
            if (c->kind == MK_MAMBA2) {
                m2_bufs *b2 = &a->m2;
                (void)(TAKE(b2->zx, N * Dt), TAKE(b2->xc, N * cd), TAKE(b2->xs, N * cd));
                (void)(TAKE(b2->dt, N * c->H), TAKE(b2->q, N * Kd), TAKE(b2->k, N * Kd));
                (void)(TAKE(b2->gk, N * Kd), TAKE(b2->v, N * Vd), TAKE(b2->y, N * Vd));
                (void)(TAKE(b2->gu, N * Vd), TAKE(b2->rs, N));
            }
        }
        TAKE(p->x_out, N * C), TAKE(p->xf, N * C), TAKE(p->rsf, N), TAKE(p->logits, N * V);
        TAKE(p->dx, N * C), TAKE(p->dxn, N * C), TAKE(p->dlog, N * V);
        for (int i = 0; i < 6; i++) (void)TAKE(p->s[i], N * KV);
        if (I) (void)(TAKE(p->dh1, N * I), TAKE(p->dh2, N * I), TAKE(p->dact, N * I));
        TAKE(p->dg, N * Hv), TAKE(p->dbeta, N * Hv), TAKE(p->dga, N * Hv);
        if (c->kind == MK_GLA) (void)(TAKE(p->dgk, N * Kd), TAKE(p->dlr, N * c->gk_rank));
        if (c->kind == MK_MAMBA2) (void)(TAKE(p->dgk, N * Kd), TAKE(p->dlr, N * Dt));
        if (c->kind == MK_KATA) (void)TAKE(p->kata_t, N * Kd);
        if (c->kind == MK_KALMAN) {
            int64_t M = c->d_inner, S = c->d_state;
            (void)(TAKE(p->kal_dh, N * 2 * M), TAKE(p->kal_dz, N * M), TAKE(p->kal_dlv, N * M));
            (void)(TAKE(p->kal_da, B * M * S), TAKE(p->kal_dp, B * M * S));
            (void)TAKE(p->kal_dsens, N * (2 * M + 2 * S));
        }
        if (c->kind == MK_PARALLAX) (void)(TAKE(p->dgk, N * C), TAKE(p->dlr, N * C));
#undef TAKE
        if (!pass) {
            /* DeltaKATA's per-thread scratch (kata_tasks), counted with the pass */
            for (int li = 0; li < c->layers && c->kind == MK_KATA; li++) {
                const mixer_cfg *mc = &m->layers[li].mc;
                if (mc->variant != KATA_DELTA) continue;
                int g = kata_variant_fmap(mc->variant, c->dk, mc->groups, mc->scale).groups;
                int64_t w = train_kata_delta_work(T, c->dk, g, (int)Kd, chunk < 16 ? chunk : 16, 1);
                if (w * pool_threads() > ((int64_t)1 << 34) / 4) {
                    train_pass_free(p);
                    return err_set(e,
                                   "train: DeltaKATA's state at head_dim %d needs %.1f GiB of "
                                   "scratch a thread; use a smaller head_dim or more groups",
                                   c->dk, (double)w * 4 / (1 << 30));
                }
            }
            if (off > ((int64_t)1 << 36) / 4) {
                train_pass_free(p);
                return err_set(e, "train: a pass of %lld tokens needs %.1f GiB of activations",
                               (long long)N, (double)off * 4 / (1 << 30));
            }
            p->all = malloc((size_t)off * sizeof(float));
            if (!p->all) {
                train_pass_free(p);
                return err_set(e, "train: out of memory for %.1f GiB of activations",
                               (double)off * 4 / (1 << 30));
            }
        }
    }
    for (int li = 0; li < c->layers; li++)
        if (!c->use_conv) {
            lacts *a = &p->la[li];
            a->qc = a->qp, a->kc = a->kp, a->vc = a->vp;
        }
    *out = p;
    return 0;
}

/* ---- the cores, one task per sequence and head ---- */

typedef struct core_job {
    const model *m;
    const layer *L;
    train_pass *p;
    lacts *a;
    int bwd;
} core_job;

static void core_tasks(void *ctx, int lo, int hi) {
    const core_job *j = ctx;
    const model_config *c = &j->m->c;
    const layer *L = j->L;
    train_pass *p = j->p;
    lacts *a = j->a;
    int Hv = c->Hv, dk = c->dk, dv = c->dv, T = p->T, Kd = c->key_dim, Vd = c->value_dim;
    int kind = core_kind(L);
    int decay = kind != 1 && c->has_decay;
    float eps = kind == 2 ? L->mc.eps : 0.0f, scale = L->mc.scale;
    size_t ss = (size_t)dk * dv;
    float *S = malloc(ss * sizeof *S);
    float *work = j->bwd ? malloc((size_t)train_delta_work(dk, dv, p->chunk) * sizeof *work) : NULL;
    if (!S || (j->bwd && !work)) abort(); /* a few MB at most: see train_pass_init */
    for (int t = lo; t < hi; t++) {
        int b = t / Hv, h = t % Hv;
        size_t r0 = (size_t)b * T;
        const float *q = a->q + r0 * Kd + (size_t)h * dk, *k = a->k + r0 * Kd + (size_t)h * dk;
        const float *v = a->v + r0 * Vd + (size_t)h * dv;
        const float *g = decay ? a->g + r0 * Hv + h : NULL, *beta = a->beta + r0 * Hv + h;
        float *ck = a->ckpt + (size_t)t * p->nck * ss;
        memset(S, 0, ss * sizeof *S);
        if (!j->bwd) {
            train_delta_fwd_f(S, q, k, v, g, beta, T, dk, dv, Kd, Vd, Hv, scale, eps,
                              a->o + r0 * Vd + (size_t)h * dv, ck, p->chunk);
        } else {
            /* s[0] dq, s[1] dk, s[2] dv (zeroed by the caller) */
            train_delta_bwd_f(q, k, v, g, beta, T, dk, dv, Kd, Vd, Hv, scale, eps, ck, p->chunk,
                              p->s[3] + r0 * Vd + (size_t)h * dv, S, p->s[0] + r0 * Kd + h * dk,
                              p->s[1] + r0 * Kd + (size_t)h * dk,
                              p->s[2] + r0 * Vd + (size_t)h * dv,
                              decay ? p->dg + r0 * Hv + h : NULL, p->dbeta + r0 * Hv + h, work);
        }
    }
    free(S), free(work);
}

/* one projected stream: P = X W^T, then per sequence the causal conv, then SiLU into Y */
static void stream_fwd(const model *m, const train_pass *p, const float *xn, const float *W,
                       const float *cw, const float *cb, int D, float *P, float *Cv, float *Y,
                       int silu) {
    const model_config *c = &m->c;
    train_linear_fwd_f(P, xn, W, NULL, p->N, D, c->hidden);
    if (c->use_conv)
        for (int b = 0; b < p->B; b++)
            train_conv_fwd_f(Cv + (size_t)b * p->T * D, P + (size_t)b * p->T * D, cw, cb, p->T, D,
                             c->conv_size);
    if (silu)
        train_silu_fwd_f(Y, Cv, (int64_t)p->N * D);
    else
        memcpy(Y, Cv, (size_t)p->N * D * sizeof(float));
}

/* its backward: dY (SiLU output) -> dxn, the projection's and the conv's gradients. d1, d2 are
 * scratch [N, D] */
static void stream_bwd(const model *m, const train_pass *p, const float *xn, const float *W,
                       const float *cw, float *gW, float *gcw, float *gcb, int D, const float *P,
                       const float *Cv, const float *dY, float *dxn, float *d1, float *d2,
                       int silu) {
    const model_config *c = &m->c;
    size_t n = (size_t)p->N * D;
    if (silu) {
        memset(d1, 0, n * sizeof *d1);
        train_silu_bwd_f(d1, dY, Cv, (int64_t)n);
    } else {
        memcpy(d1, dY, n * sizeof *d1);
    }
    float *dP = d1;
    if (c->use_conv) {
        memset(d2, 0, n * sizeof *d2);
        for (int b = 0; b < p->B; b++)
            train_conv_bwd_f(d2 + (size_t)b * p->T * D, gcw, gcb, d1 + (size_t)b * p->T * D,
                             P + (size_t)b * p->T * D, cw, p->T, D, c->conv_size);
        dP = d2;
    }
    train_linear_bwd_f(dxn, gW, NULL, dP, xn, W, p->N, D, c->hidden);
}

/* ---- GLA layers: projections (SiLU convs when use_short_conv), the low-rank gate, the core ----
 */

/* The GLA core over B sequences and H heads, one task per sequence and head: GLA's layers and
 * Mamba2's (a scalar decay broadcast over the key channels) both feed it. */
typedef struct glacore_job {
    train_pass *p;
    const float *q, *k, *v, *gk; /* [N, Kd] rows (q, k, gk) and [N, Vd] rows (v) */
    float *o, *ckpt;
    int H, dk, dv, Kd, Vd, bwd;
    float scale;
} glacore_job;

static void glacore_tasks(void *ctx, int lo, int hi) {
    const glacore_job *j = ctx;
    train_pass *p = j->p;
    int H = j->H, dk = j->dk, dv = j->dv, T = p->T, Kd = j->Kd, Vd = j->Vd;
    size_t ss = (size_t)dk * dv;
    float *S = malloc(ss * sizeof *S);
    float *work = j->bwd ? malloc((size_t)train_delta_work(dk, dv, p->chunk) * sizeof *work) : NULL;
    if (!S || (j->bwd && !work)) abort();
    for (int t = lo; t < hi; t++) {
        int b = t / H, h = t % H;
        size_t ok = (size_t)b * T * Kd + (size_t)h * dk, ov = (size_t)b * T * Vd + (size_t)h * dv;
        float *ck = j->ckpt + (size_t)t * p->nck * ss;
        memset(S, 0, ss * sizeof *S);
        if (!j->bwd)
            train_gla_fwd_f(S, j->q + ok, j->k + ok, j->v + ov, j->gk + ok, T, dk, dv, Kd, Vd,
                            j->scale, j->o + ov, ck, p->chunk);
        else /* do in s[3]; dq, dk, dv into s[0..2], dgk into dgk */
            train_gla_bwd_f(j->q + ok, j->k + ok, j->v + ov, j->gk + ok, T, dk, dv, Kd, Vd,
                            j->scale, ck, p->chunk, p->s[3] + ov, S, p->s[0] + ok, p->s[1] + ok,
                            p->s[2] + ov, p->dgk + ok, work);
    }
    free(S), free(work);
}

static void glacore_run(train_pass *p, const float *q, const float *k, const float *v,
                        const float *gk, float *o, float *ckpt, int H, int dk, int dv, float scale,
                        int bwd) {
    glacore_job j = {p, q, k, v, gk, o, ckpt, H, dk, dv, H * dk, H * dv, bwd, scale};
    pool_for(p->B * H, glacore_tasks, &j);
}

static void gla_layer_fwd(const model *m, train_pass *p, const layer *L, lacts *a) {
    const model_config *c = &m->c;
    int N = p->N, C = c->hidden, H = c->H, Kd = c->key_dim, Vd = c->value_dim, R = c->gk_rank;
    int silu = c->use_conv; /* fla's GLA: SiLU inside the convolutions, no activation without */
    stream_fwd(m, p, a->xn, L->q_proj, L->q_conv, L->q_conv_b, Kd, a->qp, a->qc, a->q, silu);
    stream_fwd(m, p, a->xn, L->k_proj, L->k_conv, L->k_conv_b, Kd, a->kp, a->kc, a->k, silu);
    stream_fwd(m, p, a->xn, L->v_proj, L->v_conv, L->v_conv_b, Vd, a->vp, a->vc, a->v, silu);
    train_linear_fwd_f(a->glr, a->xn, L->gk0, NULL, N, R, C);
    train_linear_fwd_f(a->gkr, a->glr, L->gk1, L->gk1_b, N, Kd, R);
    train_gla_gate_fwd_f(a->gk, a->gkr, (int64_t)N * Kd, c->gate_norm, c->has_clamp, c->clamp_min);
    if (c->use_output_gate) train_linear_fwd_f(a->z, a->xn, L->g_proj, NULL, N, Vd, C);
    glacore_run(p, a->q, a->k, a->v, a->gk, a->o, a->ckpt, H, c->dk, c->dv, m->layers[0].mc.scale,
                0);
    train_gnorm_fwd_f(a->on, a->rso, a->o, c->use_output_gate ? a->z : NULL, L->o_norm, N * H,
                      c->dv, c->norm_eps);
}

/* from d_on = p->s[4] to dxn */
static void gla_layer_bwd(const model *m, train_pass *p, const layer *L, layer *GL, lacts *a,
                          float *dxn) {
    const model_config *c = &m->c;
    int N = p->N, C = c->hidden, H = c->H, Kd = c->key_dim, Vd = c->value_dim, R = c->gk_rank;
    size_t nv = (size_t)N * Vd, nk = (size_t)N * Kd;
    int gate = c->use_output_gate, silu = c->use_conv;
    float *d_o = p->s[3], *dz = p->s[5];
    memset(d_o, 0, nv * sizeof(float));
    if (gate) memset(dz, 0, nv * sizeof(float));
    train_gnorm_bwd_f(d_o, gate ? dz : NULL, GL->o_norm, p->s[4], a->o, gate ? a->z : NULL, a->rso,
                      L->o_norm, N * H, c->dv);
    if (gate) train_linear_bwd_f(dxn, GL->g_proj, NULL, dz, a->xn, L->g_proj, N, Vd, C);
    memset(p->s[0], 0, nk * sizeof(float));
    memset(p->s[1], 0, nk * sizeof(float));
    memset(p->s[2], 0, nv * sizeof(float));
    memset(p->dgk, 0, nk * sizeof(float));
    glacore_run(p, a->q, a->k, a->v, a->gk, a->o, a->ckpt, H, c->dk, c->dv, m->layers[0].mc.scale,
                1);
    /* the gate: gk = clamp(logsigmoid(gk1 (gk0 x) + b) / norm) */
    memset(p->s[5], 0, nk * sizeof(float));
    train_gla_gate_bwd_f(p->s[5], p->dgk, a->gkr, (int64_t)nk, c->gate_norm, c->has_clamp,
                         c->clamp_min);
    memset(p->dlr, 0, (size_t)N * R * sizeof(float));
    train_linear_bwd_f(p->dlr, GL->gk1, GL->gk1_b, p->s[5], a->glr, L->gk1, N, Kd, R);
    train_linear_bwd_f(dxn, GL->gk0, NULL, p->dlr, a->xn, L->gk0, N, R, C);
    /* the streams (s[3], s[4] are free again) */
    stream_bwd(m, p, a->xn, L->v_proj, L->v_conv, GL->v_proj, GL->v_conv, GL->v_conv_b, Vd, a->vp,
               a->vc, p->s[2], dxn, p->s[3], p->s[4], silu);
    stream_bwd(m, p, a->xn, L->q_proj, L->q_conv, GL->q_proj, GL->q_conv, GL->q_conv_b, Kd, a->qp,
               a->qc, p->s[0], dxn, p->s[3], p->s[4], silu);
    stream_bwd(m, p, a->xn, L->k_proj, L->k_conv, GL->k_proj, GL->k_conv, GL->k_conv_b, Kd, a->kp,
               a->kc, p->s[1], dxn, p->s[3], p->s[4], silu);
}

/* ---- Mamba2 layers (models/layer_mamba2.c): in_proj, the SiLU convolution over xBC, dt, the
 * scalar-decay core (the GLA core with one decay for every key channel), the D skip, the gated
 * RMSNorm, out_proj; no MLP ---- */

static void m2_fwd(const model *m, train_pass *p, const layer *L, lacts *a) {
    const model_config *c = &m->c;
    m2_bufs *b2 = &a->m2;
    int N = p->N, C = c->hidden, H = c->H, di = c->d_inner, GN = c->n_groups * c->d_state;
    int Ns = c->d_state, P = c->dv, cd = di + 2 * GN, Dt = m2_dtot(c), per = H / c->n_groups;
    train_linear_fwd_f(b2->zx, a->xn, L->in_proj, L->in_proj_b, N, Dt, C);
    /* the convolution reads the xBC columns of zx: copy them out to rows of cd */
    float *xr = p->s[5];
    for (int r = 0; r < N; r++)
        memcpy(xr + (size_t)r * cd, b2->zx + (size_t)r * Dt + di, (size_t)cd * sizeof(float));
    for (int b = 0; b < p->B; b++)
        train_conv_fwd_f(b2->xc + (size_t)b * p->T * cd, xr + (size_t)b * p->T * cd, L->conv_w,
                         L->conv_b, p->T, cd, c->conv_size);
    train_silu_fwd_f(b2->xs, b2->xc, (int64_t)N * cd);
    for (int r = 0; r < N; r++) {
        const float *xs = b2->xs + (size_t)r * cd, *Bm = xs + di, *Cm = xs + di + GN;
        const float *dtr = b2->zx + (size_t)r * Dt + di + cd;
        for (int h = 0; h < H; h++) {
            float dt = blk_softplus(dtr[h] + L->dt_bias[h]);
            dt = dt < c->dt_lo ? c->dt_lo : dt > c->dt_hi ? c->dt_hi : dt;
            float A = -expf(L->A_log[h]), g = dt * A;
            int gi = h / per;
            size_t qo = (size_t)r * H * Ns + (size_t)h * Ns;
            b2->dt[(size_t)r * H + h] = dt;
            memcpy(b2->q + qo, Cm + (size_t)gi * Ns, (size_t)Ns * sizeof(float));
            memcpy(b2->k + qo, Bm + (size_t)gi * Ns, (size_t)Ns * sizeof(float));
            for (int i = 0; i < Ns; i++) b2->gk[qo + i] = g;
            for (int i = 0; i < P; i++)
                b2->v[(size_t)r * di + (size_t)h * P + i] = dt * xs[(size_t)h * P + i];
        }
    }
    glacore_run(p, b2->q, b2->k, b2->v, b2->gk, a->o, a->ckpt, H, c->d_state, c->dv,
                m->layers[0].mc.scale, 0);
    for (int r = 0; r < N; r++) {
        const float *xs = b2->xs + (size_t)r * cd, *z = b2->zx + (size_t)r * Dt;
        float *y = b2->y + (size_t)r * di, *gu = b2->gu + (size_t)r * di;
        const float *o = a->o + (size_t)r * di;
        for (int i = 0; i < di; i++) {
            y[i] = o[i] + (c->D_has_hdim ? L->D[i] : L->D[i / P]) * xs[i];
            gu[i] = y[i] * blk_silu(z[i]);
        }
    }
    train_rmsnorm_fwd_f(a->on, b2->rs, b2->gu, L->norm_w, N, di, c->norm_eps);
}

/* from d_on = p->s[4] to dxn */
static void m2_bwd(const model *m, train_pass *p, const layer *L, layer *GL, lacts *a, float *dxn) {
    const model_config *c = &m->c;
    m2_bufs *b2 = &a->m2;
    int N = p->N, C = c->hidden, H = c->H, di = c->d_inner, GN = c->n_groups * c->d_state;
    int Ns = c->d_state, P = c->dv, cd = di + 2 * GN, Dt = m2_dtot(c), per = H / c->n_groups;
    size_t nd = (size_t)N * di;
    /* the gated norm: gu = y silu(z), out = RMSNorm_w(gu) */
    float *dgu = p->s[3];
    memset(dgu, 0, nd * sizeof(float));
    train_rmsnorm_bwd_f(dgu, GL->norm_w, p->s[4], b2->gu, b2->rs, L->norm_w, N, di);
    float *dzx = p->dlr; /* [N, Dt] */
    memset(dzx, 0, (size_t)N * Dt * sizeof(float));
    float *dxs = p->s[5]; /* [N, cd]: x | B | C after SiLU */
    memset(dxs, 0, (size_t)N * cd * sizeof(float));
    float *dy = dgu; /* dy = dgu silu(z), in place */
    for (int r = 0; r < N; r++) {
        const float *z = b2->zx + (size_t)r * Dt, *y = b2->y + (size_t)r * di;
        const float *xs = b2->xs + (size_t)r * cd;
        float *dz = dzx + (size_t)r * Dt, *d = dy + (size_t)r * di, *dx = dxs + (size_t)r * cd;
        for (int i = 0; i < di; i++) {
            float s = blk_sigmoid(z[i]), g = d[i];
            dz[i] += g * y[i] * s * (1 + z[i] * (1 - s));
            d[i] = g * z[i] * s;
            /* y = o + D x */
            float Di = c->D_has_hdim ? L->D[i] : L->D[i / P];
            dx[i] += Di * d[i];
            GL->D[c->D_has_hdim ? i : i / P] += d[i] * xs[i];
        }
    }
    /* the core, with do = dy */
    /* the core reads do from s[3]: dy is there */
    size_t nk = (size_t)N * H * Ns;
    memset(p->s[0], 0, nk * sizeof(float));
    memset(p->s[1], 0, nk * sizeof(float));
    memset(p->s[2], 0, nd * sizeof(float));
    memset(p->dgk, 0, nk * sizeof(float));
    glacore_run(p, b2->q, b2->k, b2->v, b2->gk, a->o, a->ckpt, H, c->d_state, c->dv,
                m->layers[0].mc.scale, 1);
    /* v = dt x, g = dt A, q = C, k = B (summed over the heads of a group), dt's chain */
    for (int r = 0; r < N; r++) {
        const float *xs = b2->xs + (size_t)r * cd, *dtr = b2->zx + (size_t)r * Dt + di + cd;
        float *dx = dxs + (size_t)r * cd, *dB = dx + di, *dC = dx + di + GN;
        float *ddtr = dzx + (size_t)r * Dt + di + cd;
        for (int h = 0; h < H; h++) {
            size_t qo = (size_t)r * H * Ns + (size_t)h * Ns, vo = (size_t)r * di + (size_t)h * P;
            float dt = b2->dt[(size_t)r * H + h], A = -expf(L->A_log[h]);
            double ddt = 0, dg = 0;
            for (int i = 0; i < P; i++) {
                dx[(size_t)h * P + i] += dt * p->s[2][vo + i];
                ddt += (double)xs[(size_t)h * P + i] * p->s[2][vo + i];
            }
            for (int i = 0; i < Ns; i++) dg += p->dgk[qo + i];
            ddt += dg * A;
            GL->A_log[h] += (float)(dg * dt * A); /* A = -exp(A_log): dA/dA_log = A */
            int gi = h / per;
            for (int i = 0; i < Ns; i++) {
                dC[(size_t)gi * Ns + i] += p->s[0][qo + i];
                dB[(size_t)gi * Ns + i] += p->s[1][qo + i];
            }
            float u = dtr[h] + L->dt_bias[h], sp = blk_softplus(u);
            if (sp >= c->dt_lo && sp <= c->dt_hi) { /* no gradient where the clamp holds */
                float dd = (float)ddt * (u > 20.0f ? 1.0f : blk_sigmoid(u));
                ddtr[h] += dd;
                GL->dt_bias[h] += dd;
            }
        }
    }
    /* SiLU, the convolution, back into the xBC columns of dzx */
    float *dxc = p->s[0], *dxr = p->s[1];
    size_t ncd = (size_t)N * cd;
    memset(dxc, 0, ncd * sizeof(float));
    train_silu_bwd_f(dxc, dxs, b2->xc, (int64_t)ncd);
    memset(dxr, 0, ncd * sizeof(float));
    float *xr = p->s[2]; /* the conv's input again */
    for (int r = 0; r < N; r++)
        memcpy(xr + (size_t)r * cd, b2->zx + (size_t)r * Dt + di, (size_t)cd * sizeof(float));
    for (int b = 0; b < p->B; b++)
        train_conv_bwd_f(dxr + (size_t)b * p->T * cd, GL->conv_w, GL->conv_b,
                         dxc + (size_t)b * p->T * cd, xr + (size_t)b * p->T * cd, L->conv_w, p->T,
                         cd, c->conv_size);
    for (int r = 0; r < N; r++) {
        float *d = dzx + (size_t)r * Dt + di;
        const float *s = dxr + (size_t)r * cd;
        for (int i = 0; i < cd; i++) d[i] += s[i];
    }
    train_linear_bwd_f(dxn, GL->in_proj, GL->in_proj_b, dzx, a->xn, L->in_proj, N, Dt, C);
}

/* ---- Kalman layers (models/layer_kalman.c): in_proj, the SiLU convolution, sensor_proj, the
 * q/k normalisation, lambda_v, the core with its static dynamics, skip, gating, out_proj ---- */

/* a and p of every lane [M, S] from delta, lambda_log, process_noise, as the layer's finish()
 * computes them (double, then float) */
static void kal_static(const model_config *c, const layer *L, float *a, float *p) {
    size_t n = (size_t)c->d_inner * c->d_state;
    for (size_t i = 0; i < n; i++) {
        double d = L->delta[i], dt = (d > 20 ? d : log1p(exp(d))) + 1e-7;
        double ac = exp((double)L->lambda_log[i]);
        if (ac < 1e-8) ac = 1e-8;
        double pc = L->process_noise[i] > 1e-7f ? (double)L->process_noise[i] : 1e-7;
        a[i] = (float)exp(-ac * dt);
        p[i] = (float)(pc / (2 * ac) * -expm1(-2 * ac * dt));
    }
}

/* dL/da, dL/dp per lane -> the raw parameters' gradients */
static void kal_static_bwd(const model_config *c, const layer *L, layer *GL, const double *da,
                           const double *dp) {
    size_t n = (size_t)c->d_inner * c->d_state;
    for (size_t i = 0; i < n; i++) {
        double d = L->delta[i], dt = (d > 20 ? d : log1p(exp(d))) + 1e-7;
        double e = exp((double)L->lambda_log[i]), ac = e < 1e-8 ? 1e-8 : e;
        int pfl = !(L->process_noise[i] > 1e-7f);
        double pc = pfl ? 1e-7 : (double)L->process_noise[i];
        double a = exp(-ac * dt), E = -expm1(-2 * ac * dt), x = exp(-2 * ac * dt);
        /* a = exp(-ac dt); p = pc / (2 ac) E, E = 1 - exp(-2 ac dt) */
        double dac = da[i] * (-dt * a) + dp[i] * (-pc / (2 * ac * ac) * E + pc / ac * dt * x);
        double ddt = da[i] * (-ac * a) + dp[i] * (pc * x);
        double dpc = dp[i] * E / (2 * ac);
        if (e >= 1e-8) GL->lambda_log[i] += (float)(dac * e);
        GL->delta[i] += (float)(ddt * (d > 20 ? 1.0 : 1.0 / (1.0 + exp(-d))));
        if (!pfl) GL->process_noise[i] += (float)dpc;
    }
}

typedef struct kal_job {
    const model *m;
    train_pass *p;
    lacts *a;
    const float *ka, *kp; /* static a, p [M, S] */
    int bwd;
} kal_job;

static void kal_tasks(void *ctx, int lo, int hi) {
    const kal_job *j = ctx;
    const model_config *c = &j->m->c;
    train_pass *p = j->p;
    lacts *a = j->a;
    int M = c->d_inner, S = c->d_state, T = p->T;
    size_t L = (size_t)M * S;
    float scale = j->m->layers[0].mc.scale;
    float *lam = malloc(2 * L * sizeof *lam);
    float *work = j->bwd ? malloc((size_t)train_kalman_work(M, S, p->chunk) * sizeof *work) : NULL;
    if (!lam || (j->bwd && !work)) abort();
    for (int b = lo; b < hi; b++) {
        size_t rs = (size_t)b * T;
        float *ck = a->ckpt + (size_t)b * p->nck * 2 * L;
        if (!j->bwd) {
            for (size_t i = 0; i < L; i++) lam[i] = 1.0f, lam[L + i] = 0.0f; /* the prior */
            train_kalman_fwd_f(lam, lam + L, a->q + rs * S, a->k + rs * S, a->v + rs * M,
                               a->kal.lv + rs * M, j->ka, j->kp, T, M, S, S, M, scale,
                               a->o + rs * M, ck, p->chunk);
        } else {
            memset(lam, 0, 2 * L * sizeof *lam);
            train_kalman_bwd_f(a->q + rs * S, a->k + rs * S, a->v + rs * M, a->kal.lv + rs * M,
                               j->ka, j->kp, T, M, S, S, M, scale, ck, p->chunk, p->s[3] + rs * M,
                               lam, lam + L, p->s[0] + rs * S, p->s[1] + rs * S, p->s[2] + rs * M,
                               p->kal_dlv + rs * M, p->kal_da + (size_t)b * L,
                               p->kal_dp + (size_t)b * L, work);
        }
    }
    free(lam), free(work);
}

static void kal_fwd(const model *m, train_pass *p, const layer *L, lacts *a) {
    const model_config *c = &m->c;
    kal_bufs *k = &a->kal;
    int N = p->N, C = c->hidden, M = c->d_inner, S = c->d_state, Ds = 2 * M + 2 * S;
    train_linear_fwd_f(k->h, a->xn, L->in_proj, NULL, N, 2 * M, C);
    for (int r = 0; r < N; r++) /* z' is the first half of each row */
        memcpy(p->s[5] + (size_t)r * M, k->h + (size_t)r * 2 * M, (size_t)M * sizeof(float));
    if (c->use_conv) {
        for (int b = 0; b < p->B; b++)
            train_conv_fwd_f(k->zc + (size_t)b * p->T * M, p->s[5] + (size_t)b * p->T * M,
                             L->conv_w, L->conv_b, p->T, M, c->conv_size);
    } else {
        memcpy(k->zc, p->s[5], (size_t)N * M * sizeof(float));
    }
    train_silu_fwd_f(k->z, k->zc, (int64_t)N * M);
    train_linear_fwd_f(k->sens, k->z, L->sensor_proj, NULL, N, Ds, M);
    for (int r = 0; r < N; r++) {
        const float *sv = k->sens + (size_t)r * Ds;
        float *kk = a->k + (size_t)r * S, *qq = a->q + (size_t)r * S;
        memcpy(a->v + (size_t)r * M, sv, (size_t)M * sizeof(float));
        memcpy(kk, sv + 2 * M, (size_t)S * sizeof(float));
        memcpy(qq, sv + 2 * M + S, (size_t)S * sizeof(float));
        if (c->qk_norm) { /* x / max(|x|, 1e-12): the layer's own normalisation */
            double nk = 0, nq = 0;
            for (int s = 0; s < S; s++) nk += (double)kk[s] * kk[s], nq += (double)qq[s] * qq[s];
            nk = fmax(sqrt(nk), 1e-12), nq = fmax(sqrt(nq), 1e-12);
            k->kn[r] = (float)nk, k->qn[r] = (float)nq;
            float rk = (float)(1.0 / nk), rq = (float)(1.0 / nq);
            for (int s = 0; s < S; s++) kk[s] *= rk, qq[s] *= rq;
        }
        const float *u = sv + M;
        for (int i = 0; i < M; i++) k->lv[(size_t)r * M + i] = 1.0f / (blk_softplus(u[i]) + 1e-4f);
    }
    kal_static(c, L, k->ka, k->kp);
    kal_job j = {m, p, a, k->ka, k->kp, 0};
    pool_for(p->B, kal_tasks, &j);
    for (int r = 0; r < N; r++) {
        const float *o = a->o + (size_t)r * M, *z = k->z + (size_t)r * M;
        const float *g = k->h + (size_t)r * 2 * M + M;
        float *y0 = k->y0 + (size_t)r * M, *on = a->on + (size_t)r * M;
        for (int i = 0; i < M; i++) {
            y0[i] = o[i] + L->skip[0] * z[i];
            on[i] = c->use_gating ? y0[i] * blk_silu(g[i]) : y0[i];
        }
    }
}

/* from d_on = p->s[4] to dxn */
static void kal_bwd(const model *m, train_pass *p, const layer *L, layer *GL, lacts *a,
                    float *dxn) {
    const model_config *c = &m->c;
    kal_bufs *k = &a->kal;
    int N = p->N, C = c->hidden, M = c->d_inner, S = c->d_state, Ds = 2 * M + 2 * S;
    size_t Lm = (size_t)M * S, nm = (size_t)N * M;
    float *dh = p->kal_dh; /* [N, 2M] */
    memset(dh, 0, (size_t)N * 2 * M * sizeof(float));
    float *dz = p->kal_dz; /* [N, M] */
    memset(dz, 0, nm * sizeof(float));
    float *dy0 = p->s[3]; /* the core's do */
    double dskip = 0;
    for (int r = 0; r < N; r++) {
        const float *don = p->s[4] + (size_t)r * M, *y0 = k->y0 + (size_t)r * M;
        const float *g = k->h + (size_t)r * 2 * M + M, *z = k->z + (size_t)r * M;
        float *d0 = dy0 + (size_t)r * M, *dg = dh + (size_t)r * 2 * M + M;
        float *dzr = dz + (size_t)r * M;
        for (int i = 0; i < M; i++) {
            float d = don[i];
            if (c->use_gating) {
                float s = blk_sigmoid(g[i]);
                dg[i] += d * y0[i] * s * (1 + g[i] * (1 - s));
                d *= g[i] * s;
            }
            d0[i] = d;
            dskip += (double)d * z[i];
            dzr[i] += L->skip[0] * d;
        }
    }
    GL->skip[0] += (float)dskip;
    size_t ns = (size_t)N * S;
    memset(p->s[0], 0, ns * sizeof(float));
    memset(p->s[1], 0, ns * sizeof(float));
    memset(p->s[2], 0, nm * sizeof(float));
    memset(p->kal_dlv, 0, nm * sizeof(float));
    memset(p->kal_da, 0, (size_t)p->B * Lm * sizeof(float));
    memset(p->kal_dp, 0, (size_t)p->B * Lm * sizeof(float));
    kal_job j = {m, p, a, k->ka, k->kp, 1};
    pool_for(p->B, kal_tasks, &j);
    /* the static dynamics: the sequences' parts added in order */
    double *da = calloc(Lm, sizeof *da), *dp = calloc(Lm, sizeof *dp);
    if (!da || !dp) abort();
    for (int b = 0; b < p->B; b++)
        for (size_t i = 0; i < Lm; i++)
            da[i] += p->kal_da[(size_t)b * Lm + i], dp[i] += p->kal_dp[(size_t)b * Lm + i];
    kal_static_bwd(c, L, GL, da, dp);
    free(da), free(dp);
    /* the sensor row: v, u (lambda_v = 1 / (softplus(u) + 1e-4)), k, q (normalised) */
    float *dsens = p->kal_dsens; /* [N, Ds] */
    for (int r = 0; r < N; r++) {
        const float *sv = k->sens + (size_t)r * Ds, *u = sv + M;
        float *ds = dsens + (size_t)r * Ds;
        memcpy(ds, p->s[2] + (size_t)r * M, (size_t)M * sizeof(float));
        for (int i = 0; i < M; i++) {
            float lv = k->lv[(size_t)r * M + i], ui = u[i];
            ds[M + i] =
                p->kal_dlv[(size_t)r * M + i] * (-lv * lv) * (ui > 20.0f ? 1.0f : blk_sigmoid(ui));
        }
        const float *dkk = p->s[1] + (size_t)r * S, *dqq = p->s[0] + (size_t)r * S;
        const float *kk = a->k + (size_t)r * S, *qq = a->q + (size_t)r * S;
        for (int w = 0; w < 2; w++) {
            const float *dy = w ? dqq : dkk, *y = w ? qq : kk;
            float *dx = ds + 2 * M + (size_t)w * S;
            if (!c->qk_norm) {
                memcpy(dx, dy, (size_t)S * sizeof(float));
                continue;
            }
            double n = w ? k->qn[r] : k->kn[r], yd = 0;
            for (int s = 0; s < S; s++) yd += (double)y[s] * dy[s];
            int floored = n <= 1e-12;
            for (int s = 0; s < S; s++) dx[s] = (float)((dy[s] - (floored ? 0 : y[s] * yd)) / n);
        }
    }
    train_linear_bwd_f(dz, GL->sensor_proj, NULL, dsens, k->z, L->sensor_proj, N, Ds, M);
    /* SiLU, the convolution, into the first half of dh */
    float *dzc = p->s[0], *dzp = p->s[1];
    memset(dzc, 0, nm * sizeof(float));
    train_silu_bwd_f(dzc, dz, k->zc, (int64_t)nm);
    if (c->use_conv) {
        for (int r = 0; r < N; r++)
            memcpy(p->s[5] + (size_t)r * M, k->h + (size_t)r * 2 * M, (size_t)M * sizeof(float));
        memset(dzp, 0, nm * sizeof(float));
        for (int b = 0; b < p->B; b++)
            train_conv_bwd_f(dzp + (size_t)b * p->T * M, GL->conv_w, GL->conv_b,
                             dzc + (size_t)b * p->T * M, p->s[5] + (size_t)b * p->T * M, L->conv_w,
                             p->T, M, c->conv_size);
    } else {
        dzp = dzc;
    }
    for (int r = 0; r < N; r++)
        for (int i = 0; i < M; i++) dh[(size_t)r * 2 * M + i] += dzp[(size_t)r * M + i];
    train_linear_bwd_f(dxn, GL->in_proj, NULL, dh, a->xn, L->in_proj, N, 2 * M, C);
}

/* ---- softmax attention layers (transformer): one task per sequence and head ---- */

typedef struct attn_job {
    const model *m;
    train_pass *p;
    lacts *a;
    int bwd;
} attn_job;

static void attn_tasks(void *ctx, int lo, int hi) {
    const attn_job *j = ctx;
    const model_config *c = &j->m->c;
    train_pass *p = j->p;
    lacts *a = j->a;
    int H = c->H, d = c->dk, T = p->T, C = c->hidden;
    float scale = j->m->layers[0].mc.scale;
    int plx = c->kind == MK_PARALLAX;
    float *work = j->bwd ? malloc(2 * (size_t)T * sizeof *work) : NULL;
    if (j->bwd && !work) abort();
    for (int t = lo; t < hi; t++) {
        int b = t / H, h = t % H;
        size_t off = (size_t)b * T * C + (size_t)h * d;
        float *P = a->P + (size_t)t * T * T;
        if (plx && !j->bwd)
            train_plx_fwd_f(a->q + off, a->r + off, a->k + off, a->v + off, T, d, C, scale, P,
                            a->U + (size_t)t * T * T, a->on + off);
        else if (plx)
            train_plx_bwd_f(a->q + off, a->r + off, a->k + off, a->v + off, T, d, C, scale, P,
                            a->U + (size_t)t * T * T, p->s[4] + off, p->s[0] + off, p->dgk + off,
                            p->s[1] + off, p->s[2] + off, work);
        else if (!j->bwd)
            train_attn_fwd_f(a->q + off, a->k + off, a->v + off, T, d, C, scale, P, a->on + off);
        else
            train_attn_bwd_f(a->q + off, a->k + off, a->v + off, T, d, C, scale, P, p->s[4] + off,
                             p->s[0] + off, p->s[1] + off, p->s[2] + off, work);
    }
    free(work);
}

/* q, k, v projections (+ biases), per-head RMSNorm (qk_norm), RoPE, attention into a->on */
static void attn_fwd(const model *m, train_pass *p, const layer *L, lacts *a) {
    const model_config *c = &m->c;
    int N = p->N, C = c->hidden, H = c->H, d = c->dk;
    size_t nc = (size_t)N * C;
    train_linear_fwd_f(a->qp, a->xn, L->q_proj, L->q_bias, N, C, C);
    train_linear_fwd_f(a->kp, a->xn, L->k_proj, L->k_bias, N, C, C);
    train_linear_fwd_f(a->v, a->xn, L->v_proj, L->v_bias, N, C, C);
    const float *q = a->qp, *k = a->kp;
    if (c->qk_norm) {
        train_rmsnorm_fwd_f(a->qs, a->qinv, a->qp, L->q_norm, N * H, d, 1e-5f);
        train_rmsnorm_fwd_f(a->ks, a->kinv, a->kp, L->k_norm, N * H, d, 1e-5f);
        q = a->qs, k = a->ks;
    }
    memcpy(a->q, q, nc * sizeof(float));
    memcpy(a->k, k, nc * sizeof(float));
    if (c->kind == MK_PARALLAX) { /* r: its projection, norm and q's rotation (spec B.2) */
        train_linear_fwd_f(a->rp, a->xn, L->r_proj, L->r_bias, N, C, C);
        if (c->qk_norm) train_rmsnorm_fwd_f(a->rn, a->rinv, a->rp, L->r_norm, N * H, d, 1e-5f);
        memcpy(a->r, c->qk_norm ? a->rn : a->rp, nc * sizeof(float));
        if (c->rope)
            for (int b = 0; b < p->B; b++)
                train_rope_f(a->r + (size_t)b * p->T * C, p->T, H, d, C, 0, c->rope_theta, 0);
    }
    if (c->rope)
        for (int b = 0; b < p->B; b++) {
            train_rope_f(a->q + (size_t)b * p->T * C, p->T, H, d, C, 0, c->rope_theta, 0);
            train_rope_f(a->k + (size_t)b * p->T * C, p->T, H, d, C, 0, c->rope_theta, 0);
        }
    attn_job j = {m, p, a, 0};
    pool_for(p->B * H, attn_tasks, &j);
}

/* from d_on = p->s[4] (the attention output's gradient) to dxn */
static void attn_bwd(const model *m, train_pass *p, const layer *L, layer *GL, lacts *a,
                     float *dxn) {
    const model_config *c = &m->c;
    int N = p->N, C = c->hidden, H = c->H, d = c->dk;
    size_t nc = (size_t)N * C;
    for (int i = 0; i < 3; i++) memset(p->s[i], 0, nc * sizeof(float));
    int plx = c->kind == MK_PARALLAX;
    if (plx) memset(p->dgk, 0, nc * sizeof(float)); /* dr */
    attn_job j = {m, p, a, 1};
    pool_for(p->B * H, attn_tasks, &j);
    if (c->rope)
        for (int b = 0; b < p->B; b++) { /* the rotation's transpose */
            train_rope_f(p->s[0] + (size_t)b * p->T * C, p->T, H, d, C, 0, c->rope_theta, 1);
            train_rope_f(p->s[1] + (size_t)b * p->T * C, p->T, H, d, C, 0, c->rope_theta, 1);
        }
    float *dq = p->s[0], *dk = p->s[1];
    if (c->qk_norm) {
        memset(p->s[3], 0, nc * sizeof(float));
        memset(p->s[5], 0, nc * sizeof(float));
        train_rmsnorm_bwd_f(p->s[3], GL->q_norm, p->s[0], a->qp, a->qinv, L->q_norm, N * H, d);
        train_rmsnorm_bwd_f(p->s[5], GL->k_norm, p->s[1], a->kp, a->kinv, L->k_norm, N * H, d);
        dq = p->s[3], dk = p->s[5];
    }
    train_linear_bwd_f(dxn, GL->q_proj, GL->q_bias, dq, a->xn, L->q_proj, N, C, C);
    train_linear_bwd_f(dxn, GL->k_proj, GL->k_bias, dk, a->xn, L->k_proj, N, C, C);
    train_linear_bwd_f(dxn, GL->v_proj, GL->v_bias, p->s[2], a->xn, L->v_proj, N, C, C);
    if (plx) {
        float *dr = p->dgk;
        if (c->rope)
            for (int b = 0; b < p->B; b++)
                train_rope_f(dr + (size_t)b * p->T * C, p->T, H, d, C, 0, c->rope_theta, 1);
        if (c->qk_norm) {
            memset(p->dlr, 0, nc * sizeof(float));
            train_rmsnorm_bwd_f(p->dlr, GL->r_norm, dr, a->rp, a->rinv, L->r_norm, N * H, d);
            dr = p->dlr;
        }
        train_linear_bwd_f(dxn, GL->r_proj, GL->r_bias, dr, a->xn, L->r_proj, N, C, C);
    }
}

/* ---- KATA layers (every variant; delta: in feature space): q, k, v streams, the L2 norm, RoPE,
 * the readout as a T x T kernel kappa (tasks of attn_job), o_proj ---- */

static void kata_tasks(void *ctx, int lo, int hi) {
    const attn_job *j = ctx;
    const model_config *c = &j->m->c;
    train_pass *p = j->p;
    lacts *a = j->a;
    const mixer_cfg *mc = &j->m->layers[a - p->la].mc; /* this layer's core */
    int H = c->H, d = c->dk, T = p->T, C = c->key_dim;
    int delta = mc->variant == KATA_DELTA, chunk = p->chunk < 16 ? p->chunk : 16;
    const kata_fmap f = kata_variant_fmap(mc->variant, d, mc->groups, mc->scale);
    /* DeltaKATA's state is D = groups E (E + 1) / 2 features by d values: its scratch (features,
     * checkpoints every 16 tokens, the backward's chunk of states) is per task, not per pass */
    float *work = NULL;
    if (delta) {
        work =
            malloc((size_t)train_kata_delta_work(T, d, f.groups, C, chunk, j->bwd) * sizeof *work);
        if (!work) abort(); /* sized by train_pass_init's check */
    }
    for (int t = lo; t < hi; t++) {
        int b = t / H, h = t % H;
        size_t off = (size_t)b * T * C + (size_t)h * d;
        const float *beta = a->beta + (size_t)b * T * H + h; /* [T] H apart */
        if (delta && !j->bwd)
            train_kata_delta_fwd_f(a->q + off, a->k + off, a->v + off, beta, T, d, f.groups, C, H,
                                   mc->scale, a->on + off, work, chunk);
        else if (delta)
            train_kata_delta_bwd_f(a->q + off, a->k + off, a->v + off, beta, T, d, f.groups, C, H,
                                   mc->scale, p->s[4] + off, p->s[0] + off, p->s[1] + off,
                                   p->s[2] + off, p->dbeta + (size_t)b * T * H + h, work, chunk);
        else if (!j->bwd)
            train_kata_fwd_f(a->q + off, a->k + off, a->v + off, T, d, f.kind, f.groups, C,
                             mc->scale, mc->eps, a->P + (size_t)t * T * T, a->on + off);
        else
            train_kata_bwd_f(a->q + off, a->k + off, a->v + off, T, d, f.kind, f.groups, C,
                             mc->scale, mc->eps, a->P + (size_t)t * T * T, a->on + off,
                             p->s[4] + off, p->s[0] + off, p->s[1] + off, p->s[2] + off, NULL);
    }
    free(work);
}

static void kata_layer_fwd(const model *m, train_pass *p, const layer *L, lacts *a) {
    const model_config *c = &m->c;
    int N = p->N, H = c->H, d = c->dk, D = c->key_dim, silu = c->use_conv;
    size_t nd = (size_t)N * D;
    stream_fwd(m, p, a->xn, L->q_proj, L->q_conv, NULL, D, a->qp, a->qc, a->qs, silu);
    stream_fwd(m, p, a->xn, L->k_proj, L->k_conv, NULL, D, a->kp, a->kc, a->ks, silu);
    stream_fwd(m, p, a->xn, L->v_proj, L->v_conv, NULL, D, a->vp, a->vc, a->v, silu);
    if (c->qk_norm) {
        train_l2norm_fwd_f(a->q, a->qinv, a->qs, N * H, d, 1e-6f);
        train_l2norm_fwd_f(a->k, a->kinv, a->ks, N * H, d, 1e-6f);
    } else {
        memcpy(a->q, a->qs, nd * sizeof(float));
        memcpy(a->k, a->ks, nd * sizeof(float));
    }
    /* RoPE turns q and k in place (the backward turns their gradients back); the L2 norm's
     * backward needs them unturned: kept in rn, rp */
    if (c->rope) {
        memcpy(a->rn, a->q, nd * sizeof(float)); /* the unrotated q and k, for the norm's bwd */
        memcpy(a->rp, a->k, nd * sizeof(float));
        for (int b = 0; b < p->B; b++) {
            train_rope_il_f(a->q + (size_t)b * p->T * D, p->T, H, d, D, 0, c->rope_theta, 0);
            train_rope_il_f(a->k + (size_t)b * p->T * D, p->T, H, d, D, 0, c->rope_theta, 0);
        }
    }
    /* DeltaKATA's write strength beta = sigmoid(W_b x) [N, H]; 1 without b_proj (a core swapped
     * to delta in a model of another variant) */
    if (L->mc.variant == KATA_DELTA) {
        if (L->b_proj) {
            train_linear_fwd_f(a->bb, a->xn, L->b_proj, NULL, N, H, c->hidden);
            train_sigmoid_fwd_f(a->beta, a->bb, (int64_t)N * H, 1.0f);
        } else {
            for (size_t i = 0; i < (size_t)N * H; i++) a->beta[i] = 1.0f;
        }
    }
    attn_job j = {m, p, a, 0};
    pool_for(p->B * H, kata_tasks, &j);
}

/* from d_on = p->s[4] to dxn */
static void kata_layer_bwd(const model *m, train_pass *p, const layer *L, layer *GL, lacts *a,
                           float *dxn) {
    const model_config *c = &m->c;
    int N = p->N, H = c->H, d = c->dk, D = c->key_dim, silu = c->use_conv;
    size_t nd = (size_t)N * D;
    for (int i = 0; i < 3; i++) memset(p->s[i], 0, nd * sizeof(float));
    int delta = L->mc.variant == KATA_DELTA;
    if (delta) memset(p->dbeta, 0, (size_t)N * H * sizeof(float));
    attn_job j = {m, p, a, 1};
    pool_for(p->B * H, kata_tasks, &j);
    if (delta && L->b_proj) {
        memset(p->dga, 0, (size_t)N * H * sizeof(float));
        train_sigmoid_bwd_f(p->dga, p->dbeta, a->beta, (int64_t)N * H, 1.0f);
        train_linear_bwd_f(dxn, GL->b_proj, NULL, p->dga, a->xn, L->b_proj, N, H, c->hidden);
    }
    if (c->rope)
        for (int b = 0; b < p->B; b++) {
            train_rope_il_f(p->s[0] + (size_t)b * p->T * D, p->T, H, d, D, 0, c->rope_theta, 1);
            train_rope_il_f(p->s[1] + (size_t)b * p->T * D, p->T, H, d, D, 0, c->rope_theta, 1);
        }
    float *dq = p->s[0], *dk = p->s[1];
    if (c->qk_norm) {
        const float *qy = c->rope ? a->rn : a->q, *ky = c->rope ? a->rp : a->k;
        memset(p->s[3], 0, nd * sizeof(float));
        memset(p->s[5], 0, nd * sizeof(float));
        train_l2norm_bwd_f(p->s[3], p->s[0], qy, a->qinv, N * H, d);
        train_l2norm_bwd_f(p->s[5], p->s[1], ky, a->kinv, N * H, d);
        dq = p->s[3], dk = p->s[5];
    }
    /* the streams' scratch: s[4] (d_on is used up) and kata_t */
    float *t1 = p->s[4];
    stream_bwd(m, p, a->xn, L->v_proj, L->v_conv, GL->v_proj, GL->v_conv, NULL, D, a->vp, a->vc,
               p->s[2], dxn, t1, p->kata_t, silu);
    stream_bwd(m, p, a->xn, L->q_proj, L->q_conv, GL->q_proj, GL->q_conv, NULL, D, a->qp, a->qc, dq,
               dxn, t1, p->kata_t, silu);
    stream_bwd(m, p, a->xn, L->k_proj, L->k_conv, GL->k_proj, GL->k_conv, NULL, D, a->kp, a->kc, dk,
               dxn, t1, p->kata_t, silu);
}

double train_model_pass(const model *m, train_pass *p, const int32_t *ids, const int32_t *target,
                        float wgt, train_grads *G, int *correct, float *logits_out) {
    const model_config *c = &m->c;
    int N = p->N, C = c->hidden, H = c->H, Hv = c->Hv, dk = c->dk, dv = c->dv, Kd = c->key_dim,
        Vd = c->value_dim, I = c->inter > 0 ? c->inter : 0, V = c->vocab;
    if (c->kind == MK_MAMBA2 || c->kind == MK_KALMAN)
        Vd = c->d_inner; /* the out-projection's input */
    float eps = c->norm_eps;
    size_t NC = (size_t)N * C;
    /* ---- forward ---- */
    for (int r = 0; r < N; r++)
        memcpy(p->la[0].x_in + (size_t)r * C, m->embed + (size_t)ids[r] * C,
               (size_t)C * sizeof(float));
    for (int li = 0; li < c->layers; li++) {
        const layer *L = &m->layers[li];
        lacts *a = &p->la[li];
        int kind = core_kind(L);
        float *x_out = li + 1 < c->layers ? p->la[li + 1].x_in : p->x_out;
        train_rmsnorm_fwd_f(a->xn, a->rs1, a->x_in, L->attn_norm, N, C, eps);
        if (c->kind == MK_TRANSFORMER || c->kind == MK_PARALLAX) {
            attn_fwd(m, p, L, a);
        } else if (c->kind == MK_GLA) {
            gla_layer_fwd(m, p, L, a);
        } else if (c->kind == MK_MAMBA2) {
            m2_fwd(m, p, L, a);
        } else if (c->kind == MK_KALMAN) {
            kal_fwd(m, p, L, a);
        } else if (c->kind == MK_KATA) {
            kata_layer_fwd(m, p, L, a);
        } else {
            stream_fwd(m, p, a->xn, L->q_proj, L->q_conv, L->q_conv_b, Kd, a->qp, a->qc, a->qs, 1);
            stream_fwd(m, p, a->xn, L->k_proj, L->k_conv, L->k_conv_b, Kd, a->kp, a->kc, a->ks, 1);
            stream_fwd(m, p, a->xn, L->v_proj, L->v_conv, L->v_conv_b, Vd, a->vp, a->vc, a->v, 1);
            /* qinv / kinv keep the inverse norms (L2) or the sums (qk_norm=sum) */
            if (c->qk_sum_norm)
                train_sumnorm_fwd_f(a->q, a->qinv, a->qs, N * H, dk);
            else
                train_l2norm_fwd_f(a->q, a->qinv, a->qs, N * H, dk, 1e-6f);
            if (kind == 2 || c->raw_keys) /* Kaczmarz (or l2norm_keys=false): the raw key */
                memcpy(a->k, a->ks, (size_t)N * Kd * sizeof(float));
            else if (c->qk_sum_norm)
                train_sumnorm_fwd_f(a->k, a->kinv, a->ks, N * H, dk);
            else
                train_l2norm_fwd_f(a->k, a->kinv, a->ks, N * H, dk, 1e-6f);
            if (kind != 1 && c->has_decay) {
                train_linear_fwd_f(a->ga, a->xn, L->a_proj, NULL, N, Hv, C);
                train_decay_fwd_f(a->g, a->ga, L->A_log, L->dt_bias, N, Hv);
            }
            if (c->use_beta) {
                train_linear_fwd_f(a->bb, a->xn, L->b_proj, L->b_bias, N, Hv, C);
                train_sigmoid_fwd_f(a->beta, a->bb, (int64_t)N * Hv,
                                    kind != 2 && c->allow_neg ? 2.0f : 1.0f);
            } else {
                for (int64_t i = 0; i < (int64_t)N * Hv; i++) a->beta[i] = 1.0f;
            }
            if (c->use_gate) train_linear_fwd_f(a->z, a->xn, L->g_proj, NULL, N, Vd, C);
            core_job cj = {m, L, p, a, 0};
            pool_for(p->B * Hv, core_tasks, &cj);
            train_gnorm_fwd_f(a->on, a->rso, a->o, c->use_gate ? a->z : NULL, L->o_norm, N * Hv, dv,
                              eps);
        }
        /* the out-projection (Mamba2: out_proj with its optional bias) */
        if (c->kind == MK_MAMBA2 || c->kind == MK_KALMAN)
            train_linear_fwd_f(a->x_mid, a->on, L->out_proj, L->out_proj_b, N, C, Vd);
        else
            train_linear_fwd_f(a->x_mid, a->on, L->o_proj, NULL, N, C, Vd);
        for (size_t i = 0; i < NC; i++) a->x_mid[i] += a->x_in[i];
        if (I) {
            train_rmsnorm_fwd_f(a->xn2, a->rs2, a->x_mid, L->mlp_norm, N, C, eps);
            train_linear_fwd_f(a->h1, a->xn2, L->gate_proj, NULL, N, I, C);
            train_linear_fwd_f(a->h2, a->xn2, L->up_proj, NULL, N, I, C);
            train_swiglu_fwd_f(a->act, a->h1, a->h2, (int64_t)N * I);
            train_linear_fwd_f(x_out, a->act, L->down_proj, NULL, N, C, I);
            for (size_t i = 0; i < NC; i++) x_out[i] += a->x_mid[i];
        } else {
            memcpy(x_out, a->x_mid, NC * sizeof(float));
        }
    }
    train_rmsnorm_fwd_f(p->xf, p->rsf, p->x_out, m->norm_f, N, C, eps);
    train_linear_fwd_f(p->logits, p->xf, m->lm_head, NULL, N, V, C);
    if (logits_out) memcpy(logits_out, p->logits, (size_t)N * V * sizeof(float));
    double loss = train_xent_f(G ? p->dlog : NULL, p->logits, target, N, V, wgt, correct);
    if (!G) return loss;

    /* ---- backward ---- */
    float *dx = p->dx, *dxn = p->dxn;
    memset(dxn, 0, NC * sizeof(float));
    train_linear_bwd_f(dxn, G->lm_head, NULL, p->dlog, p->xf, m->lm_head, N, V, C);
    memset(dx, 0, NC * sizeof(float));
    train_rmsnorm_bwd_f(dx, G->norm_f, dxn, p->x_out, p->rsf, m->norm_f, N, C);
    for (int li = c->layers - 1; li >= 0; li--) {
        const layer *L = &m->layers[li];
        layer *GL = &G->L[li];
        lacts *a = &p->la[li];
        int kind = core_kind(L);
        /* MLP: x_out = x_mid + down(act); dx passes the residual unchanged */
        if (I) {
            memset(p->dact, 0, (size_t)N * I * sizeof(float));
            train_linear_bwd_f(p->dact, GL->down_proj, NULL, dx, a->act, L->down_proj, N, C, I);
            memset(p->dh1, 0, (size_t)N * I * sizeof(float));
            memset(p->dh2, 0, (size_t)N * I * sizeof(float));
            train_swiglu_bwd_f(p->dh1, p->dh2, p->dact, a->h1, a->h2, (int64_t)N * I);
            memset(dxn, 0, NC * sizeof(float));
            train_linear_bwd_f(dxn, GL->gate_proj, NULL, p->dh1, a->xn2, L->gate_proj, N, I, C);
            train_linear_bwd_f(dxn, GL->up_proj, NULL, p->dh2, a->xn2, L->up_proj, N, I, C);
            train_rmsnorm_bwd_f(dx, GL->mlp_norm, dxn, a->x_mid, a->rs2, L->mlp_norm, N, C);
        }
        /* mixer: x_mid = x_in + W_o RMSNormGated(o, z) */
        size_t nv = (size_t)N * Vd, nk = (size_t)N * Kd;
        float *d_on = p->s[4], *d_o = p->s[3], *dz = p->s[5];
        memset(d_on, 0, nv * sizeof(float));
        if (c->kind == MK_MAMBA2 || c->kind == MK_KALMAN)
            train_linear_bwd_f(d_on, GL->out_proj, GL->out_proj_b, dx, a->on, L->out_proj, N, C,
                               Vd);
        else
            train_linear_bwd_f(d_on, GL->o_proj, NULL, dx, a->on, L->o_proj, N, C, Vd);
        if (c->kind == MK_TRANSFORMER || c->kind == MK_PARALLAX) {
            memset(dxn, 0, NC * sizeof(float));
            attn_bwd(m, p, L, GL, a, dxn);
        } else if (c->kind == MK_GLA) {
            memset(dxn, 0, NC * sizeof(float));
            gla_layer_bwd(m, p, L, GL, a, dxn);
        } else if (c->kind == MK_MAMBA2) {
            memset(dxn, 0, NC * sizeof(float));
            m2_bwd(m, p, L, GL, a, dxn);
        } else if (c->kind == MK_KALMAN) {
            memset(dxn, 0, NC * sizeof(float));
            kal_bwd(m, p, L, GL, a, dxn);
        } else if (c->kind == MK_KATA) {
            memset(dxn, 0, NC * sizeof(float));
            kata_layer_bwd(m, p, L, GL, a, dxn);
        } else {
            memset(d_o, 0, nv * sizeof(float));
            if (c->use_gate) memset(dz, 0, nv * sizeof(float));
            train_gnorm_bwd_f(d_o, c->use_gate ? dz : NULL, GL->o_norm, d_on, a->o,
                              c->use_gate ? a->z : NULL, a->rso, L->o_norm, N * Hv, dv);
            memset(dxn, 0, NC * sizeof(float));
            if (c->use_gate)
                train_linear_bwd_f(dxn, GL->g_proj, NULL, dz, a->xn, L->g_proj, N, Vd, C);
            /* the core: dq, dk, dv into s[0..2], dg, dbeta */
            memset(p->s[0], 0, nk * sizeof(float));
            memset(p->s[1], 0, nk * sizeof(float));
            memset(p->s[2], 0, nv * sizeof(float));
            memset(p->dg, 0, (size_t)N * Hv * sizeof(float));
            memset(p->dbeta, 0, (size_t)N * Hv * sizeof(float));
            core_job cj = {m, L, p, a, 1};
            pool_for(p->B * Hv, core_tasks, &cj);
            if (c->use_beta) {
                memset(p->dga, 0, (size_t)N * Hv * sizeof(float));
                train_sigmoid_bwd_f(p->dga, p->dbeta, a->beta, (int64_t)N * Hv,
                                    kind != 2 && c->allow_neg ? 2.0f : 1.0f);
                train_linear_bwd_f(dxn, GL->b_proj, GL->b_bias, p->dga, a->xn, L->b_proj, N, Hv, C);
            }
            if (kind != 1 && c->has_decay) {
                memset(p->dga, 0, (size_t)N * Hv * sizeof(float));
                train_decay_bwd_f(p->dga, GL->A_log, GL->dt_bias, p->dg, a->g, a->ga, L->A_log,
                                  L->dt_bias, N, Hv);
                train_linear_bwd_f(dxn, GL->a_proj, NULL, p->dga, a->xn, L->a_proj, N, Hv, C);
            }
            /* v: s[2] is dv; s[3], s[4] scratch (d_o and d_on are done with) */
            stream_bwd(m, p, a->xn, L->v_proj, L->v_conv, GL->v_proj, GL->v_conv, GL->v_conv_b, Vd,
                       a->vp, a->vc, p->s[2], dxn, p->s[3], p->s[4], 1);
            /* q: L2 norm backward into s[5], then the stream */
            memset(p->s[5], 0, nk * sizeof(float));
            if (c->qk_sum_norm)
                train_sumnorm_bwd_f(p->s[5], p->s[0], a->q, a->qinv, N * H, dk);
            else
                train_l2norm_bwd_f(p->s[5], p->s[0], a->q, a->qinv, N * H, dk);
            stream_bwd(m, p, a->xn, L->q_proj, L->q_conv, GL->q_proj, GL->q_conv, GL->q_conv_b, Kd,
                       a->qp, a->qc, p->s[5], dxn, p->s[3], p->s[4], 1);
            const float *dks = p->s[1];
            if (kind != 2 && !c->raw_keys) {
                memset(p->s[5], 0, nk * sizeof(float));
                if (c->qk_sum_norm)
                    train_sumnorm_bwd_f(p->s[5], p->s[1], a->k, a->kinv, N * H, dk);
                else
                    train_l2norm_bwd_f(p->s[5], p->s[1], a->k, a->kinv, N * H, dk);
                dks = p->s[5];
            }
            stream_bwd(m, p, a->xn, L->k_proj, L->k_conv, GL->k_proj, GL->k_conv, GL->k_conv_b, Kd,
                       a->kp, a->kc, dks, dxn, p->s[3], p->s[4], 1);
        }
        train_rmsnorm_bwd_f(dx, GL->attn_norm, dxn, a->x_in, a->rs1, L->attn_norm, N, C);
    }
    for (int r = 0; r < N; r++) {
        float *ge = G->embed + (size_t)ids[r] * C;
        const float *d = dx + (size_t)r * C;
        for (int i = 0; i < C; i++) ge[i] += d[i];
    }
    return loss;
}
