#!/usr/bin/env bash
# docs/data/dp-methods/plot.sh - validation loss against tokens for the runs beside it (val.dat, written
# by summarize.py) into docs/grad-compression-val.png. Needs gnuplot (Debian: gnuplot-nox).
set -euo pipefail
here=$(cd "$(dirname "$0")" && pwd)
python3 "$here/summarize.py" > "$here/table.md"
cols=$(head -1 "$here/val.dat" | wc -w)
plots=""
for ((c = 2; c <= cols - 1; c++)); do
  name=$(head -1 "$here/val.dat" | awk -v k=$((c + 1)) '{print $k}')
  plots+="${plots:+, }'$here/val.dat' using 1:$c with linespoints title '$name'"
done
gnuplot <<GP
set terminal pngcairo size 900,560
set output '$here/../../grad-compression-val.png'
set title 'gpt2-tiny-byte on fortunes, dp 4 (4 ranks), global batch 16 x 128 tokens'
set xlabel 'tokens'
set ylabel 'validation loss'
set key top right
set grid
plot $plots
GP
