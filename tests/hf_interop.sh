#!/usr/bin/env bash
# tests/hf_interop.sh - Hugging Face model directories in and out of Trident (GPT-2).
#
# tests/hf_files.py writes Hugging Face directories from the published formats (config.json as
# transformers writes it, safetensors as the reference library serializes, shards as
# huggingface_hub splits them) and, independently, an llm.c file of the same weights. Checked:
#  1. import then `export --format llmc` equals that llm.c file byte for byte, for F32, BF16 and F16
#     files, one file or shards, with and without the "transformer." prefix: names, transposes and
#     conversions are right;
#  2. import then `export --format hf` gives the same safetensors bytes (and index) back, for F32 and
#     BF16, one file and shards;
#  3. the imported checkpoint fine-tunes with engine_train in another layout (tp 2 x pp 2);
#  4. bad files are refused with a message naming the file and the tensor, and an export never
#     writes into a directory that holds a model.
#
# Usage (CTest): bash hf_interop.sh BUILD_DIR SOURCE_DIR
set -u
build=$1
src=$2
# shellcheck source=tests/lib/script_setup.sh
source "$src/tests/lib/script_setup.sh"
export OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1 OMP_NUM_THREADS=1
gen() { $py "$src/tests/hf_files.py" "$@" > /dev/null || fail "hf_files.py $*"; }
dims=(257 2 4 32 64) # V L NH C T

# round_llmc DIR LLMC NAME [export flags...]: import DIR, export llmc and hf (tests/lib/hf_round.sh
# hf_export_same); compare.
source "$src/tests/lib/hf_round.sh"
round_llmc() {
  local dir=$1 llmc=$2 name=$3
  shift 3
  rm -rf "$tmp/ck_$name" "$tmp/hf_$name"
  "$bin/ckpt" import --format hf "$dir" "$tmp/ck_$name" > "$tmp/import_$name.log" 2>&1 ||
    { tail -3 "$tmp/import_$name.log"; fail "$name: ckpt import --format hf"; return; }
  "$bin/ckpt" export --quiet --format llmc "$tmp/ck_$name" "$tmp/$name.bin" || { fail "$name: export llmc"; return; }
  cmp -s "$llmc" "$tmp/$name.bin" && echo "ok   $name: import -> export --format llmc equals the llm.c file of the same weights" \
    || fail "$name: the llm.c export differs from the independently written file"
  [ $# -eq 0 ] || hf_export_same "$dir" "$name" "$@"
}

# ---- 1, 2: one file and shards, three dtypes, both name styles ----
gen write "$tmp/f32" "$tmp/f32.bin" "${dims[@]}" F32 5000000000 1
round_llmc "$tmp/f32" "$tmp/f32.bin" f32 --dtype fp32
gen write "$tmp/bf16" "$tmp/bf16.bin" "${dims[@]}" BF16 5000000000 1
round_llmc "$tmp/bf16" "$tmp/bf16.bin" bf16 --dtype bf16
gen write "$tmp/f16" "$tmp/f16.bin" "${dims[@]}" F16 5000000000 1
round_llmc "$tmp/f16" "$tmp/f16.bin" f16 --dtype fp16
# shards of at most 20,000 bytes: wte (32,896 bytes) gets one of its own, as huggingface_hub splits
gen write "$tmp/sh32" "$tmp/sh32.bin" "${dims[@]}" F32 20000 1
[ -f "$tmp/sh32/model.safetensors.index.json" ] && [ "$(ls "$tmp/sh32" | grep -c 'of-')" -gt 3 ] || fail "no shards written"
round_llmc "$tmp/sh32" "$tmp/sh32.bin" sharded_f32 --max-shard-size 20000
gen write "$tmp/sh16" "$tmp/sh16.bin" "${dims[@]}" BF16 20000 1
round_llmc "$tmp/sh16" "$tmp/sh16.bin" sharded_bf16 --dtype bf16 --max-shard-size 20KB
# the hub's gpt2 files carry no "transformer." prefix
gen write "$tmp/hub" "$tmp/hub.bin" "${dims[@]}" F32 5000000000 0
round_llmc "$tmp/hub" "$tmp/hub.bin" unprefixed
# older files carry the causal-mask buffer h.<i>.attn.bias: skipped
mkdir -p "$tmp/mask" && cp "$tmp/f32/config.json" "$tmp/mask/"
$py "$src/tests/hf_files.py" corrupt mask-buffer "$tmp/f32/model.safetensors" "$tmp/mask/model.safetensors"
round_llmc "$tmp/mask" "$tmp/f32.bin" mask_buffer
grep -q "attn_pdrop 0.1 dropped" "$tmp/import_f32.log" && echo "ok   dropout of the config reported and dropped" \
  || fail "the config's dropout was not reported: $(cat "$tmp/import_f32.log")"

# ---- 3: fine-tune the imported weights in another layout ----
fine_tune f32 "weights at tp 2 x pp 2" 4 --tensor-model-parallel-size 2 --pipeline-model-parallel-size 2

# ---- 4: refusals ----
# refused KIND NEEDLE...: the corrupted single file is refused, naming the file and NEEDLE
refused() {
  local kind=$1
  shift
  rm -rf "$tmp/bad" "$tmp/ck_bad"
  mkdir -p "$tmp/bad"
  cp "$tmp/f32/config.json" "$tmp/bad/"
  $py "$src/tests/hf_files.py" corrupt "$kind" "$tmp/f32/model.safetensors" "$tmp/bad/model.safetensors" || fail "corrupt $kind"
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
refused header-length "header length"
refused out-of-range "out of range" "transformer.wte.weight"
refused overlap "overlap"
refused dtype 'dtype "Q4_K"'
refused shape "transformer.ln_f.weight" "has shape (16, 2); the config needs (32)"
refused missing "ln_f.bias"
refused unknown "transformer.h.0.attn.rotary" "not a GPT-2 parameter"
refused untied "lm_head.weight" "differs from wte"
# an index that names a tensor its shard does not hold
rm -rf "$tmp/badidx" && cp -r "$tmp/sh32" "$tmp/badidx"
sed -i 's/"transformer.ln_f.bias": "model-\([0-9]*\)-of/"transformer.ln_f.bias": "model-00001-of/' "$tmp/badidx/model.safetensors.index.json"
out=$("$bin/ckpt" import --format hf "$tmp/badidx" "$tmp/ck_badidx" 2>&1)
grep -q "index.json: tensor transformer.ln_f.bias is mapped to model-00001-of" <<<"$out" \
  && echo "ok   refused an index that disagrees with its shards" || fail "index disagreement: $out"
# export never writes into a directory holding a model
out=$("$bin/ckpt" export --quiet --format hf "$tmp/ck_f32" "$tmp/f32" 2>&1)
[ $? -ne 0 ] && grep -q "holds a model" <<<"$out" && cmp -s "$tmp/f32/model.safetensors" "$tmp/hf_f32/model.safetensors" \
  && echo "ok   export refuses a directory that holds a model" || fail "export into an existing model directory: $out"
out=$("$bin/ckpt" export --quiet --format hf --max-shard-size 5XB "$tmp/ck_f32" "$tmp/new" 2>&1)
grep -q -- "--max-shard-size '5XB'" <<<"$out" && echo "ok   a bad --max-shard-size is named" || fail "bad size: $out"

if [ "$failures" -ne 0 ]; then
  echo "hf_interop: $failures check(s) failed"
  exit 1
fi
echo "hf_interop: OK"
