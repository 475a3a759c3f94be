#!/usr/bin/env bash
# tests/resume_cli.sh BUILD_DIR SOURCE_DIR - one command for the first start and every restart;
# learning-rate schedule choices on resume; asynchronous saves; only the files a run uses.
#
#  1. The same command, `--load DIR --save-dir DIR --exit-interval 4`, run again and again (a requeued
#     job): the first run finds no checkpoint, warns once naming DIR and starts from scratch; each
#     later one resumes where the last stopped; the losses of the whole chain equal one uninterrupted
#     run's to the last printed digit, and a run after the end trains nothing and exits 0.
#  2. Resuming with a larger --train-iters changes the default decay length: refused, naming both
#     of Megatron-LM's flags; --use-checkpoint-opt_param-scheduler keeps the checkpoint's schedule
#     (past its decay: --min-lr), --override-opt_param-scheduler takes the new one (the lr logged
#     is the cosine of the new length).
#  3. --async-save: the same losses as synchronous saves, a metrics line per save with the time the
#     loop was blocked, and resuming from an asynchronous checkpoint logs the same numbers as
#     resuming from a synchronous one.
#  4. --tokenizer-type GPT2BPETokenizer with --sample-length 0 needs no vocabulary files.
#  5. --optimizer: a LAMB checkpoint resumed as LAMB logs the uninterrupted run's numbers; resumed
#     with --optimizer sgd it is refused naming both optimizers and --no-load-optim; with
#     --no-load-optim SGD starts fresh from its weights (issue 32).
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
# numbers DIR: iteration, loss, lr and gradient norm of every train line of DIR's metrics.jsonl
numbers() { grep '"train"' "$1/metrics.jsonl" | grep -oE '"(iter|loss|lr|grad_norm)":[-0-9.e+]+' | paste -sd' '; }

# ---- 1. one job script, resubmitted ----
"$bin" "${base[@]}" --train-iters 10 --save-interval 100 --save-dir "$tmp/whole" > "$tmp/whole.log" 2>&1 ||
  fail "uninterrupted run" "$tmp/whole.log"
job=("$bin" "${base[@]}" --train-iters 10 --save-interval 100 --exit-interval 4 --load "$tmp/job" --save-dir "$tmp/job")
for k in 1 2 3 4; do
  "${job[@]}" > "$tmp/job$k.log" 2>&1 || fail "job run $k: exit status $?" "$tmp/job$k.log"
done
grep -q "warning: --load $tmp/job holds no checkpoint yet" "$tmp/job1.log" || fail "first run: no warning naming the directory" "$tmp/job1.log"
[ "$(grep -c warning "$tmp/job2.log")" = 0 ] || fail "second run warned" "$tmp/job2.log"
grep -q "stopped at iteration 4 on a stop request (--exit-interval)" "$tmp/job1.log" || fail "first run did not stop at 4" "$tmp/job1.log"
grep -q "resumed from $tmp/job at iteration 4" "$tmp/job2.log" || fail "second run did not resume at 4" "$tmp/job2.log"
grep -q "resumed from $tmp/job at iteration 8" "$tmp/job3.log" || fail "third run did not resume at 8" "$tmp/job3.log"
grep -q "trained 2 iterations" "$tmp/job3.log" || fail "third run did not finish" "$tmp/job3.log"
grep -q "resumed from $tmp/job at iteration 10" "$tmp/job4.log" && ! grep -q "trained" "$tmp/job4.log" ||
  fail "a run after the end trained again" "$tmp/job4.log"
if [ "$(numbers "$tmp/job")" = "$(numbers "$tmp/whole")" ]; then
  echo "ok   one command run 4 times: scratch start with a warning, stops at 4 and 8, finishes at 10, then nothing; 10 loss lines identical to one run"
else
  fail "the resubmitted job's losses differ from one uninterrupted run's"
  diff <(numbers "$tmp/job" | tr ' ' '\n') <(numbers "$tmp/whole" | tr ' ' '\n') | head -5
fi
"$bin" "${base[@]}" --train-iters 4 --load "$tmp/nothing" --exit-on-missing-checkpoint --save-dir "$tmp/x" > "$tmp/x.log" 2>&1 &&
  fail "--exit-on-missing-checkpoint started" "$tmp/x.log"
