#include "tensor.h"

#include "busguard.h"

#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

static const struct {
    const char *name;
    size_t size;
    int is_float;
} DTYPES[DT_COUNT] = {
    [DT_F32] = {"F32", 4, 1},   [DT_F16] = {"F16", 2, 1}, [DT_BF16] = {"BF16", 2, 1},
    [DT_F64] = {"F64", 8, 1},   [DT_I64] = {"I64", 8, 0}, [DT_I32] = {"I32", 4, 0},
    [DT_I16] = {"I16", 2, 0},   [DT_I8] = {"I8", 1, 0},   [DT_U8] = {"U8", 1, 0},
    [DT_BOOL] = {"BOOL", 1, 0},
};

const char *dtype_name(dtype dt) {
    return (unsigned)dt < DT_COUNT ? DTYPES[dt].name : NULL;
}

int dtype_parse(const char *s, dtype *out) {
    for (int i = 0; i < DT_COUNT; i++)
        if (strcmp(s, DTYPES[i].name) == 0) {
            *out = (dtype)i;
            return 0;
        }
    return -1;
}

size_t dtype_size(dtype dt) {
    return (unsigned)dt < DT_COUNT ? DTYPES[dt].size : 0;
}

int dtype_is_float(dtype dt) {
    return (unsigned)dt < DT_COUNT && DTYPES[dt].is_float;
}

int64_t shape_numel_checked(int ndim, const int64_t *shape, size_t elem_size) {
    if (ndim < 0 || ndim > TENSOR_MAX_DIMS) return -1;
    int64_t n = 1;
    for (int i = 0; i < ndim; i++) {
        if (shape[i] < 0) return -1;
        if (shape[i] != 0 && n > INT64_MAX / shape[i]) return -1;
        n *= shape[i];
    }
    /* compare unsigned: SIZE_MAX / 1 does not fit an int64 (it became -1 and refused 1-byte
     * dtypes) */
    if (elem_size && (uint64_t)n > SIZE_MAX / elem_size) return -1;
    if (elem_size && n > INT64_MAX / (int64_t)elem_size) return -1;
    return n;
}

tensor *tensor_new(const char *name, dtype dt, int ndim, const int64_t *shape, err *e) {
    if ((unsigned)dt >= DT_COUNT) {
        err_set(e, "tensor '%s': invalid dtype", name);
        return NULL;
    }
    int64_t n = shape_numel_checked(ndim, shape, dtype_size(dt));
    if (n < 0) {
        err_set(e, "tensor '%s': invalid shape", name);
        return NULL;
    }
    tensor *t = calloc(1, sizeof *t);
    size_t nbytes = (size_t)n * dtype_size(dt);
    void *data = calloc(nbytes ? nbytes : 1, 1);
    char *nm = strdup(name ? name : "");
    if (!t || !data || !nm) {
        free(t), free(data), free(nm);
        err_set(e, "tensor '%s': out of memory (%zu bytes)", name, nbytes);
        return NULL;
    }
    t->name = nm;
    t->dtype = dt;
    t->ndim = ndim;
    for (int i = 0; i < ndim; i++) t->shape[i] = shape[i];
    t->data = data;
    t->nbytes = nbytes;
    t->owns_data = 1;
    return t;
}

tensor *tensor_new_f32(const char *name, int64_t d0, int64_t d1, int64_t d2, int64_t d3, err *e) {
    int64_t dims[4] = {d0, d1, d2, d3};
    int nd = 0;
    while (nd < 4 && dims[nd] >= 0) nd++;
    return tensor_new(name, DT_F32, nd, dims, e);
}

void tensor_free(tensor *t) {
    if (!t) return;
    if (t->owns_data) free(t->data);
    free(t->name);
    free(t);
}

int64_t tensor_numel(const tensor *t) {
    int64_t n = 1;
    for (int i = 0; i < t->ndim; i++) n *= t->shape[i];
    return n;
}

