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

/* What kind of thing is at a path, in words. */
static const char *kind_of(mode_t m) {
    return S_ISDIR(m)    ? "a folder"
           : S_ISFIFO(m) ? "a FIFO"
           : S_ISCHR(m)  ? "a character device"
           : S_ISBLK(m)  ? "a block device"
           : S_ISSOCK(m) ? "a socket"
                         : "not a regular file";
}

/* The file a write to `path` must replace: path itself, or the target of a symlink (followed,
 * also when the target does not exist yet). malloc'd. */
static char *write_target(const char *path) {
    struct stat ls;
    if (lstat(path, &ls) != 0 || !S_ISLNK(ls.st_mode)) return strdup(path);
    char *real = realpath(path, NULL);
    if (real) return real;
    char link[4096];
    ssize_t n = readlink(path, link, sizeof link - 1);
    if (n <= 0) return strdup(path);
    link[n] = '\0';
    if (link[0] == '/') return strdup(link);
    const char *slash = strrchr(path, '/');
    size_t dl = slash ? (size_t)(slash - path) + 1 : 0;
    char *out = malloc(dl + (size_t)n + 1);
    if (out) memcpy(out, path, dl), memcpy(out + dl, link, (size_t)n + 1);
    return out;
}

int atomic_open(atomic_file *af, const char *path, err *e) {
    memset(af, 0, sizeof *af);
    char *dest = write_target(path);
    if (!dest) return err_set(e, "%s: out of memory", path);
    /* only a regular file is replaced: a device, FIFO or folder at the path is refused (renaming
     * over /dev/full would put a plain file in its place); a file there keeps its mode and, where
     * the user may, its owner */
    struct stat st;
    int exists = stat(dest, &st) == 0;
    if (exists && !S_ISREG(st.st_mode)) {
        err_set(e, "%s: %s, not replaced", path, kind_of(st.st_mode));
        free(dest);
        return -1;
    }
    /* the temporary file beside it, under a short name (a long file name stays writable) */
    const char *slash = strrchr(dest, '/');
    size_t dl = slash ? (size_t)(slash - dest) + 1 : 0;
    af->tmp_path = malloc(dl + 32);
    af->path = dest;
    if (!af->tmp_path) {
        free(af->path);
        af->path = NULL;
        return err_set(e, "%s: out of memory", path);
    }
    memcpy(af->tmp_path, dest, dl);
    snprintf(af->tmp_path + dl, 32, ".mixscope-tmp-XXXXXX");
    int fd = mkstemp(af->tmp_path);
    if (fd < 0) {
        int en = errno;
        free(af->tmp_path), free(af->path);
        af->tmp_path = af->path = NULL;
        return err_set(e, "%s: cannot write: %s", path, strerror(en));
    }
    if (exists) {
        fchmod(fd, st.st_mode & 07777);
        if (fchown(fd, st.st_uid, st.st_gid) != 0) { /* not ours to give away: keep ours */
        }
    } else {
        mode_t um = umask(0);
        umask(um);
        fchmod(fd, 0666 & ~um);
    }
    af->fp = fdopen(fd, "wb");
    if (!af->fp) {
        int en = errno;
        close(fd);
        unlink(af->tmp_path);
        free(af->tmp_path), free(af->path);
        af->tmp_path = af->path = NULL;
        return err_set(e, "%s: cannot write: %s", path, strerror(en));
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
        int en = errno;
        atomic_abort(&af);
        return err_set(e, "%s: write failed: %s", path, strerror(en ? en : EIO));
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

int path_make_dirs(const char *path, err *e) {
    char buf[4096];
    if (snprintf(buf, sizeof buf, "%s", path) >= (int)sizeof buf)
        return err_set(e, "path too long: %.60s...", path);
    for (char *p = buf + 1;; p++) {
        if (*p == '/' || *p == '\0') {
            char c = *p;
            *p = '\0';
            if (mkdir(buf, 0777) != 0 && errno != EEXIST)
                return err_set(e, "cannot create folder '%s': %s", buf, strerror(errno));
            *p = c;
            if (!c) break;
        }
    }
    return 0;
}
