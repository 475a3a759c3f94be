#!/usr/bin/env bash
# tests/engine_train_errors.sh BUILD_DIR SOURCE_DIR - engine_train refuses bad input cleanly.
#
# Each case must exit non-zero, print one error line naming the file, field or value, and never
# crash (no sanitizer report, no signal). Run against the Release and the ASan/UBSan builds. The
# cases written out below come first; then the table tests/bad_inputs.tsv (143 rows, 23 of them
# under mpirun with 2-4 ranks), each of which must also be refused before anything starts (no plan
# printed) and end on its own: a rank left waiting in a collective would hang until mpirun's
# --timeout (300 s) kills the job, which the check recognises. (No bound in seconds: rows run four
# at a time, and under the sanitizers on 2 cores a 4-rank refusal has taken over 60 s.)
# Sections (tests/lib/sections.sh): written_cases, each row of the table (row_NAME), device_cuda,
# good_run; the fixtures are made for all.
set -u
build=$1
src=$2
source "$src/tests/lib/sections.sh"
bin="$build/bin/engine_train"
tok="$build/bin/tokenize"
export OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1 OMP_NUM_THREADS=1
# one-rank runs start without an orted (faster start-up; they never spawn)
export OMPI_MCA_ess_singleton_isolated=1
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
failures=0
# The checks below match with bash's own [[ ]] rather than grep: ~160 runs x several patterns were
# over a thousand processes, a third of this test's time.
crash_re='Sanitizer|runtime error|Segmentation|core dumped'
# first_line TEXT PATTERN: prints TEXT's first line that holds PATTERN (a fixed string)
first_line() {
  local l
  while IFS= read -r l; do [[ $l == *"$2"* ]] && { printf '%s\n' "$l"; return; }; done <<<"$1"
}

# fixtures: a tiny byte-level model and token files
cat > "$tmp/tiny.json" <<'JSON'
{"n_layer": 1, "n_head": 2, "n_embd": 16, "vocab_size": 257, "n_positions": 16}
JSON
head -c 20000 "$src/tools/trident.sh" > "$tmp/text.txt"
"$tok" --input "$tmp/text.txt" --output-prefix "$tmp/t" --tokenizer-type ByteLevel --val-fraction 0 \
  > /dev/null 2>&1 || { echo "FAIL: cannot build fixtures with $tok"; exit 1; }
cp "$tmp/t_train.bin" "$tmp/good.bin"
cp "$tmp/good.bin" "$tmp/magic.bin"
printf '\x00\x00\x00\x00' | dd of="$tmp/magic.bin" bs=1 seek=0 conv=notrunc 2>/dev/null
head -c 3000 "$tmp/good.bin" > "$tmp/truncated.bin"
sed 's/"vocab_size": 257/"vocab_size": 100/' "$tmp/tiny.json" > "$tmp/v100.json"
# a run directory holding a complete-looking step but no `latest` (a first save killed before it)
mkdir -p "$tmp/orphan/iter_0000001" && touch "$tmp/orphan/iter_0000001/manifest.sha256"
# text of bytes below 100 only, so its token file is valid for vocab_size 100
tr -dc 'A-Z0-9 ' < "$tmp/text.txt" | head -c 4000 > "$tmp/upper.txt"
tr 'a-z' 'A-Z' < "$tmp/text.txt" | tr -dc 'A-Z0-9 ' | head -c 4000 >> "$tmp/upper.txt"
"$tok" --input "$tmp/upper.txt" --output-prefix "$tmp/u" --tokenizer-type ByteLevel --val-fraction 0 > /dev/null 2>&1

common=(--train-iters 1 --eval-iters 1 --sample-length 0 --micro-batch-size 1 --seq-length 8
        --save-dir "$tmp/run")

# expect NAME TEXT [flags...]: fails unless the run exits non-zero with TEXT in its output and no crash
expect() {
  local name=$1 want=$2
  shift 2
  local out rc
  out=$("$bin" "$@" 2>&1)
  rc=$?
  if [ $rc -eq 0 ]; then
    echo "FAIL $name: exit status 0"; failures=$((failures + 1))
  elif [ $rc -ge 128 ] || [[ $out =~ $crash_re ]]; then
    echo "FAIL $name: crashed (status $rc):"; echo "$out" | head -20; failures=$((failures + 1))
  elif [[ $out != *"$want"* ]]; then
    echo "FAIL $name: expected '$want' in:"; echo "$out" | head -5; failures=$((failures + 1))
  else
    echo "ok   $name: $(first_line "$out" error)"
  fi
}

ok_data=(--train-data "$tmp/good.bin" --val-data "$tmp/good.bin")
cfg=(--config "$tmp/tiny.json")

