# shellcheck shell=bash
# tests/lib/gpu_train.sh - sourced by tests/gpu/train_cuda_{ep,cp}.sh: engine_train --device cuda on Open
# MPI ranks, and the skip (exit 77, CTest's SKIP_RETURN_CODE) where no CUDA device can be used.
#
# Sourced after `BIN=$1 SRC=$2`: sets T (a scratch directory, removed at exit), exports what Open MPI
# needs to run as root and one OpenMP thread a rank, and skips (exit 77) when $SRC/data lacks the
# fortunes data. Then:
#   gpu_train NAME RANKS FLAGS...  mpiexec -np RANKS $BIN/engine_train FLAGS... --save-dir $T/NAME (BIN: an
#                                  engine_train built with the CUDA backend), the output in $T/NAME.log;
#                                  returns 0 if the run succeeded, else exits 77 with the log's line if it
#                                  names no usable CUDA device, or prints its last 5 lines and exits 1.
T=$(mktemp -d)
trap 'rm -rf "$T"' EXIT
export OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1 OMP_NUM_THREADS=1
[ -f "$SRC/data/fortunes_byte_train.bin" ] || { echo "SKIP: $SRC/data/fortunes_byte_train.bin missing"; exit 77; }

gpu_train() {
  local name=$1 np=$2
  shift 2
  mpiexec --oversubscribe --mca btl self,vader --bind-to none -np "$np" --timeout 300 "$BIN/engine_train" \
    "$@" --save-dir "$T/$name" > "$T/$name.log" 2>&1 && return 0
  if grep -qiE "no CUDA device|no usable CUDA" "$T/$name.log"; then
    echo "SKIP: $(grep -iE 'no CUDA device|no usable CUDA' "$T/$name.log" | head -1)"
    exit 77
  fi
  tail -5 "$T/$name.log"
  echo "FAIL: $name"
  exit 1
}
