# shellcheck shell=bash
# tests/lib/resume_losses.sh - sourced by ckpt_cli.sh and llama_cli.sh, whose runs train 6 iterations
# and save at 3: the losses of iterations 4-6 and their comparison after a resume elsewhere.
#
# Needs py (python3), bin (the build's bin/), run (the engine_train command), mpirun (the mpirun
# command with its flags) and a fail function.
#   losses DIR                 DIR's iterations 4-6 losses (metrics.jsonl), one per line, every digit
#   close A B                  prints the largest relative difference of two such files; non-zero
#                              above 1e-5 (the ranks' sums grouped otherwise)
#   save_run DIR [FLAGS...]    the saving run: tp 2 x pp 2 on 4 ranks with the flags, saves at 3 and
#                              6, losses in DIR.losses
#   resume SRC DST NP FLAGS... DST starts from a copy of SRC's step 3 and trains on NP ranks with the
#                              flags; losses in DST.losses
#   same_losses SRC DST WHAT   DST's losses of iterations 4-6 are SRC's, bit for bit
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

save_run() {
  local dir=$1 out
  shift
  out=$("${mpirun[@]}" -np 4 "${run[@]}" --tensor-model-parallel-size 2 --pipeline-model-parallel-size 2 \
        --save-dir "$dir" --save-interval 3 "$@" 2>&1) || { echo "$out" | tail -5; fail "the saving run $*"; }
  losses "$dir" > "$dir.losses"
  [ "$(cat "$dir/latest" 2>/dev/null)" = iter_0000006 ] || fail "$dir: latest is not iter_0000006"
}

resume() {
  local from=$1 dst=$2 np=$3
  shift 3
  mkdir -p "$dst" && echo iter_0000003 > "$dst/latest" && cp -r "$from/iter_0000003" "$dst/"
  "${mpirun[@]}" -np "$np" "${run[@]}" --save-dir "$dst" --load "$dst" "$@" > "$dst.log" 2>&1 ||
    { tail -5 "$dst.log"; fail "resume into $dst ($*)"; }
  losses "$dst" > "$dst.losses"
}

same_losses() {
  if cmp -s "$1.losses" "$2.losses" && [ -s "$2.losses" ]; then
    echo "ok   $3: losses of iterations 4-6 bit-identical"
  else
    fail "$3: $(tr '\n' ' ' < "$2.losses") vs $(tr '\n' ' ' < "$1.losses")"
  fi
}

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
