#!/bin/sh
# gpu-delta-check.sh: on the GPU machine, one sitting for a change to the delta family's
# tensor-core prefill (kernels/delta_tc.cu, delta_state_wgmma.cu). Binaries come prebuilt from here
# (scripts/gpu-prebuild.sh, or a gpubin/ packed as build/gpubin.tar.xz to fit the carry).
# - TEST=1 (the default): every gpubin/tests/gpu/test_gpu* (or the TEST_BINS given) on the gdn,
#   kaczmarz and deltanet cases under every setting of ENVS (space-separated, "-" for none, ","
#   between the variables of one setting; TEST_ENVS, when given, for the tests alone), each case
#   list cut off after TIMEOUT seconds (default 300). A list that fails or does not finish stops
#   the sitting before the timings.
# - bench_gpu's delta section from every gpubin/bench/gpu/bench_gpu* (the change beside its
#   baselines) under every setting of ENVS, alternating ROUNDS times (default 2), chunked rows only.
# - PROFILE=1: the time of each pass (MIXSCOPE_DELTA_PROFILE=1: prepare, state and output one after
#   the other) at every length.
# - TRACE=1: when each pass ran in the overlapped launch (MIXSCOPE_DELTA_TRACE=1: each pass's first
#   block start and last block end; TRACE_ENV adds settings).
# - NCU=regex: ncu of one launch of the matching kernel at SKIP (default 46: gdn's third run at
#   32K) under MIXSCOPE_DELTA_PROFILE=1, which ncu's serialised launches need
#   (scripts/gpu-ncu-kernel.sh).
# - ALL=1: every GPU test binary in full (tests/gpu/run.sh).
# Output: stdout and $OUT/delta-*.txt.
. scripts/gpu-unpack.sh
export MIXSCOPE_REFS="$PWD/.refs" # test_gpu's checkpoint cases with ALL=1 (carry .refs)
. scripts/gpu-case-lists.sh
if [ "${TEST:-1}" = 1 ]; then
    run_case_lists delta "gdn kaczmarz deltanet" || exit 1
fi
sh scripts/gpu-bench-rounds.sh delta "chunked" | tee "$OUT/delta-bench.txt"
if [ "${PROFILE:-0}" = 1 ]; then
    for b in gpubin/bench/gpu/bench_gpu gpubin/bench/gpu/bench_gpu_*; do
      [ -x "$b" ] || continue
      for cfg in $ENVS; do
        envs=$(echo "$cfg" | sed 's/^-$//' | tr ',' ' ')
        echo "=== $(basename "$b") [$cfg] MIXSCOPE_DELTA_PROFILE=1 (medians of each pass)"
        env $envs MIXSCOPE_DELTA_PROFILE=1 MIXSCOPE_BENCH_ONLY=delta timeout 120 "$b" 2>&1 |
            grep "^delta_tc" | python3 -c '
import sys, re, statistics
rows = {}
for line in sys.stdin:
    m = re.match(r"delta_tc T=(\d+): prepare ([\d.]+) ms, state ([\d.]+) ms, output ([\d.]+) ms", line)
    if m:
        rows.setdefault(int(m.group(1)), []).append([float(x) for x in m.groups()[1:]])
for T, v in rows.items():  # gdn, kaczmarz and deltanet share T: the first 22 are gdn
    g = v[:22]
    print("T=%6d  prepare %.3f  state %.3f  output %.3f ms (gdn, medians of %d)" % ((T,) +
          tuple(statistics.median(x[i] for x in g) for i in range(3)) + (len(g),)))'
      done
    done | tee "$OUT/delta-profile.txt"
fi
if [ "${TRACE:-0}" = 1 ]; then
    for b in gpubin/bench/gpu/bench_gpu gpubin/bench/gpu/bench_gpu_*; do
        [ -x "$b" ] || continue
        echo "=== $(basename "$b") MIXSCOPE_DELTA_TRACE=1 $TRACE_ENV (each pass's first start and last end)"
        env $TRACE_ENV MIXSCOPE_DELTA_TRACE=1 MIXSCOPE_BENCH_ONLY=delta timeout 120 "$b" 2>&1 |
            grep "^delta_tc trace" | python3 -c '
import sys, re, statistics
rows = {}
pat = r"delta_tc trace T=(\d+): prepare ([\d.]+)-([\d.]+), state ([\d.]+)-([\d.]+), output ([\d.]+)-([\d.]+) ms \((\d+) segments"
for line in sys.stdin:
    m = re.match(pat, line)
    if m:
        rows.setdefault(int(m.group(1)), []).append([float(x) for x in m.groups()[1:]])
for T, v in rows.items():  # the first 22 of each T are gdn
    g = v[:22]
    md = [statistics.median(x[i] for x in g) for i in range(7)]
    print("T=%6d  prepare %.3f-%.3f  state %.3f-%.3f  output %.3f-%.3f ms, %d segments (gdn, medians)" % ((T,) + tuple(md)))'
    done | tee "$OUT/delta-trace.txt"
fi
if [ -n "${NCU:-}" ]; then
    KERNEL="$NCU" SECTION=delta SKIP=${SKIP:-46} ENV="MIXSCOPE_DELTA_PROFILE=1" \
        sh scripts/gpu-ncu-kernel.sh | tee "$OUT/delta-ncu.txt"
fi
if [ "${ALL:-0}" = 1 ]; then
    run_all_tests
fi
