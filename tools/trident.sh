#!/usr/bin/env bash
# tools/trident.sh - the README's commands: install, build and then train | test | bench.
#
#   bash tools/trident.sh train [engine_train flags]   trains the default GPT on the fortunes text
#   bash tools/trident.sh train-llama [flags]           the same run with a tiny Llama (models/llama-tiny-byte.json)
#   bash tools/trident.sh train-moe [flags]             a tiny Mixtral (models/moe-tiny-byte.json, 8 experts, top-2):
#                                                       the loss falls and the expert load evens out
#   bash tools/trident.sh test                          runs every test (what CI runs)
#   bash tools/trident.sh bench                         runs the benchmarks
#   bash tools/trident.sh bench-cuda [flags]            GPT-2 124M and 1.5B on a GPU: ms/iter, tokens/s, MFU and
#                                                       the ratio against PyTorch eager (bench/cuda/compare.sh)
#   bash tools/trident.sh build                         installs and builds only
#   bash tools/trident.sh valgrind                      a 4-rank tiny training under valgrind memcheck
#
# The build goes to build/ (Release; the CUDA backend too when nvcc is found). Multi-rank runs use
# Open MPI with one BLAS/OpenMP thread per rank; --oversubscribe lets more ranks than cores run.
set -euo pipefail
cd "$(dirname "$0")/.."
cmd=${1:-}
shift || true

export PATH="$PATH:/usr/local/cuda/bin"
export OMP_WAIT_POLICY=PASSIVE   # OpenMP loops must not busy-wait beside OpenBLAS's threads
if [ "$(id -u)" -eq 0 ]; then
  export OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1
fi

# TRIDENT_MARCH: the -march of the default build (native; e.g. x86-64-v3 for binaries that travel
# to other machines). The test command's sanitizer build always uses a portable level (below).
march=${TRIDENT_MARCH:-native}

# The generator of a new tree: Ninja where it is installed (tools/install_deps.sh installs it), else
# CMake's Makefiles. Make runs CMake itself per target and per file (dependency scans, progress
# lines), process starts that are dear on these VMs: with Ninja and lld (CMakeLists.txt) the Release
# build took 305 s and 604 CPU-s against 441 s and 864 with Make and ld.bfd (docs/test-suite.md).
# A tree already configured keeps its generator (CMake refuses to switch one).
generator_args() {
  if [ ! -f "$1/CMakeCache.txt" ] && command -v ninja > /dev/null 2>&1; then
    echo "-GNinja"
  fi
}

# configure_tree DIR TYPE MARCH [CMAKE ARGS]: configures one tree (-Werror); starts its build.log.
configure_tree() {
  # shellcheck disable=SC2046 # none or one word
  cmake -S . -B "$1" $(generator_args "$1") -DCMAKE_BUILD_TYPE="$2" -DTRIDENT_MARCH="$3" -DTRIDENT_WERROR=ON \
    "${@:4}" >/dev/null
  : > "$1/build.log"
}

# build_tree DIR TYPE MARCH [CMAKE ARGS]: configures and builds one tree; fails loudly.
build_tree() {
  configure_tree "$@"
  build_targets "$1" "$2"
}

