#!/usr/bin/env bash
# bench/dp_methods/noise_scale.sh RUN_DIR OUT_DIR [ITERATION ...] - the gradient noise scale along a run.
#
# For each saved step of RUN_DIR (a run of the tiny GPT on fortunes, e.g. `DP_METHODS_SAVE_INTERVAL=25
# bash bench/dp_methods/run.sh DIR none`, then DIR/none-run; default: every step there), the weights are taken as step 0 of a new
# run (ckpt export --format llmc, then ckpt import) and trained NOISE_STEPS (default 32) iterations at
# global batches 4, 16 and 64 on 4 ranks (dp 4) with the learning rate 1e-30, so that the weights
# stay as saved (AdamW moves an element by at most about lr, below the float32 spacing of any nonzero
# weight) while each step reads new sequences (--seed 4321: an order other than the run's). Each
# step's grad_norm is the norm of the gradient averaged over the global batch, before clipping; the
# files land in OUT_DIR/noise-<iteration>-b<B>.jsonl and noise_scale.py fits the noise scale
# (McCandlish et al. 2018) from them, printing a markdown table (OUT_DIR/noise-scale.md).
set -euo pipefail
cd "$(dirname "$0")/../.."
run=${1:?usage: noise_scale.sh RUN_DIR OUT_DIR [ITERATION ...]}
out=${2:?usage: noise_scale.sh RUN_DIR OUT_DIR [ITERATION ...]}
shift 2
steps=${NOISE_STEPS:-32}
# shellcheck source=bench/dp_methods/from_weights.sh
. bench/dp_methods/from_weights.sh
mkdir -p "$out"
its=("$@")
if [ ${#its[@]} -eq 0 ]; then
  for d in "$run"/iter_*; do its+=("$((10#${d##*iter_}))"); done
fi
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
for it in "${its[@]}"; do
  src=$(printf "%s/iter_%07d" "$run" "$it")
  [ -d "$src" ] || { echo "noise_scale: $src is not a saved step" >&2; exit 1; }
  export_weights "$src" "$tmp/w.bin"
  for b in 4 16 64; do
    train_from "$tmp/w.bin" "$tmp/run" "$tmp/log" "${held[@]}" --micro-batch-size $(( b < 16 ? b / 4 : 4 )) \
      --global-batch-size "$b" --train-iters "$steps" --log-interval "$steps" --eval-interval "$steps" --eval-iters 1 \
      || { cat "$tmp/log" >&2; echo "noise_scale: iteration $it, batch $b failed" >&2; exit 1; }
    cp "$tmp/run/metrics.jsonl" "$out/noise-$it-b$b.jsonl"
  done
  echo "noise_scale: iteration $it measured"
done
python3 bench/dp_methods/noise_scale.py "$out" | tee "$out/noise-scale.md"
