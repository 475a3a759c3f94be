#!/usr/bin/env bash
# tests/cp_mpi.sh - context parallelism under real MPI (docs/context_parallel.md, "cp in the training
# engine"): engine_train trains a small byte-level GPT-2 (2 layers, 4 heads, width 64) and the tiny
# Llama (grouped-query attention, rotary positions) for 5 iterations at seq-length 512 on the fortunes
# data, on 1 rank and on 4 Open MPI ranks at
#   --context-parallel-size 2 --tensor-model-parallel-size 2 (chunks of 128 tokens; with
#     --sequence-parallel for the Llama) and --context-parallel-size 4 (chunks of 64 tokens),
# with --cp-comm-type all_gather and the same global batch, and compares:
#  - every iteration's loss and the validation loss within 1e-4 relative (the bound of
#    tests/test_cp_layouts.c: the ranks' fp32 gradients are summed in another grouping, a few ulps each;
#    a wrong chunk or a loss scaled by the local token count moves the first loss by 4e-4 or more);
#  - the data-parallel line counts the gradient traffic over dp x cp (> 0 MB at cp 4, dp 1);
#  - deterministic mode at cp 2 x dp 2 against cp 2 alone: the same losses to the last printed digit of
#    metrics.jsonl (the fixed-point sums over dp x cp);
#  - the Llama at cp 4 with the p2p ring (--cp-comm-type p2p, the default) within the same bound;
#  - the refusals before any communication: cp with --grad-compression, cp with --local-sgd-steps, cp with --save-interval
#    (checkpoints under cp are not built), each naming its flags.
# Usage (CTest): bash cp_mpi.sh BUILD_DIR SOURCE_DIR
set -u
build=$1
src=$2
bin="$build/bin"
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
cd "$src" || exit 1
# shellcheck source=tests/lib/mpirun_flags.sh
source "$src/tests/lib/mpirun_flags.sh"
export OMP_NUM_THREADS=1
failures=0
fail() { echo "FAIL $1"; failures=$((failures + 1)); }
data=data/fortunes_byte_train.bin
[ -f "$data" ] || { echo "SKIP: $data missing (bash tools/trident.sh data)"; exit 0; }
echo '{"model_type": "gpt2", "n_layer": 2, "n_head": 4, "n_embd": 64, "vocab_size": 257, "n_positions": 512}' \
  > "$tmp/gpt.json"
echo '{"model_type": "llama", "hidden_size": 64, "intermediate_size": 128, "num_attention_heads": 4,
       "num_key_value_heads": 2, "num_hidden_layers": 2, "vocab_size": 257, "max_position_embeddings": 512,
       "rms_norm_eps": 1e-5, "tie_word_embeddings": false}' > "$tmp/llama.json"
common=(--train-data "$data" --val-data data/fortunes_byte_val.bin --seq-length 512 --micro-batch-size 1
        --global-batch-size 2 --train-iters 5 --eval-iters 1 --eval-interval 5 --sample-length 0 --threads 1
        --lr 3e-3 --log-interval 1)

run() { # name ranks config flags...: trains into $tmp/name (log $tmp/name.log)
  local name=$1 np=$2 cfg=$3
  shift 3
  mpiexec "${mpirun_flags[@]}" -np "$np" "$bin/engine_train" --config "$tmp/$cfg.json" "${common[@]}" \
    --save-dir "$tmp/$name" "$@" > "$tmp/$name.log" 2>&1 || { tail -5 "$tmp/$name.log"; fail "$name"; }
}

against() { # ref name bound
  /usr/bin/python3 - "$tmp/$1/metrics.jsonl" "$tmp/$2/metrics.jsonl" "$2" "$3" <<'PY' || fail "$2 against $1"
import json, sys
rows = lambda p, k, f: [r[f] for r in map(json.loads, open(p)) if r.get("kind") == k]
ref, got, bound = rows(sys.argv[1], "train", "loss"), rows(sys.argv[2], "train", "loss"), float(sys.argv[4])
assert len(ref) == len(got) == 5, (len(ref), len(got))
worst = max(abs(a - b) / a for a, b in zip(ref, got))
assert worst <= bound, f"losses differ by {worst:.3g}: {ref} vs {got}"
v1, v2 = rows(sys.argv[1], "eval", "val_loss"), rows(sys.argv[2], "eval", "val_loss")
assert v1 and len(v1) == len(v2) and abs(v1[-1] - v2[-1]) <= bound * v1[-1], (v1, v2)
print(f"ok   {sys.argv[3]}: 5 losses within {worst:.2g} of the reference's ({ref[0]:.4f} -> {ref[-1]:.4f}), "
      f"validation {v2[-1]:.4f}")
PY
}

refuse() { # name want ranks flags...
  local name=$1 want=$2 np=$3
  shift 3
  local out
  out=$(mpiexec "${mpirun_flags[@]}" -np "$np" "$bin/engine_train" --config "$tmp/gpt.json" "${common[@]}" \
        --train-iters 1 "$@" 2>&1) && { fail "$name: accepted"; return; }
  grep -qF -- "$want" <<<"$out" && echo "ok   $name refused: $want" || { echo "$out" | tail -3; fail "$name: message"; }
}

ag=(--cp-comm-type all_gather)
run gpt_one 1 gpt
run gpt_cp2_tp2 4 gpt --context-parallel-size 2 --tensor-model-parallel-size 2 "${ag[@]}"
run gpt_cp4 4 gpt --context-parallel-size 4 "${ag[@]}"
against gpt_one gpt_cp2_tp2 1e-4
against gpt_one gpt_cp4 1e-4
grep -qE "traffic: (0\.0*[1-9]|[1-9])[0-9.]* MB sent by rank 0 over dp x cp" "$tmp/gpt_cp4.log" || fail "cp 4: no gradient traffic over dp x cp"
run llama_one 1 llama
run llama_cp2_tp2 4 llama --context-parallel-size 2 --tensor-model-parallel-size 2 --sequence-parallel "${ag[@]}"
run llama_cp4 4 llama --context-parallel-size 4 "${ag[@]}"
against llama_one llama_cp2_tp2 1e-4
against llama_one llama_cp4 1e-4
run det_cp2 2 gpt --context-parallel-size 2 --deterministic-mode --global-batch-size 2
run det_cp2_dp2 4 gpt --context-parallel-size 2 --deterministic-mode --global-batch-size 2 --zero-stage 3
against det_cp2 det_cp2_dp2 0

# the p2p ring (--cp-comm-type p2p, the default): merges partial outputs in another order than one rank
run llama_cp4_p2p 4 llama --context-parallel-size 4
against llama_one llama_cp4_p2p 1e-4
refuse compression "--grad-compression" 2 --context-parallel-size 2 "${ag[@]}" --grad-compression qsgd
refuse local_sgd "--local-sgd-steps" 2 --context-parallel-size 2 "${ag[@]}" --local-sgd-steps 2
refuse checkpoints "--save-interval with --context-parallel-size 2: checkpoints under context parallelism" 2 \
  --context-parallel-size 2 "${ag[@]}" --save-interval 1 --save-dir "$tmp/refused_ckpt"
[ "$failures" -eq 0 ] && echo "cp_mpi: all checks passed" || { echo "cp_mpi: $failures check(s) failed"; exit 1; }
