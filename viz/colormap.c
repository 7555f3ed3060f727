/* colormap.c: viridis, the diverging map and the line palette. */
#include "colormap.h"

#include <math.h>

/* viridis by Stefan van der Walt, Nathaniel Smith and Eric Firing (CC0, public domain): every 8th
 * entry of matplotlib's 256-entry table (and the last), as 8-bit RGB, interpolated linearly; the
 * difference from the full table is below one step of 8-bit colour. */
static const uint8_t VIRIDIS[33][3] = {
    {68, 1, 84},    {71, 13, 96},   {72, 24, 106},  {72, 35, 116},  {71, 45, 123},  {69, 55, 129},
    {66, 64, 134},  {62, 73, 137},  {59, 82, 139},  {55, 91, 141},  {51, 99, 141},  {47, 107, 142},
    {44, 114, 142}, {41, 122, 142}, {38, 130, 142}, {35, 137, 142}, {33, 145, 140}, {31, 152, 139},
    {31, 160, 136}, {34, 168, 132}, {40, 174, 128}, {50, 182, 122}, {63, 188, 115}, {78, 195, 107},
    {94, 201, 98},  {112, 207, 87}, {132, 212, 75}, {152, 216, 62}, {173, 220, 48}, {194, 223, 35},
    {216, 226, 25}, {236, 229, 27}, {253, 231, 37},
};

/* ColorBrewer RdBu (11 classes), reversed so that blue is negative. */
static const uint8_t DIVERGING[11][3] = {
    {5, 48, 97},     {33, 102, 172},  {67, 147, 195},  {146, 197, 222},
    {209, 229, 240}, {247, 247, 247}, {253, 219, 199}, {244, 165, 130},
    {214, 96, 77},   {178, 24, 43},   {103, 0, 31},
};

static rgba lerp_table(const uint8_t (*tab)[3], int n, double t) {
    double x = t * (n - 1);
    int i = (int)x;
    if (i >= n - 1) i = n - 2;
    double f = x - i;
    int r = (int)lround(tab[i][0] + (tab[i + 1][0] - tab[i][0]) * f);
    int g = (int)lround(tab[i][1] + (tab[i + 1][1] - tab[i][1]) * f);
    int b = (int)lround(tab[i][2] + (tab[i + 1][2] - tab[i][2]) * f);
    return rgb(r, g, b);
}

rgba cmap_nan(void) {
    return rgb(190, 190, 190);
}

rgba cmap_at(cmap_kind k, double t) {
    if (isnan(t)) return cmap_nan();
    if (t < 0) t = 0;
    if (t > 1) t = 1;
    return k == CMAP_DIVERGING ? lerp_table(DIVERGING, 11, t) : lerp_table(VIRIDIS, 33, t);
}

double cmap_t(double v, double lo, double hi, int log) {
    if (isnan(v)) return NAN;
    if (log) {
        if (!(v > 0) || !(lo > 0) || !(hi > 0)) return NAN;
        v = log10(v), lo = log10(lo), hi = log10(hi);
    }
    if (!(hi > lo)) return 0.5;
    return (v - lo) / (hi - lo);
}

rgba cmap_value(cmap_kind k, double v, double lo, double hi, int log) {
    return cmap_at(k, cmap_t(v, lo, hi, log));
}

rgba palette(int i) {
    /* Okabe-Ito without the yellow, which vanishes on white */
    static const uint8_t P[7][3] = {
        {0, 114, 178}, {213, 94, 0},   {0, 158, 115}, {204, 121, 167},
        {230, 159, 0}, {86, 180, 233}, {0, 0, 0},
    };
    i = ((i % 7) + 7) % 7;
    return rgb(P[i][0], P[i][1], P[i][2]);
}
