#!/usr/bin/env bash
# tests/metrics_plot.sh BUILD_DIR SOURCE_DIR - engine_train's observability on real MPI ranks.
#
# Two short runs (4 ranks tp 2 x pp 2; 2 ranks dp 2 with ZeRO 1) must write a metrics.jsonl whose
# every train line has every field with a sane value: loss, lr, grad norm, tokens/s, MFU in (0, 1],
# memory, a time split (compute, tp, pp, bubble, dp, other) that sums to the step time, the group
# the layout uses taking time (tp and bubble in the first run, dp in the second) and sending wire
# bytes (tp_bytes and pp_bytes in the first, dp_bytes in the second), per-rank compute,
# wait and memory arrays of the world size with a straggler rank inside it; the log lines carry an
# ETA; a dense model's lines carry no "moe_" key. A third run (a tiny Mixtral, 4 ranks pp 2 x dp 2)
# must log the MoE figures (docs/moe.md): aux and z losses, per sparse layer a load in [1, E/K] and
# the largest of them as moe_load, the dropped fraction 0 dropless and in (0, 1) under a capacity
# factor of 1, and "aux .. load .. drop" on the iteration line. Then tools/plot.sh must turn the file into a valid PNG (signature, IHDR size, > 10 KB).
set -u
build=$1
src=$2
bin="$build/bin/engine_train"
tok="$build/bin/tokenize"
export OMP_NUM_THREADS=1
mpirun_timeout=180
source "$src/tests/lib/mpirun_flags.sh"
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
failures=0
fail() { echo "FAIL $*"; failures=$((failures + 1)); }

printf '{"n_layer": 2, "n_head": 2, "n_embd": 32, "vocab_size": 257, "n_positions": 32}' > "$tmp/tiny.json"
head -c 30000 "$src/README.md" > "$tmp/text.txt"
"$tok" --input "$tmp/text.txt" --output-prefix "$tmp/t" --tokenizer-type ByteLevel --val-fraction 0 \
  > /dev/null 2>&1 || { echo "FAIL: cannot tokenize fixtures"; exit 1; }
run=(--config "$tmp/tiny.json" --train-data "$tmp/t_train.bin" --val-data "$tmp/t_train.bin" --train-iters 6
     --eval-interval 3 --eval-iters 1 --sample-length 0 --micro-batch-size 2 --seq-length 16 --log-interval 2)

train() { # NAME NP FLAGS...
  local name=$1 np=$2
  shift 2
  if ! mpirun "${mpirun_flags[@]}" -np "$np" "$bin" "${run[@]}" --save-dir "$tmp/$name" "$@" > "$tmp/$name.log" 2>&1; then
    fail "$name: engine_train failed:"; tail -5 "$tmp/$name.log"; return 1
  fi
  grep -q "ETA" "$tmp/$name.log" || fail "$name: no ETA on the log lines"
  echo "ok   $name: trained ($(grep -c '"kind":"train"' "$tmp/$name/metrics.jsonl") metrics lines)"
}

