#include "safetensors.h"

#include "json_strict.h"

#include <cjson/cJSON.h>
#include <errno.h>
#include <fcntl.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <unistd.h>

#include "fileio.h"

/* One tensor's header entry while the header is checked. */
typedef struct entry {
    const char *name;
    dtype dt;
    int ndim;
    int64_t shape[TENSOR_MAX_DIMS];
    uint64_t begin, end;
} entry;

static int cmp_name(const void *a, const void *b) {
    return strcmp(*(const char *const *)a, *(const char *const *)b);
}

static int cmp_begin(const void *a, const void *b) {
    const entry *x = a, *y = b;
    if (x->begin != y->begin) return x->begin < y->begin ? -1 : 1;
    return x->end < y->end ? -1 : x->end > y->end;
}

/* A JSON number that is a non-negative integer exactly representable in a double. */
static int json_uint(const cJSON *j, uint64_t *out) {
    if (!cJSON_IsNumber(j)) return -1;
    double d = j->valuedouble;
    if (!isfinite(d) || d < 0 || d != floor(d) || d > 9007199254740992.0) return -1;
    *out = (uint64_t)d;
    return 0;
}

static int parse_entry(const cJSON *j, entry *en, err *e) {
    if (!cJSON_IsObject(j)) return err_set(e, "tensor '%s': entry is not an object", en->name);
    const cJSON *jd = cJSON_GetObjectItemCaseSensitive(j, "dtype");
    const cJSON *js = cJSON_GetObjectItemCaseSensitive(j, "shape");
    const cJSON *jo = cJSON_GetObjectItemCaseSensitive(j, "data_offsets");
    if (!cJSON_IsString(jd)) return err_set(e, "tensor '%s': missing dtype", en->name);
    if (dtype_parse(jd->valuestring, &en->dt))
        return err_set(e, "tensor '%s': unknown dtype '%.32s'", en->name, jd->valuestring);
    if (!cJSON_IsArray(js)) return err_set(e, "tensor '%s': missing shape", en->name);
    int nd = cJSON_GetArraySize(js);
    if (nd > TENSOR_MAX_DIMS)
        return err_set(e, "tensor '%s': %d dims, at most %d supported", en->name, nd,
                       TENSOR_MAX_DIMS);
    en->ndim = nd;
    int i = 0;
    for (const cJSON *d = js->child; d; d = d->next, i++) {
        uint64_t v;
        if (json_uint(d, &v) || v > (uint64_t)INT64_MAX)
            return err_set(e, "tensor '%s': shape entry %d is not a non-negative integer", en->name,
                           i);
        en->shape[i] = (int64_t)v;
    }
    if (!cJSON_IsArray(jo) || cJSON_GetArraySize(jo) != 2)
        return err_set(e, "tensor '%s': data_offsets must be [begin, end]", en->name);
    if (json_uint(jo->child, &en->begin) || json_uint(jo->child->next, &en->end))
        return err_set(e, "tensor '%s': data_offsets must be non-negative integers", en->name);
    if (en->end < en->begin)
        return err_set(e, "tensor '%s': data_offsets end %llu before begin %llu", en->name,
                       (unsigned long long)en->end, (unsigned long long)en->begin);
    int64_t numel = shape_numel_checked(nd, en->shape, dtype_size(en->dt));
    char sb[160];
    if (numel < 0)
        return err_set(e, "tensor '%s': shape %s overflows", en->name,
                       shape_str(nd, en->shape, sb, sizeof sb));
    uint64_t want = (uint64_t)numel * dtype_size(en->dt);
    if (want != en->end - en->begin)
        return err_set(e, "tensor '%s': %llu bytes but shape %s of %s needs %llu", en->name,
                       (unsigned long long)(en->end - en->begin),
                       shape_str(nd, en->shape, sb, sizeof sb), dtype_name(en->dt),
                       (unsigned long long)want);
    return 0;
}

