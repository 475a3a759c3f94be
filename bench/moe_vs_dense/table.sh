#!/usr/bin/env bash
# bench/moe_vs_dense/table.sh DIR - validation loss against tokens for each run in DIR
# (bench/moe_vs_dense/run.sh): one row per validation, one column per run (dense first), then each
# run's wall time and the MoE runs' final gap to the dense run.
set -euo pipefail
dir=${1:?usage: table.sh DIR}
order="dense moe moe-aux1e-3 dense-lr6e-3 moe-lr6e-3 moe-bf16"
files=()
for r in $order; do [ -f "$dir/$r.jsonl" ] && files+=("$dir/$r.jsonl"); done
for g in "$dir"/*.jsonl; do [[ " $order " == *" $(basename "$g" .jsonl) "* ]] || files+=("$g"); done
[ ${#files[@]} -gt 0 ] || { echo "table: no runs in $dir" >&2; exit 1; }
# tokens per iteration: micro-batch 8 x 64 (run.sh)
awk -v tpi=512 '
  function num(key,   m) {
    if (match($0, "\"" key "\":-?[0-9.eE+-]+")) { m = substr($0, RSTART, RLENGTH); sub(/^[^:]*:/, "", m); return m + 0 }
    return -1
  }
  FNR == 1 { f++; name[f] = FILENAME; sub(/.*\//, "", name[f]); sub(/\.jsonl$/, "", name[f]) }
  /"kind":"eval"/ { it = num("iter"); if (!(it in seen)) { seen[it] = 1; its[++n] = it } v[f, it] = num("val_loss"); last[f] = v[f, it] }
  /"kind":"train"/ { t = num("ms"); if (t >= 0) wall[f] += t / 1e3 }
  END {
    printf "| tokens | iteration |"; for (i = 1; i <= f; i++) printf " %s |", name[i]; printf "\n|---|---|"
    for (i = 1; i <= f; i++) printf "---|"; printf "\n"
    for (k = 1; k <= n; k++) {
      printf "| %d | %d |", its[k] * tpi, its[k]
      for (i = 1; i <= f; i++) printf " %s |", ((i, its[k]) in v) ? sprintf("%.4f", v[i, its[k]]) : "-"
      printf "\n"
    }
    printf "| final vs %s | |", name[1]
    for (i = 1; i <= f; i++) printf " %+.1f%% |", 100 * (last[i] - last[1]) / last[1]; printf "\n"
    printf "| train time (s) | |"; for (i = 1; i <= f; i++) printf " %.0f |", wall[i]; printf "\n"
  }' "${files[@]}"
