/* csv.h: one probe series as CSV, with its provenance in a sidecar FILE.csv.json.
 *
 * Long ("tidy") format, the default: a header row, then one row per value:
 *
 *   token,layer,head,lane,probe,value                 probes of one value per head
 *   token,layer,head,lane,probe,element,value         wider probes (element 0, 1, ...)
 *
 * lane is what made the layer: its mixer in model mode ("gdn", "softmax"), the lane's spec in
 * raw mode ("kaczmarz:eta=0.5"); quoted as RFC 4180 says where it holds a comma or a quote.
 * pandas.read_csv reads it with no options.
 *
 * Wide format (format=wide): a header row "token,l0h0,l0h1,..." (l0h1[3] for element 3 of a
 * wider probe), then one row per token, every layer and head side by side.
 *
 * Values print with %.9g (float round trip); a value never recorded is "nan", infinities "inf" /
 * "-inf". Nothing but the table is in the CSV: the provenance (software, command, checkpoint,
 * probe meaning, shape, selection, lanes) is a JSON object of strings in FILE.csv.json. Both are
 * written atomically (core/fileio.h); the CSV first, then the sidecar. */
#ifndef MIXSCOPE_CSV_H
#define MIXSCOPE_CSV_H

#include <stdint.h>

#include "../core/err.h"
#include "../core/trace.h"

typedef struct csv_meta {
    const char *key, *value; /* "key": "value" in the sidecar; NULL values are left out */
} csv_meta;

enum { CSV_LONG = 0, CSV_WIDE = 1 };

/* Series s of the trace; layer / head -1 for all of them; tokens [from, to). */
int csv_write_series(const char *path, const trace *tr, int s, int layer, int head, int64_t from,
                     int64_t to, int format, err *e);

/* Writes PATH.json: the entries as one JSON object (plus "lanes": the trace's layer labels when
 * tr is given). */
int csv_write_sidecar(const char *path, const trace *tr, const csv_meta *meta, int nmeta, err *e);

#endif
