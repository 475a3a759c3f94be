#!/usr/bin/env bash
# tests/partitioner_cli.sh BUILD_DIR SOURCE_DIR - the partitioner CLI end to end.
#
# With no flags it previews what engine_train runs with none (one set of defaults: one rank, tp 1 x
# pp 1, micro-batch 4 x seq 64). The README's CPU run (tp 2 x pp 2 on 4 ranks) prints every section
# and takes its memory from the engine's plan; --json is one valid JSON object with the documented keys and the same figures;
# --bf16 takes the engine's plan too, on the cpu preset (computed in fp32) as on GPUs; GPT-3 175B
# on 1024 H100s fits with bf16 + selective recomputation; --timeline writes an SVG that
# an SVG renderer (rsvg-convert or ImageMagick, when installed) turns into a PNG; --calibrate
# reads an engine_train metrics.jsonl and makes the prediction match the measured time; --search
# prints ten ranked layouts; bad input exits 1 with one message naming the rule and the nearest
# valid values; a Llama (3.1 70B on 64 H100s) shows its block and fits, and a tp its key/value
# heads cannot take is refused. Needs python3 (JSON checks).
set -u
build=$1
src=$2
bin="$build/bin/partitioner"
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
failures=0
cd "$src"

fail() { echo "FAIL $*"; failures=$((failures + 1)); }
ok() { echo "ok   $*"; }

# contains NAME TEXT FILE
contains() {
  if grep -qF -- "$2" "$3"; then ok "$1"; else fail "$1: expected '$2' in:"; head -40 "$3"; fi
}

# ---- the defaults are engine_train's ----
"$bin" --json > "$tmp/bare.json" 2>&1 || { fail "no flags"; cat "$tmp/bare.json"; }
python3 - "$tmp/bare.json" <<'PY' && ok "no flags: engine_train's defaults (1 rank, tp 1 x pp 1, micro-batch 4 x seq 64)" || fail "no flags"
import json, sys
l = json.load(open(sys.argv[1]))["layout"]
got = tuple(l[k] for k in ("tensor_model_parallel_size", "pipeline_model_parallel_size", "data_parallel_size",
                            "micro_batch_size", "seq_length", "global_batch_size"))
assert got == (1, 1, 1, 4, 64, 4), l
PY
# every flag both CLIs take is one definition (tools/cli/layout_flags.h, compression_flags.h,
# local_sgd_flags.h): the same help line, default and choices in both -h lists; --config's example
# model is each tool's own
OMPI_MCA_ess_singleton_isolated=1 "$build/bin/engine_train" -h > "$tmp/train_help.txt" 2>&1
"$bin" -h > "$tmp/help.txt" 2>&1
python3 - "$tmp/help.txt" "$tmp/train_help.txt" <<'PY' && ok "the flags both CLIs take read the same in both -h lists" || fail "-h lists differ"
import re, sys
def flags(p):
    return {m.group(1): l for l in open(p) for m in [re.match(r"  (--[a-z0-9-]+)", l)] if m}
a, b = flags(sys.argv[1]), flags(sys.argv[2])
shared = sorted(set(a) & set(b) - {"--config"})
assert len(shared) >= 30, shared
diff = [k for k in shared if a[k] != b[k]]
assert not diff, "\n".join("partitioner: %sengine_train: %s" % (a[k], b[k]) for k in diff)
PY

# ---- the README's CPU run ----
readme=(--num-gpus 4 --tensor-model-parallel-size 2 --pipeline-model-parallel-size 2 --micro-batch-size 4
        --global-batch-size 16 --seq-length 128)
