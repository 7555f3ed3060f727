/* window.c: views in SDL2 windows (software renderer, the canvas uploaded 1:1). */
#include "window.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <SDL.h>
#include <SDL_syswm.h>

#include "plot.h"

#define WINDOW_MAX 16

typedef struct vwin {
    SDL_Window *win;
    SDL_Renderer *ren;
    SDL_Texture *tex;
    canvas cv;
    const view *v;
    view_params p;
    /* what the last frame showed, to redraw only on change */
    const trace *last_tr;
    int64_t last_T, last_snap_t;
    int last_nseries, dirty;
} vwin;

struct window_set {
    window_hooks hooks;
    vwin w[WINDOW_MAX];
    int n;
};

int window_display_ok(char *why, size_t n) {
    const char *d = getenv("DISPLAY"), *wl = getenv("WAYLAND_DISPLAY");
    if ((!d || !*d) && (!wl || !*wl)) {
        snprintf(why, n, "no display (DISPLAY is not set)");
        return 0;
    }
    SDL_SetHint(SDL_HINT_NO_SIGNAL_HANDLERS, "1");
    if (SDL_InitSubSystem(SDL_INIT_VIDEO) != 0) {
        snprintf(why, n, "no display: %s", SDL_GetError());
        return 0;
    }
    /* a stale DISPLAY or WAYLAND_DISPLAY makes SDL fall back to a driver that draws nowhere:
     * a window there would wait forever for a viewer who cannot see it */
    const char *drv = SDL_GetCurrentVideoDriver();
    int real = drv && strcmp(drv, "offscreen") && strcmp(drv, "dummy") && strcmp(drv, "evdev");
    if (!real) snprintf(why, n, "no display (SDL found only its '%s' driver)", drv ? drv : "?");
    SDL_QuitSubSystem(SDL_INIT_VIDEO);
    return real;
}

window_set *window_set_new(const window_hooks *hooks, err *e) {
    /* ^C belongs to the REPL: SDL must not turn it into a quit event; and the window surface
     * needs no OpenGL (the canvas is copied as is) */
    SDL_SetHint(SDL_HINT_NO_SIGNAL_HANDLERS, "1");
    SDL_SetHint(SDL_HINT_FRAMEBUFFER_ACCELERATION, "0");
    if (SDL_InitSubSystem(SDL_INIT_VIDEO) != 0) {
        err_set(e, "cannot open a window: %s", SDL_GetError());
        return NULL;
    }
    window_set *ws = calloc(1, sizeof *ws);
    if (!ws) {
        SDL_QuitSubSystem(SDL_INIT_VIDEO);
        err_set(e, "out of memory");
        return NULL;
    }
    if (hooks) ws->hooks = *hooks;
    return ws;
}

static void close_one(window_set *ws, int i) {
    vwin *w = &ws->w[i];
    if (w->tex) SDL_DestroyTexture(w->tex);
    if (w->ren) SDL_DestroyRenderer(w->ren);
    if (w->win) SDL_DestroyWindow(w->win);
    canvas_free(&w->cv);
    memmove(&ws->w[i], &ws->w[i + 1], (size_t)(ws->n - i - 1) * sizeof ws->w[0]);
    ws->n--;
    memset(&ws->w[ws->n], 0, sizeof ws->w[0]);
}

void window_close_all(window_set *ws) {
    while (ws->n) close_one(ws, ws->n - 1);
}

void window_set_free(window_set *ws) {
    if (!ws) return;
    window_close_all(ws);
    free(ws);
    SDL_QuitSubSystem(SDL_INIT_VIDEO);
    SDL_Quit();
}

int window_count(const window_set *ws) {
    return ws ? ws->n : 0;
}

static const trace *current_trace(window_set *ws, const view *v) {
    static const trace empty; /* read-only: a view of nothing */
    const trace *tr = ws->hooks.trace ? ws->hooks.trace(ws->hooks.ctx, v) : NULL;
    return tr ? tr : &empty;
}

static int64_t snap_t(const trace *tr) {
    int k = trace_find_snapshot(tr, "state");
    return k < 0 ? -1 : tr->snaps[k].t;
}

