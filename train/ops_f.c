/* ops_f.c: ops.inc in float, the type the trainer trains in. The forward product is the model
 * stack's own blk_linear_batch (models/blocks.h), so the trainer's dense layers compute what
 * stepping computes, bit for bit per row. */
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "../core/pool.h"
#include "../models/blocks.h"
#include "ops.h"

#define R                       float
#define SFX(n)                  n##_f
#define TRAIN_LINEAR_FWD_NATIVE 1

void train_linear_fwd_f(float *Y, const float *X, const float *W, const float *b, int N, int out,
                        int in) {
    blk_linear_batch(Y, X, W, b, N, out, in);
}

#include "ops.inc"
