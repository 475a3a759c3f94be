#!/usr/bin/env bash
# tests/cuda_emu/bench_cuda.sh BIN_DIR SOURCE_DIR - the GPU benchmarks' own code on the emulated CUDA
# backend (BIN_DIR: bench_cuda_train and bench_cuda_attention built on it), bench_cuda_train with tiny
# models standing in for its named ones (a GPU session runs the real ones first thing in
# bench/cuda/gpu_check.sh, so a fault there would cost it device time):
#  1. GPT-2, bf16, --profile: the header names the precision (issue 14: it said fp32 under --bf16),
#     the result line has ms/iter, tok/s, TFLOP/s, "MFU n/a" on a card without a peak in the table
#     and a loss near ln V on random tokens; the per-op table lists the fused attention, the fused
#     classifier, the multi-tensor norm and AdamW, with aligned columns and a total.
#  2. The Llama, fp32, --fit-memory-gib and --peak-tflops: the chosen micro-batch is the largest
#     whose plan fits, by the partitioner's own plan of it and of the next one; MFU against the peak.
#  3. bench/cuda/compare.sh (what `tools/trident.sh bench-cuda` runs) with this bench and its PyTorch
#     peer on the CPU (Debian's 1.13 has no SDPA: both sides with the materialised attention): the
#     ratio line reads both tokens/s and divides them.
#  4. bench_cuda_attention on a few tokens (bf16 and fp32, the tiled head sizes 64 and 80, T 32 and 70):
#     a line per shape with the fields bench/cuda/attention.sh reads (T, HS, the fused ms), the shape
#     that --tokens asks for, and the unfused path timed, or refused by --unfused-limit-gb.
#  5. --predict (the kernel-time model) on the tiny GPT-2: the table's rows sum to its total.
#  6. bench_cuda_cp_attention (bench/cuda/cp_attention.sh's program) at T 512, cp 2 and 4: the uncut
#     line, a line per cp with every kv call on the tiled kernels, and --simple with none.
#  7. bench_grad_compression --device cuda on 64 Ki elements: a row per compressor.
set -u
bench=$1/bench_cuda_train
attention=$1/bench_cuda_attention
src=$(cd "$2" && pwd)
partitioner="$(dirname "$bench")/../bin/partitioner"
export OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1 OMP_NUM_THREADS=1
export OMPI_MCA_ess_singleton_isolated=1 # one rank: no orted
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
failures=0
fail() { echo "FAIL: $*"; failures=$((failures + 1)); }

# the tiny models under the names the bench knows
cp "$src/models/gpt2-tiny-byte.json" "$tmp/gpt2.json"
cp "$src/models/llama-tiny-byte.json" "$tmp/llama-124m.json"
common=(--models-dir "$tmp" --seq-length 32 --iters 1)

# 1. GPT-2, bf16, profiled
"$bench" "${common[@]}" --model gpt2 --micro-batch-size 2 --warmup 1 --bf16 --profile --attention-backend flash \
  > "$tmp/gpt.log" 2>&1 ||
  fail "bench_cuda_train --bf16 --profile exited $? ($(tail -3 "$tmp/gpt.log"))"
head -1 "$tmp/gpt.log" | grep -q "Trident CUDA emulation (CPU).*, bf16 (bf16 cuBLASLt GEMMs accumulating in fp32" ||
  fail "the header does not say bf16: $(head -1 "$tmp/gpt.log")"
line=$(grep -E '^gpt2 ' "$tmp/gpt.log")
want='^gpt2 +[0-9]+M +bf16 B +2 x T +32 x dp 1 \| +[0-9.]+ ms/iter \| +[0-9]+ tok/s \| +[0-9.]+ TFLOP/s \| '
want+='MFU n/a \(unknown card: pass --peak-tflops\) \| loss [0-9.]+$'
echo "$line" | grep -qE "$want" || fail "the result line: '$line'"
loss=$(echo "$line" | sed -n 's/.*| loss \([0-9.]*\)$/\1/p')
awk -v l="${loss:-0}" 'BEGIN { exit !(l > 5.3 && l < 5.8) }' || fail "loss $loss on random bytes, not near ln 257 = 5.55"
for op in matmul flash_attention_forward flash_attention_backward ce_fused sum_squares_multi adamw_fused_multi \
  add_layernorm_forward; do
  grep -qE "^$op +[0-9]+ +[0-9.]+ +[0-9.]+%$" "$tmp/gpt.log" || fail "the profile has no row for $op"
done
grep -qE '^total +[0-9.]+$' "$tmp/gpt.log" || fail "the profile has no total"
# every row of the table ends its calls column (right-aligned) where the header's ends
cols=$(sed -n '/^op /,/^total/p' "$tmp/gpt.log" | awk '/^total/ {next} {print index($0, " " $2 " ") + length($2)}' |
  sort -u | wc -l)
[ "$cols" = 1 ] || fail "the profile's columns are not aligned: $(sed -n '/^op /,/^total/p' "$tmp/gpt.log")"

