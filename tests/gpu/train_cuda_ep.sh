#!/usr/bin/env bash
# tests/gpu/train_cuda_ep.sh - expert parallelism on the CUDA backend (docs/moe.md "Expert parallelism
# in the engine"): engine_train --device cuda trains the tiny byte-level MoE (models/moe-tiny-byte.json,
# 8 experts, top-2) under --bf16 --deterministic-mode on 2 Open MPI ranks with
# --expert-model-parallel-size 2 and on 1 rank with the same global batch; in deterministic mode
# every ep layout is one rank's bits (tests/test_moe_ep_layouts.c), so the two runs' losses and
# gradient norms must be identical. On the emulated build (tests/cuda_emu, label cpu) this runs the
# backend's host code and kernels for the bf16 token exchange (the comm's all-to-all with variable
# counts on bf16 device rows); on a GPU, NCCL's grouped send/recv.
# Usage: train_cuda_ep.sh BIN_DIR SOURCE_DIR (BIN_DIR holds an engine_train built with the CUDA backend)
set -uo pipefail
BIN=${1:?usage: train_cuda_ep.sh BIN_DIR SOURCE_DIR}
SRC=${2:?usage}
# shellcheck source=tests/lib/gpu_train.sh
source "$SRC/tests/lib/gpu_train.sh"
A=(--config "$SRC/models/moe-tiny-byte.json" --train-data "$SRC/data/fortunes_byte_train.bin"
   --val-data "$SRC/data/fortunes_byte_val.bin" --seq-length 32 --micro-batch-size 2 --global-batch-size 8
   --train-iters 2 --eval-iters 1 --sample-length 0 --threads 1 --lr 3e-3 --log-interval 1
   --bf16 --deterministic-mode --device cuda)
run() { # name ranks flags...
  local name=$1 np=$2
  shift 2
  gpu_train "$name" "$np" "${A[@]}" "$@"
}
run one 1
run ep2 2 --expert-model-parallel-size 2
/usr/bin/python3 - "$T/one/metrics.jsonl" "$T/ep2/metrics.jsonl" <<'PY'
import json, sys
train = lambda p: [(r["loss"], r["grad_norm"]) for r in map(json.loads, open(p)) if r.get("kind") == "train"]
one, ep = train(sys.argv[1]), train(sys.argv[2])
assert len(one) == len(ep) == 2, (one, ep)
assert one == ep, f"ep 2 {ep} vs one rank {one}"
print(f"ok   cuda bf16 ep 2 on 2 ranks: losses and gradient norms one rank's bit for bit ({one[0][0]!r} -> {one[-1][0]!r})")
PY
