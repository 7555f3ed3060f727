#!/bin/sh
# gpu-bench-rounds.sh SECTION PATTERN: on the GPU machine, bench_gpu's SECTION
# (MIXSCOPE_BENCH_ONLY) from every gpubin/bench/gpu/bench_gpu* (a change beside its baselines)
# under every setting of ENVS (space-separated, "-" for none, "," between the variables of one
# setting), alternating ROUNDS times (default 2); prints the lines matching PATTERN (grep -E).
# What scripts/gpu-delta-check.sh and scripts/gpu-kalman-check.sh time with.
ENVS=${ENVS:--}
i=0
while [ $i -lt "${ROUNDS:-2}" ]; do
    for b in gpubin/bench/gpu/bench_gpu gpubin/bench/gpu/bench_gpu_*; do
        [ -x "$b" ] || continue
        for cfg in $ENVS; do
            envs=$(echo "$cfg" | sed 's/^-$//' | tr ',' ' ')
            echo "=== $(basename "$b") [$cfg] (round $i)"
            env $envs MIXSCOPE_BENCH_ONLY="$1" timeout 120 "$b" 2>&1 | grep -E "$2|error"
        done
    done
    i=$((i + 1))
done
