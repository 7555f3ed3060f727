#!/usr/bin/env python3
"""train_peer.py: `mixscope train` against flash-linear-attention + PyTorch on the same run.

Runs `mixscope train MIXER ... out=RUN dump=1 log=1` (the initial checkpoint RUN/step-000000, every
step's batch in RUN/batches.safetensors, step 0's gradient in RUN/grads-000000.safetensors, the loss
of every step in RUN/log.csv, the final weights RUN/step-NNNNNN), then trains the same initial
weights on the same batches with the same AdamW settings in PyTorch, and prints:

  1. the gradient of batch 0 at the initial weights, per tensor: mixscope (fp32) and PyTorch fp32
     against PyTorch float64 (the exact reference: which side is closer, and by how much);
  2. the loss of every step, mixscope against PyTorch fp32, and the largest relative difference;
  3. the final weights per tensor, mixscope against PyTorch fp32.

The PyTorch model is fla's GatedDeltaNet stack (fla/layers/gated_deltanet.py, fla/models/
gated_deltanet) written out with the same weights and names: q, k, v = SiLU(ShortConvolution(x W^T)),
q and k L2-normalised (use_qk_l2norm_in_kernel; Kaczmarz: the raw key and beta = eta/(|k|^2+eps)),
beta = sigmoid(x W_b^T), g = -exp(A_log) softplus(x W_a^T + dt_bias), FusedRMSNormGated output
norm, SwiGLU MLP, RMSNorm pre-norms. The recurrence is fla's own
`naive_recurrent_gated_delta_rule` (fla/ops/gated_delta_rule/naive.py) under autograd, loaded from
the pinned fla snapshot given with --fla: fla's Triton backward for gated chunks refuses the H200's
Triton (fla issue 640), and its naive form is the exact one. TF32 is off everywhere.

Usage (on the GPU machine; scripts/gpu-run.sh train):
  python3 tools/train_peer.py --mixscope build/gpu/mixscope --fla .fla [--mixer gdn] [--steps 50]
"""
import argparse
import csv
import importlib.util
import json
import math
import os
import subprocess
import sys
import time
import types

import torch
import torch.nn.functional as F

try:
    from safetensors.torch import load_file
except ImportError:  # a machine without the package: the format is a JSON header and raw bytes

    def load_file(path):
        dt = {"F32": torch.float32, "F64": torch.float64, "I32": torch.int32, "I64": torch.int64}
        with open(path, "rb") as f:
            n = int.from_bytes(f.read(8), "little")
            head = json.loads(f.read(n))
            data = f.read()
        out = {}
        for name, t in head.items():
            if name == "__metadata__":
                continue
            b, e = t["data_offsets"]
            out[name] = torch.frombuffer(bytearray(data[b:e]), dtype=dt[t["dtype"]]).reshape(t["shape"])
        return out


def load_naive(fla_root):
    path = os.path.join(fla_root, "fla", "ops", "gated_delta_rule", "naive.py")
    if "einops" not in sys.modules:
        try:
            import einops  # noqa: F401
        except ImportError:  # naive.py imports rearrange but the recurrent form does not use it
            stub = types.ModuleType("einops")
            stub.rearrange = None
            sys.modules["einops"] = stub
    spec = importlib.util.spec_from_file_location("fla_gdn_naive", path)
    mod = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(mod)
    return mod.naive_recurrent_gated_delta_rule


def rmsnorm(x, w, eps):
    return x * torch.rsqrt(x.pow(2).mean(-1, keepdim=True) + eps) * w


def l2norm(x, eps=1e-6):
    return x / torch.sqrt(x.pow(2).sum(-1, keepdim=True) + eps)


def short_conv(x, w, b):
    # fla ShortConvolution (causal depthwise conv1d, SiLU); x [B, T, D], w [D, 1, W]
    T, W = x.shape[1], w.shape[-1]
    y = F.conv1d(x.transpose(1, 2), w, b, padding=W - 1, groups=x.shape[-1])[..., :T]
    return F.silu(y.transpose(1, 2))


