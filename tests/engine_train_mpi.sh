#!/usr/bin/env bash
# tests/engine_train_mpi.sh BUILD_DIR SOURCE_DIR - engine_train under mpirun with tensor parallelism.
#
# A tp = 2 run (and tp = 2 with sequence parallelism) trains and reports the same first loss as
# tp = 1; a cp = 2 run the same losses within 1e-4; with --deterministic-mode runs differing in pp, dp
# and ZeRO stage log identical numbers; layouts the model or world size cannot take are refused by
# every rank with the same message and a non-zero exit, before any collective (no rank hangs);
# compressed dp reductions overlapped with the backward give the numbers of the blocking ones.
set -u
build=$1
src=$2
bin="$build/bin/engine_train"
source "$src/tests/lib/mpirun_flags.sh"
source "$src/tests/lib/sections.sh"
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
failures=0
cd "$src"
[ -f data/fortunes_byte_train.bin ] || { echo "FAIL: data/fortunes_byte_*.bin missing (tools/prepare_fortunes.sh)"; exit 1; }
run=(--config models/gpt2-tiny-byte.json --micro-batch-size 4 --seq-length 32 --train-iters 3
     --eval-iters 1 --sample-length 8 --save-dir "$tmp/run")

first_loss() { grep -m1 -oE 'iter +1/[0-9]+ \| loss [0-9.]+' <<<"$1" | awk '{print $NF}'; }

if section tensor_parallel || section pipeline_schedules; then
  one=$("$bin" "${run[@]}" --threads 1 2>&1) || { echo "FAIL tp=1 run:"; echo "$one" | tail -5; exit 1; }
  want=$(first_loss "$one")
fi
if section tensor_parallel; then
  for extra in "" "--sequence-parallel"; do
    out=$(mpirun "${mpirun_flags[@]}" -np 2 "$bin" "${run[@]}" --tensor-model-parallel-size 2 $extra 2>&1)
    rc=$?
    got=$(first_loss "$out")
    if [ $rc -ne 0 ] || [ -z "$got" ] || ! grep -q "trained 3 iterations" <<<"$out"; then
      echo "FAIL tp=2 $extra: status $rc"; echo "$out" | tail -8; failures=$((failures + 1))
    elif [ "$got" != "$want" ]; then
      echo "FAIL tp=2 $extra: first loss $got, tp=1 gave $want"; failures=$((failures + 1))
    else
      echo "ok   tp=2 $extra: first loss $got = tp=1's"
    fi
  done
fi

# pipeline: tp 2 x pp 2 (4 ranks) on the same global batch of 4 sequences in micro-batches of 2
if section pipeline_schedules; then
  for schedule in 1f1b gpipe; do
    out=$(mpirun "${mpirun_flags[@]}" -np 4 "$bin" "${run[@]}" --tensor-model-parallel-size 2 \
          --pipeline-model-parallel-size 2 --micro-batch-size 2 --global-batch-size 4 --pipeline-schedule $schedule 2>&1)
    rc=$?
    got=$(first_loss "$out")
    if [ $rc -ne 0 ] || ! grep -q "trained 3 iterations" <<<"$out" || [ "$got" != "$want" ]; then
      echo "FAIL tp=2 pp=2 $schedule: status $rc, first loss '$got' (tp=1: $want)"; echo "$out" | tail -8
      failures=$((failures + 1))
    else
      echo "ok   tp=2 pp=2 $schedule: first loss $got = tp=1's; $(grep -c '^  stage' <<<"$out") stages placed"
    fi
  done
fi

# context parallelism: cp 2 (2 ranks, each sequence in 4 chunks of 64 rows) against one rank on the
# same sequences: every iteration's loss within 1e-4 relative (the bound of tests/cp_mpi.sh: the cp
# ranks' gradients summed in another grouping), the layout and context-parallel lines, and a
# validation at iteration 2 in the middle of the run (--eval-interval 2)
if section context_parallel; then
  cp_run=("${run[@]}" --seq-length 256 --micro-batch-size 1 --eval-interval 2)
  if "$bin" "${cp_run[@]}" --threads 1 --save-dir "$tmp/cp1" > "$tmp/cp1.log" 2>&1 &&
     mpirun "${mpirun_flags[@]}" -np 2 "$bin" "${cp_run[@]}" --context-parallel-size 2 --save-dir "$tmp/cp2" \
       > "$tmp/cp2.log" 2>&1; then
    if grep -q "^layout: 2 ranks = tp 1 x cp 2 x pp 1" "$tmp/cp2.log" &&
       grep -q "^context parallel: cp 2 (--cp-comm-type p2p), each sequence in 4 chunks of 64 tokens" "$tmp/cp2.log" &&
       grep -q "^validation at iteration 2:" "$tmp/cp2.log" &&
       /usr/bin/python3 - "$tmp/cp1/metrics.jsonl" "$tmp/cp2/metrics.jsonl" <<'PY'; then
