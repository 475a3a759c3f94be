#!/usr/bin/env python3
"""bench/cuda/pytorch_gpt2.py - the PyTorch peer of bench_cuda_train: the same GPT-2 shape trained
the way a PyTorch user would (nanoGPT-style eager model, weight tying, fused AdamW, bf16 autocast and
scaled_dot_product_attention), timed the same way (warm-up, then iterations between two device
synchronisations). bench/cuda/compare.sh runs both in one command on one GPU and prints the ratio.

  python3 bench/cuda/pytorch_gpt2.py --model gpt2 --micro-batch-size 8 --bf16 [--attention sdpa] [--compile]

As fast as plain eager PyTorch gets, so that the ratio does not flatter Trident: the vocabulary is
padded to a multiple of 128 as Trident pads it (nanoGPT pads to 50304; the padded rows are zero, the
loss reads the real V columns). With V = 50257 the LM head's three bf16 GEMMs (the step's largest)
have an odd leading dimension, which keeps cuBLAS off its aligned tensor-core kernels: the likely
cause of this script measuring 40.1 ms/iter for GPT-2 124M (B 8, T 1024) on the H200 where a
nanoGPT-style script measured 27.8 ms (2026-11-27; not re-measured since, no GPU was at hand).
Nothing reads the device inside the timed loop (the loss is read once, after the last step). --compile
runs the model through torch.compile (PyTorch 2.x), printed as "compiled": a separate row, not the
eager peer.

The model shape comes from models/<model>.json (n_layer, n_head, n_embd, vocab_size, n_positions),
so it is exactly Trident's. Prints one line:
  pytorch <model> B <B> T <T> <precision> <attention> | <ms> ms/iter | <tok/s> tok/s | loss <l>
--device cpu (with a tiny model; PyTorch 1.13 has no SDPA: --attention materialized) is how CTest's
bench_cuda_emu runs it through compare.sh on machines without a GPU."""
import argparse
import json
import math
import os
import sys
import time

import torch
import torch.nn as nn
import torch.nn.functional as F


