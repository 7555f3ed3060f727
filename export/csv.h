/* csv.h: one probe series as CSV: provenance lines starting with '#', a header row, then one row
 * per token (column "token", then one column per layer, head and element: l0h1, or l0h1[3] for a
 * probe wider than one value). Values print with %.9g (float round trip); a value never recorded
 * is "nan". Written atomically (core/fileio.h). */
#ifndef MIXSCOPE_CSV_H
#define MIXSCOPE_CSV_H

#include <stdint.h>

#include "../core/err.h"
#include "../core/trace.h"

typedef struct csv_meta {
    const char *key, *value; /* written as "# key: value" */
} csv_meta;

/* Series s of the trace; layer / head -1 for all of them; tokens [from, to). */
int csv_write_series(const char *path, const trace *tr, int s, int layer, int head, int64_t from,
                     int64_t to, const csv_meta *meta, int nmeta, err *e);

#endif
