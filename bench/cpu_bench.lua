-- bench/cpu_bench.lua — the CPU device (LLVM-compiled kernels on a thread pool) against the
-- best alternatives measured in the same run: plain C loops (bench/cpu_baselines.c: -O3
-- -march=native, OpenMP), torch when it is installed (python3-torch), and issue 9's targets.
-- Figures are medians. Steady-state figures are jitted calls (tcl.jit: the output buffers
-- are reused, as the C loops reuse theirs), with kernel times from tcl.profile; first-call
-- and compile figures come from fresh processes with CACHELEVEL=0 (nothing from disk).
--
--   cmake -S . -B build-rel -DCMAKE_BUILD_TYPE=Release && cmake --build build-rel -j
--   LUA_PATH='lua/?.lua;lua/?/init.lua;./?.lua' LUA_CPATH='build-rel/lua/?.so' lua5.4 bench/cpu_bench.lua [part ...]
--
-- Parts (default all): ew sum softmax mlp_first gpt2_compile gpt2_forward replay. Each runs
-- in a child process, twice: with the default threads (the cores) and with THREADS=1, and
-- one table is printed per setting. BENCH_BUILD (default build-rel) names the build whose
-- bench/cpu_baselines is the C baseline; BENCH_RUNS (default 11) the runs per median.
local support = require "bench.support"
local shell_quote, capture, figure = support.shell_quote, support.capture, support.figure

local RUNS = tonumber(os.getenv("BENCH_RUNS") or "") or 11

local build = os.getenv("BENCH_BUILD") or "build-rel"
local self_path = arg and arg[0] or "bench/cpu_bench.lua"

---------------------------------------------------------------------------------------------
-- the parts (run in a child process: `cpu_bench.lua --child part`); each prints lines
-- "figure <name> <value> <unit>" that the parent collects

local parts = {}

local function baseline(args)
  local out = capture(shell_quote(build .. "/bench/cpu_baselines") .. " " .. args)
  local ms, gbs = out:match("%S+%s+([%d.e+-]+)%s+([%d.e+-]+)")
  return tonumber(ms), tonumber(gbs)
end

