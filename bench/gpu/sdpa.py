# sdpa.py: PyTorch's causal scaled_dot_product_attention, timed in the same run as mixscope's
# kernels (bench/gpu/run.sh). B=1, H=16, d=128, bf16. Prints "sdpa T ms" lines (medians).
import sys
import torch
import torch.nn.functional as F

def median_ms(fn, iters=20, warmup=3):
    for _ in range(warmup):
        fn()
    torch.cuda.synchronize()
    times = []
    for _ in range(iters):
        a = torch.cuda.Event(enable_timing=True)
        b = torch.cuda.Event(enable_timing=True)
        a.record()
        fn()
        b.record()
        torch.cuda.synchronize()
        times.append(a.elapsed_time(b))
    times.sort()
    return times[len(times) // 2]

for T in (4096, 16384):
    q, k, v = (torch.randn(1, 16, T, 128, device="cuda", dtype=torch.bfloat16) for _ in range(3))
    ms = median_ms(lambda: F.scaled_dot_product_attention(q, k, v, is_causal=True))
    print(f"sdpa {T} {ms:.4f}")
    sys.stdout.flush()
