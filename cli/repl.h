/* repl.h: the interactive loop. readline (editing, history, completion) on a terminal; plain line
 * reading otherwise. Errors are printed and the loop goes on; ^C stops a long command, ^D quits. */
#ifndef MIXSCOPE_REPL_H
#define MIXSCOPE_REPL_H

#include "session.h"

int repl_run(session *s);

#endif
