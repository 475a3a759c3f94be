#!/usr/bin/env bash
# tests/tokenizer_vs_node.sh - the C GPT-2 tokenizer against an independent implementation, on
# real text: the whole fortunes corpus (data/fortunes.txt, ~2.6 MB, ~716k tokens) is encoded by
# `tokenize` and by the JavaScript encoder of the gpt-3-encoder package (data/gpt2/index.js, run by
# node); the first differing id fails the test with its context. Then decode(encode(x)) == x is
# checked byte for byte on the whole corpus with both tokenizers.
#
# Usage (CTest): bash tokenizer_vs_node.sh BUILD_DIR SOURCE_DIR
# Needs tools/fetch_gpt2_bpe.sh and tools/prepare_fortunes.sh BUILD_DIR/bin to have run.
set -euo pipefail
build="$1"
src="$2"
tokenize="$build/bin/tokenize"
gpt2="$src/data/gpt2"
text="$src/data/fortunes.txt"

fail() { echo "tokenizer_vs_node: FAIL: $*" >&2; exit 1; }
[[ -x "$tokenize" ]] || fail "$tokenize is missing (build first)"
[[ -f "$gpt2/encoder.json" && -f "$gpt2/vocab.bpe" && -f "$gpt2/index.js" ]] ||
    fail "GPT-2 BPE files missing in $gpt2: run tools/fetch_gpt2_bpe.sh"
[[ -f "$text" ]] || fail "$text is missing: run tools/prepare_fortunes.sh $build/bin"
command -v node >/dev/null || fail "node not found (Debian: apt-get install nodejs)"

tmp="$build/test-scratch/tokenizer_vs_node"
rm -rf "$tmp"
mkdir -p "$tmp"
bpe=(--tokenizer-type GPT2BPETokenizer --vocab-file "$gpt2/encoder.json" --merge-file "$gpt2/vocab.bpe")

# 1. ids: one document per fortune, each followed by <|endoftext|>, as tools/prepare_fortunes.sh.
"$tokenize" --input "$text" --output-prefix "$tmp/docs" "${bpe[@]}" --document-separator % \
    --append-eod --val-fraction 0 >/dev/null
node "$src/tests/tokenizer_vs_node.js" "$gpt2" "$text" "$tmp/docs_train.bin" ||
    fail "C and node GPT-2 ids differ (see above)"

# 2. round trips of the whole corpus as one document, GPT-2 and byte-level.
for type in GPT2BPETokenizer ByteLevel; do
    flags=(--tokenizer-type "$type")
    [[ "$type" == ByteLevel ]] || flags=("${bpe[@]}")
    "$tokenize" --input "$text" --output-prefix "$tmp/$type" "${flags[@]}" --val-fraction 0 >/dev/null
    "$tokenize" --decode "$tmp/${type}_train.bin" "${flags[@]}" >"$tmp/$type.txt"
    if ! cmp "$text" "$tmp/$type.txt"; then
        fail "$type: decode(encode(fortunes.txt)) differs from fortunes.txt"
    fi
    echo "tokenizer_vs_node: $type: decode(encode(x)) == x on $(wc -c <"$text") bytes"
done
rm -rf "$tmp"
echo "tokenizer_vs_node: OK"
