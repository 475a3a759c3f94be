"""tests/hf_files.py - Hugging Face GPT-2 model directories for tests/hf_interop.sh, written from the
published formats with numpy and torch only (no transformers, no safetensors package here).

  write DIR LLMC V L NH C T DTYPE SHARD_BYTES PREFIX
      DIR: config.json (GPT2Config as transformers writes it, dropout 0.1 as in the gpt2 hub config)
      and the weights of a random GPT-2 in DTYPE (F32, BF16, F16) under transformers' names
      (PREFIX 1: "transformer.h.0...", as save_pretrained of GPT2LMHeadModel; 0: "h.0...", as the
      hub's gpt2 files), one model.safetensors or, above SHARD_BYTES, shards and an index split as
      huggingface_hub does; LLMC: the same weights (rounded to DTYPE) as an llm.c model file, written
      independently, so `ckpt import --format hf` then `ckpt export --format llmc` must equal it.
  corrupt KIND SRC DST
      a copy of safetensors file SRC with one defect KIND (see below), for the refusal tests.

safetensors (huggingface/safetensors README, and its serialize): u64 header length, the header as
compact JSON ("__metadata__" first, tensors sorted by dtype, wider first, then name), padded with
spaces to a multiple of 8, then the data in that order."""
import json
import os
import struct
import sys

import numpy as np

RANK = {"F16": 0, "BF16": 1, "F32": 2}  # the library's dtype order (descending sorts wider first)


def raw(a, dtype):
    a = np.ascontiguousarray(a, dtype="<f4")
    if dtype == "F32":
        return a.tobytes(), a
    if dtype == "F16":
        h = a.astype("<f2")
        return h.tobytes(), h.astype("<f4")
    import torch  # only here: importing it takes seconds

    b = torch.from_numpy(a.copy()).to(torch.bfloat16)
    return b.view(torch.int16).numpy().tobytes(), b.to(torch.float32).numpy()


def safetensors_bytes(tensors):
    """tensors: name -> (dtype, shape, bytes)."""
    order = sorted(tensors, key=lambda k: (-RANK[tensors[k][0]], k))
    header, off = {"__metadata__": {"format": "pt"}}, 0
    for k in order:
        dt, shape, data = tensors[k]
        header[k] = {"dtype": dt, "shape": list(shape), "data_offsets": [off, off + len(data)]}
        off += len(data)
    js = json.dumps(header, separators=(",", ":")).encode()
    js += b" " * ((8 - len(js) % 8) % 8)
    return struct.pack("<Q", len(js)) + js + b"".join(tensors[k][2] for k in order)


def split_shards(names, sizes, max_bytes):
    """huggingface_hub's split_state_dict_into_shards: fill in order; oversized tensors alone."""
    shards, cur, cur_size = [], [], 0
    for k in names:
        if sizes[k] > max_bytes:
            shards.append([k])
            continue
        if cur_size + sizes[k] > max_bytes:
            shards.append(cur)
            cur, cur_size = [], 0
        cur.append(k)
        cur_size += sizes[k]
    if cur:
        shards.append(cur)
    return shards


