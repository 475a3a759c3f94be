#!/usr/bin/env bash
# tools/sanitizer_coverage.sh - chooses the tests the test command's sanitizer stage runs, from what
# each test executes.
#
# AddressSanitizer and UBSan check the code a process executes. A test all of whose library lines
# other tests of the sanitizer stage execute too adds arithmetic there, not checks, at 2-4x its
# Release cost; it still runs in the Release stage. This script
#   1. builds the sanitizer build's code (Debug, the same -march, no CUDA) with gcov's counters in
#      place of the sanitizers (TRIDENT_COVERAGE=ON, in build-cov/);
#   2. runs every test of the sanitizer stage once, two at a time, each writing its counters under a
#      directory of its own (GCOV_PREFIX: every process a test starts, Open MPI's ranks too), then
#      each case of the Criterion suites, and each section of the script tests
#      (tests/lib/sections.sh), that took 5 s or more on its own;
#   3. hands the counters to tools/sanitizer_select.py, which keeps every test that is the only one to
#      execute some line of the library (engine/ layers/ models/ checkpoints/ partitioner/ tools/
#      cuda/), then adds tests (or cases, or sections), most new lines per second first, until the
#      kept set executes every line any test executes, and writes the others to
#      tests/release_only.txt (tests/CMakeLists.txt labels those tests release_only, and has the
#      suites skip those cases, and the scripts those sections, in the sanitizer build).
# Rerun it when tests or library code move much; a new test is in the sanitizer stage until then.
#
#   bash tools/sanitizer_coverage.sh [--tests "NAME..." | --cases] [COST_FILE]
# --tests: rerun only these tests' counters (after changing them; the others' are kept from the last
# run) and select again. --cases: only the case-by-case and section-by-section pass (below) and the
# selection.
# COST_FILE: per-test seconds of one run of the sanitizer suite with the current
# tests/release_only.txt ("name runs seconds" lines; default
# build-asan/Testing/Temporary/CTestCostData.txt, else the coverage run's own timings). CTest
# averages that file over its runs, so after runs of another selection write one from a run's
# output instead: sed -E -n 's/.*Test +#[0-9]+: ([^ ]+) .* ([0-9.]+) sec$/\1 1 \2/p' LOG > FILE.
# About 40 minutes on 2 cores (2026-12-02: about 5 the build; 36 the tests, the cases and sections of
# those that took 5 s or more, and the selection).
set -euo pipefail
cd "$(dirname "$0")/.."
root=$PWD
dir=$root/build-cov
only=""
cases_only=0
if [ "${1:-}" = "--tests" ]; then
  only=$2
  shift 2
elif [ "${1:-}" = "--cases" ]; then
  cases_only=1
  shift
fi
cost=${1:-$root/build-asan/Testing/Temporary/CTestCostData.txt}
export PATH="$PATH:/usr/local/cuda/bin" OMP_WAIT_POLICY=PASSIVE
if [ "$(id -u)" -eq 0 ]; then
  export OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1
fi

# the sanitizer stage's -march (tools/trident.sh other_machine): the same preprocessor paths
flags=$(grep -m1 '^flags' /proc/cpuinfo 2>/dev/null || true)
march=none
[[ " $flags " == *" avx2 "* ]] && march=x86-64-v3
cmake -S . -B "$dir" -DCMAKE_BUILD_TYPE=Debug -DTRIDENT_COVERAGE=ON -DTRIDENT_CUDA=OFF \
  -DTRIDENT_MARCH="$march" >/dev/null
cmake --build "$dir" -j "$(nproc)" > "$dir/build.log" 2>&1 || {
  tail -20 "$dir/build.log" >&2; echo "sanitizer_coverage: the build in $dir failed" >&2; exit 1; }
[ -f data/fortunes_byte_train.bin ] || bash tools/prepare_fortunes.sh "$dir/bin"

# the tests of the sanitizer stage, release_only ones included (this run decides them anew)
mapfile -t tests < <(cd "$dir" && ctest -N -LE 'gpu|fuzz' | sed -n 's/^ *Test *#[0-9]*: //p')
if ((cases_only)); then
  mapfile -t tests < <(awk '{print $1}' "$dir/cov/runs.txt")
elif [ -n "$only" ]; then
  [ -f "$dir/cov/runs.txt" ] || { echo "sanitizer_coverage: --tests needs a whole run first" >&2; exit 1; }
  read -ra tests <<< "$only"
  for t in "${tests[@]}"; do
    rm -rf "${dir:?}/cov/$t"
    sed -i "/^$t /d" "$dir/cov/runs.txt"
  done
else
  rm -rf "$dir/cov"
  mkdir -p "$dir/cov"
fi
echo "sanitizer_coverage: ${#tests[@]} tests, counters under $dir/cov/"
strip=$(awk -F/ '{print NF - 1}' <<< "$dir")   # the components of $dir's absolute path

