/* cmd_tui.c: the ncurses dashboard (`tui`, `mixscope --tui`).
 *
 *   status line   model, mixer(s), device, token t of T, the selection
 *   left          sparklines of the selected probe for every head of the selected layer (the head
 *                 marked), then the other scalar probes of the selected head
 *   right         the state matrix of the layer and head as colour blocks (diverging: blue < 0 <
 *                 red; monochrome "+#" / "-#" cells without colour or with NO_COLOR set)
 *   message line  the last line a step printed, or an error
 *   key bar       Space step, r run, n/p head, l/L layer, v/V probe, 0 reset, ? help, q quit
 *
 * It reads only the session's probe trace (like the views) and steps through the same commands
 * as the REPL (`step`, `reset`), with their output captured for the message line. Everything is
 * laid out again from LINES x COLS on each frame, so a resize (KEY_RESIZE) just redraws. */
#define _XOPEN_SOURCE_EXTENDED 1
#include <langinfo.h>
#include <locale.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

/* curses.h declares a function named trace(), the name of our probe trace type: rename its
 * declaration out of the way (we never call it). */
#define trace ncurses_trace_function
#include <ncurses.h>
#undef trace

#include "../models/model.h"
#include "../scenes/raw.h"
#include "command.h"
#include "session.h"

/* colour pairs: 1 status, 2 key bar labels, 3 key bar keys, 4 marked head, 10.. heat levels */
enum { PAIR_STATUS = 1, PAIR_BAR, PAIR_KEY, PAIR_MARK, PAIR_HEAT = 10 };
#define HEAT_LEVELS 11 /* 5 negative, zero, 5 positive */

typedef struct tui {
    session *s;
    int layer, head;
    char probe[64]; /* the selected scalar series */
    int help;
    int colour, utf8;
    char msg[256];
    int64_t back; /* the sparklines end this many tokens before the latest (< and > scroll) */
} tui;

/* ---- trace access ---- */

static int is_scalar(const trace_series *se) {
    return se->width == 1;
}

/* The selected series index (first scalar one when the name is unknown), or -1. */
static int sel_series(tui *u) {
    const trace *tr = &u->s->eng.tr;
    int k = trace_find(tr, u->probe);
    if (k >= 0 && is_scalar(&tr->series[k])) return k;
    /* a sensible first choice: what the mixers are about */
    const char *pref[] = {"rho", "write_mean", "cor", "g", "state_norm", "out_norm"};
    for (int i = 0; i < 6; i++)
        if ((k = trace_find(tr, pref[i])) >= 0 && is_scalar(&tr->series[k])) break;
    if (k < 0)
        for (int i = 0; i < tr->nseries && k < 0; i++)
            if (is_scalar(&tr->series[i])) k = i;
    if (k >= 0) snprintf(u->probe, sizeof u->probe, "%s", tr->series[k].name);
    return k;
}

static void cycle_probe(tui *u, int dir) {
    const trace *tr = &u->s->eng.tr;
    int k = sel_series(u), n = tr->nseries;
    for (int i = 1; k >= 0 && i <= n; i++) {
        int j = ((k + dir * i) % n + n) % n;
        if (is_scalar(&tr->series[j])) {
            snprintf(u->probe, sizeof u->probe, "%s", tr->series[j].name);
            return;
        }
    }
}

static int n_layers(tui *u) {
    const trace *tr = &u->s->eng.tr;
    int L = 1;
    for (int i = 0; i < tr->nseries; i++)
        if (tr->series[i].layers > L) L = tr->series[i].layers;
    return L;
}

static int n_heads(tui *u) {
    int k = sel_series(u);
    return k >= 0 ? u->s->eng.tr.series[k].heads : 1;
}

static int total_tokens(session *s) {
    if (engine_raw_active(&s->eng)) return s->eng.raw->st.T;
    return s->eng.ntokens;
}

/* ---- drawing helpers ---- */

static void put_clipped(int y, int x, int w, const char *text) {
    if (w <= 0 || y < 0 || y >= LINES) return;
    mvaddnstr(y, x, text, w);
}

