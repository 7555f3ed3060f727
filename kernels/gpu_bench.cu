// gpu_bench.cu: what the GPU benchmarks need from the device side: random device data, a median
// timer on CUDA events, and the measured copy bandwidth that every kernel's floor is stated
// against.
#include <algorithm>
#include <cuda_bf16.h>
#include <cuda_runtime.h>
#include <stdint.h>
#include <vector>

#include <cublas_v2.h>

#include "gpu_bench.h"
#include "gpu_common.cuh"

__global__ void fill_kernel(void *dst, size_t n, int bf16, float scale, float offset,
                            uint64_t seed) {
    size_t i = blockIdx.x * (size_t)blockDim.x + threadIdx.x;
    for (; i < n; i += (size_t)gridDim.x * blockDim.x) {
        uint64_t x = (i + 1) * 0x9E3779B97F4A7C15ull ^ seed;
        x ^= x >> 31, x *= 0xBF58476D1CE4E5B9ull, x ^= x >> 27;
        float u = (float)(x >> 40) * (1.0f / 16777216.0f); // [0, 1)
        float val = offset + scale * (u * 2.0f - 1.0f);
        if (bf16)
            ((__nv_bfloat16 *)dst)[i] = __float2bfloat16(val);
        else
            ((float *)dst)[i] = val;
    }
}

extern "C" int gpu_fill_uniform(void *dst, size_t n, int bf16, float scale, float offset,
                                unsigned long long seed, err *e) {
    fill_kernel<<<1024, 256>>>(dst, n, bf16, scale, offset, seed);
    CUDA_LAUNCHED("gpu fill");
    return 0;
}

extern "C" int gpu_time_median(gpu_bench_fn fn, void *ctx, int warmup, int iters, double *ms,
                               err *e) {
    for (int i = 0; i < warmup; i++)
        if (fn(ctx, e)) return -1;
    CUDA_TRY(cudaDeviceSynchronize(), "gpu bench warm-up");
    std::vector<float> t(iters);
    cudaEvent_t a, b;
    CUDA_TRY(cudaEventCreate(&a), "gpu bench");
    CUDA_TRY(cudaEventCreate(&b), "gpu bench");
    for (int i = 0; i < iters; i++) {
        cudaEventRecord(a);
        if (fn(ctx, e)) return -1;
        cudaEventRecord(b);
        CUDA_TRY(cudaEventSynchronize(b), "gpu bench");
        cudaEventElapsedTime(&t[i], a, b);
    }
    cudaEventDestroy(a), cudaEventDestroy(b);
    std::sort(t.begin(), t.end());
    *ms = t[iters / 2];
    return 0;
}

extern "C" void *gpu_bench_stream(err *e) {
    cudaStream_t st = NULL;
    if (cudaStreamCreateWithFlags(&st, cudaStreamNonBlocking) != cudaSuccess) {
        cudaGetLastError();
        err_set(e, "gpu bench: cannot create a stream");
        return NULL;
    }
    return st;
}

extern "C" void gpu_bench_stream_free(void *stream) {
    if (stream) cudaStreamDestroy((cudaStream_t)stream);
}

// fn's launches, `calls` times in a row (after two warm-up calls), captured and instantiated.
static int graph_of(gpu_bench_fn fn, void *ctx, cudaStream_t st, int calls, cudaGraphExec_t *exec,
                    err *e) {
    *exec = NULL;
    for (int i = 0; i < 2; i++)
        if (fn(ctx, e)) return -1;
    CUDA_TRY(cudaStreamSynchronize(st), "gpu bench warm-up");
    cudaGraph_t graph = NULL;
    CUDA_TRY(cudaStreamBeginCapture(st, cudaStreamCaptureModeThreadLocal), "gpu bench: capture");
    int rc = 0;
    for (int c = 0; c < calls && !rc; c++) rc = fn(ctx, e);
    cudaError_t ce = cudaStreamEndCapture(st, &graph);
    if (rc) {
        if (graph) cudaGraphDestroy(graph);
        return -1;
    }
    if (ce == cudaSuccess) ce = cudaGraphInstantiate(exec, graph, 0);
    if (graph) cudaGraphDestroy(graph);
    if (ce != cudaSuccess) {
        cudaGetLastError();
        *exec = NULL;
        return err_set(e, "gpu bench: graph capture failed: %s", cudaGetErrorString(ce));
    }
    return 0;
}

// The median over iters of `replays` launches of exec back to back, divided by per (ms); exec is
// destroyed.
static int graph_median(cudaGraphExec_t exec, cudaStream_t st, int replays, int iters, double per,
                        double *ms, err *e) {
    std::vector<float> t(iters);
    cudaEvent_t a, b;
    CUDA_TRY(cudaEventCreate(&a), "gpu bench");
    CUDA_TRY(cudaEventCreate(&b), "gpu bench");
    for (int r = 0; r < replays; r++) cudaGraphLaunch(exec, st); // warm
    for (int i = 0; i < iters; i++) {
        cudaEventRecord(a, st);
        for (int r = 0; r < replays; r++) cudaGraphLaunch(exec, st);
        cudaEventRecord(b, st);
        CUDA_TRY(cudaEventSynchronize(b), "gpu bench");
        cudaEventElapsedTime(&t[i], a, b);
    }
    cudaEventDestroy(a), cudaEventDestroy(b);
    cudaGraphExecDestroy(exec);
    std::sort(t.begin(), t.end());
    *ms = t[iters / 2] / per;
    return 0;
}

