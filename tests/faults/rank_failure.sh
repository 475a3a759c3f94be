#!/usr/bin/env bash
# tests/faults/rank_failure.sh BUILD_DIR SOURCE_DIR - a dead or stalled rank stops every rank in time.
#
# 4- and 8-rank tiny runs (tp x pp x dp, checkpoints every few steps) get one fault each, on a
# random rank at a random point after training has started. Every other rank must exit, each
# printing a message that names the failed rank, the phase and the collective's sequence number:
#   SIGSTOP (a hung rank; mpirun notices nothing): the survivors' waits time out, probe, and abort;
#     mpirun's status is non-zero.
#   SIGKILL under mpirun's default: mpirun kills the survivors itself (SIGTERM, then SIGKILL 1 s
#     later) and names the dead rank; on the SIGTERM each survivor probes and logs who is gone.
#   SIGKILL under --mca orte_enable_recovery 1: mpirun leaves the survivors alone, their waits time
#     out and they abort as for SIGSTOP (mpirun then exits 0 whatever the ranks did: Open MPI's
#     recovery mode, measured; the ranks' abort is checked instead).
# Prints the measured times of every case. What Trident's timers decide is bounded tightly: the
# first report of the failed rank (a survivor's, or mpirun's for a death it saw) within
# --comm-timeout + 3 s of the fault (the timeout, the 1 s probe, 1 s of scheduling on a loaded
# machine). How long the ranks then take to die is the MPI library's teardown, which scales with the
# machine's speed (8 sanitizer-built ranks on 2 cores take seconds): it is only required to end,
# within 30 s of the report (no rank hangs), so the test does not depend on the machine's speed.
set -u
T=3                 # --comm-timeout (s)
bound=$((T + 3))    # fault -> first report
teardown=30         # first report -> every rank gone
fault_mpirun_flags=(--tag-output)
# shellcheck source=tests/faults/common.sh
source "$(dirname "$0")/common.sh"


