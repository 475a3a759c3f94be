# shellcheck shell=bash
# tests/lib/mpi_train.sh - sourced, after `build=$1 src=$2`, by the scripts that train engine_train under
# Open MPI and check its runs (cp_mpi.sh; the MoE scripts through tests/lib/moe_mpi.sh): what each of
# them sets up alike.
#
# Sets what tests/lib/script_setup.sh sets (bin, tmp removed at exit, failures and fail NAME, the
# working directory $src), mpirun's flags (tests/lib/mpirun_flags.sh), one OpenMP thread a rank and data
# (the fortunes training data); exits 0 with SKIP when the data is missing. The caller then sets `common`,
# engine_train's flags of every run, and uses:
#   train_run NAME RANKS FLAGS...          trains into $tmp/NAME (log $tmp/NAME.log); its status
#   train_refuse NAME WANT RANKS FLAGS...  engine_train (1 iteration) must refuse, its message naming WANT
#   train_done SCRIPT                      the verdict: exits 1 if a check failed
# shellcheck source=tests/lib/script_setup.sh
source "$src/tests/lib/script_setup.sh"
# shellcheck source=tests/lib/mpirun_flags.sh
source "$src/tests/lib/mpirun_flags.sh"
export OMP_NUM_THREADS=1
data=data/fortunes_byte_train.bin
[ -f "$data" ] || { echo "SKIP: $data missing (bash tools/trident.sh data)"; exit 0; }

train_run() { # name ranks flags...
  local name=$1 np=$2
  shift 2
  mpiexec "${mpirun_flags[@]}" -np "$np" "$bin/engine_train" "${common[@]}" --save-dir "$tmp/$name" "$@" \
    > "$tmp/$name.log" 2>&1
}

train_refuse() { # name want ranks flags...
  local name=$1 want=$2 np=$3
  shift 3
  local out
  out=$(mpiexec "${mpirun_flags[@]}" -np "$np" "$bin/engine_train" "${common[@]}" --train-iters 1 \
        --save-dir "$tmp/refused" "$@" 2>&1) && { fail "$name: accepted"; return; }
  grep -qF -- "$want" <<<"$out" && echo "ok   $name refused: $want" || { echo "$out" | tail -3; fail "$name: message"; }
}

train_done() { # script name
  [ "$failures" -eq 0 ] && echo "$1: all checks passed" || { echo "$1: $failures check(s) failed"; exit 1; }
}
