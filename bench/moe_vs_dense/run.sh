#!/usr/bin/env bash
# bench/moe_vs_dense/run.sh - the tiny MoE against a dense Llama of the same active parameters on the
# fortunes text at equal tokens (issue 33, "Benchmarks"): both validation curves, one table.
#
#   bash bench/moe_vs_dense/run.sh [OUT_DIR] [RUN ...]   (default OUT_DIR docs/data/moe-vs-dense, every run)
#
# The MoE is models/moe-tiny-byte.json (Mixtral: hidden 128, 4 layers, 8 SwiGLU experts of width 256,
# top-2; 3.38M parameters, 1.02M active). The dense model is the same Llama with one SwiGLU of width
# 512 = 2 x 256 in each layer (1.02M parameters: the MoE's active ones less its 4 x 8 x 128 router
# weights), written below. Every run: one rank, micro-batch 8 x 64 tokens, MOE_ITERS iterations
# (default 1200: 614,400 tokens, a quarter of the training text), AdamW, lr warming up over 2% of
# the iterations then cosine to a tenth, the same seed and data order, validation on 20 batches every
# sixth of the run. Runs:
#   dense          the dense model, lr 3e-3
#   moe            the MoE, lr 3e-3, the config's aux loss (router_aux_loss_coef 0.01 x K = 0.02 in
#                  Megatron's units)
#   moe-aux1e-3    the MoE with --moe-aux-loss-coeff 1e-3 (Megatron's default is 0; Switch uses 1e-2)
#   dense-lr6e-3 moe-lr6e-3   both at twice the learning rate (not in the default list: by name)
#   moe-bf16       the MoE under --bf16 (not in the default list: by name)
# Each run's metrics.jsonl lands in OUT_DIR/<run>.jsonl and its log in OUT_DIR/<run>.log; table.sh
# prints validation loss against tokens, one column a run (OUT_DIR/table.md). Two runs at a time
# (MOE_JOBS), one thread each.
set -euo pipefail
cd "$(dirname "$0")/../.."
out=${1:-docs/data/moe-vs-dense}
shift || true
runs=("$@")
[ ${#runs[@]} -gt 0 ] || runs=(dense moe moe-aux1e-3)
mkdir -p "$out"
[ -f data/fortunes_byte_train.bin ] || bash tools/prepare_fortunes.sh build/bin
iters=${MOE_ITERS:-1200}
(( iters % 6 == 0 )) || { echo "moe_vs_dense: MOE_ITERS=$iters is not a multiple of 6" >&2; exit 1; }
dense_cfg="$out/dense-active.json"
cat > "$dense_cfg" <<'JSON'
{
  "model_type": "llama",
  "comment": "bench/moe_vs_dense: models/moe-tiny-byte.json with one SwiGLU of width 512 (= top-2 x 256) per layer",
  "hidden_size": 128,
  "intermediate_size": 512,
  "num_attention_heads": 4,
  "num_key_value_heads": 2,
  "num_hidden_layers": 4,
  "vocab_size": 257,
  "max_position_embeddings": 256,
  "rms_norm_eps": 1e-05,
  "rope_theta": 10000.0,
  "tie_word_embeddings": true,
  "hidden_act": "silu",
  "initializer_range": 0.02
}
JSON
common=(--train-data data/fortunes_byte_train.bin --val-data data/fortunes_byte_val.bin --micro-batch-size 8
        --seq-length 64 --train-iters "$iters" --lr-warmup-iters $((iters / 50)) --eval-interval $((iters / 6))
        --eval-iters 20 --log-interval 50 --sample-length 0 --seed 1234 --device cpu)
flags_of() {
  case "$1" in
    dense) echo "--config $dense_cfg --lr 3e-3 --min-lr 3e-4" ;;
    moe) echo "--config models/moe-tiny-byte.json --lr 3e-3 --min-lr 3e-4" ;;
    moe-aux1e-3) echo "--config models/moe-tiny-byte.json --lr 3e-3 --min-lr 3e-4 --moe-aux-loss-coeff 1e-3" ;;
    dense-lr6e-3) echo "--config $dense_cfg --lr 6e-3 --min-lr 6e-4" ;;
    moe-lr6e-3) echo "--config models/moe-tiny-byte.json --lr 6e-3 --min-lr 6e-4" ;;
    moe-bf16) echo "--config models/moe-tiny-byte.json --lr 3e-3 --min-lr 3e-4 --bf16" ;;
    *) echo "moe_vs_dense: unknown run '$1'" >&2; return 1 ;;
  esac
}
one() {
  local r=$1 f dir
  f=$(flags_of "$r")
  dir=$(mktemp -d)
  # shellcheck disable=SC2086
  OMP_NUM_THREADS=1 "${TRIDENT_BUILD:-build}/bin/engine_train" "${common[@]}" $f --save-dir "$dir" > "$out/$r.log" 2>&1 \
    || { echo "moe_vs_dense: run $r failed (log: $out/$r.log)" >&2; rm -rf "$dir"; return 1; }
  cp "$dir/metrics.jsonl" "$out/$r.jsonl"
  rm -rf "$dir"
  echo "== $r done: $f"
}
jobs_max=${MOE_JOBS:-2}
pids=()
for r in "${runs[@]}"; do
  flags_of "$r" > /dev/null
  one "$r" & pids+=($!)
  while [ "$(jobs -rp | wc -l)" -ge "$jobs_max" ]; do sleep 1; done
done
fail=0
for p in "${pids[@]}"; do wait "$p" || fail=1; done
[ $fail -eq 0 ] || exit 1
bash bench/moe_vs_dense/table.sh "$out" | tee "$out/table.md"
