#!/usr/bin/env bash
# tests/moe_ep_mpi.sh - expert parallelism under real MPI (docs/moe.md "Expert parallelism in the
# engine"): engine_train trains the tiny byte-level MoE (models/moe-tiny-byte.json, 8 experts, top-2)
# for 4 iterations on 4 Open MPI ranks with --expert-model-parallel-size 4 (dp 4, each rank 2 experts)
# and on 1 rank with the same global batch (4 micro-batches), and compares:
#  - every iteration's loss within 1e-4 relative (the bound of tests/test_moe_ep_layouts.c: the ranks'
#    fp32 gradients are summed in another grouping than one rank's accumulation, each a few ulps);
#  - metrics.jsonl: ep_bytes > 0 on the 4-rank run and 0 on one rank; the expert-parallel group's
#    blocked time ep_s is reported;
#  - ZeRO 3 over the expert-data-parallel group: 4 ranks ep 2 (edp 2) --zero-stage 3 with
#    --overlap-grad-reduce --overlap-param-gather against one rank, the same bound; a checkpoint saved
#    there after 2 iterations (each rank's ZeRO shards: experts' slices by their edp owner) resumes on
#    1 rank (ZeRO 0) and on 2 ranks ep 2 ZeRO 1 to the uninterrupted run's iteration-4 loss;
#  - ep folded over tp x dp (docs/moe.md "MoE with tensor parallelism"): 4 ranks at
#    --tensor-model-parallel-size 2 --sequence-parallel --expert-model-parallel-size 2 (dp 2; each ep
#    pair is a TP pair) against one rank, the same bound; a checkpoint saved there after 2 iterations
#    resumes on one rank to the uninterrupted run's iteration-4 loss; the same at --zero-stage 3 (the
#    experts sharded over their expert-data-parallel pairs, which span the TP ranks), the same bound;
#  - the refusals: ep with --grad-compression, ep with --local-sgd-steps, tp 2 without
#    --sequence-parallel, ep not dividing tp x dp, each naming its flags (etp > 1: tests/moe_etp_mpi.sh).
# Usage (CTest): bash moe_ep_mpi.sh BUILD_DIR SOURCE_DIR
set -u
build=$1
src=$2
# shellcheck source=tests/lib/moe_mpi.sh
source "$src/tests/lib/moe_mpi.sh"
common+=(--train-iters 4)

moe_run one 1 || { tail -5 "$tmp/one.log"; fail "one rank"; }
moe_run ep4 4 --expert-model-parallel-size 4 || { tail -5 "$tmp/ep4.log"; fail "4 ranks ep 4"; }
tp2ep2=(--tensor-model-parallel-size 2 --sequence-parallel --expert-model-parallel-size 2)
moe_run tp2ep2 4 "${tp2ep2[@]}" || { tail -5 "$tmp/tp2ep2.log"; fail "4 ranks tp 2 sp ep 2"; }
# ZeRO 3 over edp (dp 4 ep 2), with the overlaps
moe_run z3 4 --expert-model-parallel-size 2 --zero-stage 3 --overlap-grad-reduce --overlap-param-gather ||
  { tail -5 "$tmp/z3.log"; fail "4 ranks ep 2 ZeRO 3"; }
# ZeRO 3 at tp 2 sp ep 2: the experts' slices over their edp pairs, which span the TP ranks
moe_run tp2z3 4 "${tp2ep2[@]}" --zero-stage 3 || { tail -5 "$tmp/tp2z3.log"; fail "4 ranks tp 2 sp ep 2 ZeRO 3"; }
for name in ep4 tp2ep2 z3 tp2z3; do moe_against_one "$name"; done
/usr/bin/python3 -c 'import json, sys; r = [json.loads(l) for l in open(sys.argv[1])]; assert all(x["ep_bytes"] == 0 for x in r if x.get("kind") == "train")' \
  "$tmp/one/metrics.jsonl" && echo "ok   one rank: ep_bytes 0" || fail "one rank's ep_bytes"


# checkpoints: saved at ep 4 after 2 iterations (each ep rank's experts in its own model file), resumed
# on 1 rank and at ep 2 on 2 ranks to iteration 4: the last loss within 1e-4 of the uninterrupted run
moe_run save 4 --expert-model-parallel-size 4 --train-iters 2 --save-interval 2 --lr-decay-iters 4 ||
  { tail -5 "$tmp/save.log"; fail "ep 4 save"; }
ls "$tmp/save"/iter_*/model_tp00_pp00_ep003.h5 > /dev/null 2>&1 && echo "ok   ep rank 3 wrote its experts' model file" ||
  fail "no model file of ep rank 3"
for np in 1 2; do
  cp -r "$tmp/save" "$tmp/resume$np"
  moe_run "resume$np" "$np" --expert-model-parallel-size "$np" --load "$tmp/resume$np" --lr-decay-iters 4 ||
    { tail -5 "$tmp/resume$np.log"; fail "resume on $np rank(s)"; continue; }
  moe_run "straight$np" 1 --lr-decay-iters 4 2> /dev/null
  /usr/bin/python3 - "$tmp/straight$np/metrics.jsonl" "$tmp/resume$np/metrics.jsonl" "$np" <<'PY' || fail "resume on $np rank(s) against the uninterrupted run"
