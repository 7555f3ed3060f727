/* fuzz_script.c: libFuzzer target for the script reader.
 *
 * The input is a script file's bytes. It is written to a temporary file and read back with
 * command_read_script (NUL bytes, size, regular-file checks), then run by command_exec_script on a
 * fresh session in parse-only mode: every command is cut at newlines and at ';' outside quotes,
 * comments dropped, $NAME settings expanded, the command found (or suggested) and its argument
 * count checked, but nothing is run, so the target has no side effects. Errors must come back as
 * messages; nothing may crash or leak.
 *
 *   make fuzz && build/fuzz/fuzz_script fuzz/seeds/fuzz_script */
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "cli/command.h"
#include "cli/session.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
    char path[] = "/tmp/mixscope-fuzz-script-XXXXXX";
    int fd = mkstemp(path);
    if (fd < 0) return 0;
    if (write(fd, data, size) != (ssize_t)size) {
        close(fd), unlink(path);
        return 0;
    }
    close(fd);
    err e = {{0}};
    char *text = NULL;
    if (command_read_script(path, &text, &e) == 0) {
        session s;
        if (session_init(&s, &e) == 0) {
            FILE *null = fopen("/dev/null", "w");
            if (null) s.out = null;
            s.batch = 1, s.parse_only = 1;
            err_clear(&e);
            command_exec_script(&s, text, "fuzz.scene", 0, &e);
            session_free(&s);
            if (null) fclose(null);
        }
        free(text);
    } else if (e.msg[0] == '\0') {
        abort(); /* a refusal says why */
    }
    unlink(path);
    return 0;
}