static void set_title(vwin *w) {
    char t[256];
    snprintf(t, sizeof t,
             "mixscope: %s  layer %d head %d index %d  (space: step, arrows: head/layer, "
             "[ ]: index, s: save, q: close)",
             w->v->name, w->p.layer, w->p.head, w->p.index);
    SDL_SetWindowTitle(w->win, t);
}

/* Draws the view into the canvas (a failed draw shows its message instead) and presents it. */
static void redraw(window_set *ws, vwin *w) {
    const trace *tr = current_trace(ws, w->v);
    err e = {{0}};
    view_params p = w->p;
    if (w->v->draw(&w->cv, tr, &p, &e)) {
        box a = vu_header(&w->cv, w->v->name, tr, &p);
        vu_message(&w->cv, a, e.msg);
    }
    /* keep the clamped selection, so the keys move from what is shown */
    w->p.layer = p.layer, w->p.head = p.head, w->p.index = p.index;
    w->last_tr = tr, w->last_T = tr->T, w->last_nseries = tr->nseries, w->last_snap_t = snap_t(tr);
    w->dirty = 0;
    SDL_UpdateTexture(w->tex, NULL, canvas_pixels(&w->cv), w->cv.pw * 4);
    SDL_RenderClear(w->ren);
    SDL_RenderCopy(w->ren, w->tex, NULL, NULL);
    SDL_RenderPresent(w->ren);
    set_title(w);
}

static int make_surface(vwin *w, int width, int height, err *e) {
    canvas_free(&w->cv);
    if (w->tex) SDL_DestroyTexture(w->tex), w->tex = NULL;
    if (canvas_init(&w->cv, width, height, e)) return -1;
    w->tex = SDL_CreateTexture(w->ren, SDL_PIXELFORMAT_RGBA32, SDL_TEXTUREACCESS_STREAMING, width,
                               height);
    if (!w->tex) return err_set(e, "cannot create a texture: %s", SDL_GetError());
    return 0;
}

int window_open(window_set *ws, const view *v, const view_params *p, int width, int height,
                err *e) {
    if (ws->n == WINDOW_MAX) return err_set(e, "at most %d windows are open at once", WINDOW_MAX);
    vwin *w = &ws->w[ws->n];
    memset(w, 0, sizeof *w);
    w->v = v, w->p = *p;
    w->win = SDL_CreateWindow("mixscope", SDL_WINDOWPOS_UNDEFINED, SDL_WINDOWPOS_UNDEFINED, width,
                              height, SDL_WINDOW_SHOWN | SDL_WINDOW_RESIZABLE);
    if (!w->win) return err_set(e, "cannot open a window: %s", SDL_GetError());
    /* the software renderer copies the canvas 1:1: the window shows exactly the exported pixels */
    w->ren = SDL_CreateRenderer(w->win, -1, SDL_RENDERER_SOFTWARE);
    if (!w->ren || make_surface(w, width, height, e)) {
        if (!w->ren) err_set(e, "cannot create a renderer: %s", SDL_GetError());
        if (w->tex) SDL_DestroyTexture(w->tex);
        if (w->ren) SDL_DestroyRenderer(w->ren);
        SDL_DestroyWindow(w->win);
        canvas_free(&w->cv);
        memset(w, 0, sizeof *w);
        return -1;
    }
    ws->n++;
    redraw(ws, w);
    return 0;
}

static vwin *by_id(window_set *ws, Uint32 id, int *index) {
    for (int i = 0; i < ws->n; i++)
        if (SDL_GetWindowID(ws->w[i].win) == id) {
            if (index) *index = i;
            return &ws->w[i];
        }
    return NULL;
}

