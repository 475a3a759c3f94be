#!/usr/bin/env bash
# tests/fuzz/run.sh - builds and runs Trident's libFuzzer harnesses.
#
#   tests/fuzz/run.sh [--build-only] [--seconds N | --runs N] [--out DIR] [TARGET...]
#
# Targets (tests/fuzz/fuzz_<target>.c): config (models/config.c, models/llama_config.c), token_file (engine/data/token_file.c),
# safetensors (checkpoints/safetensors.c: Hugging Face weight files),
# tokenizer (GPT-2 BPE and byte-level encode/decode of arbitrary bytes), ckpt (checkpoint manifest
# parse, SHA-256 verification, with TRIDENT_FUZZ_HDF5=1 the HDF5 reads). Each harness is compiled
# with clang -fsanitize=fuzzer,address,undefined (-fno-sanitize-recover=all) together with the
# library sources it exercises, so coverage and sanitizers reach our code. It starts from the seed
# corpus tests/fuzz/corpus/<target>/ (read-only) and keeps what it finds in DIR/corpus/<target>.
# Exits non-zero on a build failure or a crash (the reproducer is written to DIR/crash-*).
# Default: 20 s per target, DIR = build-fuzz. FUZZ_SEED=N fixes libFuzzer's seed (0: random). FUZZ_DETECT_LEAKS=0 turns LeakSanitizer off (for the
# HDF5 mode, where libhdf5 leaks on corrupt object headers). Needs clang 14 with libclang_rt.fuzzer.
set -euo pipefail
src=$(cd "$(dirname "$0")/../.." && pwd)
out="$src/build-fuzz"
seconds=20
runs=""
build_only=0
targets=()
while [ $# -gt 0 ]; do
  case $1 in
    --build-only) build_only=1 ;;
    --seconds) seconds=$2; shift ;;
    --runs) runs=$2; shift ;;
    --out) out=$2; shift ;;
    -h|--help) sed -n 2,14p "$0"; exit 0 ;;
    *) targets+=("$1") ;;
  esac
  shift
done
[ ${#targets[@]} -gt 0 ] || targets=(config token_file tokenizer ckpt safetensors)
CC=${FUZZ_CC:-clang}
command -v "$CC" >/dev/null || { echo "fuzz: $CC not found (apt-get install clang)"; exit 1; }
mkdir -p "$out"

cjson="$(pkg-config --cflags --libs libcjson)"
pcre="$(pkg-config --cflags --libs libpcre2-8)"
crypto="$(pkg-config --cflags --libs libcrypto)"
hdf5_inc="-I/usr/include/hdf5/serial"
hdf5_lib="-L/usr/lib/x86_64-linux-gnu/hdf5/serial -lhdf5"
sources() {
  case $1 in
    config) echo "models/config.c models/llama_config.c models/block_cost.c models/config_file.c layers/moe_buffers.c layers/moe_ep_buffers.c \
                  engine/core/status.c engine/core/file.c engine/core/tensor.c \
                  partitioner/transformer.c engine/train/train_layout.c" ;;
    token_file) echo "engine/data/token_file.c engine/core/status.c engine/core/file.c" ;;
    safetensors) echo "checkpoints/safetensors.c engine/core/status.c engine/core/file.c" ;;
    tokenizer) echo "models/tokenizer.c models/tokenizer_gpt2.c models/bytemap.c engine/core/status.c \
                     engine/core/file.c" ;;
    ckpt) echo "checkpoints/manifest.c checkpoints/reader.c checkpoints/sha256.c checkpoints/fsutil.c engine/train/local_sgd_config.c engine/train/grad_compression.c \
                checkpoints/h5.c checkpoints/box.c engine/core/status.c engine/core/file.c" ;;
  esac
}
libs() {
  case $1 in
    config) echo "$cjson -lm" ;;
    token_file) echo "" ;;
    safetensors) echo "$cjson -lm" ;;
    tokenizer) echo "$cjson $pcre" ;;
    ckpt) echo "$hdf5_inc $cjson $crypto $hdf5_lib -lm" ;;
  esac
}

status=0
for t in "${targets[@]}"; do
  bin="$out/fuzz_$t"
  srcs=()
  for s in $(sources "$t"); do [ -f "$src/$s" ] && srcs+=("$src/$s"); done
  # shellcheck disable=SC2046
  if ! "$CC" -g -O1 -std=c11 -D_POSIX_C_SOURCE=200809L -D_DEFAULT_SOURCE -I"$src" \
       -fsanitize=fuzzer,address,undefined -fno-sanitize-recover=all \
       "$src/tests/fuzz/fuzz_$t.c" "${srcs[@]}" $(libs "$t") -o "$bin" 2> "$out/fuzz_$t.build.log"; then
    echo "fuzz $t: build failed:"; head -30 "$out/fuzz_$t.build.log"; status=1; continue
  fi
  [ $build_only -eq 1 ] && { echo "fuzz $t: built $bin"; continue; }
  mkdir -p "$out/corpus/$t"
  limit=(-max_total_time="$seconds")
  [ -n "$runs" ] && limit=(-runs="$runs")
  log="$out/fuzz_$t.log"
  maxlen=4096
  [ "$t" = ckpt ] && maxlen=32768
  dict=()
  [ -f "$src/tests/fuzz/$t.dict" ] && dict=(-dict="$src/tests/fuzz/$t.dict")
  if (cd "$src" && ASAN_OPTIONS=detect_leaks=${FUZZ_DETECT_LEAKS:-1}:abort_on_error=0 TRIDENT_FUZZ_BPE_DIR="$src/data/gpt2" \
        "$bin" "${limit[@]}" -seed="${FUZZ_SEED:-0}" "${dict[@]}" -max_len=$maxlen -timeout=10 -rss_limit_mb=2048 -print_final_stats=1 \
        -artifact_prefix="$out/crash-$t-" "$out/corpus/$t" "$src/tests/fuzz/corpus/$t" > "$log" 2>&1); then
    execs=$(grep -m1 'stat::number_of_executed_units' "$log" | awk '{print $2}')
    echo "fuzz $t: ok, ${execs:-?} executions, no crash"
  else
    echo "fuzz $t: FAILED (crash or error), see $log:"; grep -E "ERROR|SUMMARY|runtime error|Test unit written" "$log" | head -10
    status=1
  fi
done
exit $status
