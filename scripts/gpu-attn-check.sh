#!/bin/sh
# gpu-attn-check.sh: on the GPU machine, one sitting for a change to attention's tensor-core
# forward (kernels/attention_ws_wgmma.cu, attention_wgmma.cu). Binaries come prebuilt from here
# (scripts/gpu-prebuild.sh, packed as build/gpubin.tar.xz to fit the carry). Runs, with TEST=1
# (the default), every gpubin/tests/gpu/test_gpu* (or the TEST_BINS given) on the softmax and
# Parallax cases under every setting of ENVS (space-separated, "-" for none, "," between the
# variables of one setting; e.g. "- MIXSCOPE_ATTN_WS=3 MIXSCOPE_ATTN_WS=0"; TEST_ENVS, when
# given, for the tests alone), each case list cut off after TIMEOUT seconds (default 300, what a
# kernel that hangs costs); then PyTorch's SDPA timed once (bench/gpu/peers.py with no fla
# snapshot: SDPA alone) and bench_gpu's attention rows from every gpubin/bench/gpu/bench_gpu*
# under every setting, alternating ROUNDS times (default 2), each row with its ratio to that SDPA.
# With ALL=1, then every GPU test binary in full (tests/gpu/run.sh). A case list that fails or
# does not finish stops it before the timings.
# Output: stdout and $OUT/attn-*.txt.
. scripts/gpu-unpack.sh
export MIXSCOPE_REFS="$PWD/.refs" # test_gpu's checkpoint cases (carry .refs)
. scripts/gpu-case-lists.sh
if [ "${TEST:-1}" = 1 ]; then
    run_case_lists attn "softmax parallax" || exit 1
fi
FLA_DIR=/nonexistent python3 bench/gpu/peers.py >"$OUT/attn-sdpa.txt" 2>/dev/null
cat "$OUT/attn-sdpa.txt"
PEER_FILE="$OUT/attn-sdpa.txt" sh scripts/gpu-bench-rounds.sh attn "forward" | tee "$OUT/attn-bench.txt"
if [ "${ALL:-0}" = 1 ]; then
    run_all_tests
fi
