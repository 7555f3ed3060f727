/* bench_dense.c: the dense products of models/blocks.c against the memory floor (make bench).
 *
 * The floor: memcpy of 256 MiB, counted as bytes read plus bytes written, median of 5. Then
 * blk_linear (one token, what model_step does) at [1024 x 1024], [4096 x 1024] and [32000 x 1024]
 * with 1 thread and with every thread of the pool: the median over 25 calls, in ms and in GB/s of
 * weights read (out * in * 4 bytes / time), and that rate over the floor. Each call reads a
 * different copy of the weights (copies together >= 128 MiB, beyond the last-level cache), as a
 * model step does: between two uses of a matrix the other ~400 MB of a model pass through.
 * Then blk_linear_batch (prefill) over 96 tokens at [4096 x 1024]: ms per token and GFLOP/s.
 * Printed as a table; nothing is asserted. */
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "bench/bench.h"
#include "core/pool.h"
#include "models/blocks.h"

#define REPS       25
#define COPY_BYTES ((size_t)256 << 20)
#define WORKING    ((size_t)128 << 20)

static unsigned long long rs = 12345;
static float frand(void) {
    rs ^= rs << 13, rs ^= rs >> 7, rs ^= rs << 17;
    return (float)((double)(rs >> 11) / 9007199254740992.0 - 0.5);
}

/* GB/s of memcpy over 256 MiB, read + written */
static double copy_floor(void) {
    char *a = malloc(COPY_BYTES), *b = malloc(COPY_BYTES);
    if (!a || !b) {
        free(a), free(b);
        return 0;
    }
    memset(a, 1, COPY_BYTES);
    memset(b, 2, COPY_BYTES);
    double ts[5];
    for (int r = 0; r < 5; r++) {
        double t = bench_now();
        memcpy(b, a, COPY_BYTES);
        ts[r] = bench_now() - t;
        a[r] = b[COPY_BYTES - 1 - r]; /* keep the copy */
    }
    free(a), free(b);
    return 2.0 * (double)COPY_BYTES / bench_median(ts, 5) / 1e9;
}

/* median seconds of one blk_linear call at [out x in], copies rotated */
static double time_linear(float **W, int copies, const float *x, float *y, int out, int in) {
    double ts[REPS];
    blk_linear(y, x, W[copies - 1], NULL, out, in); /* threads started, pages touched */
    for (int r = 0; r < REPS; r++) {
        double t = bench_now();
        blk_linear(y, x, W[r % copies], NULL, out, in);
        ts[r] = bench_now() - t;
    }
    return bench_median(ts, REPS);
}

int main(void) {
    int all = pool_threads();
    double floor_gbs = copy_floor();
    printf("dense products (models/blocks.c): median of %d calls, weights cold (copies rotated)\n",
           REPS);
    printf("memory floor: memcpy of 256 MiB, read + written: %.1f GB/s\n\n", floor_gbs);
    printf("%-16s %8s %10s %10s %9s\n", "blk_linear", "threads", "ms", "GB/s", "/ floor");
    static const int shapes[][2] = {{1024, 1024}, {4096, 1024}, {32000, 1024}};
    int thr[2] = {1, all};
    for (int s = 0; s < 3; s++) {
        int out = shapes[s][0], in = shapes[s][1];
        size_t n = (size_t)out * (size_t)in, bytes = n * sizeof(float);
        int copies = (int)((WORKING + bytes - 1) / bytes);
        float **W = calloc((size_t)copies, sizeof *W), *x = malloc((size_t)in * sizeof *x),
              *y = malloc((size_t)out * sizeof *y);
        int ok = W && x && y;
        for (int c = 0; ok && c < copies; c++) {
            if (!(W[c] = malloc(bytes))) ok = 0;
            for (size_t i = 0; ok && i < n; i++) W[c][i] = frand();
        }
        for (int i = 0; ok && i < in; i++) x[i] = frand();
        for (int k = 0; ok && k < (all > 1 ? 2 : 1); k++) {
            pool_set_threads(thr[k], NULL);
            double t = time_linear(W, copies, x, y, out, in);
            double gbs = (double)bytes / t / 1e9;
            char name[32];
            snprintf(name, sizeof name, "[%d x %d]", out, in);
            printf("%-16s %8d %10.3f %10.1f %9.2f\n", name, thr[k], t * 1e3, gbs,
                   floor_gbs > 0 ? gbs / floor_gbs : 0);
        }
        if (!ok) printf("[%d x %d]: out of memory\n", out, in);
        for (int c = 0; W && c < copies; c++) free(W[c]);
        free(W), free(x), free(y);
    }

    /* prefill: 96 tokens at once */
    int T = 96, out = 4096, in = 1024;
    float *W = malloc((size_t)out * in * sizeof *W), *X = malloc((size_t)T * in * sizeof *X),
          *Y = malloc((size_t)T * out * sizeof *Y);
    if (W && X && Y) {
        for (size_t i = 0; i < (size_t)out * in; i++) W[i] = frand();
        for (size_t i = 0; i < (size_t)T * in; i++) X[i] = frand();
        printf("\n%-16s %8s %10s %10s\n", "blk_linear_batch", "threads", "ms/token", "GFLOP/s");
        for (int k = 0; k < (all > 1 ? 2 : 1); k++) {
            pool_set_threads(thr[k], NULL);
            double ts[9];
            blk_linear_batch(Y, X, W, NULL, T, out, in);
            for (int r = 0; r < 9; r++) {
                double t = bench_now();
                blk_linear_batch(Y, X, W, NULL, T, out, in);
                ts[r] = bench_now() - t;
            }
            double t = bench_median(ts, 9);
            printf("%-16s %8d %10.4f %10.1f\n", "[96x1024]x[4096]", thr[k], t / T * 1e3,
                   2.0 * T * out * in / t / 1e9);
        }
    }
    free(W), free(X), free(Y);
    pool_set_threads(0, NULL);
    return 0;
}