# build_targets DIR TYPE [TARGET...]: builds a configured tree (all of it, or the targets); fails loudly.
build_targets() {
  local targets=()
  [ $# -gt 2 ] && targets=(--target "${@:3}")
  if ! cmake --build "$1" -j "$(nproc)" "${targets[@]}" >> "$1/build.log" 2>&1; then
    grep -E "error|warning" "$1/build.log" | head -40 >&2
    echo "trident: the $2 build in $1 failed (full log: $1/build.log)" >&2
    exit 1
  fi
}

# TRIDENT_CUDA_ARCHS: the GPU generations nvcc compiles the kernels for. Where a GPU is visible,
# CMakeLists.txt's default (sm_80 and sm_90; -U drops what an earlier configure cached), optimized. On
# a machine without one, where the CUDA backend is only compiled (none of it can run), a compile check:
# sm_90 alone (the same source paths as sm_80, in half of nvcc's time) and the device code without
# optimization (TRIDENT_CUDA_UNOPTIMIZED, nvcc -G: every kernel still through the front end and ptxas,
# in 1/15 of the time; cuda/CMakeLists.txt). Binaries that travel to GPUs say so:
# TRIDENT_CUDA_ARCHS="80;90" (and TRIDENT_MARCH, above) builds them optimized. Prints the cmake
# arguments.
cuda_args() {
  if [ -n "${TRIDENT_CUDA_ARCHS:-}" ]; then
    echo "-DTRIDENT_CUDA_ARCHS=$TRIDENT_CUDA_ARCHS -DTRIDENT_CUDA_UNOPTIMIZED=OFF"
  elif nvidia-smi -L > /dev/null 2>&1; then
    echo "-UTRIDENT_CUDA_ARCHS -DTRIDENT_CUDA_UNOPTIMIZED=OFF"
  else
    echo "-DTRIDENT_CUDA_ARCHS=90 -DTRIDENT_CUDA_UNOPTIMIZED=ON"
  fi
}

build() {
  bash tools/install_deps.sh
  # shellcheck disable=SC2046 # two words
  build_tree build Release "$march" $(cuda_args)
}

# The suite's second run stands in for another machine of the kind: a portable -march (what a binary
# built elsewhere runs) and an OpenBLAS kernel set other than the one OpenBLAS picks for this CPU, so
# GEMMs sum in another order. A tolerance that only holds for one summation order fails here.
# Prints "MARCH CORETYPE".
other_machine() {
  local flags
  flags=$(grep -m1 '^flags' /proc/cpuinfo 2>/dev/null || true)
  if [[ " $flags " == *" avx512f "* ]]; then
    echo "x86-64-v3 Haswell"        # AVX-512 here: the AVX2 kernels
  elif [[ " $flags " == *" avx2 "* ]]; then
    echo "x86-64-v3 Sandybridge"    # AVX2 here: the AVX kernels
  else
    echo "none Core2"               # SSE only
  fi
}

data() {
  bash tools/prepare_fortunes.sh build/bin
}

case "$cmd" in
  build)
    build
    ;;
  train)
    build
    data
    # 4 ranks: tensor parallelism 2 x pipeline parallelism 2 (1F1B, 4 micro-batches), one thread each
    exec mpirun --oversubscribe --bind-to none -np 4 -x OMP_NUM_THREADS=1 -x OMP_WAIT_POLICY \
      build/bin/engine_train --tensor-model-parallel-size 2 --pipeline-model-parallel-size 2 \
      --config models/gpt2-tiny-byte.json \
      --train-data data/fortunes_byte_train.bin --val-data data/fortunes_byte_val.bin \
      --micro-batch-size 4 --global-batch-size 16 --seq-length 128 --train-iters 1000 --lr 2e-3 --min-lr 2e-4 \
      --lr-warmup-iters 30 --eval-interval 100 --log-interval 10 --save-dir runs/default \
      --save-interval 250 --keep-last 2 "$@"
    ;;
  train-llama)
    build
    data
    # the same 4 ranks (tp 2 x pp 2) and data; a Llama block: RMSNorm, grouped-query attention with
    # rotary positions, SwiGLU (2 key/value heads, so each TP rank holds one)
    exec mpirun --oversubscribe --bind-to none -np 4 -x OMP_NUM_THREADS=1 -x OMP_WAIT_POLICY \
      build/bin/engine_train --tensor-model-parallel-size 2 --pipeline-model-parallel-size 2 \
      --config models/llama-tiny-byte.json \
      --train-data data/fortunes_byte_train.bin --val-data data/fortunes_byte_val.bin \
      --micro-batch-size 4 --global-batch-size 16 --seq-length 128 --train-iters 1000 --lr 2e-3 --min-lr 2e-4 \
      --lr-warmup-iters 30 --eval-interval 100 --log-interval 10 --save-dir runs/llama \
      --save-interval 250 --keep-last 2 "$@"
    ;;
  train-moe)
    build
    data
    # 4 ranks: pipeline parallelism 2 x data parallelism 2 with expert parallelism 2 (each stage's two
    # dp ranks hold 4 of each layer's 8 experts and exchange tokens by all-to-all; top-2), one thread
    # each. The iteration lines carry the aux loss, the
    # busiest expert's load over the mean and the dropped fraction; the last lines compare the first
    # and last logged load from runs/moe/metrics.jsonl.
    mkdir -p runs
    rc=0
    mpirun --oversubscribe --bind-to none -np 4 -x OMP_NUM_THREADS=1 -x OMP_WAIT_POLICY \
      build/bin/engine_train --pipeline-model-parallel-size 2 --expert-model-parallel-size 2 \
      --config models/moe-tiny-byte.json \
      --train-data data/fortunes_byte_train.bin --val-data data/fortunes_byte_val.bin \
      --micro-batch-size 4 --global-batch-size 16 --seq-length 128 --train-iters 400 --lr 3e-3 --min-lr 3e-4 \
      --lr-warmup-iters 20 --eval-interval 100 --log-interval 10 --save-dir runs/moe \
      --save-interval 200 --keep-last 2 "$@" || rc=$?
    if [ -f runs/moe/metrics.jsonl ]; then
      python3 - runs/moe/metrics.jsonl <<'PY' || true
