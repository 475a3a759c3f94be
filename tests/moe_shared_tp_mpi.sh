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
bin="$build/bin"
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
cd "$src" || exit 1
export OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1 OMP_NUM_THREADS=1
data=data/fortunes_byte_train.bin
[ -f "$data" ] || { echo "SKIP: $data missing (bash tools/trident.sh data)"; exit 0; }
common=(--config models/moe-tiny-shared-byte.json --train-data "$data" --val-data data/fortunes_byte_val.bin
        --train-iters 4 --seq-length 32 --micro-batch-size 2 --global-batch-size 8 --eval-iters 1
        --sample-length 0 --threads 1 --lr 3e-3 --log-interval 1)
run() { # name ranks flags...
  local name=$1 np=$2
  shift 2
  mpiexec --oversubscribe --mca btl self,vader --bind-to none -np "$np" --timeout 300 "$bin/engine_train" \
    "${common[@]}" --save-dir "$tmp/$name" "$@" > "$tmp/$name.log" 2>&1 || { tail -5 "$tmp/$name.log"; exit 1; }
}
run one 1
run tp2 4 --tensor-model-parallel-size 2 --sequence-parallel --expert-model-parallel-size 2
/usr/bin/python3 - "$tmp/one/metrics.jsonl" "$tmp/tp2/metrics.jsonl" <<'PY'
import json, sys
def train(p):
    return [r for r in map(json.loads, open(p)) if r.get("kind") == "train"]
one, tp = train(sys.argv[1]), train(sys.argv[2])
assert len(one) == len(tp) == 4, (len(one), len(tp))
worst = max(abs(a["loss"] - b["loss"]) / a["loss"] for a, b in zip(one, tp))
assert worst < 1e-4, f"losses differ by {worst:.3g} relative: {[a['loss'] for a in one]} vs {[b['loss'] for b in tp]}"
assert all(r["ep_bytes"] > 0 for r in tp), [r["ep_bytes"] for r in tp]
print(f"ok   shared expert at tp 2 sp ep 2 on 4 ranks: losses within {worst:.2g} of one rank's "
      f"({one[0]['loss']:.4f} -> {one[-1]['loss']:.4f})")
PY
