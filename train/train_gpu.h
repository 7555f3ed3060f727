/* train_gpu.h: the description of a model that the GPU trainer (kernels/gpu_train.h) takes. */
#ifndef MIXSCOPE_TRAIN_GPU_H
#define MIXSCOPE_TRAIN_GPU_H

#include "../core/err.h"
#include "../kernels/gpu_train.h"
#include "../models/model.h"

typedef struct train_gpu_desc {
    gpu_train_desc d; /* points into the arrays below */
    int64_t *slot_off, *slot_n;
    int *slot_decay;
    float **slot_data;
    gpu_train_layer *lay;
} train_gpu_desc;

/* The description of m (which must pass train_model_check); slot_data points at m's weights. */
int train_gpu_desc_init(train_gpu_desc *t, model *m, err *e);
void train_gpu_desc_free(train_gpu_desc *t);

#endif
