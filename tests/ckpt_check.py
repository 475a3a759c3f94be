#!/usr/bin/python3
"""tests/ckpt_check.py - independent readers for the checkpoint CLI test (numpy and h5py only).

  safetensors FILE MERGED.h5   parses FILE by hand (u64 header length, JSON header, raw data) and
                               checks every tensor against ckpt merge's full tensors read with h5py:
                               Hugging Face GPT-2 names, Conv1D matrices transposed, c_attn (3C, C).
  vds INDEX.h5 MERGED.h5       h5py's view of the virtual-dataset index equals the merged tensors.
  write-llmc FILE V L NH C T   writes a random llm.c GPT-2 model file (version 3, wte padded to a
                               multiple of 128 rows of zeros).
  residual-mean DATASET SRC.h5... -- DST.h5...
                               each DST file's DATASET (an error-feedback residual resharded to
                               another dp) is the SRC files' (the saving dp ranks', in rank order)
                               summed in float64, divided by the number of DST files, in float32:
                               bit for bit, and not all zero.
"""
import json
import struct
import sys

import numpy as np


def hf_to_trident(name):
    base = name[: -len(".weight")] if name.endswith(".weight") else name[: -len(".bias")]
    if base in ("wte", "wpe"):
        return base
    return base + (".w" if name.endswith(".weight") else ".b")


def check_safetensors(path, merged):
    import h5py
    with open(path, "rb") as f:
        blob = f.read()
    (hlen,) = struct.unpack("<Q", blob[:8])
    header = json.loads(blob[8:8 + hlen].decode("utf-8"))
    data = blob[8 + hlen:]
    ref = h5py.File(merged, "r")
    names = [k for k in header if k != "__metadata__"]
    expected = [k for k in ref.keys() if isinstance(ref[k], h5py.Dataset)]
    assert len(names) == len(expected), f"{len(names)} tensors in the safetensors file, {len(expected)} merged"
    end = 0
    for name in names:
        e = header[name]
        assert e["dtype"] == "F32", (name, e["dtype"])
        lo, hi = e["data_offsets"]
        x = np.frombuffer(data[lo:hi], dtype="<f4").reshape(e["shape"])
        end = max(end, hi)
        t = np.array(ref[hf_to_trident(name)])
        if ".c_attn." in name:
            t = t.reshape((-1,) + t.shape[2:])
        if name.endswith(".weight") and any(s in name for s in (".c_attn.", ".c_proj.", ".c_fc.")):
            t = t.T
        assert x.shape == t.shape, (name, x.shape, t.shape)
        assert np.array_equal(x, t), f"{name} differs"
    assert end == len(data), f"data ends at {end}, file holds {len(data)} bytes"
    C = header["wte.weight"]["shape"][1]
    assert header["h.0.attn.c_attn.weight"]["shape"] == [C, 3 * C]
    assert header["h.0.mlp.c_fc.weight"]["shape"] == [C, 4 * C]
    assert header["h.0.mlp.c_proj.weight"]["shape"] == [4 * C, C]
    print(f"safetensors: {len(names)} tensors match the merged checkpoint (Conv1D layout, vocab "
          f"{header['wte.weight']['shape'][0]} rows)")


def check_vds(index, merged):
    import h5py
    a, b = h5py.File(index, "r"), h5py.File(merged, "r")
    n = 0
    for k in a.keys():
        assert np.array_equal(np.array(a[k]), np.array(b[k])), f"{k} differs"
        n += 1
    print(f"index: h5py sees {n} full tensors through the virtual datasets, equal to the merged ones")


def write_llmc(path, V, L, NH, C, T):
    V, L, NH, C, T = int(V), int(L), int(NH), int(C), int(T)
    Vp = (V + 127) // 128 * 128
    header = np.zeros(256, dtype="<i4")
    header[:8] = [20240326, 3, T, V, L, NH, C, Vp]
    rng = np.random.default_rng(7)
    wte = np.zeros((Vp, C), dtype="<f4")
    wte[:V] = rng.normal(0, 0.02, (V, C))
    shapes = [(T, C), (L, C), (L, C), (L, 3 * C, C), (L, 3 * C), (L, C, C), (L, C), (L, C), (L, C),
              (L, 4 * C, C), (L, 4 * C), (L, C, 4 * C), (L, C), (C,), (C,)]
    with open(path, "wb") as f:
        f.write(header.tobytes())
        f.write(wte.tobytes())
        for s in shapes:
            f.write(rng.normal(0, 0.02, s).astype("<f4").tobytes())
    print(f"wrote {path}: V {V} (padded {Vp}), {L} layers, {NH} heads, C {C}, T {T}")


def check_residual_mean(dataset, files):
    import h5py
    cut = files.index("--")
    src, dst = files[:cut], files[cut + 1:]
    total = None
    for path in src:
        with h5py.File(path, "r") as f:
            x = f[dataset][()].astype(np.float64)
        total = x if total is None else total + x
    want = (total / len(dst)).astype(np.float32)
    if not np.any(want):
        sys.exit(f"{dataset}: the saved residuals are all zero: the check shows nothing")
    for path in dst:
        with h5py.File(path, "r") as f:
            got = f[dataset][()]
        if got.shape != want.shape or not np.array_equal(got.view(np.uint32), want.view(np.uint32)):
            bad = int(np.count_nonzero(got != want)) if got.shape == want.shape else -1
            sys.exit(f"{path} {dataset}: {bad} elements differ from the saved ranks' sum / {len(dst)}")
    print(f"{dataset}: each of {len(dst)} ranks holds the {len(src)} saved ranks' sum / {len(dst)}")


if __name__ == "__main__":
    cmd = sys.argv[1]
    if cmd == "safetensors":
        check_safetensors(sys.argv[2], sys.argv[3])
    elif cmd == "vds":
        check_vds(sys.argv[2], sys.argv[3])
    elif cmd == "residual-mean":
        check_residual_mean(sys.argv[2], sys.argv[3:])
    elif cmd == "write-llmc":
        write_llmc(sys.argv[2], *sys.argv[3:8])
    else:
        sys.exit(f"unknown command {cmd}")
