#!/bin/sh
# gpu-ab.sh: on the GPU machine, after scripts/gpu-prebuild.sh here: bench_gpu's sections (SECTIONS,
# default "attn delta") from gpubin/bench/gpu/bench_gpu beside an older build of it
# (gpubin/bench/gpu/bench_gpu_<commit>, built here from a worktree of that commit and carried),
# alternating ROUNDS times (default 2) in the same run, so that a change is judged against its
# own baseline on the same machine. SDPA's row comes from peers.py (fla skipped). Output: stdout
# and $OUT/ab-<section>.txt.
mkdir -p /tmp/dd && for f in .devdeps/*.deb; do dpkg -x "$f" /tmp/dd; done
export LD_LIBRARY_PATH=/tmp/dd/usr/lib/x86_64-linux-gnu
OUT=${OUT:-/tmp}
FLA_DIR=/none python3 bench/gpu/peers.py >/tmp/peers.txt 2>/dev/null
for sec in ${SECTIONS:-attn delta}; do
    i=0
    while [ $i -lt "${ROUNDS:-2}" ]; do
        for b in gpubin/bench/gpu/bench_gpu gpubin/bench/gpu/bench_gpu_*; do
            [ -x "$b" ] || continue
            echo "=== $(basename "$b") ($sec, round $i)"
            PEER_FILE=/tmp/peers.txt MIXSCOPE_BENCH_ONLY=$sec "$b" 2>&1 | grep -E "^[a-z]+ [a-z0-9 ]+T=|^  .*us$"
        done
        i=$((i + 1))
    done | tee "$OUT/ab-$sec.txt"
done
