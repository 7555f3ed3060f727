#!/bin/sh
# make bench-gpu: mixscope's GPU kernels beside their peers, timed in the same run: PyTorch SDPA and
# flash-linear-attention from the pinned snapshot in .fla (bench/gpu/peers.py; without it the fla
# rows say '-'; scripts/fla-snapshot.sh makes it from a clone of the peer's repository).
BUILD=${1:-build/release}
if ! nvidia-smi -L >/dev/null 2>&1; then echo "bench-gpu: skipped: no NVIDIA GPU"; exit 0; fi
PEERS=$(mktemp)
FLA_DIR=${FLA_DIR:-.fla} python3 bench/gpu/peers.py >"$PEERS" || echo "bench-gpu: the peers did not run" >&2
PEER_FILE="$PEERS" "$BUILD/bench/gpu/bench_gpu"
rc=$?
rm -f "$PEERS"
exit $rc