def write(d, llmc, V, L, NH, C, T, dtype, shard_bytes, prefix):
    V, L, NH, C, T, shard_bytes = int(V), int(L), int(NH), int(C), int(T), int(shard_bytes)
    pre = "transformer." if prefix == "1" else ""
    rng = np.random.default_rng(11)
    hf = {}  # transformers' name -> float32 array in its (Conv1D: (in, out)) layout
    hf["wte.weight"] = rng.normal(0, 0.02, (V, C))
    hf["wpe.weight"] = rng.normal(0, 0.02, (T, C))
    block = [("ln_1.weight", (C,)), ("ln_1.bias", (C,)), ("attn.c_attn.weight", (C, 3 * C)),
             ("attn.c_attn.bias", (3 * C,)), ("attn.c_proj.weight", (C, C)), ("attn.c_proj.bias", (C,)),
             ("ln_2.weight", (C,)), ("ln_2.bias", (C,)), ("mlp.c_fc.weight", (C, 4 * C)), ("mlp.c_fc.bias", (4 * C,)),
             ("mlp.c_proj.weight", (4 * C, C)), ("mlp.c_proj.bias", (C,))]
    for i in range(L):
        for n, s in block:
            hf[f"h.{i}.{n}"] = rng.normal(1.0 if "ln_" in n and "weight" in n else 0.0, 0.02, s)
    hf["ln_f.weight"] = rng.normal(1.0, 0.02, (C,))
    hf["ln_f.bias"] = rng.normal(0.0, 0.02, (C,))
    tensors, kept = {}, {}
    for n, a in hf.items():  # insertion order = GPT2LMHeadModel's state_dict order
        data, back = raw(a, dtype)
        tensors[pre + n] = (dtype, a.shape, data)
        kept[n] = back
    names = list(tensors)
    sizes = {k: len(tensors[k][2]) for k in names}
    shards = split_shards(names, sizes, shard_bytes)
    os.makedirs(d, exist_ok=True)
    if len(shards) == 1:
        open(f"{d}/model.safetensors", "wb").write(safetensors_bytes(tensors))
    else:
        wm = {}
        for s, ks in enumerate(shards):
            fn = f"model-{s + 1:05d}-of-{len(shards):05d}.safetensors"
            open(f"{d}/{fn}", "wb").write(safetensors_bytes({k: tensors[k] for k in ks}))
            wm.update({k: fn for k in ks})
        index = {"metadata": {"total_size": sum(sizes.values())}, "weight_map": wm}
        open(f"{d}/model.safetensors.index.json", "w").write(json.dumps(index, indent=2, sort_keys=True) + "\n")
    config = {"activation_function": "gelu_new", "architectures": ["GPT2LMHeadModel"], "attn_pdrop": 0.1,
              "bos_token_id": 50256, "embd_pdrop": 0.1, "eos_token_id": 50256, "initializer_range": 0.02,
              "layer_norm_epsilon": 1e-05, "model_type": "gpt2", "n_ctx": T, "n_embd": C, "n_head": NH,
              "n_layer": L, "n_positions": T, "resid_pdrop": 0.1, "summary_activation": None,
              "summary_first_dropout": 0.1, "summary_proj_to_labels": True, "summary_type": "cls_index",
              "summary_use_proj": True, "torch_dtype": {"F32": "float32", "BF16": "bfloat16", "F16": "float16"}[dtype],
              "transformers_version": "4.46.0", "use_cache": True, "vocab_size": V}
    open(f"{d}/config.json", "w").write(json.dumps(config, indent=2, sort_keys=True) + "\n")
    # llm.c (version 3): (out, in) matrices, blocks stacked over layers, wte padded with zero rows
    Vp = (V + 127) // 128 * 128
    header = np.zeros(256, dtype="<i4")
    header[:8] = [20240326, 3, T, V, L, NH, C, Vp]
    wte = np.zeros((Vp, C), dtype="<f4")
    wte[:V] = kept["wte.weight"]
    with open(llmc, "wb") as f:
        f.write(header.tobytes())
        f.write(wte.tobytes())
        f.write(kept["wpe.weight"].astype("<f4").tobytes())
        for n, _ in block:
            for i in range(L):
                a = kept[f"h.{i}.{n}"]
                if n.endswith("weight") and a.ndim == 2:
                    a = a.T  # Conv1D (in, out) -> (out, in)
                f.write(np.ascontiguousarray(a, dtype="<f4").tobytes())
        f.write(kept["ln_f.weight"].astype("<f4").tobytes())
        f.write(kept["ln_f.bias"].astype("<f4").tobytes())
    print(f"wrote {d}: {len(names)} tensors in {dtype}, {len(shards)} file(s); {llmc}")


