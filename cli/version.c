/* version.c: the version and the commit the binary was built from (build/.../commit.h, written by
 * the Makefile from git; "unknown" outside a checkout, "+changes" with uncommitted edits). */
#include "version.h"

#include "commit.h"

const char *mixscope_commit(void) {
    return MIXSCOPE_COMMIT;
}
