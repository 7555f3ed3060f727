/* cmd_set.c: `set KEY VALUE` (the settings of cli/settings.c) and `echo`. */
#include <ctype.h>
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "command.h"
#include "session.h"

static int run_set(session *s, int argc, char **argv, const char *rest, err *e) {
    (void)rest;
    char buf[64];
    if (argc == 1) {
        for (const char *const *k = setting_keys(); *k; k++)
            fprintf(s->out, "  %-9s %-18s %s\n", *k, setting_text(s, *k, buf, sizeof buf),
                    setting_meaning(*k));
        return 0;
    }
    const char *key = argv[1];
    if (argc == 2) {
        const char *v = setting_text(s, key, buf, sizeof buf);
        if (!v) return setting_set(s, key, "", e); /* the unknown-key message */
        fprintf(s->out, "%s %s\n", key, v);
        return 0;
    }
    if (setting_set(s, key, argv[2], e)) return -1;
    if (!s->script_depth && strcmp(key, "device") && strcmp(key, "arith")) /* those say it */
        fprintf(s->out, "%s %s\n", key, setting_text(s, key, buf, sizeof buf));
    return 0;
}

const command cmd_set = {
    "set",
    "[KEY [VALUE]]",
    "show or change session settings (set alone lists them)",
    "  set                 every setting with its value\n"
    "  set KEY             one value\n"
    "  set KEY VALUE       change it\n"
    "Keys:\n"
    "  outdir DIR      where scenes write figures (default mixscope-figures); created\n"
    "                  on set.\n"
    "                  Command lines expand $outdir (and $seed, $rows, ...) to the\n"
    "                  value.\n"
    "  seed N          seed of prompt/stream generators when seed= is not given\n"
    "                  (default 0)\n"
    "  rows N|all      most token rows show and run print (default 40)\n"
    "  chunk 16|32|64|default   prefill chunk of raw mixers without chunk= (next\n"
    "                           mixer/stream)\n"
    "  blowup X        state norm above which run reports a blow-up (default 1000)\n"
    "  progress auto|on|off     the tokens/s line of runs longer than a second (auto:\n"
    "                  on a terminal)\n"
    "  device cpu|gpu  the backend (same as the device command)\n"
    "  arith fp32|tf32 tf32: fla's GPU arithmetic (TF32 products) on the loaded model\n"
    "                  and later loads, where fla's forward has them; fp32 (default):\n"
    "                  exact float32\n"
    "  lla off|on|X    record local linear attention beside softmax and Parallax\n"
    "                  layers as the model steps, with ridge X (on: 0.01); off by\n"
    "                  default: it costs more than the layer (series lla_eta lla_cos\n"
    "                  cpa lla_gap lla_gap_sa)\n"
    "  probes default|all|none|NAME,NAME,...\n"
    "                  what step and run record (from position 0). default: what the\n"
    "                  views of the loaded mixers draw (per-lane probes up to 65536\n"
    "                  lanes a layer); all: everything, the readback picture of every\n"
    "                  token included; none: only the stream series and the logits\n"
    "                  (fastest). Names: any probe (docs/mixers/), state, recall,\n"
    "                    attn. Cost a head and token:\n"
    "                    cheap      family and block probes (q_raw_norm, dt,\n"
    "                               resid_norm, ...), the keys and values\n"
    "                    O(d^2)     about the step's own cost: the probes of gdn,\n"
    "                               deltanet, kaczmarz, gla, mamba2, kalman; state (a\n"
    "                               copy); recall where it is updated incrementally\n"
    "                               (gdn, deltanet, kaczmarz, mamba2)\n"
    "                    expensive  more than the step: the probes of softmax,\n"
    "                               parallax (O(n d) over the cache) and kata (walks\n"
    "                               of the feature state); attn; recall of other\n"
    "                               cores (256 dk dv); lla\n"
    "                  A core computes all its probes or none: naming one costs them\n"
    "                  all.\n"
    "  threads N|all   CPU threads for the dense products and the cores (default all)\n"
    "Example: set outdir /tmp/figs; export png kaczmarz $outdir/k.png",
    0,
    2,
    run_set,
    0,
    NULL};

static int run_echo(session *s, int argc, char **argv, const char *rest, err *e) {
    (void)argc, (void)argv, (void)e;
    fprintf(s->out, "%s\n", rest);
    return 0;
}

/* pause: on a terminal, waits for Enter between a script's stops; q (or EOF) leaves the script.
 * In batch use (-c, script files given as arguments) and on pipes it does nothing, so tests and
 * scripted demos run unpaced. */
static int run_pause(session *s, int argc, char **argv, const char *rest, err *e) {
    (void)argc, (void)argv, (void)e;
    if (s->batch || !s->interactive || !isatty(STDIN_FILENO)) return 0;
    fprintf(s->out, "%s ", *rest ? rest : "-- Enter: go on, q: leave --");
    fflush(s->out);
    char line[64];
    if (!fgets(line, sizeof line, stdin) || line[0] == 'q' || line[0] == 'Q') {
        s->leave_script = 1;
        if (s->script_depth) fprintf(s->out, "(left the script; the session is kept)\n");
    }
    return 0;
}

const command cmd_pause = {
    "pause",
    "[TEXT]",
    "at a terminal: wait for Enter (q leaves the script); elsewhere nothing",
    "Scripts and the tour pause between their stops when a person is at the terminal:\n"
    "TEXT (default '-- Enter: go on, q: leave --') is shown, Enter goes on, q or end\n"
    "of input leaves the running script (the session, its model and figures stay).\n"
    "In batch use (-c, scripts given on the command line) and when input is not a\n"
    "terminal it does nothing.",
    0,
    -1,
    run_pause,
    0,
    NULL};

const command cmd_echo = {
    "echo",
    "[TEXT]",
    "print TEXT (scenes narrate with it; $outdir and other settings expand)",
    "Prints the rest of the line as typed (after $NAME expansion of settings). Scenes\n"
    "use it to explain each stop: echo Kaczmarz: beta = eta / |k|^2 removes the same\n"
    "fraction for every key.",
    0,
    -1,
    run_echo,
    0,
    NULL};
