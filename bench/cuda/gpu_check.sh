#!/usr/bin/env bash
# bench/cuda/gpu_check.sh - the whole GPU check of a packed build (../shared/gpu/README.md) in one
# short call: at most BUDGET seconds of run time (default 300), so that one try and a rerun fit a
# 15-minute booking with the machine's start. Pack (bench/cuda/gpu_pack.sh: build, pack, compress
# within the device tool's 64 MiB, copy the scripts in), then run it there:
#   bash bench/cuda/gpu_pack.sh
#   (device tool: carry [".gpu"])  bash .gpu/env.sh bash bench/cuda/gpu_check.sh
# The gpu label's other scripts (tests/gpu/train_cuda_{graph,ep,cp}.sh, train_cuda_vs_cpu.sh with
# the Llama and Mixtral configs) are packed too; train_cuda_graph.sh needs h5diff, which the GPU
# machines lack.
# Order, most needed first; a step that finds the budget spent gets 3 s:
#   1. the op and model tests (test_gpu_ops, test_gpu_gpt, test_gpu_graph: fast kernels against their
#      twins and the CPU, bit for bit where promised; the tiled attention; the multi-tensor norm and
#      AdamW; the fused AdamW pass; the MoE ops; the device graphs);
#   2. flash against unfused on the tiny model: engine_train cuda against cpu with each attention
#      backend (correctness);
#   3. flash against unfused on GPT-2 124M bf16 (B 8, T 1024): both losses, then both speeds, the
#      same with --enable-cuda-graph, and the fused attention against PyTorch's SDPA on its shapes;
#   4. GPT-2 124M against the PyTorch peer in the same command (Trident's default attention);
#   5. mpi_gpt_parallel on 2 ranks sharing the GPU (the staged MPI comm); the compressors' encode +
#      decode per million elements on the GPU (bench_grad_compression --device cuda);
#   6. compute-sanitizer racecheck and initcheck on the attention tests (small shapes);
#   7. the per-op profile of GPT-2 124M bf16 (what the kernel-time model is checked against);
#   8. GPT-2 1.5B bf16 at the largest micro-batch that fits 80 GB, last.
# Logs in $OUT (or /tmp/out); all.log holds everything printed.
: "${BUDGET:=300}" # seconds
# shellcheck source=bench/cuda/gpu_budget.sh
source "$(dirname "$0")/gpu_budget.sh"
MPIRUN=${MPIRUN:-mpirun}
el setup; nvidia-smi --query-gpu=name,memory.total,driver_version --format=csv,noheader
for t in bin/test_gpu_ops bin/test_gpu_gpt bin/test_gpu_graph; do
  el "$t"; timeout "$(tmo 60)" "$t" --jobs 1 > "$O/$(basename "$t").log" 2>&1; echo "rc=$?"
  grep -E 'FAIL|Synthesis|differs|err |score|ERR' "$O/$(basename "$t").log" | head -30
done
for backend in flash unfused; do
  el "engine_train cuda vs cpu, tiny GPT, --attention-backend $backend (fp32, bf16)"
  TCC_ATTENTION=$backend OMP_NUM_THREADS=8 timeout "$(tmo 30)" bash tests/gpu/train_cuda_vs_cpu.sh bin . 2>&1 | tail -3
done
el "GPT-2 124M bf16 B 8 T 1024: flash against unfused (losses on the same random tokens, then speed)"
for backend in flash unfused; do
  timeout "$(tmo 40)" bin/bench_cuda_train --models-dir models --model gpt2 --iters 10 --warmup 3 --bf16 \
    --attention-backend "$backend" > "$O/gpt2_$backend.log" 2>&1; echo "$backend rc=$?"; grep -E '^gpt2 ' "$O/gpt2_$backend.log"
done
el "GPT-2 124M bf16 B 8 T 1024 with --enable-cuda-graph (the default attention; against the line above)"
timeout "$(tmo 40)" bin/bench_cuda_train --models-dir models --model gpt2 --iters 10 --warmup 3 --bf16 \
  --enable-cuda-graph > "$O/gpt2_graph.log" 2>&1; echo "graph rc=$?"; grep -E '^gpt2 |cuda graph' "$O/gpt2_graph.log"
el "bench: fused attention vs PyTorch SDPA (bf16, HS 64, T 1024)"
BIN=bin timeout "$(tmo 30)" bash bench/cuda/attention.sh --head-sizes 64 --seq-lengths 1024 --iters 5 2>&1 | grep -vE '^$'
el "bench: Trident vs PyTorch eager, GPT-2 124M bf16 B 8 (Trident's default attention)"
BIN=bin timeout "$(tmo 60)" bash bench/cuda/compare.sh --models gpt2 --iters 10 --warmup 3 2>&1 | grep -vE '^$'
el "mpi_gpt_parallel, 2 ranks sharing the GPU (staged MPI comm)"
timeout "$(tmo 40)" "$MPIRUN" --oversubscribe -np 2 bin/mpi_gpt_parallel > "$O/mpi_gpt_parallel.log" 2>&1
echo "rc=$?"; grep -E 'passed|FAIL|failed' "$O/mpi_gpt_parallel.log" | tail -3
el "bench: gradient compression encode + decode on the GPU (2^24 elements, dp 4; against sending at 25 and 100 Gb/s)"
timeout "$(tmo 30)" bin/bench_grad_compression --device cuda --elements 16777216 --reps 3 2>&1 | tail -12
for tool in racecheck initcheck; do
  el "compute-sanitizer $tool on the attention tests"
  sanitize "$tool.log" 40 --tool "$tool" --print-limit 10 -- bin/test_gpu_ops --jobs 1 --filter 'gpu_ops/flash_attention_fp32'
done
el "profile: GPT-2 124M bf16, per op (Trident's default attention)"
timeout "$(tmo 30)" bin/bench_cuda_train --models-dir models --model gpt2 --iters 5 --warmup 2 --bf16 --profile \
  > "$O/profile.log" 2>&1; tail -32 "$O/profile.log"
el "bench: GPT-2 1.5B bf16, the largest micro-batch that fits 80 GB"
BIN=bin timeout "$(tmo 90)" bash bench/cuda/compare.sh --models gpt2-xl --micro-batch-size fit --iters 3 --warmup 1 2>&1 | grep -vE '^$'
el "done"
