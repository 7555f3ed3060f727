/* sha256.h: SHA-256 for the checkpoint digest that exports carry as provenance. It lives in
 * core/sha256.h (models/ computes the weights' digest, and models/ may not call export/); this
 * header stays for the callers that include it from here. */
#ifndef MIXSCOPE_SHA256_H
#define MIXSCOPE_SHA256_H

#include "../core/sha256.h"

#endif
