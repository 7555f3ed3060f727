#!/bin/sh
# gpu-profile-delta.sh: on the GPU machine, after scripts/gpu-run.sh has built build/gpu (or with
# BIN=gpubin OBJ=build/cu/kernels/delta_tc.o after scripts/gpu-prebuild.sh here, the object
# carried): ncu's stall reasons and instruction counts for the delta tensor-core kernels (one
# T = 4K prefill, kernels one after the other), and the SASS of the state pass, so a tuning step
# starts from measurements. Output: stdout, and the full reports under $OUT (or /tmp).
set -e
dir=${OUT:-/tmp}
BIN=${BIN:-build/gpu}
OBJ=${OBJ:-$BIN/kernels/delta_tc.o}
export LD_LIBRARY_PATH=/tmp/dd/usr/lib/x86_64-linux-gnu
ncu --kernel-name regex:delta_tc --launch-count 3 \
    --metrics 'regex:smsp__average_warps_issue_stalled_.*_per_issue_active\.ratio,smsp__inst_executed.sum,sm__cycles_elapsed.max,smsp__issue_active.avg.pct_of_peak_sustained_active' \
    env MIXSCOPE_DELTA_PROFILE=1 MIXSCOPE_BENCH_ONLY=delta "$BIN/bench/gpu/bench_gpu" >"$dir/ncu-stalls.txt" 2>&1 || true
grep -E 'delta_tc_|inst_executed|cycles_elapsed|issue_active|stalled' "$dir/ncu-stalls.txt" |
    awk '/delta_tc_/ { print; next } { v = $NF; if (v + 0 >= 0.05 || $0 ~ /inst_|cycles|issue_active/) print }'
ncu --kernel-name regex:delta_tc_state --launch-count 1 --section SourceCounters --section WarpStateStats \
    env MIXSCOPE_DELTA_PROFILE=1 MIXSCOPE_BENCH_ONLY=delta "$BIN/bench/gpu/bench_gpu" >"$dir/ncu-source.txt" 2>&1 || true
grep -iE -A12 'stall sampling|Warp Stall|Location' "$dir/ncu-source.txt" | head -60
cuobjdump -sass -fun '_Z14delta_tc_stateILi128ELi32ELi4ELi2EEviiiiPK13__nv_bfloat1610tc_scratchPf' \
    "$OBJ" >"$dir/state.sass" 2>&1 || true
echo "state pass SASS: $(grep -c '/\*[0-9a-f]*\*/' "$dir/state.sass") instructions; by opcode:"
grep -oE '^ +/\*[0-9a-f]{4}\*/ +[A-Z0-9_.]+' "$dir/state.sass" | awk '{ sub(/\..*/, "", $2); n[$2]++ } END { for (k in n) print n[k], k }' | sort -rn | head -25
