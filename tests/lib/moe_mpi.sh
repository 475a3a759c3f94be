# shellcheck shell=bash
# tests/lib/moe_mpi.sh - sourced by the MoE scripts that train under Open MPI (moe_ep_mpi.sh,
# moe_etp_mpi.sh, moe_shared_tp_mpi.sh, moe_ep_reshard.sh) after `build=$1 src=$2`: what each of them
# set up alike.
#
# Sets bin, tmp (removed at exit), failures and fail NAME (counts a failed check), mpirun's flags
# (tests/lib/mpirun_flags.sh), and `common`: engine_train's flags for the tiny byte-level MoE config
# $moe_config (models/moe-tiny-byte.json unless set before sourcing) on the fortunes data, 32-token
# sequences, global batch 8 of micro-batches of 2, one thread a rank. Exits 0 with SKIP when the data
# is missing. Then:
#   moe_run NAME RANKS FLAGS...   trains into $tmp/NAME (log $tmp/NAME.log); its status
#   moe_against_one NAME          $tmp/NAME's losses against $tmp/one's: as many iterations, each within
#                                 1e-4 relative (the ranks' fp32 sums grouped otherwise, a few ulps
#                                 each), ep_bytes > 0 and ep_s on every line
bin="$build/bin"
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
cd "$src" || exit 1
# shellcheck source=tests/lib/mpirun_flags.sh
source "$src/tests/lib/mpirun_flags.sh"
export OMP_NUM_THREADS=1
failures=0
fail() { echo "FAIL $1"; failures=$((failures + 1)); }
data=data/fortunes_byte_train.bin
[ -f "$data" ] || { echo "SKIP: $data missing (bash tools/trident.sh data)"; exit 0; }
common=(--config "${moe_config:-models/moe-tiny-byte.json}" --train-data "$data" --val-data data/fortunes_byte_val.bin
        --seq-length 32 --micro-batch-size 2 --global-batch-size 8 --eval-iters 1 --sample-length 0 --threads 1
        --lr 3e-3 --log-interval 1)

moe_run() { # name ranks flags...
  local name=$1 np=$2
  shift 2
  mpiexec "${mpirun_flags[@]}" -np "$np" "$bin/engine_train" "${common[@]}" --save-dir "$tmp/$name" "$@" \
    > "$tmp/$name.log" 2>&1
}

moe_against_one() { # name
  [ -f "$tmp/one/metrics.jsonl" ] && [ -f "$tmp/$1/metrics.jsonl" ] || { fail "$1: no metrics to compare"; return; }
  /usr/bin/python3 - "$tmp/one/metrics.jsonl" "$tmp/$1/metrics.jsonl" "$1" <<'PY' || fail "$1 against one rank"
import json, sys
def train(p):
    return [r for r in map(json.loads, open(p)) if r.get("kind") == "train"]
one, got = train(sys.argv[1]), train(sys.argv[2])
assert len(one) == len(got) > 0, (len(one), len(got))
worst = max(abs(a["loss"] - b["loss"]) / a["loss"] for a, b in zip(one, got))
assert worst < 1e-4, f"losses differ by {worst:.3g} relative: {[a['loss'] for a in one]} vs {[b['loss'] for b in got]}"
assert all(r["ep_bytes"] > 0 and "ep_s" in r for r in got), [r["ep_bytes"] for r in got]
print(f"ok   {sys.argv[3]}: losses within {worst:.2g} of one rank's ({one[0]['loss']:.4f} -> {one[-1]['loss']:.4f}); "
      f"ep_bytes per step {got[-1]['ep_bytes']:.0f}")
PY
}

moe_refuse() { # name want ranks flags...: engine_train must refuse, naming want
  local name=$1 want=$2 np=$3
  shift 3
  local out
  out=$(mpiexec "${mpirun_flags[@]}" -np "$np" "$bin/engine_train" "${common[@]}" --train-iters 1 \
        --save-dir "$tmp/refused" "$@" 2>&1) && { fail "$name: accepted"; return; }
  grep -qF -- "$want" <<<"$out" && echo "ok   $name refused: $want" || { echo "$out" | tail -3; fail "$name: message"; }
}

moe_done() { # script name: the verdict
  [ "$failures" -eq 0 ] && echo "$1: all checks passed" || { echo "$1: $failures check(s) failed"; exit 1; }
}
