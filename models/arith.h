/* arith.h: fla's GPU arithmetic for a whole model (models/arith.c). The cores' option
 * arith=fp32|tf32 (mixers/tf32.h) set on the layers where fla's own forward pass has TF32
 * products, so that a run reproduces the logits fla computes on a Hopper GPU. */
#ifndef MIXSCOPE_MODELS_ARITH_H
#define MIXSCOPE_MODELS_ARITH_H

#include "model.h"

/* Sets arith (MIXER_ARITH_FP32 or MIXER_ARITH_TF32) on the cores of the layers where fla computes
 * with TF32: the delta-rule cores of gated_deltanet and kaczmarz_deltanet layers unless config.json
 * says attn_mode "fused_recurrent" (fla's chunk kernels), and the attention cores of parallax
 * layers (naive_parallax's einsums). delta_net and transformer layers stay exact (fla's float32
 * forward is exact there), and cores without the option (gla, mamba2, kalman, kata) are left
 * alone.
 * MIXER_ARITH_FP32 resets every core that has the option. The model goes back to position 0.
 * Returns the number of layers set, or -1 with a message. */
int model_set_arith(model *m, int arith, err *e);

/* 1 when some layer's delta-rule core has arith=tf32. fla's layer then runs its chunk kernels for
 * more than 64 tokens and its exact recurrent kernel otherwise (spec/delta-family.md §2.3, mode
 * selection): `run` follows that rule (cli/cmd_model.c). */
int model_arith_chunked(const model *m);

#endif
