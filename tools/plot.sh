#!/usr/bin/env bash
# tools/plot.sh - turns engine_train's metrics.jsonl into PNG curves with gnuplot.
#
#   tools/plot.sh RUN_DIR|METRICS.jsonl [OUT.png]
#
# Plots the last run in the file (a file may hold several runs, each starting again at iter 1):
# training loss with validation loss, learning rate, gradient norm, tokens/s and MFU, and the
# step-time split per iteration (compute, tp, pp, bubble, dp, other, stacked, in ms). OUT defaults
# to RUN_DIR/metrics.png. Needs gnuplot (Debian: gnuplot-nox). Exits non-zero with a message when
# the file is missing or holds no training line.
set -euo pipefail
in=${1:?usage: tools/plot.sh RUN_DIR|METRICS.jsonl [OUT.png]}
[ -d "$in" ] && in="$in/metrics.jsonl"
[ -f "$in" ] || { echo "plot: $in: no such file (expected engine_train's SAVE_DIR/metrics.jsonl)" >&2; exit 1; }
out=${2:-$(dirname "$in")/metrics.png}
command -v gnuplot >/dev/null || { echo "plot: gnuplot not found (apt-get install gnuplot-nox)" >&2; exit 1; }
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT

# JSON lines -> whitespace columns (awk: the files are flat objects of numbers written by cJSON)
awk -v train="$tmp/train.dat" -v eval="$tmp/eval.dat" '
  function num(key,   m) {
    if (match($0, "\"" key "\":-?[0-9.eE+-]+")) { m = substr($0, RSTART, RLENGTH); sub(/^[^:]*:/, "", m); return m }
    return "NaN"
  }
  /"kind":"train"/ {
    if (num("iter") == 1) { printf "" > train; printf "" > eval }   # a new run starts
    printf "%s %s %s %s %s %s %s %s %s %s %s %s %s\n", num("iter"), num("loss"), num("lr"), num("grad_norm"),
      num("tokens_per_s"), num("mfu"), num("compute_s") * 1e3, num("tp_s") * 1e3, num("pp_s") * 1e3,
      num("bubble_s") * 1e3, num("dp_s") * 1e3, num("other_s") * 1e3, num("ms") >> train
  }
  /"kind":"eval"/ { printf "%s %s\n", num("iter"), num("val_loss") >> eval }
' "$in"
[ -s "$tmp/train.dat" ] || { echo "plot: $in holds no \"kind\":\"train\" line" >&2; exit 1; }
[ -s "$tmp/eval.dat" ] || echo "NaN NaN" > "$tmp/eval.dat"

gnuplot <<GP
set terminal pngcairo size 1400,900 font "sans,9"
set output "$out"
set multiplot layout 2,3 title "$(basename "$(dirname "$in")") ($in)"
set grid
set key top right
set xlabel "iteration"
set title "loss"
plot "$tmp/train.dat" using 1:2 with lines lw 2 title "train", "$tmp/eval.dat" using 1:2 with linespoints pt 7 title "validation"
set title "learning rate"
plot "$tmp/train.dat" using 1:3 with lines lw 2 notitle
set title "gradient norm (before clipping)"
plot "$tmp/train.dat" using 1:4 with lines lw 2 notitle
set title "throughput"
set ylabel "tokens/s"
set y2label "MFU"
set y2tics
plot "$tmp/train.dat" using 1:5 with lines lw 2 title "tokens/s", "" using 1:6 axes x1y2 with lines title "MFU"
unset y2tics
unset y2label
set title "step time split (stacked, ms)"
set ylabel "ms"
set style fill solid 0.8 noborder
plot "$tmp/train.dat" using 1:(\$7+\$8+\$9+\$10+\$11+\$12) with filledcurves x1 title "other", \
     "" using 1:(\$7+\$8+\$9+\$10+\$11) with filledcurves x1 title "dp", \
     "" using 1:(\$7+\$8+\$9+\$10) with filledcurves x1 title "bubble", \
     "" using 1:(\$7+\$8+\$9) with filledcurves x1 title "pp", \
     "" using 1:(\$7+\$8) with filledcurves x1 title "tp", \
     "" using 1:7 with filledcurves x1 title "compute", \
     "" using 1:13 with lines lc rgb "black" title "step"
set title "time share of the step (%)"
set ylabel "%"
set yrange [0:100]
plot "$tmp/train.dat" using 1:(100*\$7/\$13) with lines lw 2 title "compute", \
     "" using 1:(100*(\$8)/\$13) with lines title "tp", "" using 1:(100*(\$10)/\$13) with lines title "bubble", \
     "" using 1:(100*(\$11)/\$13) with lines title "dp"
unset multiplot
GP
echo "plot: wrote $out ($(wc -l < "$tmp/train.dat") iterations)"