if section written_cases; then
  # configs
  printf '{"n_head": 2, "n_embd": 16, "vocab_size": 257, "n_positions": 16}' > "$tmp/missing.json"
  printf '{"n_layer": -1, "n_head": 2, "n_embd": 16, "vocab_size": 257, "n_positions": 16}' > "$tmp/negative.json"
  printf '{"n_layer": 1, "n_head": 2.5, "n_embd": 16, "vocab_size": 257, "n_positions": 16}' > "$tmp/fraction.json"
  printf '{"n_layer": 1, "n_head": "two", "n_embd": 16, "vocab_size": 257, "n_positions": 16}' > "$tmp/string.json"
  printf '{"n_layer": 1, "n_head": 2, "n_embd": 16' > "$tmp/broken.json"
  expect "config missing field"     "missing.json: missing required key \"n_layer\"" --config "$tmp/missing.json" "${ok_data[@]}" "${common[@]}"
  expect "config negative field"    "negative.json: \"n_layer\" is -1" --config "$tmp/negative.json" "${ok_data[@]}" "${common[@]}"
  expect "config non-integer field" "fraction.json: \"n_head\" is 2.5" --config "$tmp/fraction.json" "${ok_data[@]}" "${common[@]}"
  expect "config string field"      "string.json: \"n_head\" is \"two\"" --config "$tmp/string.json" "${ok_data[@]}" "${common[@]}"
  expect "config broken JSON"       "broken.json: invalid JSON" --config "$tmp/broken.json" "${ok_data[@]}" "${common[@]}"
  expect "config missing file"      "nope.json" --config "$tmp/nope.json" "${ok_data[@]}" "${common[@]}"
  # token files
  expect "tokens wrong magic"   "magic.bin" "${cfg[@]}" --train-data "$tmp/magic.bin" --val-data "$tmp/good.bin" "${common[@]}"
  expect "tokens truncated"     "truncated.bin" "${cfg[@]}" --train-data "$tmp/truncated.bin" --val-data "$tmp/good.bin" "${common[@]}"
  expect "tokens id >= vocab"   "vocab" --config "$tmp/v100.json" "${ok_data[@]}" "${common[@]}"
  expect "tokens missing file"  "absent.bin" "${cfg[@]}" --train-data "$tmp/absent.bin" --val-data "$tmp/good.bin" "${common[@]}"
  # flags
  expect "seq-length > n_positions" "--seq-length 32: must be in [1, n_positions 16]" "${cfg[@]}" "${ok_data[@]}" "${common[@]}" --seq-length 32
  expect "unknown flag"          "unknown flag --no-such-flag" "${cfg[@]}" "${ok_data[@]}" --no-such-flag 3
  expect "non-numeric value"     "--lr fast: expected a finite number" "${cfg[@]}" "${ok_data[@]}" --lr fast
  expect "negative batch"        "--micro-batch-size -2: expected an integer in" "${cfg[@]}" "${ok_data[@]}" --micro-batch-size -2
  expect "min-lr above lr"       "--min-lr" "${cfg[@]}" "${ok_data[@]}" "${common[@]}" --lr 1e-4 --min-lr 1e-3
  expect "global batch divisibility" "--global-batch-size 3 is not a multiple of --micro-batch-size 2" "${cfg[@]}" "${ok_data[@]}" "${common[@]}" --micro-batch-size 2 --global-batch-size 3
  expect "tokenizer vs vocab"    "has vocab_size 100" --config "$tmp/v100.json" --train-data "$tmp/u_train.bin" --val-data "$tmp/u_train.bin" "${common[@]}" --tokenizer-type ByteLevel --sample-length 4
  expect "sequence parallel without tp" "--sequence-parallel needs" "${cfg[@]}" "${ok_data[@]}" "${common[@]}" --sequence-parallel
  expect "warm-up past the decay" "--lr-warmup-iters 5 must be below the end of the decay, 1" "${cfg[@]}" "${ok_data[@]}" "${common[@]}" --lr-warmup-iters 5
  expect "bad choice"            "--lr-decay-style sideways: expected one of cosine|linear|constant" "${cfg[@]}" "${ok_data[@]}" --lr-decay-style sideways
fi

