#!/usr/bin/env bash
# bench/cuda/cp_attention.sh - the GPU check of context parallelism's cut-sequence attention ops
# (docs/context_parallel.md, "Fast CUDA kernels for a cut sequence"): written in a session without a
# GPU, for the next session lent one. At most BUDGET seconds of run time (default 240), so a try
# and a rerun fit a 15-minute booking. Pack a build as bench/cuda/gpu_check.sh says (it builds
# bench_cuda_cp_attention and test_gpu_ops with the CUDA backend), copy this script in, run it there:
#   (device tool: carry [".gpu"])  bash .gpu/env.sh bash bench/cuda/cp_attention.sh
# Steps:
#   1. test_gpu_ops's attention cases on the GPU: the kv ops' tiled kernels against the CPU backend
#      (cut sequences, GQA and MHA, bf16 and fp32, fp32 dk/dv beside bf16), today's problem through
#      the kv ops bit for bit the fused ops, and which path ran (tri_cuda_flash_kv_tiled_calls);
#   2. ms of one cp rank's forward + backward (kv forward, delta, dq, dkv against the gathered
#      sequence) against the uncut fused attention, T 32k and 64k, cp 2 and 4, bf16, a Llama-like
#      16/4 heads of 128: a rank's share should be near 1 / cp (the causal work is balanced);
#      then the same with fp32 dk, dv (the all_gather backward's partials), and fp32 at 32k;
#   3. the twins at a short T for the ratio of the two paths (--simple).
# Logs in $OUT (or /tmp/out); all.log holds everything printed.
: "${BUDGET:=240}" # seconds
# shellcheck source=bench/cuda/gpu_budget.sh
source "$(dirname "$0")/gpu_budget.sh"
BIN=${BIN:-bin} # the packed build's binaries (bench/cuda/gpu_check.sh's layout)
nvidia-smi --query-gpu=name,memory.total --format=csv,noheader || true

el "1. test_gpu_ops: the attention ops (tiled kv kernels against the CPU)"
timeout "$(tmo 90)" "$BIN/test_gpu_ops" --filter 'gpu_ops/flash_attention*' --verbose 2>&1 | tail -40

el "2. one cp rank against the uncut op: bf16, T 32k and 64k, cp 2 and 4"
timeout "$(tmo 90)" "$BIN/bench_cuda_cp_attention" --seq-lengths 32768,65536 --context-parallel-sizes 2,4 --iters 3
el "2b. the same with fp32 dk, dv (all_gather partials), T 64k"
timeout "$(tmo 40)" "$BIN/bench_cuda_cp_attention" --seq-lengths 65536 --context-parallel-sizes 2,4 --iters 3 --dkv-f32
el "2c. fp32 (the CUDA cores), T 32k"
timeout "$(tmo 60)" "$BIN/bench_cuda_cp_attention" --seq-lengths 32768 --context-parallel-sizes 2,4 --iters 2 --fp32

el "3. the simple twins at T 4096 (the ratio of the two paths)"
timeout "$(tmo 40)" "$BIN/bench_cuda_cp_attention" --seq-lengths 4096 --context-parallel-sizes 2 --iters 1 --simple
timeout "$(tmo 20)" "$BIN/bench_cuda_cp_attention" --seq-lengths 4096 --context-parallel-sizes 2 --iters 1
el "done"
