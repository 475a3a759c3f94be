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
#  - deterministic mode: cp 2, cp 4 and cp 2 x dp 2 (ZeRO 3) against one rank: the same losses to the last
#    printed digit of metrics.jsonl (docs/context_parallel.md, "Deterministic mode: the same bits as
#    without cp");
#  - the Llama at cp 4 with the p2p ring (--cp-comm-type p2p, the default) within the same bound;
#  - the refusals before any communication: cp with --grad-compression, cp with --local-sgd-steps, each
#    naming its flags;
#  - checkpoints (docs/context_parallel.md, "Checkpoints and observability under cp"): the GPT saved at cp 2 x
#    dp 2, ZeRO 1, after 2 iterations and resumed at cp 2 x dp 2: iterations 3-5 and the validation loss
#    equal to the uninterrupted run's to the last digit; resumed at cp 1 (one rank) and cp 4 (ZeRO 3) within
#    1e-4; in deterministic mode saved and resumed at cp 2 x dp 2 ZeRO 3: to the last digit;
#  - observability: metrics.jsonl's cp_bytes of every step equals the context-parallel traffic derived here
#    by hand from partitioner/context_parallel.h's formulas (layers x micro-batches x (forward + backward,
#    + the recomputed forward under full recomputation)) and the partitioner's preview (cp_bytes_per_step,
#    --json), for all_gather, p2p, p2p with full recomputation and deterministic mode; cp_s > 0; the
#    iteration line shows "cp N%".
# Usage (CTest): bash cp_mpi.sh BUILD_DIR SOURCE_DIR
set -u
build=$1
src=$2
# shellcheck source=tests/lib/mpi_train.sh
source "$src/tests/lib/mpi_train.sh"
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
  train_run "$name" "$np" --config "$tmp/$cfg.json" "$@" || { tail -5 "$tmp/$name.log"; fail "$name"; }
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
  train_refuse "$name" "$want" "$np" --config "$tmp/gpt.json" "$@"
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
run det_one 1 gpt --deterministic-mode --global-batch-size 2
run det_cp2 2 gpt --context-parallel-size 2 --deterministic-mode --global-batch-size 2
run det_cp2_dp2 4 gpt --context-parallel-size 2 --deterministic-mode --global-batch-size 2 --zero-stage 3
run det_cp4 4 gpt --context-parallel-size 4 --deterministic-mode --global-batch-size 2
against det_cp2 det_cp2_dp2 0
against det_one det_cp2 0
against det_one det_cp4 0

# the p2p ring (--cp-comm-type p2p, the default): merges partial outputs in another order than one rank
run llama_cp4_p2p 4 llama --context-parallel-size 4
against llama_one llama_cp4_p2p 1e-4
refuse compression "--grad-compression" 2 --context-parallel-size 2 "${ag[@]}" --grad-compression qsgd
refuse local_sgd "--local-sgd-steps" 2 --context-parallel-size 2 "${ag[@]}" --local-sgd-steps 2

# checkpoints: saved at cp 2 x dp 2 after 2 iterations, resumed at cp 2, 1 and 4
resumed() { # ref name bound: iterations 3-5 and the validation loss of name against ref's
  /usr/bin/python3 - "$tmp/$1/metrics.jsonl" "$tmp/$2/metrics.jsonl" "$2" "$3" <<'PY' || fail "$2 against $1"
import json, sys
rows = lambda p, k, f: {r["iter"]: r[f] for r in map(json.loads, open(p)) if r.get("kind") == k}
ref, got, bound = rows(sys.argv[1], "train", "loss"), rows(sys.argv[2], "train", "loss"), float(sys.argv[4])
assert sorted(got) == [3, 4, 5], f"resumed iterations {sorted(got)}"
worst = max(abs(ref[i] - got[i]) / ref[i] for i in got)
assert worst <= bound, f"losses differ by {worst:.3g}: {ref} vs {got}"
v1, v2 = rows(sys.argv[1], "eval", "val_loss"), rows(sys.argv[2], "eval", "val_loss")
assert v2 and abs(v1[5] - v2[5]) <= bound * v1[5], (v1, v2)
print(f"ok   {sys.argv[3]}: iterations 3-5 within {worst:.2g} of the uninterrupted run's, validation {v2[5]:.4f}")
PY
}
run ck_ref 4 gpt --context-parallel-size 2 --zero-stage 1 "${ag[@]}" --save-interval 2
grep -qE '"context_parallel_size":[[:space:]]*2' "$tmp/ck_ref/iter_0000002/manifest.json" || fail "manifest without context_parallel_size 2"
n_model=$(ls "$tmp/ck_ref/iter_0000002" | grep -c '^model_')
n_optim=$(ls "$tmp/ck_ref/iter_0000002" | grep -c '^optim_tp00_pp00_dp00[0-3].h5$')
[ "$n_model" -eq 1 ] && [ "$n_optim" -eq 4 ] && echo "ok   cp 2 x dp 2 ZeRO 1: 1 model file, 4 optimizer shards over dp x cp" \
  || fail "files: $n_model model, $n_optim optimizer (want 1 and 4)"
