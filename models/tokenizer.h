/* tokenizer.h: token ids for models. Byte-level text (vocabulary 256: one token per byte of the
 * UTF-8 text, as the reference checkpoints use) and token ids read from a safetensors file.
 * Task generators (scenes/) make their own ids and hand them over with their vocabulary size. */
#ifndef MIXSCOPE_TOKENIZER_H
#define MIXSCOPE_TOKENIZER_H

#include <stddef.h>
#include <stdint.h>

#include "../core/err.h"

#define TOK_BYTE_VOCAB 256

/* Text -> byte ids; ids has room for strlen(text). Returns the count. */
int tok_bytes_encode(const char *text, int32_t *ids);
/* A token id as short printable text: 'a', '\n', '\xff', or <id> beyond the byte range. */
const char *tok_show(int32_t id, char *buf, size_t n);
/* Byte-level text needs a model whose vocabulary is the 256 bytes; NULL-safe on vocab <= 0
 * (no model yet). One line naming the vocabulary when it cannot be served. */
int tok_bytes_servable(int vocab, err *e);
/* Every id in [0, vocab). */
int tok_check(const int32_t *ids, int n, int vocab, err *e);
/* Reads an integer tensor `name` of shape [1, T] or [T] from a safetensors file. *ids is
 * malloc'd. */
int tok_read_file(const char *path, const char *name, int32_t **ids, int *n, err *e);

#endif
