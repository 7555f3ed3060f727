#!/bin/sh
# gpu-profile-attn.sh: on the GPU machine (binaries from scripts/gpu-prebuild.sh in gpubin/):
# ncu's speed-of-light, pipe utilisation and stall reasons for one softmax forward at T = 16K
# (bench_gpu's attn rows; the launch after the 4K row's), under each block shape given as
# arguments ("QREG=1 WG=2" sets MIXSCOPE_ATTN_QREG=1 MIXSCOPE_ATTN_WG=2; "-" the default).
# Full reports under $OUT (or /tmp); a digest on stdout.
dir=${OUT:-/tmp}
export LD_LIBRARY_PATH=/tmp/dd/usr/lib/x86_64-linux-gnu
for cfg in "$@"; do
    envs=""
    for kv in $cfg; do [ "$kv" = - ] || envs="$envs MIXSCOPE_ATTN_$kv"; done
    f="$dir/ncu-attn-$(echo "$cfg" | tr " =" "_-").txt"
    env $envs MIXSCOPE_BENCH_ONLY=attn ncu --kernel-name regex:attn_fwd_wgmma --launch-skip 30 \
        --launch-count 1 --section SpeedOfLight --section LaunchStats --section Occupancy \
        --section ComputeWorkloadAnalysis --section WarpStateStats \
        --metrics 'sm__pipe_tensor_op_gmma_cycles_active.avg.pct_of_peak_sustained_active,smsp__issue_active.avg.pct_of_peak_sustained_active,l1tex__data_pipe_lsu_wavefronts_mem_shared.avg.pct_of_peak_sustained_elapsed,lts__t_sectors.sum,regex:smsp__average_warps_issue_stalled_.*_per_issue_active\.ratio' \
        gpubin/bench/gpu/bench_gpu >"$f" 2>&1
    echo "=== $cfg"
    grep -E 'Grid Size|Duration|Registers Per|Achieved Occupancy|Compute \(SM\) Throughput|Memory Throughput|L2 Cache Throughput|gmma_cycles|issue_active|mem_shared|lts__t_sectors|Executed Ipc A' "$f"
    grep -E 'stalled_' "$f" | awk '{ v = $NF; if (v + 0 >= 0.1) print }'
done
