"""tests/hf_files.py - Hugging Face model directories (GPT-2, Llama) for tests/hf_interop.sh and
tests/hf_llama.sh, written from the published formats with numpy only (no torch, no transformers, no
safetensors package here).

  write DIR LLMC V L NH C T DTYPE SHARD_BYTES PREFIX
      DIR: config.json (GPT2Config as transformers writes it, dropout 0.1 as in the gpt2 hub config)
      and the weights of a random GPT-2 in DTYPE (F32, BF16, F16) under transformers' names
      (PREFIX 1: "transformer.h.0...", as save_pretrained of GPT2LMHeadModel; 0: "h.0...", as the
      hub's gpt2 files), one model.safetensors or, above SHARD_BYTES, shards and an index split as
      huggingface_hub does; LLMC: the same weights (rounded to DTYPE) as an llm.c model file, written
      independently, so `ckpt import --format hf` then `ckpt export --format llmc` must equal it.
  write-mixtral DIR V L NH NH_KV C I T E K DTYPE SHARD_BYTES [FAMILY]: a MixtralForCausalLM directory
      (FAMILY qwen3_moe: a Qwen3MoeForCausalLM directory)
  write-llama DIR V L NH NH_KV C F T DTYPE SHARD_BYTES TIED [HEAD_DIM BIAS ROPE FAMILY]
      DIR: config.json (LlamaConfig as transformers writes it; HEAD_DIM 0 or absent: C / NH; BIAS 1:
      attention_bias and mlp_bias; ROPE llama3: Llama 3's rope_scaling and rope_theta 500000) and the
      weights of a random LlamaForCausalLM in DTYPE under transformers' names and (out, in) shapes,
      in its state_dict order (so shards split as save_pretrained splits them); TIED 1: no
      lm_head.weight (tie_word_embeddings, as save_pretrained drops it). FAMILY qwen3: a
      Qwen3ForCausalLM instead (Qwen3Attention's q_norm and k_norm after o_proj; Qwen3Config's keys,
      full attention; BIAS 1 is attention_bias only).
  compare DIR_A DIR_B
      the same tensor names, shapes and values (as float32) in both directories (one file or shards),
      and DIR_B's config.json agrees with DIR_A's on every key both have.
  corrupt KIND SRC DST
      a copy of safetensors file SRC (GPT-2 or Llama) with one defect KIND (see below), for the
      refusal tests.

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
    # bf16: float32 rounded to its upper 16 bits, to nearest with ties to even (PyTorch's .to(bfloat16),
    # which this replaced and which it matches on every finite and infinite float: importing torch took
    # 1.5-2 CPU-s of every call); a NaN stays a quiet NaN
    u = a.view("<u4").astype(np.uint64)
    r = (u + 0x7FFF + ((u >> 16) & 1)) >> 16
    r = np.where(np.isnan(a), (u >> 16) | 0x40, r).astype("<u2")
    return r.tobytes(), (r.astype("<u4") << 16).view("<f4")


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
    n_shards = write_dir(d, tensors, shard_bytes)
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
    print(f"wrote {d}: {len(tensors)} tensors in {dtype}, {n_shards} file(s); {llmc}")


def write_dir(d, tensors, shard_bytes):
    """tensors (state_dict order): one model.safetensors, or shards and an index above shard_bytes."""
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
    return len(shards)


def write_llama(d, V, L, NH, NKV, C, F, T, dtype, shard_bytes, tied, head_dim="0", bias="0", rope="none",
                family="llama"):
    V, L, NH, NKV, C, F, T, shard_bytes = (int(x) for x in (V, L, NH, NKV, C, F, T, shard_bytes))
    HS = int(head_dim) or C // NH
    tied, bias = tied == "1", bias == "1"
    qwen3 = family == "qwen3"
    mlp_bias = bias and not qwen3
    rng = np.random.default_rng(13)
    w = {"model.embed_tokens.weight": rng.normal(0, 0.02, (V, C))}
    linear = [("self_attn.q_proj", NH * HS, C, bias), ("self_attn.k_proj", NKV * HS, C, bias),
              ("self_attn.v_proj", NKV * HS, C, bias), ("self_attn.o_proj", C, NH * HS, bias),
              ("mlp.gate_proj", F, C, mlp_bias), ("mlp.up_proj", F, C, mlp_bias), ("mlp.down_proj", C, F, mlp_bias)]
    for i in range(L):  # LlamaDecoderLayer registers self_attn, mlp, then the two norms
        for n, out, inp, b in linear:
            w[f"model.layers.{i}.{n}.weight"] = rng.normal(0, 0.02, (out, inp))
            if b:
                w[f"model.layers.{i}.{n}.bias"] = rng.normal(0, 0.02, (out,))
            if qwen3 and n == "self_attn.o_proj":  # Qwen3Attention: q_norm, k_norm after o_proj
                w[f"model.layers.{i}.self_attn.q_norm.weight"] = rng.normal(1.0, 0.02, (HS,))
                w[f"model.layers.{i}.self_attn.k_norm.weight"] = rng.normal(1.0, 0.02, (HS,))
        w[f"model.layers.{i}.input_layernorm.weight"] = rng.normal(1.0, 0.02, (C,))
        w[f"model.layers.{i}.post_attention_layernorm.weight"] = rng.normal(1.0, 0.02, (C,))
    w["model.norm.weight"] = rng.normal(1.0, 0.02, (C,))
    if not tied:
        w["lm_head.weight"] = rng.normal(0, 0.02, (V, C))
    tensors = {n: (dtype, a.shape, raw(a, dtype)[0]) for n, a in w.items()}
    n_shards = write_dir(d, tensors, shard_bytes)
    llama3 = rope == "llama3"
    config = {"architectures": ["LlamaForCausalLM"], "attention_bias": bias, "attention_dropout": 0.0,
              "bos_token_id": 1, "eos_token_id": 2, "head_dim": HS, "hidden_act": "silu", "hidden_size": C,
              "initializer_range": 0.02, "intermediate_size": F, "max_position_embeddings": T, "mlp_bias": bias,
              "model_type": "llama", "num_attention_heads": NH, "num_hidden_layers": L, "num_key_value_heads": NKV,
              "pretraining_tp": 1, "rms_norm_eps": 1e-05,
              "rope_scaling": {"factor": 8.0, "high_freq_factor": 4.0, "low_freq_factor": 1.0,
                               "original_max_position_embeddings": T // 2, "rope_type": "llama3"} if llama3 else None,
              "rope_theta": 500000.0 if llama3 else 10000.0, "tie_word_embeddings": tied,
              "torch_dtype": {"F32": "float32", "BF16": "bfloat16", "F16": "float16"}[dtype],
              "transformers_version": "4.46.0", "use_cache": True, "vocab_size": V}
    if qwen3:  # Qwen3Config: no mlp_bias or pretraining_tp; the sliding window off
        for k in ("mlp_bias", "pretraining_tp"):
            del config[k]
        config.update({"architectures": ["Qwen3ForCausalLM"], "model_type": "qwen3", "max_window_layers": L,
                       "sliding_window": None, "use_sliding_window": False, "transformers_version": "4.51.0"})
    open(f"{d}/config.json", "w").write(json.dumps(config, indent=2, sort_keys=True) + "\n")
    print(f"wrote {d}: {len(tensors)} tensors in {dtype}, {n_shards} file(s)")


def write_mixtral(d, V, L, NH, NKV, C, I, T, E, K, dtype, shard_bytes, family="mixtral"):
    """A MixtralForCausalLM directory: MixtralDecoderLayer registers self_attn, block_sparse_moe (its
    router `gate`, then experts.J each with w1, w2, w3), then the two norms; an untied head. FAMILY
    qwen3_moe: a Qwen3MoeForCausalLM directory instead (Qwen3MoeAttention's q_norm and k_norm after
    o_proj, the sparse block under mlp. with experts.J.gate_proj, up_proj, down_proj)."""
    V, L, NH, NKV, C, I, T, E, K, shard_bytes = (int(x) for x in (V, L, NH, NKV, C, I, T, E, K, shard_bytes))
    qwen = family == "qwen3_moe"
    HS = C // NH
    rng = np.random.default_rng(17)
    w = {"model.embed_tokens.weight": rng.normal(0, 0.02, (V, C))}
    blk, names = (("mlp.", ("gate_proj", "up_proj", "down_proj")) if qwen
                  else ("block_sparse_moe.", ("w1", "w2", "w3")))
    for i in range(L):
        pre = f"model.layers.{i}."
        for n, out, inp in [("self_attn.q_proj", NH * HS, C), ("self_attn.k_proj", NKV * HS, C),
                            ("self_attn.v_proj", NKV * HS, C), ("self_attn.o_proj", C, NH * HS)]:
            w[f"{pre}{n}.weight"] = rng.normal(0, 0.02, (out, inp))
        if qwen:
            w[f"{pre}self_attn.q_norm.weight"] = rng.normal(1.0, 0.02, (HS,))
            w[f"{pre}self_attn.k_norm.weight"] = rng.normal(1.0, 0.02, (HS,))
        w[f"{pre}{blk}gate.weight"] = rng.normal(0, 0.02, (E, C))
        for e in range(E):
            for n in names:
                shape = (C, I) if n in ("w2", "down_proj") else (I, C)
                w[f"{pre}{blk}experts.{e}.{n}.weight"] = rng.normal(0, 0.02, shape)
        w[f"{pre}input_layernorm.weight"] = rng.normal(1.0, 0.02, (C,))
        w[f"{pre}post_attention_layernorm.weight"] = rng.normal(1.0, 0.02, (C,))
    w["model.norm.weight"] = rng.normal(1.0, 0.02, (C,))
    w["lm_head.weight"] = rng.normal(0, 0.02, (V, C))
    tensors = {n: (dtype, a.shape, raw(a, dtype)[0]) for n, a in w.items()}
    n_shards = write_dir(d, tensors, shard_bytes)
    torch_dtype = {"F32": "float32", "BF16": "bfloat16", "F16": "float16"}[dtype]
    if qwen:
        config = {"architectures": ["Qwen3MoeForCausalLM"], "attention_bias": False, "attention_dropout": 0.0,
                  "decoder_sparse_step": 1, "head_dim": HS, "hidden_act": "silu", "hidden_size": C,
                  "initializer_range": 0.02, "intermediate_size": 2 * I, "max_position_embeddings": T,
                  "max_window_layers": L, "mlp_only_layers": [], "model_type": "qwen3_moe",
                  "moe_intermediate_size": I, "norm_topk_prob": True, "num_attention_heads": NH,
                  "num_experts": E, "num_experts_per_tok": K, "num_hidden_layers": L, "num_key_value_heads": NKV,
                  "output_router_logits": False, "rms_norm_eps": 1e-06, "rope_scaling": None,
                  "rope_theta": 1000000.0, "router_aux_loss_coef": 0.001, "sliding_window": None,
                  "tie_word_embeddings": False, "torch_dtype": torch_dtype, "transformers_version": "4.51.0",
                  "use_cache": True, "use_sliding_window": False, "vocab_size": V}
    else:
        config = {"architectures": ["MixtralForCausalLM"], "attention_dropout": 0.0, "bos_token_id": 1,
                  "eos_token_id": 2, "hidden_act": "silu", "hidden_size": C, "initializer_range": 0.02,
                  "intermediate_size": I, "max_position_embeddings": T, "model_type": "mixtral",
                  "num_attention_heads": NH, "num_experts_per_tok": K, "num_hidden_layers": L,
                  "num_key_value_heads": NKV, "num_local_experts": E, "output_router_logits": False,
                  "rms_norm_eps": 1e-05, "rope_theta": 1000000.0, "router_aux_loss_coef": 0.02,
                  "sliding_window": None, "tie_word_embeddings": False, "torch_dtype": torch_dtype,
                  "transformers_version": "4.36.0", "use_cache": True, "vocab_size": V}
    open(f"{d}/config.json", "w").write(json.dumps(config, indent=2, sort_keys=True) + "\n")
    print(f"wrote {d}: {len(tensors)} tensors in {dtype}, {n_shards} file(s)")


def read_safetensors(path):
    """name -> float32 array (F32, BF16, F16), from the published format."""
    b = open(path, "rb").read()
    n = struct.unpack("<Q", b[:8])[0]
    h = json.loads(b[8:8 + n])
    out = {}
    for k, v in h.items():
        if k == "__metadata__":
            continue
        lo, hi = v["data_offsets"]
        data = b[8 + n + lo:8 + n + hi]
        if v["dtype"] == "F32":
            a = np.frombuffer(data, dtype="<f4")
        elif v["dtype"] == "F16":
            a = np.frombuffer(data, dtype="<f2").astype("<f4")
        else:  # BF16: the top half of a float32
            a = (np.frombuffer(data, dtype="<u2").astype("<u4") << 16).view("<f4")
        out[k] = a.reshape(v["shape"])
    return out


def read_dir(d):
    if os.path.exists(f"{d}/model.safetensors"):
        return read_safetensors(f"{d}/model.safetensors")
    files = sorted(set(json.load(open(f"{d}/model.safetensors.index.json"))["weight_map"].values()))
    out = {}
    for f in files:
        out.update(read_safetensors(f"{d}/{f}"))
    return out


def compare(a, b):
    ta, tb = read_dir(a), read_dir(b)
    if set(ta) != set(tb):
        sys.exit(f"different tensors: only in {a}: {sorted(set(ta) - set(tb))}; only in {b}: {sorted(set(tb) - set(ta))}")
    for k in ta:
        if ta[k].shape != tb[k].shape or not np.array_equal(ta[k], tb[k]):
            sys.exit(f"tensor {k} differs: shape {ta[k].shape} vs {tb[k].shape}")
    ca, cb = json.load(open(f"{a}/config.json")), json.load(open(f"{b}/config.json"))
    for k in cb:
        if k in ca and k != "torch_dtype" and ca[k] != cb[k]:
            sys.exit(f"config.json key {k}: {ca[k]!r} in {a}, {cb[k]!r} in {b}")
    print(f"same {len(ta)} tensors and config")


def corrupt(kind, src, dst):
    b = open(src, "rb").read()
    n = struct.unpack("<Q", b[:8])[0]
    h = json.loads(b[8:8 + n])
    data = b[8 + n:]
    names = [k for k in h if k != "__metadata__"]
    gpt = "transformer.wte.weight" in h
    embed = "transformer.wte.weight" if gpt else "model.embed_tokens.weight"
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
        s = h["transformer.ln_f.weight" if gpt else "model.norm.weight"]
        s["shape"] = [s["shape"][0] // 2, 2]
        out = emit(h, data)
    elif kind == "missing":  # drop a tensor and its bytes (the later ones move up)
        gone = "transformer.ln_f.bias" if gpt else "model.layers.1.mlp.up_proj.weight"
        lo, hi = h[gone]["data_offsets"]
        del h[gone]
        for k in names:
            if k != gone and h[k]["data_offsets"][0] >= hi:
                h[k]["data_offsets"] = [h[k]["data_offsets"][0] - (hi - lo), h[k]["data_offsets"][1] - (hi - lo)]
        out = emit(h, data[:lo] + data[hi:])
    elif kind == "unknown":  # an extra tensor that is no parameter of the model
        h["transformer.h.0.attn.rotary" if gpt else "model.layers.0.self_attn.q_norm.weight"] = {"dtype": h[first]["dtype"], "shape": [1],
                                             "data_offsets": [len(data), len(data) + (4 if h[first]["dtype"] == "F32" else 2)]}
        out = emit(h, data + b"\0" * (4 if h[first]["dtype"] == "F32" else 2))
    elif kind in ("untied", "tied-head"):  # an lm_head.weight that differs from the embedding, or equals it
        w = h[embed]
        lo, hi = w["data_offsets"]
        head = bytearray(data[lo:hi])
        if kind == "untied":
            head[0] ^= 0x40
        h["lm_head.weight"] = {"dtype": w["dtype"], "shape": w["shape"], "data_offsets": [len(data), len(data) + hi - lo]}
        out = emit(h, data + bytes(head))
    elif kind == "mask-buffer":  # not a defect: the causal-mask buffer older GPT-2 files carry
        T = h["transformer.wpe.weight"]["shape"][0]
        mask = np.tril(np.ones((T, T), dtype="<f4")).reshape(1, 1, T, T).tobytes()
        h["transformer.h.0.attn.bias"] = {"dtype": "F32", "shape": [1, 1, T, T], "data_offsets": [len(data), len(data) + len(mask)]}
        out = emit(h, data + mask)
    elif kind == "rotary-buffer":  # not a defect: the inv_freq buffers older Llama files carry
        HS = json.load(open(os.path.join(os.path.dirname(src), "config.json")))["head_dim"]
        inv = (1.0 / 10000.0 ** (np.arange(0, HS, 2, dtype="<f4") / HS)).astype("<f4").tobytes()
        for i in sorted({int(k.split(".")[2]) for k in names if k.startswith("model.layers.")}):
            h[f"model.layers.{i}.self_attn.rotary_emb.inv_freq"] = {
                "dtype": "F32", "shape": [HS // 2], "data_offsets": [len(data), len(data) + len(inv)]}
            data += inv
        out = emit(h, data)
    else:
        sys.exit(f"unknown defect {kind}")
    open(dst, "wb").write(out)


if __name__ == "__main__":
    if sys.argv[1] == "write":
        write(*sys.argv[2:12])
    elif sys.argv[1] == "write-llama":
        write_llama(*sys.argv[2:18])
    elif sys.argv[1] == "write-mixtral":
        write_mixtral(*sys.argv[2:15])
    elif sys.argv[1] == "compare":
        compare(*sys.argv[2:4])
    elif sys.argv[1] == "corrupt":
        corrupt(*sys.argv[2:5])
    else:
        sys.exit(f"unknown command {sys.argv[1]}")
