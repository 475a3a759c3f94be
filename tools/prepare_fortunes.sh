#!/usr/bin/env bash
# tools/prepare_fortunes.sh - the real-text corpus of the tests and small training runs.
#
# Concatenates Debian's fortune files (package `fortunes`, /usr/share/games/fortunes; entries end
# with a line holding "%") into data/fortunes.txt, in sorted file-name order so the corpus is the
# same on every machine, then tokenizes it with both tokenizers, one document per fortune, each
# followed by the end-of-document token:
#   data/fortunes_byte_{train,val}.bin   ByteLevel
#   data/fortunes_gpt2_{train,val}.bin   GPT2BPETokenizer (fetches data/gpt2 first if needed)
# Steps whose outputs are newer than their inputs (text, BPE files, the tokenize binary) are
# skipped. Prints the token count of every file.
#
# Usage: tools/prepare_fortunes.sh BIN_DIR     (BIN_DIR holds the built `tokenize`, e.g. build/bin)
set -euo pipefail

die() { echo "prepare_fortunes: error: $*" >&2; exit 1; }

[[ $# -eq 1 ]] || die "usage: tools/prepare_fortunes.sh BIN_DIR (the directory holding tokenize)"
bin_dir="$(cd "$1" 2>/dev/null && pwd)" || die "BIN_DIR '$1' is not a directory"
tokenize="$bin_dir/tokenize"
[[ -x "$tokenize" ]] || die "$tokenize not found: build first (cmake --build build --target tokenize)"
src_dir="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
fortune_dir="${FORTUNE_DIR:-/usr/share/games/fortunes}"
data="$src_dir/data"
text="$data/fortunes.txt"
mkdir -p "$data"

# The fortune text files: regular files, not the .dat indexes nor the .u8 links, and text only.
sources=()
while IFS= read -r f; do
    case "$f" in *.dat|*.u8) continue ;; esac
    [[ -f "$f" && ! -L "$f" ]] || continue
    grep -Iq . "$f" || continue
    sources+=("$f")
done < <(find "$fortune_dir" -maxdepth 1 -type f 2>/dev/null | LC_ALL=C sort)
[[ ${#sources[@]} -gt 0 ]] || die "no fortune files in $fortune_dir (Debian: apt-get install fortunes)"

# True when output $1 exists and is newer than every later argument.
up_to_date() {
    local out="$1"; shift
    [[ -f "$out" ]] || return 1
    local in
    for in in "$@"; do [[ "$out" -nt "$in" ]] || return 1; done
}

if up_to_date "$text" "${sources[@]}"; then
    echo "prepare_fortunes: $text is up to date"
else
    tmp="$text.tmp.$$"
    : >"$tmp"
    for f in "${sources[@]}"; do
        cat "$f" >>"$tmp"
        # Every file's last fortune must end with a "%" line, or it would run into the next file.
        last="$(tail -n 1 "$f")"
        if [[ "$last" != "%" ]]; then
            [[ -z "$(tail -c 1 "$f")" ]] || printf '\n' >>"$tmp"
            printf '%%\n' >>"$tmp"
        fi
    done
    mv -f "$tmp" "$text"
    echo "prepare_fortunes: wrote $text ($(wc -c <"$text") bytes from ${#sources[@]} files)"
fi

bash "$src_dir/tools/fetch_gpt2_bpe.sh"
vocab="$data/gpt2/encoder.json"
merges="$data/gpt2/vocab.bpe"

# tokenize NAME TYPE [extra flags...]
run_tokenize() {
    local name="$1" type="$2"; shift 2
    local prefix="$data/fortunes_$name"
    if up_to_date "${prefix}_train.bin" "$text" "$tokenize" "$@" &&
       up_to_date "${prefix}_val.bin" "$text" "$tokenize" "$@"; then
        echo "prepare_fortunes: ${prefix}_{train,val}.bin are up to date"
        return
    fi
    local flags=()
    if [[ $# -gt 0 ]]; then flags=(--vocab-file "$1" --merge-file "$2"); fi
    "$tokenize" --input "$text" --output-prefix "$prefix" --tokenizer-type "$type" \
        --document-separator % --append-eod --val-fraction 0.05 "${flags[@]}"
}
run_tokenize byte ByteLevel
run_tokenize gpt2 GPT2BPETokenizer "$vocab" "$merges"

count() { od -An -t d4 -j 8 -N 4 "$1" | tr -d ' '; }
echo "prepare_fortunes: token counts"
for f in "$data"/fortunes_{byte,gpt2}_{train,val}.bin; do
    printf '  %-28s %9s tokens\n' "$(basename "$f")" "$(count "$f")"
done
