#!/usr/bin/env bash
# tests/tokenize_cli.sh - the tokenize command line: help, document splitting (plain text with a
# separator, JSON lines), the train/validation split, --append-eod, --decode, and one-line errors
# with a non-zero exit status for bad input.
#
# Usage (CTest): bash tokenize_cli.sh BUILD_DIR SOURCE_DIR
set -uo pipefail
build="$1"
src="$2"
tok="$build/bin/tokenize"
tmp="$build/test-scratch/tokenize_cli"
rm -rf "$tmp"
mkdir -p "$tmp"
failures=0

fail() { echo "FAIL: $*" >&2; failures=$((failures + 1)); }

# expect_error STATUS_WANTED NEEDLE ARGS...: tokenize fails with that status and one stderr line
# holding NEEDLE.
expect_error() {
    local want="$1" needle="$2"; shift 2
    "$tok" "$@" >"$tmp/out" 2>"$tmp/err"
    local status=$?
    [[ $status -eq $want ]] || fail "tokenize $*: exit status $status, expected $want"
    grep -qF -- "$needle" "$tmp/err" || fail "tokenize $*: stderr lacks '$needle': $(cat "$tmp/err")"
    [[ $(wc -l <"$tmp/err") -eq 1 ]] || fail "tokenize $*: expected one error line, got: $(cat "$tmp/err")"
}

# decoded FILE TYPE: the file decoded as text.
decoded() { "$tok" --decode "$1" --tokenizer-type "$2" "${@:3}"; }
count() { od -An -t d4 -j 8 -N 4 "$1" | tr -d ' '; }

# --- help lists every flag with its default ---
"$tok" -h >"$tmp/help" || fail "-h exits non-zero"
for flag in --input --output-prefix --tokenizer-type --vocab-file --merge-file --append-eod \
            --document-separator --json-keys --val-fraction --decode --help; do
    grep -qF -- "$flag" "$tmp/help" || fail "-h does not list $flag"
done
grep -qF "default: 0.05" "$tmp/help" || fail "-h does not give --val-fraction's default"
grep -qF "default: text" "$tmp/help" || fail "-h does not give --json-keys's default"

# --- plain text with a separator: documents, EOD, split ---
printf 'a\n%%\nbb\n%%\n%%\n\n%%\nccc\n%%\n' >"$tmp/in.txt" # documents: "a\n" "bb\n" "\n" "ccc\n"
"$tok" --input "$tmp/in.txt" --output-prefix "$tmp/p" --tokenizer-type ByteLevel \
    --document-separator % --append-eod --val-fraction 0.25 >"$tmp/log" || fail "plain text run failed"
grep -qF "4 documents (3 train, 1 val)" "$tmp/log" || fail "document count: $(cat "$tmp/log")"
[[ "$(count "$tmp/p_train.bin")" == 9 ]] || fail "train tokens $(count "$tmp/p_train.bin"), expected 9"
[[ "$(count "$tmp/p_val.bin")" == 5 ]] || fail "val tokens $(count "$tmp/p_val.bin"), expected 5"
[[ "$(decoded "$tmp/p_train.bin" ByteLevel)" == $'a\n<|endoftext|>bb\n<|endoftext|>\n<|endoftext|>' ]] ||
    fail "train text: $(decoded "$tmp/p_train.bin" ByteLevel)"
[[ "$(decoded "$tmp/p_val.bin" ByteLevel)" == $'ccc\n<|endoftext|>' ]] || fail "val text"
# without --append-eod there is no EOD; --val-fraction 0 writes only the train file
"$tok" --input "$tmp/in.txt" --output-prefix "$tmp/q" --tokenizer-type ByteLevel \
    --document-separator % --val-fraction 0 >/dev/null || fail "run without EOD failed"
[[ "$(count "$tmp/q_train.bin")" == 10 ]] || fail "no-EOD tokens $(count "$tmp/q_train.bin"), expected 10"
[[ ! -e "$tmp/q_val.bin" ]] || fail "--val-fraction 0 wrote a val file"

# --- GPT-2 on the same documents (when the BPE files are there; tokenizer tests demand them) ---
gpt2="$src/data/gpt2"
if [[ -f "$gpt2/encoder.json" ]]; then
    bpe=(--tokenizer-type GPT2BPETokenizer --vocab-file "$gpt2/encoder.json" --merge-file "$gpt2/vocab.bpe")
    printf 'Hello world\n%%\nsecond doc\n' >"$tmp/g.txt"
    "$tok" --input "$tmp/g.txt" --output-prefix "$tmp/g" "${bpe[@]}" --document-separator % \
        --append-eod --val-fraction 0.5 >/dev/null || fail "GPT-2 run failed"
    # "Hello world\n" = 15496 995 198, then EOD 50256
    [[ "$(od -An -t u2 -j 1024 "$tmp/g_train.bin" | tr -s ' ' | sed 's/^ //')" == "15496 995 198 50256" ]] ||
        fail "GPT-2 ids: $(od -An -t u2 -j 1024 "$tmp/g_train.bin")"
    [[ "$(decoded "$tmp/g_val.bin" "${bpe[@]:1}")" == $'second doc\n<|endoftext|>' ]] ||
        fail "GPT-2 val text: $(decoded "$tmp/g_val.bin" "${bpe[@]:1}")"
    # a GPT-2 file read with the byte-level vocabulary has ids >= 257
    expect_error 1 "not below the model's vocab_size 257" --decode "$tmp/g_train.bin" --tokenizer-type ByteLevel
