/* gpu_none.c: the GPU backend of a build without CUDA (make CUDA=0). Every entry answers that
 * there is no GPU, so `device gpu` falls back to the CPU with a clear message. */
#include "gpu.h"

int gpu_available(char *why, size_t n) {
    if (why && n) snprintf(why, n, "this build has no CUDA support (built with CUDA=0)");
    return 0;
}