# 2. the Llama, fp32, the largest micro-batch whose plan fits 0.08 GiB, MFU against a given peak
limit=0.08
"$bench" "${common[@]}" --model llama-124m --warmup 0 --fit-memory-gib $limit --peak-tflops 10 > "$tmp/llama.log" 2>&1 ||
  fail "bench_cuda_train --fit-memory-gib exited $? ($(tail -3 "$tmp/llama.log"))"
B=$(sed -n 's/^llama-124m: micro-batch \([0-9]*\), the largest whose planned memory fits 0.08 GiB per GPU (.*/\1/p' "$tmp/llama.log")
if [ -z "$B" ]; then
  fail "no fitted micro-batch: $(cat "$tmp/llama.log")"
else
  grep -qE "^llama-124m +[0-9]+M +fp32 B +$B x T +32 x dp 1 \| .* \| MFU +[0-9.]+% of fp32 peak \| loss [0-9.]+$" "$tmp/llama.log" ||
    fail "the result line at micro-batch $B: $(grep '^llama-124m ' "$tmp/llama.log")"
  plan() { # the partitioner's planned bytes of the one stage at micro-batch $1
    "$partitioner" --config "$tmp/llama-124m.json" --num-gpus 1 --tensor-model-parallel-size 1 \
      --pipeline-model-parallel-size 1 --micro-batch-size "$1" --global-batch-size "$1" --seq-length 32 --json |
      /usr/bin/python3 -c 'import json, sys; print(json.load(sys.stdin)["stages"][0]["memory_bytes"]["total"])'
  }
  fits=$(plan "$B") next=$(plan $((B + 1)))
  awk -v a="$fits" -v b="$next" -v g=$limit 'BEGIN { l = g * 1073741824; exit !(a <= l && b > l) }' ||
    fail "micro-batch $B plans $fits bytes and $((B + 1)) plans $next: $B is not the largest within $limit GiB"
fi

# 3. compare.sh, the bench against PyTorch in one command
BIN=$(dirname "$bench") MODELS_DIR="$tmp" PYTORCH_DEVICE=cpu PYTHON=/usr/bin/python3 \
  bash "$src/bench/cuda/compare.sh" --models gpt2 --micro-batch-size 2 --seq-length 32 --iters 1 --warmup 1 \
  --attention materialized > "$tmp/compare.log" 2>&1 || fail "compare.sh exited $? ($(tail -3 "$tmp/compare.log"))"
ours=$(awk -F'|' '/^gpt2 / {print $3}' "$tmp/compare.log" | awk '{print $1}')
theirs=$(awk -F'|' '/^pytorch gpt2 B 2 T 32 bf16 materialized / {print $3}' "$tmp/compare.log" | awk '{print $1}')
ratio=$(grep -E '^ratio gpt2: Trident [0-9]+ tok/s / PyTorch eager \(materialized\) [0-9]+ tok/s = [0-9.]+x$' "$tmp/compare.log")
if [ -z "$ours" ] || [ -z "$theirs" ] || [ -z "$ratio" ]; then
  fail "compare.sh's lines: $(cat "$tmp/compare.log")"
else
  r=$(echo "$ratio" | sed 's/.* = \([0-9.]*\)x$/\1/')
  awk -v o="$ours" -v t="$theirs" -v r="$r" 'BEGIN { exit !(r > 0 && (o / t - r) ^ 2 < 0.006 ^ 2) }' ||
    fail "the ratio $r is not $ours / $theirs"
fi

# 4. bench_cuda_attention: the lines attention.sh reads ($7 T, $9 HS, $13 the fused ms)
"$attention" --head-sizes 64,80 --seq-lengths 32,70 --tokens 64 --iters 1 > "$tmp/att.log" 2>&1 ||
  fail "bench_cuda_attention exited $? ($(tail -3 "$tmp/att.log"))"
"$attention" --head-sizes 64 --seq-lengths 32 --tokens 64 --iters 1 --fp32 --unfused-limit-gb 0 >> "$tmp/att.log" 2>&1 ||
  fail "bench_cuda_attention --fp32 exited $? ($(tail -3 "$tmp/att.log"))"
shapes=$(awk '/^trident / {print $3, $5, $7, $9, $11}' "$tmp/att.log" | tr '\n' ';')
[ "$shapes" = "2 12 32 64 bf16;1 12 70 64 bf16;2 9 32 80 bf16;1 9 70 80 bf16;2 12 32 64 fp32;" ] ||
  fail "bench_cuda_attention's shapes (B NH T HS precision): $shapes"
num='[0-9]+\.[0-9]+'
fused="fused $num ms $num TFLOP/s"
n_timed=$(grep -cE "^trident B [0-9]+ NH [0-9]+ T [0-9]+ HS [0-9]+ \| bf16 $fused \| unfused $num ms \(${num}x\)$" "$tmp/att.log")
[ "$n_timed" = 4 ] || fail "bf16 lines with both paths timed: $n_timed of 4"
grep -qE "^trident B 2 NH 12 T 32 HS 64 \| fp32 $fused \| unfused not run \(its scores would take $num GB\)$" \
  "$tmp/att.log" || fail "the fp32 line with the unfused path refused"
