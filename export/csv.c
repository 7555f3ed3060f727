/* csv.c: a probe series as CSV with a provenance header. */
#include "csv.h"

#include <math.h>
#include <stdio.h>

#include "../core/fileio.h"

int csv_write_series(const char *path, const trace *tr, int s, int layer, int head, int64_t from,
                     int64_t to, const csv_meta *meta, int nmeta, err *e) {
    const trace_series *se = &tr->series[s];
    int l0 = layer < 0 ? 0 : layer, l1 = layer < 0 ? se->layers : layer + 1;
    int h0 = head < 0 ? 0 : head, h1 = head < 0 ? se->heads : head + 1;
    if (l1 > se->layers || h1 > se->heads)
        return err_set(e, "probe '%s' has %d layers and %d heads (asked layer %d, head %d)",
                       se->name, se->layers, se->heads, layer, head);
    atomic_file af;
    if (atomic_open(&af, path, e)) return -1;
    FILE *f = af.fp;
    for (int i = 0; i < nmeta; i++)
        if (meta[i].value) {
            /* one line per entry: a newline inside a value would end the comment */
            fprintf(f, "# %s: ", meta[i].key);
            for (const char *c = meta[i].value; *c; c++)
                fputc(*c == '\n' || *c == '\r' ? ' ' : *c, f);
            fputc('\n', f);
        }
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
                    if (isnan(v[i]))
                        fputs(",nan", f);
                    else if (isinf(v[i]))
                        fputs(v[i] > 0 ? ",inf" : ",-inf", f);
                    else
                        fprintf(f, ",%.9g", (double)v[i]);
                }
            }
        fputc('\n', f);
    }
    return atomic_commit(&af, e);
}