/* A sparkline of v[0..n) (NaN = gap) scaled to [lo, hi]. */
static void sparkline(tui *u, int y, int x, const float *v, int n, double lo, double hi) {
    static const char *const blocks[8] = {"\u2581", "\u2582", "\u2583", "\u2584",
                                          "\u2585", "\u2586", "\u2587", "\u2588"};
    static const char ascii[] = "_.,-~=*#";
    for (int i = 0; i < n; i++) {
        int lvl = 0;
        if (isnan(v[i])) { /* not recorded */
            mvaddch(y, x + i, ' ');
            continue;
        }
        if (isinf(v[i])) { /* off the scale: +inf at the top (half_life of no decay), -inf below */
            if (u->utf8)
                mvaddstr(y, x + i, v[i] > 0 ? "\u2191" : "\u2193");
            else
                mvaddch(y, x + i, v[i] > 0 ? '^' : 'v');
            continue;
        }
        if (hi > lo) lvl = (int)floor((v[i] - lo) / (hi - lo) * 7.999);
        lvl = lvl < 0 ? 0 : lvl > 7 ? 7 : lvl;
        if (u->utf8)
            mvaddstr(y, x + i, blocks[lvl]);
        else
            mvaddch(y, x + i, (chtype)ascii[lvl]);
    }
}

/* Values of series k at (layer, head) for tokens [t0, t1) into v. */
static void gather(const trace *tr, int k, int layer, int head, int64_t t0, int64_t t1, float *v) {
    const trace_series *se = &tr->series[k];
    int l = layer < se->layers ? layer : se->layers - 1,
        h = head < se->heads ? head : se->heads - 1;
    for (int64_t t = t0; t < t1; t++) v[t - t0] = *trace_at_lh(tr, k, t, l, h);
}

static void range_of(const float *v, int n, double *lo, double *hi) {
    *lo = INFINITY, *hi = -INFINITY;
    for (int i = 0; i < n; i++)
        if (isfinite(v[i])) {
            if (v[i] < *lo) *lo = v[i];
            if (v[i] > *hi) *hi = v[i];
        }
    if (*lo > *hi) *lo = 0, *hi = 1;
    /* a quantity that does not change (to 1e-4 of its size) is drawn flat at mid height, not
     * autoscaled into full-height noise of its last digits */
    double floor_span = 1e-4 * fmax(fabs(*lo), fabs(*hi));
    if (*hi - *lo <= floor_span) {
        double c = 0.5 * (*lo + *hi), half = floor_span > 0 ? floor_span : 1;
        *lo = c - half, *hi = c + half;
    }
}

/* ---- panels ---- */

static void draw_status(tui *u) {
    session *s = u->s;
    char mix[96] = "", line[512];
    if (engine_raw_active(&s->eng)) {
        for (int l = 0; l < s->eng.raw->nl; l++) {
            size_t n = strlen(mix);
            snprintf(mix + n, sizeof mix - n, "%s%s", l ? "," : "", s->eng.raw->lane[l].label);
        }
    } else if (s->eng.model) {
        int l = u->layer < s->eng.model->c.layers ? u->layer : 0;
        snprintf(mix, sizeof mix, "%s", s->eng.model->layers[l].mx->name);
    } else {
        snprintf(mix, sizeof mix, "none");
    }
    char model[80] = "none";
    if (s->eng.model)
        snprintf(model, sizeof model, "%s %dL", model_kind_name(s->eng.model->c.kind),
                 s->eng.model->c.layers);
    /* what changes first, so a narrow terminal still shows it */
    snprintf(line, sizeof line,
             " mixscope | t=%lld/%d | layer %d/%d head %d/%d | probe %s | model: %s | mixer: "
             "%s%s | device: %s",
             (long long)s->eng.tr.T, total_tokens(s), u->layer, n_layers(u) - 1, u->head,
             n_heads(u) - 1, u->probe[0] ? u->probe : "-", model, mix,
             engine_raw_active(&s->eng) ? " (raw)" : "",
             s->eng.device == DEVICE_GPU ? "gpu" : "cpu");
    if (u->colour) attron(COLOR_PAIR(PAIR_STATUS));
    attron(A_REVERSE * !u->colour | A_BOLD);
    mvhline(0, 0, ' ', COLS);
    put_clipped(0, 0, COLS, line);
    attroff(A_REVERSE | A_BOLD);
    if (u->colour) attroff(COLOR_PAIR(PAIR_STATUS));
}

