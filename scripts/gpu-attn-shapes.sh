#!/bin/sh
# gpu-attn-shapes.sh: on the GPU machine (after scripts/gpu-prebuild.sh here), test_gpu and the
# attention rows of bench_gpu (SDPA from peers.py in the same run) under each block shape of
# kernels/attention_wgmma.cu (MIXSCOPE_ATTN_WG / PIPE / QREG; SHAPES="..." picks some, the
# default shape spelled "-"). Outputs go to $OUT.
mkdir -p /tmp/dd && for f in .devdeps/*.deb; do dpkg -x "$f" /tmp/dd; done
export LD_LIBRARY_PATH=/tmp/dd/usr/lib/x86_64-linux-gnu MIXSCOPE_REFS=$PWD/.refs
cat gpubin/COMMIT
FLA_DIR=/none python3 bench/gpu/peers.py > /tmp/peers.txt 2>/dev/null; cat /tmp/peers.txt
# the shapes, comma-separated; "-" the default
SHAPES=${SHAPES:-"-,WG=2,PIPE=1,PIPE=1 WG=2,QREG=1,QREG=1 WG=2,QREG=1 PIPE=1,QREG=1 PIPE=1 WG=2"}
echo "$SHAPES" | tr ',' '\n' | while read -r cfg; do
  envs=""; for kv in $cfg; do [ "$kv" = - ] || envs="$envs MIXSCOPE_ATTN_$kv"; done
  name=$(echo "$cfg" | tr ' =' '_-')
  echo "=== shape: $cfg"
  env $envs timeout 120 gpubin/tests/gpu/test_gpu > "$OUT/test-$name.txt" 2>&1; echo "test_gpu rc $?"
  grep -E "gpu: .* passed" "$OUT/test-$name.txt"; grep -iE "fail" "$OUT/test-$name.txt" | head -5
  env $envs PEER_FILE=/tmp/peers.txt MIXSCOPE_BENCH_ONLY=attn timeout 60 gpubin/bench/gpu/bench_gpu 2>&1 | grep -E "forward"
done
