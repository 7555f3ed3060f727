# peers.py: the peers of make bench-gpu, timed in the same run as mixscope's kernels
# (bench/gpu/run.sh): flash-linear-attention (a pinned snapshot carried beside the tree as .fla,
# its commit in .fla/COMMIT) and PyTorch's causal scaled_dot_product_attention. B=1 (decode: B
# as given), H=16, d=128, bf16 inputs, the shapes of bench_gpu.c.
#
# Every call is captured once as a CUDA graph and replayed, so the figures are the kernels' and
# not Python's: a prefill is timed per replay; a decode step as REPLAYS replays back to back
# between two events, divided by REPLAYS (what gpu_time_graph_median does on mixscope's side).
# Prints "KEY PARAM MS" lines (medians); '#' lines say what ran. A peer that fails prints its
# error on stderr and no line, and the benchmark shows '-' for it.
import os
import sys
import traceback

import torch
import torch.nn.functional as F

H, D, REPLAYS, ITERS = 16, 128, 100, 20
dev = "cuda"
torch.backends.cuda.matmul.allow_tf32 = False
torch.backends.cudnn.allow_tf32 = False


def graph_of(fn):
    s = torch.cuda.Stream()
    s.wait_stream(torch.cuda.current_stream())
    with torch.cuda.stream(s):
        for _ in range(3):  # warm-up: Triton autotuning and compilation happen here
            fn()
    torch.cuda.current_stream().wait_stream(s)
    torch.cuda.synchronize()
    g = torch.cuda.CUDAGraph()
    with torch.cuda.graph(g):
        fn()
    return g


def median_ms(fn, replays):
    g = graph_of(fn)
    for _ in range(3):
        g.replay()
    torch.cuda.synchronize()
    times = []
    for _ in range(ITERS):
        a = torch.cuda.Event(enable_timing=True)
        b = torch.cuda.Event(enable_timing=True)
        a.record()
        for _ in range(replays):
            g.replay()
        b.record()
        torch.cuda.synchronize()
        times.append(a.elapsed_time(b) / replays)
    times.sort()
    return times[len(times) // 2]


def emit(key, param, fn, replays=1):
    try:
        ms = median_ms(fn, replays)
        print(f"{key} {param} {ms:.5f}")
    except Exception:
        print(f"peers.py: {key} {param} failed:", file=sys.stderr)
        traceback.print_exc(file=sys.stderr)
    sys.stdout.flush()


def rnd(*shape, scale=1.0, offset=0.0, dtype=torch.bfloat16):
    return ((torch.rand(*shape, device=dev) * 2 - 1) * scale + offset).to(dtype)


def unit(x):
    return torch.nn.functional.normalize(x.float(), dim=-1).to(x.dtype)


commit = "unknown"
fla_dir = os.environ.get("FLA_DIR", ".fla")
try:
    with open(os.path.join(fla_dir, "COMMIT")) as f:
        commit = f.read().strip()
except OSError:
    pass
print(f"# peers: torch {torch.__version__}, flash-linear-attention {commit} ({fla_dir}), "
      f"{torch.cuda.get_device_name()}")
sys.stdout.flush()

with torch.inference_mode():
    for T in (4096, 16384):
        q, k, v = (rnd(1, H, T, D) for _ in range(3))
        emit("sdpa", T, lambda: F.scaled_dot_product_attention(q, k, v, is_causal=True))
        del q, k, v

    try:
        sys.path.insert(0, fla_dir)
        from fla.ops.delta_rule import chunk_delta_rule
        from fla.ops.gated_delta_rule import (chunk_gated_delta_rule,
                                              fused_recurrent_gated_delta_rule)
        from fla.ops.parallax import parallel_parallax
    except Exception:
        print("peers.py: flash-linear-attention not importable:", file=sys.stderr)
        traceback.print_exc(file=sys.stderr)
        sys.exit(0)

    scale = D ** -0.5
    for T in (4096, 16384, 32768, 65536, 131072):
        q, k = unit(rnd(1, T, H, D)), unit(rnd(1, T, H, D))
        v = rnd(1, T, H, D)
        g = rnd(1, T, H, scale=0.25, offset=-0.25, dtype=torch.float32)
        beta = rnd(1, T, H, scale=0.45, offset=0.5, dtype=torch.float32)
        emit("fla_gdn_chunk", T,
             lambda: chunk_gated_delta_rule(q, k, v, g, beta, scale=scale))
        emit("fla_delta_chunk", T, lambda: chunk_delta_rule(q, k, v, beta, scale=scale))
        del q, k, v, g, beta

    for T in (32768, 131072):  # 4 heads: a 16-head layer split over 4 GPUs
        q, k = unit(rnd(1, T, 4, D)), unit(rnd(1, T, 4, D))
        v = rnd(1, T, 4, D)
        g = rnd(1, T, 4, scale=0.25, offset=-0.25, dtype=torch.float32)
        beta = rnd(1, T, 4, scale=0.45, offset=0.5, dtype=torch.float32)
        emit("fla_gdn_chunk_h4", T,
             lambda: chunk_gated_delta_rule(q, k, v, g, beta, scale=scale))
        del q, k, v, g, beta

    for B in (1, 8, 64):
        q, k = unit(rnd(B, 1, H, D)), unit(rnd(B, 1, H, D))
        v = rnd(B, 1, H, D)
        g = rnd(B, 1, H, scale=0.25, offset=-0.25, dtype=torch.float32)
        beta = rnd(B, 1, H, scale=0.45, offset=0.5, dtype=torch.float32)
        h0 = torch.zeros(B, H, D, D, device=dev, dtype=torch.float32)
        emit("fla_gdn_decode", B,
             lambda: fused_recurrent_gated_delta_rule(q, k, v, g=g, beta=beta, scale=scale,
                                                      initial_state=h0,
                                                      output_final_state=True),
             replays=REPLAYS)

    for T in (4096, 16384):
        q, k, v = (rnd(1, T, H, D) for _ in range(3))
        r = rnd(1, T, H, D, scale=0.1)
        emit("fla_parallax", T, lambda: parallel_parallax(q, r, k, v, scale=scale))
        del q, k, v, r
