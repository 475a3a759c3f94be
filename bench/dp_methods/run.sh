#!/usr/bin/env bash
# bench/dp_methods/run.sh - the data-parallel methods of issue 32 on the fortunes text, measured.
#
#   bash bench/dp_methods/run.sh [OUT_DIR] [RUN ...]     (default OUT_DIR docs/data/dp-methods, every run)
#
# Every run trains the tiny GPT (models/gpt2-tiny-byte.json) on 4 ranks with data parallelism 4 on
# the same tokens: 300 iterations of a 16-sequence global batch of 128 tokens (614,400 tokens), the
# learning rate 2e-3 warming up over 30 iterations and decaying to 2e-4, validation every 102,400 tokens
# (10 global batches: 160 sequences; 640 for the LAMB run, whose batches are 4x larger). The runs differ only in how the replicas agree:
#   none        synchronous AdamW, fp32 all-reduce (the baseline)
#   1bit qsgd topk powersgd powersgd-rank16   --grad-compression, with error feedback (PowerSGD rank 4, 16)
#   1bit-two-phase 1bit with --grad-compression-reduce two-phase (not in the default list: run it by name)
#   1bit-adam   1-bit Adam's two stages (Tang et al. 2021): the plain fp32 reduction and AdamW for the first
#               fifth of the iterations, then AdamW's second moment frozen and 1bit compression with error
#               feedback (--grad-compression-start-iter = --adam-freeze-step = iters / 5; run it by name)
#   1bit-adam-stage2  1-bit Adam as Tang et al. run it (Algorithm 1, --onebit-adam): plain AdamW on the fp32
#               reduction for the first fifth, then v frozen and the momentum (each worker's own, from its own
#               gradient) all-reduced 1bit-compressed with error feedback instead of the gradient (by name)
#   1bit-adam-stage2-two-phase  the same with --grad-compression-reduce two-phase (server error feedback; by name)
#   1bit-adam-stage2-f5  1bit-adam-stage2 with the warm-up and freeze at a twentieth of the iterations (by name)
#   powersgd-momentum  --onebit-adam with PowerSGD rank 4 as the compressor: plain AdamW for the first fifth,
#               then v frozen and each worker's momentum all-reduced as rank-4 factors with error feedback
#               (by name); powersgd-momentum-f5 with the warm-up and freeze at a twentieth (by name)
#   powersgd-warm  PowerSGD rank 4 after an uncompressed fifth (--powersgd-start-iter iters / 5), v never
#               frozen; powersgd-warm-f5 after a twentieth (by name)
#   adam-freeze AdamW with v frozen after iters / 5, uncompressed: what the freeze alone costs (by name)
#   1bit-warm   1bit after an uncompressed fifth, v never frozen: what the warm-up alone does (by name)
#   localsgd-h16   16 local steps, then the replicas' parameters averaged (--outer-optimizer average)
#   diloco-h16     16 local steps, then an outer Nesterov step (outer lr 0.7, momentum 0.9)
#   diloco-h16-powersgd diloco-h16-1bit   (not in the default list) DiLoCo H 16 whose outer synchronisation
#                  reduces the parameter change through --grad-compression powersgd (rank 4) or 1bit, with the
#                  outer error feedback (engine/train/local_sgd.h)
#   lamb-gbs64     LAMB at 4x the global batch (64 sequences, a quarter of the iterations: the same tokens), lr x2
#                  (the square-root scaling of You et al. 2020), warm-up and validation at the same tokens
#   lamb-gbs64-3x adamw-gbs64-3x  (by name) LAMB (lr 2e-2) and AdamW (4e-3) at 4x the batch on 3x the tokens
#                  (three quarters of the iterations), the price the gradient noise scale puts on that batch
#                  (noise_scale.sh, docs/optimizers.md)
# Each run's metrics.jsonl lands in OUT_DIR/<run>.jsonl; then table.sh prints the table (final
# validation loss, dp bytes per step and per synchronisation) and plot.sh draws validation loss
# against tokens (OUT_DIR/val-loss.png). Takes about 2 minutes a run on 2 cores.
set -euo pipefail
cd "$(dirname "$0")/../.."
out=${1:-docs/data/dp-methods}
shift || true
runs=("$@")
mkdir -p "$out"
if [ "$(id -u)" -eq 0 ]; then export OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1; fi
[ -f data/fortunes_byte_train.bin ] || bash tools/prepare_fortunes.sh build/bin

# DP_METHODS_OPTIMIZER=sgd runs the same methods under momentum SGD (torch.optim.SGD, momentum 0.9),
# the optimizer of the papers of 1-bit SGD (Seide et al. 2014), QSGD, PowerSGD (Vogels et al. 2019)
# and local SGD (Lin et al. 2020), against an uncompressed SGD run: lr 0.1 decaying to 0.01, no
# weight decay (the uncompressed run's best of 0.03, 0.05, 0.1, 0.3 and 1: docs/dp-methods.md). Its default
# list leaves out LAMB (its own optimizer, so the same run); the 1-bit Adam runs are refused there.
case "${DP_METHODS_OPTIMIZER:-adam}" in
  adam) opt=(--min-lr 2e-4); lr=2e-3 ;;
  sgd) opt=(--optimizer sgd --weight-decay 0 --min-lr 0.01); lr=0.1 ;;
  *) echo "dp_methods: DP_METHODS_OPTIMIZER=$DP_METHODS_OPTIMIZER is not adam or sgd" >&2; exit 1 ;;
