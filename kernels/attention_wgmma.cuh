// attention_wgmma.cuh: attention.cu's way into the sm_90a kernels of attention_wgmma.cu.
#pragma once

#include "../core/err.h"

extern "C" {
// 1 when the wgmma forward can run here (an sm_90 GPU, a build with the sm_90a image, and
// MIXSCOPE_ATTN_WGMMA not 0).
int attn_wgmma_usable(void);
// gpu_attn_forward's contract for bf16 inputs with dk = dv = 128 (r NULL: softmax).
int attn_wgmma_forward(int B, int Tq, int Tk, int H, int pos0, int window, float scale,
                       const void *q, const void *r, const void *k, const void *v, float *o,
                       void *stream, err *e);
// The warp-specialized forward (attention_ws_wgmma.cu), the same contract: the default for both
// (MIXSCOPE_ATTN_WS_PLX=0 keeps Parallax here); attn_ws_stages() gives the stages of its rings, or 0
// when MIXSCOPE_ATTN_WS=0 keeps attn_wgmma_forward's kernels for both.
int attn_ws_stages(void);
int attn_ws_forward(int B, int Tq, int Tk, int H, int pos0, int window, float scale, const void *q,
                    const void *r, const void *k, const void *v, float *o, void *stream, err *e);
}
