-- bench/distributed_bench.lua — data-parallel training (issue 39): one epoch of the
-- Fashion-MNIST MLP (examples/train_distributed.lua, 60000 samples, global batch 128 or
-- BENCH_BATCH, 468 steps at 128) as 1 process of 1 thread against `mpirun -np 2` processes of
-- 1 thread each (each rank half of every global batch), and the all-reduce of the MLP's gradient bucket
-- (203530 float32, 814 KB) between the 2 ranks: the communication each step adds.
--
--   build-debug/tcl bench/distributed_bench.lua          (TCL_LUA_DIR=lua; BENCH_BUILD=build-rel for Release)
--
-- Each configuration runs BENCH_RUNS times (default 3) in fresh processes; a run trains 2
-- epochs and its figure is the second epoch's seconds as rank 1 prints them (the first
-- compiles), with rank 1's CPU seconds beside them (a loaded machine stretches the wall
-- clock). Printed: the medians t1 (1 process) and t2 (2 processes), the speedup t1 / t2
-- and the scaling efficiency t1 / (2 x t2): 1 when two processes each doing half of every
-- step take half the time, 0.5 when they take as long as one. A third configuration, 2
-- processes with small gradient buckets (BENCH_OVERLAP_MB, --bucket of the example), starts
-- each bucket's all-reduce while the rest of the backward runs (the wrapper's overlap). The all-reduce figure is the
-- median (and fastest) of 50 calls of tcl.distributed.all_reduce on the bucket into a tensor
-- kept between calls (as the wrapper does), after 5 warm-ups. The fastest runs are printed
-- too: on a shared machine two ranks that must meet at every step lose more to other
-- processes than one process does.
-- Last, the parts of one step (phases_child) in 1 process and in 2: the profile that says where
-- a 2-rank step's time goes. Internal modes: `allreduce_child` and `phases_child`.
local tcl = require "tcl"

local RUNS = tonumber(os.getenv("BENCH_RUNS") or "") or 3
local BUILD = os.getenv("BENCH_BUILD") or "build-debug"
local BATCH = math.tointeger(tonumber(os.getenv("BENCH_BATCH") or "")) or 128 -- the global batch
local STEPS = 60000 // BATCH
local BUCKET = 784 * 256 + 256 + 256 * 10 + 10
local self_path = arg and arg[0] or "bench/distributed_bench.lua"

local support = require "bench.support"
local median, q = support.median, support.shell_quote

if arg and arg[1] == "allreduce_child" then
  local dist = tcl.distributed
  local bucket = tcl.Tensor.randn(BUCKET):realize()
  -- into a tensor kept from call to call, as DistributedDataParallel averages its buckets
  local averaged = tcl.Tensor.zeros({ BUCKET }):realize()
  for _ = 1, 5 do dist.all_reduce(bucket, "mean", { out = averaged }) end
  local times = {}
  for i = 1, 50 do
    dist.barrier()
    local start = tcl.clock()
    dist.all_reduce(bucket, "mean", { out = averaged })
    times[i] = tcl.clock() - start
  end
  table.sort(times)
  if dist.rank() == 1 then print(string.format("allreduce_ms %.4f %.4f", 1000 * median(times), 1000 * times[1])) end
  return
end

