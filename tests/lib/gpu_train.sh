# shellcheck shell=bash
# tests/lib/gpu_train.sh - sourced by tests/gpu/train_cuda_{ep,cp}.sh: engine_train --device cuda on Open
# MPI ranks, and the skip (exit 77, CTest's SKIP_RETURN_CODE) where no CUDA device can be used.
#
# gpu_train NAME RANKS FLAGS...: mpiexec -np RANKS $BIN/engine_train FLAGS... --save-dir $T/NAME (BIN: the
# caller's directory of an engine_train built with the CUDA backend; T: its scratch directory), the output
# in $T/NAME.log. Returns 0 if the run succeeded; otherwise exits 77 with the log's line if it names no
# usable CUDA device, else prints the log's last 5 lines and exits 1.
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
