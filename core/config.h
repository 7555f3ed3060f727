/* config.h: a Hugging Face config.json, read with cJSON.
 *
 * Getters name the key in their error ("config.json: key 'num_heads' must be an integer"), accept
 * a default for keys fla leaves out, and treat JSON null as absent (fla writes `"num_v_heads":
 * null` to mean "same as num_heads"). */
#ifndef MIXSCOPE_CONFIG_H
#define MIXSCOPE_CONFIG_H

#include <stddef.h>

#include "err.h"

typedef struct config {
    char *path;
    struct cJSON *root;
} config;

int config_load(config *c, const char *path, err *e);
/* Parses JSON text (label names it in errors). */
int config_parse(config *c, const char *text, const char *label, err *e);
void config_free(config *c);

/* 1 when the key exists and is not null. */
int config_has(const config *c, const char *key);
int config_int(const config *c, const char *key, long def, long *out, err *e);
int config_float(const config *c, const char *key, double def, double *out, err *e);
int config_bool(const config *c, const char *key, int def, int *out, err *e);
/* Copies a string value (or def) into buf. */
int config_str(const config *c, const char *key, const char *def, char *buf, size_t n, err *e);

#endif
