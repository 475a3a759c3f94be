#!/usr/bin/env bash
# tests/long_context_cp.sh BUILD_DIR SOURCE_DIR - long context under context parallelism (issue 34, item 6;
# docs/context_parallel.md, "Long context on this machine"), at the size the suite affords: the tiny Llama
# (models/llama-tiny-byte-64k.json: llama-tiny-byte.json with max_position_embeddings 65536) at seq-length
# 8192, micro-batch 1, one training step on the fortunes bytes, on 1 rank and on 4 Open MPI ranks with
# --context-parallel-size 4 (--cp-comm-type p2p, chunks of 1024 tokens, one thread a rank):
#  - every one of the 4 ranks prints its memory line with the measured arena peak equal to the engine's
#    plan ("(+0.0%)"), and the cp 4 plan is below the cp 1 plan (the activations divide by cp);
#  - the step's loss and the validation loss are finite and within 1e-4 relative of one rank's (the bound of
#    tests/test_cp_layouts.c and cp_mpi.sh: the same math summed in another grouping; a wrong chunk or
#    position moves the first loss by 4e-4 or more there).
# About 40 s on 2 idle cores, 90 s measured beside a 64k run and the suite (label release_only). bench/long_context/run.sh measures 4k-64k.
set -u
build=$1
src=$2
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
cd "$src" || exit 1
# shellcheck source=tests/lib/mpirun_flags.sh
source "$src/tests/lib/mpirun_flags.sh"
export OMP_NUM_THREADS=1
failures=0
fail() { echo "FAIL $1"; [ -n "${2:-}" ] && tail -8 "$2"; failures=$((failures + 1)); }
[ -f data/fortunes_byte_train.bin ] || { echo "SKIP: data/fortunes_byte_*.bin missing (bash tools/trident.sh data)"; exit 0; }

run() { # name ranks flags...: one step at T 8192 into $tmp/name (log $tmp/name.log)
  local name=$1 np=$2
  shift 2
  mpiexec "${mpirun_flags[@]}" -np "$np" "$build/bin/engine_train" --config models/llama-tiny-byte-64k.json \
    --train-data data/fortunes_byte_train.bin --val-data data/fortunes_byte_val.bin --seq-length 8192 \
    --micro-batch-size 1 --global-batch-size 1 --train-iters 1 --eval-iters 1 --sample-length 0 --threads 1 \
    --log-interval 1 --save-dir "$tmp/$name" "$@" > "$tmp/$name.log" 2>&1 || fail "$name" "$tmp/$name.log"
}
run one 1
run cp4 4 --context-parallel-size 4 --cp-comm-type p2p
/usr/bin/python3 - "$tmp" <<'PY' || fail "cp 4 at T 8192 against one rank"
import json, math, re, sys
tmp = sys.argv[1]
def mem(name):
    rows = re.findall(r"memory planned:.* total ([0-9.]+) MiB; measured peak ([0-9.]+) MiB \(([-+0-9.]+)%\)",
                      open(f"{tmp}/{name}.log").read())
    return [(float(p), float(m), o) for p, m, o in rows]
def losses(name):
    rows = [json.loads(l) for l in open(f"{tmp}/{name}/metrics.jsonl")]
    return ([r["loss"] for r in rows if r["kind"] == "train"], [r["val_loss"] for r in rows if r["kind"] == "eval"])
m1, m4 = mem("one"), mem("cp4")
assert len(m1) == 1 and len(m4) == 4, (m1, m4)
for p, m, o in m1 + m4:
    assert p == m and o == "+0.0", f"measured peak {m} MiB against planned {p} MiB ({o}%)"
assert max(p for p, _, _ in m4) < m1[0][0], (m1, m4)
(t1, v1), (t4, v4) = losses("one"), losses("cp4")
assert len(t1) == len(t4) == 1 and len(v1) == len(v4) == 1, (t1, t4, v1, v4)
for a, b in ((t1[0], t4[0]), (v1[0], v4[0])):
    assert math.isfinite(a) and math.isfinite(b) and abs(a - b) <= 1e-4 * a, (a, b)
rel = max(abs(t1[0] - t4[0]) / t1[0], abs(v1[0] - v4[0]) / v1[0])
print(f"ok   T 8192, cp 4 on 4 ranks: losses within {rel:.2g} relative; peaks {[m for _, m, _ in m4]} MiB = planned (cp 1: {m1[0][1]} MiB); "
      f"loss {t4[0]:.6f} vs {t1[0]:.6f}, validation {v4[0]:.6f} vs {v1[0]:.6f}")
PY
[ $failures -eq 0 ] || { echo "$failures failure(s)"; exit 1; }
echo "long_context_cp: all passed"