def corrupt(kind, src, dst):
    b = open(src, "rb").read()
    n = struct.unpack("<Q", b[:8])[0]
    h = json.loads(b[8:8 + n])
    data = b[8 + n:]
    names = [k for k in h if k != "__metadata__"]
    first = min(names, key=lambda k: h[k]["data_offsets"][0])
    second = sorted(names, key=lambda k: h[k]["data_offsets"][0])[1]

    def emit(header, payload):
        js = json.dumps(header, separators=(",", ":")).encode()
        js += b" " * ((8 - len(js) % 8) % 8)
        return struct.pack("<Q", len(js)) + js + payload

    if kind == "header-length":  # the length field says more than the file holds
        out = struct.pack("<Q", len(b)) + b[8:]
    elif kind == "out-of-range":  # the last tensor's end beyond the data
        last = max(names, key=lambda k: h[k]["data_offsets"][1])
        h[last]["data_offsets"] = [h[last]["data_offsets"][0] + 4, h[last]["data_offsets"][1] + 4]
        out = emit(h, data)
    elif kind == "overlap":  # the second tensor starts inside the first
        h[second]["data_offsets"] = [h[second]["data_offsets"][0] - 4, h[second]["data_offsets"][1] - 4]
        out = emit(h, data)
    elif kind == "dtype":
        h[first]["dtype"] = "Q4_K"
        out = emit(h, data)
    elif kind == "shape":  # a shape the config does not have, with consistent offsets
        s = h["transformer.ln_f.weight"]
        s["shape"] = [s["shape"][0] // 2, 2]
        out = emit(h, data)
    elif kind == "missing":  # drop ln_f.bias and its bytes (the last data, so the rest stays in place)
        gone = "transformer.ln_f.bias"
        lo, hi = h[gone]["data_offsets"]
        del h[gone]
        for k in names:
            if k != gone and h[k]["data_offsets"][0] >= hi:
                h[k]["data_offsets"] = [h[k]["data_offsets"][0] - (hi - lo), h[k]["data_offsets"][1] - (hi - lo)]
        out = emit(h, data[:lo] + data[hi:])
    elif kind == "unknown":  # an extra tensor that is no GPT-2 parameter
        h["transformer.h.0.attn.rotary"] = {"dtype": h[first]["dtype"], "shape": [1],
                                             "data_offsets": [len(data), len(data) + (4 if h[first]["dtype"] == "F32" else 2)]}
        out = emit(h, data + b"\0" * (4 if h[first]["dtype"] == "F32" else 2))
    elif kind == "untied":  # an lm_head.weight that differs from wte
        w = h["transformer.wte.weight"]
        lo, hi = w["data_offsets"]
        head = bytearray(data[lo:hi])
        head[0] ^= 0x40
        h["lm_head.weight"] = {"dtype": w["dtype"], "shape": w["shape"], "data_offsets": [len(data), len(data) + hi - lo]}
        out = emit(h, data + bytes(head))
    elif kind == "mask-buffer":  # not a defect: the causal-mask buffer older GPT-2 files carry
        T = h["transformer.wpe.weight"]["shape"][0]
        mask = np.tril(np.ones((T, T), dtype="<f4")).reshape(1, 1, T, T).tobytes()
        h["transformer.h.0.attn.bias"] = {"dtype": "F32", "shape": [1, 1, T, T], "data_offsets": [len(data), len(data) + len(mask)]}
        out = emit(h, data + mask)
    else:
        sys.exit(f"unknown defect {kind}")
    open(dst, "wb").write(out)


if __name__ == "__main__":
    if sys.argv[1] == "write":
        write(*sys.argv[2:12])
    elif sys.argv[1] == "corrupt":
        corrupt(*sys.argv[2:5])
    else:
        sys.exit(f"unknown command {sys.argv[1]}")
