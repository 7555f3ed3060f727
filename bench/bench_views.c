/* bench_views.c: median time to draw each view at 1280x800, and to export it as PNG.
 *
 * Traces come from viz/demo.h (the committed mixers on a seeded stream) at T = 512 tokens, the
 * length of a typical live session. Targets (issue 6): a frame within 16 ms (60 fps) and a PNG
 * export (encode with provenance + atomic write) within 200 ms, on a 2-core CPU. */
#define _GNU_SOURCE
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#include "bench/bench.h"
#include "export/png.h"
#include "viz/demo.h"
#include "viz/view.h"

#define W       1280
#define H       800
#define T       512
#define FRAMES  25
#define EXPORTS 7

static double now_ms(void) {
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return ts.tv_sec * 1e3 + ts.tv_nsec / 1e6;
}

int main(void) {
    char dir[] = "/tmp/mixscope-bench-XXXXXX";
    if (!mkdtemp(dir)) return perror("mkdtemp"), 1;
    printf("views at %dx%d over %d tokens (median of %d frames, %d exports)\n", W, H, T, FRAMES,
           EXPORTS);
    printf("%-9s %12s %12s %10s %12s\n", "view", "frame ms", "png ms", "png KiB", "60 fps");
    int bad = 0;
    const char *only = getenv("MIXSCOPE_BENCH_VIEW"); /* one view (profiling) */
    for (int i = 0; i < view_count; i++) {
        const view *v = view_all[i];
        if (only && *only && strcmp(only, v->name)) continue;
        trace tr;
        trace_init(&tr);
        err e = {{0}};
        canvas c;
        if (demo_trace(&tr, v->name, T, 1, &e) || canvas_init(&c, W, H, &e)) {
            fprintf(stderr, "bench_views: %s: %s\n", v->name, e.msg);
            trace_free(&tr);
            bad = 1;
            continue;
        }
        double fr[FRAMES], ex[EXPORTS];
        view_params p;
        for (int k = 0; k < FRAMES; k++) {
            view_params_default(&p);
            if (!strcmp(v->name, "kaczmarz")) p.layer = 1;
            double t0 = now_ms();
            if (v->draw(&c, &tr, &p, &e)) {
                fprintf(stderr, "bench_views: %s: %s\n", v->name, e.msg);
                bad = 1;
                break;
            }
            canvas_pixels(&c); /* what a window shows: the frame's RGBA bytes */
            fr[k] = now_ms() - t0;
        }
        char path[128];
        snprintf(path, sizeof path, "%s/%s.png", dir, v->name);
        png_text text[] = {{"Command", "bench_views"},
                           {"View", v->name},
                           {"Mixer", p.mixer},
                           {"Colour range", p.crange[0] ? p.crange : "none"}};
        long size = 0;
        for (int k = 0; k < EXPORTS; k++) {
            double t0 = now_ms();
            if (png_write(path, &c, text, 4, &e)) {
                fprintf(stderr, "bench_views: %s\n", e.msg);
                bad = 1;
                break;
            }
            ex[k] = now_ms() - t0;
        }
        FILE *f = fopen(path, "rb");
        if (f) fseek(f, 0, SEEK_END), size = ftell(f), fclose(f), unlink(path);
        double mf = bench_median(fr, FRAMES), me = bench_median(ex, EXPORTS);
        printf("%-9s %12.2f %12.1f %10.0f %12s\n", v->name, mf, me, size / 1024.0,
               mf <= 16.0 ? "yes" : "no");
        canvas_free(&c);
        trace_free(&tr);
    }
    rmdir(dir);
    return bad;
}
