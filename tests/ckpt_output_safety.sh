#!/usr/bin/env bash
# tests/ckpt_output_safety.sh BUILD_DIR SOURCE_DIR - no tool that writes destroys what it reads
# (tools/cli/outputs.h, docs/ckpt-safety.md).
#
# A property, not a list of cases: for every ckpt subcommand that writes (merge, export safetensors,
# llmc and hf, with and without --force, reshard; import llmc and hf) and every path that command
# reads (each file of the step, the manifest and its checksum, the index, `latest`, the step
# directory, the run directory, a path inside them; the Hugging Face directory and its files; the
# llm.c file), the command is run with that path as its output, and again with a symlink to it: each
# run must be refused (exit 1, naming the input) and the SHA-256 of every file of the sources, with
# where every symlink points, must be unchanged. Then import into a run directory and into its own
# source, and the same property for tokenize's outputs and engine_train's --save-dir. Controls: each
# command into a fresh path succeeds (a refusal is not a broken command), and a FIFO given where a
# file is read (config.json, model.safetensors, --config, --train-data, --input) is refused at once by
# kind, not waited on.
set -u
build=$1
src=$(cd "$2" && pwd)
bin="$build/bin"
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
failures=0
checks=0
fail() { echo "FAIL: $*"; failures=$((failures + 1)); }
cd "$src"
source "$src/tests/lib/micro_gpt.sh" # small files: every check hashes all of the sources
source "$src/tests/lib/sections.sh"
train=("${micro_train[@]}")

# the sources: a run (two steps), its Hugging Face export, its llm.c export
run="$tmp/src/run"
"${train[@]}" --train-iters 2 --save-interval 1 --save-dir "$run" > "$tmp/train.log" 2>&1 \
  || { cat "$tmp/train.log"; echo "FAIL: the source run"; exit 1; }
"$bin/ckpt" export --quiet --format hf "$run" "$tmp/src/hf" > /dev/null 2>&1 || fail "export hf (source)"
"$bin/ckpt" export --quiet --format llmc "$run" "$tmp/src/gpt2.bin" > /dev/null 2>&1 || fail "export llmc (source)"
step="$run/$(cat "$run/latest")"

# every file's SHA-256, every symlink's target and every directory under the sources (one walk: this
# runs after each of the ~250 commands)
state() { find "$tmp/src" \( -type f -exec sha256sum {} + \) -o \( -type l -printf 'link %p -> %l\n' \) \
            -o \( -type d -printf 'dir %p\n' \) | LC_ALL=C sort; }
state > "$tmp/state.before"

mkdir -p "$tmp/links"
nlink=0
# refused CMD...: the command (its last argument the output) must fail naming a collision, the sources unchanged
refused() {
  checks=$((checks + 1))
  local out
  out=$("$@" 2>&1)
  local rc=$?
  if [ $rc -eq 0 ]; then
    fail "accepted: ${*:2}"
  elif ! grep -qE "destroy what this command reads|already holds|is a directory|lies where the saves|would replace the newer steps|resumes from" <<< "$out"; then
    fail "refused, but not by the output rule: ${*:2}: $out"
  fi
  state > "$tmp/state.after"
  cmp -s "$tmp/state.before" "$tmp/state.after" || { fail "the sources changed after: ${*:2}"; \
    diff "$tmp/state.before" "$tmp/state.after" | head -5; cp "$tmp/state.after" "$tmp/state.before"; }
}
# each_output PATH... -- CMD...: refused with each PATH, and with a fresh symlink to it, as the output
each_output() {
  local paths=()
  while [ "$1" != "--" ]; do paths+=("$1"); shift; done
  shift
  for p in "${paths[@]}"; do
    refused "$@" "$p"
    nlink=$((nlink + 1))
    ln -s "$p" "$tmp/links/l$nlink"
    refused "$@" "$tmp/links/l$nlink"
  done
}