check() { # NAME WORLD BUSY_FIELDS...: python checks every train line
  local name=$1 world=$2
  shift 2
  python3 - "$tmp/$name/metrics.jsonl" "$world" "$@" <<'PY' || fail "$name: metrics check"
import json, math, sys
path, world, busy = sys.argv[1], int(sys.argv[2]), sys.argv[3:]
lines = [json.loads(l) for l in open(path) if l.strip()]
train = [l for l in lines if l["kind"] == "train"]
evals = [l for l in lines if l["kind"] == "eval"]
errors = []
need = ["iter", "loss", "lr", "grad_norm", "ms", "tokens_per_s", "gflops", "mfu", "step_s", "compute_s",
        "tp_s", "pp_s", "bubble_s", "dp_s", "other_s", "mem_mib", "eta_s", "tp_bytes", "pp_bytes", "dp_bytes", "cp_s", "cp_bytes"]
parts = ["compute_s", "tp_s", "pp_s", "bubble_s", "dp_s", "other_s", "cp_s"]
if [l["iter"] for l in train] != list(range(1, 7)):
    errors.append("iterations %s, expected 1..6" % [l["iter"] for l in train])
if not evals or not all(math.isfinite(e["val_loss"]) and e["val_loss"] > 0 for e in evals):
    errors.append("no sane eval line")
busy_total = {f: 0.0 for f in busy}
gathered = 0
for l in train:
    if any(k.startswith("moe_") for k in l):
        errors.append("iter %s: a dense model logs MoE keys" % l.get("iter"))
    missing = [k for k in need if k not in l]
    if missing:
        errors.append("iter %s lacks %s" % (l.get("iter"), missing)); continue
    if not (0 < l["loss"] < 20 and 0 < l["lr"] < 1 and 0 < l["grad_norm"] < 1e4):
        errors.append("iter %d: loss/lr/grad_norm %g %g %g" % (l["iter"], l["loss"], l["lr"], l["grad_norm"]))
    if not (l["tokens_per_s"] > 0 and l["gflops"] > 0 and 0 < l["mfu"] <= 1 and l["mem_mib"] > 0 and l["eta_s"] >= 0):
        errors.append("iter %d: throughput/mfu/memory/eta %g %g %g %g" % (l["iter"], l["tokens_per_s"], l["mfu"], l["mem_mib"], l["eta_s"]))
    if abs(l["ms"] / 1e3 - l["step_s"]) > 1e-6 or any(l[p] < 0 for p in parts):
        errors.append("iter %d: ms %g vs step_s %g, or a negative part" % (l["iter"], l["ms"], l["step_s"]))
    total = sum(l[p] for p in parts)
    if abs(total - l["step_s"]) > 0.02 * l["step_s"]:
        errors.append("iter %d: the split sums to %g s, the step took %g s" % (l["iter"], total, l["step_s"]))
    for f in busy:
        busy_total[f] += l[f]
    if "ranks" in l:
        gathered += 1
        r = l["ranks"]
        if any(len(r[k]) != world for k in ("compute_s", "wait_s", "mem_mib")):
            errors.append("iter %d: per-rank arrays are not of %d ranks" % (l["iter"], world))
        elif not (0 <= l["straggler_rank"] < world and l["straggler_compute_s"] == max(r["compute_s"])
                  and min(r["mem_mib"]) > 0 and all(c > 0 for c in r["compute_s"])):
            errors.append("iter %d: straggler %s of %s" % (l["iter"], l["straggler_rank"], r))
if gathered < 3:  # iterations 1, 2, 4, 6 at --log-interval 2
    errors.append("only %d lines carry the per-rank figures" % gathered)
for f, t in busy_total.items():
    if not t > 0:
        errors.append("%s is 0 in every iteration, expected time in it for this layout" % f)
for e in errors:
    print("  " + e)
print("ok   %s: %d train lines, fields %s; busy %s" % (path.split("/")[-2], len(train), " ".join(need),
      {f: round(t, 4) for f, t in busy_total.items()}) if not errors else "  %d problem(s)" % len(errors))
sys.exit(1 if errors else 0)
PY
}

train tp2pp2 4 --tensor-model-parallel-size 2 --pipeline-model-parallel-size 2 --global-batch-size 4 &&
  check tp2pp2 4 tp_s bubble_s tp_bytes pp_bytes
train dp2 2 --zero-stage 1 && check dp2 2 dp_s dp_bytes

