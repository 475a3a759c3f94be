#!/usr/bin/env python3
"""bench/cuda/pytorch_attention.py - the PyTorch peer of bench_cuda_attention: causal
scaled_dot_product_attention forward + backward, bf16 on the flash backend where this PyTorch can
pick it (with --fp32: fp32 on the memory-efficient backend, the fused one that takes fp32; TF32 off),
on the same shapes (q, k, v split from one (B, T, 3C) tensor, as the model produces them), timed
the same way (one warm-up, then the best of --iters between device synchronisations).
Prints one line per shape:
  pytorch B <B> NH <NH> T <T> HS <HS> | <bf16|fp32> sdpa <ms> ms <TFLOP/s> TFLOP/s"""
import argparse
import contextlib
import sys
import time

import torch
import torch.nn.functional as F


def fused_only(fp32):
    """The flash backend (bf16), or the memory-efficient one (fp32: flash takes only 16-bit types)."""
    try:  # PyTorch >= 2.3
        from torch.nn.attention import SDPBackend, sdpa_kernel
        return sdpa_kernel([SDPBackend.EFFICIENT_ATTENTION if fp32 else SDPBackend.FLASH_ATTENTION])
    except ImportError:
        try:
            return torch.backends.cuda.sdp_kernel(enable_flash=not fp32, enable_math=False, enable_mem_efficient=fp32)
        except AttributeError:
            return contextlib.nullcontext()


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--head-sizes", default="64,128")
    ap.add_argument("--seq-lengths", default="1024,4096")
    ap.add_argument("--iters", type=int, default=10)
    ap.add_argument("--tokens", type=int, default=8192, help="B x T tokens of each shape (B = tokens / T, at least 1)")
    ap.add_argument("--fp32", action="store_true", help="fp32 tensors instead of bf16")
    a = ap.parse_args()
    torch.backends.cuda.matmul.allow_tf32 = False
    dtype, name = (torch.float32, "fp32") if a.fp32 else (torch.bfloat16, "bf16")
    if not torch.cuda.is_available():
        sys.exit("pytorch_attention: no usable CUDA device")
    dev = torch.device("cuda")
    for hs in (int(x) for x in a.head_sizes.split(",")):
        for T in (int(x) for x in a.seq_lengths.split(",")):
            NH, B = max(768 // hs, 1), max(a.tokens // T, 1)
            C = NH * hs
            qkv = (torch.rand(B, T, 3 * C, device=dev) * 2 - 1).to(dtype).requires_grad_(True)
            g = (torch.rand(B, NH, T, hs, device=dev) * 2 - 1).to(dtype)
            best = 1e30
            for it in range(a.iters + 1):
                torch.cuda.synchronize()
                t0 = time.perf_counter()
                q, k, v = (t.view(B, T, NH, hs).transpose(1, 2) for t in qkv.split(C, dim=2))
                with fused_only(a.fp32):
                    y = F.scaled_dot_product_attention(q, k, v, is_causal=True)
                y.backward(g)
                qkv.grad = None
                torch.cuda.synchronize()
                dt = (time.perf_counter() - t0) * 1e3
                if it > 0:
                    best = min(best, dt)
            flops = 3.5 * 2.0 * B * NH * T * T * hs
            print(f"pytorch B {B} NH {NH} T {T} HS {hs} | {name} sdpa {best:.3f} ms {flops / best / 1e9:.1f} TFLOP/s", flush=True)


if __name__ == "__main__":
    main()
