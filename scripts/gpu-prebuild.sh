#!/bin/sh
# gpu-prebuild.sh: run here (where nvcc is) to build the GPU test and benchmark binaries into
# gpubin/ (ignored by git), stripped (47 MB); then on the GPU machine `sh scripts/gpu-run.sh
# prebuilt-test` and `prebuilt-bench` run make test-gpu's and make bench-gpu's scripts on them
# without compiling there (device time is the scarce part; gpu-run.sh says what each carries).
set -e
cd "$(dirname "$0")/.."
B=${BUILD:-build/cu}
make -j"$(nproc)" BUILD="$B" CUDA=1 "$B/tests/gpu/test_gpu" "$B/tests/gpu/test_engine_gpu" \
    "$B/tests/gpu/test_lanes_gpu" "$B/tests/gpu/test_train_gpu" "$B/tests/gpu/test_attribution_gpu" \
    "$B/bench/gpu/bench_gpu"
rm -rf gpubin
mkdir -p gpubin/tests/gpu gpubin/bench/gpu
cp "$B"/tests/gpu/test_gpu "$B"/tests/gpu/test_*_gpu gpubin/tests/gpu/
cp "$B/bench/gpu/bench_gpu" gpubin/bench/gpu/
strip gpubin/tests/gpu/* gpubin/bench/gpu/*
git rev-parse HEAD >gpubin/COMMIT
git status --porcelain --untracked-files=no | grep -q . && echo "+ uncommitted changes" >>gpubin/COMMIT
du -sh gpubin .fla .refs .devdeps 2>/dev/null || true # whichever of them are here
