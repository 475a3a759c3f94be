#!/usr/bin/env bash
# tests/full_disk.sh BUILD_DIR SOURCE_DIR - a full disk loses nothing and says why.
#
# On a small tmpfs (as root where mount(2) is allowed; elsewhere a file-size limit, RLIMIT_FSIZE, stands
# in for it: writes then fail with EFBIG instead of ENOSPC): a run resumed from its last good step
# saves once more, synchronously and asynchronously, onto a disk too small for the new step; `ckpt
# reshard` and `ckpt export` write onto a full disk. Each must fail naming the cause ("No space left on
# device" or "File too large") and the file, leave the last good step and `latest` bit for bit as they
# were (SHA-256 of every file), and leave no temporary step or output behind.
set -u
build=$1
src=$(cd "$2" && pwd)
bin="$build/bin"
tmp=$(mktemp -d)
fs="$tmp/fs"
mounted=0
cleanup() { [ $mounted -eq 1 ] && umount "$fs"; rm -rf "$tmp"; }
trap cleanup EXIT
failures=0
fail() { echo "FAIL: $*"; failures=$((failures + 1)); }
cd "$src"
source "$src/tests/lib/micro_gpt.sh"
train=("${micro_train[@]}" --save-interval 1 --lr-decay-iters 10)

# the last good step: iteration 1 of a run on the ordinary disk
"${train[@]}" --train-iters 1 --save-dir "$tmp/good" > "$tmp/good.log" 2>&1 || { cat "$tmp/good.log"; exit 1; }
step_bytes=$(du -sb "$tmp/good/iter_0000001" | cut -f1)

# limited CMD...: runs CMD on the small disk (or under the file-size limit), its output in $tmp/out.log
mkdir -p "$fs"
if mount -t tmpfs -o size=$((step_bytes * 3 / 2)) tmpfs "$fs" 2> /dev/null; then
  mounted=1
  cause="No space left on device"
  limited() { "$@" > "$tmp/out.log" 2>&1; }
  fill() { head -c "$(($(df -B1 --output=avail "$fs" | tail -1) - 8192))" /dev/zero > "$fs/fill" 2> /dev/null; true; }
  echo "on a tmpfs of $((step_bytes * 3 / 2)) bytes (a step takes $step_bytes)"
else
  cause="File too large"
  limited() { (trap '' XFSZ; ulimit -f 16; exec "$@") > "$tmp/out.log" 2>&1; }
  fill() { true; }
  echo "mount(2) refused here: RLIMIT_FSIZE of 16 KiB instead (every output file is larger)"
fi

sums() { (cd "$1" && find . -type f -exec sha256sum {} + | sort -k 2); }

# a save onto the small disk: resumed from the good step copied there, one more iteration
for mode in sync async; do
  if [ $mounted -eq 0 ]; then # Open MPI's start-up writes files larger than any useful limit
    echo "skipped: the $mode save onto a full disk needs the tmpfs (engine_train cannot start under RLIMIT_FSIZE)"
    continue
  fi
  rm -rf "${fs:?}"/*
  cp -r "$tmp/good" "$fs/run"
  sums "$fs/run" > "$tmp/before"
  extra=()
  [ $mode = async ] && extra=(--async-save)
  limited "${train[@]}" --train-iters 3 --load "$fs/run" --save-dir "$fs/run" "${extra[@]}"
  rc=$?
  [ $rc -ne 0 ] || fail "$mode save on a full disk exited 0"
  grep -q "$cause" "$tmp/out.log" || { fail "$mode save: the message lacks '$cause'"; grep error "$tmp/out.log"; }
  grep -q "iter_0000002.tmp was removed" "$tmp/out.log" || fail "$mode save: the message does not say the partial step was removed"
  [ "$(cat "$fs/run/latest")" = iter_0000001 ] || fail "$mode save: latest moved: $(cat "$fs/run/latest")"
  [ -e "$fs/run/iter_0000002.tmp" ] && fail "$mode save: iter_0000002.tmp left behind"
  [ -e "$fs/run/iter_0000002" ] && fail "$mode save: a partial iter_0000002 published"
  sums "$fs/run" | grep -v metrics.jsonl > "$tmp/after"
  grep -v metrics.jsonl "$tmp/before" | cmp -s - "$tmp/after" || fail "$mode save: the last good step changed"
  "$bin/ckpt" inspect "$fs/run" > /dev/null 2>&1 || fail "$mode save: ckpt inspect of the last good step failed"
  echo "ok   $mode save onto a full disk: '$(grep -o "error: .*" "$tmp/out.log" | head -1 | cut -c1-160)...'"
done

# ckpt reshard and export onto a full disk: nothing left there, the source unchanged
sums "$tmp/good" > "$tmp/before"
for cmd in "reshard --quiet --tensor-model-parallel-size 1 --pipeline-model-parallel-size 1 --data-parallel-size 1" \
           "export --quiet --format safetensors" "export --quiet --format hf" "merge --quiet"; do
  rm -rf "${fs:?}"/*
  fill
  # shellcheck disable=SC2086
  limited "$bin/ckpt" $cmd "$tmp/good" "$fs/out"
  rc=$?
  [ $rc -ne 0 ] || fail "ckpt $cmd onto a full disk exited 0"
  grep -q "$cause" "$tmp/out.log" || { fail "ckpt $cmd: the message lacks '$cause'"; cat "$tmp/out.log"; }
  left=$(ls -A "$fs" | grep -v '^fill$')
  [ -z "$left" ] || fail "ckpt $cmd: left behind on the full disk: $left"
  sums "$tmp/good" | cmp -s "$tmp/before" - || fail "ckpt $cmd: the source changed"
  echo "ok   ckpt ${cmd%% *} onto a full disk: '$(grep -o "error: .*" "$tmp/out.log" | head -1 | cut -c1-160)...'"
done

if [ $failures -ne 0 ]; then
  echo "$failures failed"
  exit 1
fi
echo "all passed"
