#!/usr/bin/env python3
"""docs/data/dp-methods/summarize.py - the table of docs/grad-compression.md from the runs'
metrics.jsonl files beside it (<name>.jsonl, engine_train's records): dp_bytes per step (rank 0's
wire bytes in its data-parallel group, counted by the comm layer; the mean over the compressed
steps, and over all steps), its ratio to the uncompressed run's, and the final validation loss
against the uncompressed run's. Writes the Markdown table to stdout and val.dat (tokens, one
column of validation loss per run) for plot.sh."""
import json, os, sys

here = os.path.dirname(os.path.abspath(__file__))
names = ["none", "1bit", "1bit-block64", "qsgd", "topk", "powersgd", "powersgd-rank16", "1bit-block32"]
tokens_per_iter = 16 * 128
runs = {}
for n in names:
    path = os.path.join(here, n + ".jsonl")
    if not os.path.exists(path):
        continue
    train, val = [], {}
    for line in open(path):
        o = json.loads(line)
        if o.get("kind") == "train":
            train.append(o)
        elif o.get("kind") == "eval":
            val[o["iter"]] = o["val_loss"]
    runs[n] = (train, val)
if "none" not in runs:
    sys.exit("summarize: none.jsonl missing")
base_bytes = sum(t["dp_bytes"] for t in runs["none"][0]) / len(runs["none"][0])
base_val = runs["none"][1][max(runs["none"][1])]
print("| run | iterations | dp_bytes per step (mean, all steps) | last step | vs none | final val loss | vs none |")
print("|---|---|---|---|---|---|---|")
for n, (train, val) in runs.items():
    mean = sum(t["dp_bytes"] for t in train) / len(train)
    last = train[-1]["dp_bytes"]
    v = val[max(val)] if val else float("nan")
    print(f"| {n} | {len(train)} | {mean:,.0f} | {last:,.0f} | {base_bytes / mean:.1f}x fewer | {v:.4f} | "
          f"{100 * (v / base_val - 1):+.1f}% |")
iters = sorted(set(i for _, val in runs.values() for i in val))
with open(os.path.join(here, "val.dat"), "w") as f:
    f.write("# tokens " + " ".join(runs) + "\n")
    for i in iters:
        f.write(f"{i * tokens_per_iter} " + " ".join(str(runs[n][1].get(i, "NaN")) for n in runs) + "\n")
