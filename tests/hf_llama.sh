#!/usr/bin/env bash
# tests/hf_llama.sh - Hugging Face Llama directories in and out of Trident (the GPT-2 twin of this
# is tests/hf_interop.sh).
#
# tests/hf_files.py write-llama writes LlamaForCausalLM directories from the published formats
# (config.json as transformers writes a LlamaConfig, safetensors as the reference library
# serializes, shards as huggingface_hub splits the state_dict). Checked:
#  1. import then `export --format hf` gives the same safetensors bytes (and index) back: F32 and
#     F16 one file, BF16 and F32 shards, tied and untied heads, fewer key/value heads than query heads,
#     biases, head_dim != hidden_size / heads, Llama 3 rope_scaling, a Qwen3 (q_norm, k_norm,
#     Qwen3Config); the exported config.json
#     agrees with the original on every key and imports again;
#  2. the imported checkpoint holds the file's tensors: `export --dtype fp32` equals the original
#     values under the same names (a one-to-one name mapping);
#  3. a tied lm_head stored equal to the embedding and older files' rotary inv_freq buffers are
#     accepted (and not exported);
#  4. the imported weights fine-tune with engine_train at tp 2 x pp 2;
#  5. a missing tensor, a wrong shape, an unknown tensor and a stored tied head that differs are
#     refused naming the file and the tensor; llm.c and plain safetensors exports stay GPT-2's.
#
# Usage (CTest): bash hf_llama.sh BUILD_DIR SOURCE_DIR
set -u
build=$1
src=$2
# shellcheck source=tests/lib/script_setup.sh
source "$src/tests/lib/script_setup.sh"
source "$src/tests/lib/sections.sh"
export OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1 OMP_NUM_THREADS=1
gen() { $py "$src/tests/hf_files.py" "$@" > /dev/null || fail "hf_files.py $*"; }
# V L NH NH_KV C F T: C, head_dim 16 x 4 heads and F multiples of 64 for the fused views at tp 2
dims=(300 2 4 2 64 128 64)

# round DIR NAME [export flags...] (tests/lib/hf_round.sh)
source "$src/tests/lib/hf_round.sh"

# ---- 1, 2: layouts, dtypes, heads ----
# (the tied and untied F32 files are what 3 and 5 start from, their checkpoints $tmp/ck_tied_f32 and
# ck_untied_f32 what 4 and 5 do)
gen write-llama "$tmp/tied" "${dims[@]}" F32 5000000000 1
gen write-llama "$tmp/untied" "${dims[@]}" F32 5000000000 0
if section f32 || section fine_tune || section refusals; then
  round "$tmp/tied" tied_f32 --dtype fp32
  round "$tmp/untied" untied_f32
fi
if section fp16; then
  gen write-llama "$tmp/f16" "${dims[@]}" F16 5000000000 0
  round "$tmp/f16" untied_f16 --dtype fp16
fi
if section shards; then
  # shards of at most 40,000 bytes: the embedding and head (76,800 bytes) get one each, the layers'
  # tensors fill the rest in LlamaDecoderLayer's order (attention, MLP, then the norms)
  gen write-llama "$tmp/sh32" "${dims[@]}" F32 40000 0
  [ -f "$tmp/sh32/model.safetensors.index.json" ] && [ "$(ls "$tmp/sh32" | grep -c 'of-')" -gt 3 ] || fail "no shards written"
  round "$tmp/sh32" sharded_f32 --max-shard-size 40000
  gen write-llama "$tmp/sh16" "${dims[@]}" BF16 20000 1
  round "$tmp/sh16" sharded_bf16_tied --dtype bf16 --max-shard-size 20KB
fi
if section bias_rope; then
  # biases, head_dim 32 (4 x 32 != 64) and Llama 3's rope_scaling, in BF16 shards
  gen write-llama "$tmp/bias" "${dims[@]}" BF16 20000 0 32 1 llama3
  round "$tmp/bias" bias_rope_bf16 --dtype bf16 --max-shard-size 20000
  grep -q '"rope_type": "llama3"' "$tmp/hf_bias_rope_bf16/config.json" && grep -q '"rope_theta": 500000.0' "$tmp/hf_bias_rope_bf16/config.json" \
    && grep -q '"rms_norm_eps": 1e-05' "$tmp/hf_bias_rope_bf16/config.json" \
    && grep -q '"architectures": \[' "$tmp/hf_bias_rope_bf16/config.json" \
    && echo "ok   the exported config.json is a LlamaConfig as transformers writes it" \
    || fail "exported config.json: $(cat "$tmp/hf_bias_rope_bf16/config.json")"
fi

