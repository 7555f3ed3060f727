#!/bin/sh
# make bench-gpu: mixscope's GPU kernels beside PyTorch SDPA, timed in the same run.
BUILD=${1:-build/release}
if ! nvidia-smi -L >/dev/null 2>&1; then echo "bench-gpu: skipped: no NVIDIA GPU"; exit 0; fi
SDPA=$(mktemp)
python3 bench/gpu/sdpa.py >"$SDPA" 2>/dev/null || echo "bench-gpu: PyTorch SDPA not available" >&2
SDPA_FILE="$SDPA" "$BUILD/bench/gpu/bench_gpu"
rc=$?
rm -f "$SDPA"
exit $rc
