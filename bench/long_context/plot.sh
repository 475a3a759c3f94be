#!/usr/bin/env bash
# bench/long_context/plot.sh TSV OUT.png - draws run.sh's table with gnuplot (the house plotting tool,
# tools/plot.sh): left, the largest rank's peak memory (MiB, measured = planned) against seq-length for
# cp 1, 2, 4; right, the step time (s) against seq-length, measured points filled, extrapolated open.
set -euo pipefail
tsv=${1:?usage: plot.sh TSV OUT.png}
png=${2:?usage: plot.sh TSV OUT.png}
command -v gnuplot >/dev/null || { echo "plot: gnuplot not found (apt-get install gnuplot-nox)" >&2; exit 1; }
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
for cp in 1 2 4; do
  awk -F'\t' -v cp="$cp" '$1 == cp { print $2 / 1024, $3, $6, ($7 == "measured") }' "$tsv" > "$tmp/cp$cp.dat"
done
gnuplot <<GP
set terminal pngcairo size 1200,480 font ",10"
set output "$png"
set multiplot layout 1,2 title "tiny Llama (llama-tiny-byte-64k), micro-batch 1, one thread per rank, --cp-comm-type p2p"
set logscale x 2
set logscale y 2
set xlabel "seq-length (k tokens)"
set xtics (4, 8, 16, 32, 64)
set xrange [3.6:72]
set key top left
set grid
set ylabel "peak memory per rank (MiB: the plan, = measured where trained)"
plot for [cp in "1 2 4"] "$tmp/cp".cp.".dat" using 1:2 with linespoints pt 7 lc (cp+0) title "cp ".cp
set ylabel "step time (s; open: extrapolated)"
plot for [cp in "1 2 4"] "$tmp/cp".cp.".dat" using 1:(\$4 > 0.5 ? \$3 : 1/0) with points pt 7 lc (cp+0) title "cp ".cp." measured", \
     for [cp in "1 2 4"] "$tmp/cp".cp.".dat" using 1:3 with lines lc (cp+0) dt 2 notitle, \
     for [cp in "1 2 4"] "$tmp/cp".cp.".dat" using 1:(\$4 > 0.5 ? 1/0 : \$3) with points pt 6 lc (cp+0) notitle
unset multiplot
GP
echo "plot: $png"
