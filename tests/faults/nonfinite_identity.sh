#!/usr/bin/env bash
# tests/faults/nonfinite_identity.sh BUILD_DIR SOURCE_DIR - agreed stops: NaN gradients, run identity.
#
# Non-finite values: a NaN injected into one rank's gradients (hidden test hook
# TRIDENT_INJECT_NAN="RANK:ITER[:COUNT]") stops every rank before the update of that iteration, each
# naming the iteration and the rank; with --skip-nonfinite K the step is skipped on every rank (a
# "skip" line in metrics.jsonl, no "train" line) and training goes on, until more than K in a row.
# Identity: ranks launched with different flags (MPMD: `mpirun -np 2 prog : -np 2 prog --lr ...`) or
# a rank whose identity text is perturbed (TRIDENT_INJECT_IDENTITY=RANK[:2 on resume]) are refused by
# every rank before training, naming the differing ranks (and, on those ranks, the differing line);
# on resume the ranks compare the iteration and manifest SHA-256 of the checkpoint they loaded.
set -u
# shellcheck source=tests/faults/common.sh
source "$(dirname "$0")/common.sh"
run=(--config "$tmp/tiny.json" --micro-batch-size 2 --seq-length 16 --train-iters 12 --eval-interval 0
     --eval-iters 1 --sample-length 0 --quiet --comm-timeout 30)