static void on_key(window_set *ws, vwin *w, int i, SDL_Keycode k) {
    err e = {{0}};
    switch (k) {
    case SDLK_SPACE:
        if (!ws->hooks.step) break;
        if (ws->hooks.step(ws->hooks.ctx, &e)) fprintf(stderr, "mixscope: step: %s\n", e.msg);
        /* every window of the trace redraws on the next check */
        break;
    case SDLK_RIGHT:
        w->p.head++, w->dirty = 1;
        break;
    case SDLK_LEFT:
        if (w->p.head > 0) w->p.head--, w->dirty = 1;
        break;
    case SDLK_UP:
        w->p.layer++, w->dirty = 1;
        break;
    case SDLK_DOWN:
        if (w->p.layer > 0) w->p.layer--, w->dirty = 1;
        break;
    case SDLK_RIGHTBRACKET:
        w->p.index++, w->dirty = 1;
        break;
    case SDLK_LEFTBRACKET:
        if (w->p.index > 0) w->p.index--, w->dirty = 1;
        break;
    case SDLK_s: {
        char path[512] = "";
        if (!ws->hooks.save) {
            fprintf(stderr, "mixscope: this window cannot save (use export png)\n");
            break;
        }
        view_params p = w->p;
        if (ws->hooks.save(ws->hooks.ctx, &w->cv, w->v, &p, path, sizeof path, &e))
            fprintf(stderr, "mixscope: save: %s\n", e.msg);
        else
            fprintf(stderr, "mixscope: saved %s\n", path);
        break;
    }
    case SDLK_q:
    case SDLK_ESCAPE:
        close_one(ws, i);
        break;
    default:
        break;
    }
}

int window_pump(window_set *ws, int wait_ms) {
    if (!ws) return 0;
    SDL_Event ev;
    int have = wait_ms > 0 && ws->n ? SDL_WaitEventTimeout(&ev, wait_ms) : SDL_PollEvent(&ev);
    for (; have; have = SDL_PollEvent(&ev)) {
        int i = 0;
        vwin *w;
        switch (ev.type) {
        case SDL_KEYDOWN:
            if ((w = by_id(ws, ev.key.windowID, &i))) on_key(ws, w, i, ev.key.keysym.sym);
            break;
        case SDL_WINDOWEVENT:
            if (!(w = by_id(ws, ev.window.windowID, &i))) break;
            if (ev.window.event == SDL_WINDOWEVENT_CLOSE) {
                close_one(ws, i);
            } else if (ev.window.event == SDL_WINDOWEVENT_SIZE_CHANGED) {
                err e = {{0}};
                if (make_surface(w, ev.window.data1, ev.window.data2, &e))
                    fprintf(stderr, "mixscope: resize: %s\n", e.msg), close_one(ws, i);
                else
                    w->dirty = 1;
            } else if (ev.window.event == SDL_WINDOWEVENT_EXPOSED) {
                w->dirty = 1;
            }
            break;
        default:
            break;
        }
    }
    for (int i = 0; i < ws->n; i++) {
        vwin *w = &ws->w[i];
        const trace *tr = current_trace(ws, w->v);
        if (w->dirty || w->last_tr != tr || w->last_T != tr->T || w->last_nseries != tr->nseries ||
            w->last_snap_t != snap_t(tr))
            redraw(ws, w);
    }
    return ws->n;
}

const view_params *window_params(const window_set *ws, int i) {
    return i >= 0 && i < ws->n ? &ws->w[i].p : NULL;
}

int window_capture(window_set *ws, int i, canvas *out, err *e) {
    if (i < 0 || i >= ws->n) return err_set(e, "no window %d", i);
    vwin *w = &ws->w[i];
    if (canvas_init(out, w->cv.w, w->cv.h, e)) return -1;
    /* read the frame back from the renderer: draw it again and read before presenting */
    SDL_RenderClear(w->ren);
    SDL_RenderCopy(w->ren, w->tex, NULL, NULL);
    int rc = SDL_RenderReadPixels(w->ren, NULL, SDL_PIXELFORMAT_RGBA32, out->px, out->pw * 4);
    SDL_RenderPresent(w->ren);
    out->stale = 0; /* px holds the window's frame, not the (empty) surface's */
    if (rc != 0) {
        canvas_free(out);
        return err_set(e, "cannot read the window back: %s", SDL_GetError());
    }
    return 0;
}

unsigned window_sdl_id(const window_set *ws, int i) {
    return i >= 0 && i < ws->n ? SDL_GetWindowID(ws->w[i].win) : 0;
}

unsigned long window_x11_id(const window_set *ws, int i) {
    if (i < 0 || i >= ws->n) return 0;
    SDL_SysWMinfo info;
    SDL_VERSION(&info.version);
    if (!SDL_GetWindowWMInfo(ws->w[i].win, &info)) return 0;
#if defined(SDL_VIDEO_DRIVER_X11)
    if (info.subsystem == SDL_SYSWM_X11) return (unsigned long)info.info.x11.window;
#endif
    return 0;
}
