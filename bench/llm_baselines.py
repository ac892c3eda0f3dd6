"""llm_baselines.py — the alternative bench/llm_bench.lua compares tcl's language-model inference
with: GPT-2 (124M configuration, random float32 weights) written with torch ops, decoding eagerly
with a key/value cache as Hugging Face's model(x, past_key_values) does. Layer: bench.

    /usr/bin/python3 bench/llm_baselines.py [--threads T] [--runs R] [part ...]

Parts (default all):
  decode_128    one decoding step of the token at position 128 (the cache holds the 127 before it)
  decode_1024   the same at position 1024, the last of GPT-2's context
  prompt_512    the forward of a 512-token prompt in one batch (filling the cache)

Decoding is reported in tokens per second (1 / the median step), the prompt in ms and tokens per
second. Each figure is the median of R runs (default 21) after a warm-up, wall clock, printed as
"figure <name> <value> <unit>". torch.set_num_threads(T) (default: the cores), with
OMP_WAIT_POLICY=PASSIVE unless it is set. Without torch every part prints "skip <part> <why>".
"""
import argparse
import math
import os
import sys
import time

PARTS = ("decode_128", "decode_1024", "prompt_512")
VOCAB, CONTEXT, DIM, LAYERS, HEADS = 50257, 1024, 768, 12, 12


def figure(name, value, unit):
    print("figure %s %.6g %s" % (name, value, unit), flush=True)


def median_seconds(fn, runs):
    for _ in range(3):
        fn()
    times = []
    for _ in range(runs):
        start = time.perf_counter()
        fn()
        times.append(time.perf_counter() - start)
    times.sort()
    return times[len(times) // 2]


class GPT2:
    """GPT-2 in torch ops, in Hugging Face's layout (Conv1D weights are (in, out))."""

    def __init__(self, torch):
        self.t = torch
        g = torch.Generator().manual_seed(0)

        def randn(*shape, std=0.02):
            return torch.randn(*shape, generator=g) * std
        self.wte, self.wpe = randn(VOCAB, DIM), randn(CONTEXT, DIM, std=0.01)
        self.layers = []
        for _ in range(LAYERS):
            self.layers.append({
                "ln1": (torch.ones(DIM), torch.zeros(DIM)),
                "attn": (randn(DIM, 3 * DIM), torch.zeros(3 * DIM)),
                "proj": (randn(DIM, DIM), torch.zeros(DIM)),
                "ln2": (torch.ones(DIM), torch.zeros(DIM)),
                "fc": (randn(DIM, 4 * DIM), torch.zeros(4 * DIM)),
                "fc_proj": (randn(4 * DIM, DIM), torch.zeros(DIM)),
            })
        self.ln_f = (torch.ones(DIM), torch.zeros(DIM))

    def forward(self, tokens, past):
        """Logits of the last position and the new cache; past: a list of (k, v) or None."""
        t, F = self.t, self.t.nn.functional
        T = tokens.shape[1]
        start = 0 if past is None else past[0][0].shape[2]
        x = self.wte[tokens] + self.wpe[start:start + T]
        new_past = []
        for i, L in enumerate(self.layers):
            h = F.layer_norm(x, (DIM,), *L["ln1"])
            qkv = t.addmm(L["attn"][1], h.view(-1, DIM), L["attn"][0]).view(1, T, 3 * DIM)
            q, k, v = qkv.split(DIM, dim=2)
            q, k, v = (z.view(1, T, HEADS, DIM // HEADS).transpose(1, 2) for z in (q, k, v))
            if past is not None:
                k = t.cat((past[i][0], k), dim=2)
                v = t.cat((past[i][1], v), dim=2)
            new_past.append((k, v))
            scores = (q @ k.transpose(2, 3)) / math.sqrt(DIM // HEADS)
            if past is None and T > 1:  # causal within the prompt
                scores = scores.masked_fill(t.ones(T, T, dtype=t.bool).triu(1), float("-inf"))
            y = t.softmax(scores, dim=-1) @ v
            y = y.transpose(1, 2).reshape(T, DIM)
            x = x + t.addmm(L["proj"][1], y, L["proj"][0]).view(1, T, DIM)
            h = F.layer_norm(x, (DIM,), *L["ln2"])
            h = F.gelu(t.addmm(L["fc"][1], h.view(-1, DIM), L["fc"][0]), approximate="tanh")
            x = x + t.addmm(L["fc_proj"][1], h, L["fc_proj"][0]).view(1, T, DIM)
        x = F.layer_norm(x[:, -1, :], (DIM,), *self.ln_f)
        return x @ self.wte.t(), new_past


def decode(torch, model, context, runs, name):
    g = torch.Generator().manual_seed(1)
    past = [(torch.randn(1, HEADS, context - 1, DIM // HEADS, generator=g),
             torch.randn(1, HEADS, context - 1, DIM // HEADS, generator=g)) for _ in range(LAYERS)]
    token = torch.tensor([[11]])

    def step():
        with torch.no_grad():
            logits, _ = model.forward(token, past)  # the cache stays as it is: every step decodes position `context`
            return logits.argmax()
    figure(name, 1.0 / median_seconds(step, runs), "tok/s")


def prompt(torch, model, length, runs, name):
    tokens = torch.randint(0, VOCAB, (1, length), generator=torch.Generator().manual_seed(2))

    def step():
        with torch.no_grad():
            return model.forward(tokens, None)[0].argmax()
    seconds = median_seconds(step, runs)
    figure(name + "_ms", seconds * 1e3, "ms")
    figure(name, length / seconds, "tok/s")


def main():
    parser = argparse.ArgumentParser()
    parser.add_argument("--threads", type=int, default=os.cpu_count())
    parser.add_argument("--runs", type=int, default=21)
    parser.add_argument("parts", nargs="*", default=list(PARTS))
    args = parser.parse_args()
    for part in args.parts:
        if part not in PARTS:
            sys.exit("llm_baselines.py: unknown part '%s' (known: %s)" % (part, ", ".join(PARTS)))
    # torch's OpenMP threads spin while they wait by default; on this 2-core machine they then
    # take the cores from OpenBLAS's own threads (2 threads ran slower than 1): passive waiting
    # is what a user tuning torch here would set, so it is the stronger alternative
    os.environ.setdefault("OMP_WAIT_POLICY", "PASSIVE")
    try:
        import torch
    except ImportError as e:
        for part in args.parts:
            print("skip %s torch is missing (%s)" % (part, e), flush=True)
        return
    torch.set_num_threads(args.threads)
    model = GPT2(torch)
    for part in args.parts:
        if part.startswith("decode_"):
            decode(torch, model, int(part.split("_")[1]), args.runs, "gpt2_%s_torch" % part)
        else:
            prompt(torch, model, int(part.split("_")[1]), max(5, args.runs // 4), "gpt2_%s_torch" % part)


if __name__ == "__main__":
    main()
