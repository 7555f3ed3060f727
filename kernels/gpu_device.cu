// gpu_device.cu: finding the device. Every CUDA call is checked and turned into a message.
#include <cuda_runtime.h>

#include "gpu.h"

extern "C" int gpu_available(char *why, size_t n) {
    int count = 0;
    cudaError_t rc = cudaGetDeviceCount(&count);
    if (rc != cudaSuccess) {
        if (why && n) snprintf(why, n, "no usable GPU: %s", cudaGetErrorString(rc));
        cudaGetLastError(); // clear the sticky error so later queries start clean
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
    if (why && n) snprintf(why, n, "%s (sm_%d%d, %.0f GiB)", p.name, p.major, p.minor,
                           p.totalGlobalMem / 1073741824.0);
    return 1;
}
