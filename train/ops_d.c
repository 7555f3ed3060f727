/* ops_d.c: ops.inc in double, for the gradient checks (tests/test_grad.c): central differences in
 * double resolve a relative error of 1e-6, which float cannot. */
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "../core/pool.h"
#include "ops.h"

#define R      double
#define SFX(n) n##_d

#include "ops.inc"
