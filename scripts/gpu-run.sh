#!/bin/sh
# gpu-run.sh: on the GPU machine (carrying .devdeps and .refs, see scripts/gpu-prepare.sh, and
# .fla for bench-gpu's peers):
# unpacks cJSON into /tmp/dd, then builds and runs `make test-gpu` and `make bench-gpu`.
# Usage: sh scripts/gpu-run.sh [test|bench|all|tune|attn|step|train|interv|prebuilt-test|prebuilt-bench]
#   prebuilt-test / prebuilt-bench: make test-gpu's / make bench-gpu's script on the binaries
#          scripts/gpu-prebuild.sh left in gpubin/; outputs into $OUT. All of it is over the device
#          tool's 64 MiB carry, so two runs: carry .devdeps .refs gpubin/tests gpubin/COMMIT, then
#          .devdeps .fla gpubin/bench gpubin/COMMIT
#   interv: the attribution kernel against the CPU, the engine's interventions under device gpu,
#           and bench-attribution
#   train: builds mixscope and runs tools/train_peer.py (carry .fla too: the pinned
#          flash-linear-attention snapshot that scripts/fla-snapshot.sh makes)
#   step: make test-gpu (both binaries, the engine's gpu paths included) and the step rows of
#         bench-gpu (the GPU-resident model stepper)
#   attn: scripts/wgmma-probe.cu, the attention lines of test-gpu, and the attention rows of
#         bench-gpu with the wgmma kernel (MIXSCOPE_ATTN_WGMMA=1) and without it (0)
#   tune: the chunked delta rows alone for the state pass's key split (MIXSCOPE_DELTA_KS) and
#         copy-ring depth (MIXSCOPE_DELTA_ST), and run one kernel at a time with
#         the time of each kernel (MIXSCOPE_DELTA_PROFILE); with NCU=1 also ncu's view of them
set -e
what=${1:-all}
mkdir -p /tmp/dd
for f in .devdeps/*.deb; do dpkg -x "$f" /tmp/dd; done
export CPATH=/tmp/dd/usr/include LIBRARY_PATH=/tmp/dd/usr/lib/x86_64-linux-gnu
export LD_LIBRARY_PATH=/tmp/dd/usr/lib/x86_64-linux-gnu MIXSCOPE_REFS="$PWD/.refs"
nvidia-smi -L
if [ "$what" = prebuilt-test ]; then
    echo "binaries of $(cat gpubin/COMMIT)"
    sh tests/gpu/run.sh gpubin >"${OUT:-/tmp}/test-gpu.txt" 2>&1 && echo "test-gpu: ok" || echo "test-gpu: FAILED"
    grep -E "FAIL|passed|timing raw" "${OUT:-/tmp}/test-gpu.txt" || true
    exit 0
fi
if [ "$what" = prebuilt-bench ]; then
    echo "binaries of $(cat gpubin/COMMIT)"
    sh bench/gpu/run.sh gpubin 2>"${OUT:-/tmp}/peers-stderr.txt" | tee "${OUT:-/tmp}/bench-gpu.txt"
    exit 0
fi
if [ "$what" = interv ]; then
    # the interventions' GPU paths: the attribution kernel against the CPU reference, the engine
    # under device gpu (edits, snapshots, restores on the resident stepper) and bench-attribution.
    # Prebuilt binaries in gpubin/ (built where nvcc is, same CUDA) are used when they load.
    b=gpubin
    if [ ! -x $b/test_attribution_gpu ] || ldd $b/test_attribution_gpu | grep -q "not found"; then
        make -j16 BUILD=build/gpu CUDA=1 build/gpu/tests/gpu/test_attribution_gpu \
            build/gpu/tests/gpu/test_engine_gpu build/gpu/bench/gpu/bench_attribution 2>&1 | grep -v '^CC \|^NVCC '
        mkdir -p $b && cp build/gpu/tests/gpu/test_attribution_gpu build/gpu/tests/gpu/test_engine_gpu \
            build/gpu/bench/gpu/bench_attribution $b/
    fi
    $b/test_attribution_gpu || true
    $b/test_engine_gpu 2>&1 | grep -E "interventions|passed" || true
    $b/bench_attribution
    exit 0
fi
if [ "$what" = attn ]; then
    nvcc -std=c++17 -gencode arch=compute_90a,code=sm_90a -I. -o /tmp/wgmma-probe scripts/wgmma-probe.cu
    /tmp/wgmma-probe || true
    make -j16 BUILD=build/gpu CUDA=1 build/gpu/tests/gpu/test_gpu build/gpu/bench/gpu/bench_gpu 2>&1 | grep -v '^CC \|^NVCC '
    build/gpu/tests/gpu/test_gpu 2>&1 | grep -E 'softmax|parallax|gpu:' || true
    python3 bench/gpu/peers.py >/tmp/peers.txt || echo "the peers did not run"
    for knob in 1 0; do
        echo "== MIXSCOPE_ATTN_WGMMA=$knob"
        PEER_FILE=/tmp/peers.txt MIXSCOPE_ATTN_WGMMA=$knob MIXSCOPE_BENCH_ONLY=attn \
            build/gpu/bench/gpu/bench_gpu 2>&1 | tail -5
    done
    [ -n "$NCU" ] || exit 0
    # ncu on the Parallax forward at 16K (the 25th wgmma<true> launch of the attn rows)
    MIXSCOPE_BENCH_ONLY=attn ncu --kernel-name-base mangled --kernel-name regex:wgmmaILb1 \
        --launch-skip 24 --launch-count 1 --section SpeedOfLight --section ComputeWorkloadAnalysis \
        --section WarpStateStats --section MemoryWorkloadAnalysis \
        build/gpu/bench/gpu/bench_gpu >"${OUT:-/tmp}/ncu.txt" 2>&1
    grep -E "Duration|Throughput|Issue Slots|Ipc|pipeline|Spilling|Warp Cycles" "${OUT:-/tmp}/ncu.txt"
    exit 0
fi
if [ "$what" = tune ]; then
    make -j16 BUILD=build/gpu CUDA=1 build/gpu/bench/gpu/bench_gpu 2>&1 | grep -v '^CC \|^NVCC '
    for cfg in "" "MIXSCOPE_DELTA_KS=1" "MIXSCOPE_DELTA_KS=4" "MIXSCOPE_DELTA_ST=3" "MIXSCOPE_DELTA_PROFILE=1"; do
        echo "== ${cfg:-defaults} (with MIXSCOPE_DELTA_PROFILE: the kernels one after the other, the last run of each T)"
        env $cfg MIXSCOPE_BENCH_ONLY=delta build/gpu/bench/gpu/bench_gpu 2>&1 |
            awk '/^delta_tc/ { last[$2] = $0; next } { print } END { for (k in last) print last[k] }'
    done
    [ -n "$NCU" ] || exit 0
    if command -v ncu >/dev/null; then
        MIXSCOPE_BENCH_ONLY=delta ncu --kernel-name regex:delta_tc --launch-count 3 \
            --section SpeedOfLight --section WarpStateStats --section Occupancy \
            --section MemoryWorkloadAnalysis build/gpu/bench/gpu/bench_gpu >"${OUT:-/tmp}/ncu.txt" 2>&1
        grep -E 'delta_tc|Duration|Throughput|Stall|Achieved Occupancy|Theoretical Occupancy|Block Limit|Issued' "${OUT:-/tmp}/ncu.txt" | head -90
    fi
    exit 0
fi
if [ "$what" = train ]; then
    # the GPU trainer against the CPU one, then `train` timed on the GPU (bench_train: no SDL,
    # ncurses or readline here), then (PEER=1) the peer replay of tools/train_peer.py
    make -j16 BUILD=build/gpu CUDA=1 build/gpu/bench/train/bench_train \
        build/gpu/tests/gpu/test_train_gpu 2>&1 | { grep -v '^CC \|^NVCC \|^LINK ' || true; }
    build/gpu/tests/gpu/test_train_gpu 2>&1 | tee "${OUT:-/tmp}/test-train-gpu.txt" | tail -25
    for m in ${TRAIN_MIXERS:-gdn}; do
        echo "== bench_train --gpu $m ${TRAIN_ARGS:-steps=300 lr=3e-3}"
        build/gpu/bench/train/bench_train --gpu $m ${TRAIN_ARGS:-steps=300 lr=3e-3} log=25 \
            out=/tmp/run-$m 2>&1 | tee "${OUT:-/tmp}/train-gpu-$m.txt"
        cp /tmp/run-$m/log.csv "${OUT:-/tmp}/log-gpu-$m.csv" 2>/dev/null || true
    done
    [ -n "$PEER" ] || exit 0
    for mx in ${PEER_MIXERS:-gdn}; do
        python3 tools/train_peer.py --mixscope build/gpu/bench/train/bench_train --fla .fla \
            --mixer "$mx" --steps "${STEPS:-50}" --run "/tmp/train-peer-$mx" ${PEER_GPU:+--gpu} 2>&1 |
            tee "${OUT:-/tmp}/train-peer-$mx${PEER_GPU:+-gpu}.txt"
    done
    exit 0
fi
if [ "$what" = step ]; then
    make -j16 BUILD=build/gpu CUDA=1 test-gpu 2>&1 | grep -v '^CC \|^NVCC ' | tee "${OUT:-/tmp}/test-gpu.txt" |
        grep -E 'FAIL|passed|engine|raw |model (gdn|kaczmarz|deltanet|gla)'
    make -j16 BUILD=build/gpu CUDA=1 build/gpu/bench/gpu/bench_gpu 2>&1 | grep -v '^CC \|^NVCC '
    MIXSCOPE_BENCH_ONLY=step build/gpu/bench/gpu/bench_gpu 2>&1 | tee "${OUT:-/tmp}/bench-step-gpu.txt"
    exit 0
fi
if [ "$what" != bench ]; then make -j16 BUILD=build/gpu CUDA=1 test-gpu 2>&1 | grep -v '^CC \|^NVCC '; fi
if [ "$what" != test ]; then make -j16 BUILD=build/gpu CUDA=1 bench-gpu 2>&1 | grep -v '^CC \|^NVCC '; fi
