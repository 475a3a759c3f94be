#!/usr/bin/env bash
# tests/ckpt_cli.sh BUILD_DIR SOURCE_DIR - checkpoints through the command-line tools.
#
# engine_train at tp 2 x pp 2 (mpirun, 4 ranks) saves every 3 of 6 iterations. Resumed from
# iteration 3 in the same layout it logs the very same losses for iterations 4-6; resumed at tp 1 x
# dp 2 after `ckpt reshard` within 1e-5 (resharding on load: tests/test_checkpoint.c). A PowerSGD run
# at pp 2 x dp 2 resharded to its own layout resumes bit for bit (the copies' residuals and Q carried);
# resharded to pp 1 every matrix keeps its Q (read from the stage that saved it); resharded to dp 4
# every rank's residual is the saved ranks' sum / 4. `ckpt inspect` shows
# every file and tensor verified; `ckpt merge` equals h5py's view of the virtual-dataset index;
# `ckpt export --format safetensors` is read back by hand with numpy; an llm.c model file goes
# through `ckpt import` and `ckpt export --format llmc` bit for bit and fine-tunes; a flipped byte
# makes engine_train --load refuse on every rank with the file's name, without hanging.
set -u
build=$1
src=$(cd "$2" && pwd)
# shellcheck source=tests/lib/script_setup.sh
source "$src/tests/lib/script_setup.sh"
source "$src/tests/lib/mpirun_flags.sh"
source "$src/tests/lib/sections.sh"
mpirun=(mpirun "${mpirun_flags[@]}")
[ -f data/fortunes_byte_train.bin ] || { echo "FAIL: data/fortunes_byte_*.bin missing (tools/prepare_fortunes.sh)"; exit 1; }
run=("$bin/engine_train" --config models/gpt2-tiny-byte.json --micro-batch-size 2 --global-batch-size 4
     --seq-length 32 --train-iters 6 --eval-iters 1 --sample-length 0 --quiet)

# losses, close, save_run, resume, same_losses, reshard_resume
source "$src/tests/lib/resume_losses.sh"

# the saving run (tp 2 x pp 2) that four sections start from
if section resume || section reshard || section inspect_merge_export || section flipped_byte; then
  save_run "$tmp/a"
fi

# same layout, from iteration 3: bit-identical losses (metrics hold every digit)
if section resume; then
  resume "$tmp/a" "$tmp/b" 4 --tensor-model-parallel-size 2 --pipeline-model-parallel-size 2
  same_losses "$tmp/a" "$tmp/b" "resume at tp 2 x pp 2"
fi

# another layout, offline: ckpt reshard to tp 1 x dp 2 (ZeRO 1), resumed under mpirun
if section reshard; then
  reshard_resume "$tmp/a" "$tmp/c"
fi

# a compressed run's own state through ckpt reshard (pp 2 x dp 2, PowerSGD from iteration 1): the
# tied embedding's copy residual and Q are carried with tp and pp unchanged (the resume after the
# reshard logs the saving run's very losses); at pp 1 there is no copy, and each matrix's Q (the
# same at any pp: its TP shard is) is carried from the stage that saved it, without a warning; at
# dp 4 each rank's residual is the saved ranks' sum / 4. Three sections on one run (the fixture).
prun=("${run[@]}" --pipeline-model-parallel-size 2 --grad-compression powersgd --powersgd-start-iter 1)
if section powersgd_reshard || section powersgd_reshard_pp1 || section powersgd_reshard_dp4; then
  out=$("${mpirun[@]}" -np 4 "${prun[@]}" --save-dir "$tmp/p" --save-interval 3 2>&1) || { echo "$out" | tail -5; fail "powersgd run"; }
fi
if section powersgd_reshard; then
  losses "$tmp/p" > "$tmp/p.losses"
  "$bin/ckpt" reshard --quiet --tensor-model-parallel-size 1 --pipeline-model-parallel-size 2 --data-parallel-size 2 \
    "$tmp/p/iter_0000003" "$tmp/q" > "$tmp/reshard_q.log" 2>&1 || { cat "$tmp/reshard_q.log"; fail "ckpt reshard powersgd"; }
  out=$("${mpirun[@]}" -np 4 "${prun[@]}" --save-dir "$tmp/q" --load "$tmp/q" 2>&1) || { echo "$out" | tail -5; fail "resume after powersgd reshard"; }
  losses "$tmp/q" > "$tmp/q.losses"
  if cmp -s "$tmp/p.losses" "$tmp/q.losses" && [ -s "$tmp/q.losses" ] && ! grep -q warning "$tmp/reshard_q.log" &&
     ! grep -q warning <<<"$out"; then
    echo "ok   powersgd at pp 2 x dp 2 through ckpt reshard to the same layout: losses of iterations 4-6 bit-identical"
  else
    fail "powersgd after ckpt reshard: $(tr '\n' ' ' < "$tmp/q.losses") vs $(tr '\n' ' ' < "$tmp/p.losses")"
  fi
fi
if section powersgd_reshard_pp1; then
  "$bin/ckpt" reshard --quiet --tensor-model-parallel-size 1 --pipeline-model-parallel-size 1 --data-parallel-size 2 \
    "$tmp/p/iter_0000003" "$tmp/r" > "$tmp/reshard_r.log" 2>&1 || { cat "$tmp/reshard_r.log"; fail "ckpt reshard powersgd to pp 1"; }
  q_same=1
  for m in h.0.attn.c_attn.w h.3.mlp.c_proj.w; do # a matrix of each stage of the pp 2 save
    saved=$(ls "$tmp"/p/iter_0000003/replica_tp00_pp0*_dp000.h5 | while read -r f; do
              h5ls "$f/powersgd_q/$m" > /dev/null 2>&1 && echo "$f"; done)
    h5diff -q "$saved" "$tmp/r/iter_0000003/replica_tp00_pp00_dp000.h5" "/powersgd_q/$m" > /dev/null 2>&1 || q_same=0
  done
  if ! grep -q "PowerSGD's Q" "$tmp/reshard_r.log" && [ "$q_same" = 1 ]; then
    echo "ok   powersgd resharded to pp 1: each matrix's Q carried from the stage that saved it, no warning"
  else
    cat "$tmp/reshard_r.log"; fail "powersgd reshard to pp 1: Q not carried (h5diff of powersgd_q: $q_same)"
  fi