/* Parses and checks the header of map `m`, appending its tensors to f. */
static int parse_map(st_file *f, const st_map *m, err *e) {
    const unsigned char *p = m->addr;
    if (m->size < 8) return err_set(e, "truncated: %zu bytes, no header length", m->size);
    uint64_t hlen = 0;
    for (int i = 7; i >= 0; i--) hlen = (hlen << 8) | p[i];
    if (hlen > SAFETENSORS_MAX_HEADER)
        return err_set(e, "header length %llu above the 100 MB limit", (unsigned long long)hlen);
    if (hlen > m->size - 8)
        return err_set(e, "header length %llu beyond the file (%zu bytes)",
                       (unsigned long long)hlen, m->size);
    const char *hdr = (const char *)p + 8;
    const char *end = NULL;
    /* strict RFC 8259 first: cJSON takes NUL bytes, raw control characters, invalid UTF-8 and
     * leading zeros that the reference safetensors library refuses */
    size_t bad_at;
    char why[96];
    if (json_strict_check(hdr, (size_t)hlen, &bad_at, why, sizeof why) &&
        strcmp(why, "a key twice in one object")) { /* that one: named below */
        if (!strcmp(why, "something after the value") || !strcmp(why, "a NUL byte"))
            return err_set(e, "invalid JSON in header: junk after the object at byte %ld (%s)",
                           (long)bad_at + 8, why);
        return err_set(e, "invalid JSON in header near byte %ld: %s", (long)bad_at + 8, why);
    }
    cJSON *root = cJSON_ParseWithLengthOpts(hdr, (size_t)hlen, &end, 0);
    if (!root) {
        const char *at = cJSON_GetErrorPtr();
        long off = at && at >= hdr && at <= hdr + hlen ? (long)(at - hdr) : -1;
        return err_set(e, "invalid JSON in header near byte %ld", off + 8);
    }
    for (const char *c = end; c < hdr + hlen; c++)
        if (*c != ' ' && *c != '\n' && *c != '\t' && *c != '\r' && *c != '\0') {
            cJSON_Delete(root);
            return err_set(e, "invalid JSON in header: junk after the object at byte %ld",
                           (long)(c - hdr) + 8);
        }
    if (!cJSON_IsObject(root)) {
        cJSON_Delete(root);
        return err_set(e, "header is not a JSON object");
    }
    int nkeys = cJSON_GetArraySize(root);
    const char **names = calloc((size_t)nkeys + 1, sizeof *names);
    entry *ents = calloc((size_t)nkeys + 1, sizeof *ents);
    int rc = -1, ne = 0, k = 0;
    if (!names || !ents) {
        err_set(e, "out of memory");
        goto done;
    }
    for (const cJSON *c = root->child; c; c = c->next) {
        if (!c->string) {
            err_set(e, "header key without a name");
            goto done;
        }
        names[k++] = c->string;
    }
    qsort(names, (size_t)k, sizeof *names, cmp_name);
    for (int i = 1; i < k; i++)
        if (strcmp(names[i], names[i - 1]) == 0) {
            err_set(e, "duplicate key '%.200s' in header", names[i]);
            goto done;
        }
    for (const cJSON *c = root->child; c; c = c->next) {
        if (strcmp(c->string, "__metadata__") == 0) {
            if (!cJSON_IsObject(c)) {
                err_set(e, "__metadata__ is not an object");
                goto done;
            }
            for (const cJSON *m2 = c->child; m2; m2 = m2->next)
                if (!cJSON_IsString(m2)) {
                    err_set(e, "__metadata__ value '%.100s' is not a string", m2->string);
                    goto done;
                }
            if (!f->metadata) f->metadata = cJSON_PrintUnformatted(c);
            continue;
        }
        ents[ne].name = c->string;
        if (parse_entry(c, &ents[ne], e)) goto done;
        ne++;
    }
    /* data regions must tile [0, data size) exactly */
    entry *sorted = malloc(((size_t)ne + 1) * sizeof *sorted);
    if (!sorted) {
        err_set(e, "out of memory");
        goto done;
    }
    memcpy(sorted, ents, (size_t)ne * sizeof *sorted);
    qsort(sorted, (size_t)ne, sizeof *sorted, cmp_begin);
    uint64_t expect = 0, data_size = m->size - 8 - hlen;
    for (int i = 0; i < ne; i++) {
        if (sorted[i].begin < expect) {
            err_set(e, "tensor '%.200s': data [%llu, %llu) overlaps the previous tensor",
                    sorted[i].name, (unsigned long long)sorted[i].begin,
                    (unsigned long long)sorted[i].end);
            free(sorted);
            goto done;
        }
        if (sorted[i].begin > expect) {
            err_set(e, "tensor '%.200s': gap of %llu bytes before its data", sorted[i].name,
                    (unsigned long long)(sorted[i].begin - expect));
            free(sorted);
            goto done;
        }
        expect = sorted[i].end;
    }
    if (expect > data_size) {
        const char *last = ne ? sorted[ne - 1].name : "?";
        err_set(e, "truncated: tensor '%.200s' needs data up to byte %llu, the file has %llu", last,
                (unsigned long long)(expect + 8 + hlen),
                (unsigned long long)(data_size + 8 + hlen));
        free(sorted);
        goto done;
    }
    if (expect < data_size) {
        err_set(e, "%llu trailing bytes after the last tensor",
                (unsigned long long)(data_size - expect));
        free(sorted);
        goto done;
    }
    free(sorted);
    tensor *nt = realloc(f->tensors, ((size_t)f->n + (size_t)ne + 1) * sizeof *nt);
    if (!nt) {
        err_set(e, "out of memory");
        goto done;
    }
    f->tensors = nt;
    for (int i = 0; i < ne; i++) {
        tensor *t = &f->tensors[f->n];
        memset(t, 0, sizeof *t);
        t->name = strdup(ents[i].name);
        if (!t->name) {
            err_set(e, "out of memory");
            goto done;
        }
        t->dtype = ents[i].dt;
        t->ndim = ents[i].ndim;
        memcpy(t->shape, ents[i].shape, sizeof t->shape);
        t->data = (unsigned char *)m->addr + 8 + hlen + ents[i].begin;
        t->nbytes = (size_t)(ents[i].end - ents[i].begin);
        t->owns_data = 0;
        f->n++;
    }
    rc = 0;
done:
    free(names);
    free(ents);
    cJSON_Delete(root);
    return rc;
}