if "$bin" "${readme[@]}" > "$tmp/default.txt" 2>&1; then ok "the README run's preview exits 0"; else fail "the README run's preview"; cat "$tmp/default.txt"; fi
contains "stage table" "stage placement" "$tmp/default.txt"
contains "stage rows with nodes" "0     0-1 +emb" "$tmp/default.txt"
contains "memory table from the engine's plan" "memory per GPU by category (the engine's plan" "$tmp/default.txt"
contains "fits" "every stage fits" "$tmp/default.txt"
contains "time split" "TP comm" "$tmp/default.txt"
contains "bubble" "simulated bubble" "$tmp/default.txt"
contains "throughput" "MFU" "$tmp/default.txt"

# ---- JSON ----
"$bin" "${readme[@]}" --json > "$tmp/default.json" 2>&1 || fail "--json exits non-zero"
python3 - "$tmp/default.json" <<'PY' && ok "--json: keys and figures" || fail "--json: see above"
import json, sys
o = json.load(open(sys.argv[1]))
assert o["memory_source"] == "engine_plan", o["memory_source"]
assert o["fits"] is True
assert len(o["stages"]) == 2
for s in o["stages"]:
    m = s["memory_bytes"]
    parts = sum(m[k] for k in ("parameters", "gradients", "optimizer", "activations", "communication", "workspace"))
    assert abs(parts - m["total"]) < 1, (parts, m["total"])
    assert abs(s["memory_formula_bytes"]["total"] / m["total"] - 1) < 0.05
t = o["iteration_time_s"]
assert t > 0
parts = o["compute_s"] + o["tp_comm_s"] + o["bubble_s"] + o["pp_comm_s"] + o["dp_comm_s"] + o["optimizer_s"]
assert abs(parts - t) < 1e-9 * t, (parts, t)
assert abs(o["tokens_per_s"] - 16 * 128 / t) < 1e-6 * o["tokens_per_s"]
assert 0 < o["mfu"] < 1
assert o["model_flops_per_iteration"] == o["hardware_flops_per_iteration"]
PY

# ---- bf16 mixed precision on the cpu preset (engine_train --bf16) ----
"$bin" "${readme[@]}" --bf16 --json > "$tmp/bf16.json" 2>&1 || { fail "--bf16 on the cpu preset"; cat "$tmp/bf16.json"; }
python3 - "$tmp/default.json" "$tmp/bf16.json" <<'PY' && ok "--bf16 on the cpu: the engine's plan, 2 + 4 + 12 bytes a parameter" || fail "--bf16 JSON"
import json, sys
f, b = (json.load(open(p)) for p in sys.argv[1:3])
assert b["layout"]["precision"] == "bf16" and b["memory_source"] == "engine_plan", b["memory_source"]
assert b["fits"] is True
for sf, sb in zip(f["stages"], b["stages"]):
    mf, mb = sf["memory_bytes"], sb["memory_bytes"]
    assert abs(sb["memory_formula_bytes"]["total"] / mb["total"] - 1) < 0.05
    assert mb["activations"] < 0.6 * mf["activations"], (mb["activations"], mf["activations"])
    # bf16 weights, fp32 gradients, fp32 master weights + AdamW m, v: 2 + 4 + 12 bytes against 4 + 4 + 8
    assert abs(mb["parameters"] / mf["parameters"] - 0.5) < 0.01, (mb["parameters"], mf["parameters"])
    assert abs(mb["gradients"] / mf["gradients"] - 1) < 0.01, (mb["gradients"], mf["gradients"])
    assert abs(mb["optimizer"] / mf["optimizer"] - 1.5) < 0.01, (mb["optimizer"], mf["optimizer"])
PY

# ---- GPT-3 175B on 1024 H100s ----
gpt3=(--config models/gpt3-175b.json --num-gpus 1024 --gpus-per-node 8 --hardware h100-sxm
      --tensor-model-parallel-size 8 --pipeline-model-parallel-size 8 --num-layers-per-virtual-pipeline-stage 6
      --micro-batch-size 1 --global-batch-size 1536 --seq-length 2048 --zero-stage 1
      --recompute-granularity selective --sequence-parallel --bf16 --attention-backend flash)