# run_unit NAME [SUITE/CASE | SECTION]: one test, one case of a Criterion suite or one section of a
# script test, with its counters under a directory of its own; appends "NAME [SUITE/CASE | SECTION]
# STATUS MILLISECONDS" to cov/runs.txt (cov/cases.txt)
run_unit() {
  local name=$1 case=${2:-} d=$dir/cov/$1 list=$dir/cov/runs.txt t0 rc=0 only=()
  if [ -n "$case" ]; then
    d=$dir/cov/cases/$name@${case//\//@}
    list=$dir/cov/cases.txt
    if [[ $case == */* ]]; then only=("CRITERION_TEST_PATTERN=$case"); else only=("TRIDENT_TEST_SECTIONS=$case"); fi
  fi
  mkdir -p "$d"
  t0=$(date +%s%N)
  (cd "$dir" && env "${only[@]}" GCOV_PREFIX="$d" GCOV_PREFIX_STRIP="$strip" \
     ctest -R "^${name}\$" --output-on-failure > "$d.log" 2>&1) || rc=$?
  echo "$name${case:+ $case} $rc $((($(date +%s%N) - t0) / 1000000))" >> "$list"   # milliseconds
}
export -f run_unit
export dir strip
((cases_only)) || printf '%s\n' "${tests[@]}" | xargs -P "$(nproc)" -I{} bash -c 'run_unit {}'
if awk '$2 != 0 {bad = 1; print "sanitizer_coverage: " $1 " failed (log: '"$dir"'/cov/" $1 ".log)"} END {exit !bad}' \
     "$dir/cov/runs.txt" >&2; then
  echo "sanitizer_coverage: failed tests stay in the sanitizer stage" >&2
fi

# A Criterion suite that ran 5 s or more is also run case by case (CRITERION_TEST_PATTERN), and a
# script test with sections section by section (TRIDENT_TEST_SECTIONS), so the selection can leave
# single cases or sections to the Release stage: tests/CMakeLists.txt then runs that suite with a
# pattern that skips them, or that script with TRIDENT_TEST_SKIP_SECTIONS, in the sanitizer build.
mkdir -p "$dir/cov/cases"
touch "$dir/cov/cases.txt"
cases=()
for t in "${tests[@]}"; do
  ms=$(awk -v t="$t" '$1 == t {print $3}' "$dir/cov/runs.txt")
  [ "${ms:-0}" -ge 5000 ] || continue
  exe=$(find "$dir/tests" -maxdepth 2 -type f -executable -name "$t" | head -1)
  script=$(cd "$dir" && ctest -N -V -R "^$t\$" | sed -n 's/.*Test command: [^ ]*bash "\([^"]*\.sh\)".*/\1/p' | head -1)
  [ -n "$exe" ] || { [ -n "$script" ] && grep -q '^ *if section ' "$script"; } || continue
  rm -rf "${dir:?}/cov/cases/$t@"*
  sed -i "/^$t /d" "$dir/cov/cases.txt"
  if [ -n "$exe" ]; then
    while read -r c; do cases+=("$t $c"); done < <("$exe" --list 2>/dev/null |
      awk '/^[A-Za-z0-9_]+: [0-9]+ tests?$/ {s = $1; sub(":", "", s); next}
           {n = $NF; if (s != "" && n ~ /^[A-Za-z0-9_]+$/) print s "/" n}')
  else # the names the script's `section NAME` calls spell out, and a section per row of each table
    # it reads with `table_rows "$src/PATH"` (tests/lib/sections.sh)
    while read -r c; do cases+=("$t $c"); done < <(grep -oE '(if|\|\|) section [a-z0-9_]+' "$script" | awk '{print $3}' | sort -u)
    while read -r table; do
      while read -r c; do cases+=("$t $c"); done < <(bash -c 'source tests/lib/sections.sh; table_sections "$1"' _ "$table")
    done < <(grep -oE 'table_rows "\$src/[^"]+"' "$script" | sed 's/^table_rows "\$src\///; s/"$//')
  fi
done
echo "sanitizer_coverage: ${#cases[@]} cases of the long Criterion suites and sections of the long scripts, one at a time"
printf '%s\n' "${cases[@]}" | xargs -P "$(nproc)" -I{} bash -c 'run_unit {}'

# Each split test once more with no case or section (a Criterion pattern and a section name that
# match none), its counters thrown away: its start-up and the fixtures every case or section makes,
# which each unit's time above includes once. tools/sanitizer_select.py charges a unit only what it
# adds to that (cov/bases.txt, "name milliseconds").
run_base() {
  local t0
  t0=$(date +%s%N)
  (cd "$dir" && env CRITERION_TEST_PATTERN=trident_no_case TRIDENT_TEST_SECTIONS=trident_no_section \
     GCOV_PREFIX="$dir/cov/bases/$1" GCOV_PREFIX_STRIP="$strip" ctest -R "^${1}\$" > /dev/null 2>&1) || true
  echo "$1 $((($(date +%s%N) - t0) / 1000000))" >> "$dir/cov/bases.txt"
}
export -f run_base
split_tests=$(printf '%s\n' "${cases[@]}" | awk '{print $1}' | sort -u)
for t in $split_tests; do sed -i "/^$t /d" "$dir/cov/bases.txt" 2>/dev/null || true; done
[ -z "$split_tests" ] || printf '%s\n' $split_tests | xargs -P "$(nproc)" -I{} bash -c 'run_base {}'
rm -rf "$dir/cov/bases"

python3 tools/sanitizer_select.py --build "$dir" --source "$root" --cost "$cost" \
  --out tests/release_only.txt