grep -q "error: --load $tmp/nothing: no checkpoint there" "$tmp/x.log" && echo "ok   --exit-on-missing-checkpoint refuses: $(grep -o 'error: .*' "$tmp/x.log" | head -1)" ||
  fail "--exit-on-missing-checkpoint: no error naming the directory" "$tmp/x.log"

# ---- 2. the learning-rate schedule on resume ----
"$bin" "${base[@]}" --train-iters 6 --save-interval 6 --min-lr 6e-5 --save-dir "$tmp/s" > "$tmp/s.log" 2>&1 || fail "6-iteration run" "$tmp/s.log"
cp -r "$tmp/s" "$tmp/s_use"
cp -r "$tmp/s" "$tmp/s_over"
"$bin" "${base[@]}" --train-iters 9 --min-lr 6e-5 --load "$tmp/s" --save-dir "$tmp/s" > "$tmp/refused.log" 2>&1 && fail "a changed schedule was taken silently" "$tmp/refused.log"
if grep -q -- "--lr-decay-iters (default: --train-iters) 6; this run has 9: the learning-rate schedule changed" "$tmp/refused.log" &&
   grep -q -- "--use-checkpoint-opt_param-scheduler keeps the checkpoint's schedule, --override-opt_param-scheduler takes this run's flags" "$tmp/refused.log"; then
  echo "ok   a larger --train-iters on resume is refused, naming both choices"
else
  fail "the refusal does not name the decay length and both flags" "$tmp/refused.log"
fi
"$bin" "${base[@]}" --train-iters 9 --min-lr 6e-5 --load "$tmp/s_use" --save-dir "$tmp/s_use" --use-checkpoint-opt_param-scheduler > "$tmp/use.log" 2>&1 || fail "--use-checkpoint-opt_param-scheduler" "$tmp/use.log"
"$bin" "${base[@]}" --train-iters 9 --min-lr 6e-5 --load "$tmp/s_over" --save-dir "$tmp/s_over" --override-opt_param-scheduler > "$tmp/over.log" 2>&1 || fail "--override-opt_param-scheduler" "$tmp/over.log"
lr_at() { grep '"train"' "$1/metrics.jsonl" | grep "\"iter\":$2," | grep -oE '"lr":[-0-9.e+]+' | cut -d: -f2; }
use7=$(lr_at "$tmp/s_use" 7) over7=$(lr_at "$tmp/s_over" 7)
# cosine from 6e-4 to 6e-5 over iterations 2..9, at 7: 6e-5 + 0.5 (1 + cos(pi 5/7)) 5.4e-4
want=$(awk 'BEGIN { printf "%.4e", 6e-5 + 0.5 * (1 + cos(3.14159265358979 * 5 / 7)) * 5.4e-4 }')
# (relative 1e-6: the logged lr is a float32)
if awk -v u="$use7" -v o="$over7" -v w="$want" 'BEGIN { d = (u - 6e-5) / 6e-5; exit !(d * d < 1e-12 && (o - w) * (o - w) < (1e-3 * w) ^ 2) }'; then
  echo "ok   iteration 7's lr: $use7 with the checkpoint's schedule (past its decay: --min-lr), $over7 with this run's (cosine to 9: $want)"
else
  fail "iteration 7's lr: $use7 (--use-checkpoint-opt_param-scheduler, want 6e-05), $over7 (--override-opt_param-scheduler, want $want)"
fi

# ---- 3. asynchronous saves ----
"$bin" "${base[@]}" --train-iters 8 --save-interval 2 --save-dir "$tmp/sync" > "$tmp/sync.log" 2>&1 || fail "synchronous saves" "$tmp/sync.log"
"$bin" "${base[@]}" --train-iters 8 --save-interval 2 --save-dir "$tmp/async" --async-save > "$tmp/async.log" 2>&1 || fail "--async-save" "$tmp/async.log"
saves=$(grep -c '"kind":"save".*"blocked_s":[0-9.e-]*,"total_s":[0-9.e-]*,"async":1' "$tmp/async/metrics.jsonl")
[ "$(numbers "$tmp/async")" = "$(numbers "$tmp/sync")" ] || fail "--async-save changed the losses"
[ "$saves" = 4 ] || fail "--async-save: $saves metrics lines of kind save with the blocked time, expected 4" "$tmp/async/metrics.jsonl"
[ "$(cat "$tmp/async/latest")" = iter_0000008 ] || fail "--async-save: latest is $(cat "$tmp/async/latest"), expected iter_0000008"
for kind in sync async; do
  "$bin" "${base[@]}" --train-iters 8 --load "$tmp/$kind/iter_0000004" --save-dir "$tmp/from_$kind" > "$tmp/from_$kind.log" 2>&1 ||
    fail "resume from the $kind checkpoint" "$tmp/from_$kind.log"
