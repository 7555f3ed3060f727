/* prompts.h: task prompts for models (`prompt GENERATOR key=value ...`).
 *
 * Each generator makes a token sequence and, beside it, the answer a model should give at the
 * positions the task scores (targets), so a run can be scored without a tokenizer. Deterministic
 * from the seed. Token layouts (V = vocab):
 *
 *   mqar       multi-query associative recall (Zoology): `pairs` key-value pairs k1 v1 ... kN vN,
 *              then `queries` queries k v of stored keys. Keys from [1, V/2), values from
 *              [V/2, V). Scored: each query key's position, target = its value (the next token).
 *   niah       needle in a haystack: `len` tokens of filler from [V/4, V); a needle key, value
 *              pair (ids in [1, V/4)) at relative depth `depth`; the last two tokens ask the key
 *              again. Scored: position len-2, target = the needle's value.
 *   overwrite  `keys` keys each written `repeats` times with a fresh value (rounds in shuffled
 *              order), then every key queried once. Scored: each query, target = the latest value.
 *   a5         A5 permutation composition (state tracking): `len` random elements g_1..g_len of the
 *              alternating group A5 (ids 0..59, the even permutations of {0..4} in lexicographic
 *              order). Scored: every position t, target = the prefix product g_1 g_2 ... g_t
 *              (apply g_1 first). Vocabulary 60. */
#ifndef MIXSCOPE_PROMPTS_H
#define MIXSCOPE_PROMPTS_H

#include <stdint.h>

#include "../core/err.h"

typedef struct task_prompt {
    char name[16];   /* generator: "mqar", "niah", "overwrite", "a5" */
    char desc[200];  /* one line: what the prompt holds */
    int n;           /* tokens */
    int vocab;       /* every id lies in [0, vocab) */
    int32_t *ids;    /* [n] */
    int32_t *target; /* [n]: the id the model should predict at position t; -1 where not scored */
    int nscored;     /* positions with a target */
} task_prompt;

/* The generator names, NULL-terminated. */
extern const char *const task_names[];

int task_mqar(task_prompt *p, int pairs, int queries, int vocab, uint64_t seed, err *e);
int task_niah(task_prompt *p, int len, int vocab, double depth, uint64_t seed, err *e);
int task_overwrite(task_prompt *p, int keys, int repeats, int vocab, uint64_t seed, err *e);
int task_a5(task_prompt *p, int len, uint64_t seed, err *e);
void task_free(task_prompt *p);

/* Scores logits [upto, V] (position t's row predicts target[t]) by argmax over the first `upto`
 * positions: *correct of *scored targets. Returns correct / scored (NaN when none is scored). */
double task_accuracy(const task_prompt *p, const float *logits, int V, int upto, int *correct,
                     int *scored);

/* A5: the permutation of element id (out[i] = image of i), and the product "a then b"
 * ((a b)(i) = b(a(i))) as an id. id in [0, 60). */
#define A5_ORDER 60
void a5_perm(int id, int out[5]);
int a5_compose(int a, int b);
int a5_identity(void);

#endif
