#!/usr/bin/env bash
# bench/dp_methods/pretrained.sh STEP_DIR OUT_DIR [RUN ...] - the dp methods from a trained checkpoint:
# LAMB at 4x the batch where the gradient noise scale has outgrown the larger batch, and DiLoCo,
# local SGD and the compressors from a pretrained model as the DiLoCo paper starts (Douillard et al.
# 2023 §3: from a model pretrained for 24k steps).
#
# From scratch, the tiny GPT's noise scale is ~9 sequences until bench/dp_methods/run.sh's rate
# anneals (noise_scale.sh), so a batch of 64 needs ~3x the tokens of a batch of 16 whatever the
# optimizer (McCandlish et al. 2018); it grows to 40-250 sequences in the second half of the
# 1200-iteration recipe. These runs start from STEP_DIR (the 1200-iteration recipe's iteration 600,
# validation loss 1.90: `DP_METHODS_ITERS=1200 DP_METHODS_SAVE_INTERVAL=150 bash
# bench/dp_methods/run.sh DIR none`, then DIR/none-run/iter_0000600) as step 0 of a new run (ckpt
# export --format llmc, ckpt import: the weights, fresh optimizer state) and train the same 1,228,800
# tokens on 4 ranks (dp 4), reading the text in another order (--seed 4321):
#   adamw-gbs16        AdamW, 600 iterations of 16 sequences, lr 1.25e-3 (the recipe's rate at
#                      iteration 600) to 2e-4, 30 warm-up iterations for the fresh moments
#   lamb-gbs16-lrX     LAMB at AdamW's batch: 600 iterations of 16 sequences, lr X to X / 10, 30
#                      warm-up iterations (its best rate, times 2, is the paper's rate at 4x the batch)
#   lamb-gbs64-lrX     LAMB, 150 iterations of 64 sequences, lr X to X / 10, 8 warm-up iterations
#                      (the same tokens); lamb-gbs64-lr2.5e-3 is the square-root scaling of AdamW's
#                      rate
#   adamw-gbs64-lr2.5e-3  AdamW at the same 4x batch and the square-root-scaled rate (the control)
#   diloco-h16 localsgd-h16 powersgd 1bit   adamw-gbs16 with the method's flags, as run.sh runs it
#                      (methods.sh; DiLoCo: 16 local steps, outer Nesterov 0.7 / 0.9; local SGD: 16
#                      local steps, then the average; PowerSGD rank 4; 1bit), all with dp 4
# Validation every 204,800 tokens on the same 192 validation sequences (12 or 3 global batches).
# Each run's metrics.jsonl lands in OUT_DIR/<run>.jsonl; OUT_DIR/table.md has table.sh's table against adamw-gbs16 and the
# checkpoint's own validation loss, with each run's share of AdamW's fall from it.
set -euo pipefail
cd "$(dirname "$0")/../.."
src=${1:?usage: pretrained.sh STEP_DIR OUT_DIR [RUN ...]}
out=${2:?usage: pretrained.sh STEP_DIR OUT_DIR [RUN ...]}
shift 2
runs=("$@")
[ ${#runs[@]} -gt 0 ] || runs=(adamw-gbs16 lamb-gbs16-lr5e-3 lamb-gbs16-lr1e-2 lamb-gbs16-lr2e-2
                                lamb-gbs64-lr2.5e-3 lamb-gbs64-lr1e-2 lamb-gbs64-lr2e-2 adamw-gbs64-lr2.5e-3
                                diloco-h16 localsgd-h16 powersgd 1bit)
# shellcheck source=bench/dp_methods/from_weights.sh
. bench/dp_methods/from_weights.sh
# shellcheck source=bench/dp_methods/methods.sh
. bench/dp_methods/methods.sh
mkdir -p "$out"
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
export_weights "$src" "$tmp/w.bin"
# the two shapes of the same tokens (batch, iterations, warm-up, validation every 204,800 tokens on
# the same 192 sequences) and a peak rate decaying to a tenth
at16="--global-batch-size 16 --train-iters 600 --lr-warmup-iters 30 --eval-interval 100 --eval-iters 12"
at64="--global-batch-size 64 --train-iters 150 --lr-warmup-iters 8 --eval-interval 25 --eval-iters 3"
rate() { echo "--lr $1 --min-lr $(awk -v x="$1" 'BEGIN { print x / 10 }')"; }
flags_of() {
  case "$1" in
    adamw-gbs16) echo "$at16 --lr 1.25e-3 --min-lr 2e-4" ;;
    lamb-gbs16-lr*) echo "$at16 --optimizer lamb $(rate "${1#lamb-gbs16-lr}")" ;;
    lamb-gbs64-lr*) echo "$at64 --optimizer lamb $(rate "${1#lamb-gbs64-lr}")" ;;
    adamw-gbs64-lr*) echo "$at64 $(rate "${1#adamw-gbs64-lr}")" ;;
    diloco-h16|localsgd-h16|powersgd|1bit) echo "$(flags_of adamw-gbs16) $(method_flags "$1")" ;;
    *) echo "pretrained: unknown run '$1'" >&2; return 1 ;;
  esac
}
for r in "${runs[@]}"; do
  f=$(flags_of "$r")
  echo "== $r: $f"
  # shellcheck disable=SC2086
  train_from "$tmp/w.bin" "$tmp/run" "$out/$r.log" --micro-batch-size 4 --log-interval 10 $f \
    || { echo "pretrained: run $r failed (log: $out/$r.log)" >&2; exit 1; }
  cp "$tmp/run/metrics.jsonl" "$out/$r.jsonl"
done
# the checkpoint's own validation loss on the same sequences (one step that holds the weights)
train_from "$tmp/w.bin" "$tmp/run" "$tmp/log" "${held[@]}" --micro-batch-size 4 --global-batch-size 16 \
  --train-iters 1 --eval-interval 1 --eval-iters 12 || { cat "$tmp/log" >&2; exit 1; }
last() { grep '"kind":"eval"' "$1" | tail -1 | sed 's/.*"val_loss":\([0-9.]*\).*/\1/'; }
start=$(last "$tmp/run/metrics.jsonl")
[ -f "$out/adamw-gbs16.jsonl" ] || exit 0
# table.sh's table with adamw-gbs16 as the baseline, then each run's share of AdamW's fall from the start
mkdir "$tmp/t"
cp "$out"/*.jsonl "$tmp/t/"
mv "$tmp/t/adamw-gbs16.jsonl" "$tmp/t/none.jsonl"
v0=$(last "$out/adamw-gbs16.jsonl")
{
  bash bench/dp_methods/table.sh "$tmp/t" | sed 's/^| none |/| adamw-gbs16 |/; s/| vs none |/| vs adamw-gbs16 |/'
  echo
  printf "Validation loss of the checkpoint itself: %.4f. Each run's share of adamw-gbs16's fall from it:\\n" "$start"
  for f in "$out"/*.jsonl; do
    awk -v r="$(basename "$f" .jsonl)" -v v="$(last "$f")" -v v0="$v0" -v s="$start" \
      'BEGIN { printf "  %-24s %.1f%%\n", r, 100 * (s - v) / (s - v0) }'
  done
} | tee "$out/table.md"