extern "C" int gpu_time_graph_median(gpu_bench_fn fn, void *ctx, void *stream, int replays,
                                     int iters, double *ms, err *e) {
    cudaStream_t st = (cudaStream_t)stream;
    cudaGraphExec_t exec;
    if (graph_of(fn, ctx, st, 1, &exec, e)) return -1;
    return graph_median(exec, st, replays, iters, replays, ms, e);
}

extern "C" int gpu_time_graph_steps_median(gpu_bench_fn fn, void *ctx, void *stream, int steps,
                                           int iters, double *ms, err *e) {
    cudaStream_t st = (cudaStream_t)stream;
    cudaGraphExec_t exec;
    if (graph_of(fn, ctx, st, steps, &exec, e)) return -1;
    return graph_median(exec, st, 1, iters, steps, ms, e);
}

struct copy_ctx {
    void *dst, *src;
    size_t bytes;
};

static int do_copy(void *p, err *e) {
    copy_ctx *c = (copy_ctx *)p;
    CUDA_TRY(cudaMemcpyAsync(c->dst, c->src, c->bytes, cudaMemcpyDeviceToDevice), "gpu copy");
    return 0;
}

extern "C" int gpu_measure_copy_gbps(double *gbps, err *e) {
    size_t bytes = (size_t)2 << 30; // 2 GiB each way: far beyond the 60 MB L2
    copy_ctx c = {NULL, NULL, bytes};
    CUDA_TRY(cudaMalloc(&c.dst, bytes), "gpu copy bandwidth");
    if (cudaMalloc(&c.src, bytes) != cudaSuccess) {
        cudaFree(c.dst);
        return err_set(e, "gpu copy bandwidth: out of memory");
    }
    cudaMemset(c.src, 1, bytes);
    double ms;
    int rc = gpu_time_median(do_copy, &c, 2, 9, &ms, e);
    cudaFree(c.dst), cudaFree(c.src);
    if (rc) return -1;
    *gbps = 2.0 * bytes / (ms * 1e-3) / 1e9; // read + write
    return 0;
}

struct mm_ctx {
    cublasHandle_t h;
    void *a, *b, *c;
    int n;
};

static int do_mm(void *p, err *e) {
    mm_ctx *m = (mm_ctx *)p;
    const float one = 1.0f, zero = 0.0f;
    if (cublasGemmEx(m->h, CUBLAS_OP_N, CUBLAS_OP_N, m->n, m->n, m->n, &one, m->a, CUDA_R_16BF,
                     m->n, m->b, CUDA_R_16BF, m->n, &zero, m->c, CUDA_R_16BF, m->n,
                     CUBLAS_COMPUTE_32F, CUBLAS_GEMM_DEFAULT) != CUBLAS_STATUS_SUCCESS)
        return err_set(e, "gpu matrix rate: cuBLAS failed");
    return 0;
}

extern "C" int gpu_measure_matmul_tflops(double *tflops, err *e) {
    mm_ctx m = {NULL, NULL, NULL, NULL, 8192};
    size_t bytes = (size_t)m.n * m.n * 2;
    if (cublasCreate(&m.h) != CUBLAS_STATUS_SUCCESS)
        return err_set(e, "gpu matrix rate: no cuBLAS");
    int rc = -1;
    if (cudaMalloc(&m.a, bytes) == cudaSuccess && cudaMalloc(&m.b, bytes) == cudaSuccess &&
        cudaMalloc(&m.c, bytes) == cudaSuccess &&
        gpu_fill_uniform(m.a, (size_t)m.n * m.n, 1, 1.0f, 0.0f, 7, e) == 0 &&
        gpu_fill_uniform(m.b, (size_t)m.n * m.n, 1, 1.0f, 0.0f, 8, e) == 0) {
        double ms;
        if (gpu_time_median(do_mm, &m, 3, 10, &ms, e) == 0) {
            *tflops = 2.0 * m.n * (double)m.n * m.n / (ms * 1e-3) / 1e12;
            rc = 0;
        }
    } else if (!e->msg[0]) {
        err_set(e, "gpu matrix rate: out of memory");
    }
    cudaFree(m.a), cudaFree(m.b), cudaFree(m.c);
    cublasDestroy(m.h);
    return rc;
}

// Nothing: a graph of it replayed back to back is the floor of any one-kernel step's replay.
__global__ void empty_kernel() {}

extern "C" int gpu_bench_empty(void *stream, err *e) {
    empty_kernel<<<1, 32, 0, (cudaStream_t)stream>>>();
    CUDA_LAUNCHED("gpu bench: empty kernel");
    return 0;
}
