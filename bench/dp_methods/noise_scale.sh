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
bin=${TRIDENT_BUILD:-build}/bin
if [ "$(id -u)" -eq 0 ]; then export OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1; fi
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
  "$bin/ckpt" export --format llmc --quiet "$src" "$tmp/w.bin" > "$tmp/log" 2>&1 || { cat "$tmp/log" >&2; exit 1; }
  for b in 4 16 64; do
    rm -rf "$tmp/run"
    "$bin/ckpt" import --format llmc --quiet "$tmp/w.bin" "$tmp/run" > "$tmp/log" 2>&1 || { cat "$tmp/log" >&2; exit 1; }
    mb=$(( b < 16 ? b / 4 : 4 ))
    mpirun --oversubscribe --bind-to none -np 4 -x OMP_NUM_THREADS=1 -x OMP_WAIT_POLICY=PASSIVE \
      "$bin/engine_train" --config models/gpt2-tiny-byte.json --train-data data/fortunes_byte_train.bin \
      --val-data data/fortunes_byte_val.bin --micro-batch-size "$mb" --seq-length 128 --global-batch-size "$b" \
      --train-iters "$steps" --lr 1e-30 --min-lr 1e-30 --lr-warmup-iters 0 --log-interval "$steps" \
      --eval-interval "$steps" --eval-iters 1 --sample-length 0 --seed 4321 --override-opt_param-scheduler \
      --load "$tmp/run" --save-dir "$tmp/run" --save-interval 0 > "$tmp/log" 2>&1 \
      || { cat "$tmp/log" >&2; echo "noise_scale: iteration $it, batch $b failed" >&2; exit 1; }
    cp "$tmp/run/metrics.jsonl" "$out/noise-$it-b$b.jsonl"
  done
  echo "noise_scale: iteration $it measured"
done
python3 bench/dp_methods/noise_scale.py "$out" | tee "$out/noise-scale.md"
