# shellcheck shell=bash
# tests/lib/moe_mpi.sh - sourced by the MoE scripts that train under Open MPI (moe_ep_mpi.sh,
# moe_etp_mpi.sh, moe_shared_tp_mpi.sh, moe_ep_reshard.sh) after `build=$1 src=$2`: what each of them
# set up alike.
#
# Sets what tests/lib/mpi_train.sh sets (bin, tmp, fail, mpirun's flags, data; SKIP without the data) and
# `common`: engine_train's flags for the tiny byte-level MoE config
# $moe_config (models/moe-tiny-byte.json unless set before sourcing) on the fortunes data, 32-token
# sequences, global batch 8 of micro-batches of 2, one thread a rank. Exits 0 with SKIP when the data
# is missing. Then:
#   moe_run NAME RANKS FLAGS...   trains into $tmp/NAME (log $tmp/NAME.log); its status
#   moe_against_one NAME          $tmp/NAME's losses against $tmp/one's: as many iterations, each within
#                                 1e-4 relative (the ranks' fp32 sums grouped otherwise, a few ulps
#                                 each), ep_bytes > 0 and ep_s on every line
#   moe_refuse NAME WANT RANKS FLAGS...  engine_train must refuse, naming WANT
#   moe_reshard_refuse NAME WANT SRC FLAGS...  `ckpt reshard FLAGS SRC` must refuse, naming WANT, and
#                                 write nothing
#   moe_same_hf_export CKPT WHAT REF_CKPT REF_WHAT
#                                 `ckpt export --format hf` of both checkpoints: the same files byte for byte
#   moe_done SCRIPT               the verdict
# shellcheck source=tests/lib/mpi_train.sh
source "$src/tests/lib/mpi_train.sh"
common=(--config "${moe_config:-models/moe-tiny-byte.json}" --train-data "$data" --val-data data/fortunes_byte_val.bin
        --seq-length 32 --micro-batch-size 2 --global-batch-size 8 --eval-iters 1 --sample-length 0 --threads 1
        --lr 3e-3 --log-interval 1)

moe_run() { # name ranks flags...
  train_run "$@"
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
  train_refuse "$@"
}

moe_reshard_refuse() { # name want src flags...: ckpt reshard must refuse, naming want, writing nothing
  local name=$1 want=$2 srcck=$3
  shift 3
  local out
  out=$("$bin/ckpt" reshard --quiet "$@" "$srcck" "$tmp/refused" 2>&1) && { fail "$name: accepted"; return; }
  [ -e "$tmp/refused" ] && fail "$name: wrote $tmp/refused"
  grep -qF -- "$want" <<<"$out" && echo "ok   $name refused: $want" || { echo "$out" | tail -3; fail "$name: message"; }
}

moe_same_hf_export() { # ckpt what ref_ckpt ref_what: `ckpt export --format hf` of both, file for file
  moe_hf_exports=$((${moe_hf_exports:-0} + 1))
  local got="$tmp/hf_export_$moe_hf_exports" ref="$tmp/hf_export_${moe_hf_exports}_ref"
  "$bin/ckpt" export --quiet --format hf "$1" "$got" > /dev/null 2>&1 &&
    "$bin/ckpt" export --quiet --format hf "$3" "$ref" > /dev/null 2>&1 || { fail "export --format hf"; return; }
  local n=0 f
  for f in "$ref"/*.safetensors "$ref"/model.safetensors.index.json "$ref"/config.json; do
    [ -f "$f" ] || continue
    n=$((n + 1))
    cmp -s "$f" "$got/$(basename "$f")" || fail "HF export of $2: $(basename "$f") differs from $4's"
  done
  [ $n -ge 2 ] && echo "ok   export --format hf of $2: $n files byte-identical to $4's" ||
    fail "the HF export wrote $n files"
}

moe_done() { # script name: the verdict
  train_done "$1"
}
