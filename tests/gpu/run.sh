#!/bin/sh
# make test-gpu: builds and runs the GPU tests; says so and succeeds when there is no GPU.
BUILD=${1:-build/release}
if ! command -v nvidia-smi >/dev/null 2>&1 || ! nvidia-smi -L >/dev/null 2>&1; then
    echo "test-gpu: skipped: no NVIDIA GPU on this machine"
    exit 0
fi
"$BUILD/tests/gpu/test_gpu"; rc=$?
"$BUILD/tests/gpu/test_engine_gpu" || rc=1
"$BUILD/tests/gpu/test_lanes_gpu" || rc=1
"$BUILD/tests/gpu/test_train_gpu" || rc=1
"$BUILD/tests/gpu/test_attribution_gpu" || rc=1
exit $rc
