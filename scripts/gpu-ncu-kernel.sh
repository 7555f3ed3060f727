#!/bin/sh
# gpu-ncu-kernel.sh: on the GPU machine (after scripts/gpu-prebuild.sh here), ncu's view of one
# launch of the kernels matching KERNEL (a regex) in bench_gpu's SECTION (default delta), after
# SKIP launches of them (default 2), with ENV settings (e.g. ENV="MIXSCOPE_DELTA_PROFILE=1"):
# $OUT/ncu.ncu-rep, $OUT/ncu-details.txt and $OUT/ncu-sass.csv (per-instruction samples), which
# scripts/ncu-digest.py here turns into the lines a tuning step starts from.
mkdir -p /tmp/dd && for f in .devdeps/*.deb; do dpkg -x "$f" /tmp/dd; done
export LD_LIBRARY_PATH=/tmp/dd/usr/lib/x86_64-linux-gnu
OUT=${OUT:-/tmp}
timeout 300 ncu --kernel-name "regex:${KERNEL:?KERNEL=regex}" --launch-skip "${SKIP:-2}" --launch-count 1 \
    --section WarpStateStats --section SourceCounters --section SpeedOfLight --section LaunchStats \
    --section Occupancy --import-source no -o "$OUT/ncu" \
    env $ENV MIXSCOPE_BENCH_ONLY="${SECTION:-delta}" gpubin/bench/gpu/bench_gpu >"$OUT/ncu-log.txt" 2>&1
echo "ncu rc $?"
ncu --import "$OUT/ncu.ncu-rep" --print-summary none >"$OUT/ncu-details.txt" 2>&1
ncu --import "$OUT/ncu.ncu-rep" --page source --csv --print-source sass >"$OUT/ncu-sass.csv" 2>&1
python3 scripts/ncu-digest.py "$OUT/ncu-details.txt" "$OUT/ncu-sass.csv"
