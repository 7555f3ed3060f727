/* tokenizer.c: byte-level text and token files (see tokenizer.h). */
#include "tokenizer.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "../core/safetensors.h"

int tok_bytes_encode(const char *text, int32_t *ids) {
    int n = 0;
    for (const unsigned char *p = (const unsigned char *)text; *p; p++) ids[n++] = *p;
    return n;
}

const char *tok_show(int32_t id, char *buf, size_t n) {
    if (id >= 32 && id < 127 && id != '\'' && id != '\\')
        snprintf(buf, n, "'%c'", (char)id);
    else if (id == '\n')
        snprintf(buf, n, "'\\n'");
    else if (id == '\t')
        snprintf(buf, n, "'\\t'");
    else if (id == '\'')
        snprintf(buf, n, "'\\''");
    else if (id == '\\')
        snprintf(buf, n, "'\\\\'");
    else if (id >= 0 && id < 256)
        snprintf(buf, n, "'\\x%02x'", (unsigned)id);
    else
        snprintf(buf, n, "<%d>", (int)id);
    return buf;
}

int tok_bytes_servable(int vocab, err *e) {
    if (vocab > 0 && vocab != TOK_BYTE_VOCAB)
        return err_set(e,
                       "the model's vocabulary has %d tokens, not the 256 bytes of byte-level "
                       "text; give token ids with `tokens FILE.safetensors`",
                       vocab);
    return 0;
}

int tok_check(const int32_t *ids, int n, int vocab, err *e) {
    for (int i = 0; i < n; i++)
        if (ids[i] < 0 || ids[i] >= vocab)
            return err_set(e, "token %d (position %d) is outside the model's vocabulary [0, %d)",
                           (int)ids[i], i, vocab);
    return 0;
}

int tok_read_file(const char *path, const char *name, int32_t **ids, int *n, err *e) {
    *ids = NULL, *n = 0;
    st_file *f;
    if (st_open(&f, path, e)) return -1;
    int rc = -1;
    const tensor *t = st_find(f, name);
    char sb[96];
    if (!t) {
        err_set(e, "%s: no tensor '%s'", path, name);
        goto done;
    }
    if (dtype_is_float(t->dtype) || t->dtype == DT_BOOL) {
        err_set(e, "%s: tensor '%s': dtype %s, expected integer token ids", path, name,
                dtype_name(t->dtype));
        goto done;
    }
    if (!(t->ndim == 1 || (t->ndim == 2 && t->shape[0] == 1)) || t->shape[t->ndim - 1] < 1 ||
        t->shape[t->ndim - 1] > (1 << 24)) {
        err_set(e, "%s: tensor '%s': shape %s, expected [1, T] with 1 <= T <= 16777216", path, name,
                shape_str(t->ndim, t->shape, sb, sizeof sb));
        goto done;
    }
    int64_t T = t->shape[t->ndim - 1];
    int64_t *tmp = malloc((size_t)T * sizeof *tmp);
    int32_t *out = malloc((size_t)T * sizeof *out);
    if (!tmp || !out) {
        free(tmp), free(out);
        err_set(e, "out of memory");
        goto done;
    }
    if (tensor_read_i64_file(t, tmp, e)) goto done;
    for (int64_t i = 0; i < T; i++) {
        if (tmp[i] < 0 || tmp[i] > INT32_MAX) {
            err_set(e, "%s: tensor '%s': token %lld at position %lld is negative or too large",
                    path, name, (long long)tmp[i], (long long)i);
            free(tmp), free(out);
            goto done;
        }
        out[i] = (int32_t)tmp[i];
    }
    free(tmp);
    *ids = out, *n = (int)T;
    rc = 0;
done:
    st_close(f);
    return rc;
}