import json, sys
rows = lambda p: [r["loss"] for r in map(json.loads, open(p)) if r.get("kind") == "train"]
a, b = rows(sys.argv[1]), rows(sys.argv[2])
assert len(a) == len(b) == 3, (a, b)
worst = max(abs(x - y) / x for x, y in zip(a, b))
assert worst <= 1e-4, f"losses differ by {worst:.3g}: {a} vs {b}"
PY
      echo "ok   cp=2: 3 losses within 1e-4 of one rank's, the context-parallel line, a validation at iteration 2"
    else
      echo "FAIL cp=2: lines or losses"; tail -8 "$tmp/cp2.log"; failures=$((failures + 1))
    fi
  else
    echo "FAIL cp=2 (or its one-rank reference) did not train"; tail -5 "$tmp/cp1.log" "$tmp/cp2.log"
    failures=$((failures + 1))
  fi
fi

# deterministic mode: runs that differ in pp, dp and ZeRO stage log the same losses and grad norms
# to the last bit (metrics.jsonl holds them at full double precision): 1 rank = pp2 x dp2 ZeRO-3,
# and tp2 = tp2 x pp2 x dp2 ZeRO-3 (tp changes how each matmul splits its sums, so tp runs are
# compared with a tp run of the same size)
det=(--config models/gpt2-tiny-byte.json --micro-batch-size 2 --seq-length 32 --train-iters 3
     --global-batch-size 8 --eval-iters 1 --sample-length 0 --deterministic-mode)
numbers() { grep -oE '"(iter|loss|val_loss|grad_norm)":[-0-9.e+]+' "$1/metrics.jsonl" | tr '\n' ' '; }
det_run() { # NAME NP FLAGS...
  local name=$1 np=$2
  shift 2
  mpirun "${mpirun_flags[@]}" -np "$np" "$bin" "${det[@]}" --save-dir "$tmp/$name" "$@" >"$tmp/$name.log" 2>&1 ||
    { echo "FAIL deterministic $name: status $?"; tail -5 "$tmp/$name.log"; failures=$((failures + 1)); }
}
det_same() { # A B
  local a b
  a=$(numbers "$tmp/$1"); b=$(numbers "$tmp/$2")
  if [ -z "$a" ] || [ "$a" != "$b" ]; then
    echo "FAIL deterministic: $1 and $2 differ"; echo "  $1: $a"; echo "  $2: $b"; failures=$((failures + 1))
  else
    echo "ok   deterministic: $1 and $2 log identical numbers: $a"
  fi
}
if section deterministic_layouts; then
  det_run one 1
  det_run pp2dp2z3 4 --pipeline-model-parallel-size 2 --zero-stage 3
  det_run tp2 2 --tensor-model-parallel-size 2
  det_run tp2pp2dp2z3 8 --tensor-model-parallel-size 2 --pipeline-model-parallel-size 2 --zero-stage 3
  det_same one pp2dp2z3
  det_same tp2 tp2pp2dp2z3
fi

