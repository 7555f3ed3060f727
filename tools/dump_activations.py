#!/usr/bin/env python3
"""dump_activations.py: every layer's core inputs of a flash-linear-attention model, in one
safetensors file that `mixscope replay MIXER FILE layers=all` steps exactly (docs/diagnose.md).

    python tools/dump_activations.py CHECKPOINT OUT.safetensors --text "the failing prompt"
    python tools/dump_activations.py CHECKPOINT OUT.safetensors --ids ids.pt --device cuda

Writes layers.N.q, layers.N.k, layers.N.v and layers.N.g / gk / beta (and layers.N.h0 when a
layer starts from a state) in fla's [B, T, H, D] layout, float32, as mixscope's cores take them:
keys and queries L2-normalised, g the log-decay, beta in (0, 1) (x2 with allow_neg_eigval), q and
k repeated to the value heads under GVA. It wraps the kernel entry points that fla's layer modules
call (gated_deltanet, delta_net, gla), so it sees exactly what the kernel saw; each layer's first
call is kept (one forward of one prompt, batch 1, no padding).
"""
import argparse
import importlib

import torch
import torch.nn.functional as F
from safetensors.torch import save_file
from transformers import AutoModelForCausalLM, AutoTokenizer

import fla  # noqa: F401  (registers fla's model types with transformers)

# layer module -> (kernel functions it calls, their positional argument names, mixscope core)
OPS = {
    "fla.layers.gated_deltanet": (["chunk_gated_delta_rule", "fused_recurrent_gated_delta_rule"],
                                  ["q", "k", "v", "g", "beta"], "gdn"),
    "fla.layers.delta_net": (["chunk_delta_rule", "fused_recurrent_delta_rule"],
                             ["q", "k", "v", "beta"], "deltanet"),
    "fla.layers.gla": (["chunk_gla", "fused_chunk_gla", "fused_recurrent_gla"],
                       ["q", "k", "v", "g"], "gla"),
}

current = {"layer": None}  # the layer whose forward is running (set by a pre-hook)
dump, cores = {}, set()


def l2n(x):
    x = x.float()
    return x * torch.rsqrt((x * x).sum(-1, keepdim=True) + 1e-6)  # fla's l2norm, eps 1e-6


def as_mixscope(kw, core):
    """The kernel's arguments as mixscope's core reads them (no normalisation or gate inside)."""
    q, k, v = kw["q"].float(), kw["k"].float(), kw["v"].float()
    if kw.get("use_qk_l2norm_in_kernel"):
        q, k = l2n(q), l2n(k)
    out = {}
    g, beta = kw.get("g"), kw.get("beta")
    if g is not None and kw.get("use_gate_in_kernel"):  # newer fla computes the decay inside
        g = -kw["A_log"].float().exp() * F.softplus(g.float() + kw["dt_bias"].float())
    if beta is not None and kw.get("use_beta_sigmoid_in_kernel"):
        beta = beta.float().sigmoid() * (2.0 if kw.get("allow_neg_eigval") else 1.0)
    rep = v.shape[2] // q.shape[2]  # GVA: value head h reads q/k head h // rep
    if rep > 1:
        q, k = q.repeat_interleave(rep, dim=2), k.repeat_interleave(rep, dim=2)
    out.update(q=q, k=k, v=v)
    if g is not None:
        out["gk" if core == "gla" else "g"] = g.float()
    if beta is not None:
        out["beta"] = beta.float()
    h0 = kw.get("initial_state")
    if h0 is not None:  # mixscope's h0 is [B, H, K, V]; fla may keep the state value-first
        out["h0"] = (h0.transpose(-1, -2) if kw.get("state_v_first") else h0).float()
    return out


def wrap(fn, names, core):
    def wrapped(*args, **kw):
        layer = current["layer"]
        if layer is not None and f"layers.{layer}.q" not in dump:
            given = dict(zip(names, args), **kw)
            for name, t in as_mixscope(given, core).items():
                dump[f"layers.{layer}.{name}"] = t.detach().to("cpu").contiguous()
            cores.add(core)
        return fn(*args, **kw)
    return wrapped


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("checkpoint")
    ap.add_argument("out")
    ap.add_argument("--text", help="the prompt as text (the checkpoint's tokenizer)")
    ap.add_argument("--ids", help="a torch file holding the input ids [1, T]")
    ap.add_argument("--device", default="cuda" if torch.cuda.is_available() else "cpu")
    ap.add_argument("--dtype", default="bfloat16", help="the dtype the run used")
    a = ap.parse_args()
    for mod, (fns, names, core) in OPS.items():
        m = importlib.import_module(mod)
        for fn in fns:
            if hasattr(m, fn):  # the layer module's own name for it: that is what forward calls
                setattr(m, fn, wrap(getattr(m, fn), names, core))
    model = AutoModelForCausalLM.from_pretrained(a.checkpoint, torch_dtype=getattr(torch, a.dtype))
    model.to(a.device).eval()
    for i, mod in enumerate(m for m in model.modules() if type(m).__module__ in OPS):
        idx = getattr(mod, "layer_idx", None)
        mod.register_forward_pre_hook(
            lambda _m, _a, i=(i if idx is None else idx): current.update(layer=i))
    if a.ids:
        ids = torch.load(a.ids).long().reshape(1, -1)
    else:
        ids = AutoTokenizer.from_pretrained(a.checkpoint)(a.text or "", return_tensors="pt").input_ids
    with torch.no_grad():
        model(ids.to(a.device))
    if not dump:
        raise SystemExit("no gated_deltanet / delta_net / gla layer was called: nothing dumped")
    dump["input_ids"] = ids.to(torch.int64).cpu()
    save_file(dump, a.out, metadata={"producer": "tools/dump_activations.py",
                                     "checkpoint": a.checkpoint, "cores": ",".join(sorted(cores))})
    layers = sorted({int(k.split(".")[1]) for k in dump if k.startswith("layers.")})
    print(f"wrote {a.out}: {len(layers)} layers, T = {ids.shape[1]}; replay with:")
    for core in sorted(cores):
        print(f"  mixscope -c 'replay {core} {a.out} layers=all out=replayed.safetensors'")


if __name__ == "__main__":
    main()