# fault NAME NP SIGNAL MODE LAYOUT...: MODE is recovery (survivors must report) or default (mpirun kills)
fault() {
  local name=$1 np=$2 sig=$3 mode=$4
  shift 4
  local dir="$tmp/$name" extra=()
  [ "$mode" = recovery ] && extra=(--mca orte_enable_recovery 1)
  mkdir -p "$dir"
  mpirun "${flags[@]}" "${extra[@]}" -np "$np" "$bin" --config "$tmp/tiny.json" --micro-batch-size 1 \
    --seq-length 16 --train-iters 1000000 --eval-interval 0 --eval-iters 1 --sample-length 0 --quiet \
    --comm-timeout $T --save-interval 7 --keep-last 1 --save-dir "$dir/run" "$@" > "$dir/log" 2>&1 &
  local mp=$! waited=0
  while ! grep -q '"train"' "$dir/run/metrics.jsonl" 2>/dev/null; do
    sleep 0.1; waited=$((waited + 1))
    if [ $waited -gt 900 ] || ! kill -0 $mp 2>/dev/null; then
      echo "FAIL $name: training did not start"; tail -5 "$dir/log"; kill $mp 2>/dev/null; wait $mp
      failures=$((failures + 1)); return
    fi
  done
  sleep "$((RANDOM % 15 / 10)).$((RANDOM % 10))"     # a random point: 0-1.9 s into training
  local rank=$((RANDOM % np)) pid
  pid=$(pid_of_rank $mp $rank)
  [ -n "$pid" ] || { echo "FAIL $name: no pid for rank $rank"; kill $mp; wait $mp; failures=$((failures + 1)); return; }
  local t0 t1 tr="" rc dt dr
  local reported="did not answer a liveness probe|mpirun noticed that process rank"
  t0=$(date +%s.%N)
  kill -s "$sig" "$pid"
  while kill -0 $mp 2>/dev/null; do  # the moment the first report appears in the log
    [ -z "$tr" ] && grep -qE "$reported" "$dir/log" && tr=$(date +%s.%N)
    sleep 0.05
  done
  wait $mp
  rc=$?
  t1=$(date +%s.%N)
  [ -z "$tr" ] && grep -qE "$reported" "$dir/log" && tr=$t1
  kill -9 "$pid" 2>/dev/null # a stopped rank that survived the abort (it should not)
  dt=$(echo "$t1 - $t0" | bc)
  dr=$(echo "${tr:-$t1} - $t0" | bc)
  local iters msg ok=1 why=""
  iters=$(grep -c '"train"' "$dir/run/metrics.jsonl")
  if [ "$mode" = recovery ]; then
    # mpirun's status means nothing here (see above); each survivor's "engine_train: error:" line
    # (checked below) is printed right before it aborts with status 1
    :
  else
    [ $rc -ne 0 ] || { ok=0; why+=" exit status 0;"; }
  fi
  [ -n "$tr" ] || { ok=0; why+=" no report of the failed rank;"; }
  [ "$(echo "$dr <= $bound" | bc)" = 1 ] || { ok=0; why+=" first report after ${dr} s > ${bound} s;"; }
  [ "$(echo "$dt - $dr <= $teardown" | bc)" = 1 ] || { ok=0; why+=" the ranks took $(echo "$dt - $dr" | bc) s > ${teardown} s to end after the report;"; }
  # every surviving rank prints the failed rank, the phase and the collective's number
  local pattern="rank $rank did not answer a liveness probe .* collective #[0-9]+ .* in phase (init|step|checkpoint|eval)"
  local reporters
  reporters=$(grep -E "$pattern" "$dir/log" | grep -oE '^\[[0-9]+,[0-9]+\]' | sort -u | wc -l)
  msg=$(grep -m1 -oE "(engine_train: error|engine: stop signal).*" "$dir/log")
  if [ "$mode" = default ] && [ "$sig" = KILL ]; then
    # mpirun kills the survivors itself and names the dead rank; their own report (a probe on
    # mpirun's SIGTERM, in the 1 s before its SIGKILL) is best effort on a loaded machine
    grep -q "mpirun noticed that process rank $rank " "$dir/log" || { ok=0; why+=" mpirun did not name rank $rank;"; }
    msg="mpirun: $(grep -m1 -oE "process rank $rank .*" "$dir/log"); $reporters of $((np - 1)) survivors logged it: ${msg:-}"
  else
    [ "$reporters" -eq $((np - 1)) ] || { ok=0; why+=" $reporters of $((np - 1)) surviving ranks named rank $rank, phase and collective;"; }
  fi
  if [ $ok = 1 ]; then
    echo "ok   $name: $sig to rank $rank of $np after $iters iterations; reported after ${dr} s (bound ${bound} s), all ranks exited (status $rc) after ${dt} s"
    echo "       $msg"
  else
    echo "FAIL $name: $sig to rank $rank of $np after $iters iterations:$why"
    grep -E "error|noticed|ABORT" "$dir/log" | head -12
    failures=$((failures + 1))
  fi
}

fault kill4_recovery 4 KILL recovery --tensor-model-parallel-size 2 --pipeline-model-parallel-size 2 --global-batch-size 2
fault stop4 4 STOP default --pipeline-model-parallel-size 2 --zero-stage 1 --global-batch-size 4
fault stop8 8 STOP default --tensor-model-parallel-size 2 --pipeline-model-parallel-size 2 --zero-stage 1 --global-batch-size 4
fault kill8_default 8 KILL default --tensor-model-parallel-size 2 --pipeline-model-parallel-size 2 --global-batch-size 4
# no sanitizer report in any rank's output (the ASan/UBSan build), also where a failure is expected
if grep -lE "runtime error:|ERROR: (Address|Leak)Sanitizer" "$tmp"/*/log 2>/dev/null; then
  echo "FAIL: sanitizer report in the logs above"; failures=$((failures + 1))
fi
echo "rank_failure: $failures failure(s)"
exit $((failures > 0))
