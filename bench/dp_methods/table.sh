#!/usr/bin/env bash
# bench/dp_methods/table.sh DIR - the table of the dp-methods runs in DIR (bench/dp_methods/run.sh):
# per run, the final validation loss and its gap to the synchronous run's ("none"), the mean bytes
# rank 0 sent over the data-parallel group per iteration (dp_bytes, counted by the comm layer) and
# the cut against "none", the whole run's dp bytes (MB), the iterations that synchronised over dp
# and the iterations run.
set -euo pipefail
dir=${1:?usage: table.sh DIR}
stats() { # FILE -> "final_val mean_dp_bytes syncs iters tokens_per_iter"
  awk '
    function num(key,   m) {
      if (match($0, "\"" key "\":-?[0-9.eE+-]+")) { m = substr($0, RSTART, RLENGTH); sub(/^[^:]*:/, "", m); return m + 0 }
      return -1
    }
    /"kind":"train"/ { n++; b = num("dp_bytes"); if (b < 0) b = 0; bytes += b; if (b > 0) syncs++ }
    /"kind":"eval"/ { val = num("val_loss") }
    END { printf "%.4f %.0f %d %d\n", val, n ? bytes / n : 0, syncs, n }' "$1"
}
[ -f "$dir/none.jsonl" ] || { echo "table: $dir/none.jsonl missing (the baseline run)" >&2; exit 1; }
read -r v0 b0 _ _ < <(stats "$dir/none.jsonl")
printf "| run | final val loss | vs none | dp bytes / iter (rank 0) | cut | dp MB in the run | dp syncs | iterations |\n"
printf "|---|---|---|---|---|---|---|---|\n"
order="none 1bit qsgd topk powersgd powersgd-rank16 localsgd-h16 diloco-h16 lamb-gbs64"
for f in $(for r in $order; do [ -f "$dir/$r.jsonl" ] && echo "$dir/$r.jsonl"; done; \
           for g in "$dir"/*.jsonl; do [[ " $order " == *" $(basename "$g" .jsonl) "* ]] || echo "$g"; done); do
  r=$(basename "$f" .jsonl)
  read -r v b s n < <(stats "$f")
  if ! grep -q '"dp_bytes"' "$f"; then # a run from before the comm layer counted wire bytes
    printf "| %s | %s | %s | not recorded | | | | %s |\n" "$r" "$v" "$(awk -v v="$v" -v v0="$v0" 'BEGIN { printf "%+.1f%%", 100 * (v - v0) / v0 }')" "$n"
    continue
  fi
  gap=$(awk -v v="$v" -v v0="$v0" 'BEGIN { printf "%+.1f%%", 100 * (v - v0) / v0 }')
  cut=$(awk -v b="$b" -v b0="$b0" 'BEGIN { if (b > 0) printf "%.1fx", b0 / b; else printf "-" }')
  total=$(awk -v b="$b" -v n="$n" 'BEGIN { printf "%.0f", b * n / 1e6 }')
  printf "| %s | %s | %s | %s | %s | %s | %s | %s |\n" "$r" "$v" "$gap" "$b" "$cut" "$total" "$s" "$n"
done
