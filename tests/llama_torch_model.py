#!/usr/bin/python3
"""tests/llama_torch_model.py IN.bin OUT.bin - the whole Llama (or Qwen3) model in PyTorch (float64), the
reference tests/test_llama_torch.c compares Trident's Llama and Qwen3 families with.

Written from the papers and Hugging Face's documented LlamaForCausalLM math (transformers'
modeling_llama: LlamaRMSNorm, LlamaRotaryEmbedding with _compute_llama3_parameters, rotate_half,
repeat_kv, eager causal softmax attention, LlamaMLP silu(gate) * up, tied or untied lm_head), not from
Trident's code. IN.bin holds "meta" (B, T, steps, AdamW beta1, beta2, eps, weight decay, clip), the
config's numbers in "cfg" (hidden_size, intermediate_size, num_attention_heads, num_key_value_heads,
head_dim, num_hidden_layers, vocab_size, rms_norm_eps, rope_theta, tie, attention_bias, mlp_bias,
llama3, factor, low_freq_factor, high_freq_factor, original_max_position_embeddings, qk_norm: Qwen3's
per-head RMSNorm of q and k before the rotary embedding, transformers' modeling_qwen3 Qwen3Attention:
q_norm(q_proj(x).view(..., head_dim)), k_norm likewise, with Qwen3RMSNorm = LlamaRMSNorm), the learning
rate per step, the token windows per step, each parameter's weight-decay flag, and every parameter
under its Hugging Face name (the embedding and head padded to Trident's vocabulary; the padding is
kept out of the logits). OUT.bin receives the logits and loss of step 0's batch, every parameter's
gradient on it (grad.<name>) and the loss before each AdamW step (torch.optim.AdamW, decay where
Trident decays, torch.nn.utils.clip_grad_norm_): tools/gpt2_torch_reference.py's reference_run, in
its record format."""
import math
import os
import sys

import torch
import torch.nn.functional as F

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "tools"))
from gpt2_torch_reference import reference_run  # noqa: E402

CFG_KEYS = ["hidden_size", "intermediate_size", "num_attention_heads", "num_key_value_heads", "head_dim",
            "num_hidden_layers", "vocab_size", "rms_norm_eps", "rope_theta", "tie", "attention_bias",
            "mlp_bias", "llama3", "factor", "low_freq_factor", "high_freq_factor", "original_max", "qk_norm"]


def inv_freq_of(cfg):
    """LlamaRotaryEmbedding's inv_freq (float32), with Llama 3's rope_scaling when given."""
    HS = cfg["head_dim"]
    inv = 1.0 / (cfg["rope_theta"] ** (torch.arange(0, HS, 2, dtype=torch.int64).float() / HS))
    if not cfg["llama3"]:
        return inv
    factor, lo, hi, old = cfg["factor"], cfg["low_freq_factor"], cfg["high_freq_factor"], cfg["original_max"]
    low_wavelen, high_wavelen = old / lo, old / hi
    wavelen = 2 * math.pi / inv
    inv_llama = torch.where(wavelen > low_wavelen, inv / factor, inv)
    smooth = (old / wavelen - lo) / (hi - lo)
    smoothed = (1 - smooth) * inv_llama / factor + smooth * inv_llama
    medium = ~(wavelen < high_wavelen) * ~(wavelen > low_wavelen)
    return torch.where(medium, smoothed, inv_llama)


def rotary(cfg, T):
    """cos, sin (T, HS): the float32 angles position * inv_freq, their cosine and sine in float64."""
    freqs = torch.arange(T, dtype=torch.float32)[:, None] * inv_freq_of(cfg)[None, :]
    emb = torch.cat((freqs, freqs), dim=-1).double()
    return emb.cos(), emb.sin()


def rmsnorm(x, w, eps):
    return w * (x * torch.rsqrt(x.pow(2).mean(-1, keepdim=True) + eps))


def rotate_half(x):
    half = x.shape[-1] // 2
    return torch.cat((-x[..., half:], x[..., :half]), dim=-1)


def linear(p, name, x):
    b = p.get(name + ".bias")
    return F.linear(x, p[name + ".weight"], b)


def dense_mlp(p, pre, z, cfg, layer):
    """LlamaMLP: down(silu(gate(z)) * up(z)); nothing added to the objective."""
    h = F.silu(linear(p, pre + "mlp.gate_proj", z)) * linear(p, pre + "mlp.up_proj", z)
    return linear(p, pre + "mlp.down_proj", h), 0.0


def llama_forward(p, tokens, cfg, mlp=dense_mlp):
    """Logits (B, T, V) of the real vocabulary for tokens (B, T); with another mlp(p, pre, z, cfg,
    layer) -> (out, extra) (an MoE block), (logits, the sum of the layers' extras)."""
    extra = 0.0
    B, T = tokens.shape
    NH, NH_kv, HS, eps, V = (cfg["num_attention_heads"], cfg["num_key_value_heads"], cfg["head_dim"],
                             cfg["rms_norm_eps"], cfg["vocab_size"])
    cos, sin = rotary(cfg, T)
    mask = torch.triu(torch.ones(T, T, dtype=torch.bool), diagonal=1)
    x = p["model.embed_tokens.weight"][tokens]
    for i in range(cfg["num_hidden_layers"]):
        pre = "model.layers.%d." % i
        z = rmsnorm(x, p[pre + "input_layernorm.weight"], eps)
        q = linear(p, pre + "self_attn.q_proj", z).view(B, T, NH, HS)
        k = linear(p, pre + "self_attn.k_proj", z).view(B, T, NH_kv, HS)
        if cfg["qk_norm"]:  # Qwen3Attention: per head, over head_dim, before the rotary embedding
            q = rmsnorm(q, p[pre + "self_attn.q_norm.weight"], eps)
            k = rmsnorm(k, p[pre + "self_attn.k_norm.weight"], eps)
        q, k = q.transpose(1, 2), k.transpose(1, 2)
        v = linear(p, pre + "self_attn.v_proj", z).view(B, T, NH_kv, HS).transpose(1, 2)
        q = q * cos + rotate_half(q) * sin
        k = k * cos + rotate_half(k) * sin
        k = k.repeat_interleave(NH // NH_kv, dim=1)   # repeat_kv
        v = v.repeat_interleave(NH // NH_kv, dim=1)
        att = (q @ k.transpose(-2, -1)) / math.sqrt(HS)
        att = torch.softmax(att.masked_fill(mask, float("-inf")), dim=-1)
        y = (att @ v).transpose(1, 2).reshape(B, T, NH * HS)
        x = x + linear(p, pre + "self_attn.o_proj", y)
        z = rmsnorm(x, p[pre + "post_attention_layernorm.weight"], eps)
        out, add = mlp(p, pre, z, cfg, i)
        x = x + out
        extra = extra + add
    x = rmsnorm(x, p["model.norm.weight"], eps)
    head = p["model.embed_tokens.weight"] if cfg["tie"] else p["lm_head.weight"]
    logits = x @ head[:V].t()
    return logits if mlp is dense_mlp else (logits, extra)


if __name__ == "__main__":
    reference_run(sys.argv, llama_forward, CFG_KEYS,
                  float_keys=("rms_norm_eps", "rope_theta", "factor", "low_freq_factor", "high_freq_factor"))
