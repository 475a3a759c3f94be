#!/usr/bin/env bash
# tests/hf_mixtral.sh - Hugging Face Mixtral and Qwen3-MoE directories in and out of Trident (the "mixtral" and
# "qwen3_moe" families,
# models/llama_moe.c; the Llama twin of this is tests/hf_llama.sh).
#
# tests/hf_files.py write-mixtral writes MixtralForCausalLM directories from the published formats
# (MixtralConfig's config.json, per-expert tensors block_sparse_moe.experts.J.w1/w2/w3 in
# MixtralDecoderLayer's state_dict order). Checked:
#  1. import then `export --format hf` gives the same safetensors bytes (and shard index) back, F32
#     one file and BF16 shards; `export --dtype fp32` holds the file's values under the same names,
#     and the exported config.json agrees with the original and imports again;
#  2. the imported weights fine-tune with engine_train at pp 2;
#  3. a directory whose expert count differs from its config is refused naming the tensor: more
#     experts in the file (an unknown tensor), fewer (a missing expert tensor), nothing written.
#
# Usage (CTest): bash hf_mixtral.sh BUILD_DIR SOURCE_DIR
set -u
build=$1
src=$2
# shellcheck source=tests/lib/script_setup.sh
source "$src/tests/lib/script_setup.sh"
export OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1 OMP_NUM_THREADS=1
# V L NH NH_KV C I T E K
dims=(300 2 4 2 64 64 64 4 2)

# round DIR NAME [export flags...]: import, export, compare bytes, values and config (tests/lib/hf_round.sh)
source "$src/tests/lib/hf_round.sh"

# ---- 1: one file and shards ----
$py tests/hf_files.py write-mixtral "$tmp/f32" "${dims[@]}" F32 5000000000 > /dev/null || fail "write-mixtral f32"
round "$tmp/f32" mixtral_f32 --dtype fp32
$py tests/hf_files.py write-mixtral "$tmp/sh16" "${dims[@]}" BF16 40000 > /dev/null || fail "write-mixtral bf16"
[ -f "$tmp/sh16/model.safetensors.index.json" ] || fail "no shards written"
round "$tmp/sh16" mixtral_sharded_bf16 --dtype bf16 --max-shard-size 40000
grep -q '"model_type": "mixtral"' "$tmp/hf_mixtral_f32/config.json" &&
  grep -q '"num_local_experts": 4' "$tmp/hf_mixtral_f32/config.json" &&
  grep -q '"architectures": \[' "$tmp/hf_mixtral_f32/config.json" &&
  echo "ok   the exported config.json is a MixtralConfig" || fail "exported config.json: $(cat "$tmp/hf_mixtral_f32/config.json")"

# Qwen3-MoE: q_norm / k_norm after o_proj, the sparse block under mlp., Qwen3MoeConfig
$py tests/hf_files.py write-mixtral "$tmp/q32" "${dims[@]}" F32 5000000000 qwen3_moe > /dev/null || fail "write qwen3_moe"
round "$tmp/q32" qwen3_moe_f32 --dtype fp32
$py tests/hf_files.py write-mixtral "$tmp/q16" "${dims[@]}" BF16 40000 qwen3_moe > /dev/null || fail "write qwen3_moe bf16"
round "$tmp/q16" qwen3_moe_sharded_bf16 --dtype bf16 --max-shard-size 40000
grep -q '"model_type": "qwen3_moe"' "$tmp/hf_qwen3_moe_f32/config.json" &&
  echo "ok   the exported config.json is a Qwen3MoeConfig" || fail "exported qwen3_moe config.json"

# ---- 2: fine-tune the imported weights at pp 2 ----
fine_tune mixtral_f32 "Mixtral at pp 2" 2 --pipeline-model-parallel-size 2

# ---- 3: the expert count of the files against the config's ----
# experts E_CONFIG NEEDLE: the 4-expert files under a config of E_CONFIG experts are refused with NEEDLE
experts() {
  rm -rf "$tmp/bad" "$tmp/ck_bad" && mkdir -p "$tmp/bad" && cp "$tmp/f32/model.safetensors" "$tmp/bad/"
  sed "s/\"num_local_experts\": 4/\"num_local_experts\": $1/" "$tmp/f32/config.json" > "$tmp/bad/config.json"
  out=$("$bin/ckpt" import --format hf "$tmp/bad" "$tmp/ck_bad" 2>&1)
  [ $? -ne 0 ] && grep -qF -- "$2" <<<"$out" && [ ! -e "$tmp/ck_bad/latest" ] \
    && echo "ok   refused $1 experts in the config, 4 in the file: $(grep -m1 error <<<"$out")" \
    || fail "config of $1 experts over files of 4: $out"
}
experts 2 "block_sparse_moe.gate.weight has shape (4, 64); the config needs (2, 64)"
experts 8 "block_sparse_moe.gate.weight has shape (4, 64); the config needs (8, 64)"

if [ "$failures" -ne 0 ]; then
  echo "hf_mixtral: $failures check(s) failed"
  exit 1
fi
echo "hf_mixtral: OK"
