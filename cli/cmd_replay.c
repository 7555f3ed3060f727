/* cmd_replay.c: `replay MIXER FILE.safetensors [prefix=P] [out=FILE] [mixer options]`. */
#include <stdio.h>
#include <string.h>

#include "../diag/diag.h"
#include "../mixers/replay.h"
#include "command.h"
#include "session.h"

/* "gdn, deltanet, ..." */
static void mixer_names(char *buf, size_t n) {
    size_t off = 0;
    buf[0] = '\0';
    for (int i = 0; i < mixer_count && off < n; i++)
        if (mixer_all[i])
            off +=
                (size_t)snprintf(buf + off, n - off, "%s%s", off ? ", " : "", mixer_all[i]->name);
}

static int run_replay(session *s, int argc, char **argv, const char *rest, err *e) {
    (void)rest;
    const mixer_ops *m = mixer_find(argv[1]);
    if (!m) {
        char names[256];
        mixer_names(names, sizeof names);
        return err_set(e, "replay: unknown mixer '%.40s' (one of: %s)", argv[1], names);
    }
    opts o;
    if (opts_parse(&o, argc - 3, argv + 3, e)) return err_prefix(e, "replay");
    const char *prefix = opts_str(&o, "prefix", "");
    const char *out = opts_str(&o, "out", NULL);
    const char *layer = opts_str(&o, "layer", NULL), *layers = opts_str(&o, "layers", NULL);
    if (layer || layers) { /* every layer's dump in one file: diag/replay_layers.c */
        int lr = diag_replay_layers(s->out, m, argv[2], prefix, layer ? layer : layers, out, &o, e);
        opts_free(&o);
        return lr;
    }
    replay_result r;
    int rc = replay_run(m, argv[2], prefix, out, &o, &r, e);
    if (rc) {
        opts_free(&o);
        return err_prefix(e, "replay");
    }
    fprintf(s->out, "replay %s: B=%d T=%d H=%d dk=%d dv=%d  |o|=%.6g  prefill vs step: %.2e%s%s\n",
            m->name, r.B, r.T, r.H, r.dk, r.dv, r.o_norm, r.path_rel_err,
            r.nonfinite ? "  NON-FINITE OUTPUT" : "", out ? "" : "  (no out=: nothing written)");
    if (r.attributed)
        fprintf(s->out,
                "attribution: attn [B, H, T, T] (decay-only part attn_decay) and o_init; sum_j "
                "attn_ij v_j + o_init_i reproduces the step's o to %.2e\n",
                r.attr_rel_err);
    if (out) fprintf(s->out, "wrote %s\n", out);
    /* as step and run do: a non-finite output is a failure (the file is there to inspect) */
    if (r.nonfinite)
        rc = err_set(e, "replay %s: %ld non-finite values in the output%s", m->name,
                     (long)r.nonfinite, out ? " (written for inspection)" : "");
    opts_free(&o); /* prefix and out point into it */
    return rc;
}

const command cmd_replay = {
    "replay",
    "MIXER FILE.safetensors [prefix=P] [out=FILE.safetensors] [options]",
    "run one mixer core over raw tensors in fla's [B,T,H,D] layout",
    "Reads the mixer's inputs from FILE (names below, each with the prefix P), runs\n"
    "the parallel form for the output and final state and the step form for every\n"
    "probe, and writes o, the final state and probe.<name> for every probe to\n"
    "out=FILE. Cores take the tensors as given: no L2 norm and no gate computation\n"
    "  inside.\n"
    "  gdn       q k v [B,T,H,K|V], g (log-decay) and beta [B,T,H], optional h0\n"
    "            [B,H,K,V] -> o, hT\n"
    "  deltanet  as gdn without g\n"
    "  kaczmarz  as gdn with eta instead of beta; beta = eta/(|k|^2+eps), eps=\n"
    "            (default 1e-6)\n"
    "  gla       q k v, gk (per-key log-decay) [B,T,H,K], optional h0 -> o, hT\n"
    "  mamba2    q (C), k (B), v (dt*x), g (dt*A) [B,T,H], optional h0; scale=\n"
    "            (default 1/sqrt(K))\n"
    "  kalman    v and lambda_v [B,T,M], k and q [B,T,S], a and p [M,S], optional\n"
    "            lambda0, eta0 [B,M,S] -> o [B,T,M], lambdaT, etaT\n"
    "  kata      q k v; variant=m1|m2|sigma2|delta (beta for delta) -> o\n"
    "  parallax  q r k v -> o\n"
    "  softmax   q k v -> o\n"
    "A missing tensor, a wrong shape or a non-float dtype is an error naming the\n"
    "tensor.\n"
    "layer=N or layers=all: per-layer dumps (P + layers.N.q, ...; docs/diagnose.md),\n"
    "one line per layer with its first non-finite value; out= gets layers.N.o,\n"
    "layers.N.hT, ...\n"
    "attribution=1 (gdn, deltanet, kaczmarz, gla, mamba2, softmax, parallax): also\n"
    "writes the effective attention attn [B,H,T,T] with o_i = sum_j attn_ij v_j +\n"
    "o_init_i exactly (decay and key removal included), its decay-only part\n"
    "attn_decay (what linear attention with the same decays and write strengths would\n"
    "weigh; attn - attn_decay is the key removal's doing) and o_init [B,T,H,V], the\n"
    "part that comes from h0; prints how well the split reproduces o\n"
    "(docs/interventions.md).",
    2,
    -1,
    run_replay,
    COMPLETE_MIXER | COMPLETE_FILE,
    "prefix out eps scale chunk variant layer layers attribution"};
