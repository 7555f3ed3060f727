/* dump.h: a core's inputs and state as safetensors, in the layout `replay` reads, so any run of
 * the lab can be checked outside it (fla, a notebook) or replayed inside it.
 *
 *   export inputs FILE  layer (lane) L's core inputs for tokens from..to, each [1, n, H, W]
 *                       (W_1 inputs [1, n, H]) under the names replay reads (q k v g beta eta gk
 *                       r lambda_v ...), its static parameters, and its state before token
 *                       `from` under the initial-state names (h0 [1, H, K, V], lambda0, ...).
 *                       Recomputed by running the tokens again on the CPU (engine_capture).
 *   export state FILE   the state now: raw mode one lane's, model mode every layer's, the
 *                       key-value matrix as h [1, H, K, V] (model: layers.N.h) and other parts
 *                       under their own names (lambdaT, etaT, ...; model: layers.N.<name>).
 *
 * Metadata carries the source, the command, and for inputs the `replay` line that reproduces the
 * core's output ("replay": "gdn scale=0.25"). Written atomically. */
#ifndef MIXSCOPE_DUMP_H
#define MIXSCOPE_DUMP_H

#include <stddef.h>

#include "../core/err.h"

struct engine;

/* from/to -1: the first / last token run. replay_line gets "MIXER opt=value ..." for the print. */
int dump_inputs(struct engine *g, const char *path, int layer, int from, int to,
                const char *command, char *replay_line, size_t n, err *e);
/* layer -1: every layer (model mode) or lane 0 (raw mode). */
int dump_state(struct engine *g, const char *path, int layer, const char *command, int *ntensors,
               err *e);

#endif
