/* err.h: errors as values.
 *
 * Library code never exits or aborts. A function that can fail takes an `err *` last, returns 0 on
 * success and -1 on failure, and leaves a one-line message in the err. Callers add context with
 * err_prefix() ("model.safetensors: " + "tensor 'x': shape ..."), so the line the user reads names
 * the file, the tensor and the problem. */
#ifndef MIXSCOPE_ERR_H
#define MIXSCOPE_ERR_H

#define ERR_MSG_MAX 512

#ifdef __cplusplus
extern "C" {
#endif

typedef struct err {
    char msg[ERR_MSG_MAX];
} err;

/* Writes the message (printf format) and returns -1, so `return err_set(e, ...)` reads naturally.
 * A NULL err is allowed and ignored. */
int err_set(err *e, const char *fmt, ...) __attribute__((format(printf, 2, 3)));

/* Puts formatted context before the current message: "ctx: old message". Returns -1. */
int err_prefix(err *e, const char *fmt, ...) __attribute__((format(printf, 2, 3)));

/* Clears the message. */
void err_clear(err *e);

#ifdef __cplusplus
}
#endif

#endif
