/* cmd_lens.c: `lens`, a logit lens on a layer's memory (engine_lens, models/lens.c). */
#include <limits.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "../engine/interv.h"
#include "../models/model.h"
#include "../models/tokenizer.h"
#include "../scenes/prompts.h"
#include "command.h"
#include "session.h"

/* softmax of logits [V] in place (as probabilities); the top n ids into top. */
static void top_probs(float *l, int V, int *top, int n) {
    double mx = l[0], z = 0;
    for (int i = 1; i < V; i++) mx = l[i] > mx ? l[i] : mx;
    for (int i = 0; i < V; i++) z += exp((double)l[i] - mx);
    for (int i = 0; i < V; i++) l[i] = (float)(exp((double)l[i] - mx) / z);
    for (int k = 0; k < n; k++) {
        int b = -1;
        for (int i = 0; i < V; i++) {
            int taken = 0;
            for (int j = 0; j < k; j++) taken |= top[j] == i;
            if (!taken && (b < 0 || l[i] > l[b])) b = i;
        }
        top[k] = b;
    }
}

static void print_top(session *s, const float *p, const int *top, int n) {
    char b[32];
    for (int k = 0; k < n; k++)
        fprintf(s->out, "%s%s %.3f", k ? ", " : "", session_tok(s, top[k], b, sizeof b), p[top[k]]);
}

/* The stored pairs of the session's prompt: for an mqar prompt the value tokens of its pairs
 * (positions 2i + 1 before the queries), where a trained model keeps key -> value; otherwise
 * every token. */
static int stored_positions(session *s, int pos, int *J) {
    const task_prompt *tp = s->task;
    int n = 0;
    if (tp && !strcmp(tp->name, "mqar") && tp->n == s->eng.ntokens) {
        int first = tp->n;
        for (int t = 0; t < tp->n; t++)
            if (tp->target[t] >= 0) {
                first = t;
                break;
            }
        for (int t = 1; t < first && t < pos; t += 2) J[n++] = t;
        return n;
    }
    for (int t = 0; t < pos; t++) J[n++] = t;
    return n;
}

