/* fuzz_tokenizer.c: libFuzzer target for tokenizer.json (tokenizer/hf.h).
 *
 * Input layout: the text of a tokenizer.json, one NUL byte, then a text to encode. A file that is
 * refused must be refused with a message and no tokenizer; one that loads encodes the text (with
 * and without special tokens) and decodes the ids, and every id it gives lies in its vocabulary.
 *
 *   make fuzz && build/fuzz/fuzz_tokenizer fuzz/seeds/fuzz_tokenizer */
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "tokenizer/hf.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
    const uint8_t *nul = memchr(data, 0, size);
    size_t jl = nul ? (size_t)(nul - data) : size;
    hf_tok *t = NULL;
    err e = {{0}};
    if (hf_load_text(&t, (const char *)data, jl, "fuzz", &e)) {
        if (t || !e.msg[0]) abort();
        return 0;
    }
    const char *text = nul ? (const char *)nul + 1 : "hello <s> world 123 \xF0\x9F\x98\x80";
    size_t tl = nul ? size - jl - 1 : strlen(text);
    for (int sp = 0; sp < 2; sp++) {
        int32_t *ids = NULL;
        int n = 0;
        if (hf_encode(t, text, tl, sp, &ids, &n, &e)) abort();
        for (int i = 0; i < n; i++)
            if (ids[i] < 0 || ids[i] >= hf_vocab_size(t)) abort();
        char *d = hf_decode(t, ids, n, &e);
        free(d), free(ids);
    }
    hf_free(t);
    return 0;
}
