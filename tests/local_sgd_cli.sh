#!/usr/bin/env bash
# tests/local_sgd_cli.sh BUILD_DIR SOURCE_DIR - local SGD / DiLoCo through engine_train under real
# MPI (engine/train/local_sgd.h, docs/local-sgd.md).
#
#  1. DiLoCo (--local-sgd-steps 4 --outer-optimizer nesterov) on 4 ranks, tp 2 x dp 2, deterministic,
#     12 iterations, saving at 6 (inside a window: the replicas differ); resuming from iteration 6
#     gives the same losses and validation loss as the uninterrupted run, and the final model,
#     outer-state and replica files are the same bits (h5diff).
#  2. The iteration line counts the synchronisations and metrics.jsonl has an "outer_sync" line at
#     iterations 4, 8 and 12.
#  3. Resuming that checkpoint with another --local-sgd-steps is refused naming both; with
#     --reset-outer-state it runs.
set -u
build=$1
src=$2
bin="$build/bin/engine_train"
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
failures=0
cd "$src" || exit 1
[ -f data/fortunes_byte_train.bin ] || { echo "FAIL: data/fortunes_byte_*.bin missing (tools/prepare_fortunes.sh)"; exit 1; }
printf '{"n_layer": 2, "n_head": 2, "n_embd": 32, "vocab_size": 257, "n_positions": 64}' > "$tmp/tiny.json"
run=(mpirun --oversubscribe --bind-to none -np 4 -x OMP_NUM_THREADS=1 "$bin" --config "$tmp/tiny.json"
     --micro-batch-size 2 --global-batch-size 4 --seq-length 64 --sample-length 0 --eval-interval 0
     --eval-iters 2 --log-interval 1 --threads 1 --tensor-model-parallel-size 2 --deterministic-mode
     --local-sgd-steps 4 --outer-optimizer nesterov --train-iters 12 --save-interval 6)
fail() { echo "FAIL $1"; [ -n "${2:-}" ] && tail -5 "$2"; failures=$((failures + 1)); }
numbers() { grep '"train"' "$1/metrics.jsonl" | grep -oE '"(iter|loss)":[-0-9.e+]+' | paste -sd' '; }

# ---- 1. a save inside a window resumes bit for bit ----
"${run[@]}" --save-dir "$tmp/a" > "$tmp/a.log" 2>&1 || fail "uninterrupted run" "$tmp/a.log"
"${run[@]}" --save-dir "$tmp/b" --load "$tmp/a/iter_0000006" > "$tmp/b.log" 2>&1 || fail "resumed run" "$tmp/b.log"
want=$(numbers "$tmp/a" | grep -oE '"iter":([7-9]|1[0-2]) "loss":[-0-9.e+]+' | paste -sd' ')
got=$(numbers "$tmp/b" | grep -oE '"iter":([7-9]|1[0-2]) "loss":[-0-9.e+]+' | paste -sd' ')
[ -n "$want" ] && [ "$want" = "$got" ] || fail "resumed losses differ: '$got' vs '$want'"
va=$(grep -o '"val_loss":[-0-9.e+]*' "$tmp/a/metrics.jsonl" | tail -1)
vb=$(grep -o '"val_loss":[-0-9.e+]*' "$tmp/b/metrics.jsonl" | tail -1)
[ -n "$va" ] && [ "$va" = "$vb" ] || fail "final validation loss differs: $vb vs $va"
for f in model_tp00_pp00.h5 model_tp01_pp00.h5 outer_tp00_pp00_dp001.h5 outer_tp01_pp00_dp000.h5 \
         replica_tp00_pp00_dp000.h5 replica_tp01_pp00_dp001.h5; do
  if command -v h5diff > /dev/null; then
    h5diff -q "$tmp/a/iter_0000012/$f" "$tmp/b/iter_0000012/$f" > /dev/null || fail "final $f differs"
  else
    [ -f "$tmp/b/iter_0000012/$f" ] || fail "final $f missing"
  fi
done

# ---- 2. synchronisations marked ----
syncs=$(grep '"kind":"outer_sync"' "$tmp/a/metrics.jsonl" | grep -oE '"iter":[0-9]+' | paste -sd' ')
[ "$syncs" = '"iter":4 "iter":8 "iter":12' ] || fail "outer_sync lines at '$syncs', expected iterations 4, 8, 12"
grep -q "synced, outer syncs 3" "$tmp/a.log" || fail "the iteration line does not count the synchronisations" "$tmp/a.log"

# ---- 3. another H refused naming both, unless --reset-outer-state ----
"${run[@]}" --local-sgd-steps 8 --save-dir "$tmp/c" --load "$tmp/a/iter_0000006" \
  > "$tmp/c.log" 2>&1 && fail "another --local-sgd-steps was not refused" "$tmp/c.log"
grep -q "saved with --local-sgd-steps 4 --outer-optimizer nesterov; this run has --local-sgd-steps 8" "$tmp/c.log" ||
  fail "the refusal does not name both settings" "$tmp/c.log"
"${run[@]}" --local-sgd-steps 8 --reset-outer-state --save-dir "$tmp/d" --load "$tmp/a/iter_0000006" \
  > "$tmp/d.log" 2>&1 || fail "--reset-outer-state did not resume" "$tmp/d.log"

[ "$failures" -eq 0 ] && echo "local_sgd_cli: all checks passed"
exit "$failures"
