#!/bin/sh
# gpu-attn-shapes.sh: on the GPU machine (after scripts/gpu-prebuild.sh here), test_gpu and the
# attention rows of bench_gpu (SDPA from peers.py in the same run) under each block shape of
# kernels/attention_wgmma.cu (MIXSCOPE_ATTN_WG / PIPE / QREG; SHAPES="..." picks some, the
# default shape spelled "-"): scripts/gpu-variants.sh with those settings. Outputs go to $OUT.
SHAPES=${SHAPES:-"-,WG=2,PIPE=1,PIPE=1 WG=2,QREG=1,QREG=1 WG=2,QREG=1 PIPE=1,QREG=1 PIPE=1 WG=2"}
VARIANTS=$(echo "$SHAPES" | tr ',' '\n' | while read -r cfg; do
    envs=""
    for kv in $cfg; do [ "$kv" = - ] || envs="$envs MIXSCOPE_ATTN_$kv"; done
    echo "${envs:- -}"
done | sed 's/^ //' | paste -sd, -)
SECTION=attn TEST=1 ROUNDS=${ROUNDS:-1} VARIANTS="$VARIANTS" exec sh "$(dirname "$0")/gpu-variants.sh"
