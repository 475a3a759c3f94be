#!/usr/bin/env bash
# tests/llama_cli.sh BUILD_DIR SOURCE_DIR - a Llama through engine_train and the checkpoint tools.
#
# A tiny Llama (grouped-query attention with 2 key/value heads of 4 query heads, SwiGLU, an untied
# head) trains on the fortunes bytes under mpirun at tp 2 x pp 2 and saves every 3 of 6 iterations.
#  1. Resumed from iteration 3 in the same layout: the losses of iterations 4-6 are bit-identical.
#  2. Resumed at tp 4 (resharded on load; the key/value heads now shared by two ranks each) and,
#     after `ckpt reshard` offline, at tp 1 x dp 2 (ZeRO 1): within 1e-5 of the uninterrupted run.
#  3. In deterministic mode, resumed at tp 2 x dp 2 (ZeRO 2, no pipeline): bit-identical.
#  4. `ckpt inspect` verifies every file and tensor and names the family; `ckpt merge` writes the full
#     tensors under Hugging Face's names (k_proj of 2 heads: (32, 64)).
# The log of the training names the model's shape and shows the loss falling. Usage (CTest):
# bash llama_cli.sh BUILD_DIR SOURCE_DIR
set -u
build=$1
src=$(cd "$2" && pwd)
# shellcheck source=tests/lib/script_setup.sh
source "$src/tests/lib/script_setup.sh"
source "$src/tests/lib/mpirun_flags.sh"
mpirun=(mpirun "${mpirun_flags[@]}")
[ -f data/fortunes_byte_train.bin ] || { echo "FAIL: data/fortunes_byte_*.bin missing (tools/prepare_fortunes.sh)"; exit 1; }
cat > "$tmp/llama.json" <<'JSON'
{"model_type": "llama", "hidden_size": 64, "intermediate_size": 128, "num_attention_heads": 4,
 "num_key_value_heads": 2, "num_hidden_layers": 4, "vocab_size": 257, "max_position_embeddings": 64,
 "rms_norm_eps": 1e-5, "rope_theta": 10000.0, "tie_word_embeddings": false}
JSON
run=("$bin/engine_train" --config "$tmp/llama.json" --micro-batch-size 2 --global-batch-size 4 --seq-length 32
     --train-iters 6 --eval-iters 1 --sample-length 0 --lr 3e-3 --quiet)

# losses, close, save_run, resume, same_losses, reshard_resume
source "$src/tests/lib/resume_losses.sh"

save_run "$tmp/a"

# 1. same layout
resume "$tmp/a" "$tmp/b" 4 --tensor-model-parallel-size 2 --pipeline-model-parallel-size 2
same_losses "$tmp/a" "$tmp/b" "resume at tp 2 x pp 2"

# 2. tp 4 on load (key/value heads shared), and tp 1 x dp 2 after an offline reshard
resume "$tmp/a" "$tmp/c" 4 --tensor-model-parallel-size 4
d=$(close "$tmp/c.losses" "$tmp/a.losses") && echo "ok   resumed at tp 4 (key/value heads shared by 2 ranks): losses within $d" \
  || fail "resume at tp 4: losses differ by $d"
reshard_resume "$tmp/a" "$tmp/r"

# 3. deterministic: another pipeline, data-parallel and ZeRO layout at the same tp, the same bits
save_run "$tmp/d" --deterministic-mode
resume "$tmp/d" "$tmp/e" 4 --tensor-model-parallel-size 2 --pipeline-model-parallel-size 1 --zero-stage 2 --deterministic-mode
same_losses "$tmp/d" "$tmp/e" "deterministic: resumed at tp 2 x dp 2 ZeRO 2 from tp 2 x pp 2"

# 4. inspect and merge
"$bin/ckpt" inspect "$tmp/a" > "$tmp/inspect.txt" 2>&1 || { cat "$tmp/inspect.txt"; fail "ckpt inspect"; }
grep -q '"model_type":"llama"' "$tmp/inspect.txt" && ! grep -qE " (bad|FAIL|mismatch)" "$tmp/inspect.txt" \
  && grep -q "model.layers.3.mlp.down_proj.weight" "$tmp/inspect.txt" \
  && echo "ok   ckpt inspect: a llama checkpoint, $(grep -c ' ok$' "$tmp/inspect.txt") files and tensors verified" \
  || { head -20 "$tmp/inspect.txt"; fail "ckpt inspect"; }
"$bin/ckpt" merge --quiet "$tmp/a" "$tmp/merged.h5" || fail "ckpt merge"
$py - "$tmp/merged.h5" <<'PY' || fail "merged tensors"
import sys, h5py
f = h5py.File(sys.argv[1], "r")
names = []
f.visititems(lambda n, o: names.append(n) if isinstance(o, h5py.Dataset) else None)
def shape(key):
    return [f[n].shape for n in names if n.endswith(key)][0]
assert shape("model.layers.0.self_attn.k_proj.weight") == (32, 64), shape("model.layers.0.self_attn.k_proj.weight")
assert shape("model.layers.0.self_attn.q_proj.weight") == (64, 64)
assert shape("model.layers.3.mlp.gate_proj.weight") == (128, 64)
assert shape("lm_head.weight") == (257, 64)
print("ok   ckpt merge: full tensors under Hugging Face's names (k_proj (32, 64), lm_head (257, 64))")
PY

echo "llama_cli: $failures failure(s)"
[ $failures -eq 0 ]