fi
# to dp 4: every rank's residual is the two saved ranks' sum / 4 (what the average still owes)
if section powersgd_reshard_dp4; then
  "$bin/ckpt" reshard --quiet --tensor-model-parallel-size 1 --pipeline-model-parallel-size 2 --data-parallel-size 4 \
    "$tmp/p/iter_0000003" "$tmp/d4" > "$tmp/reshard_d4.log" 2>&1 || { cat "$tmp/reshard_d4.log"; fail "ckpt reshard powersgd to dp 4"; }
  if ! grep -q warning "$tmp/reshard_d4.log" &&
     $py "$src/tests/ckpt_check.py" residual-mean /error_feedback/h.0.attn.c_attn.w \
       "$tmp"/p/iter_0000003/replica_tp00_pp00_dp00[01].h5 -- "$tmp"/d4/iter_0000003/replica_tp00_pp00_dp00[0-3].h5; then
    echo "ok   powersgd resharded to dp 4: each rank's residual the saved ranks' sum / 4, no warning"
  else
    cat "$tmp/reshard_d4.log"; fail "powersgd reshard to dp 4: residuals not the saved ranks' mean"
  fi
fi

# inspect, merge, index, safetensors
if section inspect_merge_export; then
  "$bin/ckpt" inspect "$tmp/a" > "$tmp/inspect.txt" 2>&1 || { cat "$tmp/inspect.txt"; fail "ckpt inspect"; }
  n_ok=$(grep -c " ok$" "$tmp/inspect.txt")
  grep -q "layout: tp 2 x pp 2 x dp 1" "$tmp/inspect.txt" && [ "$n_ok" -eq 61 ] \
    && echo "ok   ckpt inspect: 9 files and 52 tensors verified" || fail "ckpt inspect: $n_ok lines ok (expected 61)"
  "$bin/ckpt" merge --quiet "$tmp/a" "$tmp/merged.h5" || fail "ckpt merge"
  (cd / && $py "$src/tests/ckpt_check.py" vds "$tmp/a/iter_0000006/index.h5" "$tmp/merged.h5") || fail "virtual-dataset index"
  "$bin/ckpt" export --quiet --format safetensors "$tmp/a" "$tmp/model.safetensors" || fail "ckpt export safetensors"
  $py "$src/tests/ckpt_check.py" safetensors "$tmp/model.safetensors" "$tmp/merged.h5" || fail "safetensors read back"
fi

# llm.c: import -> export bit for bit, then fine-tune the imported weights
if section llmc_round_trip; then
  $py "$src/tests/ckpt_check.py" write-llmc "$tmp/gpt2.bin" 257 2 4 32 64 > /dev/null
  "$bin/ckpt" import --format llmc "$tmp/gpt2.bin" "$tmp/imported" 2> "$tmp/import.log" || { cat "$tmp/import.log"; fail "ckpt import"; }
  "$bin/ckpt" export --quiet --format llmc "$tmp/imported" "$tmp/gpt2_again.bin" || fail "ckpt export llmc"
  cmp "$tmp/gpt2.bin" "$tmp/gpt2_again.bin" && echo "ok   llm.c file -> ckpt import -> ckpt export: bit for bit ($(stat -c %s "$tmp/gpt2.bin") bytes)" \
    || fail "llm.c round trip differs"
  out=$("$bin/engine_train" --config "$tmp/imported/config.json" --load "$tmp/imported" --save-dir "$tmp/imported" \
        --train-iters 2 --seq-length 32 --eval-iters 1 --sample-length 0 --threads 1 2>&1)
  grep -q "resumed from .* at iteration 0" <<<"$out" && grep -q "trained 2 iterations" <<<"$out" \
    && echo "ok   fine-tuned the imported llm.c weights" || { echo "$out" | tail -5; fail "fine-tuning imported weights"; }
fi

# a flipped byte: every rank refuses, naming the file
if section flipped_byte; then
  mkdir -p "$tmp/f" && echo iter_0000003 > "$tmp/f/latest" && cp -r "$tmp/a/iter_0000003" "$tmp/f/"
  f="$tmp/f/iter_0000003/model_tp01_pp01.h5"
  $py -c "import sys; p=sys.argv[1]; b=bytearray(open(p,'rb').read()); b[len(b)//2]^=0xFF; open(p,'wb').write(b)" "$f"
  out=$("${mpirun[@]}" -np 4 "${run[@]}" --tensor-model-parallel-size 2 --pipeline-model-parallel-size 2 \
        --save-dir "$tmp/e" --load "$tmp/f" 2>&1)
  rc=$?
  # refused on every rank (ended on its own: a hung rank would run into mpirun's --timeout)
  if [ $rc -ne 0 ] && grep -q "model_tp01_pp01.h5: SHA-256" <<<"$out" &&
     ! grep -q "time limit for job execution" <<<"$out"; then
    echo "ok   a flipped byte: refused (exit $rc) naming model_tp01_pp01.h5"
  else
    echo "$out" | tail -5; fail "a flipped byte was not refused cleanly (exit $rc)"
  fi
fi

echo "ckpt_cli: $failures failure(s)"
[ $failures -eq 0 ]