static int add_map(st_file *f, void *addr, size_t size, int is_mmap) {
    st_map *nm = realloc(f->maps, ((size_t)f->nmaps + 1) * sizeof *nm);
    if (!nm) return -1;
    f->maps = nm;
    f->maps[f->nmaps++] = (st_map){addr, size, is_mmap};
    return 0;
}

static int map_file(st_file *f, const char *path, err *e) {
    /* O_NONBLOCK: a FIFO where a checkpoint should be is refused below, not waited on */
    int fd = open(path, O_RDONLY | O_NONBLOCK | O_CLOEXEC);
    if (fd < 0) return err_set(e, "%s: %s", path, strerror(errno));
    struct stat st;
    if (fstat(fd, &st) != 0 || !S_ISREG(st.st_mode)) {
        close(fd);
        return err_set(e, "%s: not a regular file", path);
    }
    size_t size = (size_t)st.st_size;
    if (size < 8) {
        close(fd);
        return err_set(e, "%s: truncated: %zu bytes, no header length", path, size);
    }
    void *addr = mmap(NULL, size, PROT_READ, MAP_PRIVATE, fd, 0);
    close(fd);
    if (addr == MAP_FAILED) return err_set(e, "%s: cannot map: %s", path, strerror(errno));
    if (add_map(f, addr, size, 1)) {
        munmap(addr, size);
        return err_set(e, "%s: out of memory", path);
    }
    if (parse_map(f, &f->maps[f->nmaps - 1], e)) return err_prefix(e, "%s", path);
    return 0;
}

static st_file *file_new(const char *path) {
    st_file *f = calloc(1, sizeof *f);
    if (f && !(f->path = strdup(path))) {
        free(f);
        return NULL;
    }
    return f;
}

typedef struct name_idx {
    const char *name;
    int idx;
} name_idx;

static int cmp_name_idx(const void *a, const void *b) {
    const name_idx *x = a, *y = b;
    int c = strcmp(x->name, y->name);
    return c ? c : (x->idx > y->idx) - (x->idx < y->idx);
}

static int build_order(st_file *f);

int st_open(st_file **out, const char *path, err *e) {
    *out = NULL;
    st_file *f = file_new(path);
    if (!f) return err_set(e, "%s: out of memory", path);
    if (map_file(f, path, e)) {
        st_close(f);
        return -1;
    }
    build_order(f);
    *out = f;
    return 0;
}