-- The parts of one jitted data-parallel step (the wrapper's train_step, spelt out here to time
-- them), on random data of the MLP's shapes: the plan of the forward, backward and bucket; the
-- wait for the other rank (a barrier: the ranks' imbalance); the all-reduce of the bucket into
-- the wrapper's buffer; the plan of the update; reading the loss and the hits.
if arg and arg[1] == "phases_child" then
  local Tensor, nn, dist = tcl.Tensor, tcl.nn, tcl.distributed
  local rows = BATCH // dist.world_size()
  Tensor.manual_seed(0)
  local model = nn.Sequential { nn.Linear(784, 256), Tensor.relu, nn.Linear(256, 10) }
  local ddp = dist.DistributedDataParallel(model)
  local opt = tcl.optim.Adam(ddp:parameters(), { lr = 1e-3 })
  local backward = tcl.jit(function(x, y)
    local logits = nn.train(function() return ddp(x) end)
    local loss = logits:cross_entropy(y)
    opt:zero_grad()
    loss:backward()
    return loss, logits:argmax(2):eq(y):sum(), ddp:gradient_buckets()[1]
  end)
  local update = tcl.jit(function(bucket)
    ddp:set_gradient_buckets({ bucket })
    return opt:step(bucket) -- a plan returns tensors: opt:step returns its arguments
  end)
  local names = { "backward plan", "wait for the other rank", "all-reduce", "update plan", "loss and hits" }
  local spent = {}
  local function step(x, y, timed)
    local marks = { tcl.clock() }
    local loss, hits, bucket = backward(x, y)
    Tensor.realize_all(loss, hits, bucket)
    marks[2] = tcl.clock()
    if dist.world_size() > 1 then dist.barrier() end
    marks[3] = tcl.clock()
    local averaged = ddp:all_reduce_buckets({ bucket })
    marks[4] = tcl.clock()
    update(averaged[1])
    marks[5] = tcl.clock()
    loss:item()
    hits:item()
    marks[6] = tcl.clock()
    if timed then for i = 1, 5 do spent[i] = (spent[i] or 0) + marks[i + 1] - marks[i] end end
  end
  local x = Tensor.randn(rows, 784):realize()
  local y = Tensor.randint(1, 11, { rows }):int():realize()
  for _ = 1, 20 do step(x, y, false) end
  local n = 300
  for _ = 1, n do step(x, y, true) end
  if dist.rank() == 1 then
    local total, parts = 0, {}
    for i, name in ipairs(names) do
      total = total + spent[i]
      parts[i] = string.format("%s %.3f", name, 1000 * spent[i] / n)
    end
    print(string.format("phases_ms %.3f (%s)", 1000 * total / n, table.concat(parts, ", ")))
  end
  return
end

local function capture(command) return support.run(command, "distributed_bench") end

local ENV = "TCL_THREADS=1 TCL_LUA_DIR=" .. q(os.getenv("TCL_LUA_DIR") or "lua")
local MPIRUN = "env -u LD_PRELOAD mpirun --allow-run-as-root --oversubscribe -np 2 -x TCL_THREADS=1 -x TCL_LUA_DIR "
-- the bucket size of the overlapping configuration: the MLP's gradients in 3 buckets (its
-- last layer's weight; its last bias and first weight; its first bias), the first ready with 7
-- of the step's kernels still to run
local OVERLAP_MB = os.getenv("BENCH_OVERLAP_MB") or "0.005"
local TRAIN = q(BUILD .. "/tcl") .. " examples/train_distributed.lua --epochs 2 --batch " .. BATCH .. " --test 1"

-- the second epoch's wall-clock and rank 1's CPU seconds
local function epoch_seconds(command)
  local out = capture(command)
  local wall, cpu = out:match("epoch 2/2: [^\n]-, ([%d.]+) s %(rank 1's CPU time ([%d.]+) s%)")
  if not wall then error("no second epoch in:\n" .. out, 0) end
  return tonumber(wall), tonumber(cpu), out:match("gradient buckets: [^\n]+")
end

local one, two, one_cpu, two_cpu, split, split_cpu = {}, {}, {}, {}, {}, {}
local split_stats
for r = 1, RUNS do -- alternating, so a slower spell of the shared machine hits all three
  one[r], one_cpu[r] = epoch_seconds("env " .. ENV .. " " .. TRAIN)
  two[r], two_cpu[r] = epoch_seconds(MPIRUN .. TRAIN)
  split[r], split_cpu[r], split_stats = epoch_seconds(MPIRUN .. TRAIN .. " --bucket " .. OVERLAP_MB)
  io.stderr:write(string.format("run %d: 1 process %.3f s (CPU %.3f), 2 processes %.3f s (CPU %.3f), "
    .. "2 processes overlapping %.3f s (CPU %.3f)\n", r, one[r], one_cpu[r], two[r], two_cpu[r], split[r],
    split_cpu[r]))
end
local t1, t2, t2_split = median(one), median(two), median(split)
local allreduce, fastest = capture(MPIRUN .. q(BUILD .. "/tcl") .. " " .. q(self_path) .. " allreduce_child")
  :match("allreduce_ms ([%d.]+) ([%d.]+)")
local function phases(command)
  return capture(command .. " " .. q(self_path) .. " phases_child"):match("phases_ms ([^\n]+)")
end
local phases_one = phases("env " .. ENV .. " BENCH_BATCH=" .. BATCH .. " " .. q(BUILD .. "/tcl"))
local phases_two = phases(MPIRUN .. "-x BENCH_BATCH=" .. BATCH .. " " .. q(BUILD .. "/tcl"))
print(string.format("MLP epoch (60000 samples, global batch %d, %d steps), TCL_THREADS=1, %s, medians of %d",
  BATCH, STEPS, BUILD, RUNS))
print(string.format("  1 process:   %.3f s (runs: %s; rank 1's CPU s: %s)", t1, table.concat(one, ", "),
  table.concat(one_cpu, ", ")))
print(string.format("  2 processes: %.3f s (runs: %s; rank 1's CPU s: %s)", t2, table.concat(two, ", "),
  table.concat(two_cpu, ", ")))
print(string.format("  speedup t1/t2 %.2f, scaling efficiency t1/(2 t2) %.2f", t1 / t2, t1 / (2 * t2)))
print(string.format("  2 processes, buckets of %s MiB overlapping the backward: %.3f s (runs: %s; rank 1's CPU s: %s); "
  .. "efficiency %.2f; %s", OVERLAP_MB, t2_split, table.concat(split, ", "), table.concat(split_cpu, ", "),
  t1 / (2 * t2_split), split_stats or "?"))
print(string.format("  all-reduce of the gradient bucket (%d float32, %.0f KB) into the wrapper's buffer, 2 ranks: "
  .. "median %s ms (%s s per epoch of %d steps), fastest %s ms", BUCKET, BUCKET * 4 / 1000, allreduce or "?",
  allreduce and string.format("%.3f", tonumber(allreduce) * STEPS / 1000) or "?", STEPS, fastest or "?"))
print(string.format("  fastest runs: 1 process %.3f s, 2 processes %.3f s: t1/(2 t2) %.2f", math.min(table.unpack(one)),
  math.min(table.unpack(two)), math.min(table.unpack(one)) / (2 * math.min(table.unpack(two)))))
print("  one step's parts, ms per step (random data of the same shapes, 300 steps after 20):")
print("    1 process:   " .. (phases_one or "?"))
print("    2 processes: " .. (phases_two or "?"))