static void draw_keybar(tui *u) {
    static const char *const keys[][2] = {{"Space", "Step"}, {"r", "Run"},   {"n/p", "Head"},
                                          {"l/L", "Layer"},  {"v", "Probe"}, {"0", "Reset"},
                                          {"?", "Help"},     {"q", "Quit"}};
    int x = 0, y = LINES - 1;
    move(y, 0);
    clrtoeol();
    for (size_t i = 0; i < sizeof keys / sizeof keys[0] && x < COLS; i++) {
        attron(A_BOLD);
        if (u->colour) attron(COLOR_PAIR(PAIR_KEY));
        put_clipped(y, x, COLS - x, keys[i][0]);
        if (u->colour) attroff(COLOR_PAIR(PAIR_KEY));
        attroff(A_BOLD);
        x += (int)strlen(keys[i][0]);
        if (u->colour)
            attron(COLOR_PAIR(PAIR_BAR));
        else
            attron(A_REVERSE);
        char lab[16];
        snprintf(lab, sizeof lab, "%-6s", keys[i][1]);
        put_clipped(y, x, COLS - x, lab);
        if (u->colour)
            attroff(COLOR_PAIR(PAIR_BAR));
        else
            attroff(A_REVERSE);
        x += (int)strlen(lab) + 1;
    }
}

/* Probes with a natural range are drawn on it, so a line tells where it is (rho at 1 is an
 * exact write, at 2 the contraction limit) and not only how it moves; values outside widen it. */
static void natural_range(const char *name, double *lo, double *hi) {
    static const struct {
        const char *name;
        double lo, hi;
    } R[] = {{"rho", 0, 2},        {"alpha", 0, 1},  {"gate_mean", 0, 1}, {"entropy_norm", 0, 1},
             {"max_weight", 0, 1}, {"sink_p", 0, 1}, {"cpa", 0, 1},       {"lla_cos", -1, 1}};
    for (size_t i = 0; i < sizeof R / sizeof R[0]; i++)
        if (!strcmp(name, R[i].name)) {
            if (!(*lo < R[i].lo)) *lo = R[i].lo;
            if (!(*hi > R[i].hi)) *hi = R[i].hi;
            return;
        }
}

