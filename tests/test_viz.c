/* test_viz.c: canvases, plots, views, PNG / CSV export, and the live windows.
 *
 * Golden images: every view is rendered from a demo trace (viz/demo.h: the committed mixers run on
 * a seeded random stream) and compared byte for byte with tests/golden/VIEW.png; any change fails
 * and leaves the new render and a diff image in /tmp. `make golden` (MIXSCOPE_GOLDEN=1) rewrites
 * the goldens on purpose; MIXSCOPE_GOLDEN=VIEW rewrites only that view's (the others are still
 * compared). The window test starts its own Xvfb, opens every view, steps it with a
 * space key and changes the head with an arrow key, then reads the window back through SDL and
 * through xwd and compares with an offscreen render of the same trace; it skips when Xvfb is
 * missing. */
#include <cjson/cJSON.h>
#include <dlfcn.h>
#include <errno.h>
#include <fcntl.h>
#include <signal.h>
#include <stdint.h>
#include <sys/stat.h>

#include "testutil.h"

#include <SDL.h>
#include <stb_image.h>

#include "core/fileio.h"
#include "export/csv.h"
#include "export/png.h"
#include "export/sha256.h"
#include "mixers/mixer.h"
#include "mixers/record.h"
#include "viz/canvas.h"
#include "viz/colormap.h"
#include "viz/demo.h"
#include "viz/plot.h"
#include "viz/recall.h"
#include "viz/view.h"
#include "viz/window.h"

/* SDL and Xlib keep a few allocations for the life of the process. */
const char *__lsan_default_suppressions(void);
const char *__lsan_default_suppressions(void) {
    return "leak:libX11\nleak:libxcb\nleak:libSDL2\nleak:libXcursor\nleak:libXi\nleak:libdbus\n"
           "leak:libXext\nleak:libXrandr\nleak:libXrender\nleak:libXfixes\nleak:libXss\n";
}

#define GOLDEN_W 960
#define GOLDEN_H 600
#define GOLDEN_T 160

static const char *root_dir(void) {
    const char *r = getenv("MIXSCOPE_ROOT");
    return r && *r ? r : ".";
}

static const uint8_t *px(canvas *c, int x, int y) {
    return canvas_px_at(c, x, y);
}

static int same_rgb(const uint8_t *p, rgba c) {
    return p[0] == c.r && p[1] == c.g && p[2] == c.b;
}

/* ---- canvas ---- */

/* Word wrapping: lines break at spaces, each fits (unless it is one word), nothing is lost. */
static void test_canvas_text_wrap(void **st) {
    (void)st;
    const char *s = "first token 29 at layer 2, head 1: the state norm grows past 1e3 within "
                    "four tokens while the key norm stays near 1.87";
    int maxw = canvas_text_width("first token 29 at layer 2,", FONT_SMALL), starts[32];
    int n = canvas_text_breaks(s, FONT_SMALL, maxw, starts, 32);
    assert_true(n >= 4);
    assert_int_equal(starts[0], 0);
    size_t covered = 0;
    for (int i = 0; i < n; i++) {
        size_t end = i + 1 < n ? (size_t)starts[i + 1] : strlen(s);
        char buf[256];
        size_t len = end - (size_t)starts[i];
        memcpy(buf, s + starts[i], len);
        while (len && buf[len - 1] == ' ') len--;
        buf[len] = 0;
        assert_true(canvas_text_width(buf, FONT_SMALL) <= maxw);
        assert_int_not_equal(buf[0], ' ');
        covered += len;
    }
    /* every non-space character lands on a line */
    size_t chars = 0;
    for (const char *q = s; *q; q++) chars += *q != ' ';
    size_t seen = 0;
    for (int i = 0; i < n; i++) {
        size_t end = i + 1 < n ? (size_t)starts[i + 1] : strlen(s);
        for (size_t q = (size_t)starts[i]; q < end; q++) seen += s[q] != ' ';
    }
    assert_int_equal(seen, chars);
    assert_true(covered > 0);
    /* a word wider than the line gets a line of its own; blanks give no line */
    assert_int_equal(canvas_text_breaks("supercalifragilistic x", FONT_SMALL, 10, starts, 32), 2);
    assert_int_equal(canvas_text_breaks("   ", FONT_SMALL, 100, starts, 32), 0);
    assert_int_equal(canvas_text_breaks("  ab", FONT_SMALL, 100, starts, 32), 1);
    assert_int_equal(starts[0], 2);
    /* drawing stops at max_lines and draws ink below the first line only when it wraps */
    canvas c;
    err e = {{0}};
    assert_int_equal(canvas_init(&c, 400, 200, &e), 0);
    canvas_clear(&c, rgb(255, 255, 255));
    assert_int_equal(canvas_text_wrap(&c, 2, 2, s, FONT_SMALL, rgb(0, 0, 0), maxw, 2), 2);
    assert_int_equal(canvas_text_wrap(&c, 2, 100, "short", FONT_SMALL, rgb(0, 0, 0), maxw, 3), 1);
    canvas_free(&c);
}

static void test_canvas_fill_and_clip(void **st) {
    (void)st;
    canvas c;
    err e = {{0}};
    assert_int_equal(canvas_init(&c, 64, 48, &e), 0);
    canvas_clear(&c, rgb(255, 255, 255));
    canvas_clip(&c, 10, 10, 20, 10);
    canvas_fill(&c, 0, 0, 64, 48, rgb(255, 0, 0));
    /* inside the clip red, outside white */
    assert_true(same_rgb(px(&c, 10, 10), rgb(255, 0, 0)));
    assert_true(same_rgb(px(&c, 29, 19), rgb(255, 0, 0)));
    assert_true(same_rgb(px(&c, 30, 19), rgb(255, 255, 255)));
    assert_true(same_rgb(px(&c, 9, 10), rgb(255, 255, 255)));
    assert_true(same_rgb(px(&c, 10, 20), rgb(255, 255, 255)));
    canvas_unclip(&c);
    /* half-transparent black over white is mid grey */
    canvas_fill(&c, 40, 30, 4, 4, (rgba){0, 0, 0, 128});
    assert_in_range(px(&c, 41, 31)[0], 126, 128);
    /* too small or too large canvases are refused with a message */
    canvas bad;
    assert_int_equal(canvas_init(&bad, 4, 4, &e), -1);
    assert_non_null(strstr(e.msg, "out of range"));
    canvas_free(&c);
}

static void test_canvas_line_and_text(void **st) {
    (void)st;
    canvas c;
    err e = {{0}};
    assert_int_equal(canvas_init(&c, 100, 60, &e), 0);
    canvas_clear(&c, rgb(255, 255, 255));
    canvas_line(&c, 10.5f, 30.5f, 90.5f, 30.5f, 1.0f, rgb(0, 0, 0));
    /* a horizontal 1-px line through pixel centres covers row 30 fully, not rows 28 or 32 */
    assert_true(same_rgb(px(&c, 50, 30), rgb(0, 0, 0)));
    assert_true(same_rgb(px(&c, 50, 28), rgb(255, 255, 255)));
    assert_true(same_rgb(px(&c, 50, 32), rgb(255, 255, 255)));
    /* a NaN end point draws nothing */
    canvas_line(&c, NAN, 5, 90, 5, 1.0f, rgb(0, 0, 0));
    assert_true(same_rgb(px(&c, 50, 5), rgb(255, 255, 255)));
    /* text: widths add up (to the rounding of each), a character the font lacks still takes
     * room (its box), malformed UTF-8 draws as '?', Greek is in the font */
    int w_ab = canvas_text_width("ab", FONT_SMALL);
    assert_in_range(w_ab,
                    canvas_text_width("a", FONT_SMALL) + canvas_text_width("b", FONT_SMALL) - 1,
                    canvas_text_width("a", FONT_SMALL) + canvas_text_width("b", FONT_SMALL));
    assert_true(canvas_text_width("\xe4\xb8\xad", FONT_SMALL) > 3);
    assert_int_equal(canvas_text_width("\xff", FONT_SMALL), canvas_text_width("?", FONT_SMALL));
    /* sub/superscripts: the markup is not drawn, the script is smaller */
    assert_true(canvas_text_width("S_{t-1}", FONT_SMALL) < canvas_text_width("St-1", FONT_SMALL));
    assert_true(canvas_text_width("S_{t-1}", FONT_SMALL) > canvas_text_width("S", FONT_SMALL));
    assert_int_equal(canvas_text_width("key_norm", FONT_SMALL),
                     canvas_text_width("key_norm", FONT_SMALL)); /* a lone _ stays */
    assert_true(canvas_text_width("β", FONT_SMALL) > 3);
    assert_true(canvas_text_width("x", FONT_LARGE) > canvas_text_width("x", FONT_SMALL));
    canvas_clear(&c, rgb(255, 255, 255));
    int w = canvas_text(&c, 5, 5, "Ag", FONT_LARGE, ALIGN_LEFT, rgb(0, 0, 0));
    long ink = 0;
    for (int y = 0; y < c.h; y++)
        for (int x = 0; x < c.w; x++) ink += px(&c, x, y)[0] < 128;
    assert_true(w > 10 && ink > 30);
    /* rotated text puts ink in a column, not a row */
    canvas_clear(&c, rgb(255, 255, 255));
    canvas_text_up(&c, 40, 30, "Wide", FONT_SMALL, rgb(0, 0, 0));
    int xmin = 100, xmax = -1, ymin = 100, ymax = -1;
    for (int y = 0; y < c.h; y++)
        for (int x = 0; x < c.w; x++)
            if (px(&c, x, y)[0] < 128) {
                if (x < xmin) xmin = x;
                if (x > xmax) xmax = x;
                if (y < ymin) ymin = y;
                if (y > ymax) ymax = y;
            }
    assert_true(ymax - ymin > xmax - xmin);
    canvas_free(&c);
}

