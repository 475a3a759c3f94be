#!/usr/bin/env bash
# tests/faults/preemption.sh BUILD_DIR SOURCE_DIR - a stop signal saves a checkpoint; resuming is exact.
#
# A 4-rank run (tp 2 x dp 2, ZeRO 1) is stopped at a random point of its training by: SIGTERM to one
# random rank only, SIGINT to every rank, and SIGUSR1 to mpirun (which forwards it at once; on its
# own SIGTERM Open MPI's mpirun signals the ranks only 1 s later and kills them 1 s after that).
# Each time every rank must finish the step, save a checkpoint and exit 0 (mpirun's status 0), and
# the run resumed with --load must log the same loss and gradient norm at every iteration (to the
# last bit, as metrics.jsonl prints them) as an uninterrupted run. The SIGUSR1 run also saves every 3
# iterations in the background (--async-save), so the stop can land while a save is in flight.
#
# Independent of the machine's speed by construction: the run to be stopped asks for 10^8
# iterations, so it is still training whenever the signal lands, and its learning-rate schedule is
# fixed by --lr-decay-iters, not by --train-iters. Stopped at iteration S, it resumes for 10 more
# (--train-iters S + 10: the same schedule, so the resume is accepted), and the uninterrupted
# reference runs afterwards, as far as the furthest resumed run went.
set -u
# shellcheck source=tests/faults/common.sh
source "$(dirname "$0")/common.sh"
forever=100000000   # iterations asked of a run that is to be stopped: it cannot end before the signal
more=10             # iterations the resumed run trains after the stop
run=(--config "$tmp/tiny.json" --micro-batch-size 2 --seq-length 16 --lr-warmup-iters 5 --lr-decay-iters 200
     --eval-interval 0 --eval-iters 1 --sample-length 0 --quiet --tensor-model-parallel-size 2 --zero-stage 1
     --comm-timeout 30)
# numbers DIR [N]: iteration, loss and gradient norm of the first N (default all) train lines
numbers() {
  grep '"train"' "$1/metrics.jsonl" | head -n "${2:-1000000000}" | grep -oE '"(iter|loss|grad_norm)":[-0-9.e+]+' |
    paste -sd' '
}

# preempt NAME HOW [FLAGS]: HOW is one-rank-term, all-ranks-int or mpirun-usr1; FLAGS go to both the
# stopped and the resumed run. Leaves the resumed run's directory as NAME and its last iteration in
# $tmp/NAME.end.
preempt() {
  local name=$1 how=$2 dir="$tmp/$1"
  shift 2
  local extra=("$@")
  mpirun "${flags[@]}" -np 4 "$bin" "${run[@]}" "${extra[@]}" --train-iters $forever --save-dir "$dir" > "$dir.log" 2>&1 &
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
  local end=$((stopped + more))
  mpirun "${flags[@]}" -np 4 "$bin" "${run[@]}" "${extra[@]}" --train-iters $end --save-dir "$dir" --load "$dir" \
    > "$dir.resume.log" 2>&1 || { echo "FAIL $name: resume"; tail -5 "$dir.resume.log"; failures=$((failures + 1)); return; }
  echo "$end" > "$dir.end"
  echo "     $name: $what after $n logged iterations: every rank stopped at iteration $stopped, saved, exit 0;" \
       "resumed to $end"
}
preempt term_one_rank one-rank-term
preempt int_all_ranks all-ranks-int
# with background saves every 3 iterations: the stop waits for the save in flight, then saves its own
preempt usr1_mpirun mpirun-usr1 --async-save --save-interval 3 --keep-last 2

# the uninterrupted reference, as far as the furthest resumed run went
furthest=$(cat "$tmp"/*.end 2>/dev/null | sort -n | tail -1)
if [ -n "$furthest" ]; then
  mpirun "${flags[@]}" -np 4 "$bin" "${run[@]}" --train-iters "$furthest" --save-dir "$tmp/full" > "$tmp/full.log" 2>&1 ||
    { echo "FAIL: uninterrupted run"; tail -5 "$tmp/full.log"; exit 1; }
fi
for name in term_one_rank int_all_ranks usr1_mpirun; do
  [ -f "$tmp/$name.end" ] || continue
  end=$(cat "$tmp/$name.end")
  want=$(numbers "$tmp/full" "$end") got=$(numbers "$tmp/$name")
  if [ "$got" != "$want" ] || [ "$(grep -c '"train"' "$tmp/$name/metrics.jsonl")" -ne "$end" ]; then
    echo "FAIL $name: the resumed run's losses differ from the uninterrupted run's"
    diff <(tr ' ' '\n' <<<"$want") <(tr ' ' '\n' <<<"$got") | head -6
    failures=$((failures + 1))
  else
    echo "ok   $name: $end loss lines (stopped, saved, resumed) bit-identical to the uninterrupted run"
  fi
done
# no sanitizer report in any rank's output (the ASan/UBSan build), also where a failure is expected
if grep -lE "runtime error:|ERROR: (Address|Leak)Sanitizer" "$tmp"/*.log 2>/dev/null; then
  echo "FAIL: sanitizer report in the logs above"; failures=$((failures + 1))
fi
echo "preemption: $failures failure(s)"
exit $((failures > 0))
