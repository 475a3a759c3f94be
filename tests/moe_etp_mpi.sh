#!/usr/bin/env bash
# tests/moe_etp_mpi.sh - expert tensor parallelism under real MPI (docs/moe.md "Expert tensor
# parallelism"): engine_train trains the tiny byte-level MoE (models/moe-tiny-byte.json, 8 experts of
# width 256, top-2) for 4 iterations and compares with one rank (the same global batch):
#  - 4 ranks --tensor-model-parallel-size 2 --sequence-parallel --expert-tensor-parallel-size 2
#    --expert-model-parallel-size 2 (etp the TP pairs, ep across dp) and 2 ranks dp 2 etp 2 (tp 1, ep 1):
#    every iteration's loss within 1e-4 relative (tests/test_moe_etp_layouts.c's bound), ep_bytes > 0
#    (the etp group's all-gathers and reduce-scatters, and the ep all-to-alls);
#  - a checkpoint saved at dp 2 etp 2 after 2 iterations (each rank's slices as boxes of the Hugging Face
#    tensors, the two etp ranks' model files) resumes on 1 rank (etp 1) to the uninterrupted run's
#    iteration-4 loss within 1e-4;
#  - ZeRO 3 over the expert-data-parallel group with the slices: 4 ranks dp 4 etp 2 --zero-stage 3
#    --overlap-grad-reduce --overlap-param-gather against one rank, the same bound; a checkpoint saved
#    there after 2 iterations resumes on 1 rank (ZeRO 0, etp 1) to the uninterrupted iteration-4 loss;
#  - ckpt reshard of a tp 2 SP etp 2 ep 2 checkpoint to one rank: ckpt merge of both equal (h5diff), and the
#    one-rank checkpoint resumes at dp 2 etp 2 to the uninterrupted iteration-4 loss;
#  - the refusals: etp 3 not dividing the stage's ranks; a reshard of that checkpoint to etp 4 x ep 2
#    over dp 4 (8 not dividing 4), nothing written.
# Every run adds the router z-loss (--moe-z-loss-coeff, through the etp layouts' gradients too); the
# iteration line must show it.
# About 10 s. Usage (CTest): bash moe_etp_mpi.sh BUILD_DIR SOURCE_DIR
set -u
build=$1
src=$2
# shellcheck source=tests/lib/moe_mpi.sh
source "$src/tests/lib/moe_mpi.sh"
source "$src/tests/lib/sections.sh"
common+=(--lr-decay-iters 4 --moe-z-loss-coeff 1e-3)

# the one-rank run every comparison is against
if section layouts || section resume_etp || section resume_zero3 || section reshard; then
  moe_run one 1 --train-iters 4 || { tail -5 "$tmp/one.log"; fail "one rank"; }
  grep -qE "aux [0-9.]+ z [0-9.]+ load" "$tmp/one.log" && echo "ok   the iteration line shows the z-loss" ||
    { grep -m1 "aux" "$tmp/one.log"; fail "no z-loss on the iteration line"; }
fi
if section layouts; then
  moe_run tp2etp2ep2 4 --train-iters 4 --tensor-model-parallel-size 2 --sequence-parallel --expert-tensor-parallel-size 2 \
    --expert-model-parallel-size 2 || { tail -5 "$tmp/tp2etp2ep2.log"; fail "4 ranks tp 2 sp etp 2 ep 2"; }
  moe_run dp2etp2 2 --train-iters 4 --expert-tensor-parallel-size 2 || { tail -5 "$tmp/dp2etp2.log"; fail "2 ranks etp 2"; }
  moe_run z3 4 --train-iters 4 --expert-tensor-parallel-size 2 --zero-stage 3 --overlap-grad-reduce --overlap-param-gather ||
    { tail -5 "$tmp/z3.log"; fail "4 ranks etp 2 ZeRO 3"; }
  for name in tp2etp2ep2 dp2etp2 z3; do moe_against_one "$name"; done
fi

resume_check() { # save-dir-name what: resume on one rank (ZeRO 0, etp 1) to iteration 4
  if moe_run "resume_$1" 1 --train-iters 4 --load "$tmp/$1"; then
    /usr/bin/python3 - "$tmp/one/metrics.jsonl" "$tmp/resume_$1/metrics.jsonl" "$2" <<'PY' || fail "$2 resumed on 1 rank"
import json, sys
def train(p):
    return [r for r in map(json.loads, open(p)) if r.get("kind") == "train"]
a, b, first = train(sys.argv[1])[-1], train(sys.argv[2])[-1], train(sys.argv[2])[0]
assert first["iter"] == 3, f"the resumed run started at iteration {first['iter']}, not 3 (nothing loaded?)"
assert a["iter"] == b["iter"] == 4, (a["iter"], b["iter"])
e = abs(a["loss"] - b["loss"]) / a["loss"]
assert e < 1e-4, f"iteration 4: resumed {b['loss']} vs uninterrupted {a['loss']}"
print(f"ok   {sys.argv[3]} resumed on 1 rank: iteration 4 loss {b['loss']:.9f}, uninterrupted {a['loss']:.9f}")
PY
  else
    tail -5 "$tmp/resume_$1.log"; fail "$2 resume on 1 rank"
  fi
}

