#!/usr/bin/env bash
# tools/plot_val.sh - validation loss against training tokens for several engine_train runs, one
# curve each, as an SVG (gnuplot): how the data-parallel methods of docs/local-sgd.md compare at the
# same token count.
#
#   tools/plot_val.sh OUT.svg TOKENS_PER_ITER LABEL=RUN_DIR|METRICS.jsonl ...
#
# TOKENS_PER_ITER: the global batch x sequence length (the same for every run). Each metrics file's
# "kind":"eval" lines give (iter, val_loss). Needs gnuplot (Debian: gnuplot-nox).
set -euo pipefail
out=${1:?usage: tools/plot_val.sh OUT.svg TOKENS_PER_ITER LABEL=METRICS ...}
tpi=${2:?usage: tools/plot_val.sh OUT.svg TOKENS_PER_ITER LABEL=METRICS ...}
shift 2
[ $# -ge 1 ] || { echo "plot_val: no runs given (LABEL=RUN_DIR or LABEL=METRICS.jsonl)" >&2; exit 1; }
command -v gnuplot >/dev/null || { echo "plot_val: gnuplot not found (apt-get install gnuplot-nox)" >&2; exit 1; }
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
plot=""
i=0
for run in "$@"; do
  label=${run%%=*}
  in=${run#*=}
  [ -d "$in" ] && in="$in/metrics.jsonl"
  [ -f "$in" ] || { echo "plot_val: $in: no such file" >&2; exit 1; }
  awk -v tpi="$tpi" '/"kind":"eval"/ {
      it = $0; sub(/.*"iter":/, "", it); sub(/[,}].*/, "", it)
      v = $0; sub(/.*"val_loss":/, "", v); sub(/[,}].*/, "", v)
      printf "%.0f %s\n", it * tpi, v }' "$in" > "$tmp/$i.dat"
  [ -s "$tmp/$i.dat" ] || { echo "plot_val: $in holds no \"kind\":\"eval\" line" >&2; exit 1; }
  plot="$plot${plot:+, }\"$tmp/$i.dat\" using 1:2 with linespoints title \"$label\""
  i=$((i + 1))
done
gnuplot <<GP
set terminal svg size 760,480 font "sans,11"
set output "$out"
set xlabel "training tokens"
set ylabel "validation loss"
set grid
set key top right
plot $plot
GP
