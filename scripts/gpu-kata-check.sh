#!/bin/sh
# gpu-kata-check.sh: on the GPU machine, one sitting for a change to KATA's tensor-core chunked
# form (kernels/kata_tc.cu, kata_tc_wgmma.cu). Binaries come prebuilt from here
# (scripts/gpu-prebuild.sh, packed as build/gpubin.tar.xz to fit the carry).
# - TEST=1 (the default): test_gpu's kata cases under every setting of TEST_ENVS (default ENVS;
#   space-separated, "-" for none, "," between the variables of one setting), each list cut off
#   after TIMEOUT seconds; a list that fails or does not finish stops the sitting before the
#   timings.
# - bench_gpu's kata section (m1 chunked at 4K and 128K, with MIXSCOPE_KATA_PROFILE=1: the time
#   of each pass) from every gpubin/bench/gpu/bench_gpu* under every setting of ENVS, alternating
#   ROUNDS times (default 2).
# Output: stdout and $OUT/kata-*.txt.
# The forms timed on 2026-12-07 (docs/gpu-runs/kata-forms-c1e9d87-h100.txt):
#   TEST=0 ENVS="- MIXSCOPE_KATA_LOCAL=2 MIXSCOPE_KATA_STATE=3 MIXSCOPE_KATA_LOCAL=2,MIXSCOPE_KATA_STATE=3 \
#     MIXSCOPE_KATA_LOCAL=1" sh scripts/gpu-kata-check.sh
# (the wgmma local pass, MIXSCOPE_KATA_LOCAL=2, won and became the default; =0 keeps the mma.sync one).
. scripts/gpu-unpack.sh
. scripts/gpu-case-lists.sh
if [ "${TEST:-1}" = 1 ]; then
    run_case_lists kata "kata" || exit 1
fi
MIXSCOPE_KATA_PROFILE=1 sh scripts/gpu-bench-rounds.sh kata "^kata (m1|tc)" | python3 -c '
import sys, re
# one line a row; the per-call pass times of the 128K row summarised as ranges
passes = {}
for line in sys.stdin:
    m = re.match(r"kata tc \(wgmma\) T=(\d+) chunk \d+: state ([\d.]+) ms, read ([\d.]+) ms, local ([\d.]+) ms", line)
    if m:
        passes.setdefault(m.group(1), []).append([float(x) for x in m.groups()[1:]])
        continue
    for T, v in passes.items():
        print("  passes at T=%s over %d calls: state %.3f-%.3f, read %.3f-%.3f, local %.3f-%.3f ms" %
              ((T, len(v)) + tuple(f(x[i] for x in v) for i in range(3) for f in (min, max))))
    passes = {}
    print(line, end="")
for T, v in passes.items():
    print("  passes at T=%s over %d calls: state %.3f-%.3f, read %.3f-%.3f, local %.3f-%.3f ms" %
          ((T, len(v)) + tuple(f(x[i] for x in v) for i in range(3) for f in (min, max))))
' | tee "$OUT/kata-bench.txt"
