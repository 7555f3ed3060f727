/* hf.h: tokenizers in Hugging Face's tokenizer.json format, as flash-linear-attention models ship
 * them beside their weights.
 *
 * Encoding follows the reference library (huggingface/tokenizers) step by step:
 *   1. added tokens ("<s>", "<|begin_of_text|>", ...) are cut out of the raw text first, longest
 *      match leftmost (lstrip / rstrip take the whitespace beside them);
 *   2. each other piece goes through the normalizer: Sequence, Prepend, Replace (string or
 *      regex), Strip, NFC / NFKC are refused in words;
 *   3. the pre-tokenizer splits it: Sequence, ByteLevel (the GPT-2 regex; bytes mapped to
 *      printable characters), Split (string or regex; Isolated, Removed, MergedWithPrevious,
 *      MergedWithNext, Contiguous; invert), Metaspace, Digits, Whitespace, WhitespaceSplit;
 *   4. the BPE model merges each piece by rank (a heap over adjacent pairs, lowest rank then
 *      leftmost, as the library), with ignore_merges, byte_fallback (<0xXX> tokens) and unk /
 *      fuse_unk;
 *   5. with special tokens the post-processor adds its template: TemplateProcessing,
 *      RobertaProcessing / BertProcessing, ByteLevel (nothing), Sequence.
 * Decoding runs the decoder over the tokens' strings: ByteLevel, Replace, ByteFallback, Fuse,
 * Strip, Metaspace, Sequence. Regular expressions are PCRE2 with Unicode properties (\p{L},
 * \p{N}), the GPT-2 and Llama-3 patterns included.
 *
 * Anything else in a tokenizer.json (another model type, a normalizer this lab does not know) is
 * refused with a message naming it; nothing is guessed. Tested against the library's own ids for
 * 313 strings on three tokenizers (tests/test_tokenizer.c, tools/tokenizer_refs.py). */
#ifndef MIXSCOPE_HF_TOKENIZER_H
#define MIXSCOPE_HF_TOKENIZER_H

#include <stddef.h>
#include <stdint.h>

#include "../core/err.h"

typedef struct hf_tok hf_tok;

/* Reads tokenizer.json from PATH (a file, or a folder holding tokenizer.json). */
int hf_load(hf_tok **out, const char *path, err *e);
/* The same from the text of a tokenizer.json (label names it in messages). */
int hf_load_text(hf_tok **out, const char *text, size_t n, const char *label, err *e);
void hf_free(hf_tok *t);
/* Ids run 0..hf_vocab_size - 1 (the model's vocabulary and the added tokens). */
int hf_vocab_size(const hf_tok *t);
/* Where it was read from. */
const char *hf_path(const hf_tok *t);
/* text[0..n) into *ids (malloc'd, *nids of them); special: add the post-processor's tokens. Text
 * that is not valid UTF-8 is taken in its lossy form (each maximal invalid sequence one U+FFFD). */
int hf_encode(const hf_tok *t, const char *text, size_t n, int special, int32_t **ids, int *nids,
              err *e);
/* ids back to text (malloc'd, NUL-terminated), as the library's decode with special tokens kept. */
char *hf_decode(const hf_tok *t, const int32_t *ids, int n, err *e);
/* The token's string as in the vocabulary, or NULL for an id outside it. */
const char *hf_token(const hf_tok *t, int32_t id);
/* One token as short printable text for tables ("'Hello'", "' world'", "'<s>'"). */
const char *hf_show(const hf_tok *t, int32_t id, char *buf, size_t n);

#endif
