/* json_strict.h: RFC 8259 JSON, strictly, before cJSON reads it (cJSON accepts raw control
 * characters and NUL bytes in strings, invalid UTF-8, leading zeros, a byte-order mark and keys
 * twice; Python's json and the safetensors library do not, and a NUL cut names short:
 * "model.norm.weight\u0000junk" loaded as "model.norm.weight").
 *
 * Checks: one value and whitespace only around it (nothing after, no BOM); strings with no byte
 * below 0x20, valid escapes (\u with paired surrogates; \u0000 refused: names and keys are C
 * strings here), valid UTF-8 (no overlongs, no surrogates, nothing above U+10FFFF); numbers as
 * the grammar says (no leading zeros, no '+', digits after '.' and 'e'); literals; nesting at most
 * 512 deep; no key twice in one object (compared as written, escapes not decoded). */
#ifndef MIXSCOPE_JSON_STRICT_H
#define MIXSCOPE_JSON_STRICT_H

#include <stddef.h>

/* 0 when text[0..n) is strict JSON; else -1 with the byte offset of the fault in *at and a few
 * words in why. */
int json_strict_check(const char *text, size_t n, size_t *at, char *why, size_t why_n);

#endif
