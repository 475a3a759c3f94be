#!/usr/bin/env bash
# tests/moe_ep_reshard.sh - `ckpt reshard` across expert parallelism (docs/moe.md "Expert parallelism in
# the engine", Checkpoints) under real MPI: engine_train trains the tiny byte-level MoE
# (models/moe-tiny-byte.json, 8 experts, top-2) in --deterministic-mode (every layout bit-identical to
# one rank, tests/test_moe_ep_layouts.c) at ep 4 on 4 ranks for 4 iterations (one rank's losses bit
# for bit), saving at iteration 2; then
#  - ckpt inspect names the ep; ckpt reshard of step 2 (source ep from the manifest) to pp 2 x dp 2
#    ep 2, to dp 4 ep 2 (edp 2) and to one rank (ep 1); each resumed in its layout to iteration 4 has
#    the uninterrupted one-rank run's losses of iterations 3 and 4 bit for bit;
#  - ckpt merge of the ep 4 checkpoint holds the ep 1 reshard's tensors (h5diff: equal values), and
#    its virtual-dataset index reads the same as the merge (the ep ranks' files included);
#  - ckpt export --format hf of the ep 4 checkpoint is the ep 1 reshard's export byte for byte;
#  - the same with --moe-router-enable-expert-bias, saved at ep 2 on 2 ranks, resharded to ep 1 and
#    resumed (DeepSeek-V3's e_score_correction_bias carried);
#  - bf16 at ep 4 on 4 ranks: one rank's bf16 losses bit for bit, ep_bytes about half the fp32 run's
#    over the same iterations; its step-2 checkpoint resharded to ep 1 resumes to the same losses;
#  - refusals, nothing written: a target ep not dividing num_experts (3 of 8) or the dp (4 over dp 2),
#    each naming --expert-model-parallel-size.
# Usage (CTest): bash moe_ep_reshard.sh BUILD_DIR SOURCE_DIR
set -u
build=$1
src=$(cd "$2" && pwd)
# shellcheck source=tests/lib/moe_mpi.sh
source "$src/tests/lib/moe_mpi.sh"
common+=(--lr-decay-iters 4 --deterministic-mode)

run() { # name ranks flags...
  local name=$1 np=$2
  shift 2
  mpiexec "${mpirun_flags[@]}" -np "$np" "$bin/engine_train" "${common[@]}" "$@" > "$tmp/$name.log" 2>&1 ||
    { tail -5 "$tmp/$name.log"; fail "$name"; return 1; }
}

# same_losses REF GOT WHAT: iterations 3 and 4 of two metrics.jsonl files, bit for bit (17 digits)
same_losses() {
  $py - "$1" "$2" "$3" <<'PY' || fail "$3 against the uninterrupted run"
import json, sys
train = lambda p: {r["iter"]: r["loss"] for r in map(json.loads, open(p)) if r.get("kind") == "train"}
a, b = train(sys.argv[1]), train(sys.argv[2])
assert 3 in b and 4 in b, sorted(b)
assert all(a[i] == b[i] for i in (3, 4)), f"{[b[i] for i in (3, 4)]} vs {[a[i] for i in (3, 4)]}"
print(f"ok   {sys.argv[3]}: iterations 3, 4 losses {b[3]!r}, {b[4]!r}, the uninterrupted run's bit for bit")
PY
}

# reshard_resume NAME RANKS "RESHARD FLAGS" "TRAIN FLAGS" REF SRC: reshard SRC (a run or step directory)
# into $tmp/NAME, resume there in that layout to iteration 4, compare with REF's losses
reshard_resume() {
  local name=$1 np=$2 rflags=$3 tflags=$4 ref=$5 srcck=$6
  # shellcheck disable=SC2086
  "$bin/ckpt" reshard --quiet $rflags "$srcck" "$tmp/$name" > "$tmp/reshard_$name.log" 2>&1 ||
    { tail -3 "$tmp/reshard_$name.log"; fail "reshard $name"; return; }
  # shellcheck disable=SC2086
  run "$name" "$np" --train-iters 4 --load "$tmp/$name" --save-dir "$tmp/$name" $tflags || return
  same_losses "$ref/metrics.jsonl" "$tmp/$name/metrics.jsonl" "$from -> $name"
}

run straight 1 --train-iters 4 --save-dir "$tmp/straight"
run save 4 --train-iters 4 --save-interval 2 --save-dir "$tmp/save" --expert-model-parallel-size 4
step2="$tmp/save/iter_0000002"
from="ep 4 (no reshard)"
same_losses "$tmp/straight/metrics.jsonl" "$tmp/save/metrics.jsonl" "ep 4 on 4 ranks"
"$bin/ckpt" inspect "$step2" 2>&1 | grep -q "expert parallel 4" && echo "ok   ckpt inspect: expert parallel 4" ||
  fail "ckpt inspect does not name the ep"

from="ep 4"
reshard_resume pp2_dp2_ep2 4 "--pipeline-model-parallel-size 2 --data-parallel-size 2 --expert-model-parallel-size 2" \
  "--pipeline-model-parallel-size 2 --expert-model-parallel-size 2" "$tmp/straight" "$step2"
reshard_resume dp4_ep2 4 "--data-parallel-size 4 --expert-model-parallel-size 2" "--expert-model-parallel-size 2" \
  "$tmp/straight" "$step2"
