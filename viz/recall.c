/* recall.c: readback of earlier keys' values from the current state, recorded into the trace. */
#include "recall.h"

#include <math.h>
#include <string.h>

float recall_readback(int dk, int dv, const float *S, const float *k, const float *v) {
    double num = 0, den = 0;
    for (int j = 0; j < dv; j++) {
        double r = 0;
        for (int i = 0; i < dk; i++) r += (double)S[(size_t)i * dv + j] * k[i];
        num += (r - v[j]) * (r - v[j]);
        den += (double)v[j] * v[j];
    }
    return den > 0 ? (float)sqrt(num / den) : NAN;
}

int recall_record_kv(trace *tr, int layers, int layer, int H, int dk, int dv, const float *k,
                     const float *v, int64_t t, err *e) {
    if (t < 0 || t >= tr->T) return err_set(e, "recall: token %lld not in the trace", (long long)t);
    int sk = trace_add_series(tr, "k", "key of the token, as the mixer saw it", "input", layers, H,
                              dk, e);
    int sv = sk < 0 ? -1
                    : trace_add_series(tr, "v", "value of the token, as the mixer saw it", "input",
                                       layers, H, dv, e);
    if (sv < 0) return -1;
    if (layer < 0 || layer >= layers) return err_set(e, "recall: layer %d out of range", layer);
    memcpy(trace_at_lh(tr, sk, t, layer, 0), k, (size_t)H * dk * sizeof *k);
    memcpy(trace_at_lh(tr, sv, t, layer, 0), v, (size_t)H * dv * sizeof *v);
    return 0;
}

int recall_record(trace *tr, int layers, int layer, int H, int dk, int dv, const float *k,
                  const float *v, const float *state, int64_t t, err *e) {
    if (recall_record_kv(tr, layers, layer, H, dk, dv, k, v, t, e)) return -1;
    int sk = trace_find(tr, "k"), sv = trace_find(tr, "v");
    int sr = trace_add_series(tr, "recall",
                              "|S_t^T k_(t-j) - v_(t-j)| / |v_(t-j)|: readback error of the key j "
                              "tokens back",
                              "recall", layers, H, RECALL_WINDOW, e);
    if (sr < 0) return -1;
    for (int h = 0; h < H; h++) {
        const float *S = state + (size_t)h * dk * dv;  /* [dk][dv] */
        float *row = trace_at_lh(tr, sr, t, layer, h); /* [RECALL_WINDOW] */
        for (int j = 0; j < RECALL_WINDOW; j++) {
            if (j > t) {
                row[j] = NAN;
                continue;
            }
            const float *ki = trace_at_lh(tr, sk, t - j, layer, h);
            const float *vi = trace_at_lh(tr, sv, t - j, layer, h);
            row[j] = isnan(ki[0]) ? NAN : recall_readback(dk, dv, S, ki, vi);
        }
    }
    return 0;
}
