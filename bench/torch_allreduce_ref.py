"""bench/torch_allreduce_ref.py — torch.distributed's all_reduce (the gloo backend, what a
PyTorch user runs on CPUs) over the sizes of bench/allreduce_bench.lua, timed the same way:
per size 3 untimed calls, then BENCH_RUNS calls (a quarter of that from 8 MiB, at least 10),
each after an untimed barrier, and the larger of the two ranks' medians.

    python3 bench/torch_allreduce_ref.py            (starts its 2 ranks; prints "torch <bytes> <s>")

allreduce_bench.lua runs it when torch is installed (python3-torch)."""
import os
import socket
import statistics
import sys
import time

MIN_BYTES, MAX_BYTES = 1 << 10, 64 << 20


def runs_for(nbytes, runs):
    return max(10, runs // 4 if nbytes >= (8 << 20) else runs)


def rank_main(rank, port, runs):
    import torch
    import torch.distributed as dist

    torch.set_num_threads(1)
    dist.init_process_group("gloo", init_method=f"tcp://127.0.0.1:{port}", rank=rank, world_size=2)
    nbytes = MIN_BYTES
    while nbytes <= MAX_BYTES:
        x = torch.full((nbytes // 4,), float(rank + 1), dtype=torch.float32)
        for _ in range(3):
            dist.all_reduce(x)
        times = []
        for _ in range(runs_for(nbytes, runs)):
            x.fill_(float(rank + 1))  # in place: the sum must stay 3, as in tcl's check
            dist.barrier()
            start = time.perf_counter()
            dist.all_reduce(x)
            times.append(time.perf_counter() - start)
        assert float(x.max()) == 3.0, f"the sum is {float(x.max())}, not 3"
        slowest = torch.tensor([statistics.median_low(times)], dtype=torch.float64)
        dist.all_reduce(slowest, op=dist.ReduceOp.MAX)
        if rank == 0:
            print(f"torch {nbytes} {slowest.item():.9g}", flush=True)
        nbytes *= 2
    dist.destroy_process_group()


def main():
    runs = int(os.environ.get("BENCH_RUNS", "50"))
    if len(sys.argv) == 3:
        rank_main(int(sys.argv[1]), int(sys.argv[2]), runs)
        return
    with socket.socket() as s:  # a free port for the rendezvous
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    import subprocess

    ranks = [subprocess.Popen([sys.executable, __file__, str(r), str(port)]) for r in range(2)]
    status = [p.wait() for p in ranks]
    if any(status):
        sys.exit(f"torch_allreduce_ref: a rank failed ({status})")


if __name__ == "__main__":
    main()
