# shellcheck shell=bash
# tests/lib/script_setup.sh - sourced first, after `build=$1 src=$2`, by the shell tests that run the
# tools and count failed checks (hf_*.sh; cp_mpi.sh and the MoE scripts through tests/lib/mpi_train.sh):
# the start each of them shares.
#
# Sets bin ($build/bin), tmp (a fresh directory, removed at exit), failures and fail NAME (prints
# FAIL NAME and counts it), and makes $src the working directory.
bin="$build/bin"
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
cd "$src" || exit 1
failures=0
fail() { echo "FAIL $1"; failures=$((failures + 1)); }