done
if [ "$(numbers "$tmp/from_async")" = "$(numbers "$tmp/from_sync")" ] && [ -n "$(numbers "$tmp/from_sync")" ]; then
  echo "ok   --async-save: losses as with synchronous saves, $saves save lines with the blocked time; resumed from its iteration 4: the same numbers as from the synchronous one"
else
  fail "resuming from the asynchronous checkpoint differs from resuming from the synchronous one"
fi

# ---- 4. only what is used is required ----
if "$bin" "${base[@]}" --train-iters 3 --tokenizer-type GPT2BPETokenizer --vocab-file "$tmp/no/encoder.json" \
     --merge-file "$tmp/no/vocab.bpe" --save-dir "$tmp/tok" > "$tmp/tok.log" 2>&1; then
  echo "ok   --tokenizer-type GPT2BPETokenizer --sample-length 0 runs without the vocabulary files"
else
  fail "--sample-length 0 still needs the tokenizer's files" "$tmp/tok.log"
fi
# ---- 5. the optimizer recorded in the checkpoint ----
"$bin" "${base[@]}" --optimizer lamb --lr 1e-2 --train-iters 6 --save-dir "$tmp/lamb_all" > "$tmp/lamb_all.log" 2>&1 || fail "lamb run" "$tmp/lamb_all.log"
"$bin" "${base[@]}" --optimizer lamb --lr 1e-2 --train-iters 6 --save-interval 3 --exit-interval 3 --save-dir "$tmp/lamb" > "$tmp/lamb.log" 2>&1 || fail "lamb run to 3" "$tmp/lamb.log"
cp -r "$tmp/lamb" "$tmp/lamb_sgd"
"$bin" "${base[@]}" --optimizer lamb --lr 1e-2 --train-iters 6 --load "$tmp/lamb" --save-dir "$tmp/lamb" > "$tmp/lamb2.log" 2>&1 || fail "lamb resume" "$tmp/lamb2.log"
if [ "$(numbers "$tmp/lamb")" = "$(numbers "$tmp/lamb_all")" ] && [ -n "$(numbers "$tmp/lamb")" ]; then
  echo "ok   --optimizer lamb: stopped at 3 and resumed, the uninterrupted run's numbers"
else
  fail "--optimizer lamb: the resumed run's numbers differ from the uninterrupted run's"
fi
"$bin" "${base[@]}" --optimizer sgd --lr 1e-2 --train-iters 6 --load "$tmp/lamb_sgd" --save-dir "$tmp/lamb_sgd" > "$tmp/sgd_refused.log" 2>&1 && fail "a LAMB checkpoint resumed as SGD silently" "$tmp/sgd_refused.log"
if grep -q -- "was saved with --optimizer lamb; this run has --optimizer sgd" "$tmp/sgd_refused.log" &&
   grep -q -- "--no-load-optim" "$tmp/sgd_refused.log"; then
  echo "ok   a LAMB checkpoint resumed with --optimizer sgd is refused, naming both and --no-load-optim"
else
  fail "the refusal does not name both optimizers and --no-load-optim" "$tmp/sgd_refused.log"
fi
"$bin" "${base[@]}" --optimizer sgd --lr 1e-2 --train-iters 6 --load "$tmp/lamb_sgd" --save-dir "$tmp/lamb_sgd" --no-load-optim > "$tmp/sgd_fresh.log" 2>&1 \
  && echo "ok   --no-load-optim: SGD resumes the LAMB checkpoint's weights with fresh state" || fail "--no-load-optim" "$tmp/sgd_fresh.log"
echo "resume_cli: $failures failure(s)"
exit $((failures > 0))
