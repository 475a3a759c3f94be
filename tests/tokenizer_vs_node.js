// tests/tokenizer_vs_node.js - compares a C-written GPT-2 token file with the ids of the
// independent JavaScript GPT-2 encoder of the gpt-3-encoder package (data/gpt2/index.js).
//
// usage: node tokenizer_vs_node.js ENCODER_DIR TEXT_FILE TOKEN_FILE [MAX_DOCS]
// TEXT_FILE is split into documents exactly as `tokenize --document-separator % --append-eod`
// does (lines equal to "%" separate documents; empty documents are dropped); each document is
// encoded on its own and followed by <|endoftext|> = 50256. Exits 1 at the first differing id,
// printing where it is and the text around it.
'use strict';
const fs = require('fs');
const path = require('path');

const [encoderDir, textFile, tokenFile, maxDocsArg] = process.argv.slice(2);
const enc = require(path.resolve(encoderDir, 'index.js'));
const EOD = 50256;
const maxDocs = maxDocsArg ? parseInt(maxDocsArg, 10) : Infinity;

function documents(text) {
  const docs = [];
  let start = 0, line = 0;
  while (line < text.length) {
    const nl = text.indexOf('\n', line);
    const end = nl < 0 ? text.length : nl, next = nl < 0 ? text.length : nl + 1;
    if (text.slice(line, end) === '%') {
      if (line > start) docs.push(text.slice(start, line));
      start = next;
    }
    line = next;
  }
  if (text.length > start) docs.push(text.slice(start));
  return docs;
}

function readTokenFile(file) {
  const buf = fs.readFileSync(file);
  const header = new Int32Array(buf.buffer, buf.byteOffset, 256);
  if (header[0] !== 20240520 || header[1] !== 1) throw new Error(`${file}: not a version-1 llm.c token file`);
  const ids = new Uint16Array(buf.buffer.slice(buf.byteOffset + 1024, buf.byteOffset + buf.length));
  if (ids.length !== header[2]) throw new Error(`${file}: header count ${header[2]} != ${ids.length} ids`);
  return ids;
}

const docs = documents(fs.readFileSync(textFile, 'utf8'));
const cIds = readTokenFile(tokenFile);
const nDocs = Math.min(docs.length, maxDocs);
let pos = 0;
for (let d = 0; d < nDocs; d++) {
  const want = enc.encode(docs[d]);
  want.push(EOD);
  for (let i = 0; i < want.length; i++, pos++) {
    if (pos >= cIds.length || cIds[pos] !== want[i]) {
      const lo = Math.max(0, i - 8), hi = Math.min(want.length, i + 8);
      const got = Array.from(cIds.slice(pos - (i - lo), pos - (i - lo) + (hi - lo)));
      console.error(`FAIL: document ${d}, token ${i} (file position ${pos}): C id ${cIds[pos]}, node id ${want[i]}`);
      console.error(`  document text: ${JSON.stringify(docs[d].slice(0, 400))}`);
      console.error(`  node ids [${lo}..${hi}): ${JSON.stringify(want.slice(lo, hi))} = ${JSON.stringify(want.slice(lo, hi).map(x => enc.decode([x])))}`);
      console.error(`  C    ids [${lo}..${hi}): ${JSON.stringify(got)} = ${JSON.stringify(got.map(x => enc.decode([x])))}`);
      process.exit(1);
    }
  }
}
if (nDocs === docs.length && pos !== cIds.length) {
  console.error(`FAIL: C file has ${cIds.length} ids, node produced ${pos}`);
  process.exit(1);
}
console.log(`tokenizer_vs_node: ${nDocs} documents, ${pos} ids identical to node's GPT-2 encoder`);
