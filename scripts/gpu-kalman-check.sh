#!/bin/sh
# gpu-kalman-check.sh: on the GPU machine, one sitting for a change to kernels/kalman.cu. Binaries
# come prebuilt from here (scripts/gpu-prebuild.sh, or a gpubin/ packed as build/gpubin.tar.xz to
# fit the carry: `tar cf - gpubin | xz -T2 > build/gpubin.tar.xz`).
# - Every gpubin/tests/gpu/test_gpu* (or the TEST_BINS given) on the Kalman cases under
#   MIXSCOPE_KALMAN_CHUNKS=0 (the default), 1 and 3 (chunk maps, carry, several chunks), each
#   under every setting of ENVS (space-separated, "-" for none, "," between the variables of one
#   setting; default "-"; TEST_ENVS, when given, replaces these settings). Each list is cut off
#   after TIMEOUT seconds (default 300); a list that fails or does not finish stops the sitting
#   (scripts/gpu-case-lists.sh). Then test_engine_gpu and test_lanes_gpu whole.
# - bench_gpu's kalman section from every gpubin/bench/gpu/bench_gpu* (the change beside its
#   baselines) under every setting of ENVS, alternating ROUNDS times (default 2).
# - NCU=1: ncu of one kx_apply launch of gpubin/bench/gpu/bench_gpu (scripts/gpu-ncu-kernel.sh).
# Output: stdout and $OUT/kalman-*.txt.
. scripts/gpu-unpack.sh
. scripts/gpu-case-lists.sh
# the Kalman cases under every setting of ENVS, each with MIXSCOPE_KALMAN_CHUNKS 0, 1 and 3
settings=""
for cfg in $ENVS; do
    for ch in 0 1 3; do
        settings="$settings $(echo "$cfg" | sed 's/^-$//; s/..*/&,/')MIXSCOPE_KALMAN_CHUNKS=$ch"
    done
done
TEST_ENVS=${TEST_ENVS:-$settings} run_case_lists kalman kalman || exit 1
for t in test_engine_gpu test_lanes_gpu; do
    printf '%s: ' $t
    timeout "${TIMEOUT:-300}" gpubin/tests/gpu/$t 2>&1 | grep -E "FAIL|passed" | tail -3
done | tee -a "$OUT/kalman-tests.txt"
sh scripts/gpu-bench-rounds.sh kalman "^kalman scan" | tee "$OUT/kalman-bench.txt"
if [ "${NCU:-0}" = 1 ]; then
    KERNEL=kx_apply SECTION=kalman SKIP=2 sh scripts/gpu-ncu-kernel.sh | tee "$OUT/kalman-ncu.txt"
fi
