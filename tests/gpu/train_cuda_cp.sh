#!/usr/bin/env bash
# tests/gpu/train_cuda_cp.sh - context parallelism on the CUDA backend (docs/context_parallel.md, "cp in
# the training engine"): engine_train --device cuda trains a small byte-level GPT-2 (learned positions:
# the position kernels at the chunks' global positions) and a small Llama (grouped-query attention,
# rotary kernels at global positions) at seq-length 256 on 2 Open MPI ranks with
# --context-parallel-size 2 --cp-comm-type all_gather (chunks of 64 tokens: cp rank i holds chunks i
# and 3-i) and on 1 rank with the same global batch; every iteration's loss within 1e-4 relative (the
# bound of tests/test_cp_layouts.c: the cp ranks' fp32 gradients summed in another grouping; a
# position kernel at local instead of global positions moves the first loss by 4e-4 or more). On the
# emulated build (tests/cuda_emu, label cpu) this runs the backend's host code and kernels for cp: the
# position and rotary kernels (fast and simple twins), the split-sequence attention kernels and the
# device-buffer all-gather and reduce-scatter of the cp group. Then both in bf16 at cp 2 with
# --cp-comm-type p2p against one bf16 rank, within 1e-3 (tests/test_cp_compose.c's bound for the ring in
# bf16): the ring's non-blocking p2p on device buffers; where the 2 ranks share one device (the emulated
# build, a one-GPU machine) engine_train's staged MPI comm carries it (comm_staged.h), the staged comm
# end to end on one GPU.
# Usage: train_cuda_cp.sh BIN_DIR SOURCE_DIR (BIN_DIR holds an engine_train built with the CUDA backend)
set -uo pipefail
BIN=${1:?usage: train_cuda_cp.sh BIN_DIR SOURCE_DIR}
SRC=${2:?usage}
# shellcheck source=tests/lib/gpu_train.sh
source "$SRC/tests/lib/gpu_train.sh"
echo '{"model_type": "gpt2", "n_layer": 2, "n_head": 2, "n_embd": 32, "vocab_size": 257, "n_positions": 256}' \
  > "$T/gpt.json"
echo '{"model_type": "llama", "hidden_size": 32, "intermediate_size": 64, "num_attention_heads": 2,
       "num_key_value_heads": 1, "num_hidden_layers": 2, "vocab_size": 257, "max_position_embeddings": 256}' \
  > "$T/llama.json"
A=(--train-data "$SRC/data/fortunes_byte_train.bin" --val-data "$SRC/data/fortunes_byte_val.bin" --seq-length 256
   --micro-batch-size 1 --global-batch-size 2 --train-iters 3 --eval-iters 1 --sample-length 0 --threads 1
   --lr 3e-3 --log-interval 1 --device cuda)
run() { # name ranks config flags...
  local name=$1 np=$2 cfg=$3
  shift 3
  gpu_train "$name" "$np" --config "$T/$cfg.json" "${A[@]}" "$@"
}
fails=0
compare() { # one cp bound what: every iteration's loss of run cp within bound (relative) of run one's
  /usr/bin/python3 - "$T/$1/metrics.jsonl" "$T/$2/metrics.jsonl" "$3" "$4" <<'PY' || fails=$((fails + 1))
import json, sys
train = lambda p: [r["loss"] for r in map(json.loads, open(p)) if r.get("kind") == "train"]
one, cp, bound, what = train(sys.argv[1]), train(sys.argv[2]), float(sys.argv[3]), sys.argv[4]
assert len(one) == len(cp) == 3, (one, cp)
worst = max(abs(a - b) / a for a, b in zip(one, cp))
assert worst < bound, f"{what} {cp} vs one rank {one}: {worst:.3g} (bound {bound})"
print(f"ok   cuda {what} on 2 ranks: losses within {worst:.2g} of one rank's ({one[0]:.4f} -> {one[-1]:.4f})")
PY
}
for cfg in gpt llama; do
  run "${cfg}_one" 1 "$cfg"
  run "${cfg}_cp2" 2 "$cfg" --context-parallel-size 2 --cp-comm-type all_gather
  compare "${cfg}_one" "${cfg}_cp2" 1e-4 "$cfg cp 2"
  # bf16 through the ring (p2p_start on device buffers; the 2 ranks share the device, so the staged MPI
  # comm) against one bf16 rank: the ring rounds its block outputs and dq to bf16 before combining them,
  # tests/test_cp_compose.c's bf16 bound for it (test_bf16's tp class), 1e-3
  run "${cfg}_one_bf16" 1 "$cfg" --bf16
  run "${cfg}_cp2_p2p_bf16" 2 "$cfg" --bf16 --context-parallel-size 2 --cp-comm-type p2p
  compare "${cfg}_one_bf16" "${cfg}_cp2_p2p_bf16" 1e-3 "$cfg bf16 cp 2 p2p"
done
[ "$fails" -eq 0 ] || { echo "FAIL: $fails comparison(s)"; exit 1; }