# what the run commands read, given the run directory or the step directory as SRC
read_by_run=("$run" "$run/latest" "$run/iter_0000001" "$step" "$step/manifest.json" "$step/manifest.sha256"
             "$step/index.h5" "$step/model_tp00_pp00.h5" "$step/optim_tp00_pp00_dp000.h5" "$step/new.h5" "$run/new")
read_by_step=("$step" "$step/manifest.json" "$step/manifest.sha256" "$step/index.h5" "$step/model_tp00_pp00.h5"
              "$step/optim_tp00_pp00_dp000.h5" "$step/new" "$run")
reshard=(reshard --quiet --tensor-model-parallel-size 1 --pipeline-model-parallel-size 1 --data-parallel-size 1)
# from_both CMD...: each_output for CMD with the run directory, then the step directory, as its source
from_both() {
  each_output "${read_by_run[@]}" -- "$@" "$run"
  each_output "${read_by_step[@]}" -- "$@" "$step"
}
if section merge; then from_both "$bin/ckpt" merge --quiet; fi
if section export_safetensors; then from_both "$bin/ckpt" export --quiet --format safetensors; fi
if section export_llmc; then from_both "$bin/ckpt" export --quiet --format llmc; fi
if section export_hf; then from_both "$bin/ckpt" export --quiet --format hf; fi
if section export_hf_force; then from_both "$bin/ckpt" export --quiet --format hf --force; fi
if section reshard; then from_both "$bin/ckpt" "${reshard[@]}"; fi
hf="$tmp/src/hf"
if section import; then
  each_output "$hf" "$hf/config.json" "$hf/model.safetensors" "$hf/sub" -- "$bin/ckpt" import --format hf "$hf"
  each_output "$tmp/src/gpt2.bin" -- "$bin/ckpt" import --format llmc "$tmp/src/gpt2.bin"
  # import into a run directory (the README's next command would resume it at iteration 0), into a model
  refused "$bin/ckpt" import --format hf "$hf" "$run"
  refused "$bin/ckpt" import --format llmc "$tmp/src/gpt2.bin" "$run"
  refused "$bin/ckpt" export --quiet --format hf "$run" "$hf"
  refused "$bin/ckpt" "${reshard[@]}" "$run" "$run"
fi
[ $checks -gt 0 ] && echo "ok   $checks ckpt runs with an input (or a symlink to one, or a path inside one) as the output: refused, sources unchanged"

# tokenize: the outputs PREFIX_train.bin / PREFIX_val.bin against --input
if section tokenize; then
  cp data/fortunes.txt "$tmp/src/text_train.bin"
  state > "$tmp/state.before"
  tok=("$bin/tokenize" --tokenizer-type ByteLevel --document-separator %)
  refused "${tok[@]}" --input "$tmp/src/text_train.bin" --output-prefix "$tmp/src/text"
  ln -s "$tmp/src/text_train.bin" "$tmp/links/tok_val.bin"
  refused "${tok[@]}" --input "$tmp/src/text_train.bin" --output-prefix "$tmp/links/tok"
  "${tok[@]}" --input "$tmp/src/text_train.bin" --output-prefix "$tmp/tok" > "$tmp/tok.log" 2>&1 \
    || { cat "$tmp/tok.log"; fail "tokenize into a new prefix"; }
  echo "ok   tokenize: outputs over its input refused, the input unchanged"
fi

# engine_train --save-dir: a data file where the saves write; the step --load resumes from; a run
# directory with newer steps than the run starts from (its saves would replace them)
if section save_dir; then
  cp data/fortunes_byte_val.bin "$step/val.bin"
  state > "$tmp/state.before"
  refused "${train[@]}" --train-iters 3 --val-data "$step/val.bin" --load "$run" --save-dir "$run"
  refused "${train[@]}" --train-iters 3 --load "$run" --save-dir "$step"
  refused "${train[@]}" --train-iters 3 --save-dir "$run"
  refused "${train[@]}" --train-iters 3 --load "$run/iter_0000001" --save-dir "$run"
  rm "$step/val.bin"
  echo "ok   engine_train --save-dir: over its inputs or newer steps refused, sources unchanged"
fi

