#!/usr/bin/env bash
# bench/cuda/gpu_check_rest.sh - the GPU checks bench/cuda/gpu_check.sh leaves out, for a second
# booking: at most BUDGET seconds of run time (default 560). Pack as gpu_check.sh says, then
#   (device tool: carry [".gpu"])  bash .gpu/env.sh bash bench/cuda/gpu_check_rest.sh
# Steps:
#   1. compute-sanitizer memcheck over every case of test_gpu_ops (the fast kernels and their twins,
#      the tiled attention, the MoE ops, the fused AdamW; small shapes, --jobs 1), test_gpu_gpt (whole
#      training steps) and test_gpu_graph (the device graphs): an invalid global or shared access, a
#      misaligned vector load or a leak of device memory is reported with its kernel;
#   2. bench/cuda/cp_attention.sh: the cut-sequence attention ops on the GPU (their tests, one cp rank's
#      time against the uncut op at T 32k and 64k, the fp32 paths, the twins);
#   3. bench/cuda/attention.sh --fp32: the fused attention against PyTorch's SDPA in fp32;
#   4. racecheck and synccheck on the cut-sequence attention ops (their shared-memory tiles);
#   5. memcheck over 3 bf16 iterations of engine_train --device cuda with the tiny Llama and the tiny
#      Mixtral (RMSNorm, RoPE, SwiGLU, the MoE router, dispatch and grouped GEMMs), saving a checkpoint.
# Arguments: the steps to run (default all), e.g. `gpu_check_rest.sh 4 5` for a rerun of two.
# Logs in $OUT (or /tmp/out); all.log holds everything printed.
: "${BUDGET:=560}" # seconds
# shellcheck source=bench/cuda/gpu_budget.sh
source "$(dirname "$0")/gpu_budget.sh"
steps=${*:-1 2 3 4 5}; want() { [[ " $steps " == *" $1 "* ]]; }
el setup; nvidia-smi --query-gpu=name,memory.total,driver_version --format=csv,noheader

if want 1; then
for t in test_gpu_ops:170 test_gpu_gpt:60 test_gpu_graph:60; do
  el "1. compute-sanitizer memcheck, every case of ${t%:*}"
  sanitize "memcheck_${t%:*}.log" "${t#*:}" --tool memcheck --leak-check full --print-limit 20 -- \
    "bin/${t%:*}" --jobs 1 --verbose
  echo "cases started $(grep -c '^\[RUN \]' "$O/memcheck_${t%:*}.log"), passed $(grep -c '^\[PASS\]' "$O/memcheck_${t%:*}.log")"
done
fi

if want 2; then
el "2. bench/cuda/cp_attention.sh"
BUDGET=$(tmo 200) BIN=bin OUT="$O/cp" bash bench/cuda/cp_attention.sh > /dev/null 2>&1
grep -vE '^$' "$O/cp/all.log" | grep -vE '^\[----\]   ' | tail -60
fi

if want 3; then
el "3. bench: fused attention vs PyTorch SDPA in fp32 (HS 64 and 128, T 1024)"
BIN=bin timeout "$(tmo 40)" bash bench/cuda/attention.sh --fp32 --seq-lengths 1024 --iters 5 2>&1 | grep -vE '^$'
fi

if want 4; then
for tool in racecheck synccheck; do
  el "4. compute-sanitizer $tool on the cut-sequence attention ops"
  sanitize "${tool}_kv.log" 60 --tool "$tool" --print-limit 10 -- bin/test_gpu_ops --jobs 1 \
    --filter 'gpu_ops/flash_attention_kv_ops'
done
fi

if want 5; then
for cfg in llama-tiny-byte moe-tiny-byte; do
  el "5. compute-sanitizer memcheck, engine_train --device cuda --bf16, models/$cfg.json, 3 iterations"
  OMP_NUM_THREADS=4 sanitize "memcheck_$cfg.log" 90 --tool memcheck --leak-check full --print-limit 200 -- \
    bin/engine_train --config "models/$cfg.json" --train-data data/fortunes_byte_train.bin \
    --val-data data/fortunes_byte_val.bin --micro-batch-size 4 --seq-length 128 --train-iters 3 --bf16 \
    --eval-interval 3 --eval-iters 1 --save-interval 3 --sample-length 0 --log-interval 1 --device cuda \
    --save-dir "$(mktemp -d)/run"
  grep -E '^trained|^validation|^saved checkpoint' "$O/memcheck_$cfg.log"
  # the system NCCL probes kernels built for other GPUs (../shared/gpu/README.md): API errors not ours
  echo "API errors raised inside libnccl: $(grep -A3 'Program hit' "$O/memcheck_$cfg.log" | grep -c 'Host Frame: .*libnccl') of $(grep -c 'Program hit' "$O/memcheck_$cfg.log")"
done
fi
el "done"