local TORCH = [[
import sys, time, torch
torch.set_num_threads(int(sys.argv[2]))
def med(f, runs=11):
    f(); f(); ts = []
    for _ in range(runs):
        t = time.perf_counter(); f(); ts.append(time.perf_counter() - t)
    ts.sort(); return ts[len(ts) // 2]
what = sys.argv[1]
with torch.no_grad():
    if what == "sum":
        a = torch.rand(1 << 24); print("torch_ms", med(lambda: a.sum()) * 1e3)
    elif what == "softmax":
        a = torch.rand(4096, 1024); print("torch_ms", med(lambda: torch.softmax(a, -1)) * 1e3)
    elif what == "ew":
        a = torch.rand(1 << 24); b = torch.rand(1 << 24); out = torch.empty(1 << 24)
        print("torch_ms", med(lambda: torch.add(torch.mul(a, b, out=out), 1, out=out)) * 1e3)
    elif what == "gpt2":
        layer = torch.nn.TransformerEncoderLayer(768, 12, 3072, dropout=0.0, activation="gelu",
                                                 batch_first=True, norm_first=True).eval()
        x = torch.rand(1, 128, 768)
        mask = torch.nn.Transformer.generate_square_subsequent_mask(128)
        print("torch_ms", med(lambda: layer(x, src_mask=mask)) * 1e3)
]]

local function torch_ms(what, threads)
  local out = capture("/usr/bin/python3 -c " .. shell_quote(TORCH) .. " " .. what .. " " .. threads)
  return tonumber(out:match("torch_ms%s+([%d.e+-]+)"))
end

function parts.ew(tcl, threads)
  local n = 1 << 24
  local a, b = tcl.Tensor.rand(n), tcl.Tensor.rand(n)
  tcl.realize(a, b)
  local k = support.jitted_median(tcl, RUNS, function(x, y) return x * y + 1 end, a, b)
  figure("ew_tcl_gbs", 3 * 4 * n / k * 1e-9, "GB/s")
  local _, c_gbs = baseline("ew " .. n)
  if c_gbs then figure("ew_c_gbs", c_gbs, "GB/s") end
  local t = torch_ms("ew", threads)
  if t then figure("ew_torch_gbs", 3 * 4 * n / (t * 1e-3) * 1e-9, "GB/s") end
end

function parts.sum(tcl, threads)
  local n = 1 << 24
  local a = tcl.Tensor.rand(n):realize()
  local k = support.jitted_median(tcl, RUNS, function(x) return x:sum() end, a)
  figure("sum_tcl_gbs", 4 * n / k * 1e-9, "GB/s")
  local _, c_gbs = baseline("sum " .. n)
  if c_gbs then figure("sum_c_gbs", c_gbs, "GB/s") end
  local t = torch_ms("sum", threads)
  if t then figure("sum_torch_gbs", 4 * n / (t * 1e-3) * 1e-9, "GB/s") end
end

function parts.softmax(tcl, threads)
  local r, c = 4096, 1024
  local a = tcl.Tensor.rand(r, c):realize()
  local k = support.jitted_median(tcl, RUNS, function(x) return x:softmax(-1) end, a)
  figure("softmax_tcl_ms", k * 1e3, "ms")
  local c_ms = baseline("softmax " .. r .. " " .. c)
  if c_ms then figure("softmax_c_ms", c_ms, "ms") end
  local t = torch_ms("softmax", threads)
  if t then figure("softmax_torch_ms", t, "ms") end
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
  local _, wall = support.jitted_median(tcl, RUNS, layer, x)
  figure("gpt2_forward_tcl_ms", wall * 1e3, "ms")
  local t = torch_ms("gpt2", threads)
  if t then figure("gpt2_forward_torch_ms", t, "ms") end
end

-- The cost of replaying a plan beyond its kernels' own time: 100 tiny kernels.
function parts.replay(tcl)
  local n = 100
  local x = tcl.Tensor.rand(16):realize()
  local kernel, wall = support.jitted_median(tcl, RUNS, function(t)
    for _ = 1, n do t = (t + 1):contiguous() end
    return t
  end, x)
  figure("replay_overhead_tcl_us", (wall - kernel) / n * 1e6, "us/kernel")
end

---------------------------------------------------------------------------------------------
-- the parent: children per thread setting, a table each

local ORDER = { "ew", "sum", "softmax", "mlp_first", "gpt2_compile", "gpt2_forward", "replay" }

-- A target is a ratio to the best alternative (ratio >= target) or a limit on tcl's own figure.
local TARGETS = {
  ew = { tcl = "ew_tcl_gbs", alternatives = { "ew_c_gbs", "ew_torch_gbs" }, higher = true, target = 0.90,
    unit = "GB/s" },
  sum = { tcl = "sum_tcl_gbs", alternatives = { "sum_c_gbs", "sum_torch_gbs" }, higher = true, target = 0.85,
    unit = "GB/s" },
  softmax = { tcl = "softmax_tcl_ms", alternatives = { "softmax_c_ms", "softmax_torch_ms" }, higher = false,
    target = 0.80, unit = "ms" },
  mlp_first = { tcl = "mlp_first_tcl_ms", limit = 100, unit = "ms", note = "tinygrad: about 1 s" },
  gpt2_compile = { tcl = "gpt2_compile_tcl_ms", limit = 200, unit = "ms", note = "tinygrad: 1.6-2.8 s" },
  gpt2_forward = { tcl = "gpt2_forward_tcl_ms", alternatives = { "gpt2_forward_torch_ms" }, higher = false,
    unit = "ms" },
  replay = { tcl = "replay_overhead_tcl_us", limit = 2, unit = "us/kernel", note = "tinygrad: ~130 us per call" },
}

local function report(what, figures)
  local t = TARGETS[what]
  local mine = figures[t.tcl]
  if not mine then
    print(string.format("  %-13s no figure (the child failed)", what))
    return
  end
  local line = string.format("  %-13s tcl %9.3f %s", what, mine, t.unit)
  if t.limit then
    line = line .. string.format("   (target <= %g: %s%s)", t.limit, mine <= t.limit and "PASS" or "MISS",
      t.note and "; " .. t.note or "")
    print(line)
    return
  end
  local best, best_name
  for _, name in ipairs(t.alternatives) do
    local v = figures[name]
    if v then
      line = line .. string.format("   %s %9.3f", name:match("_(%a+)_%a+$"), v)
      if best == nil or (t.higher and v > best) or (not t.higher and v < best) then best, best_name = v, name end
    end
  end
  if best then
    local ratio = t.higher and mine / best or best / mine
    line = line .. string.format("   ratio %.2f of %s", ratio, best_name:match("_(%a+)_%a+$"))
    if t.target then
      line = line .. string.format(" (target %.2f: %s)", t.target, ratio >= t.target and "PASS" or "MISS")
    end
  end
  print(line)
end

local function parent(which)
  for _, threads in ipairs { "", "1" } do
    print(threads == "" and "== default threads (the cores)" or "== THREADS=1")
    for _, what in ipairs(which) do
      local prefix = "CACHELEVEL=0 " .. (threads == "" and "" or "THREADS=1 ")
      local out = capture(prefix .. "lua5.4 " .. shell_quote(self_path) .. " --child " .. what)
      local figures = {}
      for name, value in out:gmatch("figure (%S+) (%S+)") do figures[name] = tonumber(value) end
      if next(figures) == nil then io.write(out) end
      report(what, figures)
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
  for _, what in ipairs(which) do
    if not parts[what] then error("cpu_bench: unknown part '" .. what .. "' (" .. table.concat(ORDER, ", ") .. ")") end
  end
  parent(which)
end
