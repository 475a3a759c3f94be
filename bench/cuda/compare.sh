#!/usr/bin/env bash
# bench/cuda/compare.sh - Trident against PyTorch eager on the same GPU in one command:
# for each model, bench_cuda_train (ms/iter, tokens/s, TFLOP/s, MFU) and then bench/cuda/pytorch_gpt2.py
# (nanoGPT-style eager model, fused AdamW, scaled_dot_product_attention) with the same shape, micro-batch,
# T and precision, and the ratio of their tokens/s (above 1: Trident is faster).
#
#   bash tools/trident.sh bench-cuda [--models "gpt2 gpt2-xl"] [--fp32] [--micro-batch-size B|fit]
#                                    [--iters N] [--warmup N] [--profile] [--attention sdpa|materialized]
#                                    [--trident-attention auto|flash|unfused] [--compile]
#                                    [--seq-length T]
#
# --attention materialized runs both sides with the T x T scores (Trident --attention-backend
# unfused, PyTorch's explicit softmax); by default Trident runs its default on a GPU (--attention-backend
# auto: unfused, the path measured fastest there; flash for the Llamas) and PyTorch SDPA, and
# --trident-attention flash|unfused sets Trident's side alone. --compile adds a row for the peer under
# torch.compile (where the installed PyTorch has it), marked "compiled": the ratio stays against eager.
#
# Defaults: GPT-2 124M (micro-batch 8) and 1.5B (micro-batch 2), bf16, T 1024, 10 timed iterations
# after 3 warm-up. --micro-batch-size fit: each model's largest micro-batch whose planned memory fits an
# 80 GB card (bench_cuda_train --fit-memory-gib 72.5, the partitioner's H100 preset less its reserve),
# which PyTorch then runs too (it may not fit there: PyTorch keeps more activations). --profile adds
# bench_cuda_train's per-op table. BIN (default build/bin) says where bench_cuda_train is, PYTHON
# (default python3) which interpreter has PyTorch with CUDA, MODELS_DIR (default models/) where the
# model configs are, PYTORCH_DEVICE (default cuda) where the peer runs: CTest's bench_cuda_emu
# runs this script with tiny models, the emulated backend's bench and the peer on the CPU.
set -uo pipefail
here=$(cd "$(dirname "$0")" && pwd)
BIN=${BIN:-$here/../../build/bin}
PYTHON=${PYTHON:-python3}
MODELS_DIR=${MODELS_DIR:-$here/../../models}
PYTORCH_DEVICE=${PYTORCH_DEVICE:-cuda}
models="gpt2 gpt2-xl"; prec=--bf16; iters=10; warmup=3; B=""; profile=""; attention=sdpa; T=1024; backend=""; compile=""
while [ $# -gt 0 ]; do
  case "$1" in
    --models) models=$2; shift 2 ;;
    --fp32) prec=""; shift ;;
    --bf16) prec=--bf16; shift ;;
    --micro-batch-size) B=$2; shift 2 ;;
    --iters) iters=$2; shift 2 ;;
    --warmup) warmup=$2; shift 2 ;;
    --profile) profile=--profile; shift ;;
    --attention) attention=$2; shift 2 ;;
    --trident-attention) backend=$2; shift 2 ;;
    --compile) compile=1; shift ;;
    --seq-length) T=$2; shift 2 ;;
    *) echo "compare.sh: unknown flag '$1' (see the header of $0)" >&2; exit 2 ;;
  esac
done
default_b() { case "$1" in gpt2) echo 8 ;; gpt2-medium|gpt2-large) echo 4 ;; gpt2-8k) echo 1 ;; *) echo 2 ;; esac; }
if [ -z "$backend" ]; then backend=auto; [ "$attention" = materialized ] && backend=unfused; fi
status=0
for m in $models; do
  b=${B:-$(default_b "$m")}
  size=(--micro-batch-size "$b"); [ "$b" = fit ] && size=(--fit-memory-gib 72.5)
  out=$("$BIN/bench_cuda_train" --models-dir "$MODELS_DIR" --model "$m" "${size[@]}" \
        --seq-length "$T" --attention-backend "$backend" --iters "$iters" --warmup "$warmup" $prec $profile 2>&1); rc=$?
  echo "$out"
  [ $rc -ne 0 ] && { echo "compare.sh: bench_cuda_train failed for $m (status $rc)"; status=1; continue; }
  # the micro-batch the bench ran (the one it chose with fit): "... bf16 B 16 x T 1024 ..."
  [ "$b" = fit ] && b=$(echo "$out" | awk -v m="$m" '$1 == m {for (i = 1; i < NF; i++) if ($i == "B") {print $(i + 1); exit}}')
  peer=$(env -u LD_LIBRARY_PATH "$PYTHON" "$here/pytorch_gpt2.py" --models-dir "$MODELS_DIR" --model "$m" \
         --micro-batch-size "$b" --seq-length "$T" --iters "$iters" --warmup "$warmup" --attention "$attention" \
         --device "$PYTORCH_DEVICE" $prec 2>&1); rc=$?
  echo "$peer"
  [ $rc -ne 0 ] && { echo "compare.sh: the PyTorch peer failed for $m (status $rc)"; status=1; continue; }
  ours=$(echo "$out" | awk -F'|' -v m="$m" '$1 ~ "^"m" " {print $3}' | awk '{print $1}' | tail -1)
  theirs=$(echo "$peer" | awk -F'|' '/^pytorch /{print $3}' | awk '{print $1}' | tail -1)
  if [ -n "$ours" ] && [ -n "$theirs" ]; then
    awk -v m="$m" -v o="$ours" -v t="$theirs" -v a="$attention" \
      'BEGIN {printf "ratio %s: Trident %.0f tok/s / PyTorch eager (%s) %.0f tok/s = %.2fx\n", m, o, a, t, o / t}'
  else
    echo "compare.sh: could not read tokens/s for $m"; status=1
  fi
  if [ -n "$compile" ]; then
    env -u LD_LIBRARY_PATH "$PYTHON" "$here/pytorch_gpt2.py" --models-dir "$MODELS_DIR" --model "$m" \
      --micro-batch-size "$b" --seq-length "$T" --iters "$iters" --warmup "$warmup" --attention "$attention" \
      --device "$PYTORCH_DEVICE" --compile $prec 2>&1 || echo "compare.sh: the compiled peer failed for $m (not counted)"
  fi
done
exit $status
