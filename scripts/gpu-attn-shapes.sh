#!/bin/sh
# gpu-attn-shapes.sh: on the GPU machine (after scripts/gpu-prebuild.sh here), test_gpu and the
# attention rows of bench_gpu (SDPA from peers.py in the same run) under each block shape of
# kernels/attention_wgmma.cu (MIXSCOPE_ATTN_WG / ST / MINB / PIPE). Outputs go to $OUT.
mkdir -p /tmp/dd && for f in .devdeps/*.deb; do dpkg -x "$f" /tmp/dd; done
export LD_LIBRARY_PATH=/tmp/dd/usr/lib/x86_64-linux-gnu MIXSCOPE_REFS=$PWD/.refs
cat gpubin/COMMIT
FLA_DIR=/none python3 bench/gpu/peers.py > /tmp/peers.txt 2>/dev/null; cat /tmp/peers.txt
for cfg in "" "WG=2" "WG=2 ST=3" "WG=2 MINB=2" "PIPE=1" "PIPE=1 WG=2" "PIPE=1 WG=2 MINB=2"; do
  envs=""; for kv in $cfg; do envs="$envs MIXSCOPE_ATTN_$kv"; done
  echo "=== config: ${cfg:-default}"
  env $envs timeout 120 gpubin/tests/gpu/test_gpu > $OUT/test-$(echo ${cfg:-default} | tr ' =' '_-').txt 2>&1; echo "test_gpu rc $?"; grep -E "gpu: .* passed" $OUT/test-$(echo ${cfg:-default} | tr ' =' '_-').txt
  grep -iE "fail" $OUT/test-$(echo ${cfg:-default} | tr ' =' '_-').txt | head -5
  env $envs PEER_FILE=/tmp/peers.txt MIXSCOPE_BENCH_ONLY=attn timeout 60 gpubin/bench/gpu/bench_gpu 2>&1 | grep -E "forward"
done