import json, sys
last = lambda p: [r for r in map(json.loads, open(p)) if r.get("kind") == "train"][-1]
a, b = last(sys.argv[1]), last(sys.argv[2])
assert a["iter"] == b["iter"] == 4, (a["iter"], b["iter"])
d = abs(a["loss"] - b["loss"]) / a["loss"]
assert d < 1e-4, f"{b['loss']} vs {a['loss']}"
print(f"ok   ep 4 checkpoint resumed at ep {sys.argv[3]}: iteration 4 loss {b['loss']:.6f}, uninterrupted {a['loss']:.6f}")
PY
done

# a ZeRO 3 checkpoint at dp 4 ep 2 resumed on 1 rank (ZeRO 0) and on 2 ranks at ep 2 ZeRO 1
moe_run savez3 4 --expert-model-parallel-size 2 --zero-stage 3 --train-iters 2 --save-interval 2 --lr-decay-iters 4 ||
  { tail -5 "$tmp/savez3.log"; fail "ep 2 ZeRO 3 save"; }
for np in 1 2; do
  cp -r "$tmp/savez3" "$tmp/resumez3_$np"
  zero=$([ "$np" = 1 ] && echo 0 || echo 1)
  moe_run "resumez3_$np" "$np" --expert-model-parallel-size "$np" --zero-stage "$zero" --load "$tmp/resumez3_$np" \
    --lr-decay-iters 4 || { tail -5 "$tmp/resumez3_$np.log"; fail "ZeRO 3 checkpoint resumed on $np rank(s)"; continue; }
  [ -f "$tmp/straight1/metrics.jsonl" ] || moe_run straight1 1 --lr-decay-iters 4 2> /dev/null
  /usr/bin/python3 - "$tmp/straight1/metrics.jsonl" "$tmp/resumez3_$np/metrics.jsonl" "$np" "$zero" <<'PY' || fail "ZeRO 3 checkpoint resumed on $np rank(s) against the uninterrupted run"
import json, sys
last = lambda p: [r for r in map(json.loads, open(p)) if r.get("kind") == "train"][-1]
a, b = last(sys.argv[1]), last(sys.argv[2])
assert a["iter"] == b["iter"] == 4, (a["iter"], b["iter"])
d = abs(a["loss"] - b["loss"]) / a["loss"]
assert d < 1e-4, f"{b['loss']} vs {a['loss']}"
print(f"ok   dp 4 ep 2 ZeRO 3 checkpoint resumed on {sys.argv[3]} rank(s) (ep {sys.argv[3]}, ZeRO {sys.argv[4]}): "
      f"iteration 4 loss {b['loss']:.9f}, uninterrupted {a['loss']:.9f}")
PY
done

# a checkpoint saved at tp 2 sp ep 2 (the experts of ep rank 1 held by TP rank 1) resumes on one rank
moe_run tpsave 4 "${tp2ep2[@]}" --train-iters 2 --save-interval 2 --lr-decay-iters 4 ||
  { tail -5 "$tmp/tpsave.log"; fail "tp 2 sp ep 2 save"; }
ls "$tmp/tpsave"/iter_*/model_tp01_pp00_ep001.h5 > /dev/null 2>&1 &&
  echo "ok   tp 2 sp ep 2: TP rank 1 (ep rank 1) wrote its experts' model file" || fail "no model file of ep rank 1"
cp -r "$tmp/tpsave" "$tmp/tpresume"
if moe_run tpresume 1 --load "$tmp/tpresume" --lr-decay-iters 4 && [ -f "$tmp/straight1/metrics.jsonl" ]; then
  /usr/bin/python3 - "$tmp/straight1/metrics.jsonl" "$tmp/tpresume/metrics.jsonl" <<'PY' || fail "tp 2 sp ep 2 resume against the uninterrupted run"
import json, sys
last = lambda p: [r for r in map(json.loads, open(p)) if r.get("kind") == "train"][-1]
a, b = last(sys.argv[1]), last(sys.argv[2])
assert a["iter"] == b["iter"] == 4, (a["iter"], b["iter"])
d = abs(a["loss"] - b["loss"]) / a["loss"]
assert d < 1e-4, f"{b['loss']} vs {a['loss']}"
print(f"ok   tp 2 sp ep 2 checkpoint resumed on 1 rank: iteration 4 loss {b['loss']:.6f}, uninterrupted {a['loss']:.6f}")
PY
else
  tail -5 "$tmp/tpresume.log"; fail "tp 2 sp ep 2 resume on 1 rank"
fi

moe_refuse "ep with compression" "--expert-model-parallel-size 2 with gradient compression" 2 --expert-model-parallel-size 2 --grad-compression 1bit
moe_refuse "tp 2 without sp" "--tensor-model-parallel-size 2 with a mixture-of-experts model (num_experts 8) needs --sequence-parallel" 4 --expert-model-parallel-size 2 --tensor-model-parallel-size 2
moe_refuse "ep not dividing tp x dp" "--expert-tensor-parallel-size 1 x --expert-model-parallel-size 8 = 8 does not divide a pipeline stage's tp x dp = 2 x 2 = 4 ranks" 4 "${tp2ep2[@]:0:3}" --expert-model-parallel-size 8
moe_refuse "ep with local SGD" "--local-sgd-steps 2 with --expert-model-parallel-size 2" 2 --expert-model-parallel-size 2 --local-sgd-steps 2

moe_done moe_ep_mpi