static void test_colormap(void **st) {
    (void)st;
    rgba lo = cmap_at(CMAP_VIRIDIS, 0), hi = cmap_at(CMAP_VIRIDIS, 1);
    assert_true(lo.r == 68 && lo.g == 1 && lo.b == 84);
    assert_true(hi.r == 253 && hi.g == 231 && hi.b == 37);
    rgba mid = cmap_value(CMAP_DIVERGING, 0, -2, 2, 0);
    assert_true(mid.r == 247 && mid.g == 247 && mid.b == 247);
    rgba neg = cmap_value(CMAP_DIVERGING, -5, -2, 2, 0),
         pos = cmap_value(CMAP_DIVERGING, 5, -2, 2, 0);
    assert_true(neg.b > neg.r && pos.r > pos.b); /* blue below zero, red above, saturated */
    rgba nan = cmap_at(CMAP_VIRIDIS, NAN), gone = cmap_value(CMAP_VIRIDIS, -1, 1, 10, 1);
    assert_true(nan.r == gone.r && nan.g == gone.g && nan.r == cmap_nan().r);
    /* log scale: the geometric middle maps to 0.5 */
    assert_true(fabs(cmap_t(10, 1, 100, 1) - 0.5) < 1e-12);
    /* viridis is monotone in lightness (sum of channels as a rough proxy) */
    int prev = -1;
    for (int i = 0; i <= 32; i++) {
        rgba c = cmap_at(CMAP_VIRIDIS, i / 32.0);
        int l = c.r * 3 + c.g * 6 + c.b;
        assert_true(l > prev);
        prev = l;
    }
}

static void test_plot_format_and_axes(void **st) {
    (void)st;
    char b[40];
    plot_format(b, sizeof b, 0.25, 0.05), assert_string_equal(b, "0.25");
    plot_format(b, sizeof b, 2, 0.5), assert_string_equal(b, "2.0");
    plot_format(b, sizeof b, -3, 1), assert_string_equal(b, "\xe2\x88\x92"
                                                            "3");
    plot_format(b, sizeof b, 1e-4, 1e-4), assert_string_equal(b, "1e-4");
    plot_format(b, sizeof b, 320000, 20000), assert_string_equal(b, "3.2e5");
    plot_format(b, sizeof b, 1e-12, 0.5), assert_string_equal(b, "0");
    /* mapping: log axes put decades equally apart; flipped axes run the other way */
    canvas c;
    err e = {{0}};
    assert_int_equal(canvas_init(&c, 400, 300, &e), 0);
    plot p;
    axis ax = {1, 1000, 1, 0, "x", 0}, ay = {0, 10, 0, 1, "y", 0};
    plot_begin(&p, &c, 0, 0, 400, 300, "t", ax, ay, 0);
    double x1 = plot_px(&p, 1), x10 = plot_px(&p, 10), x100 = plot_px(&p, 100);
    assert_true(fabs((x10 - x1) - (x100 - x10)) < 1e-9);
    assert_true(isnan(plot_px(&p, -1)));
    assert_true(plot_py(&p, 0) < plot_py(&p, 10)); /* flipped: 0 at the top */
    assert_true(fabs(plot_dx(&p, plot_px(&p, 37)) - 37) < 1e-9);
    assert_true(fabs(plot_dy(&p, plot_py(&p, 3.5)) - 3.5) < 1e-9);
    plot_end(&p);
    /* axis_fit: a constant gets a visible range; decades give a log axis */
    range r;
    range_init(&r);
    range_add(&r, 1.0, 0), range_add(&r, 1.0 + 1e-7, 0);
    axis a = axis_fit(&r, 0, 0, NULL);
    assert_true(a.hi > a.lo && a.lo < 1 && a.hi > 1);
    range_init(&r);
    range_add(&r, 1e-3, 1), range_add(&r, 10, 1), range_add(&r, NAN, 1), range_add(&r, -1, 1);
    a = axis_fit(&r, 1, 1.5, NULL);
    assert_int_equal(r.n, 2);
    assert_true(a.log && a.lo < 1e-3 && a.hi > 10);
    canvas_free(&c);
}

/* ---- export ---- */

static void test_sha256(void **st) {
    (void)st;
    sha256_ctx c;
    char hex[65];
    sha256_init(&c), sha256_hex(&c, hex);
    assert_string_equal(hex, "e3b0c44298fc1c149afbf4c8996fb92427ae41e4649b934ca495991b7852b855");
    sha256_init(&c), sha256_update(&c, "abc", 3), sha256_hex(&c, hex);
    assert_string_equal(hex, "ba7816bf8f01cfea414140de5dae2223b00361a396177a9cb410ff61f20015ad");
    const char *two = "abcdbcdecdefdefgefghfghighijhijkijkljklmklmnlmnomnopnopq";
    sha256_init(&c), sha256_update(&c, two, strlen(two)), sha256_hex(&c, hex);
    assert_string_equal(hex, "248d6a61d20638b8e5c026930c3e6039a33ce45964ff2167f6ecedd419db06c1");
    /* split updates agree with one update */
    sha256_init(&c);
    for (size_t i = 0; i < strlen(two); i++) sha256_update(&c, two + i, 1);
    sha256_hex(&c, hex);
    assert_string_equal(hex, "248d6a61d20638b8e5c026930c3e6039a33ce45964ff2167f6ecedd419db06c1");
    char *d = test_tmpdir();
    char path[600];
    snprintf(path, sizeof path, "%s/abc", d);
    err e = {{0}};
    assert_int_equal(file_write_atomic(path, "abc", 3, &e), 0);
    assert_int_equal(sha256_file(path, hex, &e), 0);
    assert_string_equal(hex, "ba7816bf8f01cfea414140de5dae2223b00361a396177a9cb410ff61f20015ad");
    snprintf(path, sizeof path, "%s/missing", d);
    assert_int_equal(sha256_file(path, hex, &e), -1);
    assert_non_null(strstr(e.msg, "missing"));
    test_rmdir(d);
}

