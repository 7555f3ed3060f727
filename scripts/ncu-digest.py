#!/usr/bin/env python3
"""ncu-digest.py DETAILS SASS_CSV: the lines of one ncu report that a tuning step starts from.

DETAILS is `ncu --import R --print-summary none` of a report with the WarpStateStats,
SourceCounters, SpeedOfLight, LaunchStats and Occupancy sections; SASS_CSV is `ncu --import R
--page source --csv --print-source sass`. Prints the duration and issue rate, stall samples by
reason, executed instructions by opcode (with their samples) and every instruction holding at least
1% of the samples with its leading reason. scripts/gpu-ncu-kernel.sh makes both files."""
import csv
import sys
from collections import Counter

details, sass = sys.argv[1], sys.argv[2]
keys = ("Duration", "Elapsed Cycles", "SM Frequency", "Warp Cycles Per Issued", "Registers Per Thread",
        "Achieved Active Warps", "excessive")
for line in open(details):
    if any(k in line for k in keys):
        print(line.rstrip())
rows = list(csv.reader(open(sass)))
hdr, data = rows[1], rows[2:]
reasons = {h: hdr.index(h) for h in hdr if h.startswith("stall_") and "Not Issued" not in h}
i_s, i_e = hdr.index("Warp Stall Sampling (All Samples)"), hdr.index("Instructions Executed")
num = lambda r, i: int(r[i]) if r[i].isdigit() else 0
by_reason, by_op, op_samples = Counter(), Counter(), Counter()
for r in data:
    for name, i in reasons.items():
        by_reason[name] += num(r, i)
    words = r[1].split()
    if not words:
        continue
    op = (words[1] if words[0].startswith("@") and len(words) > 1 else words[0]).split(".")[0]
    by_op[op] += num(r, i_e)
    op_samples[op] += num(r, i_s)
total = sum(num(r, i_s) for r in data)
print(f"stall samples {total}, by reason:",
      ", ".join(f"{n[6:]} {v}" for n, v in by_reason.most_common(8)))
print("warp instructions executed by opcode (stall samples):",
      ", ".join(f"{o} {v} ({op_samples[o]})" for o, v in by_op.most_common(16)))
print("instructions with >= 1% of the samples:")
for r in data:
    s = num(r, i_s)
    if total and s * 100 >= total:
        lead = max(reasons, key=lambda n: num(r, reasons[n]))
        print(f"  {s:>5} {lead[6:]:<12} {r[1].strip()[:80]}")
