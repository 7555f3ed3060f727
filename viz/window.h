/* window.h: SDL2 windows that show views live.
 *
 * A window owns a canvas, a view and its parameters; it redraws when the trace changes (new tokens,
 * a new state snapshot) or its parameters do, and uploads the canvas unchanged, so the window shows
 * exactly the pixels `export png` writes. Several windows can be open at once; all SDL calls happen
 * in window_pump, on the caller's thread, between commands (the REPL calls it while waiting for
 * input), so the trace is never read while a command changes it.
 *
 * Keys in a window: space steps one token (the step hook), Left/Right change the head, Up/Down the
 * layer, [ and ] the index (Kalman lane, wide-probe element), s saves a PNG (the save hook),
 * q or Escape closes the window. */
#ifndef MIXSCOPE_WINDOW_H
#define MIXSCOPE_WINDOW_H

#include <stddef.h>

#include "../core/err.h"
#include "../core/trace.h"
#include "canvas.h"
#include "view.h"

typedef struct window_hooks {
    void *ctx;
    /* The trace view v draws; asked before every redraw (the caller may move or grow it). */
    const trace *(*trace)(void *ctx, const view *v);
    /* Space: advance one token. NULL: space does nothing. */
    int (*step)(void *ctx, err *e);
    /* s: write the canvas as a PNG, its path into `path`. NULL: a plain PNG in the working
     * folder, mixscope-VIEW-N.png. */
    int (*save)(void *ctx, canvas *c, const view *v, const view_params *p, char *path, size_t n,
                err *e);
} window_hooks;

typedef struct window_set window_set;

/* 1 when a window can be opened here (a display is set and SDL's video starts); otherwise 0 and
 * the reason in why. Starts nothing that stays running. */
int window_display_ok(char *why, size_t n);

/* Starts SDL video; NULL with a message when there is no display. */
window_set *window_set_new(const window_hooks *hooks, err *e);
/* Closes every window and stops SDL video. */
void window_set_free(window_set *ws);

/* Opens a window of w x h pixels showing view v with parameters p and draws it. */
int window_open(window_set *ws, const view *v, const view_params *p, int w, int h, err *e);
int window_count(const window_set *ws);
void window_close_all(window_set *ws);

/* Handles pending events (keys, close, resize) and redraws the windows whose trace or parameters
 * changed; with wait_ms > 0 first waits up to that long for an event. Returns the number of open
 * windows. Messages (a failed step, a saved file) go to stderr. */
int window_pump(window_set *ws, int wait_ms);

/* Window i's view parameters as its keys have left them. */
const view_params *window_params(const window_set *ws, int i);
/* The pixels window i shows, read back from its renderer into `out` (canvas_init'ed here). */
int window_capture(window_set *ws, int i, canvas *out, err *e);
/* SDL's id of window i (for synthetic key events in tests), and its X11 window id (0 when the
 * video driver is not X11), for capture from outside with xwd. */
unsigned window_sdl_id(const window_set *ws, int i);
unsigned long window_x11_id(const window_set *ws, int i);

#endif