static void draw_sparks(tui *u, int y0, int x0, int h, int w) {
    const trace *tr = &u->s->eng.tr;
    int k = sel_series(u);
    char line[256];
    if (k < 0 || tr->T == 0) {
        put_clipped(y0, x0, w, "no probes yet: Space steps a token, r runs them all");
        return;
    }
    const trace_series *se = &tr->series[k];
    int label = 6, valw = 11, sw = w - label - valw - 1;
    if (sw < 4) sw = 4;
    if (u->back > tr->T - 1) u->back = tr->T - 1; /* at least the first token stays in view */
    if (u->back < 0) u->back = 0;
    int64_t t1 = tr->T - u->back, t0 = t1 > sw ? t1 - sw : 0;
    int n = (int)(t1 - t0);
    float *v = malloc(((size_t)n * se->heads + 1) * sizeof *v);
    if (!v) return;
    for (int hd = 0; hd < se->heads; hd++) gather(tr, k, u->layer, hd, t0, t1, v + (size_t)hd * n);
    double lo, hi;
    range_of(v, n * se->heads, &lo, &hi);
    natural_range(se->name, &lo, &hi);
    char lab[64];
    snprintf(line, sizeof line, "%s (%s) layer %d, tokens %lld..%lld, %.4g..%.4g", se->name,
             session_layer_label(u->s, u->layer, lab, sizeof lab), u->layer, (long long)t0,
             (long long)t1 - 1, lo, hi);
    attron(A_BOLD);
    put_clipped(y0, x0, w, line);
    attroff(A_BOLD);
    int y = y0 + 1;
    for (int hd = 0; hd < se->heads && y < y0 + h; hd++, y++) {
        int mark = hd == u->head;
        if (mark) {
            attron(A_BOLD);
            if (u->colour) attron(COLOR_PAIR(PAIR_MARK));
        }
        snprintf(line, sizeof line, "%sh%-3d", mark ? ">" : " ", hd);
        put_clipped(y, x0, label, line);
        if (mark && u->colour) attroff(COLOR_PAIR(PAIR_MARK));
        sparkline(u, y, x0 + label, v + (size_t)hd * n, n, lo, hi);
        snprintf(line, sizeof line, " %10.4g", n ? v[(size_t)hd * n + n - 1] : NAN);
        put_clipped(y, x0 + label + n, valw + 1, line);
        if (mark) attroff(A_BOLD);
    }
    free(v);
    /* the other scalar probes of the selected head, each on its own scale */
    if (y + 2 > y0 + h) return;
    y++;
    snprintf(line, sizeof line, "head %d, layer %d: other probes", u->head, u->layer);
    attron(A_BOLD);
    put_clipped(y++, x0, w, line);
    attroff(A_BOLD);
    float *row = malloc(((size_t)n + 1) * sizeof *row);
    if (!row) return;
    int lw = 13;
    sw = w - lw - valw - 1;
    if (sw < 4) sw = 4;
    int64_t r0 = t1 > sw ? t1 - sw : 0; /* the same end as above (scrolled back with <) */
    int rn = (int)(t1 - r0);
    float *rv = realloc(row, ((size_t)rn + 1) * sizeof *rv);
    if (!rv) {
        free(row);
        return;
    }
    for (int i = 0; i < tr->nseries && y < y0 + h; i++) {
        const trace_series *o = &tr->series[i];
        if (i == k || !is_scalar(o) || u->layer >= o->layers) continue;
        gather(tr, i, u->layer, u->head, r0, t1, rv);
        int any = 0;
        for (int j = 0; j < rn; j++) any |= !isnan(rv[j]);
        if (!any) continue;
        range_of(rv, rn, &lo, &hi);
        natural_range(o->name, &lo, &hi);
        snprintf(line, sizeof line, "%-12.12s ", o->name);
        put_clipped(y, x0, lw, line);
        sparkline(u, y, x0 + lw, rv, rn, lo, hi);
        snprintf(line, sizeof line, " %10.4g", rv[rn - 1]);
        put_clipped(y, x0 + lw + rn, valw + 1, line);
        y++;
    }
    free(rv);
}

static int heat_level(double x, double mx) {
    if (!(mx > 0) || isnan(x)) return HEAT_LEVELS / 2;
    double r = x / mx;
    int l = (int)lround(r * 5);
    l = l < -5 ? -5 : l > 5 ? 5 : l;
    return l + 5;
}

/* One heat cell (2 columns) of level lv: a colour block, or a sign and a ramp character. */
static void heat_cell(tui *u, int y, int x, int lv) {
    if (u->colour) {
        attron(COLOR_PAIR(PAIR_HEAT + lv));
        mvaddstr(y, x, "  ");
        attroff(COLOR_PAIR(PAIR_HEAT + lv));
    } else {
        static const char ramp[] = " .:+*#";
        int m = abs(lv - 5);
        char cellc[3] = {m == 0 ? ' ' : lv < 5 ? '-' : '+', ramp[m], 0};
        mvaddstr(y, x, cellc);
    }
}