float f16_to_f32(uint16_t h) {
    uint32_t sign = (uint32_t)(h & 0x8000) << 16, exp = (h >> 10) & 0x1f, man = h & 0x3ff, bits;
    if (exp == 0) {
        if (man == 0) {
            bits = sign;
        } else { /* subnormal: renormalise */
            int shift = 0;
            while (!(man & 0x400)) man <<= 1, shift++;
            man &= 0x3ff;
            bits = sign | ((uint32_t)(127 - 15 + 1 - shift) << 23) | (man << 13);
        }
    } else if (exp == 31) {
        bits = sign | 0x7f800000u | (man << 13);
    } else {
        bits = sign | ((exp + 127 - 15) << 23) | (man << 13);
    }
    float f;
    memcpy(&f, &bits, 4);
    return f;
}

uint16_t f32_to_f16(float f) {
    uint32_t x;
    memcpy(&x, &f, 4);
    uint32_t sign = (x >> 16) & 0x8000;
    uint32_t ax = x & 0x7fffffffu;
    if (ax >= 0x7f800000u) /* inf or nan */
        return (uint16_t)(sign | 0x7c00 | (ax > 0x7f800000u ? 0x200 : 0));
    if (ax >= 0x477ff000u) return (uint16_t)(sign | 0x7c00); /* rounds to >= 65520: inf */
    if (ax < 0x38800000u) {                                  /* result subnormal or zero */
        if (ax < 0x33000000u) return (uint16_t)sign;         /* < 2^-25: rounds to 0 */
        uint32_t e = ax >> 23, m = (ax & 0x7fffff) | 0x800000;
        int shift = 126 - (int)e; /* value / 2^-24 = m * 2^(e - 126) */
        uint32_t r = m >> shift, rem = m & ((1u << shift) - 1), half = 1u << (shift - 1);
        if (rem > half || (rem == half && (r & 1))) r++;
        return (uint16_t)(sign | r);
    }
    uint32_t r = ((ax >> 13) - ((127 - 15) << 10));
    uint32_t rem = ax & 0x1fff;
    if (rem > 0x1000 || (rem == 0x1000 && (r & 1))) r++;
    return (uint16_t)(sign | r);
}

float bf16_to_f32(uint16_t h) {
    uint32_t bits = (uint32_t)h << 16;
    float f;
    memcpy(&f, &bits, 4);
    return f;
}

uint16_t f32_to_bf16(float f) {
    uint32_t x;
    memcpy(&x, &f, 4);
    if ((x & 0x7fffffffu) > 0x7f800000u) return (uint16_t)((x >> 16) | 0x40); /* quiet nan */
    uint32_t lsb = (x >> 16) & 1;
    x += 0x7fff + lsb;
    return (uint16_t)(x >> 16);
}

/* Reads element i of any dtype as double (exact for every supported type except int64 > 2^53). */
static double elem_f64(const unsigned char *p, dtype dt) {
    switch (dt) {
    case DT_F32: {
        float v;
        memcpy(&v, p, 4);
        return v;
    }
    case DT_F16: {
        uint16_t v;
        memcpy(&v, p, 2);
        return f16_to_f32(v);
    }
    case DT_BF16: {
        uint16_t v;
        memcpy(&v, p, 2);
        return bf16_to_f32(v);
    }
    case DT_F64: {
        double v;
        memcpy(&v, p, 8);
        return v;
    }
    case DT_I64: {
        int64_t v;
        memcpy(&v, p, 8);
        return (double)v;
    }
    case DT_I32: {
        int32_t v;
        memcpy(&v, p, 4);
        return v;
    }
    case DT_I16: {
        int16_t v;
        memcpy(&v, p, 2);
        return v;
    }
    case DT_I8:
        return (int8_t)*p;
    case DT_U8:
        return *p;
    case DT_BOOL:
        return *p != 0;
    default:
        return 0;
    }
}

void tensor_read_f32(const tensor *t, float *dst) {
    int64_t n = tensor_numel(t);
    size_t es = dtype_size(t->dtype);
    const unsigned char *p = t->data;
    if (t->dtype == DT_F32) {
        memcpy(dst, p, (size_t)n * 4);
        return;
    }
    for (int64_t i = 0; i < n; i++) dst[i] = (float)elem_f64(p + (size_t)i * es, t->dtype);
}

/* Float to integer, saturating at [lo, hi] with NaN -> 0 (the plain C cast is undefined out of
 * range). (double)INT64_MAX rounds up to 2^63, so `v < hi` below keeps the cast in range. */
