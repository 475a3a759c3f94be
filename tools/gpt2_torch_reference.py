#!/usr/bin/python3
"""PyTorch reference for Trident's GPT-2: forward, backward and AdamW steps from given weights.

Usage: gpt2_torch_reference.py IN.bin OUT.bin

IN.bin (written by tests/torch_compare.c for tests/test_gpt_torch.c) holds "meta" (B, T, steps, AdamW
beta1, beta2, eps, weight decay, clip), the config's numbers in "cfg" (n_layer, n_head, n_embd,
vocab_size, n_positions), the learning rate of each step, the token windows of each step, each
parameter's weight-decay flag and every parameter under Trident's names and layouts (weights
(out, in); c_attn as (3, C, C) = q, k, v rows). This script builds the same GPT-2
(pre-LN blocks, GELU tanh form, causal attention, LM head tied to wte, vocab padding kept out of the
loss) with torch operations in float64, so the reference is independent of Trident's code and more
precise than the fp32 it checks. OUT.bin receives the logits and loss of step 0's batch, every
parameter's gradient on that batch, and the loss before each of the AdamW steps (torch.optim.AdamW,
decay on the parameters Trident decays, torch.nn.utils.clip_grad_norm_): reference_run, which
tests/llama_torch_model.py runs with its own model.

File format (both files): records of
  u32 name length, name bytes, u32 ndim, i64 shape[ndim], float64 data (C order), all little-endian.
"""
import struct
import sys

import numpy as np
import torch
import torch.nn.functional as F


def read_records(path):
    out = {}
    with open(path, "rb") as f:
        data = f.read()
    pos = 0
    while pos < len(data):
        (nlen,) = struct.unpack_from("<I", data, pos)
        pos += 4
        name = data[pos:pos + nlen].decode()
        pos += nlen
        (ndim,) = struct.unpack_from("<I", data, pos)
        pos += 4
        shape = struct.unpack_from("<%dq" % ndim, data, pos)
        pos += 8 * ndim
        count = int(np.prod(shape)) if ndim else 1
        arr = np.frombuffer(data, dtype="<f8", count=count, offset=pos).reshape(shape)
        pos += 8 * count
        out[name] = arr.copy()
    return out


def write_records(path, records):
    with open(path, "wb") as f:
        for name, arr in records:
            arr = np.ascontiguousarray(np.asarray(arr, dtype="<f8"))
            f.write(struct.pack("<I", len(name)))
            f.write(name.encode())
            f.write(struct.pack("<I", arr.ndim))
            f.write(struct.pack("<%dq" % arr.ndim, *arr.shape))
            f.write(arr.tobytes())


def run_jobs(run, args):
    """Calls run(model, inp, out) for each MODEL IN OUT triple of args: one process, and one import of
    torch (most of a reference script's run), for several comparisons."""
    if not args or len(args) % 3:
        sys.exit("usage: %s MODEL IN OUT [MODEL IN OUT ...]" % sys.argv[0])
    for i in range(0, len(args), 3):
        run(*args[i:i + 3])


