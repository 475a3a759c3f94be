#!/usr/bin/env bash
# tests/one_bit_adam_cli.sh BUILD_DIR SOURCE_DIR - engine_train's flags for 1-bit Adam's two stages
# (Tang et al. 2021 §3): --adam-freeze-step and --grad-compression-start-iter.
#
# The freeze step is recorded in the checkpoint (manifest optimizer.freeze_step): a run with
# --adam-freeze-step 2 stopped at iteration 3 (v already frozen) and resumed logs the uninterrupted
# run's numbers; resumed with --adam-freeze-step 4 it is refused naming both values and
# --no-load-optim, which then starts the optimizer state fresh. The flags' bad values (negative,
# --adam-freeze-step with --optimizer sgd or lamb, disagreeing PowerSGD starts) are rows of
# tests/bad_inputs.tsv. --onebit-adam (1-bit Adam's stage 2) on 2 MPI ranks resumes past the freeze
# bit for bit and a resume without it is refused.
set -u
build=$1
src=$2
bin="$build/bin/engine_train"
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
failures=0
cd "$src" || exit 1
[ -f data/fortunes_byte_train.bin ] || { echo "FAIL: data/fortunes_byte_*.bin missing (tools/prepare_fortunes.sh)"; exit 1; }
printf '{"n_layer": 2, "n_head": 2, "n_embd": 32, "vocab_size": 257, "n_positions": 32}' > "$tmp/tiny.json"
base=(--config "$tmp/tiny.json" --micro-batch-size 2 --seq-length 16 --eval-iters 1 --sample-length 0
      --threads 1 --lr-warmup-iters 2 --quiet)
fail() { echo "FAIL $1"; [ -n "${2:-}" ] && tail -5 "$2"; failures=$((failures + 1)); }
numbers() { grep '"train"' "$1/metrics.jsonl" | grep -oE '"(iter|loss|lr|grad_norm)":[-0-9.e+]+' | paste -sd' '; }
# refused LOG PATTERN... : the command failed and its log holds every pattern
refused() {
  local what=$1 log=$2
  shift 2
  for p in "$@"; do
    grep -q -- "$p" "$log" || { fail "$what: no '$p' in the error" "$log"; return; }
  done
  echo "ok   $what: $(grep -o 'error: .*' "$log" | head -1 | cut -c1-160)"
}

# ---- the freeze step in the checkpoint ----
"$bin" "${base[@]}" --train-iters 6 --adam-freeze-step 2 --save-dir "$tmp/all" > "$tmp/all.log" 2>&1 || fail "frozen run" "$tmp/all.log"
"$bin" "${base[@]}" --train-iters 6 --adam-freeze-step 2 --save-interval 3 --exit-interval 3 --save-dir "$tmp/fz" \
  > "$tmp/fz.log" 2>&1 || fail "frozen run to 3" "$tmp/fz.log"
grep -rqE '"freeze_step":[[:space:]]*2' "$tmp/fz" || fail "no freeze_step 2 in the checkpoint's manifest"
cp -r "$tmp/fz" "$tmp/fz_other"
"$bin" "${base[@]}" --train-iters 6 --adam-freeze-step 2 --load "$tmp/fz" --save-dir "$tmp/fz" > "$tmp/fz2.log" 2>&1 ||
  fail "frozen resume" "$tmp/fz2.log"
if [ "$(numbers "$tmp/fz")" = "$(numbers "$tmp/all")" ] && [ -n "$(numbers "$tmp/fz")" ]; then
  echo "ok   --adam-freeze-step 2: stopped at 3 and resumed, the uninterrupted run's numbers"
else
  fail "--adam-freeze-step 2: the resumed run's numbers differ from the uninterrupted run's"
fi
"$bin" "${base[@]}" --train-iters 6 --adam-freeze-step 4 --load "$tmp/fz_other" --save-dir "$tmp/fz_other" \
  > "$tmp/other.log" 2>&1 && fail "a checkpoint frozen at 2 resumed with --adam-freeze-step 4" "$tmp/other.log"
refused "resume with another --adam-freeze-step" "$tmp/other.log" "saved with --adam-freeze-step 2" \
  "this run has --adam-freeze-step 4" "--no-load-optim"
"$bin" "${base[@]}" --train-iters 6 --adam-freeze-step 4 --load "$tmp/fz_other" --save-dir "$tmp/fz_other" --no-load-optim \
  > "$tmp/fresh.log" 2>&1 && echo "ok   --no-load-optim: another --adam-freeze-step resumes with fresh optimizer state" ||
  fail "--no-load-optim with another --adam-freeze-step" "$tmp/fresh.log"

# ---- --onebit-adam (stage 2: the momentum compressed) on 2 MPI ranks: resumed past the freeze bit for
# bit (the residuals of the momentum in each dp rank's replica file), the flag in the manifest, and a
# resume without it refused ----
source "$src/tests/lib/mpirun_flags.sh"
ob=(--train-iters 8 --grad-compression 1bit --adam-freeze-step 2 --onebit-adam)
mpirun "${mpirun_flags[@]}" -np 2 "$bin" "${base[@]}" "${ob[@]}" --save-dir "$tmp/ob_all" > "$tmp/ob_all.log" 2>&1 ||
  fail "--onebit-adam run" "$tmp/ob_all.log"
mpirun "${mpirun_flags[@]}" -np 2 "$bin" "${base[@]}" "${ob[@]}" --save-dir "$tmp/ob" --save-interval 4 --exit-interval 4 \
  > "$tmp/ob1.log" 2>&1 || fail "--onebit-adam run to 4" "$tmp/ob1.log"
grep -rqE '"onebit_adam":[[:space:]]*true' "$tmp/ob" || fail "no onebit_adam in the checkpoint's manifest"
cp -r "$tmp/ob" "$tmp/ob_other"
mpirun "${mpirun_flags[@]}" -np 2 "$bin" "${base[@]}" "${ob[@]}" --load "$tmp/ob" --save-dir "$tmp/ob" > "$tmp/ob2.log" 2>&1 ||
  fail "--onebit-adam resume" "$tmp/ob2.log"
if [ "$(numbers "$tmp/ob")" = "$(numbers "$tmp/ob_all")" ] && [ -n "$(numbers "$tmp/ob")" ]; then
  echo "ok   --onebit-adam on 2 ranks: stopped at 4 (stage 2 from 3) and resumed, the uninterrupted run's numbers"
else
  fail "--onebit-adam: the resumed run's numbers differ from the uninterrupted run's"
fi
mpirun "${mpirun_flags[@]}" -np 2 "$bin" "${base[@]}" --train-iters 8 --grad-compression 1bit --adam-freeze-step 2 \
  --load "$tmp/ob_other" --save-dir "$tmp/ob_other" > "$tmp/ob3.log" 2>&1 &&
  fail "a --onebit-adam checkpoint resumed without it" "$tmp/ob3.log"
refused "resume without --onebit-adam" "$tmp/ob3.log" "saved with --onebit-adam" "--no-load-optim"
echo "one_bit_adam_cli: $failures failure(s)"
exit $((failures > 0))