int st_open_memory(st_file **out, const void *data, size_t size, const char *label, err *e) {
    *out = NULL;
    st_file *f = file_new(label);
    void *copy = malloc(size ? size : 1);
    if (!f || !copy) {
        free(copy);
        st_close(f);
        return err_set(e, "%s: out of memory", label);
    }
    memcpy(copy, data, size);
    if (add_map(f, copy, size, 0)) {
        free(copy);
        st_close(f);
        return err_set(e, "%s: out of memory", label);
    }
    if (parse_map(f, &f->maps[0], e)) {
        err_prefix(e, "%s", label);
        st_close(f);
        return -1;
    }
    build_order(f);
    *out = f;
    return 0;
}

int st_open_index(st_file **out, const char *index_path, err *e) {
    *out = NULL;
    char *text = NULL;
    size_t tn = 0, bad_at;
    char why[96];
    if (file_read_all(index_path, 64u << 20, &text, &tn, e)) return -1;
    if (json_strict_check(text, tn, &bad_at, why, sizeof why)) {
        free(text);
        return err_set(e, "%s: invalid JSON at byte %zu: %s", index_path, bad_at, why);
    }
    cJSON *root = cJSON_ParseWithOpts(text, NULL, 1);
    free(text);
    if (!root) return err_set(e, "%s: invalid JSON", index_path);
    const cJSON *wm = cJSON_GetObjectItemCaseSensitive(root, "weight_map");
    if (!cJSON_IsObject(wm)) {
        cJSON_Delete(root);
        return err_set(e, "%s: no \"weight_map\" object", index_path);
    }
    st_file *f = file_new(index_path);
    char *dir = strdup(index_path);
    if (!f || !dir) {
        free(dir);
        st_close(f);
        cJSON_Delete(root);
        return err_set(e, "%s: out of memory", index_path);
    }
    char *slash = strrchr(dir, '/');
    if (slash)
        slash[1] = '\0';
    else
        strcpy(dir, "./");
    /* open each distinct shard once, in order of first mention: the entries sorted by shard
     * name (n log n; a pairwise scan took minutes on a 6 MB index), each name's first mention
     * kept, then those in mention order */
    int ne = cJSON_GetArraySize(wm), nshards = 0, rc = -1, *first = NULL;
    name_idx *byshard = calloc((size_t)ne + 1, sizeof *byshard);
    const char **shards = calloc((size_t)ne + 1, sizeof *shards);
    if (!byshard || !shards) {
        err_set(e, "%s: out of memory", index_path);
        goto done;
    }
    int k = 0;
    for (const cJSON *c = wm->child; c; c = c->next, k++) {
        if (!cJSON_IsString(c)) {
            err_set(e, "%s: weight_map entry '%.200s' is not a file name", index_path, c->string);
            goto done;
        }
        if (strchr(c->valuestring, '/') || strcmp(c->valuestring, "..") == 0) {
            err_set(e, "%s: shard name '%.200s' must be a plain file name", index_path,
                    c->valuestring);
            goto done;
        }
        byshard[k] = (name_idx){c->valuestring, k};
    }
    qsort(byshard, (size_t)ne, sizeof *byshard, cmp_name_idx);
    name_idx *uniq = calloc((size_t)ne + 1, sizeof *uniq);
    if (!uniq) {
        err_set(e, "%s: out of memory", index_path);
        goto done;
    }
    int nu = 0;
    for (int i = 0; i < ne; i++) /* sorted by (name, mention): the first of each run */
        if (!i || strcmp(byshard[i].name, byshard[i - 1].name) != 0) uniq[nu++] = byshard[i];
    {
        /* the unique shards in mention order: mark each one's first entry, walk the entries */
        char *is_first = calloc((size_t)ne + 1, 1);
        if (!is_first) {
            free(uniq);
            err_set(e, "%s: out of memory", index_path);
            goto done;
        }
        for (int i = 0; i < nu; i++) is_first[uniq[i].idx] = 1;
        k = 0;
        for (const cJSON *c = wm->child; c; c = c->next, k++)
            if (is_first[k]) shards[nshards++] = c->valuestring;
        free(is_first), free(uniq);
    }
    /* shard i holds tensors [first[i], first[i + 1]) */
    first = calloc((size_t)nshards + 1, sizeof *first);
    if (!first) {
        err_set(e, "%s: out of memory", index_path);
        goto done;
    }
    for (int i = 0; i < nshards; i++) {
        char *p = path_join(dir, shards[i]);
        first[i] = f->n;
        int bad = !p || map_file(f, p, e);
        free(p);
        if (bad) goto done;
    }
    first[nshards] = f->n;
    int dup = build_order(f);
    if (dup >= 0) { /* named by the later shard that holds it again */
        int si = 0;
        while (si + 1 < nshards && dup >= first[si + 1]) si++;
        err_set(e, "%s%s: tensor '%.200s' appears in two shards", dir, shards[si],
                f->tensors[dup].name);
        goto done;
    }
    /* the shards by name, for the check below */
    name_idx *sh = calloc((size_t)nshards + 1, sizeof *sh);
    if (!sh) {
        err_set(e, "%s: out of memory", index_path);
        goto done;
    }
    for (int i = 0; i < nshards; i++) sh[i] = (name_idx){shards[i], i};
    qsort(sh, (size_t)nshards, sizeof *sh, cmp_name_idx);
    /* a listed tensor must be in the shard the index names, not merely in some shard */
    for (const cJSON *c = wm->child; c; c = c->next) {
        const tensor *t = st_find(f, c->string);
        int tk = t ? (int)(t - f->tensors) : -1, in = 0;
        name_idx key = {c->valuestring, -1};
        int lo = 0, hi = nshards - 1, si = -1;
        while (lo <= hi) {
            int mid = lo + (hi - lo) / 2, cm = strcmp(sh[mid].name, key.name);
            if (cm == 0) {
                si = sh[mid].idx;
                break;
            }
            if (cm < 0)
                lo = mid + 1;
            else
                hi = mid - 1;
        }
        in = si >= 0 && tk >= first[si] && tk < first[si + 1];
        if (!in) {
            err_set(e, "%s: tensor '%.200s' is listed but not in shard %.200s", index_path,
                    c->string, c->valuestring);
            free(sh);
            goto done;
        }
    }
    free(sh);
    rc = 0;
done:
    free(byshard);
    free(first);
    free(shards);
    free(dir);
    cJSON_Delete(root);
    if (rc)
        st_close(f);
    else
        *out = f;
    return rc;
}

