#ifndef MIXSCOPE_VERSION_H
#define MIXSCOPE_VERSION_H
#define MIXSCOPE_VERSION "0.1.0"
/* The git commit of the build, e.g. "29338c2a1b2c" or "29338c2a1b2c+changes" or "unknown". */
const char *mixscope_commit(void);
#endif