static void test_png_provenance_and_pixels(void **st) {
    (void)st;
    canvas c;
    err e = {{0}};
    assert_int_equal(canvas_init(&c, 37, 23, &e), 0);
    for (int y = 0; y < c.h; y++)
        for (int x = 0; x < c.w; x++) {
            uint8_t *p = c.px + ((size_t)y * c.w + x) * 4;
            p[0] = (uint8_t)(x * 7), p[1] = (uint8_t)(y * 11), p[2] = (uint8_t)(x ^ y), p[3] = 255;
        }
    c.stale = 0; /* px written by hand: the pixels to encode */
    png_text text[] = {{"Command", "export png kalman k.png layer=1"},
                       {"Mixer", "kalman"},
                       {"Colour range", "λ 0.1..10 (log10)"}};
    unsigned char *png;
    size_t n;
    assert_int_equal(png_encode(&c, text, 3, &png, &n, &e), 0);
    char val[256];
    assert_int_equal(png_find_text(png, n, "Command", val, sizeof val), 0);
    assert_string_equal(val, "export png kalman k.png layer=1");
    assert_int_equal(png_find_text(png, n, "Colour range", val, sizeof val), 0);
    assert_string_equal(val, "λ 0.1..10 (log10)"); /* UTF-8 through iTXt */
    assert_int_equal(png_find_text(png, n, "Checkpoint SHA-256", val, sizeof val), -1);
    int w, h, comp;
    unsigned char *dec = stbi_load_from_memory(png, (int)n, &w, &h, &comp, 4);
    assert_non_null(dec);
    assert_int_equal(w, 37), assert_int_equal(h, 23);
    assert_memory_equal(dec, c.px, (size_t)w * h * 4);
    stbi_image_free(dec);
    free(png);
    /* a bad key is refused */
    png_text bad[] = {{"", "x"}};
    assert_int_equal(png_encode(&c, bad, 1, &png, &n, &e), -1);

    /* atomic: an unwritable path names itself and leaves nothing; a good one leaves no temp */
    char *d = test_tmpdir(), path[600];
    snprintf(path, sizeof path, "%s/no/such/dir/x.png", d);
    assert_int_equal(png_write(path, &c, text, 3, &e), -1);
    assert_non_null(strstr(e.msg, "no/such/dir/x.png"));
    snprintf(path, sizeof path, "%s/x.png", d);
    assert_int_equal(png_write(path, &c, text, 3, &e), 0);
    char cmd[700];
    snprintf(cmd, sizeof cmd, "test $(ls '%s' | wc -l) -eq 1", d);
    assert_int_equal(system(cmd), 0);
    test_rmdir(d);
    canvas_free(&c);
}

static void test_csv(void **st) {
    (void)st;
    trace tr;
    trace_init(&tr);
    err e = {{0}};
    int s = trace_add_series(&tr, "rho", "relaxation", "kaczmarz", 2, 3, 1, &e);
    int w = trace_add_series(&tr, "lam", "lanes", "kalman", 1, 1, 2, &e);
    assert_true(s >= 0 && w >= 0);
    for (int t = 0; t < 5; t++) {
        assert_int_equal(trace_push_token(&tr, &e), t);
        for (int l = 0; l < 2; l++)
            for (int h = 0; h < 3; h++)
                if (!(l == 1 && t == 2)) trace_at_lh(&tr, s, t, l, h)[0] = 0.1f * t + l + 10 * h;
        trace_at_lh(&tr, w, t, 0, 0)[0] = 1.0f / 3.0f, trace_at_lh(&tr, w, t, 0, 0)[1] = -t;
    }
    assert_int_equal(trace_set_label(&tr, 0, "gdn", &e), 0);
    assert_int_equal(trace_set_label(&tr, 1, "kaczmarz:eta=0.5,eps=1", &e), 0);
    char *d = test_tmpdir(), path[600];
    snprintf(path, sizeof path, "%s/rho.csv", d);
    /* wide: one row per token, no comment lines */
    assert_int_equal(csv_write_series(path, &tr, s, -1, -1, 0, 5, CSV_WIDE, &e), 0);
    char *text;
    assert_int_equal(file_read_all(path, 1 << 20, &text, NULL, &e), 0);
    assert_true(!strncmp(text, "token,l0h0,l0h1,l0h2,l1h0,l1h1,l1h2\n0,", 38));
    assert_non_null(strstr(text, "\n2,0.200000003,10.1999998,20.2000008,nan,nan,nan\n"));
    assert_null(strchr(text, '#'));
    int rows = 0;
    for (char *q = text; *q; q++) rows += *q == '\n';
    assert_int_equal(rows, 1 + 5);
    /* every value reads back as the float it was */
    char *row4 = strstr(text, "\n4,");
    assert_non_null(row4);
    float v = strtof(row4 + 3, NULL);
    assert_true(v == trace_at_lh(&tr, s, 4, 0, 0)[0]);
    free(text);
    /* long: one row per value, the lane's label quoted where it holds a comma */
    assert_int_equal(csv_write_series(path, &tr, s, -1, -1, 0, 5, CSV_LONG, &e), 0);
    assert_int_equal(file_read_all(path, 1 << 20, &text, NULL, &e), 0);
    assert_true(!strncmp(text, "token,layer,head,lane,probe,value\n0,0,0,gdn,rho,0\n", 50));
    assert_non_null(strstr(text, "\n2,0,2,gdn,rho,20.2000008\n"));
    assert_non_null(strstr(text, "\n2,1,1,\"kaczmarz:eta=0.5,eps=1\",rho,nan\n"));
    rows = 0;
    for (char *q = text; *q; q++) rows += *q == '\n';
    assert_int_equal(rows, 1 + 5 * 2 * 3);
    free(text);
    /* the sidecar: the entries and the lanes as JSON */
    csv_meta meta[] = {
        {"command", "export csv rho rho.csv"}, {"mixer", "kaczmarz\n\"x\""}, {"none", NULL}};
    assert_int_equal(csv_write_sidecar(path, &tr, meta, 3, &e), 0);
    snprintf(path, sizeof path, "%s/rho.csv.json", d);
    assert_int_equal(file_read_all(path, 1 << 20, &text, NULL, &e), 0);
    cJSON *j = cJSON_Parse(text);
    assert_non_null(j);
    assert_string_equal(cJSON_GetObjectItem(j, "command")->valuestring, "export csv rho rho.csv");
    assert_string_equal(cJSON_GetObjectItem(j, "mixer")->valuestring, "kaczmarz\n\"x\"");
    assert_null(cJSON_GetObjectItem(j, "none"));
    cJSON *lanes = cJSON_GetObjectItem(j, "lanes");
    assert_int_equal(cJSON_GetArraySize(lanes), 2);
    assert_string_equal(cJSON_GetArrayItem(lanes, 1)->valuestring, "kaczmarz:eta=0.5,eps=1");
    cJSON_Delete(j);
    free(text);
    snprintf(path, sizeof path, "%s/lam.csv", d);
    assert_int_equal(csv_write_series(path, &tr, w, 0, 0, 1, 3, CSV_WIDE, &e), 0);
    assert_int_equal(file_read_all(path, 1 << 20, &text, NULL, &e), 0);
    assert_string_equal(text, "token,l0h0[0],l0h0[1]\n1,0.333333343,-1\n2,0.333333343,-2\n");
    free(text);
    assert_int_equal(csv_write_series(path, &tr, w, 0, 0, 1, 2, CSV_LONG, &e), 0);
    assert_int_equal(file_read_all(path, 1 << 20, &text, NULL, &e), 0);
    assert_string_equal(text, "token,layer,head,lane,probe,element,value\n"
                              "1,0,0,gdn,lam,0,0.333333343\n1,0,0,gdn,lam,1,-1\n");
    free(text);
    assert_int_equal(csv_write_series(path, &tr, s, 2, 0, 0, 5, CSV_LONG, &e), -1);
    assert_non_null(strstr(e.msg, "2 layers"));
    test_rmdir(d);
    trace_free(&tr);
}

/* ---- recall ---- */

