#include "config.h"

#include "json_strict.h"

#include <cjson/cJSON.h>
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "fileio.h"

int config_parse(config *c, const char *text, const char *label, err *e) {
    memset(c, 0, sizeof *c);
    size_t at;
    char why[96];
    if (json_strict_check(text, strlen(text), &at, why, sizeof why))
        return err_set(e, "%s: invalid JSON at byte %zu: %s", label, at, why);
    const char *end = NULL;
    c->root = cJSON_ParseWithOpts(text, &end, 1); /* 1: nothing may follow the object */
    if (!c->root) return err_set(e, "%s: invalid JSON", label);
    if (!cJSON_IsObject(c->root)) {
        cJSON_Delete(c->root);
        c->root = NULL;
        return err_set(e, "%s: not a JSON object", label);
    }
    c->path = strdup(label);
    return 0;
}

int config_load(config *c, const char *path, err *e) {
    char *text;
    memset(c, 0, sizeof *c);
    size_t n;
    if (file_read_all(path, 16u << 20, &text, &n, e)) return -1;
    size_t len = strlen(text);
    if (len != n) { /* a NUL would end the text there, and the rest go unread */
        free(text);
        return err_set(e, "%s: a NUL byte at byte %zu", path, len);
    }
    int rc = config_parse(c, text, path, e);
    free(text);
    return rc;
}

void config_free(config *c) {
    cJSON_Delete(c->root);
    free(c->path);
    memset(c, 0, sizeof *c);
}

static const cJSON *get(const config *c, const char *key) {
    const cJSON *j = c->root ? cJSON_GetObjectItemCaseSensitive(c->root, key) : NULL;
    return cJSON_IsNull(j) ? NULL : j;
}

int config_has(const config *c, const char *key) {
    return get(c, key) != NULL;
}

int config_int(const config *c, const char *key, long def, long *out, err *e) {
    const cJSON *j = get(c, key);
    if (!j) {
        *out = def;
        return 0;
    }
    double d = cJSON_IsNumber(j) ? j->valuedouble : NAN;
    if (!isfinite(d) || d != floor(d) || fabs(d) > 1e15)
        return err_set(e, "%s: key '%s' must be an integer", c->path, key);
    *out = (long)d;
    return 0;
}

int config_float(const config *c, const char *key, double def, double *out, err *e) {
    const cJSON *j = get(c, key);
    if (!j) {
        *out = def;
        return 0;
    }
    if (!cJSON_IsNumber(j) || !isfinite(j->valuedouble))
        return err_set(e, "%s: key '%s' must be a number", c->path, key);
    *out = j->valuedouble;
    return 0;
}

int config_bool(const config *c, const char *key, int def, int *out, err *e) {
    const cJSON *j = get(c, key);
    if (!j) {
        *out = def;
        return 0;
    }
    if (!cJSON_IsBool(j)) return err_set(e, "%s: key '%s' must be true or false", c->path, key);
    *out = cJSON_IsTrue(j);
    return 0;
}

int config_str(const config *c, const char *key, const char *def, char *buf, size_t n, err *e) {
    const cJSON *j = get(c, key);
    const char *s = def;
    if (j) {
        if (!cJSON_IsString(j)) return err_set(e, "%s: key '%s' must be a string", c->path, key);
        s = j->valuestring;
    }
    if (!s) s = "";
    if (strlen(s) >= n) return err_set(e, "%s: key '%s' is too long", c->path, key);
    memcpy(buf, s, strlen(s) + 1);
    return 0;
}
