#!/usr/bin/env bash
# bench/cuda/attention.sh - Trident's fused attention against PyTorch's SDPA (flash backend) on the same
# GPU in one command: bench_cuda_attention, then bench/cuda/pytorch_attention.py on the same shapes
# (bf16, causal, GPT-2 124M's width 768 = NH x HS, B x T = 8192 tokens, HS 64 and 128, T 1024 and
# 4096 by default; --fp32: fp32 on both sides, PyTorch's memory-efficient backend), and per shape the
# ratio of PyTorch's time to ours (above 1: Trident is faster; issue 15's target >= 0.7, for bf16).
#   bash bench/cuda/attention.sh [--head-sizes 64,128] [--seq-lengths 1024,4096] [--iters N] [--fp32]
#                                [--tokens B_x_T]
# BIN (default build/bin) says where bench_cuda_attention is, PYTHON (default python3) which
# interpreter has PyTorch with CUDA.
set -uo pipefail
here=$(cd "$(dirname "$0")" && pwd)
BIN=${BIN:-$here/../../build/bin}
PYTHON=${PYTHON:-python3}
ours=$("$BIN/bench_cuda_attention" "$@" 2>&1); rc=$?
echo "$ours"
[ $rc -ne 0 ] && { echo "attention.sh: bench_cuda_attention failed (status $rc)"; exit 1; }
theirs=$(env -u LD_LIBRARY_PATH "$PYTHON" "$here/pytorch_attention.py" "$@" 2>&1); rc=$?
echo "$theirs"
[ $rc -ne 0 ] && { echo "attention.sh: the PyTorch peer failed (status $rc)"; exit 1; }
echo "$ours" | awk '/^trident /{print $7, $9, $13}' | while read -r T HS ms; do
  p=$(echo "$theirs" | awk -v T="$T" -v HS="$HS" '$1 == "pytorch" && $7 == T && $9 == HS {print $13}')
  [ -n "$p" ] && awk -v T="$T" -v HS="$HS" -v o="$ms" -v p="$p" \
    'BEGIN {printf "ratio T %s HS %s: PyTorch SDPA %.3f ms / Trident fused %.3f ms = %.2fx\n", T, HS, p, o, p / o}'
done
