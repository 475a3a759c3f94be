#!/usr/bin/env bash
# tests/moe_etp_reshard.sh - `ckpt reshard --expert-tensor-parallel-size` and `ckpt inspect` across
# expert tensor parallelism (docs/moe.md "Expert tensor parallelism", "Resharding across etp") under
# real MPI: engine_train trains the tiny byte-level MoE (models/moe-tiny-byte.json, 8 experts of width
# 256, top-2) in --deterministic-mode for 4 iterations, saving at iteration 2. Deterministic mode is
# bit-identical across the layouts of one etp (tests/test_moe_etp_layouts.c), not across etp (the down
# projection's sum over I is split in etp partial sums), so:
#  - dp 2 etp 2 (2 ranks) and dp 4 etp 2 ep 2 (4 ranks): the same losses bit for bit; ckpt inspect
#    names "expert tensor parallel 2" and the manifest records expert_tensor_parallel_size 2 (an etp 1
#    manifest has no such key, as before);
#  - the dp 2 etp 2 step 2 resharded to dp 4 etp 2 ep 2: every HDF5 file of the step (the model file
#    of each (etp, ep) slice holder, each dp rank's optimizer file, the index) equal tensor for tensor
#    and attribute for attribute (h5diff both ways) to what the dp 4 etp 2 ep 2 run saved at step 2, the
#    manifest equal but for the files' SHA-256 (HDF5 stores objects' modification times, so the bytes
#    of two writes differ), and resumed there to iterations 3, 4 with that run's losses bit for bit;
#  - an etp 1 checkpoint (dp 4 ep 2, read as etp 1 from a manifest without the key) resharded to
#    dp 4 etp 2 ep 2 and resumed: iterations 3, 4 within 1e-4 relative of the etp 1 run's (the bound
#    moe_etp_mpi.sh and test_moe_etp_layouts.c use for step losses across etp);
#  - the dp 4 etp 2 ep 2 step 2 resharded to etp 1 (one rank) and resumed: within 1e-4 of the etp 2 run;
#  - ckpt export --format hf of the etp 2 ep 2 checkpoint is the etp 1 reshard's export byte for byte;
#  - refusals, nothing written: etp x ep not dividing tp x dp (etp 4 x ep 2 over dp 4), etp not
#    dividing moe_intermediate_size (etp 4 of 138, a checkpoint of a variant config), each naming
#    --expert-tensor-parallel-size.
# Usage (CTest): bash moe_etp_reshard.sh BUILD_DIR SOURCE_DIR
set -u
build=$1
src=$(cd "$2" && pwd)
# shellcheck source=tests/lib/moe_mpi.sh
source "$src/tests/lib/moe_mpi.sh"
common+=(--lr-decay-iters 4 --deterministic-mode)
etp2=(--expert-tensor-parallel-size 2)

run() { # name ranks flags...: trains into $tmp/name
  local name=$1
  moe_run "$@" || { tail -5 "$tmp/$name.log"; fail "$name"; return 1; }
}

# losses REF GOT WHAT TOL: iterations 3 and 4 of two runs, within TOL relative (0: bit for bit)
losses() {
  $py - "$tmp/$1/metrics.jsonl" "$tmp/$2/metrics.jsonl" "$3" "$4" <<'PY' || fail "$3"
import json, sys
train = lambda p: {r["iter"]: r["loss"] for r in map(json.loads, open(p)) if r.get("kind") == "train"}
a, b, what, tol = train(sys.argv[1]), train(sys.argv[2]), sys.argv[3], float(sys.argv[4])
assert 3 in b and 4 in b and min(b) == 3, sorted(b)
worst = max(abs(a[i] - b[i]) / a[i] for i in (3, 4))
assert worst <= tol, f"{[b[i] for i in (3, 4)]} vs {[a[i] for i in (3, 4)]}: {worst:.3g} relative"
how = "bit for bit" if tol == 0 else f"within {worst:.2g} relative (bound {tol:g})"
print(f"ok   {what}: iterations 3, 4 losses {b[3]!r}, {b[4]!r}, {how}")
PY
}

# reshard_resume NAME RANKS "RESHARD FLAGS" "TRAIN FLAGS" SRC: reshard SRC into $tmp/NAME, resume there to 4
reshard_resume() {
  local name=$1 np=$2 rflags=$3 tflags=$4 srcck=$5
  # shellcheck disable=SC2086
  "$bin/ckpt" reshard --quiet $rflags "$srcck" "$tmp/$name" > "$tmp/reshard_$name.log" 2>&1 ||
    { tail -3 "$tmp/reshard_$name.log"; fail "reshard $name"; return 1; }
  # shellcheck disable=SC2086
  run "resume_$name" "$np" --train-iters 4 --load "$tmp/$name" $tflags
}

