/* cmd_prompt.c: `prompt TEXT` (byte-level text) and `prompt GENERATOR ...` (the task prompts of
 * scenes/prompts.h: mqar, niah, overwrite, a5), with their scored targets kept for `info`. */
#include <limits.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "../core/opts.h"
#include "../models/model.h"
#include "../models/tokenizer.h"
#include "../scenes/prompts.h"
#include "command.h"
#include "session.h"

/* ---- the task generators ---- */

const char *const *generator_names(const char *command) {
    static const char *const prompt[] = {"mqar", "niah", "overwrite", "a5", NULL};
    static const char *const stream[] = {"keys", "recall", "overwrite", NULL};
    return command && !strcmp(command, "stream") ? stream : prompt;
}

/* niah's depth=: a fraction in [0, 1], or `random` (the default) */
static int niah_depth(opts *o, double *depth, err *e) {
    const char *v = opts_str(o, "depth", "random");
    if (!strcmp(v, "random")) return *depth = -1, 0;
    if (opts_float(o, "depth", -1, depth, e)) return -1;
    if (!(*depth >= 0 && *depth <= 1))
        return err_set(e, "option 'depth': expected a fraction in 0..1 or random, got '%.40s'", v);
    return 0;
}

/* Contract: returns 1 when argv[1] names no generator (the words are then byte-level text), 0
 * after setting the tokens, -1 with a message. */
static int prompt_generate(session *s, int argc, char **argv, err *e) {
    const char *g = argv[1];
    int known = 0;
    for (int i = 0; task_names[i]; i++) known |= !strcmp(task_names[i], g);
    if (!known) return 1;
    /* `prompt a5` alone is a generator; `prompt a5 is a group` is text: every other word must be
     * key=value */
    for (int i = 2; i < argc; i++)
        if (!strchr(argv[i], '=')) return 1;
    opts o;
    if (opts_parse(&o, argc - 2, argv + 2, e)) return err_prefix(e, "prompt %s", g);
    long seed, vocab, a = 0, b = 0;
    double depth = -1;
    int dv = s->eng.model ? s->eng.model->c.vocab : 256;
    int rc = opts_int_in(&o, "seed", setting_seed(s), 0, LONG_MAX, &seed, e) ||
             opts_int_in(&o, "vocab", dv, 1, 1 << 24, &vocab, e);
    if (!rc && (vocab < 1 || vocab > 1 << 24))
        rc = err_set(e, "vocab=%ld must lie in 1..%d", vocab, 1 << 24);
    task_prompt *p = calloc(1, sizeof *p);
    if (!p) rc = err_set(e, "out of memory");
    if (!rc && !strcmp(g, "mqar")) {
        rc = opts_int_in(&o, "pairs", 16, 1, 1 << 22, &a, e) ||
             opts_int_in(&o, "queries", a, 0, 1 << 22, &b, e) || opts_check_unused(&o, e) ||
             task_mqar(p, (int)a, (int)b, (int)vocab, (uint64_t)seed, e);
    } else if (!rc && !strcmp(g, "niah")) {
        rc = opts_int_in(&o, "len", 256, 1, 1 << 24, &a, e) || niah_depth(&o, &depth, e) ||
             opts_check_unused(&o, e) || task_niah(p, (int)a, (int)vocab, depth, (uint64_t)seed, e);
    } else if (!rc && !strcmp(g, "overwrite")) {
        rc = opts_int_in(&o, "keys", 8, 1, 1 << 22, &a, e) ||
             opts_int_in(&o, "repeats", 3, 1, 1 << 16, &b, e) || opts_check_unused(&o, e) ||
             task_overwrite(p, (int)a, (int)b, (int)vocab, (uint64_t)seed, e);
    } else if (!rc && !strcmp(g, "a5")) {
        if (opts_has(&o, "vocab") && vocab != A5_ORDER)
            rc = err_set(e, "a5 has its own vocabulary of %d (no vocab=)", A5_ORDER);
        if (!rc)
            rc = opts_int_in(&o, "len", 64, 1, 1 << 24, &a, e) || opts_check_unused(&o, e) ||
                 task_a5(p, (int)a, (uint64_t)seed, e);
    }
    opts_free(&o);
    if (!rc && p->vocab > 0 && s->eng.model && p->vocab > s->eng.model->c.vocab)
        rc = err_set(e, "the prompt's vocabulary %d is larger than the model's %d (give vocab=)",
                     p->vocab, s->eng.model->c.vocab);
    if (!rc) rc = session_set_tokens(s, p->ids, p->n, e);
    if (rc) {
        if (p) task_free(p), free(p);
        return err_prefix(e, "prompt %s", g);
    }
    if (s->task) task_free(s->task), free(s->task);
    s->task = p;
    fprintf(s->out, "%s\n%d tokens, %d scored position%s (info shows the accuracy after run)\n",
            p->desc, p->n, p->nscored, p->nscored == 1 ? "" : "s");
    return 0;
}

static int run_prompt(session *s, int argc, char **argv, const char *rest, err *e) {
    /* the stream generators' names are not text: `prompt keys` was 4 byte tokens, silently */
    if (argc == 2 && (!strcmp(argv[1], "keys") || !strcmp(argv[1], "recall")))
        return err_set(e,
                       "prompt: '%s' is a stream for raw mixers (mixer NAME; stream %s ...); "
                       "prompts: mqar niah overwrite a5, or text in quotes (prompt '%s here')",
                       argv[1], argv[1], argv[1]);
    int r = prompt_generate(s, argc, argv, e);
    if (r <= 0) return r;
    err_clear(e);
    /* byte-level text: one word as given (quotes removed), or the raw rest of the line */
    const char *text = argc == 2 ? argv[1] : rest;
    size_t n = strlen(text);
    if (n == 0) return err_set(e, "prompt: empty text");
    if (n > (1u << 24)) return err_set(e, "prompt: text longer than 16 MiB");
    int32_t *ids = NULL;
    int k = 0;
    if (session_encode(s, text, n, 1, &ids, &k, e)) return err_prefix(e, "prompt");
    int rc = session_set_tokens(s, ids, k, e);
    free(ids);
    if (rc) return -1;
    fprintf(s->out, "%d %s tokens\n", k, s->tok ? "text" : "byte");
    return 0;
}

const command cmd_prompt = {
    "prompt",
    "TEXT | GENERATOR [key=value ...]",
    "text (through the tokenizer, or bytes), or a generated task prompt",
    "`prompt TEXT` runs TEXT through the session's tokenizer (tokenizer.json beside\n"
    "the loaded checkpoint, or `tokenizer PATH`), its special tokens included;\n"
    "without one, its bytes (UTF-8), which needs a model whose vocabulary is the 256\n"
    "bytes. `prompt GENERATOR ...` asks the task generators of scenes/ for a prompt\n"
    "with their own vocabulary. The position goes back to 0.",
    1,
    -1,
    run_prompt,
    COMPLETE_GENERATOR,
    NULL};
