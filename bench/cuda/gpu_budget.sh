# shellcheck shell=bash
# bench/cuda/gpu_budget.sh - sourced by the GPU check scripts (gpu_check.sh, gpu_check_rest.sh,
# cp_attention.sh): everything printed goes to the screen and to $O/all.log ($OUT, or /tmp/out), the
# packed archives of bench/cuda/gpu_pack.sh are unpacked once, and each step's `timeout "$(tmo N)"`
# takes N seconds or what is left of BUDGET seconds (the caller sets its default) less 5, at
# least 3, so that the whole script ends inside its device booking; `el WHAT` prints a step's header
# with the seconds since the start; `sanitize` (below) runs a compute-sanitizer tool within the budget.
O=${OUT:-/tmp/out}; mkdir -p "$O"; exec > >(tee "$O/all.log") 2>&1
for a in bin data; do
  [ -d $a ] || [ ! -f $a.tar.xz ] || tar -xJf $a.tar.xz || { echo "gpu_budget: unpacking $a.tar.xz failed"; exit 1; }
done
D=$(( $(date +%s) + ${BUDGET:-300} ))
tmo() { local r=$(( D - $(date +%s) - 5 )); [ "$r" -lt 3 ] && r=3; [ "$r" -gt "$1" ] && echo "$1" || echo "$r"; }
t0=$(date +%s); el() { echo "=== [$(( $(date +%s) - t0 ))s] $*"; }
# sanitize LOG SECONDS TOOL_ARGS... -- PROGRAM ARGS...: compute-sanitizer over PROGRAM and every process
# it starts (Criterion's workers), at most SECONDS of the budget, its output in $O/LOG; prints the exit
# status and the summary and error lines, counted.
sanitize() {
  local log=$1 s=$2 opts=()
  shift 2
  while [ $# -gt 0 ] && [ "$1" != -- ]; do opts+=("$1"); shift; done
  [ $# -gt 0 ] || { echo "sanitize $log: no -- before the program"; return 2; }
  shift
  timeout "$(tmo "$s")" compute-sanitizer "${opts[@]}" --target-processes all "$@" > "$O/$log" 2>&1
  echo "rc=$?"
  grep -E 'ERROR SUMMARY|LEAK SUMMARY|RACECHECK SUMMARY|Invalid|Misaligned|Uninitialized|Barrier|Synthesis|FAIL' \
    "$O/$log" | sort | uniq -c | head
}
