#!/usr/bin/env bash
# bench/cuda/gpu_pack.sh [BUILD_DIR] - packs a GPU build for the device tool's 64 MiB carry and copies
# in what bench/cuda/gpu_check.sh runs; then, with the device tool (carry [".gpu"]):
#   bash .gpu/env.sh bash bench/cuda/gpu_check.sh
# ../shared/gpu/pack.sh writes .gpu/ with every executable whole: ~200 MB for an optimized sm_90
# build, as each executable carries the same kernels (~14 MB of them), over the carry's 64 MiB, of
# which the tracked tree takes ~35. Packed as one xz stream with a 64 MiB dictionary the copies
# cost little: bin/ 184 MB -> 11 MB (2026-12-04); data/ 7.8 -> 2.0 MB. gpu_check.sh unpacks both.
# BUILD_DIR (default build-gpu) is configured first when it has no CMakeCache.txt:
#   cmake -S . -B build-gpu -DCMAKE_BUILD_TYPE=Release -DTRIDENT_MARCH=x86-64-v3 -DTRIDENT_CUDA_ARCHS=90
#   (-DTRIDENT_CUDA_UNOPTIMIZED=OFF: kernels optimized, as a GPU needs; ~3 minutes on 2 cores), and its
# packed programs are always brought up to date (seconds when they are), so a pack never carries
# binaries older than the tree.
set -euo pipefail
cd "$(dirname "$0")/../.."
B=${1:-build-gpu}
if [ ! -f "$B/CMakeCache.txt" ]; then
  cmake -S . -B "$B" -DCMAKE_BUILD_TYPE=Release -DTRIDENT_MARCH=x86-64-v3 -DTRIDENT_CUDA_ARCHS=90 \
    -DTRIDENT_CUDA_UNOPTIMIZED=OFF > /dev/null
fi
cmake --build "$B" -j "$(nproc)" --target engine_train partitioner ckpt tokenize test_gpu_ops test_gpu_gpt \
  test_gpu_graph mpi_gpt_parallel bench_cuda_train bench_cuda_attention bench_cuda_cp_attention bench_grad_compression
bash ../shared/gpu/pack.sh "$B"
strip --strip-debug .gpu/bin/*
tar -C .gpu -cf - bin | xz -T1 --lzma2=preset=6,dict=64MiB > .gpu/bin.tar.xz
tar -C .gpu -cf - data | xz -T1 -6 > .gpu/data.tar.xz
rm -rf .gpu/bin .gpu/data
mkdir -p .gpu/bench/cuda .gpu/tests/gpu .gpu/tests/lib
cp bench/cuda/{compare.sh,pytorch_gpt2.py,gpu_budget.sh,gpu_check.sh,gpu_check_rest.sh,attention.sh,pytorch_attention.py,cp_attention.sh} \
  .gpu/bench/cuda/
cp tests/gpu/*.sh .gpu/tests/gpu/
cp tests/lib/gpu_train.sh .gpu/tests/lib/
echo "gpu_pack: .gpu/ $(du -sh .gpu | cut -f1) (the device tool carries at most 64 MiB with the tree)"