"$bin" "${gpt3[@]}" --json --timeline "$tmp/gpt3.svg" > "$tmp/gpt3.json" 2>&1 || fail "GPT-3 preview"
python3 - "$tmp/gpt3.json" <<'PY' && ok "GPT-3 175B on 1024 H100s: fits, the engine's plan (formulas within 5%), MFU in range" || fail "GPT-3 JSON"
import json, sys
o = json.load(open(sys.argv[1]))
assert o["memory_source"] == "engine_plan", o["memory_source"]
assert o["fits"] is True
for s in o["stages"]:
    assert abs(s["memory_formula_bytes"]["total"] / s["memory_bytes"]["total"] - 1) < 0.05
assert o["layout"]["data_parallel_size"] == 16 and o["layout"]["virtual_pipeline_chunks"] == 2
assert 0.3 < o["mfu"] < 0.6, o["mfu"]
# Narayanan et al. 2021 eq. 3 for 1536 x 2048 tokens
l, h, V, B, s = 96, 12288, 50257, 1536, 2048
F = 72 * B * s * l * h * h * (1 + s / (6 * h) + V / (12 * l * h))
assert abs(o["model_flops_per_iteration"] / F - 1) < 1e-9
PY

# ---- the timeline ----
if head -c 5 "$tmp/gpt3.svg" | grep -q "<?xml" && tail -1 "$tmp/gpt3.svg" | grep -q "</svg>"; then
  ok "--timeline writes an SVG document"
else
  fail "--timeline: not an SVG document"
fi
"$bin" "${readme[@]}" --timeline "$tmp/cpu.svg" > /dev/null 2>&1 || fail "--timeline (default run)"
if command -v rsvg-convert > /dev/null; then render=(rsvg-convert -o); elif command -v convert > /dev/null; then render=(convert_to); fi
convert_to() { convert "$2" "$1"; }
if [ "${render[*]:-}" = "" ]; then
  echo "skip rendering: neither rsvg-convert nor ImageMagick is installed"
elif "${render[@]}" "$tmp/cpu.png" "$tmp/cpu.svg" 2> "$tmp/render.err" && [ -s "$tmp/cpu.png" ]; then
  ok "the SVG renders to a PNG ($(stat -c %s "$tmp/cpu.png") bytes)"
else
  fail "the SVG does not render:"; cat "$tmp/render.err"
fi

# ---- calibration from a metrics.jsonl ----
python3 - "$tmp/default.json" "$tmp/metrics.jsonl" <<'PY'
import json, sys
o = json.load(open(sys.argv[1]))
F = o["model_flops_per_iteration"]
with open(sys.argv[2], "w") as f:
    # an older run, then the run calibrated on: its first iteration is a warm-up, median 0.8 s
    f.write(json.dumps({"kind": "train", "iter": 1, "ms": 5000.0, "tokens_per_s": 1.0, "gflops": 1.0}) + "\n")
    for i, ms in enumerate([3000.0, 790.0, 800.0, 810.0, 805.0, 795.0], start=1):
        s = ms / 1e3
        f.write(json.dumps({"kind": "train", "iter": i, "loss": 3.0, "ms": ms, "tokens_per_s": 2048 / s,
                            "gflops": F / s / 1e9}) + "\n")
    f.write(json.dumps({"kind": "eval", "iter": 6, "val_loss": 2.9}) + "\n")
PY
"$bin" "${readme[@]}" --calibrate "$tmp/metrics.jsonl" --json > "$tmp/cal.json" 2>&1 || { fail "--calibrate"; cat "$tmp/cal.json"; }
python3 - "$tmp/cal.json" <<'PY' && ok "--calibrate: the prediction matches the measured median" || fail "--calibrate"
import json, sys
o = json.load(open(sys.argv[1]))
assert abs(o["iteration_time_s"] / 0.8 - 1) < 1e-3, o["iteration_time_s"]
assert "calibrated from" in o["efficiency"]["gemm_source"]
PY