static void test_recall_readback(void **st) {
    (void)st;
    /* GDN with g = 0 and beta = 1 on orthonormal keys stores each value exactly: every earlier
     * key reads back with error 0 until the keys run out */
    const mixer_ops *m = mixer_find("gdn");
    assert_non_null(m);
    mixer_cfg c;
    opts o;
    memset(&o, 0, sizeof o);
    err e = {{0}};
    const int dk = 8, dv = 4, T = 6;
    assert_int_equal(mixer_configure(m, &c, 1, dk, dv, &o, &e), 0);
    float *state = calloc(m->state_floats(&c), sizeof *state);
    float probes[256], out[8];
    assert_true(mixer_probe_floats(m, &c) <= 256);
    m->state_init(&c, state);
    trace tr;
    trace_init(&tr);
    assert_int_equal(probe_register(&tr, m, &c, 1, &e), 0);
    trng r = {42};
    for (int t = 0; t < T; t++) {
        float q[8] = {0}, k[8] = {0}, v[4], g = 0, b = 1;
        k[t] = 1, q[t] = 1;
        trng_fill(&r, v, 4, 1.0);
        mixer_tok x = {{0}};
        x.in[IN_Q] = q, x.in[IN_K] = k, x.in[IN_V] = v, x.in[IN_G] = &g, x.in[IN_BETA] = &b;
        assert_int_equal(trace_push_token(&tr, &e), t);
        m->step(&c, state, &x, t, out, probes);
        probe_record(&tr, m, &c, probes, t, 0);
        assert_int_equal(recall_record(&tr, 1, 0, 1, dk, dv, k, v, state, t, &e), 0);
    }
    int s = trace_find(&tr, "recall");
    assert_true(s >= 0);
    const float *row = trace_at_lh(&tr, s, T - 1, 0, 0);
    for (int j = 0; j < T; j++) assert_true(row[j] < 1e-6);
    assert_true(isnan(row[T])); /* no key T tokens back yet */
    /* an unrelated key reads nothing: error 1 */
    float k7[8] = {0, 0, 0, 0, 0, 0, 0, 1}, v7[4] = {1, 2, 3, 4};
    assert_true(fabsf(recall_readback(dk, dv, state, k7, v7) - 1.0f) < 1e-6f);
    free(state);
    trace_free(&tr);
}

/* ---- views ---- */

static void demo(trace *tr, const char *view, int T) {
    err e = {{0}};
    trace_init(tr);
    if (demo_trace(tr, view, T, 1, &e)) fail_msg("demo %s: %s", view, e.msg);
}

static void test_views_on_empty_and_short_traces(void **st) {
    (void)st;
    canvas c;
    err e = {{0}};
    assert_int_equal(canvas_init(&c, 640, 400, &e), 0);
    trace empty;
    trace_init(&empty);
    for (int i = 0; i < view_count; i++) {
        view_params p;
        view_params_default(&p);
        /* an empty trace is a clear error (kata draws its experiments on random keys) */
        int rc = view_all[i]->draw(&c, &empty, &p, &e);
        if (strcmp(view_all[i]->name, "kata") != 0) {
            assert_int_equal(rc, -1);
            assert_true(strlen(e.msg) > 20);
        }
        /* one token, and selections far out of range, draw and clamp */
        trace tr;
        demo(&tr, view_all[i]->name, 1);
        view_params_default(&p);
        p.layer = 99, p.head = 99, p.index = 9999, p.from = 5, p.to = 3;
        if (view_all[i]->draw(&c, &tr, &p, &e)) fail_msg("%s: %s", view_all[i]->name, e.msg);
        assert_true(p.layer < 4 && p.head < 2);
        assert_true(p.shown_from == p.shown_to || p.shown_to == 1);
        trace_clear(&tr); /* series kept, no tokens */
        view_params_default(&p);
        if (view_all[i]->draw(&c, &tr, &p, &e) && strcmp(view_all[i]->name, "state") != 0)
            fail_msg("%s with no tokens: %s", view_all[i]->name, e.msg);
        trace_free(&tr);
    }
    assert_null(view_find("nope"));
    canvas_free(&c);
}

static void test_view_probes_errors(void **st) {
    (void)st;
    trace tr;
    demo(&tr, "kalman", 20);
    canvas c;
    err e = {{0}};
    assert_int_equal(canvas_init(&c, 640, 400, &e), 0);
    view_params p;
    view_params_default(&p);
    snprintf(p.probe, sizeof p.probe, "nosuch");
    assert_int_equal(view_find("probes")->draw(&c, &tr, &p, &e), -1);
    assert_non_null(strstr(e.msg, "lambda")); /* lists what there is */
    snprintf(p.probe, sizeof p.probe, "lambda");
    assert_int_equal(view_find("probes")->draw(&c, &tr, &p, &e), 0);
    assert_non_null(strstr(p.crange, "lambda"));
    assert_string_equal(p.mixer, "kalman");
    /* a view of another mixer's probes says which mixer to run */
    assert_int_equal(view_find("parallax")->draw(&c, &tr, &p, &e), -1);
    assert_non_null(strstr(e.msg, "parallax"));
    canvas_free(&c);
    trace_free(&tr);
}

/* Renders view v from its demo trace at the golden size. */
static void render_golden(const view *v, canvas *c, view_params *p) {
    trace tr;
    demo(&tr, v->name, GOLDEN_T);
    err e = {{0}};
    if (canvas_init(c, GOLDEN_W, GOLDEN_H, &e)) fail_msg("%s", e.msg);
    view_params_default(p);
    /* the Kaczmarz layer of the demo stack (layer 0 is GDN), the probe overview otherwise */
    if (!strcmp(v->name, "kaczmarz")) p->layer = 1;
    if (v->draw(c, &tr, p, &e)) fail_msg("%s: %s", v->name, e.msg);
    trace_free(&tr);
}

static void test_golden_images(void **st) {
    (void)st;
    const char *golden = getenv("MIXSCOPE_GOLDEN");
    int failed = 0;
    for (int i = 0; i < view_count; i++) {
        const view *v = view_all[i];
        int write = golden && (!strcmp(golden, "1") || !strcmp(golden, v->name));
        canvas c;
        view_params p;
        render_golden(v, &c, &p);
        char path[600];
        snprintf(path, sizeof path, "%s/tests/golden/%s.png", root_dir(), v->name);
        err e = {{0}};
        if (write) {
            png_text t[] = {{"Software", "mixscope golden"}, {"View", v->name}};
            if (png_write(path, &c, t, 2, &e)) fail_msg("%s", e.msg);
            printf("wrote %s\n", path);
            canvas_free(&c);
            continue;
        }
        int w, h, comp;
        unsigned char *g = stbi_load(path, &w, &h, &comp, 4);
        if (!g) {
            printf("golden %s missing (make golden writes it)\n", path);
            failed++;
            canvas_free(&c);
            continue;
        }
        /* anti-aliasing may round differently where cairo or FreeType differ: a pixel counts
         * as different when a channel moves by more than 48, and 0.2% of them may */
        const uint8_t *cp = canvas_pixels(&c);
        long diff = 0, tol = (long)c.pw * c.ph / 500;
        int maxd = 0;
        if (w == c.pw && h == c.ph)
            for (size_t k = 0; k < (size_t)w * h; k++) {
                int dk = 0;
                for (int ch = 0; ch < 4; ch++) {
                    int d = abs((int)g[4 * k + ch] - (int)cp[4 * k + ch]);
                    if (d > dk) dk = d;
                }
                if (dk > 48) diff++;
                if (dk > maxd) maxd = dk;
            }
        if (diff)
            printf("view %s: %ld pixels differ from the golden (%ld allowed)\n", v->name, diff,
                   tol);
        if (diff <= tol) diff = 0;
        if (w != c.pw || h != c.ph || diff) {
            char got[300], dpath[300];
            snprintf(got, sizeof got, "/tmp/mixscope-golden-%s-actual.png", v->name);
            snprintf(dpath, sizeof dpath, "/tmp/mixscope-golden-%s-diff.png", v->name);
            png_write(got, &c, NULL, 0, &e);
            if (w == c.pw && h == c.ph) {
                /* differing pixels red over a faded copy */
                for (size_t k = 0; k < (size_t)w * h; k++) {
                    int d = memcmp(g + 4 * k, c.px + 4 * k, 4) != 0;
                    for (int ch = 0; ch < 3; ch++)
                        c.px[4 * k + ch] =
                            d ? (ch == 0 ? 255 : 0) : (uint8_t)(200 + c.px[4 * k + ch] / 5);
                }
                c.stale = 0; /* write the diff, not the drawing */
                png_write(dpath, &c, NULL, 0, &e);
            }
            printf("view %s differs from %s: %ld bytes, max |diff| %d (%dx%d vs %dx%d); new render "
                   "%s, diff %s; run 'make golden' if the change is intended\n",
                   v->name, path, diff, maxd, c.w, c.h, w, h, got, dpath);
            failed++;
        }
        stbi_image_free(g);
        canvas_free(&c);
    }
    assert_int_equal(failed, 0);
}