void st_close(st_file *f) {
    if (!f) return;
    free(f->order);
    for (int i = 0; i < f->n; i++) free(f->tensors[i].name);
    free(f->tensors);
    for (int i = 0; i < f->nmaps; i++) {
        if (f->maps[i].is_mmap)
            munmap(f->maps[i].addr, f->maps[i].size);
        else
            free(f->maps[i].addr);
    }
    free(f->maps);
    free(f->metadata);
    free(f->path);
    free(f);
}

/* f->order: the tensors by name. Returns the index of a tensor whose name repeats, -1 when none,
 * -2 when out of memory (st_find then searches linearly). */
static int build_order(st_file *f) {
    free(f->order);
    f->order = NULL;
    name_idx *v = malloc(((size_t)f->n + 1) * sizeof *v);
    int *o = malloc(((size_t)f->n + 1) * sizeof *o);
    if (!v || !o) {
        free(v), free(o);
        return -2;
    }
    for (int i = 0; i < f->n; i++) v[i] = (name_idx){f->tensors[i].name, i};
    qsort(v, (size_t)f->n, sizeof *v, cmp_name_idx);
    int dup = -1;
    for (int i = 0; i < f->n; i++) {
        o[i] = v[i].idx;
        if (i && dup < 0 && strcmp(v[i].name, v[i - 1].name) == 0) dup = v[i].idx;
    }
    free(v);
    f->order = o;
    return dup;
}

const tensor *st_find(const st_file *f, const char *name) {
    if (f->order) { /* binary search: a checkpoint of 100k tensors is looked up in log time */
        int lo = 0, hi = f->n - 1;
        while (lo <= hi) {
            int mid = lo + (hi - lo) / 2, c = strcmp(f->tensors[f->order[mid]].name, name);
            if (c == 0) return &f->tensors[f->order[mid]];
            if (c < 0)
                lo = mid + 1;
            else
                hi = mid - 1;
        }
        return NULL;
    }
    for (int i = 0; i < f->n; i++)
        if (strcmp(f->tensors[i].name, name) == 0) return &f->tensors[i];
    return NULL;
}

/* st_write into an atomic file opened by the caller (left open: the caller commits or aborts). */
static int st_write_into(atomic_file *af, int own, const char *path, const tensor *const *ts, int n,
                         const char *metadata_json, err *e);