# ---- search ----
"$bin" "${readme[@]}" --search > "$tmp/search.txt" 2>&1 || fail "--search"
rows=$(grep -cE '^[0-9]+ ' "$tmp/search.txt")
if [ "$rows" -eq 10 ]; then ok "--search prints the top ten"; else fail "--search printed $rows rows:"; cat "$tmp/search.txt"; fi

# ---- context parallelism: the layout line, the CP comm line of the time split, the JSON's fields
# (docs/context_parallel.md); a search over cp puts the cp column in its table ----
cp=(--config models/llama-3.1-8b.json --hardware h100-sxm --num-gpus 16 --tensor-model-parallel-size 4
    --context-parallel-size 4 --sequence-parallel --seq-length 131072 --micro-batch-size 1 --global-batch-size 16 --bf16)
"$bin" "${cp[@]}" > "$tmp/cp.txt" 2>&1 || fail "cp preview"; "$bin" "${cp[@]}" --json > "$tmp/cp.json" 2>&1 || fail "cp json"
if grep -qF "layout: tp 4 x cp 4 (p2p, 32768 rows a rank) x pp 1 x dp 1" "$tmp/cp.txt" && grep -qE "^  CP comm .* GB per rank" "$tmp/cp.txt" &&
   python3 -c 'import json,sys; d=json.load(open(sys.argv[1])); s=json.dumps(d); assert "\"context_parallel_size\": 4" in s and "cp_bytes_per_step" in s and "cp_comm_s" in s' "$tmp/cp.json" &&
   "$bin" "${cp[@]}" --search --top 3 | grep -qE "^rank +tp +cp +pp"; then
  ok "cp: layout line, CP comm in the time split, JSON fields, the search's cp column"
else
  fail "cp preview:"; head -20 "$tmp/cp.txt"
fi

