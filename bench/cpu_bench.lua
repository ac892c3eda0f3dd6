-- bench/cpu_bench.lua — the CPU device (LLVM-compiled kernels on a thread pool) against the
-- best alternatives measured in the same run: C loops (bench/cpu_baselines.c, -O3 -march=native
-- and OpenMP; its cpu_baselines_fast build adds -ffast-math, so expf/tanhf vectorize through
-- glibc's libmvec: the strongest loop a user would write for softmax, layernorm and GELU),
-- torch when it is installed (python3-torch), and issue 9's and issue 36's targets.
-- Figures are medians. Steady-state figures are jitted calls (tcl.jit: the output buffers
-- are reused, as the C loops reuse theirs), with kernel times from tcl.profile; first-call
-- and compile figures come from fresh processes with CACHELEVEL=0 (nothing from disk).
-- Host-overhead figures time UNprofiled calls (profiling costs a record and a listener call
-- per kernel) and take the kernels' time from separate profiled calls.
--
--   cmake -S . -B build-rel -DCMAKE_BUILD_TYPE=Release && cmake --build build-rel -j
--   LUA_PATH='lua/?.lua;lua/?/init.lua;./?.lua' LUA_CPATH='build-rel/lua/?.so' lua5.4 bench/cpu_bench.lua [part ...]
--
-- Parts (default all): peak ew sum softmax layernorm gelu mlp_first gpt2_compile gpt2_forward
-- gpt2_eager gpt2_eager_nocache replay. Each runs in a child process, twice: with the default
-- threads (the cores) and with THREADS=1, and one table is printed per setting. peak measures
-- the machine in the same run (cpu_baselines fma_peak: FMA chains on every thread; `a*b+1` in C
-- with non-temporal stores: the STREAM-like bandwidth); a row that misses its target names its
-- slowest kernel with its GB/s and GFLOPS against those peaks. sum is measured 5 times (tcl and
-- torch each a median of BENCH_RUNS calls): min / median / max. gpt2_eager is the GPT-2 layer
-- called without tcl.jit on new inputs of the same shapes (the plan cache on);
-- gpt2_eager_nocache the same with TCL_PLAN_CACHE=0. BENCH_BUILD (default build-rel) names the
-- build whose bench/cpu_baselines{,_fast} are the C baselines; BENCH_RUNS (default 11) the runs
-- per median.
local support = require "bench.support"
local shell_quote, capture, figure, median = support.shell_quote, support.capture, support.figure, support.median

local RUNS = tonumber(os.getenv("BENCH_RUNS") or "") or 11
local SUM_REPEATS = 5

local build = os.getenv("BENCH_BUILD") or "build-rel"
local self_path = arg and arg[0] or "bench/cpu_bench.lua"

---------------------------------------------------------------------------------------------
-- the parts (run in a child process: `cpu_bench.lua --child part`); each prints lines
-- "figure <name> <value> <unit>" and "kernel <part> <name> <seconds> <ops> <bytes>" (the
-- slowest kernel of the part's median run) that the parent collects

local parts = {}

-- The C loop's median ms and GB/s; fast: the -ffast-math build.
local function baseline(args, fast)
  local exe = build .. "/bench/cpu_baselines" .. (fast and "_fast" or "")
  local out = capture(shell_quote(exe) .. " " .. args)
  local ms, gbs = out:match("%S+%s+([%d.e+-]+)%s+([%d.e+-]+)")
  return tonumber(ms), tonumber(gbs)
end

local TORCH = [[
import sys, time, torch
torch.set_num_threads(int(sys.argv[2]))
def med(f, runs=int(sys.argv[3])):
    f(); f(); ts = []
    for _ in range(runs):
        t = time.perf_counter(); f(); ts.append(time.perf_counter() - t)
    ts.sort(); return ts[len(ts) // 2]
what = sys.argv[1]
F = torch.nn.functional
with torch.no_grad():
    if what == "sum":
        a = torch.rand(1 << 24)
        for _ in range(int(sys.argv[4])): print("torch_ms", med(lambda: a.sum()) * 1e3)
    elif what == "softmax":
        a = torch.rand(4096, 1024); print("torch_ms", med(lambda: torch.softmax(a, -1)) * 1e3)
    elif what == "layernorm":
        a = torch.rand(4096, 1024); print("torch_ms", med(lambda: F.layer_norm(a, (1024,))) * 1e3)
    elif what == "gelu":
        a = torch.rand(1 << 24) * 8 - 4; print("torch_ms", med(lambda: F.gelu(a, approximate="tanh")) * 1e3)
    elif what == "ew":
        a = torch.rand(1 << 24); b = torch.rand(1 << 24); out = torch.empty(1 << 24)
        print("torch_ms", med(lambda: torch.add(torch.mul(a, b, out=out), 1, out=out)) * 1e3)
    elif what == "conv_rgb":
        x = torch.rand(8, 3, 224, 224); w = torch.rand(64, 3, 7, 7)
        print("torch_ms", med(lambda: F.conv2d(x, w, stride=2, padding=3)) * 1e3)
    elif what == "conv_s2":
        x = torch.rand(8, 64, 56, 56); w = torch.rand(64, 64, 3, 3)
        print("torch_ms", med(lambda: F.conv2d(x, w, stride=2, padding=1)) * 1e3)
        x.requires_grad_(); w.requires_grad_()
        with torch.enable_grad():
            y = F.conv2d(x, w, stride=2, padding=1); gy = torch.rand(y.shape)
            print("torch_ms", med(lambda: torch.autograd.grad(y, (x, w), gy, retain_graph=True)) * 1e3)
    elif what == "gpt2":
        layer = torch.nn.TransformerEncoderLayer(768, 12, 3072, dropout=0.0, activation="gelu",
                                                 batch_first=True, norm_first=True).eval()
        x = torch.rand(1, 128, 768)
        mask = torch.nn.Transformer.generate_square_subsequent_mask(128)
        print("torch_ms", med(lambda: layer(x, src_mask=mask)) * 1e3)
]]

-- torch's median ms (every one when it prints several), or nothing without torch.
local function torch_ms(what, threads, extra)
  local out = capture(support.python() .. " -c " .. shell_quote(TORCH) .. " " .. what .. " " .. threads .. " " .. RUNS
    .. " " .. (extra or ""))
  local all = {}
  for v in out:gmatch("torch_ms%s+([%d.e+-]+)") do all[#all + 1] = tonumber(v) end
  return table.unpack(all)
end

-- "kernel <part> <name> <seconds> <ops> <bytes>" for the kernel that takes the most time.
local function slowest_kernel(part, kernels)
  local worst
  for _, k in ipairs(kernels or {}) do
    if not worst or k.seconds > worst.seconds then worst = k end
  end
  if worst then
    io.write(string.format("kernel %s %s %.6g %.6g %.6g\n", part, worst.name, worst.seconds, worst.ops or 0,
      worst.bytes or 0))
  end
end

function parts.peak()
  local _, gflops = baseline("fma_peak")
  if gflops then figure("peak_fma_gflops", gflops, "GFLOPS") end
  local _, gbs = baseline("ew " .. (1 << 24))
  if gbs then figure("peak_stream_gbs", gbs, "GB/s") end
end

function parts.ew(tcl, threads)
  local n = 1 << 24
  local a, b = tcl.Tensor.rand(n), tcl.Tensor.rand(n)
  tcl.realize(a, b)
  local k, _, kernels = support.jitted_median(tcl, RUNS, function(x, y) return x * y + 1 end, a, b)
  figure("ew_tcl_gbs", 3 * 4 * n / k * 1e-9, "GB/s")
  slowest_kernel("ew", kernels)
  local _, c_gbs = baseline("ew " .. n)
  if c_gbs then figure("ew_c_gbs", c_gbs, "GB/s") end
  local t = torch_ms("ew", threads)
  if t then figure("ew_torch_gbs", 3 * 4 * n / (t * 1e-3) * 1e-9, "GB/s") end
end

-- SUM_REPEATS runs, each a median of RUNS calls, of tcl, the C loop and torch.
function parts.sum(tcl, threads)
  local n = 1 << 24
  local a = tcl.Tensor.rand(n):realize()
  local kernels
  for i = 1, SUM_REPEATS do
    local k, _, ks = support.jitted_median(tcl, RUNS, function(x) return x:sum() end, a)
    figure("sum_tcl_gbs_" .. i, 4 * n / k * 1e-9, "GB/s")
    kernels = kernels or ks
    local _, c_gbs = baseline("sum " .. n)
    if c_gbs then figure("sum_c_gbs_" .. i, c_gbs, "GB/s") end
  end
  slowest_kernel("sum", kernels)
  for i, t in ipairs({ torch_ms("sum", threads, SUM_REPEATS) }) do
    figure("sum_torch_gbs_" .. i, 4 * n / (t * 1e-3) * 1e-9, "GB/s")
  end
end

-- A row-wise op on 4096 x 1024 (softmax, layernorm): tcl, the fast and the IEEE C loops, torch.
local function rowwise(tcl, threads, what, fn)
  local r, c = 4096, 1024
  local a = tcl.Tensor.rand(r, c):realize()
  local k, _, kernels = support.jitted_median(tcl, RUNS, fn, a)
  figure(what .. "_tcl_ms", k * 1e3, "ms")
  slowest_kernel(what, kernels)
  local fast_ms = baseline(what .. " " .. r .. " " .. c, true)
  if fast_ms then figure(what .. "_cfast_ms", fast_ms, "ms") end
  local libm_ms = baseline(what .. " " .. r .. " " .. c)
  if libm_ms then figure(what .. "_clibm_ms", libm_ms, "ms") end
  local t = torch_ms(what, threads)
  if t then figure(what .. "_torch_ms", t, "ms") end
end

function parts.softmax(tcl, threads) rowwise(tcl, threads, "softmax", function(x) return x:softmax(-1) end) end

function parts.layernorm(tcl, threads) rowwise(tcl, threads, "layernorm", function(x) return x:layernorm(-1) end) end

function parts.gelu(tcl, threads)
  local n = 1 << 24
  local a = (tcl.Tensor.rand(n) * 8 - 4):realize()
  local k, _, kernels = support.jitted_median(tcl, RUNS, function(x) return x:gelu() end, a)
  figure("gelu_tcl_ms", k * 1e3, "ms")
  slowest_kernel("gelu", kernels)
  local fast_ms = baseline("gelu " .. n, true)
  if fast_ms then figure("gelu_cfast_ms", fast_ms, "ms") end
  local libm_ms = baseline("gelu " .. n)
  if libm_ms then figure("gelu_clibm_ms", libm_ms, "ms") end
  local t = torch_ms("gelu", threads)
  if t then figure("gelu_torch_ms", t, "ms") end
end

-- The first layer of an RGB network: 8 x 3 x 224 x 224, 64 filters 7 x 7, stride 2, padding 3.
function parts.conv_rgb(tcl, threads)
  local x, w = tcl.Tensor.rand(8, 3, 224, 224):realize(), tcl.Tensor.rand(64, 3, 7, 7):realize()
  local flops = 2 * 8 * 64 * 112 * 112 * 3 * 7 * 7
  local k, _, kernels = support.jitted_median(tcl, RUNS, function(a, b)
    return a:conv2d(b, nil, { stride = 2, padding = 3 })
  end, x, w)
  figure("conv_rgb_tcl_gflops", flops / k * 1e-9, "GFLOPS")
  slowest_kernel("conv_rgb", kernels)
  local t = torch_ms("conv_rgb", threads)
  if t then figure("conv_rgb_torch_gflops", flops / (t * 1e-3) * 1e-9, "GFLOPS") end
end

-- A stride-2 3x3 convolution (8 x 64 x 56 x 56, 64 filters, padding 1): the forward, and the
-- backward (the input's and the weight's gradients of sum(y * g), 2 x the forward's flops)
-- against torch's autograd.grad of the same (its forward done once, outside the timing).
function parts.conv_s2(tcl, threads)
  local Tensor = tcl.Tensor
  local x, w = Tensor.rand(8, 64, 56, 56):realize(), Tensor.rand(64, 64, 3, 3):realize()
  local gy = Tensor.rand(8, 64, 28, 28):realize()
  local flops = 2 * 8 * 64 * 28 * 28 * 64 * 3 * 3
  local opts = { stride = 2, padding = 1 }
  local k = support.jitted_median(tcl, RUNS, function(a, b) return a:conv2d(b, nil, opts) end, x, w)
  figure("conv_s2_fwd_tcl_gflops", flops / k * 1e-9, "GFLOPS")
  x:requires_grad_()
  w:requires_grad_()
  local kb, _, kernels = support.jitted_median(tcl, RUNS, function(a, b, g)
    a:conv2d(b, nil, opts):mul(g):sum():backward()
    local ga, gb = a.grad, b.grad
    a.grad, b.grad = nil, nil
    return ga, gb
  end, x, w, gy)
  figure("conv_s2_bwd_tcl_gflops", 2 * flops / kb * 1e-9, "GFLOPS")
  slowest_kernel("conv_s2_bwd", kernels)
  local tf, tb = torch_ms("conv_s2", threads)
  if tf then figure("conv_s2_fwd_torch_gflops", flops / (tf * 1e-3) * 1e-9, "GFLOPS") end
  if tb then figure("conv_s2_bwd_torch_gflops", 2 * flops / (tb * 1e-3) * 1e-9, "GFLOPS") end
end

-- The first call of the MLP's forward in a fresh process: schedule, compile (nothing from
-- disk), run. The inputs exist before (realized random tensors).
function parts.mlp_first(tcl)
  local models = require "spec.support.models"
  local out = models.mlp(tcl.Tensor, models.MNIST_MLP)
  local start = tcl.clock()
  out:realize()
  figure("mlp_first_tcl_ms", (tcl.clock() - start) * 1e3, "ms")
end

-- Compiling every kernel of a GPT-2 small layer in a fresh process: schedule, lower, LLVM.
function parts.gpt2_compile(tcl)
  local models = require "spec.support.models"
  local schedule = require "tcl.schedule"
  local lower = require "tcl.codegen.driver.lower"
  local out = models.gpt2_layer(tcl.Tensor, models.GPT2_SMALL, { empty = true })
  local start = tcl.clock()
  local sched = schedule.create({ out.uop })
  local items = {}
  for i, k in ipairs(sched.kernels) do items[i] = { ast = k.ast, name = k.name } end
  lower.compile_many(items, "CPU")
  figure("gpt2_compile_tcl_ms", (tcl.clock() - start) * 1e3, "ms")
  figure("gpt2_kernels", #sched.kernels, "kernels")
end

-- A GPT-2 small layer's forward, steady state, against torch's TransformerEncoderLayer
-- (pre-layernorm, GELU, causal mask) on the same sizes.
function parts.gpt2_forward(tcl, threads)
  local layer, x = support.gpt2_layer(tcl)
  local _, wall, kernels = support.jitted_median(tcl, RUNS, layer, x)
  figure("gpt2_forward_tcl_ms", wall * 1e3, "ms")
  slowest_kernel("gpt2_forward", kernels)
  local t = torch_ms("gpt2", threads)
  if t then figure("gpt2_forward_torch_ms", t, "ms") end
end

-- The GPT-2 layer called without tcl.jit: the first call plans and compiles; every later call
-- on NEW inputs of the same shapes (x a fresh realized tensor, the weights realized once) is
-- timed unprofiled (median of RUNS calls), and the kernels' time is the median of RUNS
-- separate profiled calls. Host overhead = wall - kernels.
function parts.gpt2_eager(tcl)
  local models = require "spec.support.models"
  local sizes = models.GPT2_SMALL
  local _, p = models.gpt2_layer(tcl.Tensor, sizes)
  local weights = {}
  for _, v in pairs(p) do weights[#weights + 1] = v end
  tcl.realize(table.unpack(weights))
  local function call(x)
    local q = {}
    for name, v in pairs(p) do q[name] = v end
    q.x = x
    return models.gpt2_layer_on(tcl.Tensor, sizes, q):realize()
  end
  local function fresh() return tcl.Tensor.rand(sizes.batch, sizes.seq, sizes.d_model):realize() end
  local start = tcl.clock()
  call(fresh())
  figure("gpt2_eager_first_ms", (tcl.clock() - start) * 1e3, "ms")
  local walls, kernel_s = {}, {}
  for i = 1, RUNS do
    local x = fresh()
    collectgarbage()
    start = tcl.clock()
    call(x)
    walls[i] = tcl.clock() - start
  end
  -- per profiled call: the time the layer's Tensor API calls take to build the graph, and the
  -- realize's host time (its wall less its own kernels' time: the kernels' time moves by more
  -- than the host time from call to call, so a difference of two medians is noise)
  local build_s, host_s = {}, {}
  for i = 1, RUNS do
    local q = {}
    for name, v in pairs(p) do q[name] = v end
    q.x = fresh()
    collectgarbage()
    start = tcl.clock()
    local y = models.gpt2_layer_on(tcl.Tensor, sizes, q)
    build_s[i] = tcl.clock() - start
    local report = tcl.profile(function() return y:realize() end)
    kernel_s[i], host_s[i] = report.seconds, report.wall - report.seconds
  end
  figure("gpt2_eager_second_ms", median(walls) * 1e3, "ms")
  figure("gpt2_eager_kernels_ms", median(kernel_s) * 1e3, "ms")
  figure("gpt2_eager_build_ms", median(build_s) * 1e3, "ms")
  figure("gpt2_eager_host_ms", median(host_s) * 1e3, "ms")
end
parts.gpt2_eager_nocache = parts.gpt2_eager

-- The cost of replaying a plan beyond its kernels' own time: 100 tiny kernels. The wall is
-- the median over RUNS batches of 10 unprofiled calls (per call); the kernels' time the
-- median of RUNS separate profiled calls.
function parts.replay(tcl)
  local n, batch = 100, 10
  local x = tcl.Tensor.rand(16):realize()
  local step = tcl.jit(function(t)
    for _ = 1, n do t = (t + 1):contiguous() end
    return t
  end)
  for _ = 1, 3 do step(x) end
  local walls, kernel_s = {}, {}
  for i = 1, RUNS do
    local start = tcl.clock()
    for _ = 1, batch do step(x) end
    walls[i] = (tcl.clock() - start) / batch
  end
  for i = 1, RUNS do kernel_s[i] = tcl.profile(step, x).seconds end
  local wall, kernels = median(walls), median(kernel_s)
  figure("replay_wall_us", wall / n * 1e6, "us/kernel")
  figure("replay_kernels_us", kernels / n * 1e6, "us/kernel")
  figure("replay_overhead_tcl_us", (wall - kernels) / n * 1e6, "us/kernel")
end

---------------------------------------------------------------------------------------------
-- the parent: children per thread setting, a table each

local ORDER = { "peak", "ew", "sum", "softmax", "layernorm", "gelu", "conv_rgb", "conv_s2", "mlp_first",
  "gpt2_compile", "gpt2_forward", "gpt2_eager", "gpt2_eager_nocache", "replay" }

-- The environment a part's child runs with, beyond CACHELEVEL=0 and THREADS.
local PART_ENV = { gpt2_eager_nocache = "TCL_PLAN_CACHE=0 " }

-- A target is a ratio to the best alternative (ratio >= target) or a limit on tcl's own figure.
-- alternatives: { figure, label }; the best of them is the one the ratio is taken against
-- (clibm, the IEEE-math C loop, is printed but is not an alternative: cfast is the strong one).
local TARGETS = {
  ew = { what = "a*b+1, 16M float32", tcl = "ew_tcl_gbs", higher = true, target = 0.90, unit = "GB/s",
    alternatives = { { "ew_c_gbs", "C" }, { "ew_torch_gbs", "torch" } } },
  softmax = { what = "softmax(-1), 4096x1024", tcl = "softmax_tcl_ms", target = 1.0, unit = "ms",
    alternatives = { { "softmax_cfast_ms", "C fast-math" }, { "softmax_torch_ms", "torch" } },
    shown = { { "softmax_clibm_ms", "C libm expf" } }, bytes = 2 * 4 * 4096 * 1024 },
  layernorm = { what = "layernorm(-1), 4096x1024", tcl = "layernorm_tcl_ms", target = 1.0, unit = "ms",
    alternatives = { { "layernorm_cfast_ms", "C fast-math" }, { "layernorm_torch_ms", "torch" } },
    shown = { { "layernorm_clibm_ms", "C IEEE" } }, bytes = 2 * 4 * 4096 * 1024 },
  gelu = { what = "gelu (tanh form), 16M float32", tcl = "gelu_tcl_ms", target = 1.0, unit = "ms",
    alternatives = { { "gelu_cfast_ms", "C fast-math" }, { "gelu_torch_ms", "torch" } },
    shown = { { "gelu_clibm_ms", "C libm tanhf" } }, bytes = 2 * 4 * (1 << 24) },
  conv_rgb = { what = "conv2d 8x3->64 7x7/2 224x224", tcl = "conv_rgb_tcl_gflops", higher = true, target = 1.0,
    unit = "GFLOPS", alternatives = { { "conv_rgb_torch_gflops", "torch" } } },
  conv_s2 = { what = "conv2d 8x64->64 3x3/2 56x56 fwd", tcl = "conv_s2_fwd_tcl_gflops", higher = true,
    unit = "GFLOPS", alternatives = { { "conv_s2_fwd_torch_gflops", "torch" } } },
  conv_s2_bwd = { what = "  its backward (dx, dw)", tcl = "conv_s2_bwd_tcl_gflops", higher = true, target = 1.0,
    unit = "GFLOPS", alternatives = { { "conv_s2_bwd_torch_gflops", "torch" } } },
  mlp_first = { what = "MLP forward, first call", tcl = "mlp_first_tcl_ms", limit = 100, unit = "ms",
    note = "tinygrad: about 1 s" },
  gpt2_compile = { what = "GPT-2 layer compile, cold", tcl = "gpt2_compile_tcl_ms", limit = 200, unit = "ms",
    note = "tinygrad: 1.6-2.8 s" },
  gpt2_forward = { what = "GPT-2 layer forward, jitted", tcl = "gpt2_forward_tcl_ms", target = 1.0, unit = "ms",
    alternatives = { { "gpt2_forward_torch_ms", "torch" } } },
  gpt2_eager = { what = "GPT-2 layer, eager 2nd call: realize host", tcl = "gpt2_eager_host_ms", limit = 1, unit = "ms",
    detail = { { "gpt2_eager_build_ms", "graph building (API calls)" }, { "gpt2_eager_second_ms", "wall" },
      { "gpt2_eager_kernels_ms", "kernels" }, { "gpt2_eager_first_ms", "first call" } } },
  gpt2_eager_nocache = { what = "  same, TCL_PLAN_CACHE=0", tcl = "gpt2_eager_host_ms", limit = 1, unit = "ms",
    detail = { { "gpt2_eager_build_ms", "graph building" }, { "gpt2_eager_second_ms", "wall" },
      { "gpt2_eager_kernels_ms", "kernels" } } },
  replay = { what = "jit replay, 100 tiny kernels", tcl = "replay_overhead_tcl_us", limit = 1, unit = "us/kernel",
    note = "tinygrad: ~130 us per call",
    detail = { { "replay_wall_us", "wall" }, { "replay_kernels_us", "kernels" } } },
}

local function spread(figures, prefix)
  local values = {}
  for i = 1, SUM_REPEATS do values[#values + 1] = figures[prefix .. i] end
  if #values == 0 then return nil end
  table.sort(values)
  return values[1], median(values), values[#values]
end

-- The slowest kernel of a part's median run against the machine's peaks of the same setting.
local function explain(part, kernel_line, peaks)
  if not kernel_line then return end
  local name, seconds, ops, bytes = kernel_line:match("(%S+) (%S+) (%S+) (%S+)")
  seconds, ops, bytes = tonumber(seconds), tonumber(ops), tonumber(bytes)
  if not seconds or seconds <= 0 then return end
  local gbs, gflops = bytes / seconds * 1e-9, ops / seconds * 1e-9
  local line = string.format("      %s's slowest kernel %s: %.3f ms, %.1f GB/s", part, name, seconds * 1e3, gbs)
  if peaks.peak_stream_gbs then line = line .. string.format(" (%.0f%% of C's %.1f)", 100 * gbs / peaks.peak_stream_gbs,
    peaks.peak_stream_gbs) end
  line = line .. string.format(", %.1f GFLOPS", gflops)
  if peaks.peak_fma_gflops then line = line .. string.format(" (%.1f%% of the FMA peak %.0f)",
    100 * gflops / peaks.peak_fma_gflops, peaks.peak_fma_gflops) end
  print(line)
end

local function report(what, figures, kernels, peaks)
  if what == "peak" then
    print(string.format("  %-34s FMA %s GFLOPS, STREAM-like copy (C a*b+1) %s GB/s", "machine peak, this run",
      figures.peak_fma_gflops and string.format("%.1f", figures.peak_fma_gflops) or "?",
      figures.peak_stream_gbs and string.format("%.1f", figures.peak_stream_gbs) or "?"))
    return
  end
  if what == "sum" then
    local tmin, tmed, tmax = spread(figures, "sum_tcl_gbs_")
    local omin, omed, omax = spread(figures, "sum_torch_gbs_")
    local cmin, cmed, cmax = spread(figures, "sum_c_gbs_")
    if not tmed then
      print(string.format("  %-34s no figure (the child failed)", "sum, 16M float32"))
      return
    end
    local line = string.format("  %-34s tcl %.1f/%.1f/%.1f GB/s (min/median/max of %d)", "sum, 16M float32", tmin, tmed,
      tmax, SUM_REPEATS)
    if cmed then line = line .. string.format("   C %.1f/%.1f/%.1f", cmin, cmed, cmax) end
    if omed then
      local ratio = tmed / omed
      line = line .. string.format("   torch %.1f/%.1f/%.1f   ratio of medians %.2f of torch (target 0.90: %s)", omin,
        omed, omax, ratio, ratio >= 0.9 and "PASS" or "MISS")
      print(line)
      if ratio < 0.9 then explain("sum", kernels.sum, peaks) end
    else
      print(line)
    end
    return
  end
  local t = TARGETS[what]
  local mine = figures[t.tcl]
  if not mine then
    print(string.format("  %-34s no figure (the child failed)", t.what))
    return
  end
  local line = string.format("  %-34s tcl %9.3f %s", t.what, mine, t.unit)
  for _, d in ipairs(t.detail or {}) do
    if figures[d[1]] then line = line .. string.format("   %s %.3f", d[2], figures[d[1]]) end
  end
  if t.limit then
    local pass = mine <= t.limit
    local verdict = pass and "PASS" or string.format("MISS by %.2fx", mine / t.limit)
    -- a host time (wall less kernels) below 0 is the machine's noise, not a figure
    if mine < 0 then verdict = "NO READING: the kernels' time exceeded the wall's; run again" end
    line = line .. string.format("   (target <= %g: %s%s)", t.limit, verdict, t.note and "; " .. t.note or "")
    print(line)
    return
  end
  if t.bytes then line = line .. string.format(" (%.1f GB/s)", t.bytes / (mine * 1e-3) * 1e-9) end
  local best, best_label
  for _, alt in ipairs(t.alternatives) do
    local v = figures[alt[1]]
    if v then
      line = line .. string.format("   %s %.3f", alt[2], v)
      if best == nil or (t.higher and v > best) or (not t.higher and v < best) then best, best_label = v, alt[2] end
    end
  end
  for _, alt in ipairs(t.shown or {}) do
    if figures[alt[1]] then line = line .. string.format("   [%s %.3f]", alt[2], figures[alt[1]]) end
  end
  local pass = true
  if best then
    local ratio = t.higher and mine / best or best / mine
    line = line .. string.format("   ratio %.2f of %s", ratio, best_label)
    if t.target then
      pass = ratio >= t.target
      line = line .. string.format(" (target %.2f: %s)", t.target, pass and "PASS" or "MISS")
    end
  end
  print(line)
  if not pass then explain(what, kernels[what], peaks) end
end

local function parent(which)
  for _, threads in ipairs { "", "1" } do
    print(threads == "" and "== default threads (the cores)" or "== THREADS=1")
    local peaks = {}
    for _, what in ipairs(which) do
      local prefix = "CACHELEVEL=0 " .. (threads == "" and "" or "THREADS=1 ") .. (PART_ENV[what] or "")
      local out = capture(prefix .. "lua5.4 " .. shell_quote(self_path) .. " --child " .. what)
      local figures, kernels = {}, {}
      for name, value in out:gmatch("figure (%S+) (%S+)") do figures[name] = tonumber(value) end
      for part, rest in out:gmatch("kernel (%S+) ([^\n]+)") do kernels[part] = rest end
      if next(figures) == nil then io.write(out) end
      for line in out:gmatch("[^\n]+") do
        if line:match("[Ww]arning") or line:match("failed") then print("    (child) " .. line) end
      end
      if what == "peak" then peaks = figures end
      report(what, figures, kernels, peaks)
      if what == "conv_s2" then
        report("conv_s2_bwd", figures, kernels, peaks)
        local fwd, bwd = figures.conv_s2_fwd_tcl_gflops, figures.conv_s2_bwd_tcl_gflops
        if fwd and bwd then
          print(string.format("  %-34s %.2f of the forward's GFLOPS (target > 0.50: %s)", "  backward / forward, tcl",
            bwd / fwd, bwd / fwd > 0.5 and "PASS" or "MISS"))
        end
      end
    end
  end
end

if arg and arg[1] == "--child" then
  local tcl = require "tcl"
  local threads = tonumber(os.getenv("THREADS") or "") or tonumber(capture("nproc")) or 1
  parts[arg[2]](tcl, math.tointeger(threads))
else
  local which = {}
  for i = 1, #(arg or {}) do which[#which + 1] = arg[i] end
  if #which == 0 then which = ORDER end
  if which[1] ~= "peak" then table.insert(which, 1, "peak") end -- the peaks that explain a miss
  for _, what in ipairs(which) do
    if not parts[what] then error("cpu_bench: unknown part '" .. what .. "' (" .. table.concat(ORDER, ", ") .. ")") end
  end
  parent(which)
end
