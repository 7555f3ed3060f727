/* fuzz_safetensors.c: libFuzzer target for the strict safetensors reader.
 *
 * Feeds the bytes to st_open_memory. When they parse, every tensor is looked up by name and every
 * value is read through tensor_read_f32 and tensor_read_i64, so a header that claims more data
 * than the file holds, or a shape that disagrees with the byte count, shows up as an out-of-bounds
 * read under AddressSanitizer. A parse must also succeed or fail with a message.
 *
 *   make fuzz && build/fuzz/fuzz_safetensors fuzz/seeds/fuzz_safetensors */
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "core/safetensors.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
    st_file *f = NULL;
    err e = {{0}};
    if (st_open_memory(&f, data, size, "fuzz", &e)) {
        if (f || e.msg[0] == '\0') abort(); /* a refusal returns no file and says why */
        return 0;
    }
    size_t total = 0;
    for (int i = 0; i < f->n; i++) {
        const tensor *t = &f->tensors[i];
        if (st_find(f, t->name) != t) abort(); /* names are unique */
        int64_t n = tensor_numel(t);
        if (n < 0 || (size_t)n * dtype_size(t->dtype) != t->nbytes) abort();
        total += t->nbytes;
        float *v = malloc((size_t)(n ? n : 1) * sizeof *v);
        int64_t *w = malloc((size_t)(n ? n : 1) * sizeof *w);
        if (v && w) {
            tensor_read_f32(t, v);
            tensor_read_i64(t, w);
        }
        free(v);
        free(w);
    }
    if (total > size) abort(); /* tensors tile the data region, which lies inside the input */
    st_close(f);
    return 0;
}
