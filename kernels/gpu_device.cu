// gpu_device.cu: finding the device, and checked memory helpers. Every CUDA call is checked and
// turned into a message.
#include <cuda_runtime.h>

#include "gpu.h"
#include "gpu_common.cuh"

extern "C" int gpu_available(char *why, size_t n) {
    int count = 0;
    cudaError_t rc = cudaGetDeviceCount(&count);
    if (rc != cudaSuccess) {
        /* the common causes in words; CUDA's own text for the rest */
        const char *words =
            rc == cudaErrorInsufficientDriver
                ? "no NVIDIA driver (or one older than this build's CUDA) on this machine"
            : rc == cudaErrorNoDevice ? "no NVIDIA GPU on this machine"
            : rc == cudaErrorInitializationError
                ? "the NVIDIA driver did not start (is the GPU visible here?)"
                : NULL;
        if (why && n) {
            if (words)
                snprintf(why, n, "%s", words);
            else
                snprintf(why, n, "no usable GPU: %s", cudaGetErrorString(rc));
        }
        cudaGetLastError(); // clear the error so later queries start clean
        return 0;
    }
    if (count == 0) {
        if (why && n) snprintf(why, n, "no GPU found");
        return 0;
    }
    cudaDeviceProp p;
    if (cudaGetDeviceProperties(&p, 0) != cudaSuccess) {
        if (why && n) snprintf(why, n, "cannot query GPU 0");
        return 0;
    }
    if (why && n)
        snprintf(why, n, "%s (sm_%d%d, %.0f GiB)", p.name, p.major, p.minor,
                 p.totalGlobalMem / 1073741824.0);
    return 1;
}

extern "C" void *gpu_malloc(size_t bytes, err *e) {
    void *p = NULL;
    cudaError_t rc = cudaMalloc(&p, bytes ? bytes : 1);
    if (rc != cudaSuccess) {
        err_set(e, "gpu: cannot allocate %zu bytes: %s", bytes, cudaGetErrorString(rc));
        return NULL;
    }
    return p;
}

extern "C" void gpu_free(void *p) {
    if (p) cudaFree(p);
}

extern "C" int gpu_copy_to_device(void *dst, const void *src, size_t bytes, err *e) {
    CUDA_TRY(cudaMemcpy(dst, src, bytes, cudaMemcpyHostToDevice), "gpu: copy to device");
    return 0;
}

extern "C" int gpu_copy_to_host(void *dst, const void *src, size_t bytes, err *e) {
    CUDA_TRY(cudaMemcpy(dst, src, bytes, cudaMemcpyDeviceToHost), "gpu: copy to host");
    return 0;
}

extern "C" int gpu_sync(err *e) {
    CUDA_TRY(cudaDeviceSynchronize(), "gpu");
    return 0;
}
