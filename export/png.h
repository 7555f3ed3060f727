/* png.h: a canvas as PNG, with provenance in text chunks.
 *
 * stb_image_write encodes the pixels into memory; tEXt chunks (iTXt when a value is not plain
 * ASCII) are then inserted right after IHDR, so any PNG reader shows them (`exiftool`, `identify
 * -verbose`, Python's PIL .text). Files are written atomically (core/fileio.h). */
#ifndef MIXSCOPE_PNG_H
#define MIXSCOPE_PNG_H

#include <stddef.h>

#include "../core/err.h"
#include "../viz/canvas.h"

typedef struct png_text {
    const char *key;   /* 1..79 printable Latin-1 characters, e.g. "Command" */
    const char *value; /* UTF-8 */
} png_text;

/* Encodes the canvas with its text chunks into a malloc'd buffer (*out, *size). */
int png_encode(canvas *c, const png_text *text, int ntext, unsigned char **out, size_t *size,
               err *e);
/* Encodes and writes atomically; an unwritable path names the path and the reason. */
int png_write(const char *path, canvas *c, const png_text *text, int ntext, err *e);
/* The value of text chunk `key` in an encoded PNG, copied into val (NUL-terminated). Returns 0,
 * or -1 when there is no such chunk. For tests and tools. */
int png_find_text(const unsigned char *png, size_t size, const char *key, char *val, size_t n);

#endif