run ck_cp2 4 gpt --context-parallel-size 2 --zero-stage 1 "${ag[@]}" --load "$tmp/ck_ref/iter_0000002"
resumed ck_ref ck_cp2 0
run ck_cp1 1 gpt --load "$tmp/ck_ref/iter_0000002"
resumed ck_ref ck_cp1 1e-4
run ck_cp4 4 gpt --context-parallel-size 4 --zero-stage 3 "${ag[@]}" --load "$tmp/ck_ref/iter_0000002"
resumed ck_ref ck_cp4 1e-4
det=(--context-parallel-size 2 --zero-stage 3 --deterministic-mode)
run ck_det_ref 4 gpt "${det[@]}" --save-interval 2
run ck_det 4 gpt "${det[@]}" --load "$tmp/ck_det_ref/iter_0000002"
resumed ck_det_ref ck_det 0

# observability: cp_bytes per step against the formulas by hand and the partitioner's preview
run gpt_cp2_full 2 gpt --context-parallel-size 2 --recompute-granularity full
against gpt_one gpt_cp2_full 1e-4
cp_bytes() { # name ranks config cp comm-type (all_gather|p2p|det) recompute(0|1) tp [partitioner flags...]
  local name=$1 np=$2 cfg=$3 cp=$4 kind=$5 full=$6 tp=$7
  shift 7
  local plan
  plan=$("$bin/partitioner" --config "$tmp/$cfg.json" --seq-length 512 --micro-batch-size 1 --global-batch-size 2 \
         --num-gpus "$np" --context-parallel-size "$cp" --tensor-model-parallel-size "$tp" "$@" --json \
         | /usr/bin/python3 -c 'import json, sys; print(json.load(sys.stdin)["cp_bytes_per_step"])') || plan=-1
  /usr/bin/python3 - "$tmp/$name/metrics.jsonl" "$tmp/$cfg.json" "$cp" "$kind" "$full" "$tp" "$np" "$plan" "$name" \
    <<'PY' || fail "$name: cp_bytes"
import json, sys
path, cfg, cp, kind, full, tp, np, plan, name = sys.argv[1:]
cp, full, tp, np, plan = int(cp), full == "1", int(tp), int(np), float(plan)
c = json.load(open(cfg))
L, C, H = (c["n_layer"], c["n_embd"], c["n_head"]) if "n_layer" in c else \
          (c["num_hidden_layers"], c["hidden_size"], c["num_attention_heads"])
Ckv = C // H * c.get("num_key_value_heads", H)
B, T, e, micro = 1, 512, 4, 2 // (np // (tp * cp))      # fp32; global batch 2 over dp = np / (tp cp)
C_l, Ckv_l, NH_l = C // tp, Ckv // tp, H // tp
kv = B * T * 2 * Ckv_l; kv_l = kv // cp                  # a layer's key|value, the whole sequence / a rank's
if kind == "det":    # all-gather forward; owner-computes backward: qkv and dout, lse and delta
    fwd, bwd = e * kv, e * B * T * (C_l + 2 * Ckv_l + C_l) + 2 * 4 * B * NH_l * T
elif kind == "all_gather":  # all-gather of k|v forward; again backward, and the f32 dk|dv reduce-scatter
    fwd, bwd = e * kv, e * kv + 4 * kv
else:                # the ring: cp - 1 blocks forward; backward the blocks and cp hops of the f32 accumulator
    fwd, bwd = (cp - 1) * e * kv_l, (cp - 1) * e * kv_l + cp * 4 * kv_l
want = L * micro * (fwd + bwd + (fwd if full else 0))
rows = [r for r in map(json.loads, open(path)) if r.get("kind") == "train"]
assert len(rows) == 5 and all(r["cp_bytes"] == want for r in rows), (name, want, [r["cp_bytes"] for r in rows])
assert all(r["cp_s"] > 0 for r in rows), [r["cp_s"] for r in rows]
assert plan == want, f"the partitioner's preview {plan:.0f} bytes, the engine's {want}"
print(f"ok   {name}: cp_bytes {want} a step = the partitioner's, cp_s {rows[-1]['cp_s'] * 1e3:.1f} ms")
PY
  grep -qE "dp [0-9]+%, cp [0-9]+%\)" "$tmp/$name.log" || fail "$name: the iteration line shows no cp"
}
cp_bytes gpt_cp4 4 gpt 4 all_gather 0 1 "${ag[@]}"
cp_bytes gpt_cp2_tp2 4 gpt 2 all_gather 0 2 "${ag[@]}"
cp_bytes llama_cp4_p2p 4 llama 4 p2p 0 1 --cp-comm-type p2p
cp_bytes gpt_cp2_full 2 gpt 2 p2p 1 1 --cp-comm-type p2p --recompute-granularity full
cp_bytes det_cp2 2 gpt 2 det 0 1 --deterministic-mode
train_done cp_mpi
