/* safetensors.h: strict reader and atomic writer for the safetensors format.
 *
 * File layout (https://github.com/huggingface/safetensors):
 *   bytes 0..7     u64 little-endian N, the header length
 *   bytes 8..8+N   UTF-8 JSON object: { "__metadata__": {str: str}?,
 *                    NAME: {"dtype": "F32", "shape": [d0, ...], "data_offsets": [begin, end]}, ...
 * } (writers pad it with spaces to a multiple of 8) bytes 8+N..    the data region; offsets are
 * relative to its start
 *
 * The reader maps the file read-only and returns tensors that view the mapping. It rejects, naming
 * the file and the tensor: a header length beyond the file or above 100 MB, invalid JSON, duplicate
 * keys, unknown dtypes, non-integer or negative offsets, byte sizes that disagree with the shape
 * (products are overflow-checked), overlapping or gapped data regions, trailing bytes and truncated
 * files. Sharded checkpoints are opened through their `model.safetensors.index.json`. */
#ifndef MIXSCOPE_SAFETENSORS_H
#define MIXSCOPE_SAFETENSORS_H

#include "err.h"
#include "tensor.h"

#define SAFETENSORS_MAX_HEADER (100u * 1000u * 1000u)

typedef struct st_map {
    void *addr; /* mmap'd or malloc'd file contents */
    size_t size;
    int is_mmap;
} st_map;

typedef struct st_file {
    char *path; /* the file (or index) it was opened from */
    int nmaps;
    st_map *maps;
    int n;           /* tensors, in file order (shards concatenated) */
    tensor *tensors; /* views into the maps; owns_data = 0 */
    char *metadata;  /* "__metadata__" as compact JSON, or NULL */
    int *order;      /* tensor indices sorted by name (st_find's binary search), or NULL */
} st_file;

/* Opens one .safetensors file. */
int st_open(st_file **out, const char *path, err *e);
/* Parses a whole file already in memory (used by the fuzz target; copies the bytes). */
int st_open_memory(st_file **out, const void *data, size_t size, const char *label, err *e);
/* Opens a sharded checkpoint from its index json ("weight_map": {tensor: shard file}). Every shard
 * is opened strictly; tensors listed in the index must be in the shard it names. */
int st_open_index(st_file **out, const char *index_path, err *e);
void st_close(st_file *f);

/* The tensor named `name`, or NULL. */
const tensor *st_find(const st_file *f, const char *name);

/* Writes tensors (any dtypes) and optional metadata (a JSON object of strings; may be NULL) to a
 * temporary file beside `path`, then renames it over `path`: a crash leaves either the old file or
 * the new one, never half a file. The header is padded with spaces to a multiple of 8. */
int st_write(const char *path, const tensor *const *ts, int n, const char *metadata_json, err *e);
/* The same into a temporary file left uncommitted in *af (atomic_commit puts it in place,
 * atomic_abort removes it): for writes of several files that must land together. */
struct atomic_file;
int st_write_uncommitted(struct atomic_file *af, const char *path, const tensor *const *ts, int n,
                         const char *metadata_json, err *e);

#endif