class Model:
    """fla's GatedDeltaNetForCausalLM / DeltaNetForCausalLM / the lab's kaczmarz_deltanet, as
    functions of a dict of tensors named as the checkpoint names them."""

    def __init__(self, cfg, mixer, naive):
        self.cfg, self.mixer, self.naive = cfg, mixer, naive
        self.kind = cfg["model_type"]
        self.H = cfg["num_heads"]
        self.eps = cfg.get("norm_eps", 1e-6)
        self.kacz_eps = cfg.get("kaczmarz_eps", 1e-6)

    def layer(self, p, pre, x):
        B, T, C = x.shape
        H = self.H
        conv = self.cfg.get("use_short_conv", True)

        def stream(name):
            y = x @ p[pre + name + "_proj.weight"].T
            if conv:
                return short_conv(y, p[pre + name + "_conv1d.weight"], p.get(pre + name + "_conv1d.bias"))
            return F.silu(y)

        q, k, v = stream("q"), stream("k"), stream("v")
        q, k, v = q.view(B, T, H, -1), k.view(B, T, H, -1), v.view(B, T, H, -1)
        q = l2norm(q)
        bp = x @ p[pre + "b_proj.weight"].T
        if pre + "b_proj.bias" in p:
            bp = bp + p[pre + "b_proj.bias"]
        beta = torch.sigmoid(bp)
        if self.mixer == "kaczmarz":  # raw key, beta = eta / (|k|^2 + eps)
            beta = beta / (k.pow(2).sum(-1) + self.kacz_eps)
        else:
            k = l2norm(k)
            if self.cfg.get("allow_neg_eigval", False):
                beta = beta * 2
        if pre + "A_log" in p and self.mixer != "deltanet":
            g = -p[pre + "A_log"].exp() * F.softplus(x @ p[pre + "a_proj.weight"].T + p[pre + "dt_bias"])
        else:
            g = torch.zeros(B, T, H, dtype=x.dtype, device=x.device)
        o, _ = self.naive(q, k, v, beta, g, scale=q.shape[-1] ** -0.5)
        o = o.to(x.dtype)
        w = p[pre + "o_norm.weight"]
        if pre + "g_proj.weight" in p:  # FusedRMSNormGated: RMSNorm(o) * silu(z)
            z = (x @ p[pre + "g_proj.weight"].T).view(B, T, H, -1)
            o = rmsnorm(o, w, self.eps) * F.silu(z)
        else:
            o = rmsnorm(o, w, self.eps)
        return o.reshape(B, T, -1) @ p[pre + "o_proj.weight"].T

    def forward(self, p, ids):
        x = p["model.embeddings.weight"][ids]
        for li in range(self.cfg["num_hidden_layers"]):
            pre = "model.layers.%d." % li
            x = x + self.layer(p, pre + "attn.", rmsnorm(x, p[pre + "attn_norm.weight"], self.eps))
            h = rmsnorm(x, p[pre + "mlp_norm.weight"], self.eps)
            a = F.silu(h @ p[pre + "mlp.gate_proj.weight"].T) * (h @ p[pre + "mlp.up_proj.weight"].T)
            x = x + a @ p[pre + "mlp.down_proj.weight"].T
        x = rmsnorm(x, p["model.norm.weight"], self.eps)
        head = p.get("lm_head.weight", p["model.embeddings.weight"])
        return x @ head.T

    def loss(self, p, ids, tgt):
        logits = self.forward(p, ids)
        m = tgt >= 0
        return F.cross_entropy(logits[m], tgt[m].long(), reduction="sum") / m.sum()


def lr_at(step, lr, warmup, steps):
    if step < warmup:
        return lr * (step + 1) / warmup
    span = steps - warmup
    t = (step - warmup) / span if span > 0 else 1.0
    return lr * 0.5 * (1.0 + math.cos(math.pi * t))


