/* save.c: PATH/config.json and PATH/model.safetensors in fla's layout (float32, fla's tensor
 * names, the head left out when tied), both written to temporaries, then the weights renamed into
 * place and the config last. `load PATH` reads back the same
 * floats bit for bit: weights are held in float32, so a BF16 or F16 checkpoint is saved widened
 * but unchanged in value. */
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>

#include "../core/fileio.h"
#include "../core/safetensors.h"
#include "internal.h"

int model_save(const model *m, const char *path, err *e) {
    struct stat sb;
    if (stat(path, &sb) == 0 && !S_ISDIR(sb.st_mode))
        return err_set(e,
                       "%s: a file is there; save writes a folder (config.json and "
                       "model.safetensors)",
                       path);
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
    /* both files to temporaries first; then the weights are put in place and the config last,
     * so a checkpoint is never left with a new config over old weights, and a failure (a full
     * disk) removes both temporaries and leaves the old checkpoint as it was */
    atomic_file ca, wa;
    rc = atomic_open(&ca, cfg, e);
    if (!rc && fwrite(text, 1, n, ca.fp) != n) {
        int en = errno;
        atomic_abort(&ca);
        rc = err_set(e, "%s: write failed: %s", cfg, strerror(en ? en : EIO));
    }
    free(text);
    if (!rc && st_write_uncommitted(&wa, wp, ptr, m->nslots, "{\"format\":\"pt\"}", e)) {
        atomic_abort(&ca);
        rc = -1;
    }
    if (!rc && atomic_commit(&wa, e)) {
        atomic_abort(&ca);
        rc = -1;
    }
    if (!rc) rc = atomic_commit(&ca, e);
done:
    free(cfg), free(wp), free(ts), free(ptr);
    return rc;
}
