/* save.c: PATH/config.json and PATH/model.safetensors in fla's layout (float32, fla's tensor
 * names, the head left out when tied), each written atomically. `load PATH` reads back the same
 * floats bit for bit: weights are held in float32, so a BF16 or F16 checkpoint is saved widened
 * but unchanged in value. */
#include <errno.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>

#include "../core/fileio.h"
#include "../core/safetensors.h"
#include "internal.h"

int model_save(const model *m, const char *path, err *e) {
    if (!path_is_dir(path) && mkdir(path, 0777) != 0)
        return err_set(e, "%s: cannot create the folder: %s", path, strerror(errno));
    char *cfg = path_join(path, "config.json"), *wp = path_join(path, "model.safetensors");
    tensor *ts = calloc((size_t)m->nslots, sizeof *ts);
    const tensor **ptr = calloc((size_t)m->nslots, sizeof *ptr);
    int rc = -1;
    if (!cfg || !wp || !ts || !ptr) {
        err_set(e, "out of memory");
        goto done;
    }
    for (int i = 0; i < m->nslots; i++) {
        const wslot *s = &m->slots[i];
        tensor *t = &ts[i];
        t->name = (char *)s->name;
        t->dtype = DT_F32;
        t->ndim = s->ndim;
        for (int d = 0; d < s->ndim; d++) t->shape[d] = s->shape[d];
        t->data = s->data;
        t->nbytes = (size_t)wslot_numel(s) * sizeof(float);
        ptr[i] = t;
    }
    size_t n = strlen(m->config_json);
    char *text = malloc(n + 2);
    if (!text) {
        err_set(e, "out of memory");
        goto done;
    }
    memcpy(text, m->config_json, n);
    if (n == 0 || text[n - 1] != '\n') text[n++] = '\n';
    rc = file_write_atomic(cfg, text, n, e);
    free(text);
    if (!rc) rc = st_write(wp, ptr, m->nslots, "{\"format\":\"pt\"}", e);
done:
    free(cfg), free(wp), free(ts), free(ptr);
    return rc;
}