import json, sys
rows = [json.loads(l) for l in open(sys.argv[1]) if '"moe_load"' in l]
if rows:
    f, l = rows[0], rows[-1]
    for name, r in (("first", f), ("last", l)):
        print("expert load, %s logged iteration %d: max/mean %.2f (per layer %s), aux %.4f, loss %.4f"
              % (name, r["iter"], r["moe_load"], " ".join("%.2f" % x for x in r["moe_layer_load"]),
                 r["moe_aux_loss"], r["loss"]))
PY
    fi
    exit $rc
    ;;
  test)
    t0=$SECONDS
    # What the build needs first; the tests' own packages (PyTorch and the libraries it brings are
    # most of a fresh machine's install, and dpkg unpacks on one core) beside the Release build.
    bash tools/install_deps.sh build
    # a password prompt of sudo's comes here, not from the background job (which has no terminal)
    if [ "$(id -u)" -ne 0 ] && ! bash tools/install_deps.sh --check tests; then sudo -v; fi
    bash tools/install_deps.sh tests < /dev/null &
    deps=$!
    # shellcheck disable=SC2046 # two words
    build_tree build Release "$march" $(cuda_args)
    wait "$deps" || { echo "trident: installing the tests' packages failed (above)" >&2; exit 1; }
    data
    t_build=$((SECONDS - t0))
    # Release: three tests at a time on two cores. Many of its tests wait (Open MPI's start-up, ranks
    # blocked in a timeout, sleeps) and left the cores idle 22% of the time; a third slot fills it
    # (measured here: 351 s -> 306 s). The sanitizer suite keeps its cores busy already (92%; 3 at a
    # time measured 559-563 s against 546-571 s). The tests labelled run_alone (faults_rank_failure,
    # whose bound on the survivors' reports needs the cores) run with no other test at their priority:
    # each build's beside the sanitizer build at nice 19 (below); every other bound is a generous
    # timeout.
    t1=$SECONDS
    (cd build && ctest --output-on-failure -j 3 -LE 'gpu|run_alone')
    t_release=$((SECONDS - t1))
    # the same suite under AddressSanitizer + UndefinedBehaviorSanitizer (Debug build); the fuzz
    # label's harnesses carry their own sanitizers and already ran above. Without the CUDA backend:
    # its code cannot run without a GPU (the gpu label is skipped) and nvcc's host code is not
    # instrumented, so it would only add build time.
    read -r other_march other_blas < <(other_machine)
    echo "trident: the sanitizer run builds with -march=$other_march and runs OpenBLAS's $other_blas kernels"
    # The sanitizer build runs at the lowest priority (nice 19) beside the run_alone tests of both
    # builds: faults_rank_failure runs 25-28 s on about half of the two cores (its survivors wait out
    # a timeout four times; /proc/stat: 52% idle while it ran alone under the sanitizers): the build
    # takes the idle time, and the test's ranks, at normal priority, take the cores whenever they run
    # (beside such a build its reports came 4.04-4.11 s after the fault, alone 4.03-4.09 s; bound
    # 6 s: docs/test-suite.md). The build makes engine_train first, which is all the sanitizer
    # build's run_alone test needs, and says so ($asan_ready); the Release build's run_alone and gpu
    # tests run meanwhile, then the sanitizer build's run_alone test, so that only one runs at a time.
    t2=$SECONDS
    asan_ready=build-asan/.engine_train_built
    rm -f "$asan_ready"
    (renice -n 19 -p "$BASHPID" > /dev/null || true
     configure_tree build-asan Debug "$other_march" -DTRIDENT_CUDA=OFF
     build_targets build-asan Debug engine_train
     touch "$asan_ready"
     build_targets build-asan Debug) &
    asan_build=$!
    # Then the gpu label (the CUDA backend's tests, one at a time; where no GPU is visible each only
    # reports that it skips, 8 s of mostly waiting), also beside the build.
    serial_rc=0
    (cd build && ctest --output-on-failure -L run_alone && ctest --output-on-failure -L gpu) || serial_rc=$?
    while [ ! -e "$asan_ready" ] && kill -0 "$asan_build" 2> /dev/null; do sleep 1; done
    if [ -e "$asan_ready" ]; then
      (cd build-asan && OPENBLAS_CORETYPE=$other_blas ctest --output-on-failure -L run_alone) || serial_rc=$?
    fi
    t_serial=$((SECONDS - t2))
    asan_rc=0
    wait "$asan_build" || asan_rc=$?
    t_asan_build=$((SECONDS - t2))
    [ "$serial_rc" -eq 0 ] && [ "$asan_rc" -eq 0 ] || exit 1 # ctest or build_tree said what failed
    t3=$SECONDS
    # release_only: the tests of tests/release_only.txt, every library line of which tests of this
    # stage execute too (tools/sanitizer_coverage.sh chooses them from per-test gcov counters).
    (cd build-asan && OPENBLAS_CORETYPE=$other_blas ctest --output-on-failure -j 2 -LE 'gpu|fuzz|release_only|run_alone')
    t_asan=$((SECONDS - t3))
    echo "trident: stage times: install + Release build + data ${t_build} s, Release suite ${t_release} s" \
      "+ run_alone (both builds) and gpu tests beside the sanitizer build ${t_serial} s, sanitizer build ${t_asan_build} s (from its" \
      "start), sanitizer suite ${t_asan} s; total $((SECONDS - t0)) s"
    ;;
  valgrind)
    bash tools/install_deps.sh
    exec bash tools/valgrind_4rank.sh "$@"
    ;;
  bench)
    build
    for b in build/bin/bench_*; do
      case "$b" in *bench_cuda_*) continue ;; esac
      "$b" "$@"
    done
    # ZeRO step time with and without overlap needs real MPI ranks (non-blocking collectives)
    mpirun --oversubscribe --bind-to none -np 4 -x OMP_NUM_THREADS=1 -x OMP_WAIT_POLICY \
      build/bin/bench_zero --step-time
    # context parallelism over the whole training step (engine_train on 1 and 2 Open MPI ranks)
    bash bench/cp_step/run.sh
    ;;
  bench-cuda)
    build
    exec bash bench/cuda/compare.sh "$@"
    ;;
  *)
    echo "usage: bash tools/trident.sh train|test|bench|bench-cuda|build|valgrind [flags]" >&2
    exit 2
    ;;
esac