/* Rendering twice gives the same bytes (no state between frames). */
static void test_views_deterministic(void **st) {
    (void)st;
    for (int i = 0; i < view_count; i++) {
        canvas a, b;
        view_params pa, pb;
        render_golden(view_all[i], &a, &pa);
        render_golden(view_all[i], &b, &pb);
        assert_memory_equal(canvas_pixels(&a), canvas_pixels(&b), (size_t)a.pw * a.ph * 4);
        assert_string_equal(pa.crange, pb.crange);
        canvas_free(&a), canvas_free(&b);
    }
}

/* The precision demo: the four variants of diag/precision.c on the demo's two cores. The fp32
 * run against itself is exactly 0; the state variants leave token 0's outputs exact (the state is
 * rounded after the step that made them); fp16 keeps 3 more mantissa bits than bf16 (11 against
 * 8), so its state divergence is about 2^-3 of bf16's. */
static void test_precision_demo(void **st) {
    (void)st;
    trace tr;
    demo(&tr, "precision", GOLDEN_T);
    int s[4], sl = trace_find(&tr, "prec_logits");
    const char *names[4] = {"prec_fp32", "prec_bf16_state", "prec_fp16_state", "prec_bf16_inputs"};
    for (int v = 0; v < 4; v++) {
        s[v] = trace_find(&tr, names[v]);
        assert_true(s[v] >= 0);
        assert_int_equal(tr.series[s[v]].layers, 2), assert_int_equal(tr.series[s[v]].heads, 2);
    }
    assert_true(sl >= 0);
    assert_int_equal(tr.series[sl].layers, 1), assert_int_equal(tr.series[sl].heads, 4);
    assert_int_equal(tr.T, GOLDEN_T);
    for (int l = 0; l < 2; l++)
        for (int h = 0; h < 2; h++) {
            double sum[4] = {0}, mx[4] = {0};
            for (int64_t t = 0; t < tr.T; t++)
                for (int v = 0; v < 4; v++) {
                    float x = *trace_at_lh(&tr, s[v], t, l, h);
                    assert_true(isfinite(x) && x >= 0);
                    sum[v] += x, mx[v] = x > mx[v] ? x : mx[v];
                }
            assert_true(mx[0] == 0);
            double bf = sum[1] / tr.T, fp = sum[2] / tr.T, in = sum[3] / tr.T;
            printf("precision demo layer %d head %d: mean bf16 state %.3g, fp16 state %.3g "
                   "(ratio %.3f), bf16 inputs %.3g; max %.3g %.3g %.3g\n",
                   l, h, bf, fp, fp / bf, in, mx[1], mx[2], mx[3]);
            assert_in_range((long)(bf * 1e5), 100, 1000); /* 1e-3 .. 1e-2 */
            assert_in_range((long)(fp * 1e6), 100, 1000); /* 1e-4 .. 1e-3 */
            assert_in_range((long)(in * 1e5), 100, 1000);
            assert_true(fp / bf > 1.0 / 12 && fp / bf < 1.0 / 6);
        }
    /* the "logits" (the layers' outputs) */
    assert_true(*trace_at_lh(&tr, sl, 0, 0, 0) == 0);
    assert_true(*trace_at_lh(&tr, sl, 0, 0, 1) == 0 && *trace_at_lh(&tr, sl, 0, 0, 2) == 0);
    assert_true(*trace_at_lh(&tr, sl, 0, 0, 3) > 1e-4);
    for (int64_t t = 1; t < tr.T; t++)
        for (int v = 1; v < 4; v++) {
            float x = *trace_at_lh(&tr, sl, t, 0, v);
            assert_true(x > 1e-5 && x < 5e-2);
        }
    /* the same seed gives the same trace; another seed another one */
    trace again;
    demo(&again, "precision", GOLDEN_T);
    assert_memory_equal(trace_at(&tr, s[1], GOLDEN_T - 1), trace_at(&again, s[1], GOLDEN_T - 1),
                        4 * sizeof(float));
    trace_free(&again);
    trace_free(&tr);
}

/* Pixels of a decoded RGBA image within 40 (sum of |difference| over r, g, b) of colour c. */
static long count_near(const unsigned char *px, int w, int h, rgba c) {
    long n = 0;
    for (size_t k = 0; k < (size_t)w * h; k++) {
        const unsigned char *p = px + 4 * k;
        n += abs(p[0] - c.r) + abs(p[1] - c.g) + abs(p[2] - c.b) < 40;
    }
    return n;
}

/* `view precision` / `export png precision` on the session's trace: a clear error naming
 * `diagnose precision` until it has run, then the figure of its series. */
static void test_precision_view_commands(void **st) {
    (void)st;
    char *d = test_tmpdir(), *out;
    /* tokens ran, but no precision replay: the error names the command */
    int rc = run_mixscope(&out,
                          "-c 'model random gdn seed=1; prompt mqar pairs=8; run; export png "
                          "precision %s/p.png'",
                          d);
    assert_int_equal(rc, 1);
    assert_non_null(strstr(out, "export png: view precision: no precision replay in the trace; "
                                "run `diagnose precision` first"));
    free(out);
    /* after diagnose precision: the figure, with its provenance */
    rc = run_mixscope(&out,
                      "-c 'model random gdn seed=1 layers=2; prompt mqar pairs=8; diagnose "
                      "precision; export png precision %s/p.png width=960 height=600 layer=1 "
                      "head=1; export csv prec_fp16_state %s/p.csv layer=1 head=1'",
                      d, d);
    if (rc != 0) fail_msg("diagnose precision; export png precision: %s", out);
    assert_non_null(strstr(out, "precision replay over 32 tokens, 2 layers"));
    assert_non_null(strstr(out, "(view precision, 960x600, layer 1 head 1, tokens 0..31)"));
    free(out);
    char path[600];
    snprintf(path, sizeof path, "%s/p.png", d);
    char *png, val[300];
    size_t n;
    err e = {{0}};
    assert_int_equal(file_read_all(path, 1 << 24, &png, &n, &e), 0);
    assert_int_equal(png_find_text((unsigned char *)png, n, "View", val, sizeof val), 0);
    assert_string_equal(val, "precision");
    assert_int_equal(png_find_text((unsigned char *)png, n, "Mixer", val, sizeof val), 0);
    assert_string_equal(val, "precision");
    assert_int_equal(png_find_text((unsigned char *)png, n, "Layer", val, sizeof val), 0);
    assert_string_equal(val, "1");
    assert_int_equal(png_find_text((unsigned char *)png, n, "Tokens", val, sizeof val), 0);
    assert_string_equal(val, "0..31 of 32");
    int w, h, comp;
    unsigned char *dec = stbi_load_from_memory((unsigned char *)png, (int)n, &w, &h, &comp, 4);
    assert_non_null(dec);
    assert_int_equal(w, 960), assert_int_equal(h, 600);
    /* the three variants' lines are drawn (the legend alone is a few dozen pixels each) */
    for (int v = 0; v < 3; v++) {
        long k = count_near(dec, w, h, palette(v));
        printf("precision view: %ld pixels of variant %d's colour\n", k, v + 1);
        assert_true(k > 300);
    }
    stbi_image_free(dec);
    free(png);
    /* the series the view drew, at the same selection */
    snprintf(path, sizeof path, "%s/p.csv", d);
    char *csv;
    assert_int_equal(file_read_all(path, 1 << 20, &csv, NULL, &e), 0);
    assert_non_null(strstr(csv, "token,layer,head,lane,probe,value\n0,1,1,"));
    assert_non_null(strstr(csv, "\n31,1,1,"));
    free(csv);
    snprintf(path, sizeof path, "%s/p.csv.json", d);
    assert_int_equal(file_read_all(path, 1 << 20, &csv, NULL, &e), 0);
    assert_non_null(strstr(csv, "\"mixer\":\t\"precision"));
    free(csv);
    /* nothing run at all, and the demo preview */
    rc = run_mixscope(&out, "-c 'export png precision %s/q.png'", d);
    assert_int_equal(rc, 1);
    assert_non_null(strstr(out, "no probes recorded yet"));
    free(out);
    rc = run_mixscope(&out, "-c 'export png precision %s/q.png demo=40'", d);
    if (rc != 0) fail_msg("export png precision demo=40: %s", out);
    assert_non_null(strstr(out, "tokens 0..39"));
    free(out);
    /* no display: view says how to export instead */
    char *display = getenv("DISPLAY") ? strdup(getenv("DISPLAY")) : NULL;
    unsetenv("DISPLAY");
    rc = run_mixscope(&out, "-c 'view precision'");
    assert_int_equal(rc, 0);
    assert_non_null(strstr(out, "export png precision precision.png"));
    free(out);
    if (display) setenv("DISPLAY", display, 1), free(display);
    test_rmdir(d);
}

