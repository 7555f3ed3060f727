/* tensor.h: a named, typed, shaped block of memory.
 *
 * A tensor either owns its data (tensor_new, tensor_to_f32) or views memory owned by someone else,
 * typically a mapped safetensors file; then `data` may be unaligned, so element access goes through
 * the tensor_get_* / tensor_read_f32 helpers, which copy bytes rather than cast pointers.
 * Shapes are row-major with the last dimension contiguous, as in safetensors and PyTorch. */
#ifndef MIXSCOPE_TENSOR_H
#define MIXSCOPE_TENSOR_H

#include <stddef.h>
#include <stdint.h>

#include "err.h"

#define TENSOR_MAX_DIMS 8

typedef enum dtype {
    DT_F32,
    DT_F16,
    DT_BF16,
    DT_F64,
    DT_I64,
    DT_I32,
    DT_I16,
    DT_I8,
    DT_U8,
    DT_BOOL,
    DT_COUNT
} dtype;

typedef struct tensor {
    char *name; /* owned string */
    dtype dtype;
    int ndim; /* 0 = scalar */
    int64_t shape[TENSOR_MAX_DIMS];
    void *data; /* nbytes bytes; may be unaligned for views */
    size_t nbytes;
    int owns_data;
} tensor;

/* "F32", "BF16", ... as safetensors spells them; NULL for an out-of-range value. */
const char *dtype_name(dtype dt);
/* Parses a safetensors dtype string; returns -1 when unknown. */
int dtype_parse(const char *s, dtype *out);
size_t dtype_size(dtype dt);
int dtype_is_float(dtype dt);

/* A zero-filled tensor that owns its data. NULL on allocation failure or a bad shape. */
tensor *tensor_new(const char *name, dtype dt, int ndim, const int64_t *shape, err *e);
/* Convenience for float32 tensors of up to 4 dims (pass -1 for unused trailing dims). */
tensor *tensor_new_f32(const char *name, int64_t d0, int64_t d1, int64_t d2, int64_t d3, err *e);
void tensor_free(tensor *t);

int64_t tensor_numel(const tensor *t);
/* Element count of a shape, or -1 if a dim is negative or the product overflows int64 or size_t
 * once multiplied by elem_size. */
int64_t shape_numel_checked(int ndim, const int64_t *shape, size_t elem_size);

/* Converts every element to float32 into dst (numel floats). Integers convert exactly where float
 * can hold them. */
void tensor_read_f32(const tensor *t, float *dst);
/* Converts to int64 (integer and bool tensors; floats are truncated). */
void tensor_read_i64(const tensor *t, int64_t *dst);
/* The same for a tensor that views a mapped file (st_open): the copy runs under
 * core/busguard.h, so a file truncated by another program since it was opened is an error naming
 * the tensor ("the file changed while it was read"), not a SIGBUS that ends the session. */
int tensor_read_f32_file(const tensor *t, float *dst, err *e);
int tensor_read_i64_file(const tensor *t, int64_t *dst, err *e);
/* A new owned float32 copy with the same name and shape. */
tensor *tensor_to_f32(const tensor *t, err *e);
/* A new owned tensor of dtype `dt` converted from float32 values src[numel]. */
tensor *tensor_from_f32(const char *name, dtype dt, int ndim, const int64_t *shape,
                        const float *src, err *e);

/* "[2, 3, 4]" into buf. */
const char *shape_str(int ndim, const int64_t *shape, char *buf, size_t n);

/* Scalar conversions, round to nearest even. */
float f16_to_f32(uint16_t h);
uint16_t f32_to_f16(float f);
float bf16_to_f32(uint16_t h);
uint16_t f32_to_bf16(float f);

#endif
