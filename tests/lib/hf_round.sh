# tests/lib/hf_round.sh - sourced by the Hugging Face directory tests (hf_llama.sh, hf_mixtral.sh,
# hf_interop.sh): the round trip they check, and the fine-tuning of an import. Needs $bin (the
# build's bin/), $tmp (a scratch directory), $py, $src and a fail function.

# hf_export_same DIR NAME [export flags...]: exports checkpoint $tmp/ck_NAME with the flags into
# $tmp/hf_NAME and compares its safetensors files (and shard index) with DIR's, byte for byte;
# non-zero when the export itself failed.
hf_export_same() {
  local dir=$1 name=$2
  shift 2
  "$bin/ckpt" export --quiet --format hf "$@" "$tmp/ck_$name" "$tmp/hf_$name" > "$tmp/export_$name.log" 2>&1 ||
    { tail -3 "$tmp/export_$name.log"; fail "$name: export --format hf"; return 1; }
  local same=1 n=0
  for f in "$dir"/*.safetensors "$dir"/model.safetensors.index.json; do
    [ -f "$f" ] || continue
    n=$((n + 1))
    cmp -s "$f" "$tmp/hf_$name/$(basename "$f")" || { same=0; echo "     differs: $(basename "$f")"; }
  done
  [ "$(ls "$tmp/hf_$name" | grep -c safetensors)" = "$(ls "$dir" | grep -c safetensors)" ] || same=0
  [ $same = 1 ] && echo "ok   $name: import -> export --format hf $*: the same $n file(s), byte for byte" \
    || fail "$name: export --format hf differs from the imported files"
}

# round DIR NAME [export flags...]: import DIR, export it with the flags and compare the bytes;
# export fp32 and compare the values and the config.
round() {
  local dir=$1 name=$2
  shift 2
  rm -rf "$tmp/ck_$name" "$tmp/hf_$name" "$tmp/fp32_$name"
  "$bin/ckpt" import --format hf "$dir" "$tmp/ck_$name" > "$tmp/import_$name.log" 2>&1 ||
    { tail -3 "$tmp/import_$name.log"; fail "$name: ckpt import --format hf"; return; }
  hf_export_same "$dir" "$name" "$@" || return
  "$bin/ckpt" export --quiet --format hf --dtype fp32 "$tmp/ck_$name" "$tmp/fp32_$name" > /dev/null 2>&1 &&
    out=$($py "$src/tests/hf_files.py" compare "$dir" "$tmp/fp32_$name" 2>&1) &&
    out2=$($py "$src/tests/hf_files.py" compare "$dir" "$tmp/hf_$name" 2>&1) &&
    "$bin/ckpt" import --format hf "$tmp/hf_$name" "$tmp/ck2_$name" > /dev/null 2>&1 &&
    echo "ok   $name: the checkpoint holds the file's values under the same names; config.json agrees and reads back" \
    || fail "$name: values or config differ: ${out:-} ${out2:-}"
}

# fine_tune NAME WHAT NP [engine_train flags...]: the imported checkpoint $tmp/ck_NAME trains 2
# iterations on NP ranks in the layout the flags give, resuming at iteration 0
fine_tune() {
  local name=$1 what=$2 np=$3
  shift 3
  local out
  out=$(mpiexec --oversubscribe --mca btl self,vader -np "$np" --timeout 300 "$bin/engine_train" \
        --config "$tmp/ck_$name/config.json" --load "$tmp/ck_$name" --save-dir "$tmp/ck_$name" "$@" \
        --train-iters 2 --seq-length 32 --eval-iters 1 --sample-length 0 --threads 1 2>&1)
  grep -q "resumed from .* at iteration 0" <<<"$out" && grep -q "trained 2 iterations" <<<"$out" \
    && echo "ok   fine-tuned the imported $what" || { echo "$out" | tail -5; fail "fine-tuning the imported $what"; }
}