# ---- bad input ----
# expect NAME TEXT [flags...]: exit status 1, TEXT in the one error line, nothing on stdout
expect() {
  local name=$1 want=$2
  shift 2
  local rc
  "$bin" "$@" > "$tmp/out" 2> "$tmp/err"
  rc=$?
  if [ $rc -ne 1 ]; then
    fail "$name: exit status $rc"; cat "$tmp/err"
  elif ! grep -qF -- "$want" "$tmp/err"; then
    fail "$name: expected '$want' in:"; cat "$tmp/err"
  elif [ -s "$tmp/out" ] || [ "$(wc -l < "$tmp/err")" -ne 1 ]; then
    fail "$name: expected one error line and no output"; cat "$tmp/out" "$tmp/err"
  else
    ok "$name: $(cat "$tmp/err")"
  fi
}
# readme_with FLAG VALUE: the README run's flags with FLAG's value replaced (no flag given twice)
readme_with() {
  local i
  with=()
  for ((i = 0; i < ${#readme[@]}; i += 2)); do
    if [ "${readme[i]}" = "$1" ]; then with+=("$1" "$2"); else with+=("${readme[i]}" "${readme[i + 1]}"); fi
  done
}
expect "tp not dividing the heads" "does not divide n_head 4 (attention heads are split evenly over the tensor-parallel ranks); nearest valid: 2, 4" \
  --tensor-model-parallel-size 3 --num-gpus 12
readme_with --pipeline-model-parallel-size 3
expect "tp x pp not dividing the GPUs" "nearest valid pipeline sizes: 2" "${with[@]}"
readme_with --global-batch-size 10
expect "global batch" "nearest valid global batch sizes: 8, 12" "${with[@]}"
expect "interleaving" "nearest valid: 1" "${readme[@]}" --num-layers-per-virtual-pipeline-stage 2
expect "sequence length" "--seq-length 512: must be in [1, n_positions 256]; nearest valid: 256" --seq-length 512
expect "unknown hardware" "--hardware v100: expected one of h100-sxm|h200|a100-80gb|cpu" --hardware v100
expect "missing config" "models/none.json" --config models/none.json
readme_with --global-batch-size 32
expect "metrics of another run" "pass the measured run's layout flags" "${with[@]}" --calibrate "$tmp/metrics.jsonl"
echo '{"kind": "train", "iter": 1}' > "$tmp/bad.jsonl"
expect "metrics without times" "bad.jsonl:1: a train line needs positive \"ms\"" --calibrate "$tmp/bad.jsonl"

# ---- data parallelism over slow links (issue 32): compressors, local SGD, overlap, bandwidth ----
dp4=(--num-gpus 4 --gpus-per-node 1 --micro-batch-size 4 --global-batch-size 16 --seq-length 64)
expect "unknown compressor" "--grad-compression 2bit: expected one of none|1bit|qsgd|topk|powersgd" "${dp4[@]}" --grad-compression 2bit
expect "top-k fraction 0" "--topk-fraction 0: expected a fraction in (0, 1]" "${dp4[@]}" --grad-compression topk --topk-fraction 0
expect "top-k fraction above 1" "--topk-fraction 1.5: expected a fraction in (0, 1]" "${dp4[@]}" --grad-compression topk --topk-fraction 1.5
expect "PowerSGD rank 0" "--powersgd-rank 0: expected a rank of at least 1" "${dp4[@]}" --grad-compression powersgd --powersgd-rank 0
expect "block size 0" "--compression-block-size 0: expected at least 1 element" "${dp4[@]}" --grad-compression 1bit --compression-block-size 0
expect "compressor with ZeRO 2" "--grad-compression powersgd with --zero-stage 2" "${dp4[@]}" --grad-compression powersgd --zero-stage 2
expect "local SGD H 0" "--local-sgd-steps 0: expected H >= 1" "${dp4[@]}" --local-sgd-steps 0
expect "local SGD with ZeRO 1" "--local-sgd-steps 16 with ZeRO stage 1" "${dp4[@]}" --local-sgd-steps 16 --zero-stage 1
"$bin" --grad-compression 1bit > "$tmp/dp1.txt" 2> "$tmp/dp1.err" || fail "compression with dp 1 must only warn"
contains "compression with dp 1 warns" "data-parallel size 1: nothing to reduce, ignored" "$tmp/dp1.err"
"$bin" "${dp4[@]}" --overlap-grad-reduce --overlap-param-gather --grad-compression 1bit --inter-node-bandwidth 10 \
  --dp-bandwidth-sweep > "$tmp/dp.txt" 2>&1 || { fail "dp preview"; cat "$tmp/dp.txt"; }
contains "overlap simulated" "overlap simulated:" "$tmp/dp.txt"
contains "DP method line" "1bit (block 256) reduction every step: sends" "$tmp/dp.txt"
contains "sweep table" "data-parallel methods by inter-node bandwidth" "$tmp/dp.txt"
# the two-phase compressed allreduce: its own rows, fewer bytes than the all-gather's at dp 4
"$bin" "${dp4[@]}" --grad-compression 1bit --grad-compression-reduce two-phase --dp-bandwidth-sweep --json \
  > "$tmp/tp.json" 2>&1 || { fail "two-phase preview"; cat "$tmp/tp.json"; }
"$bin" "${dp4[@]}" --grad-compression 1bit --dp-bandwidth-sweep --json > "$tmp/ag.json" 2>&1 || fail "allgather --json"
python3 - "$tmp/tp.json" "$tmp/ag.json" <<'PY' && ok "two-phase sweep rows send less than the all-gather's" || fail "two-phase sweep"
import json, sys
tp, ag = (json.load(open(f)) for f in sys.argv[1:3])
assert tp["data_parallel"]["grad_compression_reduce"] == "two-phase", tp["data_parallel"]
rt = {r["method"]: r for r in tp["dp_bandwidth_sweep"]}
ra = {r["method"]: r for r in ag["dp_bandwidth_sweep"]}
for m in ("1bit", "qsgd", "topk"):
    assert rt[m]["reduce"] == "two-phase" and ra[m]["reduce"] == "allgather", (rt[m], ra[m])
    b = lambda r: r[m]["points"][0]["dp_sent_bytes_per_step"]
    assert b(rt) < b(ra), (m, b(rt), b(ra))  # dp 4: 2 x 3/4 payloads against 3
assert rt["powersgd"]["reduce"] == "allgather" and rt["none"]["reduce"] == "allgather"
PY
expect "two-phase with powersgd" "--grad-compression-reduce two-phase with --grad-compression powersgd" "${dp4[@]}" \
  --grad-compression powersgd --grad-compression-reduce two-phase
expect "two-phase reduction unknown" "--grad-compression-reduce ring: expected one of allgather|two-phase" "${dp4[@]}" \
  --grad-compression 1bit --grad-compression-reduce ring
"$bin" "${dp4[@]}" --overlap-grad-reduce --grad-compression powersgd --inter-node-bandwidth 10 --local-sgd-steps 16 \
  --dp-bandwidth-sweep --json > "$tmp/dp.json" 2>&1 || { fail "dp --json"; cat "$tmp/dp.json"; }
python3 - "$tmp/dp.json" <<'PY' && ok "--json: data_parallel and the sweep" || fail "--json data_parallel"
import json, sys
o = json.load(open(sys.argv[1]))
d = o["data_parallel"]
assert d["grad_compression"] == "powersgd" and d["local_sgd_steps"] == 16, d
assert d["inter_node"] and abs(d["bandwidth_bytes_per_s"] - 10e9 / 8) < 1, d
assert d["compression_ratio"] > 1, d  # only the deltas' reduction is compressed; the two fp32 all-gathers are not
assert d["exposure"] == "share", d  # local SGD's synchronisation blocks
rows = {r["method"]: r for r in o["dp_bandwidth_sweep"]}
assert set(rows) == {"none", "1bit", "qsgd", "topk", "powersgd", "local_sgd"}, rows.keys()
t = [p["iteration_time_s"] for p in rows["none"]["points"]]
assert all(a >= b for a, b in zip(t, t[1:])), t  # faster links never slower
PY

# ---- a Llama: its block in the header, the engine's plan, the key/value-head rule of tp ----
"$bin" --config models/llama-3.1-70b.json --hardware h100-sxm --num-gpus 64 --tensor-model-parallel-size 8 \
  --pipeline-model-parallel-size 4 --micro-batch-size 1 --global-batch-size 64 --seq-length 8192 --bf16 \
  --zero-stage 1 --sequence-parallel > "$tmp/llama.txt" 2>&1 || fail "Llama 3.1 70B preview"
contains "Llama header" "64 heads (8 key/value), head size 128, SwiGLU 28672" "$tmp/llama.txt"
contains "Llama parameters" "70.55B parameters" "$tmp/llama.txt"
contains "Llama memory from the engine's plan" "memory per GPU by category (the engine's plan" "$tmp/llama.txt"
contains "Llama 3.1 70B fits at tp 8 x pp 4" "every stage fits" "$tmp/llama.txt"
printf '{"model_type": "llama", "hidden_size": 384, "intermediate_size": 1024, "num_attention_heads": 6,
  "num_key_value_heads": 3, "num_hidden_layers": 2, "vocab_size": 300, "max_position_embeddings": 64}' > "$tmp/gqa.json"
expect "key/value heads vs tp" "--tensor-model-parallel-size 2 and 3 key/value heads: one must divide the other" \
  --config "$tmp/gqa.json" --num-gpus 2 --tensor-model-parallel-size 2 --pipeline-model-parallel-size 1 --seq-length 64

if [ $failures -ne 0 ]; then
  echo "$failures failure(s)"
  exit 1
fi
echo "all partitioner CLI checks passed"