fi

# --- JSON lines ---
printf '{"text": "hi there", "n": 1}\n\n{"text": "caf\\u00e9", "title": "T"}\n{"text": "x"}\n' >"$tmp/in.jsonl"
"$tok" --input "$tmp/in.jsonl" --output-prefix "$tmp/j" --tokenizer-type ByteLevel --append-eod \
    --val-fraction 0.3 >"$tmp/log" || fail "JSON run failed"
grep -qF "3 documents (2 train, 1 val)" "$tmp/log" || fail "JSON document count: $(cat "$tmp/log")"
[[ "$(decoded "$tmp/j_train.bin" ByteLevel)" == "hi there<|endoftext|>café<|endoftext|>" ]] ||
    fail "JSON train text: $(decoded "$tmp/j_train.bin" ByteLevel)"
expect_error 1 'line 1: key "title" is missing' --input "$tmp/in.jsonl" --output-prefix "$tmp/j" \
    --tokenizer-type ByteLevel --json-keys text,title
expect_error 1 'line 1: key "n" is not a string' --input "$tmp/in.jsonl" --output-prefix "$tmp/j" \
    --tokenizer-type ByteLevel --json-keys n
printf '{"text": "ok"}\n{"text": oops}\n' >"$tmp/bad.json"
expect_error 1 "line 2: expected one JSON object" --input "$tmp/bad.json" --output-prefix "$tmp/b" \
    --tokenizer-type ByteLevel

# --- errors: one line, non-zero status, never a crash ---
expect_error 1 "cannot open" --input "$tmp/missing.txt" --output-prefix "$tmp/m" --tokenizer-type ByteLevel
expect_error 1 "unknown --tokenizer-type 'Word'" --input "$tmp/in.txt" --output-prefix "$tmp/m" --tokenizer-type Word
expect_error 1 "vocab file: cannot open $tmp/none.json: No such file or directory" --input "$tmp/in.txt" --output-prefix "$tmp/m" \
    --tokenizer-type GPT2BPETokenizer --vocab-file "$tmp/none.json" --merge-file "$tmp/none.bpe"
printf '{"a": ' >"$tmp/garbled.json"
expect_error 1 "not valid JSON" --input "$tmp/in.txt" --output-prefix "$tmp/m" \
    --tokenizer-type GPT2BPETokenizer --vocab-file "$tmp/garbled.json" --merge-file "$tmp/none.bpe"
expect_error 1 "needs --vocab-file and --merge-file" --input "$tmp/in.txt" --output-prefix "$tmp/m" \
    --tokenizer-type GPT2BPETokenizer
expect_error 2 "--val-fraction '1.5'" --input "$tmp/in.txt" --output-prefix "$tmp/m" --tokenizer-type ByteLevel --val-fraction 1.5
expect_error 2 "--val-fraction '-0.1'" --input "$tmp/in.txt" --output-prefix "$tmp/m" --tokenizer-type ByteLevel --val-fraction -0.1
expect_error 2 "--val-fraction 'x'" --input "$tmp/in.txt" --output-prefix "$tmp/m" --tokenizer-type ByteLevel --val-fraction x
expect_error 2 "--tokenizer-type is required" --input "$tmp/in.txt" --output-prefix "$tmp/m"
expect_error 2 "--input and --output-prefix are required" --tokenizer-type ByteLevel
expect_error 2 "unknown or incomplete option '--frobnicate'" --frobnicate
expect_error 2 "unexpected argument 'stray'" --tokenizer-type ByteLevel stray
expect_error 1 "too few to split" --input "$tmp/g.txt" --output-prefix "$tmp/m" --tokenizer-type ByteLevel
: >"$tmp/empty.txt"
expect_error 1 "no documents" --input "$tmp/empty.txt" --output-prefix "$tmp/m" --tokenizer-type ByteLevel
expect_error 1 "cannot create temporary file" --input "$tmp/in.txt" --output-prefix "$tmp/no/such/dir/p" \
    --tokenizer-type ByteLevel --val-fraction 0
expect_error 1 "shorter than the 1024-byte header" --decode "$tmp/in.txt" --tokenizer-type ByteLevel
head -c 2000 /dev/zero >"$tmp/zeros.bin"
expect_error 1 "header magic is 0" --decode "$tmp/zeros.bin" --tokenizer-type ByteLevel

if [[ $failures -ne 0 ]]; then
    echo "tokenize_cli: $failures check(s) failed" >&2
    exit 1
fi
rm -rf "$tmp"
echo "tokenize_cli: OK"