def rel(a, b):
    return (a.double() - b.double()).norm().item() / max(b.double().norm().item(), 1e-30)


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--mixscope", default="./mixscope",
                    help="mixscope, or build/.../bench_train (the same -c syntax, no SDL needed)")
    ap.add_argument("--fla", default=".fla", help="the pinned flash-linear-attention snapshot")
    ap.add_argument("--mixer", default="gdn")
    ap.add_argument("--steps", type=int, default=50)
    ap.add_argument("--gpu", action="store_true", help="mixscope trains under device gpu")
    ap.add_argument("--run", default="/tmp/train-peer")
    ap.add_argument("--args", default="batch=64 seq=256 pairs=32 lr=3e-3 warmup=5 wd=0.1 clip=1 seed=1",
                    help="the rest of the train command")
    a = ap.parse_args()
    torch.backends.cuda.matmul.allow_tf32 = False
    torch.backends.cudnn.allow_tf32 = False
    dev = "cuda" if torch.cuda.is_available() else "cpu"
    commit = open(os.path.join(a.fla, "COMMIT")).read().strip() if os.path.exists(os.path.join(a.fla, "COMMIT")) else "?"
    print("fla snapshot %s, PyTorch %s, device %s" % (commit, torch.__version__, torch.cuda.get_device_name() if dev == "cuda" else "cpu"))

    cmd = "%strain %s steps=%d %s out=%s dump=1 log=1 eval=64" % ("device gpu; " if a.gpu else "", a.mixer, a.steps, a.args, a.run)
    print("$ mixscope -c '%s'" % cmd)
    t0 = time.time()
    r = subprocess.run([a.mixscope, "-c", cmd], capture_output=True, text=True)
    print("mixscope: %.1f s, exit %d; last line: %s" % (time.time() - t0, r.returncode, (r.stdout.strip().splitlines() or ["-"])[-1]))
    if r.returncode:
        print(r.stdout, r.stderr)
        sys.exit(1)
    opts = dict(kv.split("=", 1) for kv in a.args.split())
    lr, warmup, wd, clip = float(opts["lr"]), int(opts.get("warmup", 0)), float(opts.get("wd", 0.1)), float(opts.get("clip", 1))
    cfg = json.load(open(os.path.join(a.run, "step-000000", "config.json")))
    naive = load_naive(a.fla)
    model = Model(cfg, a.mixer, naive)
    w0 = load_file(os.path.join(a.run, "step-000000", "model.safetensors"))
    batches = load_file(os.path.join(a.run, "batches.safetensors"))
    ids_all, tgt_all = batches["ids"].long().to(dev), batches["targets"].long().to(dev)
    names = list(w0.keys())

    # 1. gradients of batch 0
    print("\n1. gradient of batch 0 at the initial weights, relative to PyTorch float64")
    g_ms = load_file(os.path.join(a.run, "grads-000000.safetensors"))
    grads = {}
    for dt in (torch.float64, torch.float32):
        p = {n: w0[n].to(dev, dt).detach().clone().requires_grad_(True) for n in names}
        loss = model.loss(p, ids_all[0], tgt_all[0])
        loss.backward()
        grads[dt] = {n: p[n].grad.detach().cpu() for n in names}
        print("   loss at step 0: %s %.9f" % (str(dt).replace("torch.", ""), loss.item()))
    print("   %-48s %12s %12s" % ("tensor", "mixscope", "torch fp32"))
    worst = (0, "")
    for n in names:
        ref = grads[torch.float64][n]
        e_ms, e_pt = rel(g_ms[n], ref), rel(grads[torch.float32][n], ref)
        worst = max(worst, (e_ms, n))
        print("   %-48s %12.2e %12.2e" % (n, e_ms, e_pt))
    print("   worst mixscope gradient error: %.2e (%s)" % worst)

    # 2. the run
    p = {n: w0[n].to(dev, torch.float32).detach().clone().requires_grad_(True) for n in names}
    decay = [p[n] for n in names if p[n].dim() >= 2]
    no_decay = [p[n] for n in names if p[n].dim() < 2]
    opt = torch.optim.AdamW([{"params": decay, "weight_decay": wd}, {"params": no_decay, "weight_decay": 0.0}],
                            lr=lr, betas=(0.9, 0.95), eps=1e-8)
    losses = []
    t0 = time.time()
    for step in range(a.steps):
        for gr in opt.param_groups:
            gr["lr"] = lr_at(step, lr, warmup, a.steps)
        opt.zero_grad(set_to_none=True)
        loss = model.loss(p, ids_all[step], tgt_all[step])
        loss.backward()
        if clip > 0:
            torch.nn.utils.clip_grad_norm_(list(p.values()), clip)
        opt.step()
        losses.append(loss.item())
    torch.cuda.synchronize() if dev == "cuda" else None
    print("\n2. loss per step (PyTorch fp32: %.1f s for %d steps)" % (time.time() - t0, a.steps))
    ms = {int(row["step"]): float(row["loss"]) for row in csv.DictReader(open(os.path.join(a.run, "log.csv")))}
    print("   %5s %12s %12s %10s" % ("step", "mixscope", "torch", "rel diff"))
    worst_l = 0.0
    for step in range(a.steps):
        lm, lp = ms.get(step + 1, float("nan")), losses[step]
        d = abs(lm - lp) / abs(lp)
        worst_l = max(worst_l, d)
        if step < 5 or step % 5 == 4 or step == a.steps - 1:
            print("   %5d %12.6f %12.6f %10.2e" % (step, lm, lp, d))
    print("   largest relative loss difference over %d steps: %.2e" % (a.steps, worst_l))

    # 3. final weights
    wN = load_file(os.path.join(a.run, "step-%06d" % a.steps, "model.safetensors"))
    print("\n3. weights after %d steps, mixscope against torch fp32 (relative to the change since step 0)" % a.steps)
    worst_w = (0, "")
    for n in names:
        pt = p[n].detach().cpu()
        e = (wN[n].double() - pt.double()).norm().item() / max((pt.double() - w0[n].double()).norm().item(), 1e-30)
        worst_w = max(worst_w, (e, n))
        print("   %-48s %10.2e" % (n, e))
    print("   worst: %.2e (%s)" % worst_w)


if __name__ == "__main__":
    main()
