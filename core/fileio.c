#include "fileio.h"

#include <fcntl.h>

#include <errno.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

char *path_join(const char *dir, const char *name) {
    size_t a = strlen(dir), b = strlen(name);
    char *s = malloc(a + b + 2);
    if (!s) return NULL;
    memcpy(s, dir, a);
    size_t off = a;
    if (a && dir[a - 1] != '/') s[off++] = '/';
    memcpy(s + off, name, b + 1);
    return s;
}

char *path_sibling(const char *path, const char *name) {
    const char *slash = strrchr(path, '/');
    if (!slash) return path_join(".", name);
    size_t d = (size_t)(slash - path);
    char *dir = malloc(d + 1);
    if (!dir) return NULL;
    memcpy(dir, path, d);
    dir[d] = 0;
    char *s = path_join(dir, name);
    free(dir);
    return s;
}

int path_is_dir(const char *path) {
    struct stat st;
    return stat(path, &st) == 0 && S_ISDIR(st.st_mode);
}

int atomic_open(atomic_file *af, const char *path, err *e) {
    memset(af, 0, sizeof *af);
    if (path_is_dir(path)) return err_set(e, "%s: is a folder", path);
    size_t n = strlen(path);
    af->tmp_path = malloc(n + 16);
    af->path = strdup(path);
    if (!af->tmp_path || !af->path) {
        free(af->tmp_path), free(af->path);
        return err_set(e, "%s: out of memory", path);
    }
    snprintf(af->tmp_path, n + 16, "%s.tmp.XXXXXX", path);
    int fd = mkstemp(af->tmp_path);
    if (fd < 0) {
        int en = errno;
        free(af->tmp_path), free(af->path);
        af->tmp_path = af->path = NULL;
        return err_set(e, "%s: cannot write: %s", path, strerror(en));
    }
    fchmod(fd, 0644);
    af->fp = fdopen(fd, "wb");
    if (!af->fp) {
        close(fd);
        unlink(af->tmp_path);
        free(af->tmp_path), free(af->path);
        af->tmp_path = af->path = NULL;
        return err_set(e, "%s: cannot write", path);
    }
    return 0;
}

void atomic_abort(atomic_file *af) {
    if (af->fp) fclose(af->fp);
    if (af->tmp_path) unlink(af->tmp_path);
    free(af->tmp_path);
    free(af->path);
    memset(af, 0, sizeof *af);
}

int atomic_commit(atomic_file *af, err *e) {
    int bad = ferror(af->fp) || fflush(af->fp) != 0 || fsync(fileno(af->fp)) != 0;
    int en = errno;
    if (fclose(af->fp) != 0 && !bad) bad = 1, en = errno;
    af->fp = NULL;
    if (!bad && rename(af->tmp_path, af->path) != 0) bad = 1, en = errno;
    if (bad) {
        err_set(e, "%s: write failed: %s", af->path, strerror(en));
        atomic_abort(af);
        return -1;
    }
    free(af->tmp_path);
    free(af->path);
    memset(af, 0, sizeof *af);
    return 0;
}

int file_write_atomic(const char *path, const void *data, size_t size, err *e) {
    atomic_file af;
    if (atomic_open(&af, path, e)) return -1;
    if (size && fwrite(data, 1, size, af.fp) != size) {
        atomic_abort(&af);
        return err_set(e, "%s: write failed", path);
    }
    return atomic_commit(&af, e);
}

/* Opens path for reading only when it is a regular file: a FIFO, a device or a folder is refused
 * in words (opened without blocking, so a FIFO with no writer cannot hang the session). */
FILE *file_open_regular(const char *path, err *e) {
    int fd = open(path, O_RDONLY | O_NONBLOCK | O_CLOEXEC);
    if (fd < 0) {
        err_set(e, "%s: %s", path, strerror(errno));
        return NULL;
    }
    struct stat st;
    if (fstat(fd, &st) != 0) {
        err_set(e, "%s: %s", path, strerror(errno));
        close(fd);
        return NULL;
    }
    if (!S_ISREG(st.st_mode)) {
        err_set(e, "%s: not a regular file (%s)", path,
                S_ISDIR(st.st_mode)    ? "a folder"
                : S_ISFIFO(st.st_mode) ? "a FIFO"
                : S_ISCHR(st.st_mode)  ? "a character device"
                : S_ISBLK(st.st_mode)  ? "a block device"
                : S_ISSOCK(st.st_mode) ? "a socket"
                                       : "not a file");
        close(fd);
        return NULL;
    }
    int fl = fcntl(fd, F_GETFL);
    if (fl >= 0) fcntl(fd, F_SETFL, fl & ~O_NONBLOCK);
    FILE *fp = fdopen(fd, "rb");
    if (!fp) {
        err_set(e, "%s: %s", path, strerror(errno));
        close(fd);
    }
    return fp;
}

int file_read_all(const char *path, size_t max_size, char **out, size_t *size, err *e) {
    FILE *fp = file_open_regular(path, e);
    if (!fp) return -1;
    size_t cap = 4096, n = 0;
    char *buf = malloc(cap);
    if (!buf) {
        fclose(fp);
        return err_set(e, "%s: out of memory", path);
    }
    for (;;) {
        if (n + 1 >= cap) {
            if (cap > max_size) {
                free(buf);
                fclose(fp);
                return err_set(e, "%s: larger than %zu bytes", path, max_size);
            }
            char *nb = realloc(buf, cap * 2);
            if (!nb) {
                free(buf);
                fclose(fp);
                return err_set(e, "%s: out of memory", path);
            }
            buf = nb, cap *= 2;
        }
        size_t r = fread(buf + n, 1, cap - n - 1, fp);
        n += r;
        if (r == 0) break;
    }
    int bad = ferror(fp);
    fclose(fp);
    if (bad) {
        free(buf);
        return err_set(e, "%s: read error", path);
    }
    if (n > max_size) {
        free(buf);
        return err_set(e, "%s: larger than %zu bytes", path, max_size);
    }
    buf[n] = '\0';
    *out = buf;
    if (size) *size = n;
    return 0;
}
