#!/usr/bin/env bash
# tests/moe_shared_tp_mpi.sh - the shared expert under tensor + sequence parallelism over real MPI
# (docs/moe.md "The shared expert at tp > 1"): engine_train trains the tiny byte-level MoE with a
# shared expert (models/moe-tiny-shared-byte.json: 8 experts, top-2, shared SwiGLU of width 256) for 4
# iterations on 1 rank and on 4 Open MPI ranks at --tensor-model-parallel-size 2 --sequence-parallel
# --expert-model-parallel-size 2 (dp 2; the shared expert split over each TP pair, its all-gather and
# reduce-scatter over MPI), the same global batch, and compares every iteration's loss within 1e-4
# relative (tests/moe_ep_mpi.sh's bound: the ranks' fp32 sums grouped otherwise, a few ulps each;
# measured 6.2e-8), ep_bytes > 0 on the 4-rank run. About 3 s.
# Usage (CTest): bash moe_shared_tp_mpi.sh BUILD_DIR SOURCE_DIR
set -u
build=$1
src=$2
moe_config=models/moe-tiny-shared-byte.json
# shellcheck source=tests/lib/moe_mpi.sh
source "$src/tests/lib/moe_mpi.sh"
common+=(--train-iters 4)
moe_run one 1 || { tail -5 "$tmp/one.log"; fail "one rank"; }
moe_run tp2 4 --tensor-model-parallel-size 2 --sequence-parallel --expert-model-parallel-size 2 ||
  { tail -5 "$tmp/tp2.log"; fail "4 ranks tp 2 sp ep 2"; }
moe_against_one tp2
moe_done moe_shared_tp_mpi