if section qwen3; then
  # Qwen3 (Qwen3ForCausalLM): q_norm and k_norm per layer, head_dim 32 (4 x 32 != 64), attention_bias,
  # tied, in BF16 shards; its config.json is a Qwen3Config
  gen write-llama "$tmp/qwen3" "${dims[@]}" BF16 20000 1 32 1 none qwen3
  round "$tmp/qwen3" qwen3_bf16 --dtype bf16 --max-shard-size 20000
  grep -q '"model_type": "qwen3"' "$tmp/hf_qwen3_bf16/config.json" && grep -q '"Qwen3ForCausalLM"' "$tmp/hf_qwen3_bf16/config.json" \
    && grep -q '"use_sliding_window": false' "$tmp/hf_qwen3_bf16/config.json" && ! grep -q '"mlp_bias"' "$tmp/hf_qwen3_bf16/config.json" \
    && echo "ok   the exported Qwen3 config.json is a Qwen3Config as transformers writes it" \
    || fail "exported Qwen3 config.json: $(cat "$tmp/hf_qwen3_bf16/config.json")"
fi

# ---- 3: accepted extras: a stored tied head equal to the embedding, rotary buffers ----
if section accepted_extras; then
  for kind in tied-head rotary-buffer; do
    rm -rf "$tmp/$kind" && mkdir -p "$tmp/$kind" && cp "$tmp/tied/config.json" "$tmp/$kind/"
    $py "$src/tests/hf_files.py" corrupt "$kind" "$tmp/tied/model.safetensors" "$tmp/$kind/model.safetensors" || fail "corrupt $kind"
    rm -rf "$tmp/ck_$kind" "$tmp/hf_$kind"
    "$bin/ckpt" import --format hf "$tmp/$kind" "$tmp/ck_$kind" > "$tmp/import_$kind.log" 2>&1 &&
      "$bin/ckpt" export --quiet --format hf "$tmp/ck_$kind" "$tmp/hf_$kind" > /dev/null 2>&1 &&
      cmp -s "$tmp/tied/model.safetensors" "$tmp/hf_$kind/model.safetensors" \
      && echo "ok   $kind accepted; the export equals the file without it" || fail "$kind: $(tail -2 "$tmp/import_$kind.log")"
  done
fi

# ---- 4: fine-tune the imported weights in another layout ----
if section fine_tune; then
  fine_tune tied_f32 "Llama at tp 2 x pp 2" 4 --tensor-model-parallel-size 2 --pipeline-model-parallel-size 2
fi

# ---- 5: refusals ----
# refused SRC KIND NEEDLE...: SRC's single file with defect KIND is refused, naming the file and NEEDLE
refused() {
  local from=$1 kind=$2
  shift 2
  rm -rf "$tmp/bad" "$tmp/ck_bad"
  mkdir -p "$tmp/bad"
  cp "$from/config.json" "$tmp/bad/"
  $py "$src/tests/hf_files.py" corrupt "$kind" "$from/model.safetensors" "$tmp/bad/model.safetensors" || fail "corrupt $kind"
  "$bin/ckpt" import --format hf "$tmp/bad" "$tmp/ck_bad" > "$tmp/bad.log" 2>&1
  local rc=$? msg
  msg=$(grep "error:" "$tmp/bad.log")
  local ok=1
  [ $rc -ne 0 ] || ok=0
  grep -qF "$tmp/bad/model.safetensors" <<<"$msg" || ok=0
  for needle in "$@"; do grep -qF -- "$needle" <<<"$msg" || ok=0; done
  [ -e "$tmp/ck_bad/latest" ] && ok=0
  [ $ok = 1 ] && echo "ok   refused $kind: ${msg#*error: }" || fail "$kind not refused as expected (exit $rc): $(tail -2 "$tmp/bad.log")"
}
if section refusals; then
  refused "$tmp/untied" missing "no tensor model.layers.1.mlp.up_proj.weight"
  refused "$tmp/untied" shape "model.norm.weight" "has shape (32, 2); the config needs (64)"
  refused "$tmp/untied" unknown "model.layers.0.self_attn.q_norm.weight" "is not a Llama parameter"
  refused "$tmp/tied" untied "lm_head.weight" "differs from model.embed_tokens.weight"
  # an untied config whose file lacks the head
  rm -rf "$tmp/nohead" && mkdir -p "$tmp/nohead" && cp "$tmp/tied/model.safetensors" "$tmp/nohead/"
  sed 's/"tie_word_embeddings": true/"tie_word_embeddings": false/' "$tmp/tied/config.json" > "$tmp/nohead/config.json"
  out=$("$bin/ckpt" import --format hf "$tmp/nohead" "$tmp/ck_nohead" 2>&1)
  grep -qF "$tmp/nohead/model.safetensors: no tensor lm_head.weight" <<<"$out" \
    && echo "ok   refused an untied config without lm_head.weight" || fail "untied config without a head: $out"
  # llm.c and plain safetensors files are GPT-2's
  for format in llmc safetensors; do
    out=$("$bin/ckpt" export --quiet --format $format "$tmp/ck_untied_f32" "$tmp/out.$format" 2>&1)
    [ $? -ne 0 ] && grep -q "writes GPT-2 weights; this checkpoint's model_type is \"llama\"" <<<"$out" \
      && echo "ok   export --format $format refuses a Llama" || fail "export --format $format of a Llama: $out"
  done
fi

if [ "$failures" -ne 0 ]; then
  echo "hf_llama: $failures check(s) failed"
  exit 1
fi
echo "hf_llama: OK"
