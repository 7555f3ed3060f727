#!/usr/bin/env python3
"""hybrid_refs.py: hybrid flash-linear-attention checkpoints and fla's logits on them, for
tests/test_hybrid.c.

fla's linear model types take an `attn` config key: softmax attention layers (fla.layers.attn.
Attention: their own num_heads, num_kv_heads, qkv_bias, window_size, rope_theta) at the listed
layer indices, the model's own layer everywhere else. This script builds three such models the
way the references in ../shared/refs/ were built (fla's init plus noise, float32, byte vocabulary
of 256, one prompt of 77 ids) and writes, per model, a folder as fla saves it:

    config.json  model.safetensors  expected.safetensors (input_ids int32 [1, 77],
                                                          logits float32 [1, 77, 256])

  hybrid_gated_deltanet  3 layers, hidden 64; GDN 2 heads of 16 (expand_v 2, short conv, output
                         gate); layer 1 attention: 4 heads, 2 kv heads (GQA), qkv_bias,
                         rope_theta 5000 (the single-dictionary form of `attn`)
  hybrid_gla             3 layers, hidden 64; GLA 2 heads; layer 0 attention 2 heads with a
                         window of 8 tokens, layer 2 attention 8 heads of 8, 1 kv head (the list
                         form, two specifications)
  hybrid_delta_net       2 layers, hidden 64; DeltaNet 2 heads; layer 0 attention 4 heads

Exactness: TF32 is off; the linear layers run fla's fused_recurrent kernels (elementwise, float32;
the chunk kernels round products through TF32); fla's Attention calls flash_attn, which has no
float32 path, so flash_attn_func is replaced here by the same function in float64 (causal, GQA by
repeating kv heads, window (w - 1, 0) as flash_attn reads it). Everything else is fla's own code.

Run where PyTorch and Triton are (the H200 machine), with the pinned fla snapshot first on the
path:

    PYTHONPATH=.fla python3 tools/hybrid_refs.py tests/models

The folders are committed; rerun only on purpose (the ids and weights are seeded).
"""
import json
import os
import sys

import torch
from safetensors.torch import save_file

torch.backends.cuda.matmul.allow_tf32 = False
torch.backends.cudnn.allow_tf32 = False
torch.set_float32_matmul_precision("highest")

import fla  # noqa: E402,F401  (registers fla's model types)
import fla.layers.attn as fla_attn  # noqa: E402
from fla.models import DeltaNetConfig, GatedDeltaNetConfig, GLAConfig  # noqa: E402
from transformers import AutoModelForCausalLM  # noqa: E402


def flash_attn_func_f64(q, k, v, causal=True, window_size=(-1, -1), **kw):
    """flash_attn_func's arithmetic in float64: q [B, T, H, D], k, v [B, T, Hkv, D]."""
    assert causal and not kw, kw
    B, T, H, D = q.shape
    rep = H // k.shape[2]
    qd, kd, vd = q.double(), k.double().repeat_interleave(rep, 2), v.double().repeat_interleave(rep, 2)
    s = torch.einsum("bihd,bjhd->bhij", qd, kd) / D ** 0.5
    i = torch.arange(T, device=q.device)[:, None]
    j = torch.arange(T, device=q.device)[None, :]
    mask = j > i
    if window_size[0] >= 0:
        mask = mask | (j < i - window_size[0])
    s = s.masked_fill(mask, float("-inf"))
    o = torch.einsum("bhij,bjhd->bihd", s.softmax(-1), vd)
    return o.to(q.dtype)


fla_attn.flash_attn_func = flash_attn_func_f64

MODELS = {
    "hybrid_gated_deltanet": GatedDeltaNetConfig(
        hidden_size=64, num_hidden_layers=3, num_heads=2, head_dim=16, expand_v=2.0, conv_size=4,
        use_gate=True, use_short_conv=True, attn_mode="fused_recurrent", vocab_size=256,
        attn={"layers": [1], "num_heads": 4, "num_kv_heads": 2, "qkv_bias": True,
              "rope_theta": 5000.0}),
    "hybrid_gla": GLAConfig(
        hidden_size=64, num_hidden_layers=3, num_heads=2, expand_k=0.5, expand_v=1.0,
        attn_mode="fused_recurrent", vocab_size=256,
        attn=[{"layers": [0], "num_heads": 2, "window_size": 8},
              {"layers": [2], "num_heads": 8, "num_kv_heads": 1}]),
    "hybrid_delta_net": DeltaNetConfig(
        hidden_size=64, num_hidden_layers=2, num_heads=2, attn_mode="fused_recurrent",
        vocab_size=256, attn={"layers": [0], "num_heads": 4}),
}


def main():
    out = sys.argv[1] if len(sys.argv) > 1 else "tests/models"
    dev = "cuda" if torch.cuda.is_available() else "cpu"
    for seed, (name, cfg) in enumerate(MODELS.items()):
        torch.manual_seed(100 + seed)
        cfg.fuse_cross_entropy = False
        cfg.fuse_linear_cross_entropy = False
        model = AutoModelForCausalLM.from_config(cfg).float().to(dev).eval()
        with torch.no_grad():
            for p in model.parameters():  # fla's init plus noise: no weight is left at 0 or 1
                p.add_(0.02 * torch.randn_like(p))
        ids = torch.randint(0, 256, (1, 77), generator=torch.Generator().manual_seed(7 + seed))
        with torch.no_grad():
            logits = model(input_ids=ids.to(dev), use_cache=False).logits.float().cpu()
        d = os.path.join(out, name)
        os.makedirs(d, exist_ok=True)
        # (save_pretrained of this transformers trips on fla's tied-weight list: write the same
        # two files directly, fla's tensor names, untied head)
        model.config.save_pretrained(d)
        save_file({k: v.detach().float().cpu().contiguous() for k, v in model.state_dict().items()},
                  os.path.join(d, "model.safetensors"), metadata={"format": "pt"})
        save_file({"input_ids": ids.to(torch.int32).contiguous(), "logits": logits.contiguous()},
                  os.path.join(d, "expected.safetensors"))
        kinds = [type(layer.attn).__name__ for layer in model.model.layers]
        print(f"{name}: layers {kinds}, logits |.| {logits.norm():.4f}, "
              f"config attn {json.dumps(cfg.attn)}")
    with open(os.path.join(out, "FLA_COMMIT"), "w") as f:
        c = os.path.join(os.path.dirname(fla.__file__), "..", "COMMIT")
        f.write(open(c).read().strip() + "\n" if os.path.exists(c) else "unknown\n")


if __name__ == "__main__":
    main()
