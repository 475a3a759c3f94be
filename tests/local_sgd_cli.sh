#!/usr/bin/env bash
# tests/local_sgd_cli.sh BUILD_DIR SOURCE_DIR - local SGD / DiLoCo through engine_train under real
# MPI (engine/train/local_sgd.h, docs/local-sgd.md).
#
#  1. DiLoCo (--local-sgd-steps 4 --outer-optimizer nesterov) on 4 ranks, tp 2 x dp 2, deterministic,
#     12 iterations, saving at 6 (inside a window: the replicas differ); resuming from iteration 6
#     gives the same losses and validation loss as the uninterrupted run, and the final model,
#     outer-state and replica files are the same bits (h5diff). The first run names its own save
#     directory as --load (empty: a warning, a start from scratch); the resumed one takes the
#     learning-rate schedule from the checkpoint (--use-checkpoint-opt_param-scheduler).
#  2. The iteration line counts the synchronisations and metrics.jsonl has an "outer_sync" line at
#     iterations 4, 8 and 12.
#  3. Resuming that checkpoint with another --local-sgd-steps is refused naming both; with
#     --reset-outer-state it runs.
#  4. The same DiLoCo with --grad-compression 1bit (the outer reduction compressed, with its own
#     error feedback): accepted (it was refused before the outer reduction could be compressed), its
#     synchronisations send fewer dp bytes than the uncompressed run's and the iteration line shows
#     the ratio; resumed from the save inside a window it gives the same losses and the same final
#     replica files (they hold the outer residual).
set -u
build=$1
src=$2
bin="$build/bin/engine_train"
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
failures=0
cd "$src" || exit 1
source "$src/tests/lib/sections.sh"
[ -f data/fortunes_byte_train.bin ] || { echo "FAIL: data/fortunes_byte_*.bin missing (tools/prepare_fortunes.sh)"; exit 1; }
printf '{"n_layer": 2, "n_head": 2, "n_embd": 32, "vocab_size": 257, "n_positions": 64}' > "$tmp/tiny.json"
run=(mpirun --oversubscribe --bind-to none -np 4 -x OMP_NUM_THREADS=1 "$bin" --config "$tmp/tiny.json"
     --micro-batch-size 2 --global-batch-size 4 --seq-length 64 --sample-length 0 --eval-interval 0
     --eval-iters 2 --log-interval 1 --threads 1 --tensor-model-parallel-size 2 --deterministic-mode
     --local-sgd-steps 4 --outer-optimizer nesterov --train-iters 12 --save-interval 6)
fail() { echo "FAIL $1"; [ -n "${2:-}" ] && tail -5 "$2"; failures=$((failures + 1)); }
numbers() { grep '"train"' "$1/metrics.jsonl" | grep -oE '"(iter|loss)":[-0-9.e+]+' | paste -sd' '; }

# ---- 1. a save inside a window resumes bit for bit ----
# (the first run loads and saves one directory, as a job that restarts itself does: it starts from
# scratch with a warning; the resumed run takes the schedule from the checkpoint, the same one)
"${run[@]}" --save-dir "$tmp/a" --load "$tmp/a" > "$tmp/a.log" 2>&1 || fail "uninterrupted run" "$tmp/a.log"
grep -q "warning: --load $tmp/a holds no checkpoint yet" "$tmp/a.log" || fail "no warning for an empty --load" "$tmp/a.log"
if section resume_in_window; then
  "${run[@]}" --save-dir "$tmp/b" --load "$tmp/a/iter_0000006" --use-checkpoint-opt_param-scheduler \
    > "$tmp/b.log" 2>&1 || fail "resumed run" "$tmp/b.log"
  grep -q "learning-rate schedule from the checkpoint" "$tmp/b.log" || fail "the schedule was not the checkpoint's" "$tmp/b.log"
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
fi

# ---- 2. synchronisations marked ----
syncs=$(grep '"kind":"outer_sync"' "$tmp/a/metrics.jsonl" | grep -oE '"iter":[0-9]+' | paste -sd' ')
[ "$syncs" = '"iter":4 "iter":8 "iter":12' ] || fail "outer_sync lines at '$syncs', expected iterations 4, 8, 12"
grep -q "synced, outer syncs 3" "$tmp/a.log" || fail "the iteration line does not count the synchronisations" "$tmp/a.log"

# ---- 3. another H refused naming both, unless --reset-outer-state ----
if section another_h; then
  "${run[@]}" --local-sgd-steps 8 --save-dir "$tmp/c" --load "$tmp/a/iter_0000006" \
    > "$tmp/c.log" 2>&1 && fail "another --local-sgd-steps was not refused" "$tmp/c.log"
  grep -q "saved with --local-sgd-steps 4 --outer-optimizer nesterov; this run has --local-sgd-steps 8" "$tmp/c.log" ||
    fail "the refusal does not name both settings" "$tmp/c.log"
  "${run[@]}" --local-sgd-steps 8 --reset-outer-state --save-dir "$tmp/d" --load "$tmp/a/iter_0000006" \
    > "$tmp/d.log" 2>&1 || fail "--reset-outer-state did not resume" "$tmp/d.log"
fi

# ---- 4. a compressed outer reduction ----
if section compressed_outer; then
  "${run[@]}" --grad-compression 1bit --save-dir "$tmp/e" > "$tmp/e.log" 2>&1 || fail "1bit DiLoCo run" "$tmp/e.log"
  "${run[@]}" --grad-compression 1bit --save-dir "$tmp/f" --load "$tmp/e/iter_0000006" > "$tmp/f.log" 2>&1 ||
    fail "1bit DiLoCo resumed run" "$tmp/f.log"
  dp_at() { grep '"train"' "$1/metrics.jsonl" | grep "\"iter\":$2," | grep -oE '"dp_bytes":[0-9]+' | cut -d: -f2; }
  plain=$(dp_at "$tmp/a" 4)
  packed=$(dp_at "$tmp/e" 4)
  [ -n "$plain" ] && [ -n "$packed" ] && [ "$packed" -lt "$plain" ] ||
    fail "a 1bit synchronisation sent '$packed' dp bytes, the uncompressed one '$plain'"
  inner=$(dp_at "$tmp/e" 3)
  [ "$inner" = 0 ] || fail "an inner step of the 1bit run sent '$inner' dp bytes"
  grep -q "dp 1bit [0-9.]*x.*synced" "$tmp/e.log" || fail "the iteration line shows no dp compression ratio" "$tmp/e.log"
  want=$(numbers "$tmp/e" | grep -oE '"iter":([7-9]|1[0-2]) "loss":[-0-9.e+]+' | paste -sd' ')
  got=$(numbers "$tmp/f" | grep -oE '"iter":([7-9]|1[0-2]) "loss":[-0-9.e+]+' | paste -sd' ')
  [ -n "$want" ] && [ "$want" = "$got" ] || fail "1bit: resumed losses differ: '$got' vs '$want'"
  for f in replica_tp00_pp00_dp000.h5 replica_tp01_pp00_dp001.h5; do
    if command -v h5diff > /dev/null; then
      h5diff -q "$tmp/e/iter_0000012/$f" "$tmp/f/iter_0000012/$f" > /dev/null || fail "1bit: final $f differs"
    fi
  done
fi

[ "$failures" -eq 0 ] && echo "local_sgd_cli: all checks passed"
exit "$failures"
