#!/usr/bin/env bash
# bench/dp_methods/resume_layouts.sh [OUT_DIR] - what carrying the compression state into another
# layout is worth (docs/grad-compression.md, "Checkpoints"): the dp-methods recipe (run.sh: the tiny
# GPT on fortunes, 300 iterations of 16 x 128 tokens, AdamW lr 2e-3) saved at iteration 150 at
# tp 1 x dp 4 and resumed in another layout twice, once with the state carried (resharded: each
# rank's residual the saved ranks' sum over the new dp, PowerSGD's Q rebuilt for the new TP shards)
# and once with --reset-compression-state (residuals from zero, Q drawn afresh):
#   powersgd  PowerSGD rank 4, resumed at tp 2 x dp 2 (4 ranks)
#   1bit      1bit, resumed at tp 1 x dp 2 (2 ranks)
# Writes OUT_DIR/<method>-{uninterrupted,carried,reset}.jsonl and OUT_DIR/table.md (validation loss
# at iterations 200, 250 and 300, and the mean training loss of iterations 151-160, just after the
# resume). About 25 minutes on 2 cores.
set -euo pipefail
cd "$(dirname "$0")/../.."
out=${1:-docs/data/dp-methods/resume-layouts}
mkdir -p "$out"
if [ "$(id -u)" -eq 0 ]; then export OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1; fi
[ -f data/fortunes_byte_train.bin ] || bash tools/prepare_fortunes.sh build/bin
bin=${TRIDENT_BUILD:-build}/bin/engine_train
common=(--config models/gpt2-tiny-byte.json --train-data data/fortunes_byte_train.bin
        --val-data data/fortunes_byte_val.bin --micro-batch-size 4 --seq-length 128 --log-interval 10
        --min-lr 2e-4 --global-batch-size 16 --train-iters 300 --lr 2e-3 --lr-warmup-iters 30 --eval-interval 50)
train() { # ranks log flags...
  local np=$1 log=$2
  shift 2
  mpirun --oversubscribe --bind-to none -np "$np" -x OMP_NUM_THREADS=1 -x OMP_WAIT_POLICY=PASSIVE \
    "$bin" "${common[@]}" "$@" > "$log" 2>&1 || { echo "resume_layouts: failed (log: $log)" >&2; exit 1; }
}
for method in powersgd 1bit; do
  case $method in
    powersgd) flags=(--grad-compression powersgd --powersgd-rank 4); np=4; layout=(--tensor-model-parallel-size 2) ;;
    1bit) flags=(--grad-compression 1bit); np=2; layout=() ;;
  esac
  dir=$(mktemp -d)
  echo "== $method: uninterrupted at tp 1 x dp 4, saved at 150"
  train 4 "$out/$method-uninterrupted.log" "${flags[@]}" --save-dir "$dir/a" --save-interval 150
  cp "$dir/a/metrics.jsonl" "$out/$method-uninterrupted.jsonl"
  for how in carried reset; do
    extra=()
    [ "$how" = reset ] && extra=(--reset-compression-state)
    echo "== $method: resumed at iteration 150 on $np ranks ${layout[*]}, state $how"
    train "$np" "$out/$method-$how.log" "${flags[@]}" "${layout[@]}" "${extra[@]}" \
      --load "$dir/a/iter_0000150" --save-dir "$dir/$how"
    cp "$dir/$how/metrics.jsonl" "$out/$method-$how.jsonl"
  done
  rm -rf "$dir"
done
python3 - "$out" > "$out/table.md" <<'PY'
import json, sys
out = sys.argv[1]
print("| method | resumed at | state | mean train loss, iterations 151-160 | val loss at 200 | 250 | 300 |")
print("|---|---|---|---|---|---|---|")
where = {"powersgd": "tp 2 x dp 2", "1bit": "tp 1 x dp 2"}
for m in ("powersgd", "1bit"):
    for how in ("uninterrupted", "carried", "reset"):
        rows = [json.loads(l) for l in open(f"{out}/{m}-{how}.jsonl")]
        train = [r["loss"] for r in rows if r["kind"] == "train" and 151 <= r["iter"] <= 160]
        val = {r["iter"]: r["val_loss"] for r in rows if r["kind"] == "eval"}
        mean = sum(train) / len(train) if train else float("nan")
        print(f"| {m} | {'tp 1 x dp 4' if how == 'uninterrupted' else where[m]} | {how} | {mean:.4f} | "
              + " | ".join(f"{val.get(i, float('nan')):.4f}" for i in (200, 250, 300)) + " |")
PY
cat "$out/table.md"
