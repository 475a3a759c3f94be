# shellcheck shell=bash
# tests/lib/resume_losses.sh - sourced by ckpt_cli.sh and llama_cli.sh, whose runs train 6 iterations
# and save at 3: the losses of iterations 4-6 and their comparison after a resume elsewhere.
#
# Needs py (python3), bin (the build's bin/), run (the engine_train command), mpirun (the mpirun
# command with its flags) and a fail function.
#   losses DIR                 DIR's iterations 4-6 losses (metrics.jsonl), one per line, every digit
#   close A B                  prints the largest relative difference of two such files; non-zero
#                              above 1e-5 (the ranks' sums grouped otherwise)
#   reshard_resume SRC DST     `ckpt reshard` of SRC's step 3 to tp 1 x dp 2 (ZeRO 1) into DST, resumed
#                              on 2 ranks: iterations 4-6 within 1e-5 of SRC's (SRC.losses)

losses() { $py -c "
import json,sys
for l in open(sys.argv[1]):
    o=json.loads(l)
    if o['kind']=='train' and o['iter']>3: print(repr(o['loss']))" "$1/metrics.jsonl"; }
close() { $py -c "
import sys
a=[float(x) for x in open(sys.argv[1])]; b=[float(x) for x in open(sys.argv[2])]
assert len(a)==len(b)==3, (a, b)
d=max(abs(x-y)/abs(y) for x,y in zip(a,b)); print('%.3g' % d); sys.exit(0 if d<=1e-5 else 1)" "$1" "$2"; }

reshard_resume() {
  local from=$1 dst=$2 out d
  "$bin/ckpt" reshard --quiet --tensor-model-parallel-size 1 --pipeline-model-parallel-size 1 --data-parallel-size 2 \
    --zero-stage 1 "$from/iter_0000003" "$dst" > "$dst.reshard.log" 2>&1 ||
    { cat "$dst.reshard.log"; fail "ckpt reshard"; return; }
  out=$("${mpirun[@]}" -np 2 "${run[@]}" --save-dir "$dst" --load "$dst" 2>&1) ||
    { echo "$out" | tail -5; fail "resume after reshard"; }
  losses "$dst" > "$dst.losses"
  d=$(close "$dst.losses" "$from.losses") && echo "ok   ckpt reshard to tp 1 x dp 2, ZeRO 1: losses within $d" \
    || fail "after ckpt reshard: losses differ by $d"
}