# compressed reductions overlapped with the backward (--overlap-grad-reduce, engine/train/zero.c
# start_compressed): on 2 real MPI ranks (dp 2) the same losses, gradient norms and dp_bytes as the
# reduction at the end of the backward. Bit for bit by design: 1bit's two-phase exchange is p2p and
# all-gathers, and PowerSGD's all-reduces at dp 2 add two numbers, in either order the same bits
# (MPI_Iallreduce may choose another algorithm than MPI_Allreduce). Iteration 1 is PowerSGD's plain
# one, overlapped as without a compressor. A section per compressor.
train_numbers() { /usr/bin/python3 -c '
import json, sys
for r in map(json.loads, open(sys.argv[1])):
    if r.get("kind") == "train":
        print(r["iter"], repr(r["loss"]), repr(r["grad_norm"]), r["dp_bytes"])' "$1"; }
compressed_overlap() { # compressor and its flags, as words
  local kind=$1 name=${1%% *} ok ovl a b
  ok=1
  for ovl in "" "--overlap-grad-reduce"; do
    # shellcheck disable=SC2086 # the flags as words
    mpirun "${mpirun_flags[@]}" -np 2 "$bin" "${run[@]}" --global-batch-size 8 --grad-compression $kind $ovl \
      --save-dir "$tmp/ovl-$name${ovl:+-on}" > "$tmp/ovl-$name${ovl:+-on}.log" 2>&1 ||
      { echo "FAIL compressed overlap $name $ovl: status $?"; tail -5 "$tmp/ovl-$name${ovl:+-on}.log"; ok=0; }
  done
  a=$(train_numbers "$tmp/ovl-$name/metrics.jsonl" 2>&1); b=$(train_numbers "$tmp/ovl-$name-on/metrics.jsonl" 2>&1)
  if [ $ok -eq 1 ] && [ "$(wc -l <<<"$a")" -eq 3 ] && [ "$a" = "$b" ]; then
    echo "ok   compressed overlap $name: the same losses, gradient norms and dp_bytes with --overlap-grad-reduce: $(tr '\n' ';' <<<"$b")"
  else
    echo "FAIL compressed overlap $name: without overlap"; echo "$a"; echo "  with:"; echo "$b"; failures=$((failures + 1))
  fi
}
if section compressed_overlap_1bit; then
  compressed_overlap "1bit --grad-compression-reduce two-phase --zero-stage 1"
fi
if section compressed_overlap_powersgd; then
  compressed_overlap "powersgd --powersgd-start-iter 1"
fi

# refuse NAME NP TEXT [flags]: the job exits non-zero on its own with TEXT printed once (every rank
# reaches the verdict without communicating; rank 0 reports it). "On its own", not "within N s",
# so the check does not depend on the machine's speed: a rank left waiting in a collective would
# hang until mpirun's --timeout (300 s here) kills the job, which the check recognises.
refuse() {
  local name=$1 np=$2 want=$3
  shift 3
  local start=$SECONDS out rc count hung=""
  out=$(mpirun "${mpirun_flags[@]}" -np "$np" "$bin" "${run[@]}" "$@" 2>&1)
  rc=$?
  count=$(grep -cF -- "$want" <<<"$out")
  grep -q "time limit for job execution has been reached" <<<"$out" && hung=" (hung: killed by mpirun's --timeout)"
  if [ $rc -eq 0 ] || [ "$count" -ne 1 ] || [ -n "$hung" ]; then
    echo "FAIL $name: status $rc, message printed $count times (expected once), $((SECONDS - start)) s$hung"
    echo "$out" | head -8
    failures=$((failures + 1))
  else
    echo "ok   $name: $np ranks, once: '$(grep -m1 -F -- "$want" <<<"$out")'"
  fi
}
if section layout_refusals; then
  printf '{"n_layer": 2, "n_head": 3, "n_embd": 48, "vocab_size": 257, "n_positions": 64}' > "$tmp/nh3.json"
  refuse "world not divisible by tp" 3 "--tensor-model-parallel-size 2 does not divide the 3 ranks" --tensor-model-parallel-size 2
  refuse "n_head not divisible" 2 "--tensor-model-parallel-size 2 does not divide n_head 3" --tensor-model-parallel-size 2 --config "$tmp/nh3.json"
  # (n_embd not divisible by tp cannot occur once n_head divides both n_embd and tp; the config check
  #  refuses n_embd % n_head != 0 first)
  refuse "seq-length with SP" 2 "--sequence-parallel needs --seq-length 31 divisible by --tensor-model-parallel-size 2" --tensor-model-parallel-size 2 --sequence-parallel --seq-length 31
  refuse "n_layer < pp" 8 "--pipeline-model-parallel-size 8 exceeds n_layer 4" --pipeline-model-parallel-size 8
  refuse "global batch not divisible" 2 "--global-batch-size 6 is not a multiple of --micro-batch-size 4 x data-parallel size 2" --global-batch-size 6
  refuse "interleaved layers not divisible" 2 "--num-layers-per-virtual-pipeline-stage 3: n_layer 4 must divide by --pipeline-model-parallel-size 2" --pipeline-model-parallel-size 2 --pipeline-schedule interleaved --num-layers-per-virtual-pipeline-stage 3 --global-batch-size 8
  refuse "interleaved micro-batches" 2 "to be a multiple of --pipeline-model-parallel-size 2" --pipeline-model-parallel-size 2 --pipeline-schedule interleaved --num-layers-per-virtual-pipeline-stage 1 --global-batch-size 12
fi
echo "engine_train_mpi: $failures failure(s)"
exit $((failures > 0))
