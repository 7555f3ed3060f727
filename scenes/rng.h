/* rng.h: the generators' random numbers. A seeded xorshift64* stream: the same seed gives the same
 * prompt or stream on every machine (no libc rand, no global state). */
#ifndef MIXSCOPE_SCENES_RNG_H
#define MIXSCOPE_SCENES_RNG_H

#include <math.h>
#include <stdint.h>

typedef struct srng {
    uint64_t s;
} srng;

static inline srng srng_seed(uint64_t seed) {
    /* splitmix64 of the seed, so seeds 0, 1, 2 start far apart and the state is never 0 */
    uint64_t z = seed + 0x9E3779B97F4A7C15ull;
    z = (z ^ (z >> 30)) * 0xBF58476D1CE4E5B9ull;
    z = (z ^ (z >> 27)) * 0x94D049BB133111EBull;
    z ^= z >> 31;
    srng r = {z ? z : 0x2545F4914F6CDD1Dull};
    return r;
}

static inline uint64_t srng_next(srng *r) {
    r->s ^= r->s >> 12, r->s ^= r->s << 25, r->s ^= r->s >> 27;
    return r->s * 2685821657736338717ull;
}

/* uniform in [0, 1) */
static inline double srng_uniform(srng *r) {
    return (double)(srng_next(r) >> 11) * (1.0 / 9007199254740992.0);
}

/* uniform integer in [0, n) (n >= 1); the modulo bias is below 2^-40 for the sizes used here */
static inline int srng_below(srng *r, int n) {
    if (n <= 1) return 0;
    return (int)(srng_next(r) % (uint64_t)n);
}

/* standard normal (Box-Muller) */
static inline double srng_normal(srng *r) {
    double u = srng_uniform(r), v = srng_uniform(r);
    if (u < 1e-300) u = 1e-300;
    return sqrt(-2.0 * log(u)) * cos(6.283185307179586 * v);
}

#endif
