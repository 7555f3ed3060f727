// gpu_dense.cu: the dense layers of a model on the GPU, through cuBLAS.
//
// gpu_linear computes Y = X W^T (+ b) for T rows at once, as nn.Linear stores W ([out, in],
// row-major). Weights are uploaded once and kept on the device, keyed by their host address, so a
// model's projections cross the bus a single time; activations cross per call. The math mode is
// pedantic fp32 (no TF32), so results agree with the CPU reference to rounding.
#include <cublas_v2.h>
#include <cuda_runtime.h>
#include <string.h>

#include "gpu.h"
#include "gpu_common.cuh"

#define WEIGHT_CACHE_MAX 4096

struct weight_entry {
    const float *host;
    size_t floats;
    float *dev;
};

static cublasHandle_t g_blas;
static weight_entry g_weights[WEIGHT_CACHE_MAX];
static int g_nweights;
static float *g_x, *g_y;
static size_t g_x_cap, g_y_cap;

static int blas_init(err *e) {
    if (g_blas) return 0;
    if (cublasCreate(&g_blas) != CUBLAS_STATUS_SUCCESS)
        return err_set(e, "gpu: cannot start cuBLAS");
    cublasSetMathMode(g_blas, CUBLAS_PEDANTIC_MATH);
    return 0;
}

static const float *weight_on_device(const float *host, size_t floats, err *e) {
    for (int i = 0; i < g_nweights; i++)
        if (g_weights[i].host == host && g_weights[i].floats == floats) return g_weights[i].dev;
    if (g_nweights == WEIGHT_CACHE_MAX) {
        err_set(e, "gpu: more than %d weight tensors", WEIGHT_CACHE_MAX);
        return NULL;
    }
    float *d = (float *)gpu_malloc(floats * sizeof(float), e);
    if (!d) return NULL;
    if (gpu_copy_to_device(d, host, floats * sizeof(float), e)) {
        cudaFree(d);
        return NULL;
    }
    g_weights[g_nweights++] = {host, floats, d};
    return d;
}

static int grow(float **buf, size_t *cap, size_t floats, err *e) {
    if (*cap >= floats) return 0;
    cudaFree(*buf);
    *buf = (float *)gpu_malloc(floats * sizeof(float), e);
    *cap = *buf ? floats : 0;
    return *buf ? 0 : -1;
}

extern "C" int gpu_linear(float *y, const float *x, const float *W, const float *b, int T, int out,
                          int in, err *e) {
    if (T <= 0) return 0;
    if (blas_init(e)) return -1;
    const float *dW = weight_on_device(W, (size_t)out * in, e);
    if (!dW || grow(&g_x, &g_x_cap, (size_t)T * in, e) || grow(&g_y, &g_y_cap, (size_t)T * out, e))
        return -1;
    if (gpu_copy_to_device(g_x, x, (size_t)T * in * sizeof(float), e)) return -1;
    // Row-major Y[T, out] = X[T, in] W[out, in]^T is column-major Y^T = W X^T:
    // C (out x T) = op(A) (out x in) * B (in x T) with A = W seen column-major (in x out),
    // transposed.
    const float one = 1.0f, zero = 0.0f;
    if (cublasSgemm(g_blas, CUBLAS_OP_T, CUBLAS_OP_N, out, T, in, &one, dW, in, g_x, in, &zero, g_y,
                    out) != CUBLAS_STATUS_SUCCESS)
        return err_set(e, "gpu: cuBLAS matrix product failed (%d x %d x %d)", T, out, in);
    if (gpu_copy_to_host(y, g_y, (size_t)T * out * sizeof(float), e)) return -1;
    if (b)
        for (int t = 0; t < T; t++)
            for (int o = 0; o < out; o++) y[(size_t)t * out + o] += b[o];
    return 0;
}

extern "C" void gpu_release_weights(void) {
    if (!g_nweights && !g_x && !g_y) return; // never used: do not wake the CUDA runtime
    for (int i = 0; i < g_nweights; i++) cudaFree(g_weights[i].dev);
    g_nweights = 0;
    if (g_x) cudaFree(g_x);
    if (g_y) cudaFree(g_y);
    g_x = g_y = NULL;
    g_x_cap = g_y_cap = 0;
}