# a tiny Mixtral: 2 sparse layers of 4 experts, top-2 (E/K = 2)
printf '{"model_type": "mixtral", "hidden_size": 64, "intermediate_size": 64, "num_attention_heads": 4, "num_key_value_heads": 2, "num_hidden_layers": 2, "vocab_size": 257, "max_position_embeddings": 32, "num_local_experts": 4, "num_experts_per_tok": 2, "output_router_logits": true, "router_aux_loss_coef": 0.01, "tie_word_embeddings": true}' > "$tmp/moe.json"
check_moe() { # NAME DROPS(0|1)
  python3 - "$tmp/$1/metrics.jsonl" "$2" <<'PY' || fail "$1: MoE metrics check"
import json, sys
train = [json.loads(l) for l in open(sys.argv[1]) if '"kind":"train"' in l]
drops, errors = sys.argv[2] == "1", []
for l in train:
    if l.get("moe_layer") != [0, 1]:
        errors.append("iter %s: moe_layer %s, want [0, 1]" % (l.get("iter"), l.get("moe_layer"))); continue
    loads, fr = l["moe_layer_load"], l["moe_layer_drop_frac"]
    if not (l["moe_aux_loss"] > 0 and l["moe_z_loss"] > 0 and all(1 <= x <= 2 for x in loads) and l["moe_load"] == max(loads)):
        errors.append("iter %d: aux %g z %g loads %s max %g" % (l["iter"], l["moe_aux_loss"], l["moe_z_loss"], loads, l["moe_load"]))
    ok = (0 < l["moe_drop_frac"] < 1 and all(0 <= x < 1 for x in fr)) if drops else (l["moe_drop_frac"] == 0 and not any(fr))
    if not ok:
        errors.append("iter %d: dropped %g per layer %s (capacity %s)" % (l["iter"], l["moe_drop_frac"], fr, drops))
for e in errors:
    print("  " + e)
print("ok   %s: %d train lines with the MoE figures, last aux %.4f load %.2f drop %.3f" % (sys.argv[1].split("/")[-2], len(train),
      train[-1]["moe_aux_loss"], train[-1]["moe_load"], train[-1]["moe_drop_frac"]) if not errors and train else "  no lines or %d problem(s)" % len(errors))
sys.exit(1 if errors or not train else 0)
PY
  grep -q "| aux [0-9.]* z [0-9.]* load [0-9.]* drop [0-9.]*%" "$tmp/$1.log" || fail "$1: no MoE figures on the iteration line"
}
run_dense=("${run[@]}")
run=(--config "$tmp/moe.json" "${run_dense[@]:2}")
train moe_pp2dp2 4 --pipeline-model-parallel-size 2 --global-batch-size 4 --moe-z-loss-coeff 0.001 && check_moe moe_pp2dp2 0
train moe_capacity 2 --global-batch-size 4 --moe-z-loss-coeff 0.001 --moe-expert-capacity-factor 1 && check_moe moe_capacity 1
run=("${run_dense[@]}")
grep -q "straggler\|ETA" "$tmp/tp2pp2.log" && echo "ok   log: $(grep -m1 'iter      2/' "$tmp/tp2pp2.log")"

# the plot tool: a real PNG (signature, IHDR chunk, width x height) of some size
if bash "$src/tools/plot.sh" "$tmp/tp2pp2" "$tmp/plot.png" > "$tmp/plot.log" 2>&1; then
  python3 - "$tmp/plot.png" <<'PY' || fail "plot: not a valid PNG"
import struct, sys
data = open(sys.argv[1], "rb").read()
assert data[:8] == b"\x89PNG\r\n\x1a\n", "signature"
assert data[12:16] == b"IHDR", "IHDR"
w, h = struct.unpack(">II", data[16:24])
assert w >= 800 and h >= 600 and len(data) > 10000 and data[-8:-4] == b"IEND", (w, h, len(data))
print("ok   plot: %dx%d PNG, %d bytes" % (w, h, len(data)))
PY
else
  fail "plot:"; cat "$tmp/plot.log"
fi
# and it refuses a file without training lines
echo '{"kind":"eval","iter":1,"val_loss":3}' > "$tmp/empty.jsonl"
bash "$src/tools/plot.sh" "$tmp/empty.jsonl" "$tmp/x.png" > "$tmp/empty.log" 2>&1 && fail "plot accepted a file without train lines"
grep -q "holds no" "$tmp/empty.log" && echo "ok   plot refuses: $(cat "$tmp/empty.log")"
echo "metrics_plot: $failures failure(s)"
exit $((failures > 0))
