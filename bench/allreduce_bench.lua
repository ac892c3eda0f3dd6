-- bench/allreduce_bench.lua — tcl.distributed.all_reduce against MPI's own MPI_Allreduce
-- (bench/mpi_allreduce_ref.c, osu-style), 2 ranks on this machine, float32 sum from 1 KiB to
-- 64 MiB. Per size: the median time of BENCH_RUNS calls (default 50; a quarter of that from
-- 8 MiB), each after an untimed barrier, the larger of the two ranks' medians; then the bus
-- bandwidth 2(n-1)/n * bytes / time (n = 2 ranks: bytes / time) and tcl's share of MPI's. The
-- machine may be shared: BENCH_ROUNDS (default 3) rounds alternate the two jobs and each size
-- keeps its best median of the rounds. tcl's row is the call into a tensor the caller keeps
-- (all_reduce(x, op, { out = y }), as DistributedDataParallel's buckets and torch's in-place
-- all_reduce); also timed: the call that returns a new tensor each time, the raw binding
-- (tcl.mpi.all_reduce over runtime Buffers, no tensors), which shows what the tensor layer adds,
-- and torch.distributed's all_reduce over gloo (bench/torch_allreduce_ref.py) when python3 has
-- torch: the call a PyTorch user makes on CPUs ("tcl / torch": how many times faster tcl is).
--
--   cmake -S . -B build-rel -DCMAKE_BUILD_TYPE=Release && cmake --build build-rel -j
--   build-rel/tcl bench/allreduce_bench.lua            (BENCH_BUILD: another build's tcl program)
--
-- The program is both the driver (no argument) and each rank of a tcl job ("rank <bytes>").
local support = require "bench.support"
local median, quote = support.median, support.shell_quote

local MIN_BYTES, MAX_BYTES = 1 << 10, 64 << 20
local RUNS = tonumber(os.getenv("BENCH_RUNS") or "") or 50
local ROUNDS = tonumber(os.getenv("BENCH_ROUNDS") or "") or 3

local function runs_for(bytes)
  return math.max(10, bytes >= (8 << 20) and RUNS // 4 or RUNS)
end

-- One rank of the tcl job for one size: prints "tcl <bytes> <s>", "fresh <bytes> <s>" and
-- "binding <bytes> <s>" (rank 1). Each size runs in processes of its own, so that one size's
-- buffers do not crowd the CPU's cache of freed buffers for the next.
local function rank_main(size_bytes)
  local tcl = require "tcl"
  local dist = tcl.distributed
  local buffers = require "tcl.schedule.buffers"
  local mpi = require "tcl.mpi"
  local T = tcl.Tensor
  local function slowest(seconds) -- the larger of the ranks' medians
    return dist.all_reduce(T({ seconds }, { dtype = "float64" }), "max"):item()
  end
  -- The medians of one size: dist.all_reduce on a tensor into a tensor of the caller's
  -- ({ out = y }: what DistributedDataParallel does, and torch's in-place all_reduce), the same
  -- returning a new tensor, and the binding on the storages.
  local function measure(bytes)
    local n = bytes // 4
    local x = T.full({ n }, dist.rank(), { dtype = "float32" }):realize()
    local y = T.zeros({ n }, { dtype = "float32" }):realize()
    local storage = buffers.get(buffers.viewed(x.uop))
    local out = buffers.get(buffers.viewed(y.uop))
    local into, fresh, raw = {}, {}, {}
    -- the call into y and the binding alternate, so that a slow spell of the shared machine
    -- falls on both
    for i = -2, runs_for(bytes) do
      dist.barrier()
      local start = tcl.clock()
      dist.all_reduce(x, "sum", { out = y })
      if i >= 1 then into[i] = tcl.clock() - start end
      dist.barrier()
      start = tcl.clock()
      mpi.all_reduce(storage, "sum", out)
      if i >= 1 then raw[i] = tcl.clock() - start end
    end
    for i = -2, runs_for(bytes) do
      -- the last result's buffer back to the cache (untimed): Lua's collector would otherwise
      -- free it at some later call, and the next result take fresh pages (which the "into"
      -- column shows a caller avoids). A full collection leaves the caches cold: one untimed
      -- reduction warms them again, as the C loop's previous call does.
      collectgarbage()
      buffers.collect()
      collectgarbage()
      mpi.all_reduce(storage, "sum", out)
      dist.barrier()
      local start = tcl.clock()
      dist.all_reduce(x) -- the result is dropped at once
      if i >= 1 then fresh[i] = tcl.clock() - start end
    end
    local check = y:max():item()
    assert(check == 3, "the sum is " .. check .. ", not 3")
    return slowest(median(into)), slowest(median(fresh)), slowest(median(raw))
  end
  local into_s, fresh_s, raw_s = measure(size_bytes)
  if dist.rank() == 1 then
    print(string.format("tcl %d %.9g", size_bytes, into_s))
    print(string.format("fresh %d %.9g", size_bytes, fresh_s))
    print(string.format("binding %d %.9g", size_bytes, raw_s))
  end
end

local function run(command) return support.run(command, "allreduce_bench") end

local function driver()
  local build = os.getenv("BENCH_BUILD") or "build-rel"
  local tcl_bin = build .. "/tcl"
  if not io.open(tcl_bin, "rb") then error("allreduce_bench: no " .. tcl_bin .. " (BENCH_BUILD names the build)", 0) end
  local ref = os.tmpname()
  run("mpicc -O2 -o " .. quote(ref) .. " bench/mpi_allreduce_ref.c")
  local launch = "mpirun --allow-run-as-root --oversubscribe -np 2 "
  local best = { ref = {}, tcl = {}, fresh = {}, binding = {}, torch = {} }
  -- torch.distributed (gloo) where python3 has torch: what a PyTorch user would run on CPUs
  local python = os.getenv("PYTHON") or "/usr/bin/python3"
  local has_torch = os.execute(quote(python) .. " -c 'import torch.distributed' 2>/dev/null") == true
  local function keep(out)
    for kind, bytes, seconds in out:gmatch("(%a+) (%d+) ([%d.e+-]+)") do
      if best[kind] then
        bytes, seconds = tonumber(bytes), tonumber(seconds)
        best[kind][bytes] = math.min(best[kind][bytes] or math.huge, seconds)
      end
    end
  end
  for round = 1, ROUNDS do
    io.stderr:write(string.format("allreduce_bench: round %d of %d\n", round, ROUNDS))
    if has_torch then keep(run("BENCH_RUNS=" .. RUNS .. " " .. quote(python) .. " bench/torch_allreduce_ref.py")) end
    local bytes = MIN_BYTES
    while bytes <= MAX_BYTES do
      -- MPI's loop and tcl's, each in processes of their own for this size, one after the other:
      -- how fast a job runs on this VM changes from launch to launch (where its two ranks land
      -- on the host: one ref process for every size got 1 MiB in 104 us in one run, 167-201 us
      -- in the next two), so neither side keeps one lucky launch for every size
      keep(run(launch .. quote(ref) .. " " .. RUNS .. " " .. bytes))
      keep(run(launch .. "-x TCL_LUA_DIR -x BENCH_RUNS " .. quote(tcl_bin) .. " bench/allreduce_bench.lua rank "
        .. bytes))
      bytes = bytes * 2
    end
  end
  os.remove(ref)
  print(string.format("all_reduce (sum, float32), 2 ranks, median of %d calls (from 8 MiB: %d), best of %d rounds",
    runs_for(1), runs_for(8 << 20), ROUNDS))
  print("| size | MPI_Allreduce: us (GB/s) | all_reduce(x, op, { out = y }): us (GB/s) | tcl / MPI "
    .. "| all_reduce(x), a new tensor: us (GB/s) | new / MPI | binding alone: us (GB/s) "
    .. "| torch.distributed (gloo): us | tcl / torch |")
  print("|---|---|---|---|---|---|---|---|---|")
  local bytes = MIN_BYTES
  while bytes <= MAX_BYTES do
    local r, t, f, b, pt = best.ref[bytes], best.tcl[bytes], best.fresh[bytes], best.binding[bytes], best.torch[bytes]
    local function gbs(s) return bytes / s / 1e9 end -- bus bandwidth, 2 ranks: 2(n-1)/n = 1
    local size = bytes >= (1 << 20) and string.format("%d MiB", bytes >> 20) or string.format("%d KiB", bytes >> 10)
    local torch_cells = pt and string.format("%.1f | %.1fx", pt * 1e6, pt / t) or "(no torch) | -"
    print(string.format("| %s | %.1f (%.2f) | %.1f (%.2f) | %.0f %% | %.1f (%.2f) | %.0f %% | %.1f (%.2f) | %s |", size,
      r * 1e6, gbs(r), t * 1e6, gbs(t), 100 * r / t, f * 1e6, gbs(f), 100 * r / f, b * 1e6, gbs(b), torch_cells))
    bytes = bytes * 2
  end
end

local mode, size = ...
if mode == "rank" then rank_main(math.tointeger(tonumber(size))) else driver() end