awk '/^trident / && !($13 > 0) {bad = 1} END {exit bad}' "$tmp/att.log" ||
  fail "a fused time attention.sh would read is not positive"

# 6. bench_cuda_cp_attention: the cut-sequence kv ops on the tiled kernels (and the twins with --simple)
cp_att=$1/bench_cuda_cp_attention
"$cp_att" --seq-lengths 512 --context-parallel-sizes 2,4 --num-attention-heads 4 --num-query-groups 2 \
  --head-size 64 --iters 1 > "$tmp/cp.log" 2>&1 || fail "bench_cuda_cp_attention exited $? ($(tail -3 "$tmp/cp.log"))"
"$cp_att" --seq-lengths 256 --context-parallel-sizes 2 --num-attention-heads 2 --num-query-groups 1 \
  --head-size 64 --iters 1 --simple --fp32 --dkv-f32 >> "$tmp/cp.log" 2>&1 ||
  fail "bench_cuda_cp_attention --simple exited $? ($(tail -3 "$tmp/cp.log"))"
grep -qE "^T 512 B 1 NH 4/2 HS 64 bf16 \| uncut forward \+ backward $num ms$" "$tmp/cp.log" ||
  fail "bench_cuda_cp_attention: no uncut line"
[ "$(grep -cE "^  cp [24] rank 0 .* tiled kv calls 6 of 6$" "$tmp/cp.log")" = 2 ] ||
  fail "bench_cuda_cp_attention: not every kv call tiled at cp 2 and 4"
grep -qE "^  cp 2 rank 0 .* tiled kv calls 0 of 6$" "$tmp/cp.log" || fail "bench_cuda_cp_attention --simple took the tiled kernels"

# 5. --predict (the kernel-time model, no GPU): the per-op table's rows sum to the predicted step (each
#    row rounded to 0.5 us),
#    the matmuls are 12 L + 3 calls, and the 2026-11-27 op set has an adamw per parameter
"$bench" "${common[@]}" --model gpt2 --micro-batch-size 2 --bf16 --predict --hardware h200 \
  --attention-backend unfused > "$tmp/predict.log" 2>&1 || fail "bench_cuda_train --predict exited $?"
"$bench" "${common[@]}" --model gpt2 --micro-batch-size 2 --bf16 --predict --hardware h200 \
  --op-set 2026-11-27 >> "$tmp/predict.log" 2>&1 || fail "bench_cuda_train --predict --op-set exited $?"
awk '$1 == "op" {sum = 0; rows = 0} $NF ~ /^(memory|compute|launch)$/ {sum += $3; rows++}
     $1 == "total" {n++; if (sum <= 0 || (sum - $3) ^ 2 > (5e-4 * (rows + 1)) ^ 2) bad = 1}
     END {exit bad || n != 2}' "$tmp/predict.log" || fail "--predict: the rows do not sum to the total"
grep -qE '^matmul +51 ' "$tmp/predict.log" || fail "--predict: not 51 matmul calls (4 layers)"
grep -qE '^adamw +52 ' "$tmp/predict.log" || fail "--predict --op-set 2026-11-27: not 52 adamw calls"
grep -qE "^gpt2 .*\| +$num ms/iter predicted \|" "$tmp/predict.log" || fail "--predict: no predicted step line"

# 7. bench_grad_compression --device cuda (bench/cuda/gpu_check.sh's compression step) on 64 Ki elements:
#    a row per compressor and two-phase form, each with its timings and a finite break-even
"$1/bench_grad_compression" --device cuda --elements 65536 --dp 2 --reps 1 > "$tmp/compress.log" 2>&1 ||
  fail "bench_grad_compression --device cuda exited $? ($(tail -3 "$tmp/compress.log"))"
head -1 "$tmp/compress.log" | grep -q "^gradient compression on the cuda backend: a bucket of 65536 fp32" ||
  fail "bench_grad_compression: the header does not name the cuda backend: $(head -1 "$tmp/compress.log")"
for c in 1bit qsgd topk powersgd "1bit 2ph" "qsgd 2ph" "topk 2ph"; do
  grep -qE "^$c +$num +${num}x +$num +$num +$num +${num}x +${num}x +$num$" "$tmp/compress.log" ||
    fail "bench_grad_compression: no row for $c"
done

if [ $failures -ne 0 ]; then
  echo "$failures failure(s); the logs:"; cat "$tmp/gpt.log" "$tmp/llama.log" "$tmp/compare.log" "$tmp/att.log" \
    "$tmp/predict.log" "$tmp/cp.log" "$tmp/compress.log"
  exit 1
fi
echo "bench_cuda_train on the emulated backend: GPT-2 bf16 profiled ($line);"
echo "  the Llama at the fitted micro-batch $B ($fits bytes planned, $((B + 1)): $next); compare.sh: $ratio;"
echo "  bench_cuda_attention's shapes (B NH T HS precision): $shapes"