static void draw_state(tui *u, int y0, int x0, int h, int w) {
    const trace *tr = &u->s->eng.tr;
    int k = trace_find_snapshot(tr, "state");
    char line[256];
    if (k < 0 || tr->snaps[k].t < 0) {
        put_clipped(y0, x0, w, "state: none recorded (a KV cache has no matrix)");
        return;
    }
    const trace_snapshot *sn = &tr->snaps[k];
    int l = u->layer < sn->layers ? u->layer : sn->layers - 1;
    int hd = u->head < sn->heads ? u->head : sn->heads - 1;
    const float *S = trace_snapshot_at(tr, k, l, hd);
    double mx = 0, fro = 0;
    for (int i = 0; i < sn->rows * sn->cols; i++) {
        double a = fabs(S[i]);
        if (a > mx && isfinite(a)) mx = a;
        fro += (double)S[i] * S[i];
    }
    snprintf(line, sizeof line, "state layer %d head %d (%dx%d) after t=%lld, |S|=%.4g, max %.3g",
             l, hd, sn->rows, sn->cols, (long long)sn->t, sqrt(fro), mx);
    attron(A_BOLD);
    put_clipped(y0, x0, w, line);
    attroff(A_BOLD);
    /* cells of 2 columns; rows and columns pooled (max |x| keeps the sign) to fit */
    int gh = h - 1, gw = w / 2;
    if (gh < 1 || gw < 1) return;
    int R = sn->rows < gh ? sn->rows : gh, C = sn->cols < gw ? sn->cols : gw;
    for (int r = 0; r < R; r++) {
        int ra = r * sn->rows / R, rb = (r + 1) * sn->rows / R;
        for (int c = 0; c < C; c++) {
            int ca = c * sn->cols / C, cb = (c + 1) * sn->cols / C;
            float best = 0;
            for (int i = ra; i < rb; i++)
                for (int j = ca; j < cb; j++) {
                    float x = S[(size_t)i * sn->cols + j];
                    if (fabsf(x) > fabsf(best) || isnan(x)) best = x;
                }
            int lv = heat_level(best, mx);
            int y = y0 + 1 + r, x = x0 + 2 * c;
            heat_cell(u, y, x, lv);
        }
    }
    /* the scale under the matrix: -max .. 0 .. +max, cell by cell */
    if (R + 1 < h && mx > 0) {
        int y = y0 + 1 + R;
        snprintf(line, sizeof line, "%-9.3g", -mx);
        put_clipped(y, x0, w, line);
        int x = x0 + 10;
        for (int lv = 0; lv < HEAT_LEVELS && x + 2 < x0 + w; lv++, x += 2) {
            heat_cell(u, y, x, lv);
        }
        snprintf(line, sizeof line, " %+.3g", mx);
        if (x < x0 + w) put_clipped(y, x, x0 + w - x, line);
    }
}

static void draw_help(tui *u) {
    static const char *const text[] = {
        "mixscope dashboard",
        "",
        "Space   step one token (all layers or lanes record their probes)",
        "r       run every remaining token (any key stops)",
        "n / p   next / previous head",
        "l / L   next / previous layer (raw mode: lane)",
        "v / V   next / previous probe for the sparklines",
        "< / >   scroll the sparklines back / forward in tokens (also PageUp / PageDown)",
        "0       reset to token 0",
        "?       this help (any key closes it)",
        "q       quit the dashboard (back to the prompt)",
        "",
        "Sparklines: the selected probe per head over the latest tokens,",
        "one scale for all heads; the other probes of the head below,",
        "each on its own scale. State: blue < 0 < red (NO_COLOR: -/+).",
    };
    int n = (int)(sizeof text / sizeof text[0]), w = 68;
    int y0 = (LINES - n - 2) / 2, x0 = (COLS - w) / 2;
    if (y0 < 1) y0 = 1;
    if (x0 < 0) x0 = 0;
    for (int i = -1; i <= n; i++) {
        mvhline(y0 + 1 + i, x0, ' ', w < COLS ? w : COLS);
        if (i >= 0 && i < n) put_clipped(y0 + 1 + i, x0 + 2, w - 4, text[i]);
    }
    attron(A_BOLD);
    put_clipped(y0 + 1, x0 + 2, w - 4, text[0]);
    attroff(A_BOLD);
    (void)u;
}

