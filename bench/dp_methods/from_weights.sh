# shellcheck shell=bash
# bench/dp_methods/from_weights.sh - sourced by noise_scale.sh and pretrained.sh: runs of the tiny GPT
# on fortunes (4 ranks, dp 4) that start from a saved step's weights as step 0 of a new run, so that
# the global batch, the optimizer and its state may differ from the saving run's.
#   export_weights STEP_DIR W_BIN      the step's weights as llm.c's file (ckpt export --format llmc)
#   train_from W_BIN DIR LOG FLAG...   W_BIN imported as step 0 of the run directory DIR (ckpt import:
#                                      fresh optimizer state), then engine_train with FLAG... reading the
#                                      text in another order than the recipe's (--seed 4321); output in
#                                      LOG, each step in DIR/metrics.jsonl
#   held                               flags of steps that keep the weights as saved: lr 1e-30 moves an
#                                      element by at most about 1e-30, far below the float32 spacing of
#                                      any weight (checked bit-identical with h5diff after 8 steps)
bin=${TRIDENT_BUILD:-build}/bin
if [ "$(id -u)" -eq 0 ]; then export OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1; fi
# shellcheck disable=SC2034 # used by the scripts that source this file
held=(--lr 1e-30 --min-lr 1e-30 --lr-warmup-iters 0)

export_weights() {
  "$bin/ckpt" export --format llmc --quiet "$1" "$2" > "$2.log" 2>&1 || { cat "$2.log" >&2; return 1; }
}

train_from() {
  local w=$1 dir=$2 log=$3
  shift 3
  rm -rf "$dir"
  "$bin/ckpt" import --format llmc --quiet "$w" "$dir" > "$log" 2>&1 || { cat "$log" >&2; return 1; }
  mpirun --oversubscribe --bind-to none -np 4 -x OMP_NUM_THREADS=1 -x OMP_WAIT_POLICY=PASSIVE \
    "$bin/engine_train" --config models/gpt2-tiny-byte.json --train-data data/fortunes_byte_train.bin \
    --val-data data/fortunes_byte_val.bin --seq-length 128 --sample-length 0 --seed 4321 \
    --override-opt_param-scheduler --load "$dir" --save-dir "$dir" --save-interval 0 "$@" > "$log" 2>&1
}
