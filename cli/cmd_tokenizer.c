/* cmd_tokenizer.c: tokenizer, tokenize, detokenize (tokenizer/hf.h). The session's tokenizer is
 * tokenizer.json beside a loaded checkpoint, or one loaded alone; without one, text is bytes. */
#include <ctype.h>
#include <limits.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "../tokenizer/hf.h"
#include "command.h"
#include "session.h"

static int run_tokenizer(session *s, int argc, char **argv, const char *rest, err *e) {
    (void)rest;
    if (argc == 1) {
        if (s->tok)
            fprintf(s->out, "tokenizer: %s (%d ids)\n", hf_path(s->tok), hf_vocab_size(s->tok));
        else
            fprintf(s->out, "tokenizer: none (text is byte-level: one token per UTF-8 byte)\n");
        return 0;
    }
    if (!strcmp(argv[1], "bytes")) {
        session_set_tokenizer(s, NULL, e);
        fprintf(s->out, "tokenizer: none (text is byte-level)\n");
        return 0;
    }
    hf_tok *t = NULL;
    if (hf_load(&t, argv[1], e)) return err_prefix(e, "tokenizer");
    int nv = hf_vocab_size(t);
    if (session_set_tokenizer(s, t, e)) return err_prefix(e, "tokenizer %s", argv[1]);
    fprintf(s->out, "tokenizer: %s (%d ids)\n", hf_path(s->tok), nv);
    return 0;
}

const command cmd_tokenizer = {
    "tokenizer",
    "[PATH | bytes]",
    "the text tokenizer: show it, load a tokenizer.json, or back to bytes",
    "`tokenizer PATH` loads a tokenizer.json (Hugging Face's format; PATH may be its\n"
    "folder) as the session's: `prompt TEXT`, `tokens FILE.txt`, `tokenize`,\n"
    "`detokenize` and the token columns of step and show use it. `load` picks up the\n"
    "tokenizer.json beside a checkpoint.\n"
    "BPE tokenizers as Llama and Mistral ship them (byte fallback, the\n"
    "Prepend/Replace normaliser) and byte-level BPE as GPT-2 and Llama 3 ship them,\n"
    "with their templates; what else a file asks for is refused in words. A tokenizer\n"
    "with more ids than the model's vocabulary is refused. `tokenizer bytes` goes\n"
    "back to byte-level text; `tokenizer` alone says which is in use.",
    0,
    1,
    run_tokenizer,
    COMPLETE_FILE,
    NULL};

/* `tokenize [special=1|0] TEXT`: TEXT is the rest of the line after the command (and the
 * optional special= word), exactly as typed. */
static int run_tokenize(session *s, int argc, char **argv, const char *rest, err *e) {
    (void)argc, (void)argv;
    const char *text = rest ? rest : "";
    while (*text == ' ' || *text == '\t') text++;
    int special = 1;
    if (!strncmp(text, "special=", 8)) {
        const char *v = text + 8;
        if ((v[0] == '0' || v[0] == '1') && (v[1] == '\0' || v[1] == ' ' || v[1] == '\t'))
            special = v[0] == '1';
        else
            return err_set(e, "tokenize: special=1 or special=0");
        text = v + 1;
        if (*text) text++; /* the one separator after the word */
    }
    int32_t *ids = NULL;
    int n = 0;
    if (session_encode(s, text, strlen(text), special, &ids, &n, e))
        return err_prefix(e, "tokenize");
    for (int i = 0; i < n; i++) fprintf(s->out, "%s%d", i ? " " : "", ids[i]);
    fputc('\n', s->out);
    free(ids);
    return 0;
}

const command cmd_tokenize = {
    "tokenize",
    "[special=1|0] TEXT",
    "print the ids of TEXT as one line of integers",
    "Encodes the rest of the line with the session's tokenizer (special=1, the\n"
    "default, adds its template's special tokens, as Hugging Face's encode does) and\n"
    "prints the ids separated by single spaces. Without a tokenizer: the UTF-8 bytes.\n"
    "Example: tokenize Hello world",
    0,
    -1,
    run_tokenize,
    0,
    "special"};

static int run_detokenize(session *s, int argc, char **argv, const char *rest, err *e) {
    (void)rest;
    int32_t *ids = malloc((size_t)argc * sizeof *ids);
    if (!ids) return err_set(e, "out of memory");
    for (int i = 1; i < argc; i++) {
        char *end;
        long v = strtol(argv[i], &end, 10);
        if (*end || end == argv[i] || v < 0 || v > INT_MAX) {
            free(ids);
            return err_set(e, "detokenize: '%.30s' is not a token id", argv[i]);
        }
        ids[i - 1] = (int32_t)v;
    }
    int n = argc - 1;
    if (s->tok) {
        char *text = hf_decode(s->tok, ids, n, e);
        free(ids);
        if (!text) return -1;
        fprintf(s->out, "%s\n", text);
        free(text);
        return 0;
    }
    for (int i = 0; i < n; i++)
        if (ids[i] > 255) {
            int bad = ids[i];
            free(ids);
            return err_set(e, "detokenize: id %d is not a byte (no tokenizer: text is byte-level)",
                           bad);
        }
    for (int i = 0; i < n; i++) fputc((char)ids[i], s->out);
    fputc('\n', s->out);
    free(ids);
    return 0;
}

const command cmd_detokenize = {
    "detokenize",
    "ID [ID ...]",
    "print the text of token ids",
    "Decodes the ids with the session's tokenizer (special tokens kept, as Hugging\n"
    "Face's decode with skip_special_tokens=False) and prints the text; without a\n"
    "tokenizer the ids are bytes.",
    1,
    -1,
    run_detokenize,
    0,
    NULL};
