# shellcheck shell=bash
# tests/lib/micro_gpt.sh - sourced by the shell tests that need a run of their own but not its
# numbers (file tools and their failures): a micro GPT (2 layers, width 32: a step is about half a
# megabyte, so every check can hash all of it) and the engine_train command that trains it on the
# fortunes bytes in a fraction of a second.
#
# Needs bin (the build's bin/), tmp (a scratch directory) and the source directory as the working
# directory. Writes $tmp/micro.json; sets micro_train, the command without --train-iters and
# --save-dir.
[ -f data/fortunes_byte_train.bin ] || { echo "FAIL: data/fortunes_byte_*.bin missing (tools/prepare_fortunes.sh)"; exit 1; }
echo '{"model_type": "gpt2", "n_layer": 2, "n_head": 2, "n_embd": 32, "vocab_size": 257, "n_positions": 64}' \
  > "$tmp/micro.json"
micro_train=("$bin/engine_train" --config "$tmp/micro.json" --train-data data/fortunes_byte_train.bin
             --val-data data/fortunes_byte_val.bin --micro-batch-size 2 --global-batch-size 2 --seq-length 16
             --eval-iters 1 --sample-length 0 --quiet --threads 1)