# a checkpoint saved at dp 2 etp 2 after 2 iterations, resumed on one rank
if section resume_etp; then
  moe_run save 2 --train-iters 2 --save-interval 2 --expert-tensor-parallel-size 2 || { tail -5 "$tmp/save.log"; fail "etp 2 save"; }
  ls "$tmp/save"/iter_*/model_tp00_pp00_ep001.h5 > /dev/null 2>&1 && echo "ok   etp rank 1 wrote its slices' model file" ||
    fail "no model file of etp rank 1"
  resume_check save "dp 2 etp 2 checkpoint"
fi
# one saved at dp 4 etp 2 with ZeRO 3, the same
if section resume_zero3; then
  moe_run savez3 4 --train-iters 2 --save-interval 2 --expert-tensor-parallel-size 2 --zero-stage 3 ||
    { tail -5 "$tmp/savez3.log"; fail "etp 2 ZeRO 3 save"; }
  resume_check savez3 "dp 4 etp 2 ZeRO 3 checkpoint"
fi

# ckpt reshard of a tp 2 SP etp 2 ep 2 checkpoint to one rank (the slices joined by box): its merge holds
# the source's tensors, and it resumes at dp 2 etp 2 (the engine cuts the slices by box on load)
if section reshard; then
  moe_run savetp 4 --train-iters 2 --save-interval 2 --tensor-model-parallel-size 2 --sequence-parallel \
    --expert-tensor-parallel-size 2 --expert-model-parallel-size 2 || { tail -5 "$tmp/savetp.log"; fail "tp 2 etp 2 ep 2 save"; }
  if "$bin/ckpt" reshard --quiet --tensor-model-parallel-size 1 --expert-model-parallel-size 1 --data-parallel-size 1 \
       "$tmp/savetp/iter_0000002" "$tmp/onetp" > "$tmp/reshard.log" 2>&1 &&
     "$bin/ckpt" merge --quiet "$tmp/savetp/iter_0000002" "$tmp/m_etp.h5" > /dev/null 2>&1 &&
     "$bin/ckpt" merge --quiet "$tmp/onetp/iter_0000002" "$tmp/m_one.h5" > /dev/null 2>&1; then
    h5diff -q --exclude-attribute / "$tmp/m_etp.h5" "$tmp/m_one.h5" && h5diff -q --exclude-attribute / "$tmp/m_one.h5" "$tmp/m_etp.h5" &&
      echo "ok   ckpt reshard of a tp 2 etp 2 ep 2 checkpoint to one rank: the merged tensors equal" ||
      fail "the resharded checkpoint's tensors differ from the etp checkpoint's"
    grep -q "does not fold into tp x dp = 1 x 1 over ep 1: resharding to etp 1" "$tmp/reshard.log" &&
      echo "ok   reshard without --expert-tensor-parallel-size: the checkpoint's etp 2 does not fold into one rank, etp 1" ||
      fail "reshard's note on the checkpoint's etp"
    moe_run resume_onetp 2 --train-iters 4 --load "$tmp/onetp" --expert-tensor-parallel-size 2 ||
      { tail -5 "$tmp/resume_onetp.log"; fail "the resharded checkpoint at dp 2 etp 2"; }
    cp "$tmp/resume_onetp/metrics.jsonl" "$tmp/onetp.metrics" 2> /dev/null
    /usr/bin/python3 - "$tmp/one/metrics.jsonl" "$tmp/onetp.metrics" <<'PY' || fail "one-rank reshard resumed at dp 2 etp 2"
import json, sys
train = lambda p: [r for r in map(json.loads, open(p)) if r.get("kind") == "train"]
a, b = train(sys.argv[1])[-1], train(sys.argv[2])
assert b[0]["iter"] == 3 and b[-1]["iter"] == 4, [r["iter"] for r in b]
e = abs(a["loss"] - b[-1]["loss"]) / a["loss"]
assert e < 1e-4, f"{b[-1]['loss']} vs {a['loss']}"
print(f"ok   the one-rank reshard resumed at dp 2 etp 2: iteration 4 loss {b[-1]['loss']:.9f}, uninterrupted {a['loss']:.9f}")
PY
  else
    tail -3 "$tmp/reshard.log"; fail "ckpt reshard / merge of an etp checkpoint"
  fi

  # a target layout the checkpoint's experts cannot take is refused before anything is written (as
  # moe_etp_reshard.sh's dp-only source; here the tp 2 SP etp 2 ep 2 one, whose ep 2 the target keeps)
  moe_reshard_refuse "reshard to etp 4 x ep 2 over dp 4" \
    "--expert-tensor-parallel-size 4 x --expert-model-parallel-size 2 = 8 does not divide" \
    "$tmp/savetp/iter_0000002" --tensor-model-parallel-size 1 --data-parallel-size 4 --expert-tensor-parallel-size 4
fi

if section etp_refusal; then
  moe_refuse "etp 3 on 4 ranks" "--expert-tensor-parallel-size 3" 4 --expert-tensor-parallel-size 3
fi

moe_done moe_etp_mpi
