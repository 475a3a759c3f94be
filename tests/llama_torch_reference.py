#!/usr/bin/env python3
"""tests/llama_torch_reference.py IN OUT - one Llama decoder layer in PyTorch (float64), the reference
tests/test_llama_block.c compares Trident's layers with.

Written from the papers and the documented Hugging Face math (transformers' modeling_llama:
LlamaRMSNorm, apply_rotary_pos_emb with rotate_half, repeat_kv, eager causal attention, LlamaMLP),
not from Trident's code: h = x + o_proj(attn(rmsnorm1(x))), out = h + down(silu(gate(z)) * up(z))
with z = rmsnorm2(h). IN holds meta [B, T, C, NH, NH_kv, HS, F, eps], the inputs x and R, the rotary
tables cos and sin (T, HS/2) and the weights in Hugging Face's shapes (q_proj (NH HS, C), k_proj and
v_proj (NH_kv HS, C), o_proj (C, NH HS), gate_proj and up_proj (F, C), down_proj (C, F), the two
norms' weights (C)). OUT receives out, and the gradients of L = sum(out * R) with respect to x and
every weight (d_<name>). Records: tools/gpt2_torch_reference.py's format."""
import os
import sys

import torch

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "tools"))
from gpt2_torch_reference import read_records, write_records  # noqa: E402

WEIGHTS = ["ln1_w", "q_w", "k_w", "v_w", "o_w", "ln2_w", "gate_w", "up_w", "down_w"]


def rmsnorm(x, w, eps):
    variance = x.pow(2).mean(-1, keepdim=True)
    return w * (x * torch.rsqrt(variance + eps))


def rotate_half(x):
    half = x.shape[-1] // 2
    return torch.cat((-x[..., half:], x[..., :half]), dim=-1)


def block(x, p, cos, sin, m):
    B, T, C, NH, NH_kv, HS, F, eps = m
    z = rmsnorm(x, p["ln1_w"], eps)
    q = (z @ p["q_w"].T).view(B, T, NH, HS).transpose(1, 2)
    k = (z @ p["k_w"].T).view(B, T, NH_kv, HS).transpose(1, 2)
    v = (z @ p["v_w"].T).view(B, T, NH_kv, HS).transpose(1, 2)
    emb_cos, emb_sin = torch.cat((cos, cos), -1), torch.cat((sin, sin), -1)   # (T, HS)
    q = q * emb_cos + rotate_half(q) * emb_sin
    k = k * emb_cos + rotate_half(k) * emb_sin
    k = k.repeat_interleave(NH // NH_kv, dim=1)                                 # repeat_kv
    v = v.repeat_interleave(NH // NH_kv, dim=1)
    att = (q @ k.transpose(-2, -1)) / HS ** 0.5
    mask = torch.triu(torch.ones(T, T, dtype=torch.bool), diagonal=1)
    att = torch.softmax(att.masked_fill(mask, float("-inf")), dim=-1)
    y = (att @ v).transpose(1, 2).reshape(B, T, NH * HS)
    h = x + y @ p["o_w"].T
    z2 = rmsnorm(h, p["ln2_w"], eps)
    mlp = (torch.nn.functional.silu(z2 @ p["gate_w"].T) * (z2 @ p["up_w"].T)) @ p["down_w"].T
    return h + mlp


def main():
    rec = read_records(sys.argv[1])
    meta = [int(v) for v in rec["meta"][:7]] + [float(rec["meta"][7])]
    B, T, C = meta[0], meta[1], meta[2]
    t = {k: torch.tensor(v, dtype=torch.float64, requires_grad=k in WEIGHTS or k == "x") for k, v in rec.items()}
    x = t["x"].reshape(B, T, C)
    out = block(x, t, t["cos"], t["sin"], meta)
    (out * t["R"].reshape(B, T, C)).sum().backward()
    res = [("out", out.detach().numpy()), ("d_x", t["x"].grad.numpy())]
    res += [("d_" + k, t[k].grad.numpy()) for k in WEIGHTS]
    write_records(sys.argv[2], res)


if __name__ == "__main__":
    main()