reshard_resume ep1 1 "--expert-model-parallel-size 1" "" "$tmp/straight" "$step2"
grep -q "ep 4, etp 1, ZeRO 0) to tp 1 x pp 2 x dp 2, ep 2, etp 1" "$tmp/reshard_pp2_dp2_ep2.log" &&
  echo "ok   reshard read the source's ep 4 from its manifest" || fail "reshard's source ep"
ls "$tmp/pp2_dp2_ep2"/iter_0000002/model_tp00_pp01_ep001.h5 > /dev/null 2>&1 ||
  fail "the pp 2 x ep 2 reshard wrote no model file for pp rank 1's ep rank 1"

# merge, the index and the HF export of the ep 4 checkpoint against the ep 1 reshard's (both step 2)
"$bin/ckpt" reshard --quiet --expert-model-parallel-size 1 "$step2" "$tmp/one" > /dev/null 2>&1 || fail "reshard to ep 1"
"$bin/ckpt" merge --quiet "$step2" "$tmp/m4.h5" > /dev/null 2>&1 && "$bin/ckpt" merge --quiet "$tmp/one" "$tmp/m1.h5" \
  > /dev/null 2>&1 || fail "ckpt merge of an ep checkpoint"
# (the root's "manifest" attribute names each source's layout: left out)
h5diff -q --exclude-attribute / "$tmp/m4.h5" "$tmp/m1.h5" && h5diff -q --exclude-attribute / "$tmp/m1.h5" "$tmp/m4.h5" &&
  echo "ok   ckpt merge: the ep 4 checkpoint's tensors equal the ep 1 reshard's" || fail "merged ep 4 != merged ep 1"
(cd / && $py "$src/tests/ckpt_check.py" vds "$step2/index.h5" "$tmp/m4.h5") > /dev/null 2>&1 &&
  echo "ok   the ep 4 checkpoint's virtual-dataset index reads as its merge" || fail "ep 4 index.h5"
moe_same_hf_export "$step2" "the ep 4 checkpoint" "$tmp/one" "the ep 1 reshard"

# the expert bias (replicated; carried by reshard), saved at ep 2
bias=(--moe-router-enable-expert-bias --moe-router-bias-update-rate 0.01)
run bstraight 1 --train-iters 4 --save-dir "$tmp/bstraight" "${bias[@]}"
run bsave 2 --train-iters 2 --save-interval 2 --save-dir "$tmp/bsave" --expert-model-parallel-size 2 "${bias[@]}"
from="ep 2 with the bias"
reshard_resume bias_ep1 1 "--expert-model-parallel-size 1" "${bias[*]}" "$tmp/bstraight" "$tmp/bsave"

# bf16 (--bf16: the rows travel in bf16, fp32 master weights and moments): ep 4 on 4 ranks against one
# rank, bit for bit in deterministic mode; its step 2 resharded to ep 1 and resumed; ep_bytes against
# the fp32 ep 4 run's (the token rows half the bytes; the routing differs a little, so a range)
run bf16_straight 1 --train-iters 4 --save-dir "$tmp/bf16_straight" --bf16
run bf16_ep4 4 --train-iters 4 --save-interval 2 --save-dir "$tmp/bf16_ep4" --bf16 --expert-model-parallel-size 4
$py - "$tmp/bf16_straight/metrics.jsonl" "$tmp/bf16_ep4/metrics.jsonl" "$tmp/save/metrics.jsonl" \
  "$tmp/straight/metrics.jsonl" <<'PY' || fail "bf16 ep 4 against one rank"
import json, sys
train = lambda p: [r for r in map(json.loads, open(p)) if r.get("kind") == "train"]
one, ep, f32, f32one = (train(p) for p in sys.argv[1:5])
assert len(one) == len(ep) == 4
assert [r["loss"] for r in one] == [r["loss"] for r in ep], ([r["loss"] for r in one], [r["loss"] for r in ep])
assert [r["loss"] for r in one] != [r["loss"] for r in f32one], "the bf16 run did not round"
ratio = sum(r["ep_bytes"] for r in ep) / sum(r["ep_bytes"] for r in f32)
assert 0.4 < ratio < 0.6, ratio
print(f"ok   bf16 ep 4 on 4 ranks: the 4 losses one rank's bit for bit ({one[0]['loss']:.4f} -> {one[-1]['loss']:.4f}); "
      f"ep_bytes {ep[-1]['ep_bytes']:.0f} per step, {ratio:.3f} of fp32's")
PY
from="bf16 ep 4"
reshard_resume bf16_ep1 1 "--expert-model-parallel-size 1" "--bf16" "$tmp/bf16_straight" "$tmp/bf16_ep4/iter_0000002"

refuse() { # name want flags...
  local name=$1 want=$2
  shift 2
  local out
  out=$("$bin/ckpt" reshard --quiet "$@" "$step2" "$tmp/refused" 2>&1) && { fail "$name: accepted"; return; }
  [ -e "$tmp/refused" ] && fail "$name: wrote $tmp/refused"
  grep -qF -- "$want" <<<"$out" && echo "ok   $name refused: $want" || { echo "$out" | tail -3; fail "$name: message"; }
}
refuse "ep 3 of 8 experts" "--expert-model-parallel-size 3 does not divide num_experts 8" --expert-model-parallel-size 3
refuse "ep 4 over dp 2" "--expert-model-parallel-size 4" --expert-model-parallel-size 4 --data-parallel-size 2

moe_done moe_ep_reshard
