#!/usr/bin/env python3
# bench-table.py FILE: the output of scripts/gpu-bench-rounds.sh (or of bench_gpu runs headed by
# "=== BINARY [SETTING] (round R)" lines) as one line per binary and setting: each chunked row's
# median in every round, "/" between rounds (B = bench_gpu, MIXSCOPE_DELTA_ dropped from the
# settings). What the A/B tables of docs/gpu-results.md were read from.
import collections
import re
import sys

times = collections.defaultdict(list)
order, cfg = [], None
for line in open(sys.argv[1]):
    m = re.match(r"=== (\S+) \[(.*)\]", line)
    if m:
        cfg = m.group(1).replace("bench_gpu", "B") + " " + m.group(2).replace("MIXSCOPE_DELTA_", "")
        if cfg not in order:
            order.append(cfg)
        continue
    m = re.match(r"(\w+ chunked T=\w+(?: H=\d+)?(?: slow g)?)\s+([\d.]+)", line)
    if m and cfg:
        times[(m.group(1).strip(), cfg)].append(float(m.group(2)))
rows = sorted({r for r, _ in times})
for c in order:
    cells = []
    for r in rows:
        if (r, c) in times:
            name = r.replace(" chunked ", ":").replace("T=", "").replace(" ", "")
            cells.append(name + " " + "/".join("%.3f" % x for x in times[(r, c)]))
    print("%-34s" % c[:34] + " ".join(cells))
