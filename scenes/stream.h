/* stream.h: raw streams for one mixer, no model needed (`stream keys|recall|overwrite`).
 *
 * A stream is a sequence of write tokens (key k, value v: store v under k) and query tokens (ask
 * k; v is then the value a perfect memory would return). Keys are random directions, uniform on
 * the sphere, with norms drawn log-uniformly from [lo, hi] (the spread of norms is what the
 * Kaczmarz write is about: GDN removes beta |k|^2 of the residual, Kaczmarz eta whatever |k|).
 * Values are unit vectors. Each head draws its own keys and values. A query asks with the same
 * key (same norm) that wrote. Deterministic from the seed.
 *
 *   keys       N writes, every key new.
 *   recall     `pairs` writes, then `queries` queries of stored keys (each key once per round).
 *   overwrite  `keys` keys each written `repeats` times with fresh values (rounds in shuffled
 *              order), then each key queried once: the right answer is the latest value.
 *
 * cli/cmd_stream.c turns a token into each mixer's inputs (scenes/raw.h). */
#ifndef MIXSCOPE_STREAM_H
#define MIXSCOPE_STREAM_H

#include <stdint.h>

#include "../core/err.h"

typedef struct raw_stream {
    char kind[16];  /* "keys", "recall", "overwrite"; "" = no stream */
    char desc[200]; /* one line */
    int T, H, dk, dv;
    float *k;        /* [T, H, dk] the key written or asked */
    float *v;        /* [T, H, dv] the value written; for a query the value it should read */
    float *r;        /* [T, H, dk] a random unit direction per token (Parallax's probe r) */
    float *knorm;    /* [T, H] |k| */
    uint8_t *query;  /* [T] 1: a query (read only), 0: a write */
    int32_t *key_id; /* [T] the key's index (pair, or token for `keys`) */
    int nkeys, nqueries;
    double lo, hi; /* key norm range */
} raw_stream;

/* Stream names, NULL-terminated. */
extern const char *const stream_names[];

int stream_keys(raw_stream *s, int n, int H, int dk, int dv, double lo, double hi, uint64_t seed,
                err *e);
int stream_recall(raw_stream *s, int pairs, int queries, int H, int dk, int dv, double lo,
                  double hi, uint64_t seed, err *e);
int stream_overwrite(raw_stream *s, int keys, int repeats, int H, int dk, int dv, double lo,
                     double hi, uint64_t seed, err *e);
void stream_free(raw_stream *s);

/* Geometry of the stream's distinct keys at head h (directions, norms ignored): the largest
 * |cos| between two of them and the largest cos^2 (the PSD feature map's interference), and the
 * mean cos^2 (1/dk for random keys). Zeros with fewer than two keys. */
void stream_key_geometry(const raw_stream *s, int h, double *max_abs, double *max_sq,
                         double *mean_sq);

#endif