static int run_lens(session *s, int argc, char **argv, const char *rest, err *e) {
    (void)rest;
    int query = 0, all = 0;
    opts o;
    int first = 1;
    if (argc > 1 && !strcmp(argv[1], "query")) query = 1, first = 2;
    if (argc > 1 && !strcmp(argv[1], "queries")) query = 2, first = 2;
    if (opts_parse(&o, argc - first, argv + first, e)) return err_prefix(e, "lens");
    long layer, head, key = -1, top;
    const char *ks = opts_str(&o, "key", NULL);
    int rc = opts_int_in(&o, "layer", 0, 0, INT_MAX, &layer, e) ||
             opts_int_in(&o, "head", -1, 0, INT_MAX, &head, e) ||
             opts_int_in(&o, "top", 5, 1, 50, &top, e);
    if (!rc && ks) {
        if (!strcmp(ks, "all"))
            all = 1;
        else
            rc = opts_int_in(&o, "key", -1, 0, INT_MAX, &key, e);
    }
    if (!rc) rc = opts_check_unused(&o, e);
    opts_free(&o);
    if (rc) return err_prefix(e, "lens");
    if (query && (key >= 0 || all)) return err_set(e, "lens: key= or query, not both");
    if (!s->eng.model || engine_raw_active(&s->eng))
        return err_set(e, "lens: needs a model (its output projection and LM head)");
    int V = s->eng.model->c.vocab, pos = engine_pos(&s->eng);
    float *l = malloc((size_t)V * sizeof(float));
    int *J = malloc((size_t)(pos > 0 ? pos : 1) * sizeof(int)), tk[50];
    if (!l || !J) {
        free(l), free(J);
        return err_set(e, "out of memory");
    }
    char hb[24] = "every head", b1[32];
    if (head >= 0) snprintf(hb, sizeof hb, "head %ld", head);
    if (key < 0 && !all && pos > 0) { /* a query lens */
        const task_prompt *tp = s->task;
        int scored = tp && tp->n == s->eng.ntokens, n = 0;
        if (query == 2)
            for (int t = 0; t < pos; t++) {
                if (scored ? tp->target[t] >= 0 : t + 1 < s->eng.ntokens) J[n++] = t;
            }
        else
            J[n++] = pos - 1;
        float *L = n ? malloc((size_t)n * V * sizeof(float)) : NULL;
        if (!n)
            rc = err_set(e, "lens queries: no %s among the tokens run",
                         scored ? "scored positions" : "tokens with a next token");
        else if (!L)
            rc = err_set(e, "out of memory");
        else
            rc = engine_lens_queries(&s->eng, (int)layer, (int)head, J, n, L, e);
        int hit = 0;
        for (int i = 0; !rc && i < n; i++) {
            float *li = L + (size_t)i * V;
            int want = scored                      ? tp->target[J[i]]
                       : J[i] + 1 < s->eng.ntokens ? s->eng.tokens[J[i] + 1]
                                                   : -1;
            top_probs(li, V, tk, query == 2 ? 1 : (int)top);
            hit += tk[0] == want;
            if (query == 2) continue;
            fprintf(s->out, "lens layer %ld %s, query of token %d (%s): ", layer, hb, J[i],
                    session_tok(s, s->eng.tokens[J[i]], b1, sizeof b1));
            print_top(s, li, tk, (int)top);
            fputc('\n', s->out);
        }
        if (!rc && query == 2)
            fprintf(
                s->out,
                "lens layer %ld %s: the core's output at %d %s names %s first for %d (%.1f%%)\n",
                layer, hb, n, scored ? "scored queries" : "tokens",
                scored ? "the answer" : "the next token", hit, 100.0 * hit / n);
        free(L);
    } else if (!all) {
        rc = engine_lens(&s->eng, (int)layer, (int)head, (int)key, l, e);
        if (!rc) {
            top_probs(l, V, tk, (int)top);
            fprintf(s->out, "lens layer %ld %s, key of token %ld (%s): ", layer, hb, key,
                    session_tok(s, s->eng.tokens[key], b1, sizeof b1));
            print_top(s, l, tk, (int)top);
            fputc('\n', s->out);
        }
    } else {
        int n = stored_positions(s, pos, J), hit = 0;
        for (int i = 0; i < n && !rc; i++) {
            rc = engine_lens(&s->eng, (int)layer, (int)head, J[i], l, e);
            if (rc) break;
            top_probs(l, V, tk, 1);
            hit += tk[0] == s->eng.tokens[J[i]];
            if (i < 8 || tk[0] != s->eng.tokens[J[i]]) {
                if (i >= 8 && n - hit > 16) continue; /* the misses of a long list: counted only */
                fprintf(s->out, "  key %4d (%s): %s %.3f%s\n", J[i],
                        session_tok(s, s->eng.tokens[J[i]], b1, sizeof b1),
                        session_tok(s, tk[0], (char[32]){0}, 32), l[tk[0]],
                        tk[0] == s->eng.tokens[J[i]] ? "" : "  (miss)");
            }
        }
        if (!rc)
            fprintf(s->out,
                    "lens layer %ld %s: the readback of %d stored key%s names %s token first for "
                    "%d (%.1f%%)\n",
                    layer, hb, n, n == 1 ? "" : "s",
                    s->task && !strcmp(s->task->name, "mqar") ? "its value" : "the key's own", hit,
                    n ? 100.0 * hit / n : 0.0);
    }
    free(l), free(J);
    return rc ? -1 : 0;
}

const command cmd_lens = {
    "lens",
    "[query|queries] [layer=L] [head=H] [key=J|all] [top=5]",
    "what a layer's memory holds, read through the output path to tokens",
    "A logit lens on the state: the readback S^T k_J of token J's key (key=J) from\n"
    "head H's key-value matrix of layer L (every head without head=), or the core's\n"
    "output scale S^T q at the last token (query, the default), through the head's\n"
    "output norm (gate open), its columns of the output projection, the final norm\n"
    "and the LM head: the top tokens with their probabilities. key=all reads every\n"
    "stored key now and counts how often the lens names the stored value first (an\n"
    "mqar prompt: the value token of each pair; otherwise the token itself).\n"
    "`queries` reads the output at every scored position of a task prompt (else every\n"
    "token) as the run had it and counts how often it names the answer (else the next\n"
    "token). Layers of the GDN family, GLA and Mamba2; the direct path only (no\n"
    "residual, no MLP, no later layers).",
    0,
    5,
    run_lens,
    0,
    "layer= head= key= top="};
