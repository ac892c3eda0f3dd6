"""train_baselines.py — the alternatives bench/train_bench.lua compares tcl's training with, on
this machine. Layer: bench.

    /usr/bin/python3 bench/train_baselines.py [--threads T] [--runs R] [part ...]

Parts (default all):
  mlp_numpy   one train step of an MLP 784-256-10 (forward, softmax cross-entropy, backward,
              SGD update) written by hand in numpy (matmuls through OpenBLAS), batch 128
  mlp_torch   the same step with torch.nn / torch.optim.SGD, batch 128
  cnn_torch   one train step of examples/fashion_mnist.lua's CNN (conv 3x3 32, batchnorm, relu,
              maxpool 2, conv 3x3 64, batchnorm, relu, maxpool 2, linear 1600 -> 10) with
              torch.optim.Adam, batch 128
  gpt_torch   one train step of nn.TransformerEncoderLayer(256, 4, 1024, dropout=0, GELU,
              batch_first, norm_first) on (8, 128, 256) with a causal mask, loss mean(out^2),
              torch.optim.AdamW (bench/train_bench.lua's gpt_step)

Each figure is the median of R runs (default 21) after a warm-up, wall clock, printed as
"figure <name> <value> <unit>". Run with Debian's python (/usr/bin/python3: python3-numpy and
python3-torch); OPENBLAS_NUM_THREADS and torch.set_num_threads are set to T (default: the
cores). A part whose library is missing prints "skip <part> <why>".
"""
import argparse
import os
import sys
import time

PARTS = ("mlp_numpy", "mlp_torch", "cnn_torch", "gpt_torch")
BATCH, LR = 128, 0.01


def figure(name, value, unit):
    print("figure %s %.6g %s" % (name, value, unit), flush=True)


def median_seconds(fn, runs):
    for _ in range(5):
        fn()
    times = []
    for _ in range(runs):
        start = time.perf_counter()
        fn()
        times.append(time.perf_counter() - start)
    times.sort()
    return times[len(times) // 2]


def mlp_numpy(runs):
    import numpy as np
    rng = np.random.default_rng(0)
    x = rng.standard_normal((BATCH, 784), dtype=np.float32)
    labels = rng.integers(0, 10, BATCH)
    onehot = np.zeros((BATCH, 10), np.float32)
    onehot[np.arange(BATCH), labels] = 1
    w1 = (rng.standard_normal((784, 256)) * 0.03).astype(np.float32)
    b1 = np.zeros(256, np.float32)
    w2 = (rng.standard_normal((256, 10)) * 0.06).astype(np.float32)
    b2 = np.zeros(10, np.float32)

    def step():
        nonlocal w1, b1, w2, b2
        h = x @ w1 + b1
        a = np.maximum(h, 0)
        z = a @ w2 + b2
        z = z - z.max(axis=1, keepdims=True)
        e = np.exp(z)
        p = e / e.sum(axis=1, keepdims=True)
        loss = -np.log((p * onehot).sum(axis=1)).mean()
        dz = (p - onehot) / BATCH
        dw2 = a.T @ dz
        db2 = dz.sum(axis=0)
        dh = (dz @ w2.T) * (h > 0)
        dw1 = x.T @ dh
        db1 = dh.sum(axis=0)
        w1 -= LR * dw1
        b1 -= LR * db1
        w2 -= LR * dw2
        b2 -= LR * db2
        return loss

    figure("mlp_step_numpy", median_seconds(step, runs) * 1e3, "ms")


def torch_step(model, opt, x, y):
    """One train step of model on (x, y) with cross-entropy and opt, as a function."""
    import torch

    def step():
        opt.zero_grad()
        loss = torch.nn.functional.cross_entropy(model(x), y)
        loss.backward()
        opt.step()
        return loss
    return step


def mlp_torch(runs):
    import torch
    torch.manual_seed(0)
    model = torch.nn.Sequential(torch.nn.Linear(784, 256), torch.nn.ReLU(), torch.nn.Linear(256, 10))
    opt = torch.optim.SGD(model.parameters(), lr=LR)
    x = torch.randn(BATCH, 784)
    y = torch.randint(0, 10, (BATCH,))

    figure("mlp_step_torch", median_seconds(torch_step(model, opt, x, y), runs) * 1e3, "ms")


def cnn_torch(runs):
    import torch
    torch.manual_seed(0)
    nn = torch.nn
    model = nn.Sequential(nn.Conv2d(1, 32, 3), nn.BatchNorm2d(32), nn.ReLU(), nn.MaxPool2d(2),
                          nn.Conv2d(32, 64, 3), nn.BatchNorm2d(64), nn.ReLU(), nn.MaxPool2d(2),
                          nn.Flatten(), nn.Linear(64 * 5 * 5, 10))
    model.train()
    opt = torch.optim.Adam(model.parameters(), lr=1e-3)
    x = torch.randn(BATCH, 1, 28, 28)
    y = torch.randint(0, 10, (BATCH,))

    figure("cnn_step_torch", median_seconds(torch_step(model, opt, x, y), runs) * 1e3, "ms")


def gpt_torch(runs):
    import torch
    torch.manual_seed(0)
    layer = torch.nn.TransformerEncoderLayer(256, 4, 1024, dropout=0.0, activation="gelu", batch_first=True,
                                             norm_first=True)
    layer.train()
    opt = torch.optim.AdamW(layer.parameters(), lr=1e-3)
    x = torch.randn(8, 128, 256)
    mask = torch.nn.Transformer.generate_square_subsequent_mask(128)

    def step():
        opt.zero_grad()
        loss = layer(x, src_mask=mask).square().mean()
        loss.backward()
        opt.step()
        return loss

    figure("gpt_step_torch", median_seconds(step, runs) * 1e3, "ms")


def main():
    parser = argparse.ArgumentParser()
    parser.add_argument("--threads", type=int, default=os.cpu_count())
    parser.add_argument("--runs", type=int, default=21)
    parser.add_argument("parts", nargs="*", default=list(PARTS))
    args = parser.parse_args()
    os.environ["OPENBLAS_NUM_THREADS"] = str(args.threads)
    for part in args.parts:
        if part not in PARTS:
            sys.exit("train_baselines.py: unknown part %s (known: %s)" % (part, ", ".join(PARTS)))
        try:
            if part != "mlp_numpy":
                import torch
                torch.set_num_threads(args.threads)
            globals()[part](args.runs)
        except ImportError as e:
            print("skip %s %s" % (part, e), flush=True)


if __name__ == "__main__":
    main()
