#!/bin/sh
# gpu-kalman-check.sh: on the GPU machine, one sitting for a change to kernels/kalman.cu. Binaries
# come prebuilt from here (scripts/gpu-prebuild.sh, or a gpubin/ packed as build/gpubin.tar.xz to
# fit the carry: `tar cf - gpubin | xz -T2 > build/gpubin.tar.xz`). Runs every
# gpubin/tests/gpu/test_gpu* on the Kalman cases under MIXSCOPE_KALMAN_CHUNKS=0 (the default), 1
# and 3 (chunk maps, carry, several chunks), each under every setting of ENVS (space-separated,
# "-" for none, "," between the variables of one setting; default "-"); test_engine_gpu and
# test_lanes_gpu whole; bench_gpu's kalman section from every gpubin/bench/gpu/bench_gpu* (the
# change beside its baselines) under every setting of ENVS, alternating ROUNDS times (default 2);
# then, with NCU=1, ncu of one kx_apply launch of gpubin/bench/gpu/bench_gpu
# (scripts/gpu-ncu-kernel.sh). Output: stdout and $OUT/kalman-*.txt.
. scripts/gpu-unpack.sh
{
    for t in gpubin/tests/gpu/test_gpu*; do
        [ -x "$t" ] || continue
        for cfg in $ENVS; do
            envs=$(echo "$cfg" | sed 's/^-$//' | tr ',' ' ')
            for ch in 0 1 3; do
                printf '%s [%s] chunks=%s: ' "$(basename "$t")" "$cfg" $ch
                env $envs MIXSCOPE_GPU_ONLY=kalman MIXSCOPE_KALMAN_CHUNKS=$ch timeout 300 "$t" 2>&1 |
                    grep -E "FAIL|gpu: .* passed" | head -5
            done
        done
    done
    for t in test_engine_gpu test_lanes_gpu; do
        printf '%s: ' $t
        timeout 300 gpubin/tests/gpu/$t 2>&1 | grep -E "FAIL|passed" | tail -3
    done
} | tee "$OUT/kalman-tests.txt"
sh scripts/gpu-bench-rounds.sh kalman "^kalman scan" | tee "$OUT/kalman-bench.txt"
if [ "${NCU:-0}" = 1 ]; then
    KERNEL=kx_apply SECTION=kalman SKIP=2 sh scripts/gpu-ncu-kernel.sh | tee "$OUT/kalman-ncu.txt"
fi