# controls: each command into a fresh path succeeds; --force replaces a model directory, never a run
if section controls; then
  o="$tmp/out"
  mkdir -p "$o"
  ok() { "$@" > "$tmp/ok.log" 2>&1 || { cat "$tmp/ok.log"; fail "control failed: ${*:2}"; }; }
  ok "$bin/ckpt" merge --quiet "$run" "$o/merged.h5"
  ok "$bin/ckpt" export --quiet --format safetensors "$run" "$o/model.safetensors"
  ok "$bin/ckpt" export --quiet --format safetensors "$run" "$o/model.safetensors"  # a file is replaced
  ok "$bin/ckpt" export --quiet --format hf "$run" "$o/hf"
  ok "$bin/ckpt" export --quiet --format hf --force --max-shard-size 20KB "$run" "$o/hf"
  ls "$o/hf" | grep -qx model.safetensors && fail "--force left the replaced model's model.safetensors beside the shards"
  ls "$o/hf" | grep -qx model.safetensors.index.json || fail "--force --max-shard-size 20KB: no shards in $(ls "$o/hf")"
  ok "$bin/ckpt" "${reshard[@]}" "$step" "$o/resharded"
  mkdir "$o/empty" && ok "$bin/ckpt" import --format hf "$hf" "$o/empty"
  [ "$(cat "$o/empty/latest" 2>/dev/null)" = iter_0000000 ] && [ -f "$o/empty/config.json" ] \
    || fail "import into an empty directory: no latest or config.json"
  ls -a "$o" "$tmp/src" | grep -q '\.tmp-' && fail "a temporary output was left behind: $(ls -a "$o" "$tmp/src")"
  echo "ok   controls: merge, export (safetensors twice, hf, hf --force), reshard, import into an empty directory"
fi

# special files: refused at once by kind (a FIFO would block a plain open forever)
if section special_files; then
  mkdir -p "$tmp/fifo/hf_a" "$tmp/fifo/hf_b"
  cp "$hf/model.safetensors" "$tmp/fifo/hf_a/" && mkfifo "$tmp/fifo/hf_a/config.json"
  cp "$hf/config.json" "$tmp/fifo/hf_b/" && mkfifo "$tmp/fifo/hf_b/model.safetensors"
  mkfifo "$tmp/fifo/pipe"
  fifo_refused() {
    checks=$((checks + 1))
    local out
    out=$(timeout 20 "$@" 2>&1)
    local rc=$?
    [ $rc -eq 124 ] && { fail "hung on a FIFO: ${*:1:4}"; return; }
    grep -q "is a FIFO (named pipe), not a regular file" <<< "$out" || fail "a FIFO not refused by kind: ${*:1:4}: $out"
  }
  fifo_refused "$bin/ckpt" import --format hf "$tmp/fifo/hf_a" "$tmp/fifo/o1"
  fifo_refused "$bin/ckpt" import --format hf "$tmp/fifo/hf_b" "$tmp/fifo/o2"
  fifo_refused "$bin/ckpt" import --format llmc "$tmp/fifo/pipe" "$tmp/fifo/o3"
  fifo_refused "${train[@]}" --config "$tmp/fifo/pipe" --train-iters 1 --save-dir "$tmp/fifo/r"
  fifo_refused "${train[@]}" --train-data "$tmp/fifo/pipe" --train-iters 1 --save-dir "$tmp/fifo/r"
  fifo_refused "$bin/tokenize" --tokenizer-type ByteLevel --input "$tmp/fifo/pipe" --output-prefix "$tmp/fifo/t"
  out=$("${train[@]}" --config "$tmp" --train-iters 1 --save-dir "$tmp/fifo/r" 2>&1)
  grep -q "is a directory, not a regular file" <<< "$out" || fail "--config DIR: $out"
  echo "ok   FIFOs (config.json, model.safetensors, llm.c file, --config, --train-data, --input) and a directory refused by kind"
fi

echo "ckpt_output_safety: $checks checks"
if [ $failures -ne 0 ]; then
  echo "$failures failed"
  exit 1
fi
echo "all passed"
