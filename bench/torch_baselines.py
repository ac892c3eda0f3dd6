"""torch_baselines.py — torch's figures for the kernel optimizer's benchmarks, the same work as
bench/gemm_baselines.c measured through torch on this machine. Layer: bench.

    /usr/bin/python3 bench/torch_baselines.py [--threads T] [--runs R] [part ...]

Parts (default all):
  conv2d      torch.nn.functional.conv2d, batch 8, 32 -> 64 channels, 3x3, 56x56, padding 1,
              stride 1, NCHW float32
  gpt2_layer  torch.nn.TransformerEncoderLayer(d_model=768, nhead=12, dim_feedforward=3072,
              dropout=0.0, activation='gelu', batch_first=True, norm_first=True) in eval mode on
              a (1, 128, 768) float32 input
  sgemm       torch.mm of N x N float32 into a reused output, N = 256 512 1024 2048

Run it with Debian's python (/usr/bin/python3, which has python3-torch; torch there uses
OpenBLAS, so OPENBLAS_CORETYPE applies as for gemm_baselines). torch.set_num_threads(T) and
OPENBLAS_NUM_THREADS=T (torch does not pass its threads on to OpenBLAS), T defaulting to the
cores; everything under torch.no_grad(). Each figure is the median of R runs (default 11)
after a warm-up (at least 3 calls and 50 ms), wall clock (time.perf_counter), printed as lines
"figure <name> <value> <unit>" (as bench/cpu_bench.lua's children print them). Without torch
it prints "skip torch not installed" and exits 0.
"""
import argparse
import os
import sys
import time

PARTS = ("conv2d", "gpt2_layer", "sgemm")
WARMUP_CALLS, WARMUP_SECONDS = 3, 0.05


def figure(name, value, unit):
    print("figure %s %.6g %s" % (name, value, unit), flush=True)


def median_seconds(fn, runs):
    start, calls = time.perf_counter(), 0
    while calls < WARMUP_CALLS or time.perf_counter() - start < WARMUP_SECONDS:
        fn()
        calls += 1
    times = []
    for _ in range(runs):
        t0 = time.perf_counter()
        fn()
        times.append(time.perf_counter() - t0)
    times.sort()
    return times[len(times) // 2]


def bench_conv2d(torch, runs):
    batch, cin, cout, hw, k = 8, 32, 64, 56, 3
    x = torch.randn(batch, cin, hw, hw)
    w = torch.randn(cout, cin, k, k)
    s = median_seconds(lambda: torch.nn.functional.conv2d(x, w, padding=1, stride=1), runs)
    figure("conv2d_torch_ms", s * 1e3, "ms")
    figure("conv2d_torch_gflops", 2.0 * batch * cout * hw * hw * cin * k * k / s * 1e-9, "GFLOPS")


def bench_gpt2_layer(torch, runs):
    layer = torch.nn.TransformerEncoderLayer(d_model=768, nhead=12, dim_feedforward=3072,
                                             dropout=0.0, activation="gelu", batch_first=True,
                                             norm_first=True)
    layer.eval()
    x = torch.randn(1, 128, 768)
    s = median_seconds(lambda: layer(x), runs)
    figure("gpt2_layer_torch_ms", s * 1e3, "ms")


def bench_sgemm(torch, runs):
    for n in (256, 512, 1024, 2048):
        a, b, c = torch.randn(n, n), torch.randn(n, n), torch.empty(n, n)
        s = median_seconds(lambda: torch.mm(a, b, out=c), runs)
        figure("torch_mm_N%d_ms" % n, s * 1e3, "ms")
        figure("torch_mm_N%d_gflops" % n, 2.0 * n ** 3 / s * 1e-9, "GFLOPS")


def main():
    parser = argparse.ArgumentParser(description="torch's figures for the kernel benchmarks")
    parser.add_argument("--threads", type=int, default=os.cpu_count() or 1)
    parser.add_argument("--runs", type=int, default=11)
    parser.add_argument("parts", nargs="*", metavar="part", help=" ".join(PARTS) + " (default all)")
    args = parser.parse_args()
    if args.threads < 1 or args.runs < 1:
        parser.error("--threads and --runs must be at least 1")
    for part in args.parts:
        if part not in PARTS:
            parser.error("unknown part %r (parts: %s)" % (part, " ".join(PARTS)))
    parts = args.parts or PARTS
    # torch.set_num_threads does not reach OpenBLAS (Debian's torch calls it as a plain BLAS,
    # which would run torch.mm on every core): OpenBLAS reads its threads when it is loaded.
    os.environ["OPENBLAS_NUM_THREADS"] = str(args.threads)
    try:
        import torch
    except ImportError:
        print("skip torch not installed")
        return 0
    torch.set_num_threads(args.threads)
    print("torch %s, %d threads, %d runs" % (torch.__version__, torch.get_num_threads(), args.runs),
          file=sys.stderr)
    benches = {"conv2d": bench_conv2d, "gpt2_layer": bench_gpt2_layer, "sgemm": bench_sgemm}
    with torch.no_grad():
        for part in parts:
            benches[part](torch, args.runs)
    return 0


if __name__ == "__main__":
    sys.exit(main())
