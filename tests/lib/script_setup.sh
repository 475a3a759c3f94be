# shellcheck shell=bash
# tests/lib/script_setup.sh - sourced first, after `build=$1 src=$2`, by the shell tests that run the
# tools and count failed checks (hf_*.sh, ckpt_cli.sh, llama_cli.sh; cp_mpi.sh and the MoE scripts
# through tests/lib/mpi_train.sh): the start each of them shares.
#
# Sets bin ($build/bin), py (the Python that runs the reference scripts: under CTest
# tests/python_client, which hands them to the suite's Python server), tmp (a fresh directory, removed
# at exit), failures and fail TEXT (prints FAIL: TEXT and counts it), and makes $src the working
# directory.
bin="$build/bin"
py=${TRIDENT_PYTHON:-/usr/bin/python3}
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
cd "$src" || exit 1
failures=0
fail() { echo "FAIL: $*"; failures=$((failures + 1)); }
