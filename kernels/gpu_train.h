/* gpu_train.h: the trainer on the GPU (`train` under `device gpu`): the twin of
 * train/model_grad.c (the model pass forwards and backwards) and of train/train.c's AdamW step.
 *
 * The weights, their gradients and the Adam moments live on the device in the slot order of the
 * model (one buffer each); a pass uploads the batch's ids and targets and downloads one loss and
 * one hit flag a row (summed on the host in order, so the loss is the same every run). Products
 * are cuBLAS SGEMM in pedantic fp32 (no TF32); the recurrence is one block per sequence and head
 * with the state in shared memory, checkpointed every `chunk` tokens and recomputed a chunk at a
 * time in the backward, as on the CPU. tests/gpu/test_train_gpu.c compares a pass (loss, logits,
 * every gradient) and AdamW steps with the CPU. */
#ifndef MIXSCOPE_GPU_TRAIN_H
#define MIXSCOPE_GPU_TRAIN_H

#include <stdint.h>

#include "../core/err.h"

#ifdef __cplusplus
extern "C" {
#endif

/* Where each weight of layer l sits in the flat buffer (floats from its start; -1: absent), and
 * the layer's core. Built by train/train_gpu.c from the model's slot list. */
typedef struct gpu_train_layer {
    int64_t attn_norm, q_proj, k_proj, v_proj, a_proj, b_proj, b_bias, A_log, dt_bias;
    int64_t q_conv, k_conv, v_conv, q_conv_b, k_conv_b, v_conv_b, g_proj, o_norm, o_proj;
    int64_t mlp_norm, gate_proj, up_proj, down_proj;
    int core;  /* 0 gdn, 1 deltanet, 2 kaczmarz */
    int raw_k; /* keys reach the core unnormalised (kaczmarz, or l2norm_keys=false) */
    float scale, kacz_eps;
} gpu_train_layer;

typedef struct gpu_train_desc {
    int layers, C, H, dk, dv, Kd, Vd, I, V; /* I = 0: no MLP */
    int conv, W, use_gate, has_decay, use_beta, allow_neg;
    float norm_eps;
    int64_t n;                      /* floats in the flat buffer */
    int64_t embed, norm_f, lm_head; /* lm_head == embed when tied */
    int nslots;
    const int64_t *slot_off, *slot_n; /* [nslots] */
    const int *slot_decay;            /* [nslots]: AdamW's weight decay applies */
    float *const *slot_data;          /* [nslots]: the host weights (upload / download) */
    const gpu_train_layer *lay;       /* [layers] */
} gpu_train_desc;

typedef struct gpu_train gpu_train;

/* Uploads the weights; buffers for passes of B sequences of T tokens. */
int gpu_train_init(gpu_train **out, const gpu_train_desc *d, int B, int T, int chunk, err *e);
void gpu_train_free(gpu_train *g);
/* As train_model_pass: ids, target [B, T] (host); with backward, the gradient of the weighted
 * loss is added to the device's gradients. *loss: the weighted loss sum; *correct (may be NULL)
 * gains the argmax hits; logits (host, may be NULL) receives [B, T, vocab]. */
int gpu_train_pass(gpu_train *g, const int32_t *ids, const int32_t *target, float wgt, int backward,
                   double *loss, int *correct, float *logits, err *e);
int gpu_train_zero_grads(gpu_train *g, err *e);
/* The global norm of the gradients (partial sums in a fixed order, added in double). */
int gpu_train_grad_norm(gpu_train *g, double *norm, err *e);
/* One AdamW step (train.c's rule): step number t (1-based), gradients scaled by gscale. */
int gpu_train_adamw(gpu_train *g, double lr, double wd, float gscale, int t, err *e);
/* The device's weights into the desc's host slots; the gradients into buf [n] in slot order. */
int gpu_train_download(gpu_train *g, err *e);
int gpu_train_download_grads(gpu_train *g, float *buf, err *e);

#ifdef __cplusplus
}
#endif

#endif