run e1 4 --train-iters 4 --save-interval 2 --expert-model-parallel-size 2
run a 2 --train-iters 4 --save-interval 2 "${etp2[@]}"
run b 4 --train-iters 4 --save-interval 2 "${etp2[@]}" --expert-model-parallel-size 2
$py - "$tmp/a/metrics.jsonl" "$tmp/b/metrics.jsonl" <<'PY' || fail "dp 4 etp 2 ep 2 against dp 2 etp 2"
import json, sys
train = lambda p: [r["loss"] for r in map(json.loads, open(p)) if r.get("kind") == "train"]
a, b = train(sys.argv[1]), train(sys.argv[2])
assert len(a) == 4 and a == b, (a, b)
print(f"ok   dp 4 etp 2 ep 2 on 4 ranks: dp 2 etp 2's 4 losses bit for bit ({a[0]:.6f} -> {a[-1]:.6f})")
PY
"$bin/ckpt" inspect "$tmp/b" 2>&1 | grep -q "expert parallel 2, expert tensor parallel 2" &&
  echo "ok   ckpt inspect: expert parallel 2, expert tensor parallel 2" || fail "ckpt inspect does not name the etp"
grep -q '"expert_tensor_parallel_size":[[:space:]]*2' "$tmp/b/iter_0000002/manifest.json" &&
  ! grep -q expert_tensor_parallel_size "$tmp/e1/iter_0000002/manifest.json" &&
  echo "ok   the manifest records expert_tensor_parallel_size 2 (an etp 1 manifest: no key, as before)" ||
  fail "the manifest's expert_tensor_parallel_size"

# etp 2 -> etp 2 at another layout: the files the training run wrote, the run's losses
if reshard_resume a_to_b 4 "--data-parallel-size 4 ${etp2[*]} --expert-model-parallel-size 2" \
     "${etp2[*]} --expert-model-parallel-size 2" "$tmp/a/iter_0000002"; then
  losses b resume_a_to_b "dp 2 etp 2 resharded to dp 4 etp 2 ep 2, resumed" 0
  n=0
  for f in "$tmp"/b/iter_0000002/*.h5; do
    n=$((n + 1))
    g="$tmp/a_to_b/iter_0000002/$(basename "$f")"
    h5diff -q "$f" "$g" > /dev/null 2>&1 && h5diff -q "$g" "$f" > /dev/null 2>&1 ||
      fail "reshard to dp 4 etp 2 ep 2: $(basename "$f") differs from the run's"
  done
  got=$(cd "$tmp/a_to_b/iter_0000002" && ls ./*.h5 | wc -l)
  [ "$n" -ge 9 ] && [ "$got" -eq "$n" ] &&
    echo "ok   the reshard's $n HDF5 files hold the dp 4 etp 2 ep 2 run's step 2 (h5diff both ways: every tensor and attribute; $(cd "$tmp/b/iter_0000002" && ls model_*.h5 | tr '\n' ' '))" ||
    fail "the reshard wrote $got HDF5 files, the run $n"
  # the manifests: equal but for the files' SHA-256 (HDF5 stores each object's modification time)
  diff <(grep -v '"sha256"' "$tmp/b/iter_0000002/manifest.json") <(grep -v '"sha256"' "$tmp/a_to_b/iter_0000002/manifest.json") &&
    echo "ok   the reshard's manifest is the run's (the files' SHA-256 aside)" || fail "the reshard's manifest differs from the run's"
fi
# etp 1 -> etp 2
reshard_resume e1_to_b 4 "--data-parallel-size 4 ${etp2[*]} --expert-model-parallel-size 2" "${etp2[*]} --expert-model-parallel-size 2" "$tmp/e1/iter_0000002" &&
  losses e1 resume_e1_to_b "etp 1 (dp 4 ep 2) resharded to dp 4 etp 2 ep 2, resumed" 1e-4
grep -q "ep 2, etp 1, ZeRO 0) to tp 1 x pp 1 x dp 4, ep 2, etp 2" "$tmp/reshard_e1_to_b.log" &&
  echo "ok   reshard read etp 1 from a manifest without expert_tensor_parallel_size" || fail "reshard's source etp"
# etp 2 -> etp 1 on one rank
reshard_resume b_to_one 1 "--data-parallel-size 1 --expert-model-parallel-size 1 --expert-tensor-parallel-size 1" "" \
  "$tmp/b/iter_0000002" && losses b resume_b_to_one "dp 4 etp 2 ep 2 resharded to one rank (etp 1), resumed" 1e-4

# the Hugging Face export of the etp 2 ep 2 checkpoint against the etp 1 reshard's (the same weights)
moe_same_hf_export "$tmp/b/iter_0000002" "the etp 2 ep 2 checkpoint" "$tmp/b_to_one/iter_0000002" \
  "the etp 1 reshard"

moe_reshard_refuse "etp 4 x ep 2 over dp 4" "--expert-tensor-parallel-size 4 x --expert-model-parallel-size 2 = 8 does not divide" \
  "$tmp/b" --data-parallel-size 4 --expert-tensor-parallel-size 4
# a variant whose experts are 138 wide (2 x 69): etp 2 divides it, etp 4 does not
$py -c "import json,sys; c=json.load(open('models/moe-tiny-byte.json')); c['intermediate_size']=138; json.dump(c,open(sys.argv[1],'w'))" \
  "$tmp/i138.json"
if moe_run i138 1 --train-iters 1 --save-interval 1 --config "$tmp/i138.json"; then
  moe_reshard_refuse "etp 4 of moe_intermediate_size 138" "moe_intermediate_size 138 must divide by it" \
    "$tmp/i138" --data-parallel-size 4 --expert-tensor-parallel-size 4
else
  tail -3 "$tmp/i138.log"; fail "the 138-wide variant"
fi

moe_done moe_etp_reshard
