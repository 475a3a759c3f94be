#!/usr/bin/env bash
# tests/large_vocab_cli.sh - a vocabulary above 65,536 tokens, from text to a trained model's sample.
#
# Llama 3's 128,256 tokens do not fit the uint16 ids of GPT-2's token files. This builds a GPT-2-style
# BPE vocabulary of 70,000 tokens whose merges produce ids above 65,535 (the 256 byte tokens at
# 0..255, filler tokens, then the merge results and <|endoftext|> at the top), and checks:
#  1. tokenize writes llm.c's uint32 file (magic 20240801, version 7, 4 bytes an id), ids above
#     65,535 are in it, and --decode gives the text back byte for byte;
#  2. engine_train takes a config with vocab_size 70000, trains on that file (the loss falls and the
#     validation loss is finite) and samples text through the same vocabulary;
#  3. the partitioner plans that config and Llama 3's vocabulary size.
#
# Usage (CTest): bash large_vocab_cli.sh BUILD_DIR SOURCE_DIR
set -u
build=$1
src=$2
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
failures=0
fail() { echo "FAIL $1"; [ -n "${2:-}" ] && tail -5 "$2"; failures=$((failures + 1)); }
cd "$src" || exit 1
[ -f data/fortunes.txt ] || { echo "FAIL: data/fortunes.txt missing (tools/prepare_fortunes.sh)"; exit 1; }
V=70000

# ---- a 70,000-token byte-level BPE vocabulary (GPT-2's byte-to-unicode alphabet) ----
python3 - "$tmp" "$V" <<'EOF' || { echo "FAIL: writing the vocabulary"; exit 1; }
import json, sys
out, V = sys.argv[1], int(sys.argv[2])
bs = list(range(ord("!"), ord("~") + 1)) + list(range(ord("¡"), ord("¬") + 1)) + list(range(ord("®"), ord("ÿ") + 1))
cs, n = bs[:], 0
for b in range(256):
    if b not in bs:
        bs.append(b); cs.append(256 + n); n += 1
byte = {b: chr(c) for b, c in zip(bs, cs)}
merges = [("Ġ", "t"), ("h", "e"), ("Ġt", "he"), ("i", "n"), ("a", "n"), ("e", "r"), ("o", "u"), ("Ġ", "a")]
results = [a + b for a, b in merges]
vocab = {byte[b]: b for b in range(256)}
top = results + ["<|endoftext|>"]
alphabet = [byte[b] for b in range(256)]
fillers, taken = [], set(vocab) | set(top)
for a in alphabet:
    for b in alphabet:
        for c in [""] + alphabet[:2]:
            k = a + b + c
            if k not in taken:
                fillers.append(k); taken.add(k)
fillers = fillers[: V - 256 - len(top)]
for k in fillers:
    vocab[k] = len(vocab)
for k in top:
    vocab[k] = len(vocab)
assert len(vocab) == V and vocab["<|endoftext|>"] == V - 1 and min(vocab[r] for r in results) > 65535
json.dump(vocab, open(out + "/big.json", "w"))
open(out + "/big.bpe", "w").write("#version: 0.2\n" + "".join(f"{a} {b}\n" for a, b in merges))
EOF
bpe=(--tokenizer-type GPT2BPETokenizer --vocab-file "$tmp/big.json" --merge-file "$tmp/big.bpe")

# ---- 1. tokenize writes uint32 ids ----
head -c 60000 data/fortunes.txt > "$tmp/text.txt"
build_bin="$build/bin"
"$build_bin/tokenize" --input "$tmp/text.txt" --output-prefix "$tmp/big" "${bpe[@]}" --document-separator % \
  --append-eod --val-fraction 0.1 > "$tmp/tok.log" 2>&1 || fail "tokenize" "$tmp/tok.log"