class Block(nn.Module):
    def __init__(self, C, NH, sdpa):
        super().__init__()
        self.NH, self.sdpa = NH, sdpa
        self.ln_1 = nn.LayerNorm(C)
        self.c_attn = nn.Linear(C, 3 * C)
        self.c_proj = nn.Linear(C, C)
        self.ln_2 = nn.LayerNorm(C)
        self.c_fc = nn.Linear(C, 4 * C)
        self.mlp_proj = nn.Linear(4 * C, C)

    def attention(self, x):
        B, T, C = x.shape
        q, k, v = self.c_attn(x).split(C, dim=2)
        q, k, v = (t.view(B, T, self.NH, C // self.NH).transpose(1, 2) for t in (q, k, v))
        if self.sdpa:
            y = F.scaled_dot_product_attention(q, k, v, is_causal=True)
        else:  # the T x T scores materialised, as Trident's attention does today
            att = (q @ k.transpose(-2, -1)) * (1.0 / math.sqrt(k.size(-1)))
            mask = torch.ones(T, T, dtype=torch.bool, device=x.device).tril()
            att = F.softmax(att.masked_fill(~mask, float("-inf")), dim=-1)
            y = att @ v
        return self.c_proj(y.transpose(1, 2).contiguous().view(B, T, C))

    def forward(self, x):
        x = x + self.attention(self.ln_1(x))
        return x + self.mlp_proj(F.gelu(self.c_fc(self.ln_2(x)), approximate="tanh"))


class GPT(nn.Module):
    def __init__(self, cfg, sdpa):
        super().__init__()
        C, V = cfg["n_embd"], cfg["vocab_size"]
        self.V = V
        Vp = (V + 127) // 128 * 128  # Trident's padding (tri_padded_vocab at tp 1)
        self.wte = nn.Embedding(Vp, C)
        self.wpe = nn.Embedding(cfg["n_positions"], C)
        self.h = nn.ModuleList(Block(C, cfg["n_head"], sdpa) for _ in range(cfg["n_layer"]))
        self.ln_f = nn.LayerNorm(C)
        self.apply(self.init)
        with torch.no_grad():
            self.wte.weight[V:].zero_()  # the padded rows, as Trident keeps them

    @staticmethod
    def init(m):
        if isinstance(m, (nn.Linear, nn.Embedding)):
            nn.init.normal_(m.weight, std=0.02)
        if isinstance(m, nn.Linear) and m.bias is not None:
            nn.init.zeros_(m.bias)

    def forward(self, idx, targets):
        T = idx.size(1)
        x = self.wte(idx) + self.wpe(torch.arange(T, device=idx.device))
        for block in self.h:
            x = block(x)
        logits = F.linear(self.ln_f(x), self.wte.weight)[..., :self.V]  # tied head, the real columns
        return F.cross_entropy(logits.float().reshape(-1, self.V), targets.reshape(-1))


def main():
    here = os.path.dirname(os.path.abspath(__file__))
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--model", default="gpt2")
    ap.add_argument("--models-dir", default=os.path.join(here, "..", "..", "models"))
    ap.add_argument("--micro-batch-size", type=int, default=8)
    ap.add_argument("--seq-length", type=int, default=0, help="default: the model's n_positions")
    ap.add_argument("--iters", type=int, default=10)
    ap.add_argument("--warmup", type=int, default=3)
    ap.add_argument("--bf16", action="store_true", help="bf16 autocast (fp32 master weights)")
    ap.add_argument("--attention", choices=["sdpa", "materialized"], default="sdpa")
    ap.add_argument("--device", default="cuda")
    ap.add_argument("--compile", action="store_true", help="torch.compile the model (PyTorch 2.x)")
    a = ap.parse_args()
    path = os.path.join(a.models_dir, a.model + ".json")
    try:
        with open(path) as f:
            cfg = json.load(f)
    except (OSError, ValueError) as e:
        sys.exit(f"pytorch_gpt2: cannot read the model config {path}: {e}")
    if a.device == "cuda" and not torch.cuda.is_available():
        sys.exit("pytorch_gpt2: no usable CUDA device (torch.cuda.is_available() is false)")
    sdpa = a.attention == "sdpa"
    if sdpa and not hasattr(F, "scaled_dot_product_attention"):
        sys.exit("pytorch_gpt2: this PyTorch has no scaled_dot_product_attention (use --attention materialized)")
    torch.backends.cuda.matmul.allow_tf32 = False  # fp32 means fp32, as in Trident (COMPUTE_32F)
    torch.backends.cudnn.allow_tf32 = False
    B, T = a.micro_batch_size, a.seq_length or cfg["n_positions"]
    dev = torch.device(a.device)
    torch.manual_seed(0)
    model = GPT(cfg, sdpa).to(dev)
    params = list(model.parameters())
    decay = [p for p in params if p.dim() >= 2]
    rest = [p for p in params if p.dim() < 2]
    groups = [{"params": decay, "weight_decay": 0.1}, {"params": rest, "weight_decay": 0.0}]
    try:
        opt = torch.optim.AdamW(groups, lr=6e-4, betas=(0.9, 0.95), eps=1e-8, fused=a.device == "cuda")
    except TypeError:  # older PyTorch without fused AdamW
        opt = torch.optim.AdamW(groups, lr=6e-4, betas=(0.9, 0.95), eps=1e-8)
    if a.compile:
        if not hasattr(torch, "compile"):
            sys.exit(f"pytorch_gpt2: PyTorch {torch.__version__} has no torch.compile (2.0 and later)")
        model = torch.compile(model)
    gen = torch.Generator().manual_seed(42)
    V = cfg["vocab_size"]
    data = torch.randint(0, V, (B, T + 1), generator=gen).to(dev)
    x, y = data[:, :T].contiguous(), data[:, 1:].contiguous()

    def step():
        with torch.autocast(device_type=dev.type, dtype=torch.bfloat16, enabled=a.bf16):
            loss = model(x, y)
        loss.backward()
        torch.nn.utils.clip_grad_norm_(params, 1.0)
        opt.step()
        opt.zero_grad(set_to_none=True)
        return loss

    def sync():
        if dev.type == "cuda":
            torch.cuda.synchronize()

    for _ in range(a.warmup):
        step()
    sync()
    t0 = time.perf_counter()
    for _ in range(a.iters):
        loss = step()
    sync()
    ms = (time.perf_counter() - t0) * 1000.0 / a.iters
    prec = "bf16" if a.bf16 else "fp32"
    mode = " compiled" if a.compile else ""
    print(f"pytorch {a.model} B {B} T {T} {prec} {a.attention}{mode} | {ms:.1f} ms/iter | "
          f"{B * T / (ms / 1000.0):.0f} tok/s | loss {loss.item():.3f}", flush=True)


if __name__ == "__main__":
    main()