/* ---- the binary ---- */

/* memmem, which C11 lacks */
static const char *find_bytes(const char *h, size_t n, const char *needle, size_t k) {
    for (size_t i = 0; i + k <= n; i++)
        if (!memcmp(h + i, needle, k)) return h + i;
    return NULL;
}

/* A minimal XML well-formedness check: every tag closed in order, attributes quoted, the
 * prolog, comments and CDATA skipped. Returns the number of elements, or -1. */
static int xml_elements(const char *x, const char *name, int *named) {
    const char *stack[256];
    size_t len[256];
    int depth = 0, count = 0;
    *named = 0;
    for (const char *p = x; (p = strchr(p, '<'));) {
        if (!strncmp(p, "<?", 2) || !strncmp(p, "<!--", 4) || !strncmp(p, "<!", 2)) {
            const char *end = strstr(p, !strncmp(p, "<!--", 4) ? "-->" : ">");
            if (!end) return -1;
            p = end + 1;
            continue;
        }
        const char *gt = strchr(p, '>');
        if (!gt) return -1;
        for (const char *q = p; q < gt; q++) /* quoted attribute values may not hold '<' */
            if (*q == '<' && q != p) return -1;
        if (p[1] == '/') {
            size_t n = strcspn(p + 2, " >");
            if (depth == 0 || len[depth - 1] != n || strncmp(stack[depth - 1], p + 2, n)) return -1;
            depth--;
        } else {
            size_t n = strcspn(p + 1, " />\n");
            count++;
            if (strlen(name) == n && !strncmp(p + 1, name, n)) (*named)++;
            if (gt[-1] != '/') {
                if (depth == 256) return -1;
                stack[depth] = p + 1, len[depth] = n, depth++;
            }
        }
        p = gt + 1;
    }
    return depth == 0 ? count : -1;
}

/* export svg / pdf: one drawing as vectors, with the provenance and what the figure shows in
 * the metadata; scale= and dpi= on PNG; a file name that names another format is refused */
static void test_vector_exports(void **st) {
    (void)st;
    char *d = test_tmpdir(), *out;
    int rc = run_mixscope(&out,
                          "-c 'mixer gdn kaczmarz heads=2; stream keys 40 seed=2; run; "
                          "export svg kaczmarz %s/k.svg; export pdf state %s/s.pdf layer=1; "
                          "export png kaczmarz %s/k2.png scale=2; export png state %s/k3.png "
                          "dpi=48 width=640 height=400; export png state %s/noext'",
                          d, d, d, d, d);
    if (rc != 0) fail_msg("exports: %s", out);
    free(out);
    char path[600], *text;
    size_t n;
    err e = {{0}};
    snprintf(path, sizeof path, "%s/k.svg", d);
    assert_int_equal(file_read_all(path, 1 << 26, &text, &n, &e), 0);
    int paths, entries, shows;
    int elems = xml_elements(text, "path", &paths);
    assert_true(elems > 100);
    assert_true(paths > 20); /* glyphs and series drawn as paths */
    xml_elements(text, "mixscope:entry", &entries);
    xml_elements(text, "mixscope:shows", &shows);
    assert_true(entries >= 8 && shows >= 10);
    assert_non_null(strstr(text, "width=\"1280pt\" height=\"800pt\""));
    assert_non_null(strstr(
        text, "<title>Kaczmarz / delta rule: write strength, residuals, relaxation</title>"));
    assert_non_null(strstr(text, "<mixscope:entry key=\"View\">kaczmarz</mixscope:entry>"));
    assert_non_null(strstr(text, "<mixscope:entry key=\"Commands\">mixer gdn kaczmarz heads=2; "
                                 "stream keys 40 seed=2; run</mixscope:entry>"));
    assert_non_null(strstr(text, "<mixscope:shows kind=\"axis\">token</mixscope:shows>"));
    assert_non_null(strstr(text, "<mixscope:shows kind=\"series\">"));
    assert_non_null(strstr(text, "<mixscope:shows kind=\"panel\">relaxation"));
    free(text);
    snprintf(path, sizeof path, "%s/s.pdf", d);
    assert_int_equal(file_read_all(path, 1 << 26, &text, &n, &e), 0);
    assert_true(n > 1000 && !memcmp(text, "%PDF-", 5));
    /* "state S after token 39  [16 × 16]": not ASCII, so UTF-16 (FEFF "stat...") */
    assert_non_null(find_bytes(text, n, "/Title <FEFF0073007400610074006500200053", 40));
    assert_non_null(find_bytes(text, n, "/Keywords", 9));
    /* "mixscope 0.1.0 (commit ...)": parentheses make cairo write UTF-16 */
    assert_non_null(find_bytes(text, n, "/Creator <FEFF006D0069007800730063006F00700065", 46));
    free(text);
    /* scale=2: twice the pixels a side; dpi=48: half */
    int w, h, comp;
    snprintf(path, sizeof path, "%s/k2.png", d);
    unsigned char *img = stbi_load(path, &w, &h, &comp, 4);
    assert_non_null(img);
    assert_int_equal(w, 2560), assert_int_equal(h, 1600);
    stbi_image_free(img);
    snprintf(path, sizeof path, "%s/k3.png", d);
    img = stbi_load(path, &w, &h, &comp, 4);
    assert_non_null(img);
    assert_int_equal(w, 320), assert_int_equal(h, 200);
    stbi_image_free(img);
    /* refusals: another format's extension, both scale and dpi, out of range */
    rc = run_mixscope(&out, "-c 'export png state %s/x.svg demo=1'", d);
    assert_int_equal(rc, 1);
    expect_has(out, "export png: ");
    expect_has(out, "x.svg names a svg file; use export svg, or a .png name");
    free(out);
    rc = run_mixscope(&out, "-c 'export svg state %s/x.pdf demo=1'", d);
    assert_int_equal(rc, 1);
    expect_has(out, "names a pdf file; use export pdf");
    free(out);
    rc = run_mixscope(&out, "-c 'export png state %s/y.png demo=1 scale=2 dpi=300'", d);
    assert_int_equal(rc, 1);
    expect_has(out, "scale= and dpi= say the same thing");
    free(out);
    rc = run_mixscope(&out, "-c 'export png state %s/y.png demo=1 scale=9'", d);
    assert_int_equal(rc, 1);
    expect_has(out, "must lie in 0.25..8");
    free(out);
    snprintf(path, sizeof path, "%s/x.svg", d);
    assert_int_equal(access(path, F_OK), -1); /* nothing written */
    /* set title and set labels reach the figure; scatter names a missing probe */
    rc =
        run_mixscope(&out,
                     "-c \"mixer gdn kaczmarz:eta=0.5; stream keys 30 norms=0.1..5; run; set title "
                     "'GDN against ours'; set labels GDN,Kaczmarz; export svg scatter %s/t.svg; "
                     "export png scatter %s/u.png x=nosuch\"",
                     d, d);
    assert_int_equal(rc, 1);
    expect_has(out, "view scatter: no probe 'nosuch' in the trace");
    free(out);
    snprintf(path, sizeof path, "%s/t.svg", d);
    assert_int_equal(file_read_all(path, 1 << 26, &text, &n, &e), 0);
    expect_has(text, "<title>GDN against ours</title>");
    expect_has(text, "<mixscope:shows kind=\"series\">Kaczmarz</mixscope:shows>");
    expect_has(text, "<mixscope:shows kind=\"axis\">k_norm</mixscope:shows>");
    expect_has(text, "<mixscope:entry key=\"Mixer\">gdn,kaczmarz:eta=0.5</mixscope:entry>");
    free(text);
    test_rmdir(d);
}

