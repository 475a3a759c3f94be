#!/usr/bin/env bash
# bench/dp_methods/plot.sh DIR [OPTIMIZER] - validation loss against tokens for the standard runs in DIR
# (bench/dp_methods/run.sh; with the 1-bit Adam runs 1bit-adam, adam-freeze, 1bit-warm,
# 1bit-adam-stage2 and its -f5 and -two-phase variants; other files there are left out), into
# DIR/val-loss.png with gnuplot. OPTIMIZER (run.sh's DP_METHODS_OPTIMIZER, default adam) goes in the title.
# Tokens = iteration x global batch x sequence length; the global batch is 16 sequences, 64 for a
# run named *gbs64* (run.sh).
set -euo pipefail
dir=${1:?usage: plot.sh DIR [OPTIMIZER]}
case "${2:-adam}" in
  adam) opt="AdamW" ;;
  sgd) opt="momentum SGD" ;;
  *) echo "plot: optimizer '$2' is not adam or sgd" >&2; exit 1 ;;
esac
command -v gnuplot >/dev/null || { echo "plot: gnuplot not found (apt-get install gnuplot-nox)" >&2; exit 1; }
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
plots=()
for r in none 1bit qsgd topk powersgd powersgd-rank16 localsgd-h16 diloco-h16 lamb-gbs64 1bit-adam adam-freeze 1bit-warm 1bit-adam-stage2 1bit-adam-stage2-f5 1bit-adam-stage2-two-phase; do
  f="$dir/$r.jsonl"
  [ -f "$f" ] || continue
  gbs=16
  [[ "$r" == *gbs64* ]] && gbs=64
  awk -v tok=$((gbs * 128)) '
    function num(key,   m) {
      if (match($0, "\"" key "\":-?[0-9.eE+-]+")) { m = substr($0, RSTART, RLENGTH); sub(/^[^:]*:/, "", m); return m }
      return "NaN"
    }
    /"kind":"eval"/ { print num("iter") * tok, num("val_loss") }' "$f" > "$tmp/$r.dat"
  plots+=("\"$tmp/$r.dat\" using 1:2 with linespoints lw 2 title \"$r\"")
done
joined=$(IFS=,; echo "${plots[*]}")
gnuplot <<GP
set terminal pngcairo size 1000,650 font "sans,10"
set output "$dir/val-loss.png"
set title "Validation loss against tokens: GPT tiny (byte), fortunes, dp 4, $opt unless named"
set xlabel "tokens"
set ylabel "validation loss"
set grid
set key top right
set linetype 9 lc rgb "#8b4513" pt 9
set linetype cycle 9
plot $joined
GP
echo "plot: $dir/val-loss.png"
