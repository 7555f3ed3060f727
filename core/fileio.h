/* fileio.h: whole-file reads and atomic writes.
 *
 * Every export goes through atomic_open/atomic_commit: the bytes go to a temporary file in the
 * destination's folder, which is flushed and renamed over the destination only when complete, so a
 * reader never sees half a file and a failed export leaves the old file untouched. */
#ifndef MIXSCOPE_FILEIO_H
#define MIXSCOPE_FILEIO_H

#include <stddef.h>
#include <stdio.h>

#include "err.h"

typedef struct atomic_file {
    FILE *fp;
    char *tmp_path;
    char *path;
} atomic_file;

/* Opens a temporary file beside `path` for writing. */
int atomic_open(atomic_file *af, const char *path, err *e);
/* Flushes, fsyncs and renames onto the destination; on any failure removes the temporary file. */
int atomic_commit(atomic_file *af, err *e);
/* Removes the temporary file without touching the destination. */
void atomic_abort(atomic_file *af);

/* Writes `size` bytes to `path` atomically. */
int file_write_atomic(const char *path, const void *data, size_t size, err *e);

/* fopen(path, "rb") for regular files only: a FIFO, device or folder is refused with a message
 * naming what it is (and a FIFO never blocks). NULL with e set on failure. */
#include <stdio.h>
FILE *file_open_regular(const char *path, err *e);

/* Reads a whole file into a NUL-terminated malloc'd buffer (at most max_size bytes); only regular
 * files (file_open_regular). */
int file_read_all(const char *path, size_t max_size, char **out, size_t *size, err *e);

/* mkdir -p: every missing folder of path (at most 4095 bytes), 0777 before the umask. */
int path_make_dirs(const char *path, err *e);

/* Joins a folder and a name with one '/', into a malloc'd string. */
char *path_join(const char *dir, const char *name);
/* The file `name` in the folder that holds path (malloc'd; "." when path has no '/'). */
char *path_sibling(const char *path, const char *name);
/* 1 if path is an existing folder. */
int path_is_dir(const char *path);

#endif
