#!/bin/sh
# gpu-run.sh: on the GPU machine (carrying .devdeps and .refs, see scripts/gpu-prepare.sh):
# unpacks cJSON into /tmp/dd, then builds and runs `make test-gpu` and `make bench-gpu`.
# Usage: sh scripts/gpu-run.sh [test|bench|all]
set -e
what=${1:-all}
mkdir -p /tmp/dd
for f in .devdeps/*.deb; do dpkg -x "$f" /tmp/dd; done
export CPATH=/tmp/dd/usr/include LIBRARY_PATH=/tmp/dd/usr/lib/x86_64-linux-gnu
export LD_LIBRARY_PATH=/tmp/dd/usr/lib/x86_64-linux-gnu MIXSCOPE_REFS="$PWD/.refs"
nvidia-smi -L
if [ "$what" != bench ]; then make -j16 BUILD=build/gpu CUDA=1 test-gpu 2>&1 | grep -v '^CC \|^NVCC '; fi
if [ "$what" != test ]; then make -j16 BUILD=build/gpu CUDA=1 bench-gpu 2>&1 | grep -v '^CC \|^NVCC '; fi