static int64_t sat_int(double v, int64_t lo, int64_t hi) {
    if (isnan(v)) return 0;
    if (v <= (double)lo) return lo;
    if (v >= (double)hi) return hi;
    return (int64_t)v;
}

void tensor_read_i64(const tensor *t, int64_t *dst) {
    int64_t n = tensor_numel(t);
    size_t es = dtype_size(t->dtype);
    const unsigned char *p = t->data;
    for (int64_t i = 0; i < n; i++) {
        if (t->dtype == DT_I64) {
            memcpy(&dst[i], p + (size_t)i * 8, 8);
        } else {
            double v = elem_f64(p + (size_t)i * es, t->dtype);
            dst[i] = sat_int(v, INT64_MIN, INT64_MAX);
        }
    }
}

typedef struct guarded_read {
    const tensor *t;
    void *dst;
    int i64;
} guarded_read;

static void guarded(void *ctx) {
    guarded_read *g = ctx;
    if (g->i64)
        tensor_read_i64(g->t, g->dst);
    else
        tensor_read_f32(g->t, g->dst);
}

static int read_file(const tensor *t, void *dst, int i64, err *e) {
    guarded_read g = {t, dst, i64};
    if (busguard_run(guarded, &g))
        return err_set(e,
                       "tensor '%.120s': the file changed while it was read (another program "
                       "truncated or rewrote it); nothing was kept",
                       t->name ? t->name : "?");
    return 0;
}

int tensor_read_f32_file(const tensor *t, float *dst, err *e) {
    return read_file(t, dst, 0, e);
}

int tensor_read_i64_file(const tensor *t, int64_t *dst, err *e) {
    return read_file(t, dst, 1, e);
}

tensor *tensor_to_f32(const tensor *t, err *e) {
    tensor *o = tensor_new(t->name, DT_F32, t->ndim, t->shape, e);
    if (o) tensor_read_f32(t, o->data);
    return o;
}

tensor *tensor_from_f32(const char *name, dtype dt, int ndim, const int64_t *shape,
                        const float *src, err *e) {
    tensor *t = tensor_new(name, dt, ndim, shape, e);
    if (!t) return NULL;
    int64_t n = tensor_numel(t);
    unsigned char *p = t->data;
    for (int64_t i = 0; i < n; i++) {
        float v = src[i];
        switch (dt) {
        case DT_F32:
            memcpy(p + i * 4, &v, 4);
            break;
        case DT_F16: {
            uint16_t h = f32_to_f16(v);
            memcpy(p + i * 2, &h, 2);
            break;
        }
        case DT_BF16: {
            uint16_t h = f32_to_bf16(v);
            memcpy(p + i * 2, &h, 2);
            break;
        }
        case DT_F64: {
            double d = v;
            memcpy(p + i * 8, &d, 8);
            break;
        }
        case DT_I64: {
            int64_t x = sat_int(v, INT64_MIN, INT64_MAX);
            memcpy(p + i * 8, &x, 8);
            break;
        }
        case DT_I32: {
            int32_t x = (int32_t)sat_int(v, INT32_MIN, INT32_MAX);
            memcpy(p + i * 4, &x, 4);
            break;
        }
        case DT_I16: {
            int16_t x = (int16_t)sat_int(v, INT16_MIN, INT16_MAX);
            memcpy(p + i * 2, &x, 2);
            break;
        }
        case DT_I8:
            p[i] = (unsigned char)(int8_t)sat_int(v, INT8_MIN, INT8_MAX);
            break;
        case DT_U8:
            p[i] = (unsigned char)sat_int(v, 0, UINT8_MAX);
            break;
        case DT_BOOL:
            p[i] = v != 0;
            break;
        default:
            break;
        }
    }
    return t;
}

const char *shape_str(int ndim, const int64_t *shape, char *buf, size_t n) {
    size_t off = 0;
    off += (size_t)snprintf(buf + off, n - off, "[");
    for (int i = 0; i < ndim && off < n; i++)
        off += (size_t)snprintf(buf + off, n - off, i ? ", %lld" : "%lld", (long long)shape[i]);
    if (off < n) snprintf(buf + off, n - off, "]");
    return buf;
}
