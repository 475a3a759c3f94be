#!/usr/bin/env bash
# tests/gpu/train_cuda_graph.sh BIN_DIR SOURCE_DIR [MPIEXEC] - engine_train --enable-cuda-graph against
# the same run without it (engine/train/step_graph.h): the forward and backward passes captured on the
# second iteration and replayed on every later one must train to the same bits, so every logged
# number (loss, gradient norm, validation loss, at full double precision in metrics.jsonl) and every
# dataset of the last checkpoint (weights and AdamW moments, h5diff) must be identical, not close.
# Cases: the tiny GPT fp32 with 3 micro-batches a step (the same two graphs replayed for each), bf16 with 2, full recomputation, unfused
# attention, and the tiny Llama (models/llama-tiny-byte.json). Each run checks that graphs were captured
# and launched (its log's "cuda graph:" line: 2 graphs, a forward and a backward, launched per
# micro-batch on iterations 2..N). Then the refusals, each naming --enable-cuda-graph and its reason:
# the cpu device, --deterministic-mode, and tp 2 on 2 ranks (MPIEXEC, when given).
# Without a usable GPU (the real CUDA build) it prints why and exits 77 (skipped); the emulated build
# (tests/cuda_emu/) always runs it.
set -uo pipefail
BIN=${1:?usage: train_cuda_graph.sh BIN_DIR SOURCE_DIR [MPIEXEC]}; SRC=${2:?usage}; MPIEXEC=${3:-}
T=$(mktemp -d); trap 'rm -rf "$T"' EXIT
ITERS=4 # capture on iteration 2, replays on 3 and 4, evaluation (uncaptured) between them
printf '{"n_layer": 2, "n_head": 2, "n_embd": 32, "vocab_size": 257, "n_positions": 32}' > "$T/tiny.json"
A=(--train-data "$SRC/data/fortunes_byte_train.bin" --val-data "$SRC/data/fortunes_byte_val.bin"
   --seq-length 16 --train-iters $ITERS --lr 2e-3 --lr-warmup-iters 2 --eval-interval 3 --eval-iters 1
   --sample-length 0 --seed 1234 --threads 1 --save-interval 100 --quiet --device cuda)
failures=0
last=$(printf 'iter_%07d' $ITERS)
fail() { echo "FAIL: $1"; [ -n "${2:-}" ] && tail -5 "$2"; failures=$((failures + 1)); }
# numbers DIR: every train, eval line's iteration, loss, gradient norm, validation loss
numbers() { grep -oE '"(kind|iter|loss|val_loss|grad_norm)":("[a-z]+"|[-0-9.e+]+)' "$1/metrics.jsonl" | paste -sd' '; }
# same NAME MB GBS FLAGS...: the run with and without the graph, compared
same() {
  local name=$1 mb=$2 gbs=$3; shift 3
  local args=("${A[@]}" --micro-batch-size "$mb" --global-batch-size "$gbs" "$@")
  OMP_NUM_THREADS=1 "$BIN/engine_train" "${args[@]}" --save-dir "$T/$name-eager" > "$T/$name-eager.log" 2>&1
  local rc=$?
  if [ $rc -ne 0 ] && grep -qiE "no CUDA device|no usable CUDA" "$T/$name-eager.log"; then
    echo "SKIP: $(grep -iE 'no CUDA device|no usable CUDA' "$T/$name-eager.log" | head -1)"; exit 77
  fi
  [ $rc -eq 0 ] || { fail "$name: the run without the graph exited $rc" "$T/$name-eager.log"; return; }
  OMP_NUM_THREADS=1 "$BIN/engine_train" "${args[@]}" --save-dir "$T/$name-graph" --enable-cuda-graph \
    > "$T/$name-graph.log" 2>&1 || { fail "$name: the run with --enable-cuda-graph failed" "$T/$name-graph.log"; return; }
  local n_micro=$((gbs / mb)) launches before=$failures
  launches=$(( 2 * n_micro * (ITERS - 1) ))
  grep -q "cuda graph: 2 graphs captured, $launches graph launches" "$T/$name-graph.log" ||
    fail "$name: expected 2 graphs and $launches launches: $(grep 'cuda graph' "$T/$name-graph.log")"
  [ "$(numbers "$T/$name-eager")" = "$(numbers "$T/$name-graph")" ] && [ -n "$(numbers "$T/$name-graph")" ] ||
    fail "$name: logged numbers differ: $(numbers "$T/$name-eager") | $(numbers "$T/$name-graph")"
  h5diff -q "$T/$name-eager/$last/model_tp00_pp00.h5" "$T/$name-graph/$last/model_tp00_pp00.h5" ||
    fail "$name: the checkpoints differ (h5diff)"
  [ $failures -eq $before ] && echo "ok   $name: $(numbers "$T/$name-graph" | grep -oE '"loss":[-0-9.e+]+' | tail -1), bit-identical"
}
same gpt-fp32-3mb 2 6 --config "$T/tiny.json" --attention-backend flash
same gpt-bf16-2mb 2 4 --config "$T/tiny.json" --attention-backend flash --bf16
same gpt-recompute 2 4 --config "$T/tiny.json" --attention-backend unfused --recompute-granularity full
same llama 2 4 --config "$SRC/models/llama-tiny-byte.json"

# refuse NAME PATTERN FLAGS...: engine_train must fail, naming the flag and the reason
refuse() {
  local name=$1 pattern=$2; shift 2
  if "$@" > "$T/$name.log" 2>&1; then fail "$name: accepted"; return; fi
  grep -q -- "--enable-cuda-graph" "$T/$name.log" && grep -qE -- "$pattern" "$T/$name.log" ||
    { fail "$name: the refusal does not name --enable-cuda-graph and '$pattern'" "$T/$name.log"; return; }
  echo "ok   refused $name: $(grep -m1 -oE -- '--enable-cuda-graph: [^(]*' "$T/$name.log")"
}
R=("$BIN/engine_train" "${A[@]}" --config "$T/tiny.json" --micro-batch-size 2 --save-dir "$T/refused" --enable-cuda-graph)
refuse cpu "cpu device cannot capture" "${R[@]}" --device cpu
refuse deterministic "deterministic-mode" "${R[@]}" --deterministic-mode
if [ -n "$MPIEXEC" ]; then
  refuse tp2 "tp = pp = dp = 1 \(here tp 2" $MPIEXEC --oversubscribe -n 2 "${R[@]}" --tensor-model-parallel-size 2
fi
[ $failures -eq 0 ] && echo PASS || { echo "$failures failures"; exit 1; }
