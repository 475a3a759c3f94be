#!/usr/bin/env bash
# bench/cuda/gpu_check.sh - the whole GPU check of a packed build (../shared/gpu/README.md), bounded in
# time, for a lent GPU machine where every minute counts. Pack, copy the scripts in, run it there:
#   bash ../shared/gpu/pack.sh BUILD && mkdir -p .gpu/bench/cuda .gpu/tests/gpu &&
#   cp bench/cuda/{compare.sh,pytorch_gpt2.py,gpu_check.sh,attention.sh,pytorch_attention.py} .gpu/bench/cuda/ &&
#   cp tests/gpu/train_cuda_vs_cpu.sh .gpu/tests/gpu/
#   (on the GPU machine)  BUDGET=420 bash .gpu/env.sh bash bench/cuda/gpu_check.sh
# Order, most needed first (a step that finds the budget spent gets 3 s): the GPU tests (fast
# kernels against their twins and the CPU, bit for bit where promised; the fused attention's
# tiled kernels; the multi-tensor norm and AdamW), engine_train cuda against cpu (fused attention,
# the default; GPT-2 and the tiny Llama), the fused attention against PyTorch's SDPA (bf16, then
# fp32), the bench against PyTorch eager for GPT-2 124M bf16, its per-op profile, GPT-2 1.5B bf16 at
# the largest micro-batch that fits 80 GB, 124M fp32, 124M with the unfused attention on both
# sides, 124M at T 8192, the Llama 3.2 1B shape at T 2048 beside GPT-2 1.5B at micro-batch 2, then
# compute-sanitizer memcheck and initcheck (SKIP_SANITIZERS=1 skips them). Logs in $OUT (or
# /tmp/out).
O=${OUT:-/tmp/out}; mkdir -p "$O"; exec > >(tee "$O/all.log") 2>&1
D=$(( $(date +%s) + ${BUDGET:-420} ))
tmo() { local r=$(( D - $(date +%s) - 5 )); [ $r -lt 3 ] && r=3; [ $r -gt $1 ] && echo $1 || echo $r; }
t0=$(date +%s); el() { echo "=== [$(( $(date +%s) - t0 ))s] $*"; }
el setup; nvidia-smi --query-gpu=name,memory.total,driver_version --format=csv,noheader
for t in bin/test_gpu_ops bin/test_gpu_gpt; do
  el "$t"; timeout "$(tmo 150)" "$t" --jobs 1 > "$O/$(basename "$t").log" 2>&1; echo "rc=$?"
  grep -E 'FAIL|Synthesis|differs|err |score|ERR' "$O/$(basename "$t").log" | head -40
done
el "engine_train cuda vs cpu (fp32, bf16)"
OMP_NUM_THREADS=8 timeout "$(tmo 120)" bash tests/gpu/train_cuda_vs_cpu.sh bin . 2>&1 | tail -6
el "engine_train cuda vs cpu, the tiny Llama (fp32, bf16)"
OMP_NUM_THREADS=8 timeout "$(tmo 120)" bash tests/gpu/train_cuda_vs_cpu.sh bin . models/llama-tiny-byte.json 2>&1 | tail -6
el "bench: fused attention vs PyTorch SDPA (bf16, HS 64/128, T 1024/4096)"
BIN=bin timeout "$(tmo 90)" bash bench/cuda/attention.sh --iters 5 2>&1 | grep -vE '^$'
el "bench: fused attention fp32 (CUDA cores) vs PyTorch SDPA (memory-efficient, fp32), HS 64/128, T 1024"
BIN=bin timeout "$(tmo 60)" bash bench/cuda/attention.sh --fp32 --seq-lengths 1024 --iters 3 2>&1 | grep -vE '^$'
el "bench: Trident vs PyTorch eager, GPT-2 124M bf16 B 8"
BIN=bin timeout "$(tmo 120)" bash bench/cuda/compare.sh --models gpt2 --iters 10 --warmup 3 2>&1 | grep -vE '^$'
el "profile: GPT-2 124M bf16"
timeout "$(tmo 60)" bin/bench_cuda_train --models-dir models --model gpt2 --iters 5 --warmup 2 --bf16 --profile \
  > "$O/profile.log" 2>&1; tail -32 "$O/profile.log"
el "bench: GPT-2 1.5B bf16, the largest micro-batch that fits 80 GB (issue 14's >= 35% MFU target)"
BIN=bin timeout "$(tmo 150)" bash bench/cuda/compare.sh --models gpt2-xl --micro-batch-size fit --iters 3 --warmup 1 2>&1 | grep -vE '^$'
el "bench: GPT-2 124M fp32"
BIN=bin timeout "$(tmo 90)" bash bench/cuda/compare.sh --models gpt2 --fp32 --iters 5 --warmup 2 2>&1 | grep -vE '^$'
el "bench: the same with the unfused attention on both sides"
BIN=bin timeout "$(tmo 60)" bash bench/cuda/compare.sh --models gpt2 --iters 5 --warmup 2 --attention materialized 2>&1 | grep -E 'ms/iter|ratio|fail'
el "bench: GPT-2 124M at T 8192, micro-batch 1, bf16 (models/gpt2-8k.json)"
BIN=bin timeout "$(tmo 60)" bash bench/cuda/compare.sh --models gpt2-8k --seq-length 8192 --iters 3 --warmup 1 2>&1 | grep -vE '^$'
el "bench: Llama 3.2 1B shape, bf16, T 2048, B 2 (the Llama issue's MFU target) and GPT-2 1.5B bf16 beside it"
timeout "$(tmo 90)" bin/bench_cuda_train --models-dir models --model llama-3.2-1b --seq-length 2048 --iters 5 --warmup 2 --bf16 2>&1 | tail -2
timeout "$(tmo 60)" bin/bench_cuda_train --models-dir models --model gpt2-xl --iters 5 --warmup 2 --bf16 2>&1 | tail -2
[ -n "${SKIP_SANITIZERS:-}" ] || {
A="--config models/gpt2-tiny-byte.json --train-data data/fortunes_byte_train.bin --val-data data/fortunes_byte_val.bin --micro-batch-size 4 --seq-length 64 --lr 2e-3 --log-interval 1 --eval-interval 100"
el "compute-sanitizer memcheck, tiny bf16, 3 iterations"
timeout "$(tmo 80)" compute-sanitizer --tool memcheck --print-limit 10 bin/engine_train $A --train-iters 3 --device cuda --bf16 > "$O/memcheck.log" 2>&1
echo "rc=$?"; grep -cE 'Invalid __global__|Invalid __shared__' "$O/memcheck.log"; grep 'ERROR SUMMARY' "$O/memcheck.log"
el "compute-sanitizer initcheck, tiny bf16, 1 iteration"
timeout "$(tmo 100)" compute-sanitizer --tool initcheck --print-limit 10 bin/engine_train $A --train-iters 1 --device cuda --bf16 > "$O/initcheck.log" 2>&1
echo "rc=$?"; grep -E 'Uninitialized|ERROR SUMMARY' "$O/initcheck.log" | sort | uniq -c | head; grep -m3 -A6 'Uninitialized' "$O/initcheck.log"
}
el done
