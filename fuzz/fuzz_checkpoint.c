/* fuzz_checkpoint.c: libFuzzer target for loading a model checkpoint.
 *
 * Input layout: config.json text, one NUL byte, then the bytes of model.safetensors. The pair goes
 * through the same path as `load DIR` (config parse, tensor-by-tensor checks against the slot
 * list, float conversion, finite check, cores configured); whatever is refused must be refused
 * with a message and no model. A model that loads is stepped over a few tokens and run as a short
 * prefill (both must succeed; with adversarial weights their numbers need not agree): that walks
 * every projection, cache and core with the fuzzed shapes under AddressSanitizer.
 *
 *   make fuzz && build/fuzz/fuzz_checkpoint fuzz/seeds/fuzz_checkpoint */
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "core/safetensors.h"
#include "models/model.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
    const uint8_t *nul = memchr(data, 0, size);
    if (!nul) return 0;
    size_t clen = (size_t)(nul - data);
    char *cfg = malloc(clen + 1);
    if (!cfg) return 0;
    memcpy(cfg, data, clen);
    cfg[clen] = '\0';
    st_file *f = NULL;
    err e = {{0}};
    if (st_open_memory(&f, nul + 1, size - clen - 1, "model.safetensors", &e)) {
        free(cfg);
        return 0;
    }
    model *m = NULL;
    if (model_from_checkpoint(&m, cfg, f, "config.json", &e)) {
        if (m || e.msg[0] == '\0') abort(); /* a refusal returns no model and says why */
    } else {
        enum { T = 5 };
        int V = m->c.vocab;
        int32_t ids[T];
        for (int t = 0; t < T; t++) ids[t] = (int32_t)((t * 7 + 1) % V);
        float *a = malloc((size_t)T * V * sizeof *a), *b = malloc((size_t)T * V * sizeof *b);
        if (a && b) {
            if (model_reset(m, 64, &e)) abort();
            for (int t = 0; t < T; t++)
                if (model_step(m, ids[t], a + (size_t)t * V, NULL, &e)) abort();
            if (model_reset(m, 0, &e) || model_prefill(m, ids, T, b, &e)) abort();
        }
        free(a), free(b);
        model_free(m);
    }
    st_close(f);
    free(cfg);
    return 0;
}
