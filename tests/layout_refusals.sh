#!/usr/bin/env bash
# tests/layout_refusals.sh BUILD_DIR SOURCE_DIR - one validator: engine_train and the partitioner refuse
# every impossible layout of tests/layout_refusals.tsv with the same message.
#
# Each row runs `partitioner --num-gpus N` and engine_train on N ranks (mpirun -np N) with the same
# layout flags; both must exit non-zero with exactly one error line, and the two lines (after the
# program's name) must be equal, hold the row's text and give the nearest valid values.
set -u
build=$1
src=$2
export OMP_NUM_THREADS=1
source "$src/tests/lib/mpirun_flags.sh"
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
cd "$src" || exit 1
failures=0 rows=0
base=(--config models/gpt2-tiny-byte.json --tensor-model-parallel-size 1 --pipeline-model-parallel-size 1
      --micro-batch-size 4 --global-batch-size 0 --seq-length 64)
# the error line, without the program's name and the source location
error_of() { grep -m1 "error: " "$1" | sed -e 's/^.*error: //' -e 's/ ([a-z_]*\.c:[0-9]*)$//'; }
while IFS=$'\t' read -r name ranks want flagtext; do
  [[ -z "$name" || "$name" == \#* ]] && continue
  rows=$((rows + 1))
  read -r -a extra <<<"$flagtext"
  "$build/bin/partitioner" "${base[@]}" --hardware cpu --num-gpus "$ranks" "${extra[@]}" < /dev/null > "$tmp/p.log" 2>&1
  prc=$?
  launch=()
  [ "$ranks" -gt 1 ] && launch=(mpirun "${mpirun_flags[@]}" -np "$ranks")
  OMPI_MCA_orte_tmpdir_base="$tmp/o" "${launch[@]}" "$build/bin/engine_train" "${base[@]}" --train-iters 1 \
    --sample-length 0 --save-dir "$tmp/run" "${extra[@]}" < /dev/null > "$tmp/e.log" 2>&1
  erc=$?
  p=$(error_of "$tmp/p.log") e=$(error_of "$tmp/e.log")
  pn=$(grep -c "error: " "$tmp/p.log") en=$(grep -c "error: " "$tmp/e.log")
  if [ $prc -eq 0 ] || [ $erc -eq 0 ] || [ "$pn" -ne 1 ] || [ "$en" -ne 1 ]; then
    echo "FAIL $name: partitioner status $prc ($pn error lines), engine_train status $erc ($en error lines)"
    head -3 "$tmp/p.log" "$tmp/e.log"; failures=$((failures + 1))
  elif [ "$p" != "$e" ]; then
    echo "FAIL $name: the two CLIs refuse differently:"; echo "  partitioner:  $p"; echo "  engine_train: $e"
    failures=$((failures + 1))
  elif [[ "$p" != *"$want"* ]] || [[ "$p" != *"nearest valid"* ]]; then
    echo "FAIL $name: '$p' lacks '$want' or the nearest valid values"; failures=$((failures + 1))
  else
    echo "ok   $name ($ranks ranks): both: $p"
  fi
done < "$src/tests/layout_refusals.tsv"
[ $rows -gt 0 ] || { echo "FAIL: no rows read"; failures=1; }
echo "layout_refusals: $rows rows, $failures failure(s)"
exit $((failures > 0))