header() { od -An -t d4 -N 12 "$1" | tr -s ' ' | sed 's/^ //'; }
read -r magic version count <<< "$(header "$tmp/big_train.bin")"
[ "$magic $version" = "20240801 7" ] || fail "train file header: magic $magic version $version, expected 20240801 7"
size=$(stat -c %s "$tmp/big_train.bin")
[ "$size" = $((1024 + 4 * count)) ] || fail "train file: $size bytes for $count uint32 ids"
high=$(od -An -t u4 -j 1024 -v "$tmp/big_train.bin" | tr -s ' ' '\n' | awk '$1 > 65535' | wc -l)
[ "$high" -gt 1000 ] || fail "train file: only $high ids above 65535"
[ "$(od -An -t u4 -j 1024 -v "$tmp/big_train.bin" | tr -s ' ' '\n' | sort -n | tail -1)" = $((V - 1)) ] ||
  fail "train file: <|endoftext|> ($((V - 1))) missing"
# the text comes back byte for byte (documents joined by <|endoftext|>)
"$build_bin/tokenize" --decode "$tmp/big_train.bin" "${bpe[@]:2}" --tokenizer-type GPT2BPETokenizer > "$tmp/decoded.txt" ||
  fail "decode"
python3 - "$tmp/text.txt" "$tmp/decoded.txt" "$tmp/big_val.bin" <<'EOF' || fail "decoded text differs from the input's documents"
import sys
text, dec = open(sys.argv[1], "rb").read(), open(sys.argv[2], "rb").read()
docs = [d for d in dec.split(b"<|endoftext|>") if d]
# the input's documents are separated by lines "%"; the train file holds all but the last 10 %
want = [d for d in text.replace(b"\n%\n", b"\n\x00").split(b"\x00")]
bad = next((i for i, (a, b) in enumerate(zip(docs, want)) if a != b), None)
assert bad is None and len(docs) > 10, f"{len(docs)} documents decoded; document {bad} differs"
EOF

# ---- 2. engine_train: vocab_size 70000 ----
printf '{"n_layer": 2, "n_head": 2, "n_embd": 32, "vocab_size": %d, "n_positions": 32}' "$V" > "$tmp/big_model.json"
"$build_bin/engine_train" --config "$tmp/big_model.json" --train-data "$tmp/big_train.bin" --val-data "$tmp/big_val.bin" \
  --micro-batch-size 4 --seq-length 32 --train-iters 60 --lr 1e-2 --lr-warmup-iters 3 --eval-interval 60 --eval-iters 2 \
  --threads 1 --save-dir "$tmp/run" --sample-length 12 "${bpe[@]}" > "$tmp/train.log" 2>&1 || fail "engine_train" "$tmp/train.log"
losses=$(grep '"train"' "$tmp/run/metrics.jsonl" | grep -oE '"loss":[-0-9.e+]+' | cut -d: -f2)
first=$(echo "$losses" | head -1)
last=$(echo "$losses" | tail -1)
# from ln(70000) = 11.16 at the start to 3.5 after 60 iterations here (byte-level text's
# statistics); 6 leaves room for any machine's summation order
awk -v f="$first" -v l="$last" 'BEGIN { exit !(f > 10.5 && f < 11.8 && l < 6) }' ||
  fail "loss did not fall from ln(70000): first $first, last $last" "$tmp/train.log"
grep '"eval"' "$tmp/run/metrics.jsonl" | grep -qE '"val_loss":[0-9]' || fail "no finite validation loss" "$tmp/train.log"
grep -q "^sample (top-k 40" "$tmp/train.log" || fail "no sample printed" "$tmp/train.log"

# ---- 3. the partitioner plans vocabularies above 65,536 ----
"$build_bin/partitioner" --config "$tmp/big_model.json" --micro-batch-size 4 --seq-length 32 > "$tmp/part.log" 2>&1 ||
  fail "partitioner, vocab_size 70000" "$tmp/part.log"
printf '{"n_layer": 16, "n_head": 32, "n_embd": 2048, "vocab_size": 128256, "n_positions": 2048}' > "$tmp/vocab128k.json"
"$build_bin/partitioner" --config "$tmp/vocab128k.json" --hardware h100-sxm --num-gpus 8 --tensor-model-parallel-size 2 \
  --micro-batch-size 1 --seq-length 2048 --json > "$tmp/part128k.json" 2>&1 || fail "partitioner, vocab_size 128256" "$tmp/part128k.json"

if [ "$failures" -ne 0 ]; then
  echo "large_vocab_cli: $failures check(s) failed"
  exit 1
fi
echo "large_vocab_cli: OK"