static void draw(tui *u) {
    erase();
    if (LINES < 8 || COLS < 40) {
        put_clipped(0, 0, COLS, "terminal too small for the dashboard (40x8); q quits");
        refresh();
        return;
    }
    int nl = n_layers(u), nh = n_heads(u);
    if (u->layer >= nl) u->layer = nl - 1;
    if (u->head >= nh) u->head = nh - 1;
    draw_status(u);
    int body = LINES - 3; /* status, message, key bar */
    int lw = COLS >= 100 ? COLS * 3 / 5 : COLS >= 70 ? COLS / 2 : COLS;
    draw_sparks(u, 1, 0, body, lw - 1);
    if (lw < COLS) draw_state(u, 1, lw + 1, body, COLS - lw - 1);
    put_clipped(LINES - 2, 0, COLS, u->msg);
    draw_keybar(u);
    if (u->help) draw_help(u);
    refresh();
}

/* ---- acting ---- */

/* Runs a command with its output captured; the last line (or the error) becomes the message. */
static int act(tui *u, const char *cmd) {
    session *s = u->s;
    char *buf = NULL;
    size_t len = 0;
    FILE *mem = open_memstream(&buf, &len);
    FILE *saved = s->out;
    if (mem) s->out = mem;
    err e = {{0}};
    int rc = command_exec(s, cmd, &e);
    s->out = saved;
    if (mem) fclose(mem);
    if (rc) {
        snprintf(u->msg, sizeof u->msg, "%s: %s", cmd, e.msg);
    } else if (buf && len) {
        while (len && buf[len - 1] == '\n') buf[--len] = '\0';
        char *last = strrchr(buf, '\n');
        snprintf(u->msg, sizeof u->msg, "%s", last ? last + 1 : buf);
    }
    free(buf);
    session_sigint = 0;
    return rc;
}

static void run_all(tui *u) {
    session *s = u->s;
    nodelay(stdscr, TRUE);
    double t0 = session_now();
    long start = (long)s->eng.tr.T;
    while (s->eng.tr.T < total_tokens(s)) {
        if (act(u, "step 8")) break;
        draw(u);
        int ch = getch();
        if (ch != ERR && ch != KEY_RESIZE) {
            snprintf(u->msg, sizeof u->msg, "stopped at token %lld", (long long)s->eng.tr.T);
            break;
        }
    }
    double el = session_now() - t0;
    if (s->eng.tr.T >= total_tokens(s))
        snprintf(u->msg, sizeof u->msg, "ran to token %lld (%ld tokens, %.0f tokens/s)",
                 (long long)s->eng.tr.T - 1, (long)s->eng.tr.T - start,
                 el > 0 ? ((double)s->eng.tr.T - start) / el : 0.0);
    nodelay(stdscr, FALSE);
}

static void init_colours(tui *u) {
    u->colour = has_colors() && !(getenv("NO_COLOR") && *getenv("NO_COLOR"));
    if (!u->colour) return;
    start_color();
    use_default_colors();
    init_pair(PAIR_STATUS, COLOR_BLACK, COLOR_CYAN);
    init_pair(PAIR_BAR, COLOR_BLACK, COLOR_CYAN);
    init_pair(PAIR_KEY, COLOR_WHITE, -1);
    init_pair(PAIR_MARK, COLOR_YELLOW, -1);
    /* dark at zero, brighter with |x|: navy..blue below, dark red..red above */
    static const short c256[HEAT_LEVELS] = {21, 20, 19, 18, 17, 235, 52, 88, 124, 160, 196};
    static const short c8[HEAT_LEVELS] = {COLOR_BLUE,   COLOR_BLUE,  COLOR_CYAN,   COLOR_CYAN,
                                          COLOR_CYAN,   COLOR_BLACK, COLOR_YELLOW, COLOR_YELLOW,
                                          COLOR_YELLOW, COLOR_RED,   COLOR_RED};
    for (int i = 0; i < HEAT_LEVELS; i++)
        init_pair((short)(PAIR_HEAT + i), -1, COLORS >= 256 ? c256[i] : c8[i]);
}

