/* gpu.c: the GPU-resident model stepper under `device gpu` (models/model_gpu.h). */
#include "internal.h"

int engine_gpu_usable(engine *g) {
    (void)g;
    return 0;
}

int engine_gpu_advance(engine *g, int n, err *e) {
    (void)g, (void)n;
    return err_set(e, "gpu stepping is not available");
}

void engine_gpu_drop(engine *g) {
    (void)g;
}

int engine_sync_model(engine *g, err *e) {
    (void)g, (void)e;
    return 0;
}
