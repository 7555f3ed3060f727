/* names.h: "did you mean": the closest of a list of names to a misspelt one. One rule for
 * commands, probes, mixers and settings: case-insensitive edit distance at most 1 for names of up
 * to 3 characters and 2 beyond, or the typed text being a prefix (2 characters at least). */
#ifndef MIXSCOPE_NAMES_H
#define MIXSCOPE_NAMES_H

/* Levenshtein distance, case-insensitive (names longer than 64 characters: 99). */
int names_distance(const char *a, const char *b);
/* The closest of cands[0..n) (NULL entries skipped) under the rule above, or NULL. */
const char *names_closest(const char *name, const char *const *cands, int n);

#endif
