#!/usr/bin/env bash
# bench/long_context/run.sh - long context under context parallelism (issue 34, item 6): peak memory per
# rank and step time of the tiny Llama against seq-length 4k..64k at cp 1, 2 and 4, as a table and a plot.
#
#   bash bench/long_context/run.sh [OUT_DIR] [TRAIN_MAX] [EXTRA]  (defaults docs/data/long-context-cp, 16384, "4:65536")
#
# Every point is engine_train on cp Open MPI ranks (--context-parallel-size cp, --cp-comm-type p2p, one
# thread a rank, micro-batch 1, one sequence a step) with models/llama-tiny-byte-64k.json (the tiny Llama
# with max_position_embeddings 65536, rope_theta as is) on the fortunes bytes (the train split holds 2.48M
# tokens, the validation split 78k: both hold a 65,537-token window).
#  - seq-length <= TRAIN_MAX: one training iteration (and the end-of-run validation batch); the step time
#    is the iteration's ms (metrics.jsonl), the peaks are every rank's "memory planned ... total P MiB;
#    measured peak M MiB" line (the device's measured arena peak against the engine's plan: DESIGN §7).
#  - longer (unless listed in EXTRA, default "4:65536": cp 4 at 64k is trained): the peak is the plan of
#    `partitioner --json` (the engine's own plan at cp 1, the formulas at cp > 1) and the step time is
#    extrapolated from the measured points
#    of the same cp by a + b T + c T^2 (linear layers, causal attention), and marked so in the table.
# Writes OUT_DIR/long-context-cp.tsv (cp, T, planned MiB, measured MiB, max |measured - planned| over the
# ranks in bytes-as-MiB, step s, "measured"|"extrapolated") and OUT_DIR/long-context-cp.png (gnuplot).
# The machine may be shared: the load average is printed and written to the TSV's header.
set -euo pipefail
cd "$(dirname "$0")/../.."
out=${1:-docs/data/long-context-cp}
train_max=${2:-16384}
extra=${3:-4:65536}
mkdir -p "$out"
export OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1 OMP_NUM_THREADS=1
# shellcheck source=tests/lib/mpirun_flags.sh
mpirun_timeout=${mpirun_timeout:-3600}
source tests/lib/mpirun_flags.sh
bin=${TRIDENT_BUILD:-build}/bin
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
[ -f data/fortunes_byte_train.bin ] || { echo "long_context: data/fortunes_byte_*.bin missing (bash tools/trident.sh data)" >&2; exit 1; }
tsv="$out/long-context-cp.tsv"
load0=$(cut -d' ' -f1-3 /proc/loadavg)
printf '# %s, %s cores, load average at start %s\n' "$(date -u +%FT%TZ)" "$(nproc)" "$load0" > "$tsv"
printf 'cp\tT\tplanned_mib\tmeasured_mib\tmax_diff_mib\tstep_s\tstep\n' >> "$tsv"

peaks() { # LOG CP -> "planned measured maxdiff" (MiB, the largest over the ranks) or fails
  python3 - "$1" "$2" <<'PY'
import re, sys
rows = [tuple(map(float, m.groups())) for m in
        re.finditer(r"memory planned:.* total ([0-9.]+) MiB; measured peak ([0-9.]+) MiB", open(sys.argv[1]).read())]
assert len(rows) == int(sys.argv[2]), f"{len(rows)} memory lines for cp {sys.argv[2]}"
print(max(p for p, _ in rows), max(m for _, m in rows), max(abs(m - p) for p, m in rows))
PY
}

extrapolate() { # CP T -> step seconds at T from the measured points of CP: least squares a + b T + c T^2
  python3 - "$tsv" "$1" "$2" <<'PY'
import sys
pts = [(float(r[1]) / 1024, float(r[5])) for r in (l.rstrip("\n").split("\t") for l in open(sys.argv[1]))
       if len(r) == 7 and r[0] == sys.argv[2] and r[6] == "measured"]
A = [[sum(x ** (i + j) for x, _ in pts) for j in range(3)] + [sum(y * x ** i for x, y in pts)] for i in range(3)]
for i in range(3):                                     # Gauss-Jordan on the 3 x 3 normal equations
    A[i] = [v / A[i][i] for v in A[i]]
    for k in range(3):
        if k != i: A[k] = [vk - A[k][i] * vi for vk, vi in zip(A[k], A[i])]
X = float(sys.argv[3]) / 1024
print("%.1f" % (A[0][3] + A[1][3] * X + A[2][3] * X * X))
PY
}

for cp in 1 2 4; do
  for T in 4096 8192 16384 32768 65536; do
    log="$tmp/cp${cp}_$T.log"
    args=(--config models/llama-tiny-byte-64k.json --train-data data/fortunes_byte_train.bin
          --val-data data/fortunes_byte_val.bin --seq-length "$T" --micro-batch-size 1 --global-batch-size 1
          --train-iters 1 --eval-iters 1 --sample-length 0 --threads 1 --log-interval 1
          --context-parallel-size "$cp" --cp-comm-type p2p --save-dir "$tmp/cp${cp}_$T")
    if [ "$T" -le "$train_max" ] || [[ " $extra " == *" $cp:$T "* ]]; then
      mpiexec "${mpirun_flags[@]}" -np "$cp" "$bin/engine_train" "${args[@]}" > "$log" 2>&1 ||
        { tail -5 "$log"; echo "long_context: cp $cp T $T failed" >&2; exit 1; }
      s=$(python3 -c 'import json,sys; print([r for r in map(json.loads, open(sys.argv[1])) if r["kind"] == "train"][0]["step_s"])' "$tmp/cp${cp}_$T/metrics.jsonl")
      kind=measured
    else
      planned=$("$bin/partitioner" --config models/llama-tiny-byte-64k.json --hardware cpu --num-gpus "$cp" \
        --context-parallel-size "$cp" --cp-comm-type p2p --tensor-model-parallel-size 1 \
        --pipeline-model-parallel-size 1 --micro-batch-size 1 --global-batch-size 1 --seq-length "$T" --json |
        python3 -c 'import json,sys; print("%.2f" % (json.load(sys.stdin)["stages"][0]["memory_bytes"]["total"] / 2**20))')
      s=$(extrapolate "$cp" "$T")
      kind=extrapolated
    fi
    if [ "$kind" = measured ]; then
      read -r planned measured diff < <(peaks "$log" "$cp") || { tail -5 "$log"; exit 1; }
    else
      measured=-; diff=-
    fi
    printf '%s\t%s\t%s\t%s\t%s\t%s\t%s\n' "$cp" "$T" "$planned" "$measured" "$diff" "$s" "$kind" | tee -a "$tsv"
  done
done
echo "# load average at the end $(cut -d' ' -f1-3 /proc/loadavg)" >> "$tsv"
bash "$(dirname "$0")/plot.sh" "$tsv" "$out/long-context-cp.png"