int st_write(const char *path, const tensor *const *ts, int n, const char *metadata_json, err *e) {
    return st_write_into(NULL, 1, path, ts, n, metadata_json, e);
}

int st_write_uncommitted(atomic_file *af, const char *path, const tensor *const *ts, int n,
                         const char *metadata_json, err *e) {
    return st_write_into(af, 0, path, ts, n, metadata_json, e);
}

static int st_write_into(atomic_file *out, int own, const char *path, const tensor *const *ts,
                         int n, const char *metadata_json, err *e) {
    cJSON *root = cJSON_CreateObject();
    if (!root) return err_set(e, "%s: out of memory", path);
    if (metadata_json) {
        cJSON *md = cJSON_Parse(metadata_json);
        if (!cJSON_IsObject(md)) {
            cJSON_Delete(md);
            cJSON_Delete(root);
            return err_set(e, "%s: metadata is not a JSON object", path);
        }
        /* the reader rejects non-string values: never write a file it would refuse */
        for (const cJSON *m = md->child; m; m = m->next)
            if (!cJSON_IsString(m)) {
                err_set(e, "%s: metadata value '%.100s' is not a string", path, m->string);
                cJSON_Delete(md);
                cJSON_Delete(root);
                return -1;
            }
        cJSON_AddItemToObject(root, "__metadata__", md);
    }
    uint64_t off = 0;
    for (int i = 0; i < n; i++) {
        const tensor *t = ts[i];
        int64_t numel = shape_numel_checked(t->ndim, t->shape, dtype_size(t->dtype));
        if (!dtype_name(t->dtype) || numel < 0 ||
            (uint64_t)numel * dtype_size(t->dtype) != t->nbytes ||
            strcmp(t->name, "__metadata__") == 0) {
            cJSON_Delete(root);
            return err_set(e, "%s: tensor '%.200s': bad name, dtype, shape or byte size", path,
                           t->name);
        }
        for (int j = 0; j < i; j++)
            if (strcmp(ts[j]->name, t->name) == 0) {
                cJSON_Delete(root);
                return err_set(e, "%s: tensor '%s' given twice", path, t->name);
            }
        cJSON *o = cJSON_CreateObject();
        cJSON *sh = cJSON_CreateArray();
        cJSON *of = cJSON_CreateArray();
        cJSON_AddItemToObject(root, t->name, o);
        cJSON_AddStringToObject(o, "dtype", dtype_name(t->dtype));
        cJSON_AddItemToObject(o, "shape", sh);
        for (int d = 0; d < t->ndim; d++)
            cJSON_AddItemToArray(sh, cJSON_CreateNumber((double)t->shape[d]));
        cJSON_AddItemToObject(o, "data_offsets", of);
        cJSON_AddItemToArray(of, cJSON_CreateNumber((double)off));
        off += t->nbytes;
        cJSON_AddItemToArray(of, cJSON_CreateNumber((double)off));
    }
    char *hdr = cJSON_PrintUnformatted(root);
    cJSON_Delete(root);
    if (!hdr) return err_set(e, "%s: out of memory", path);
    size_t hl = strlen(hdr), padded = (hl + 7) / 8 * 8;
    atomic_file af;
    if (atomic_open(&af, path, e)) {
        free(hdr);
        return -1;
    }
    (void)own;
    unsigned char len8[8];
    for (int i = 0; i < 8; i++) len8[i] = (unsigned char)((uint64_t)padded >> (8 * i));
    int bad = fwrite(len8, 1, 8, af.fp) != 8 || fwrite(hdr, 1, hl, af.fp) != hl;
    for (size_t i = hl; i < padded && !bad; i++) bad = fputc(' ', af.fp) == EOF;
    free(hdr);
    for (int i = 0; i < n && !bad; i++)
        if (ts[i]->nbytes) bad = fwrite(ts[i]->data, 1, ts[i]->nbytes, af.fp) != ts[i]->nbytes;
    if (bad) {
        int en = errno;
        atomic_abort(&af);
        return err_set(e, "%s: write failed: %s", path, strerror(en ? en : EIO));
    }
    if (out) { /* the caller commits */
        *out = af;
        return 0;
    }
    return atomic_commit(&af, e);
}
