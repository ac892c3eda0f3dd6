"""bench/random_baselines.py: torch making what bench/random_bench.lua makes (a Linear(4096, 4096)
layer, randn(2048, 2048), rand(12000, 12000), arange(2**22)); median wall-clock ms of --runs runs
after one warm-up, printed as "figure <name>_torch <ms> ms" lines."""
import argparse
import statistics
import time

parser = argparse.ArgumentParser()
parser.add_argument("--threads", type=int, default=1)
parser.add_argument("--runs", type=int, default=7)
args = parser.parse_args()

try:
    import torch
except ImportError:
    print("skip torch not installed")
    raise SystemExit(0)

torch.set_num_threads(args.threads)
ROWS = [
    ("linear", lambda: torch.nn.Linear(4096, 4096)),
    ("randn", lambda: torch.randn(2048, 2048)),
    ("rand_big", lambda: torch.rand(12000, 12000)),
    ("arange", lambda: torch.arange(2**22)),
]
for name, make in ROWS:
    times = []
    for i in range(args.runs + 1):
        start = time.perf_counter()
        make()
        if i > 0:
            times.append(time.perf_counter() - start)
    print(f"figure {name}_torch {statistics.median(times) * 1e3:.6g} ms")
