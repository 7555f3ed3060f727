/* csv.c: a probe series as CSV (long or wide) and its JSON provenance sidecar. */
#include "csv.h"

#include <cjson/cJSON.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "../core/fileio.h"

static void put_value(FILE *f, float v) {
    if (isnan(v))
        fputs("nan", f);
    else if (isinf(v))
        fputs(v > 0 ? "inf" : "-inf", f);
    else
        fprintf(f, "%.9g", (double)v);
}

/* A field as RFC 4180 writes it: quoted where it holds a comma, a quote or a line break. */
static void put_field(FILE *f, const char *s) {
    if (!strpbrk(s, ",\"\r\n")) {
        fputs(s, f);
        return;
    }
    fputc('"', f);
    for (; *s; s++) {
        if (*s == '"') fputc('"', f);
        fputc(*s, f);
    }
    fputc('"', f);
}

static void write_long(FILE *f, const trace *tr, const trace_series *se, int s, int l0, int l1,
                       int h0, int h1, int64_t from, int64_t to) {
    int wide = se->width > 1;
    fputs(wide ? "token,layer,head,lane,probe,element,value\n"
               : "token,layer,head,lane,probe,value\n",
          f);
    for (int64_t t = from; t < to; t++)
        for (int l = l0; l < l1; l++) {
            const char *lane = trace_label(tr, l);
            if (!lane) lane = se->source;
            for (int h = h0; h < h1; h++) {
                const float *v = trace_at_lh(tr, s, t, l, h);
                for (int i = 0; i < se->width; i++) {
                    fprintf(f, "%lld,%d,%d,", (long long)t, l, h);
                    put_field(f, lane);
                    fputc(',', f);
                    put_field(f, se->name);
                    if (wide) fprintf(f, ",%d", i);
                    fputc(',', f);
                    put_value(f, v[i]);
                    fputc('\n', f);
                }
            }
        }
}

static void write_wide(FILE *f, const trace *tr, const trace_series *se, int s, int l0, int l1,
                       int h0, int h1, int64_t from, int64_t to) {
    fprintf(f, "token");
    for (int l = l0; l < l1; l++)
        for (int h = h0; h < h1; h++)
            for (int i = 0; i < se->width; i++) {
                if (se->width == 1)
                    fprintf(f, ",l%dh%d", l, h);
                else
                    fprintf(f, ",l%dh%d[%d]", l, h, i);
            }
    fputc('\n', f);
    for (int64_t t = from; t < to; t++) {
        fprintf(f, "%lld", (long long)t);
        for (int l = l0; l < l1; l++)
            for (int h = h0; h < h1; h++) {
                const float *v = trace_at_lh(tr, s, t, l, h);
                for (int i = 0; i < se->width; i++) {
                    fputc(',', f);
                    put_value(f, v[i]);
                }
            }
        fputc('\n', f);
    }
}

int csv_write_series(const char *path, const trace *tr, int s, int layer, int head, int64_t from,
                     int64_t to, int format, err *e) {
    const trace_series *se = &tr->series[s];
    int l0 = layer < 0 ? 0 : layer, l1 = layer < 0 ? se->layers : layer + 1;
    int h0 = head < 0 ? 0 : head, h1 = head < 0 ? se->heads : head + 1;
    if (l1 > se->layers || h1 > se->heads)
        return err_set(e, "probe '%s' has %d layers and %d heads (asked layer %d, head %d)",
                       se->name, se->layers, se->heads, layer, head);
    atomic_file af;
    if (atomic_open(&af, path, e)) return -1;
    if (format == CSV_WIDE)
        write_wide(af.fp, tr, se, s, l0, l1, h0, h1, from, to);
    else
        write_long(af.fp, tr, se, s, l0, l1, h0, h1, from, to);
    return atomic_commit(&af, e);
}

int csv_write_sidecar(const char *path, const trace *tr, const csv_meta *meta, int nmeta, err *e) {
    size_t n = strlen(path);
    char *side = malloc(n + 6);
    cJSON *o = cJSON_CreateObject();
    int rc = -1;
    if (!side || !o) {
        err_set(e, "out of memory");
        goto done;
    }
    memcpy(side, path, n);
    memcpy(side + n, ".json", 6);
    for (int i = 0; i < nmeta; i++)
        if (meta[i].value && !cJSON_AddStringToObject(o, meta[i].key, meta[i].value)) {
            err_set(e, "out of memory");
            goto done;
        }
    if (tr && tr->nlabels > 0) {
        cJSON *lanes = cJSON_AddArrayToObject(o, "lanes");
        for (int l = 0; lanes && l < tr->nlabels; l++)
            cJSON_AddItemToArray(lanes, cJSON_CreateString(tr->label[l]));
    }
    char *text = cJSON_Print(o);
    if (!text) {
        err_set(e, "out of memory");
        goto done;
    }
    atomic_file af;
    if (!atomic_open(&af, side, e)) {
        fputs(text, af.fp);
        fputc('\n', af.fp);
        rc = atomic_commit(&af, e);
    }
    free(text);
done:
    cJSON_Delete(o);
    free(side);
    return rc;
}