def gpt_forward(p, tokens, cfg):
    """Logits (B, T, V) of the real vocabulary for tokens (B, T)."""
    L, NH, C, V = cfg["n_layer"], cfg["n_head"], cfg["n_embd"], cfg["vocab_size"]
    B, T = tokens.shape
    hs = C // NH
    x = p["wte"][tokens] + p["wpe"][:T]
    mask = torch.ones(T, T, dtype=torch.bool).tril()
    for i in range(L):
        h = "h.%d." % i
        a = F.layer_norm(x, (C,), p[h + "ln_1.w"], p[h + "ln_1.b"], eps=1e-5)
        qkv = F.linear(a, p[h + "attn.c_attn.w"].reshape(3 * C, C), p[h + "attn.c_attn.b"].reshape(3 * C))
        q, k, v = qkv.split(C, dim=2)
        q = q.view(B, T, NH, hs).transpose(1, 2)
        k = k.view(B, T, NH, hs).transpose(1, 2)
        v = v.view(B, T, NH, hs).transpose(1, 2)
        att = (q @ k.transpose(-2, -1)) / (hs ** 0.5)
        att = att.masked_fill(~mask, float("-inf")).softmax(dim=-1)
        y = (att @ v).transpose(1, 2).reshape(B, T, C)
        x = x + F.linear(y, p[h + "attn.c_proj.w"], p[h + "attn.c_proj.b"])
        m = F.layer_norm(x, (C,), p[h + "ln_2.w"], p[h + "ln_2.b"], eps=1e-5)
        m = F.gelu(F.linear(m, p[h + "mlp.c_fc.w"], p[h + "mlp.c_fc.b"]), approximate="tanh")
        x = x + F.linear(m, p[h + "mlp.c_proj.w"], p[h + "mlp.c_proj.b"])
    x = F.layer_norm(x, (C,), p["ln_f.w"], p["ln_f.b"], eps=1e-5)
    return x @ p["wte"][:V].t()


def reference_run(argv, forward, cfg_keys, float_keys=()):
    """The whole reference run of argv's IN.bin into OUT.bin: forward(params, tokens, cfg) gives the
    logits (B, T, V) of the model whose config numbers, in cfg_keys' order, are IN.bin's "cfg" (ints
    but for float_keys)."""
    if len(argv) != 3:
        sys.exit("usage: %s IN.bin OUT.bin" % argv[0])
    rec = read_records(argv[1])
    B, T, steps, beta1, beta2, eps, wd, clip = rec.pop("meta").tolist()
    steps = int(steps)
    cfg = dict(zip(cfg_keys, rec.pop("cfg").tolist()))
    for k in cfg_keys:
        if k not in float_keys:
            cfg[k] = int(cfg[k])
    lrs = rec.pop("lrs")
    windows = torch.from_numpy(rec.pop("windows").astype(np.int64))   # (steps, B, T+1)
    decay_flags = rec.pop("decay")                                     # (n_params,) in order
    names = list(rec)                                                  # file order = Trident order
    torch.set_default_dtype(torch.float64)
    params = {n: torch.tensor(rec[n], dtype=torch.float64, requires_grad=True) for n in names}

    def loss_of(step):
        """logits, the LM loss (reported) and the objective (the LM loss plus what a forward that
        returns (logits, extra) adds: an MoE model's load-balancing losses)."""
        out = forward(params, windows[step, :, :-1], cfg)
        logits, extra = out if isinstance(out, tuple) else (out, 0.0)
        lm = F.cross_entropy(logits.reshape(-1, logits.shape[-1]), windows[step, :, 1:].reshape(-1))
        return logits, lm, lm + extra

    logits, loss, objective = loss_of(0)
    objective.backward()
    out = [("logits", logits.detach().numpy()), ("loss", np.array([loss.item()]))]
    out += [("grad." + n, params[n].grad.numpy().copy()) for n in names]

    groups = [
        {"params": [params[n] for n, d in zip(names, decay_flags) if d], "weight_decay": wd},
        {"params": [params[n] for n, d in zip(names, decay_flags) if not d], "weight_decay": 0.0},
    ]
    opt = torch.optim.AdamW(groups, lr=float(lrs[0]), betas=(beta1, beta2), eps=eps)
    losses = []
    for step in range(steps):
        opt.zero_grad()
        _, loss, objective = loss_of(step)
        objective.backward()
        losses.append(loss.item())
        if clip > 0:
            torch.nn.utils.clip_grad_norm_([params[n] for n in names], clip)
        for g in opt.param_groups:
            g["lr"] = float(lrs[step])
        opt.step()
    out.append(("losses", np.array(losses)))
    write_records(argv[2], out)


if __name__ == "__main__":
    reference_run(sys.argv, gpt_forward, ["n_layer", "n_head", "n_embd", "vocab_size", "n_positions"])
