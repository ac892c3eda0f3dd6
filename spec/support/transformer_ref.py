"""spec/support/transformer_ref.py: GPT-2 and LLaMA written with plain torch ops, from Hugging
Face's published architectures, as the reference for spec/nn/transformer_spec.lua (which runs
it through spec/support/torch_ref.lua: exec'd after its prelude, so `torch` is imported).

    sd = load_safetensors(path)                  # { HF name: float32 tensor }, read by hand
    logits = gpt2_logits(sd, config, tokens)     # tokens: list of rows of 0-based ids
    logits = llama_logits(sd, config, tokens)    # -> (batch, T, vocab), every position at once

The whole sequence is computed in one pass with a causal mask (no cache), so a model that
decodes with a KV cache is checked against the direct computation.
"""
import json
import math
import struct

import torch


def load_safetensors(path):
    """The float32 tensors of a safetensors file: an 8-byte little-endian header length, the
    JSON header {name: {dtype, shape, data_offsets}}, then the data."""
    with open(path, "rb") as f:
        blob = f.read()
    (n,) = struct.unpack("<Q", blob[:8])
    header = json.loads(blob[8:8 + n])
    data = blob[8 + n:]
    out = {}
    for name, info in header.items():
        if name == "__metadata__":
            continue
        assert info["dtype"] == "F32", name
        begin, end = info["data_offsets"]
        values = struct.unpack("<%df" % ((end - begin) // 4), data[begin:end])
        out[name] = torch.tensor(values, dtype=torch.float32).reshape(info["shape"])
    return out


def causal_attention(q, k, v):
    """q (B, H, T, d), k and v (B, H, T, d): softmax(q k^T / sqrt(d) + causal) v."""
    t = q.shape[2]
    scores = q @ k.transpose(2, 3) / math.sqrt(q.shape[3])
    allowed = torch.ones(t, t, dtype=torch.bool).tril()
    scores = scores.masked_fill(~allowed, float("-inf"))
    return scores.softmax(-1) @ v


def gelu_tanh(x):
    """GPT-2's GELU: 0.5 x (1 + tanh(sqrt(2/pi) (x + 0.044715 x^3)))."""
    return 0.5 * x * (1.0 + torch.tanh(math.sqrt(2.0 / math.pi) * (x + 0.044715 * x ** 3)))


def gpt2_logits(sd, c, tokens):
    sd = {k[len("transformer."):] if k.startswith("transformer.") else k: v for k, v in sd.items()}
    ids = torch.tensor(tokens, dtype=torch.long)
    b, t = ids.shape
    d, h = c["dim"], c["n_heads"]
    hd = d // h
    x = sd["wte.weight"][ids] + sd["wpe.weight"][torch.arange(t)]
    eps = c["norm_eps"]

    def ln(x, p):
        return torch.nn.functional.layer_norm(x, (d,), sd[p + ".weight"], sd[p + ".bias"], eps)

    def conv1d(x, p):  # HF's Conv1D: weight (in, out)
        return x @ sd[p + ".weight"] + sd[p + ".bias"]

    for n in range(c["n_layers"]):
        p = "h.%d." % n
        qkv = conv1d(ln(x, p + "ln_1"), p + "attn.c_attn")
        q, k, v = qkv.split(d, dim=2)
        q, k, v = (z.reshape(b, t, h, hd).transpose(1, 2) for z in (q, k, v))
        a = causal_attention(q, k, v).transpose(1, 2).reshape(b, t, d)
        x = x + conv1d(a, p + "attn.c_proj")
        x = x + conv1d(gelu_tanh(conv1d(ln(x, p + "ln_2"), p + "mlp.c_fc")), p + "mlp.c_proj")
    x = ln(x, "ln_f")
    return x @ sd["wte.weight"].T


def rotate_half(x):
    half = x.shape[-1] // 2
    return torch.cat((-x[..., half:], x[..., :half]), dim=-1)


def llama_logits(sd, c, tokens):
    ids = torch.tensor(tokens, dtype=torch.long)
    b, t = ids.shape
    d, h, kv = c["dim"], c["n_heads"], c["n_kv_heads"]
    hd = d // h
    eps = c["norm_eps"]
    inv_freq = 1.0 / (c["rope_theta"] ** (torch.arange(0, hd, 2, dtype=torch.float32) / hd))
    angles = torch.arange(t, dtype=torch.float32)[:, None] * inv_freq[None, :]
    angles = torch.cat((angles, angles), dim=-1)
    cos, sin = angles.cos(), angles.sin()

    def rms(x, p):
        return x * torch.rsqrt(x.pow(2).mean(-1, keepdim=True) + eps) * sd[p + ".weight"]

    def lin(x, p):  # nn.Linear: weight (out, in)
        return x @ sd[p + ".weight"].T

    x = sd["model.embed_tokens.weight"][ids]
    for n in range(c["n_layers"]):
        p = "model.layers.%d." % n
        y = rms(x, p + "input_layernorm")
        q = lin(y, p + "self_attn.q_proj").reshape(b, t, h, hd).transpose(1, 2)
        k = lin(y, p + "self_attn.k_proj").reshape(b, t, kv, hd).transpose(1, 2)
        v = lin(y, p + "self_attn.v_proj").reshape(b, t, kv, hd).transpose(1, 2)
        q = q * cos + rotate_half(q) * sin
        k = k * cos + rotate_half(k) * sin
        k = k.repeat_interleave(h // kv, dim=1)  # key/value head j serves query heads j*g .. j*g+g-1
        v = v.repeat_interleave(h // kv, dim=1)
        a = causal_attention(q, k, v).transpose(1, 2).reshape(b, t, h * hd)
        x = x + lin(a, p + "self_attn.o_proj")
        y = rms(x, p + "post_attention_layernorm")
        x = x + lin(torch.nn.functional.silu(lin(y, p + "mlp.gate_proj")) * lin(y, p + "mlp.up_proj"),
                    p + "mlp.down_proj")
    x = rms(x, "model.norm")
    head = sd["model.embed_tokens.weight"] if c.get("tie_embeddings") else sd["lm_head.weight"]
    return x @ head.T