esac
if [ ${#runs[@]} -eq 0 ]; then
  runs=(none 1bit qsgd topk powersgd powersgd-rank16 localsgd-h16 diloco-h16)
  [ "${DP_METHODS_OPTIMIZER:-adam}" = sgd ] || runs+=(lamb-gbs64)
fi
common=(--config models/gpt2-tiny-byte.json --train-data data/fortunes_byte_train.bin
        --val-data data/fortunes_byte_val.bin --micro-batch-size 4 --seq-length 128 --log-interval 10)
# DP_METHODS_ITERS (default 300, a multiple of 12) lengthens every run alike: warm-up a tenth of it,
# validation six times; the LAMB run keeps a quarter of the iterations at 4x the batch (validation
# three times, warm-up over the same tokens, rounded up).
iters=${DP_METHODS_ITERS:-300}
(( iters % 12 == 0 )) || { echo "dp_methods: DP_METHODS_ITERS=$iters is not a multiple of 12" >&2; exit 1; }
base=("${opt[@]}" --global-batch-size 16 --train-iters "$iters" --lr "$lr" --lr-warmup-iters $((iters / 10)) --eval-interval $((iters / 6)))
lamb=(--global-batch-size 64 --train-iters $((iters / 4)) --lr-warmup-iters $(((iters + 39) / 40)) --eval-interval $((iters / 12)))
# 4x the batch on 3x the tokens, the price the gradient noise scale puts on it (noise_scale.sh)
lamb3x=(--global-batch-size 64 --train-iters $((3 * iters / 4)) --lr-warmup-iters $((3 * ((iters + 39) / 40))) --eval-interval $((iters / 12)))

# shellcheck source=bench/dp_methods/methods.sh
. bench/dp_methods/methods.sh
flags_of() {
  case "$1" in
    none) echo "${base[*]}" ;;
    1bit-two-phase) echo "${base[*]} --grad-compression 1bit --grad-compression-reduce two-phase" ;;
    1bit-adam) echo "${base[*]} --grad-compression 1bit --grad-compression-start-iter $((iters / 5)) --adam-freeze-step $((iters / 5))" ;;
    1bit-adam-stage2) echo "${base[*]} --grad-compression 1bit --adam-freeze-step $((iters / 5)) --onebit-adam" ;;
    1bit-adam-stage2-f5) echo "${base[*]} --grad-compression 1bit --adam-freeze-step $((iters / 20)) --onebit-adam" ;;
    1bit-adam-stage2-two-phase) echo "$(flags_of 1bit-adam-stage2) --grad-compression-reduce two-phase" ;;
    powersgd-momentum) echo "${base[*]} --grad-compression powersgd --powersgd-rank 4 --adam-freeze-step $((iters / 5)) --onebit-adam" ;;
    powersgd-momentum-f5) echo "${base[*]} --grad-compression powersgd --powersgd-rank 4 --adam-freeze-step $((iters / 20)) --onebit-adam" ;;
    powersgd-warm) echo "${base[*]} --grad-compression powersgd --powersgd-rank 4 --powersgd-start-iter $((iters / 5))" ;;
    powersgd-warm-f5) echo "${base[*]} --grad-compression powersgd --powersgd-rank 4 --powersgd-start-iter $((iters / 20))" ;;
    adam-freeze) echo "${base[*]} --adam-freeze-step $((iters / 5))" ;;
    1bit-warm) echo "${base[*]} --grad-compression 1bit --grad-compression-start-iter $((iters / 5))" ;;
    diloco-h16-powersgd) echo "$(flags_of diloco-h16) --grad-compression powersgd --powersgd-rank 4" ;;
    diloco-h16-1bit) echo "$(flags_of diloco-h16) --grad-compression 1bit" ;;
    lamb-gbs64) echo "${lamb[*]} --lr 2e-2 --optimizer lamb --min-lr 2e-3" ;;
    lamb-gbs64-lr4e-3) echo "${lamb[*]} --lr 4e-3 --optimizer lamb --min-lr 4e-4" ;;
    adamw-gbs64) echo "${lamb[*]} --lr 4e-3 --min-lr 4e-4" ;;
    lamb-gbs64-3x) echo "${lamb3x[*]} --lr 2e-2 --optimizer lamb --min-lr 2e-3" ;;
    adamw-gbs64-3x) echo "${lamb3x[*]} --lr 4e-3 --min-lr 4e-4" ;;
    *) # a method of methods.sh on the base run
      local m
      m=$(method_flags "$1") || { echo "dp_methods: unknown run '$1'" >&2; return 1; }
      echo "${base[*]} $m" ;;
  esac
}

# DP_METHODS_SAVE_INTERVAL=N keeps each run's checkpoints, every N iterations and the last, in
# OUT_DIR/<run>-run (what noise_scale.sh and pretrained.sh start from)
save=()
[ -z "${DP_METHODS_SAVE_INTERVAL:-}" ] || save=(--save-interval "$DP_METHODS_SAVE_INTERVAL" --keep-last 0)
for r in "${runs[@]}"; do
  f=$(flags_of "$r")
  dir=$(mktemp -d)
  echo "== $r: $f"
  # shellcheck disable=SC2086
  mpirun --oversubscribe --bind-to none -np 4 -x OMP_NUM_THREADS=1 -x OMP_WAIT_POLICY=PASSIVE \
    "${TRIDENT_BUILD:-build}/bin/engine_train" "${common[@]}" $f "${save[@]}" --save-dir "$dir" > "$out/$r.log" 2>&1 \
    || { echo "dp_methods: run $r failed (log: $out/$r.log)" >&2; exit 1; }
  cp "$dir/metrics.jsonl" "$out/$r.jsonl"
  if [ ${#save[@]} -gt 0 ]; then rm -rf "$out/$r-run"; mv "$dir" "$out/$r-run"; else rm -rf "$dir"; fi
done
bash bench/dp_methods/table.sh "$out" | tee "$out/table.md"
bash bench/dp_methods/plot.sh "$out" "${DP_METHODS_OPTIMIZER:-adam}"