static void test_export_commands(void **st) {
    (void)st;
    char *d = test_tmpdir(), *out;
    int rc = run_mixscope(&out,
                          "-c 'export png kalman %s/k.png demo=40 layer=0 head=1 index=9 "
                          "width=800 height=500'",
                          d);
    if (rc != 0) fail_msg("export png: %s", out);
    free(out);
    char path[600];
    snprintf(path, sizeof path, "%s/k.png", d);
    char *png;
    size_t n;
    err e = {{0}};
    assert_int_equal(file_read_all(path, 1 << 24, &png, &n, &e), 0);
    char val[300];
    assert_int_equal(png_find_text((unsigned char *)png, n, "View", val, sizeof val), 0);
    assert_string_equal(val, "kalman");
    assert_int_equal(png_find_text((unsigned char *)png, n, "Head", val, sizeof val), 0);
    assert_string_equal(val, "1");
    assert_int_equal(png_find_text((unsigned char *)png, n, "Mixer", val, sizeof val), 0);
    assert_string_equal(val, "kalman");
    assert_int_equal(png_find_text((unsigned char *)png, n, "Tokens", val, sizeof val), 0);
    assert_string_equal(val, "0..39 of 40");
    assert_int_equal(png_find_text((unsigned char *)png, n, "Command", val, sizeof val), 0);
    assert_non_null(strstr(val, "export png kalman"));
    assert_int_equal(png_find_text((unsigned char *)png, n, "Colour range", val, sizeof val), 0);
    assert_non_null(strstr(val, "(log10)"));
    assert_int_equal(png_find_text((unsigned char *)png, n, "Checkpoint SHA-256", val, sizeof val),
                     0);
    int w, h, comp;
    unsigned char *dec = stbi_load_from_memory((unsigned char *)png, (int)n, &w, &h, &comp, 4);
    assert_non_null(dec);
    assert_int_equal(w, 800), assert_int_equal(h, 500);
    stbi_image_free(dec);
    free(png);

    /* a model run, then CSV of a probe the model recorded */
    rc = run_mixscope(&out,
                      "-c 'model random gdn; prompt abcdefghij; run; export csv beta "
                      "%s/b.csv layer=1 head=0; export png state %s/s.png'",
                      d, d);
    if (rc != 0) fail_msg("model export: %s", out);
    free(out);
    snprintf(path, sizeof path, "%s/b.csv", d);
    char *csv;
    assert_int_equal(file_read_all(path, 1 << 20, &csv, NULL, &e), 0);
    assert_non_null(strstr(csv, "token,layer,head,lane,probe,value\n0,1,0,gdn,beta,"));
    assert_non_null(strstr(csv, "\n9,1,0,gdn,beta,"));
    free(csv);
    snprintf(path, sizeof path, "%s/b.csv.json", d);
    assert_int_equal(file_read_all(path, 1 << 20, &csv, NULL, &e), 0);
    assert_non_null(strstr(csv, "\"probe\":\t\"beta: "));
    free(csv);

    /* errors: unknown view, unknown key, unwritable path, no trace, no display */
    rc = run_mixscope(&out, "-c 'export png nosuch x.png demo=1'");
    assert_int_equal(rc, 1);
    assert_non_null(strstr(out, "unknown view 'nosuch' (kaczmarz"));
    free(out);
    rc = run_mixscope(&out, "-c 'export png state x.png demo=1 colour=red'");
    assert_int_equal(rc, 1);
    assert_non_null(strstr(out, "unknown option 'colour'"));
    free(out);
    rc = run_mixscope(&out, "-c 'export png state %s/none/x.png demo=1'", d);
    assert_int_equal(rc, 1);
    assert_non_null(strstr(out, "none/x.png: cannot write"));
    free(out);
    rc = run_mixscope(&out, "-c 'export png state x.png'");
    assert_int_equal(rc, 1);
    assert_non_null(strstr(out, "no probes recorded yet"));
    free(out);
    rc = run_mixscope(&out, "-c 'export csv nosuch x.csv demo=1'");
    assert_int_equal(rc, 1);
    assert_non_null(strstr(out, "no probe 'nosuch'"));
    free(out);
    char *display = getenv("DISPLAY") ? strdup(getenv("DISPLAY")) : NULL;
    unsetenv("DISPLAY");
    rc = run_mixscope(&out, "-c 'view kalman'");
    assert_int_equal(rc, 0);
    assert_non_null(strstr(out, "no display"));
    assert_non_null(strstr(out, "export png kalman"));
    free(out);
    if (display) setenv("DISPLAY", display, 1), free(display);
    test_rmdir(d);
}

/* ---- live windows under Xvfb ---- */

typedef struct live {
    const char *view;
    int T;
    trace tr;
} live;

static const trace *live_trace(void *ctx, const view *v) {
    (void)v;
    return &((live *)ctx)->tr;
}

/* space: one more token; the demo stream is the same prefix for every T */
static int live_step(void *ctx, err *e) {
    live *l = ctx;
    trace_free(&l->tr);
    trace_init(&l->tr);
    return demo_trace(&l->tr, l->view, ++l->T, 1, e);
}

static pid_t xvfb_start(void) {
    int fds[2];
    if (pipe(fds)) return -1;
    pid_t pid = fork();
    if (pid == 0) {
        close(fds[0]);
        int null = open("/dev/null", O_WRONLY);
        if (null >= 0) dup2(null, 2), dup2(null, 1);
        char fd[16];
        snprintf(fd, sizeof fd, "%d", fds[1]);
        /* -noreset: an X server resets when its last client leaves, and the display check's
         * connection is the first to leave; a window opened during that reset fails ("x11 not
         * available", seen once under load) */
        execlp("Xvfb", "Xvfb", "-displayfd", fd, "-screen", "0", "1280x1024x24", "-nolisten", "tcp",
               "-noreset", (char *)NULL);
        _exit(127);
    }
    close(fds[1]);
    /* read through the newline: Xvfb dies if the pipe closes while it still writes */
    char buf[32] = "";
    ssize_t n = 0, r;
    while (pid > 0 && n < (ssize_t)sizeof buf - 1 &&
           (r = read(fds[0], buf + n, sizeof buf - 1 - n)) > 0) {
        n += r;
        if (memchr(buf, '\n', (size_t)n)) break;
    }
    close(fds[0]);
    if (n <= 0) {
        if (pid > 0) kill(pid, SIGTERM), waitpid(pid, NULL, 0);
        return -1;
    }
    buf[n] = 0;
    char disp[40];
    snprintf(disp, sizeof disp, ":%d", atoi(buf));
    setenv("DISPLAY", disp, 1);
    return pid;
}

static uint32_t be32(const unsigned char *p) {
    return (uint32_t)p[0] << 24 | (uint32_t)p[1] << 16 | (uint32_t)p[2] << 8 | p[3];
}

static int mask_shift(uint32_t m) {
    int s = 0;
    while (m && !(m & 1)) m >>= 1, s++;
    return s;
}

