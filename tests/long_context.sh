#!/usr/bin/env bash
# tests/long_context.sh BUILD_DIR SOURCE_DIR - long sequences with the fused attention (issue 15).
#
#  1. engine_train trains models/gpt2-tiny-byte-4k.json at T 4096 (micro-batch 1) on the CPU with the
#     fused attention (the default): the loss is finite and falls, and every rank's measured memory
#     peak equals the plan (+0.0%).
#  2. The plan's activations (partitioner --json, the engine's own plan) at T 1024, 2048, 4096: with
#     the fused attention they grow linearly in T (equal steps per 1024-token step, to the byte
#     within rounding of the doubles), with --attention-backend unfused quadratically (the (T, T)
#     probabilities and their gradient).
#  3. GPT-2 124M at T 8192, micro-batch 1, bf16 on one 80 GB H100 (models/gpt2-8k.json): the plan
#     fits with flash and needs several times the activation memory unfused.
set -u
build=$1
src=$2
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
failures=0
cd "$src" || exit 1
fail() { echo "FAIL $1"; [ -n "${2:-}" ] && tail -8 "$2"; failures=$((failures + 1)); }
[ -f data/fortunes_byte_train.bin ] || { echo "FAIL: data/fortunes_byte_*.bin missing (tools/prepare_fortunes.sh)"; exit 1; }

# ---- 1. T 4096 trains on the CPU ----
"$build/bin/engine_train" --config models/gpt2-tiny-byte-4k.json --train-data data/fortunes_byte_train.bin \
  --val-data data/fortunes_byte_val.bin --micro-batch-size 1 --seq-length 4096 --train-iters 3 --lr 3e-3 \
  --lr-warmup-iters 0 --eval-iters 1 --sample-length 0 --log-interval 1 --save-dir "$tmp/run" > "$tmp/train.log" 2>&1 ||
  fail "engine_train at T 4096" "$tmp/train.log"
grep -q "attention: flash" "$tmp/train.log" || fail "the run does not say it uses the fused attention" "$tmp/train.log"
peaks=$(grep -c "measured peak .* (+0.0%)" "$tmp/train.log")
[ "$peaks" -ge 1 ] || fail "measured peak differs from the plan" "$tmp/train.log"
losses=$(grep '"train"' "$tmp/run/metrics.jsonl" | grep -oE '"loss":[-0-9.e+]+' | cut -d: -f2 | paste -sd' ')
python3 - "$losses" <<'PY' && echo "ok   T 4096 on the CPU: losses $losses, measured peak = plan" || fail "T 4096 losses: $losses"
import math, sys
v = [float(x) for x in sys.argv[1].split()]
assert len(v) == 3 and all(math.isfinite(x) for x in v), v
assert v[-1] < v[0], v
PY

# ---- 2. activations linear in T with flash, quadratic unfused ----
acts() { # T BACKEND -> activation bytes of stage 0 in the engine's plan
  "$build/bin/partitioner" --config models/gpt2-tiny-byte-4k.json --hardware cpu --num-gpus 1 \
    --tensor-model-parallel-size 1 --pipeline-model-parallel-size 1 --micro-batch-size 1 --global-batch-size 1 \
    --seq-length "$1" --attention-backend "$2" --json |
    python3 -c 'import json,sys; o=json.load(sys.stdin); assert o["memory_source"]=="engine_plan"; print(int(o["stages"][0]["memory_bytes"]["activations"]))'
}
f1=$(acts 1024 flash); f2=$(acts 2048 flash); f4=$(acts 4096 flash)
u1=$(acts 1024 unfused); u2=$(acts 2048 unfused); u4=$(acts 4096 unfused)
python3 - "$f1" "$f2" "$f4" "$u1" "$u2" "$u4" <<'PY' && echo "ok   planned activations at T 1024/2048/4096: flash $f1/$f2/$f4 B (linear), unfused $u1/$u2/$u4 B" || fail "activations vs T: flash $f1 $f2 $f4, unfused $u1 $u2 $u4"
import sys
f1, f2, f4, u1, u2, u4 = (int(x) for x in sys.argv[1:7])
assert f4 - f2 == 2 * (f2 - f1), (f1, f2, f4)       # equal bytes per token: linear in T
assert (u4 - u2) > 3 * (u2 - u1), (u1, u2, u4)      # linear would give 2, pure T^2 4: the T^2 term dominates
assert u4 > 4 * f4, (u4, f4)
PY

# ---- 3. GPT-2 124M at T 8192 on one 80 GB GPU ----
plan8k() {
  "$build/bin/partitioner" --config models/gpt2-8k.json --hardware h100-sxm --num-gpus 1 --tensor-model-parallel-size 1 \
    --pipeline-model-parallel-size 1 --micro-batch-size 1 --global-batch-size 1 --seq-length 8192 --bf16 \
    --attention-backend "$1" --json
}
plan8k flash > "$tmp/f.json" 2>&1 && plan8k unfused > "$tmp/u.json" 2>&1 || fail "partitioner at T 8192" "$tmp/f.json"
python3 - "$tmp/f.json" "$tmp/u.json" <<'PY' && echo "ok   GPT-2 124M, T 8192, micro-batch 1, bf16 on one H100: $(python3 -c 'import json,sys; f=json.load(open(sys.argv[1])); u=json.load(open(sys.argv[2])); print("flash %.2f GiB, unfused %.2f GiB activations" % (f["stages"][0]["memory_bytes"]["activations"]/2**30, u["stages"][0]["memory_bytes"]["activations"]/2**30))' "$tmp/f.json" "$tmp/u.json")" || fail "T 8192 plan"
import json, sys
f, u = (json.load(open(p)) for p in sys.argv[1:3])
assert f["fits"] is True and f["memory_source"] == "engine_plan"
fa, ua = f["stages"][0]["memory_bytes"]["activations"], u["stages"][0]["memory_bytes"]["activations"]
assert ua > 5 * fa, (fa, ua)
PY

[ $failures -eq 0 ] || { echo "$failures failure(s)"; exit 1; }
echo "long_context: all passed"