layout=(--pipeline-model-parallel-size 2 --zero-stage 1)
fail() { echo "FAIL $1"; shift; [ $# -gt 0 ] && grep -E "error|skip" "$1" | head -6; failures=$((failures + 1)); }
trains() { grep -c '"train"' "$1/metrics.jsonl" 2>/dev/null || echo 0; }

# 1. NaN on a random rank at a random iteration, no skipping: every rank stops, naming both
for mode in "" --deterministic-mode; do
  r=$((RANDOM % 4)) it=$((2 + RANDOM % 8)) d="$tmp/nan$mode"
  TRIDENT_INJECT_NAN=$r:$it mpirun "${flags[@]}" -x TRIDENT_INJECT_NAN -np 4 "$bin" "${run[@]}" "${layout[@]}" $mode \
    --save-dir "$d" > "$d.log" 2>&1
  rc=$? want="iteration $it: non-finite gradients or loss on rank $r; no update applied"
  n=$(grep -cF "$want" "$d.log")
  if [ $rc -eq 0 ] || [ "$n" -ne 4 ] || [ "$(trains "$d")" -ne $((it - 1)) ]; then
    fail "NaN on rank $r at iteration $it ${mode}: status $rc, $n of 4 ranks said '$want', $(trains "$d") train lines" "$d.log"
  else
    echo "ok   NaN on rank $r at iteration $it ${mode:-(fast mode)}: 4 of 4 ranks stopped before the update: '$want'"
  fi
done

# 2. --skip-nonfinite 2: two NaN steps in a row are skipped on every rank, the run finishes
r=$((RANDOM % 4)) it=$((2 + RANDOM % 6)) d="$tmp/skip"
TRIDENT_INJECT_NAN=$r:$it:2 mpirun "${flags[@]}" -x TRIDENT_INJECT_NAN -np 4 "$bin" "${run[@]}" "${layout[@]}" \
  --skip-nonfinite 2 --save-dir "$d" > "$d.log" 2>&1
rc=$?
skips=$(grep -oE '"kind":"skip","iter":[0-9]+' "$d/metrics.jsonl" 2>/dev/null | grep -oE '[0-9]+$' | paste -sd,)
if [ $rc -ne 0 ] || [ "$skips" != "$it,$((it + 1))" ] || [ "$(trains "$d")" -ne 10 ] ||
   grep -qE "\"kind\":\"train\",\"iter\":($it|$((it + 1))),"  "$d/metrics.jsonl"; then
  fail "--skip-nonfinite 2 with NaN on rank $r at $it, $((it + 1)): status $rc, skipped '$skips', $(trains "$d") train lines" "$d.log"
else
  echo "ok   --skip-nonfinite 2: NaN on rank $r at iterations $it, $((it + 1)) skipped on every rank (metrics: skip $skips), 10 updates, exit 0"
fi

# 3. three in a row exceed --skip-nonfinite 2: every rank stops at the third
d="$tmp/skip3"
TRIDENT_INJECT_NAN=$r:$it:3 mpirun "${flags[@]}" -x TRIDENT_INJECT_NAN -np 4 "$bin" "${run[@]}" "${layout[@]}" \
  --skip-nonfinite 2 --save-dir "$d" > "$d.log" 2>&1
rc=$? want="iteration $((it + 2)): non-finite gradients or loss on rank $r; no update applied; 3 non-finite steps in a row exceed --skip-nonfinite 2"
n=$(grep -cF "$want" "$d.log")
if [ $rc -eq 0 ] || [ "$n" -ne 4 ]; then
  fail "3 NaN steps with --skip-nonfinite 2: status $rc, $n of 4 ranks said '$want'" "$d.log"
else
  echo "ok   3 NaN steps in a row with --skip-nonfinite 2: 4 of 4 ranks stopped: '$want'"
fi

# 4. identity: MPMD launch where ranks 2 and 3 have another --lr
d="$tmp/mpmd"
mpirun "${flags[@]}" -np 2 "$bin" "${run[@]}" --save-dir "$d" : -np 2 "$bin" "${run[@]}" --save-dir "$d" --lr 0.001 \
  > "$d.log" 2>&1
rc=$? want="the ranks disagree on the flags, model config, layout and data: ranks 2, 3 differ from rank 0"
n=$(grep -cF "$want" "$d.log") detail=$(grep -c "this rank has 'lr=0.001" "$d.log")
# (ended on its own: a rank left in a collective would hang until mpirun's --timeout kills the job)
if [ $rc -eq 0 ] || [ "$n" -ne 4 ] || [ "$detail" -ne 2 ] || grep -q "time limit for job execution" "$d.log"; then
  fail "MPMD --lr mismatch: status $rc, $n of 4 ranks named ranks 2, 3, $detail of 2 named the line" "$d.log"
else
  echo "ok   MPMD with --lr 0.001 on ranks 2-3: 4 of 4 ranks refused: '$want'; ranks 2, 3 name 'lr=0.001...'"
fi

# 5. identity: one random rank's text perturbed by the hidden hook
r=$((1 + RANDOM % 3)) d="$tmp/ident"
TRIDENT_INJECT_IDENTITY=$r mpirun "${flags[@]}" -x TRIDENT_INJECT_IDENTITY -np 4 "$bin" "${run[@]}" --save-dir "$d" \
  > "$d.log" 2>&1
rc=$? want="the ranks disagree on the flags, model config, layout and data: rank $r differs from rank 0"
n=$(grep -cF "$want" "$d.log")
if [ $rc -eq 0 ] || [ "$n" -ne 4 ]; then
  fail "identity perturbed on rank $r: status $rc, $n of 4 ranks said '$want'" "$d.log"
else
  echo "ok   identity perturbed on rank $r: 4 of 4 ranks refused: '$want'"
fi
# 6. identity on resume: every rank must have loaded the same step (iteration, manifest SHA-256)
d="$tmp/resume"
mpirun "${flags[@]}" -np 4 "$bin" "${run[@]}" --save-interval 4 --save-dir "$d" > "$d.log" 2>&1 ||
  fail "resume fixture: status $?" "$d.log"
r=$((RANDOM % 4))
TRIDENT_INJECT_IDENTITY=$r:2 mpirun "${flags[@]}" -x TRIDENT_INJECT_IDENTITY -np 4 "$bin" "${run[@]}" \
  --save-dir "$d.2" --load "$d/iter_0000004" > "$d.2.log" 2>&1
rc=$? want="the ranks disagree on the checkpoint loaded: "
# rank 0 perturbed: every other rank differs from it
if [ $r -eq 0 ]; then named="ranks 1, 2, 3 differ"; else named="rank $r differs"; fi
n=$(grep -cF "$want$named from rank 0" "$d.2.log")
if [ $rc -eq 0 ] || [ "$n" -ne 4 ] || grep -qs '"train"' "$d.2/metrics.jsonl"; then
  fail "identity perturbed on resume on rank $r: status $rc, $n of 4 ranks refused" "$d.2.log"
else
  echo "ok   identity perturbed on resume on rank $r: 4 of 4 ranks refused before training: '$(grep -m1 -oE "$want.*from rank 0" "$d.2.log")'"
fi

# no sanitizer report in any rank's output (the ASan/UBSan build), also where a failure is expected
if grep -lE "runtime error:|ERROR: (Address|Leak)Sanitizer" "$tmp"/*.log 2>/dev/null; then
  echo "FAIL: sanitizer report in the logs above"; failures=$((failures + 1))
fi
echo "nonfinite_identity: $failures failure(s)"
exit $((failures > 0))
