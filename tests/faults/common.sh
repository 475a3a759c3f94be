# tests/faults/common.sh - what every fault test starts with (sourced; BUILD_DIR SOURCE_DIR in $1 $2).
#
# Sets bin (engine_train), flags (mpirun's, with the sanitizer variables passed on in the ASan build),
# tmp (removed on exit) holding tiny.json (a 2-layer byte-level GPT), failures = 0, and RANDOM seeded
# from FAULT_SEED (printed, so a failing choice can be replayed); cds to the source tree, whose
# data/fortunes_byte_*.bin the runs read. Extra mpirun flags can be given in fault_mpirun_flags.
build=$1
src=$2
bin="$build/bin/engine_train"
source "$src/tests/lib/mpirun_flags.sh"
flags=("${mpirun_flags[@]}" ${fault_mpirun_flags[@]+"${fault_mpirun_flags[@]}"})
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
cd "$src" || exit 1
[ -f data/fortunes_byte_train.bin ] || { echo "FAIL: data/fortunes_byte_*.bin missing (tools/prepare_fortunes.sh)"; exit 1; }
printf '{"n_layer": 2, "n_head": 2, "n_embd": 32, "vocab_size": 257, "n_positions": 32}' > "$tmp/tiny.json"
failures=0
seed=${FAULT_SEED:-$RANDOM}
RANDOM=$seed
echo "random seed $seed (FAULT_SEED=$seed reproduces the choices)"

# pid_of_rank MPIRUN_PID RANK: the pid of that world rank (read from its environment)
pid_of_rank() {
  local p
  for p in $(pgrep -P "$1"); do
    if tr '\0' '\n' < "/proc/$p/environ" 2>/dev/null | grep -qx "OMPI_COMM_WORLD_RANK=$2"; then
      echo "$p"; return
    fi
  done
}