# ---- the table of bad inputs (tests/bad_inputs.tsv): each refused before any collective, with one
# error line holding the expected text, no crash, nothing started (no plan printed). Multi-rank
# rows run under mpirun and must also end quickly (no rank left waiting). ----
printf '{"n_layer": 2, "n_head": 3, "n_embd": 48, "vocab_size": 257, "n_positions": 16}' > "$tmp/nh3.json"
source "$src/tests/lib/mpirun_flags.sh"
tiny=(--config "$tmp/tiny2.json")
printf '{"n_layer": 2, "n_head": 2, "n_embd": 16, "vocab_size": 257, "n_positions": 16}' > "$tmp/tiny2.json"
table_cases=0
# run_row N NAME RANKS WANT CONFIG FLAGS: runs one row into $tmp/row.N.{out,rc,s}
run_row() {
  local n=$1 ranks=$3 config=$5 flagtext=$6 start=$SECONDS
  local -a extra=() launch=() cfgflag=("${tiny[@]}")
  if [ "$config" != "-" ]; then
    printf '%s' "$config" > "$tmp/case$n.json"
    cfgflag=(--config "$tmp/case$n.json")
  fi
  eval "extra=($flagtext)"
  [ "$ranks" -gt 1 ] && launch=(mpirun "${mpirun_flags[@]}" -np "$ranks")
  # rows run side by side: each its own Open MPI session directory (singletons all use job family
  # 0, and two creating /tmp/ompi.<host>.<uid>/jf.0 at once fail with "File exists")
  OMPI_MCA_orte_tmpdir_base="$tmp/o$n" "${launch[@]}" "$bin" "${cfgflag[@]}" "${ok_data[@]}" "${common[@]}" \
    --save-dir "$tmp/run$n" "${extra[@]}" > "$tmp/row.$n.out" 2>&1
  echo $? > "$tmp/row.$n.rc"
  echo $((SECONDS - start)) > "$tmp/row.$n.s"
}
# check_row N NAME RANKS WANT: one error line holding WANT, non-zero exit, no crash, nothing started
check_row() {
  local n=$1 name=$2 ranks=$3 want=${4//\$tmp/$tmp} out rc secs n_err
  IFS= read -r -d '' out < "$tmp/row.$n.out"; read -r rc < "$tmp/row.$n.rc"; read -r secs < "$tmp/row.$n.s"
  table_cases=$((table_cases + 1))
  local l err_line=
  n_err=0
  while IFS= read -r l; do
    [[ $l == *"engine_train: error"* ]] || continue
    n_err=$((n_err + 1)); [ -n "$err_line" ] || err_line=$l
  done <<<"$out"
  if [ "$rc" -eq 0 ]; then
    echo "FAIL table $name: exit status 0"; failures=$((failures + 1))
  elif [[ $out =~ $crash_re|signal\ [0-9] ]] || { [ "$ranks" -eq 1 ] && [ "$rc" -ge 128 ]; }; then
    echo "FAIL table $name: crashed (status $rc):"; echo "$out" | head -20; failures=$((failures + 1))
  elif [ "$n_err" -ne 1 ] || [[ $err_line != *"$want"* ]]; then
    echo "FAIL table $name: expected one error line with '$want', got $n_err:"; echo "$out" | head -6
    failures=$((failures + 1))
  elif [[ $out =~ (^|$'\n')Trident: || $out == *layout:* ]]; then
    echo "FAIL table $name: started ($secs s):"; echo "$out" | head -6; failures=$((failures + 1))
  elif [[ $out == *"time limit for job execution has been reached"* ]]; then
    echo "FAIL table $name: hung until mpirun's --timeout ($secs s):"; echo "$out" | head -6; failures=$((failures + 1))
  else
    echo "ok   table $name ($ranks rank$([ "$ranks" -gt 1 ] && echo s), $secs s): $err_line"
  fi
}
# each row is a section of its own (row_NAME)
table_rows "$src/tests/bad_inputs.tsv" || exit 1
rows=("${table_rows_out[@]}")
# most of a refused run is MPI start-up: run 4 rows at a time, then check them in order
running=0
for i in "${!rows[@]}"; do
  IFS=$'\t' read -r name ranks want config flagtext <<<"${rows[$i]}"
  run_row "$i" "$name" "$ranks" "$want" "$config" "$flagtext" &
  running=$((running + 1))
  if [ $running -ge 4 ]; then wait -n; running=$((running - 1)); fi
done
wait
for i in "${!rows[@]}"; do
  IFS=$'\t' read -r name ranks want config flagtext <<<"${rows[$i]}"
  check_row "$i" "$name" "$ranks" "$want"
done
echo "bad inputs table: $table_cases cases"

# --device cuda: trains where a GPU is usable; elsewhere one clear error line, exit 1, no crash
if section device_cuda; then
  out=$("$bin" "${cfg[@]}" "${ok_data[@]}" "${common[@]}" --device cuda 2>&1)
  rc=$?
  if [ $rc -eq 0 ]; then
    echo "ok   device cuda: trained (a GPU is usable here)"
  elif [ $rc -ge 128 ] || grep -qE "Sanitizer|runtime error|Segmentation|core dumped" <<<"$out"; then
    echo "FAIL device cuda: crashed (status $rc):"; echo "$out" | head -20; failures=$((failures + 1))
  elif [ $rc -ne 1 ] || [ "$(grep -c 'error' <<<"$out")" -ne 1 ] || ! grep -qE "error: (no CUDA device|--device cuda: this build has no CUDA backend)" <<<"$out"; then
    echo "FAIL device cuda: expected one clear error line and status 1, got status $rc:"; echo "$out" | head -5
    failures=$((failures + 1))
  else
    echo "ok   device cuda: $(grep -m1 'error' <<<"$out")"
  fi
fi

# and a good run completes
if section good_run; then
  out=$("$bin" "${cfg[@]}" "${ok_data[@]}" "${common[@]}" --train-iters 3 2>&1)
  if [ $? -ne 0 ] || ! grep -q "trained 3 iterations" <<<"$out"; then
    echo "FAIL good run:"; echo "$out" | tail -5; failures=$((failures + 1))
  else
    echo "ok   good run: $(grep 'trained' <<<"$out")"
  fi
fi
echo "engine_train_errors: $failures failure(s)"
exit $((failures > 0))
