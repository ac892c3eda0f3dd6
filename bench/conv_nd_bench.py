# bench/conv_nd_bench.py — PyTorch's figures for bench/conv_nd_bench.lua (one thread, best of 4).
import time
import torch
import torch.nn.functional as F

torch.set_num_threads(1)
for name, xs, ws, pad in [("conv1d x(8,32,1024) w(64,32,5) pad 2", (8, 32, 1024), (64, 32, 5), 2),
                          ("conv3d x(2,16,16,32,32) w(32,16,3,3,3) pad 1", (2, 16, 16, 32, 32), (32, 16, 3, 3, 3), 1)]:
    x, w = torch.rand(xs), torch.rand(ws)
    conv = F.conv1d if len(xs) == 3 else F.conv3d
    best = float("inf")
    for _ in range(4):
        t0 = time.perf_counter()
        conv(x, w, padding=pad)
        best = min(best, time.perf_counter() - t0)
    print("%-48s %8.2f ms" % (name, best * 1e3))
