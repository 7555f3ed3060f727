#!/bin/sh
# gpu-variants.sh: on the GPU machine (after scripts/gpu-prebuild.sh here), one bench_gpu section
# (SECTION, default delta) under each of VARIANTS, comma-separated sets of environment settings
# ("-" for none; e.g. VARIANTS="-,MIXSCOPE_DELTA_WGMMA=0"), alternating ROUNDS times (default 2)
# in the same run so that each knob is judged beside the default on the same machine; with TEST=1
# test_gpu runs once under each variant first. SDPA's row comes from peers.py (fla skipped).
# Output: stdout and $OUT/variants-<section>.txt (tests: $OUT/test-<variant>.txt).
mkdir -p /tmp/dd && for f in .devdeps/*.deb; do dpkg -x "$f" /tmp/dd; done
export LD_LIBRARY_PATH=/tmp/dd/usr/lib/x86_64-linux-gnu MIXSCOPE_REFS=$PWD/.refs
OUT=${OUT:-/tmp}
SECTION=${SECTION:-delta}
VARIANTS=${VARIANTS:--}
cat gpubin/COMMIT
FLA_DIR=/none python3 bench/gpu/peers.py >/tmp/peers.txt 2>/dev/null
if [ "${TEST:-0}" = 1 ]; then
    echo "$VARIANTS" | tr ',' '\n' | while read -r cfg; do
        envs=$(echo "$cfg" | sed 's/^-$//')
        name=$(echo "$cfg" | tr ' =' '_-')
        env $envs timeout 300 gpubin/tests/gpu/test_gpu >"$OUT/test-$name.txt" 2>&1
        echo "test_gpu [$cfg] rc $?: $(grep -E 'gpu: .* passed' "$OUT/test-$name.txt")"
        grep -E "FAIL|fail " "$OUT/test-$name.txt" | grep -v " 0 failed" | head -5
    done
fi
i=0
while [ $i -lt "${ROUNDS:-2}" ]; do
    echo "$VARIANTS" | tr ',' '\n' | while read -r cfg; do
        envs=$(echo "$cfg" | sed 's/^-$//')
        echo "=== [$cfg] ($SECTION, round $i)"
        env $envs PEER_FILE=/tmp/peers.txt MIXSCOPE_BENCH_ONLY=$SECTION timeout 120 \
            gpubin/bench/gpu/bench_gpu 2>&1 | grep -E "^[a-z]+ [a-z0-9 ]+T=|^  .*us$|^delta_tc|^gdn|error"
    done
    i=$((i + 1))
done | tee "$OUT/variants-$SECTION.txt"
