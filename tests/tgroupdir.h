/* tgroupdir.h: one temporary folder for a whole test binary, g_dir, made by the cmocka group
 * setup and removed (with what the tests left in it) by the group teardown. The setup first
 * enters $MIXSCOPE_ROOT when it is set, where the tests' relative paths (scenes/, tests/golden/)
 * start; `make test` runs from there already. */
#ifndef MIXSCOPE_TGROUPDIR_H
#define MIXSCOPE_TGROUPDIR_H

#include "tests/testutil.h"

static char *g_dir;

static int group_setup(void **state) {
    (void)state;
    const char *root = getenv("MIXSCOPE_ROOT");
    if (root && *root && chdir(root) != 0) return -1;
    g_dir = test_tmpdir();
    return 0;
}

static int group_teardown(void **state) {
    (void)state;
    test_rmdir(g_dir);
    return 0;
}

#endif
