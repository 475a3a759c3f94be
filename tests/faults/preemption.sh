#!/usr/bin/env bash
# tests/faults/preemption.sh BUILD_DIR SOURCE_DIR - a stop signal saves a checkpoint; resuming is exact.
#
# A 4-rank run (tp 2 x dp 2, ZeRO 1) is stopped at a random point of its training by: SIGTERM to one
# random rank only, SIGINT to every rank, and SIGUSR1 to mpirun (which forwards it at once; on its
# own SIGTERM Open MPI's mpirun signals the ranks only 1 s later and kills them 1 s after that).
# Each time every rank must finish the step, save a checkpoint and exit 0 (mpirun's status 0), and
# the run resumed with --load must log the same loss and gradient norm at every iteration (to the
# last bit, as metrics.jsonl prints them) as an uninterrupted run.
set -u
# shellcheck source=tests/faults/common.sh
source "$(dirname "$0")/common.sh"
iters=100
run=(--config "$tmp/tiny.json" --micro-batch-size 2 --seq-length 16 --train-iters $iters --eval-interval 0
     --eval-iters 1 --sample-length 0 --quiet --tensor-model-parallel-size 2 --zero-stage 1 --comm-timeout 30)
numbers() { grep '"train"' "$1/metrics.jsonl" | grep -oE '"(iter|loss|grad_norm)":[-0-9.e+]+' | paste -sd' '; }

mpirun "${flags[@]}" -np 4 "$bin" "${run[@]}" --save-dir "$tmp/full" > "$tmp/full.log" 2>&1 ||
  { echo "FAIL: uninterrupted run"; tail -5 "$tmp/full.log"; exit 1; }
want=$(numbers "$tmp/full")

# preempt NAME HOW: HOW is one-rank-term, all-ranks-int or mpirun-usr1
preempt() {
  local name=$1 how=$2 dir="$tmp/$1"
  mpirun "${flags[@]}" -np 4 "$bin" "${run[@]}" --save-dir "$dir" > "$dir.log" 2>&1 &
  local mp=$! at=$((5 + RANDOM % 45)) n=0 k=0
  while [ "$n" -lt $at ] && kill -0 $mp 2>/dev/null && [ $k -lt 1200 ]; do
    n=$(cat "$dir/metrics.jsonl" 2>/dev/null | grep -c '"train"'); sleep 0.05; k=$((k + 1))
  done
  local what
  case $how in
    one-rank-term) local r=$((RANDOM % 4)); what="SIGTERM to rank $r"; kill -TERM "$(pid_of_rank $mp $r)" ;;
    all-ranks-int) what="SIGINT to every rank"; for p in $(pgrep -P $mp); do kill -INT "$p"; done ;;
    mpirun-usr1) what="SIGUSR1 to mpirun"; kill -USR1 $mp ;;
  esac
  wait $mp
  local rc=$? stopped
  stopped=$(grep -oE 'stopped at iteration [0-9]+' "$dir.log" | grep -oE '[0-9]+$')
  if [ $rc -ne 0 ] || [ -z "$stopped" ] || [ ! -d "$dir/iter_$(printf %07d "${stopped:-0}")" ]; then
    echo "FAIL $name: $what after $n iterations: status $rc, stopped at '${stopped}'"; tail -5 "$dir.log"
    failures=$((failures + 1)); return
  fi
  mpirun "${flags[@]}" -np 4 "$bin" "${run[@]}" --save-dir "$dir" --load "$dir" > "$dir.resume.log" 2>&1 ||
    { echo "FAIL $name: resume"; tail -5 "$dir.resume.log"; failures=$((failures + 1)); return; }
  local got
  got=$(numbers "$dir")
  if [ "$got" != "$want" ]; then
    echo "FAIL $name: stopped at $stopped; the resumed run's losses differ from the uninterrupted run's"
    diff <(tr ' ' '\n' <<<"$want") <(tr ' ' '\n' <<<"$got") | head -6
    failures=$((failures + 1))
  else
    echo "ok   $name: $what after $n logged iterations: every rank stopped at iteration $stopped, saved, exit 0;" \
         "resumed to $iters: $(grep -c '"train"' "$dir/metrics.jsonl") loss lines bit-identical to the uninterrupted run"
  fi
}
preempt term_one_rank one-rank-term
preempt int_all_ranks all-ranks-int
preempt usr1_mpirun mpirun-usr1
# no sanitizer report in any rank's output (the ASan/UBSan build), also where a failure is expected
if grep -lE "runtime error:|ERROR: (Address|Leak)Sanitizer" "$tmp"/*.log 2>/dev/null; then
  echo "FAIL: sanitizer report in the logs above"; failures=$((failures + 1))
fi
echo "preemption: $failures failure(s)"
exit $((failures > 0))