static int run_tui(session *s, int argc, char **argv, const char *rest, err *e) {
    (void)argc, (void)argv, (void)rest;
    if (!isatty(STDIN_FILENO) || !isatty(STDOUT_FILENO))
        return err_set(e, "tui: needs a terminal (stdin and stdout)");
    /* initscr() exits the whole program on a terminal it does not know: newterm() says so and
     * the session goes on; a dumb terminal cannot place text, so it is refused too */
    const char *term = getenv("TERM");
    if (!term || !*term) return err_set(e, "tui: TERM is not set (the terminal type is unknown)");
    if (!strcmp(term, "dumb")) return err_set(e, "tui: TERM=dumb cannot draw the dashboard");
    SCREEN *scr = newterm(NULL, stdout, stdin);
    if (!scr) return err_set(e, "tui: unknown terminal type '%.40s' (TERM)", term);
    tui u = {.s = s};
    /* nothing loaded: the raw demo of the tour's first stop */
    if (!engine_raw_active(&s->eng) && !s->eng.model) {
        act(&u, "mixer gdn kaczmarz dk=16 dv=16");
        act(&u, "stream keys 256 norms=0.3..2");
        snprintf(u.msg, sizeof u.msg,
                 "nothing loaded: gdn beside kaczmarz on 256 keys of norms 0.3..2 (Space steps)");
    } else {
        snprintf(u.msg, sizeof u.msg, "Space steps a token, r runs, ? explains, q quits");
    }
    setlocale(LC_ALL, "");
    const char *cs = nl_langinfo(CODESET);
    u.utf8 = cs && (!strcmp(cs, "UTF-8") || !strcmp(cs, "utf8"));
    set_term(scr);
    cbreak();
    noecho();
    keypad(stdscr, TRUE);
    curs_set(0);
    init_colours(&u);
    int quit = 0;
    while (!quit) {
        draw(&u);
        int ch = getch();
        if (u.help && ch != KEY_RESIZE && ch != ERR) {
            u.help = 0;
            continue;
        }
        switch (ch) {
        case ' ':
            act(&u, "step");
            break;
        case 'r':
            run_all(&u);
            break;
        case 'n':
            u.head = (u.head + 1) % n_heads(&u);
            break;
        case 'p':
            u.head = (u.head + n_heads(&u) - 1) % n_heads(&u);
            break;
        case 'l':
            u.layer = (u.layer + 1) % n_layers(&u);
            break;
        case 'L':
            u.layer = (u.layer + n_layers(&u) - 1) % n_layers(&u);
            break;
        case 'v':
            cycle_probe(&u, 1);
            break;
        case 'V':
            cycle_probe(&u, -1);
            break;
        case '0':
            act(&u, "reset");
            break;
        case '<': /* back in time by half a window, > forward, > at the end follows new tokens */
        case KEY_PPAGE:
            u.back += COLS / 4;
            break;
        case '>':
        case KEY_NPAGE:
            u.back = u.back > COLS / 4 ? u.back - COLS / 4 : 0;
            break;
        case '?':
            u.help = 1;
            break;
        case 'q':
        case 27:
            quit = 1;
            break;
        case ERR:
            session_sigint = 0; /* ^C inside getch: the dashboard stays */
            break;
        default: /* KEY_RESIZE and anything else: redraw */
            break;
        }
    }
    endwin();
    delscreen(scr);
    return 0;
}

const command cmd_tui = {
    "tui",
    "",
    "the ncurses dashboard: sparklines per head, the state heatmap, stepping keys",
    "A full-screen dashboard over the session (as `mixscope --tui`): a status line\n"
    "(model, mixer, device, token t), sparklines of the selected probe for every head\n"
    "of a layer and of the other probes of the selected head, the state matrix as\n"
    "colour blocks (monochrome with NO_COLOR or without colour), the last message,\n"
    "and a key bar:\n"
    "  Space step   r run   n/p head   l/L layer   v/V probe   0 reset   ? help\n"
    "  q quit\n"
    "With nothing loaded it starts on gdn beside kaczmarz over 256 keys of varied\n"
    "norm. It needs a terminal; it survives resizing.",
    0,
    0,
    run_tui,
    0,
    NULL};