/* Captures X window `id` with xwd into c (RGB, alpha 255). 0, or -1 when xwd fails. */
static int xwd_capture(unsigned long id, canvas *c) {
    char cmd[200], path[] = "/tmp/mixscope-xwd-XXXXXX";
    int fd = mkstemp(path);
    if (fd < 0) return -1;
    close(fd);
    snprintf(cmd, sizeof cmd, "xwd -silent -id 0x%lx -out %s 2>/dev/null", id, path);
    char *d = NULL;
    size_t n = 0;
    err e = {{0}};
    int ok = system(cmd) == 0 && file_read_all(path, 64u << 20, &d, &n, &e) == 0 && n >= 100;
    unlink(path);
    if (!ok) return free(d), -1;
    const unsigned char *h = (const unsigned char *)d;
    uint32_t hsize = be32(h), w = be32(h + 16), hh = be32(h + 20), order = be32(h + 28),
             bpp = be32(h + 44), bpl = be32(h + 48), rm = be32(h + 56), gm = be32(h + 60),
             bm = be32(h + 64), ncolors = be32(h + 76);
    size_t off = hsize + (size_t)ncolors * 12;
    if (bpp != 32 || off + (size_t)bpl * hh > n || canvas_init(c, (int)w, (int)hh, &e))
        return free(d), -1;
    for (uint32_t y = 0; y < hh; y++)
        for (uint32_t x = 0; x < w; x++) {
            const unsigned char *q = h + off + (size_t)y * bpl + (size_t)x * 4;
            uint32_t v = order ? be32(q)
                               : (uint32_t)q[0] | (uint32_t)q[1] << 8 | (uint32_t)q[2] << 16 |
                                     (uint32_t)q[3] << 24;
            uint8_t *p = c->px + ((size_t)y * w + x) * 4;
            p[0] = (uint8_t)((v & rm) >> mask_shift(rm)),
            p[1] = (uint8_t)((v & gm) >> mask_shift(gm));
            p[2] = (uint8_t)((v & bm) >> mask_shift(bm)), p[3] = 255;
        }
    c->stale = 0; /* px holds the captured window */
    free(d);
    return 0;
}

static void push_key(unsigned window, SDL_Keycode k) {
    SDL_Event ev;
    memset(&ev, 0, sizeof ev);
    ev.type = SDL_KEYDOWN;
    ev.key.windowID = window;
    ev.key.state = SDL_PRESSED;
    ev.key.keysym.sym = k;
    SDL_PushEvent(&ev);
}

/* The Xvfb of the live test; the teardown stops it even when an assertion jumped out. */
static pid_t live_xvfb = -1;

static int stop_xvfb(void **st) {
    (void)st;
    if (live_xvfb > 0) kill(live_xvfb, SIGTERM), waitpid(live_xvfb, NULL, 0);
    live_xvfb = -1;
    return 0;
}

static void test_live_windows(void **st) {
    (void)st;
    if (system("command -v Xvfb >/dev/null 2>&1") != 0) {
        printf("Xvfb is not installed: skipping the live-window test (apt-get install xvfb)\n");
        skip();
    }
    char *old = getenv("DISPLAY") ? strdup(getenv("DISPLAY")) : NULL;
    pid_t xvfb = live_xvfb = xvfb_start();
    if (xvfb < 0) {
        free(old);
        printf("Xvfb did not start: skipping the live-window test\n");
        skip();
    }
    setenv("SDL_VIDEODRIVER", "x11", 1);
    /* SDL loads the X libraries itself and unloads them at SDL_Quit; pinned here, the few blocks
     * they keep for the process stay attributable (LeakSanitizer suppresses them by name) */
    static const char *const XLIBS[] = {"libX11.so.6",    "libXext.so.6",     "libXcursor.so.1",
                                        "libXi.so.6",     "libXrandr.so.2",   "libXss.so.1",
                                        "libXfixes.so.3", "libxkbcommon.so.0"};
    for (size_t k = 0; k < sizeof XLIBS / sizeof XLIBS[0]; k++)
        dlopen(XLIBS[k], RTLD_NOW | RTLD_NODELETE);
    int have_xwd = system("command -v xwd >/dev/null 2>&1") == 0;
    char why[200];
    /* Xvfb reports its display number as it starts listening; give it a moment to accept */
    int ok = 0;
    for (int k = 0; k < 50 && !(ok = window_display_ok(why, sizeof why)); k++) usleep(100000);
    if (!ok) fail_msg("display %s: %s", getenv("DISPLAY"), why);
    live l = {0};
    window_hooks hooks = {&l, live_trace, live_step, NULL};
    err e = {{0}};
    window_set *ws = window_set_new(&hooks, &e);
    if (!ws) fail_msg("%s", e.msg);
    const int W = 800, H = 500;
    for (int i = 0; i < view_count; i++) {
        const view *v = view_all[i];
        l.view = v->name, l.T = 40;
        trace_init(&l.tr);
        assert_int_equal(demo_trace(&l.tr, v->name, l.T, 1, &e), 0);
        view_params p;
        view_params_default(&p);
        if (window_open(ws, v, &p, W, H, &e)) fail_msg("%s: %s", v->name, e.msg);
        window_pump(ws, 0);
        /* space steps a token, Right moves to head 1 */
        push_key(window_sdl_id(ws, 0), SDLK_SPACE);
        push_key(window_sdl_id(ws, 0), SDLK_RIGHT);
        for (int k = 0; k < 5; k++) window_pump(ws, 10);
        assert_int_equal(l.T, 41);
        const view_params *wp = window_params(ws, 0);
        if (!v->history) assert_int_equal(wp->head, 1); /* a training run has no heads */

        /* the offscreen render of the same trace and parameters */
        canvas want;
        assert_int_equal(canvas_init(&want, W, H, &e), 0);
        view_params q;
        view_params_default(&q);
        q.layer = wp->layer, q.head = wp->head, q.index = wp->index;
        assert_int_equal(v->draw(&want, &l.tr, &q, &e), 0);
        assert_int_equal(q.shown_to, 41);

        canvas got;
        if (window_capture(ws, 0, &got, &e)) fail_msg("%s: %s", v->name, e.msg);
        assert_int_equal(got.w, W), assert_int_equal(got.h, H);
        if (memcmp(got.px, canvas_pixels(&want), (size_t)W * H * 4) != 0)
            fail_msg("view %s: the window's pixels differ from the offscreen render", v->name);
        canvas_free(&got);
        if (have_xwd) {
            SDL_Delay(50);
            window_pump(ws, 0);
            canvas x;
            if (xwd_capture(window_x11_id(ws, 0), &x) == 0) {
                assert_int_equal(x.w, W), assert_int_equal(x.h, H);
                long bad = 0;
                for (size_t k = 0; k < (size_t)W * H; k++)
                    bad += memcmp(x.px + 4 * k, want.px + 4 * k, 3) != 0;
                if (bad) fail_msg("view %s: xwd sees %ld pixels that differ", v->name, bad);
                canvas_free(&x);
            } else {
                fail_msg("view %s: xwd could not capture window 0x%lx", v->name,
                         window_x11_id(ws, 0));
            }
        }
        canvas_free(&want);
        /* q closes the window */
        push_key(window_sdl_id(ws, 0), SDLK_q);
        assert_int_equal(window_pump(ws, 10), 0);
        trace_free(&l.tr);
    }
    /* several windows at once, each with its own view */
    l.view = "kaczmarz", l.T = 20;
    trace_init(&l.tr);
    assert_int_equal(demo_trace(&l.tr, "kaczmarz", l.T, 1, &e), 0);
    view_params p;
    view_params_default(&p);
    assert_int_equal(window_open(ws, view_find("kaczmarz"), &p, 640, 400, &e), 0);
    assert_int_equal(window_open(ws, view_find("state"), &p, 640, 400, &e), 0);
    assert_int_equal(window_pump(ws, 0), 2);
    window_close_all(ws);
    assert_int_equal(window_count(ws), 0);
    trace_free(&l.tr);
    window_set_free(ws);
    stop_xvfb(NULL);
    if (old)
        setenv("DISPLAY", old, 1), free(old);
    else
        unsetenv("DISPLAY");
}

int main(void) {
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_canvas_fill_and_clip),
        cmocka_unit_test(test_canvas_text_wrap),
        cmocka_unit_test(test_canvas_line_and_text),
        cmocka_unit_test(test_colormap),
        cmocka_unit_test(test_plot_format_and_axes),
        cmocka_unit_test(test_sha256),
        cmocka_unit_test(test_png_provenance_and_pixels),
        cmocka_unit_test(test_csv),
        cmocka_unit_test(test_recall_readback),
        cmocka_unit_test(test_views_on_empty_and_short_traces),
        cmocka_unit_test(test_view_probes_errors),
        cmocka_unit_test(test_golden_images),
        cmocka_unit_test(test_views_deterministic),
        cmocka_unit_test(test_precision_demo),
        cmocka_unit_test(test_precision_view_commands),
        cmocka_unit_test(test_export_commands),
        cmocka_unit_test(test_vector_exports),
        cmocka_unit_test_teardown(test_live_windows, stop_xvfb),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
