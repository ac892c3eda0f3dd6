-- bench/cpu_bench.lua — the CPU device (LLVM-compiled kernels on a thread pool) against the
-- best alternatives measured in the same run: plain C loops (bench/cpu_baselines.c: -O3
-- -march=native, OpenMP), torch when it is installed (python3-torch), and the targets of
-- issue 9. Figures are medians; kernel times come from tcl.profile (the kernels' own time),
-- the first-call and compile figures from fresh processes.
--
--   cmake -S . -B build-rel -DCMAKE_BUILD_TYPE=Release && cmake --build build-rel -j
--   LUA_PATH='lua/?.lua;lua/?/init.lua;./?.lua' LUA_CPATH='build-rel/lua/?.so' lua5.4 bench/cpu_bench.lua
--
-- Needs the LLVM renderer (module tcl.llvm, issue 9: in progress) for the CPU device.
-- Arguments: [what ...] among ew sum softmax mlp_first gpt2_compile gpt2_forward (default
-- all). It runs every part twice, in child processes: with the default threads (the cores)
-- and with THREADS=1, and prints one table per setting. BENCH_BUILD (default build-rel)
-- names the build whose bench/cpu_baselines is the C baseline.
local RUNS = 11

local build = os.getenv("BENCH_BUILD") or "build-rel"
local self_path = arg and arg[0] or "bench/cpu_bench.lua"

local function median(values)
  local sorted = {}
  for i, v in ipairs(values) do sorted[i] = v end
  table.sort(sorted)
  return sorted[(#sorted + 1) // 2]
end

local function shell_quote(s) return "'" .. tostring(s):gsub("'", "'\\''") .. "'" end

local function capture(command)
  local pipe = assert(io.popen(command .. " 2>&1"))
  local out = pipe:read("a")
  pipe:close()
  return out
end

---------------------------------------------------------------------------------------------
-- the parts (run in a child process: `cpu_bench.lua --child part`); each prints lines
-- "figure <name> <value> <unit>" that the parent collects

local parts = {}

local function figure(name, value, unit)
  io.write(string.format("figure %s %.6g %s\n", name, value, unit))
end

-- The median kernel time of fn's realize, and its median wall time.
local function kernel_median(tcl, fn)
  local kernel, wall = {}, {}
  fn() -- compiles, first touch of the output buffers
  for i = 1, RUNS do
    local report = tcl.profile(fn)
    kernel[i], wall[i] = report.seconds, report.wall
  end
  return median(kernel), median(wall)
end

local function baseline(args)
  local out = capture(shell_quote(build .. "/bench/cpu_baselines") .. " " .. args)
  local ms, gbs = out:match("%S+%s+([%d.e+-]+)%s+([%d.e+-]+)")
  return tonumber(ms), tonumber(gbs)
end

local TORCH = [[
import sys, time, torch
torch.set_num_threads(int(sys.argv[2]))
def med(f, runs=11):
    f(); ts = []
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
        a = torch.rand(1 << 24); b = torch.rand(1 << 24); print("torch_ms", med(lambda: a * b + 1) * 1e3)
]]

local function torch_ms(what, threads)
  local out = capture("/usr/bin/python3 -c " .. shell_quote(TORCH) .. " " .. what .. " " .. threads)
  return tonumber(out:match("torch_ms%s+([%d.e+-]+)"))
end

function parts.ew(tcl, threads)
  local n = 1 << 24
  local a, b = tcl.Tensor.rand(n), tcl.Tensor.rand(n)
  tcl.realize(a, b)
  local k = kernel_median(tcl, function() return (a * b + 1):realize() end)
  figure("ew_tcl_gbs", 3 * 4 * n / k * 1e-9, "GB/s")
  local _, c_gbs = baseline("ew " .. n)
  if c_gbs then figure("ew_c_gbs", c_gbs, "GB/s") end
  local t = torch_ms("ew", threads)
  if t then figure("ew_torch_gbs", 3 * 4 * n / (t * 1e-3) * 1e-9, "GB/s") end
end

function parts.sum(tcl, threads)
  local n = 1 << 24
  local a = tcl.Tensor.rand(n):realize()
  local k = kernel_median(tcl, function() return a:sum():realize() end)
  figure("sum_tcl_gbs", 4 * n / k * 1e-9, "GB/s")
  local _, c_gbs = baseline("sum " .. n)
  if c_gbs then figure("sum_c_gbs", c_gbs, "GB/s") end
  local t = torch_ms("sum", threads)
  if t then figure("sum_torch_gbs", 4 * n / (t * 1e-3) * 1e-9, "GB/s") end
end

function parts.softmax(tcl, threads)
  local r, c = 4096, 1024
  local a = tcl.Tensor.rand(r, c):realize()
  local k = kernel_median(tcl, function() return a:softmax(-1):realize() end)
  figure("softmax_tcl_ms", k * 1e3, "ms")
  local c_ms = baseline("softmax " .. r .. " " .. c)
  if c_ms then figure("softmax_c_ms", c_ms, "ms") end
  local t = torch_ms("softmax", threads)
  if t then figure("softmax_torch_ms", t, "ms") end
end

---------------------------------------------------------------------------------------------
-- the parent: children per thread setting, a table each

local ORDER = { "ew", "sum", "softmax" }

local function child(what)
  local tcl = require "tcl"
  local threads = tonumber(os.getenv("THREADS") or "") or tonumber(capture("nproc")) or 1
  parts[what](tcl, math.tointeger(threads))
end

local TARGETS = {
  ew = { tcl = "ew_tcl_gbs", alternatives = { "ew_c_gbs" }, higher = true, target = 0.90, unit = "GB/s" },
  sum = { tcl = "sum_tcl_gbs", alternatives = { "sum_c_gbs", "sum_torch_gbs" }, higher = true, target = 0.85,
    unit = "GB/s" },
  softmax = { tcl = "softmax_tcl_ms", alternatives = { "softmax_c_ms", "softmax_torch_ms" }, higher = false,
    target = 0.80, unit = "ms" },
}

local function report(what, figures)
  local t = TARGETS[what]
  if not t then return end
  local mine = figures[t.tcl]
  if not mine then
    print(string.format("  %-10s no figure (the child failed)", what))
    return
  end
  local best, best_name
  for _, name in ipairs(t.alternatives) do
    local v = figures[name]
    if v and (best == nil or (t.higher and v > best) or (not t.higher and v < best)) then best, best_name = v, name end
  end
  local line = string.format("  %-10s tcl %9.2f %s", what, mine, t.unit)
  for _, name in ipairs(t.alternatives) do
    if figures[name] then line = line .. string.format("   %s %9.2f", name:match("_(%a+)_"), figures[name]) end
  end
  if best then
    local ratio = t.higher and mine / best or best / mine
    line = line .. string.format("   ratio %.2f of %s (target %.2f: %s)", ratio, best_name:match("_(%a+)_"), t.target,
      ratio >= t.target and "PASS" or "MISS")
  end
  print(line)
end

local function parent(which)
  for _, threads in ipairs { "", "1" } do
    print(threads == "" and "== default threads (the cores)" or "== THREADS=1")
    for _, what in ipairs(which) do
      local prefix = threads == "" and "" or "THREADS=1 "
      local out = capture(prefix .. "lua5.4 " .. shell_quote(self_path) .. " --child " .. what)
      local figures = {}
      for name, value in out:gmatch("figure (%S+) (%S+)") do figures[name] = tonumber(value) end
      if next(figures) == nil then io.write(out) end
      report(what, figures)
    end
  end
end

if arg and arg[1] == "--child" then
  child(arg[2])
else
  local which = {}
  for i = 1, #(arg or {}) do which[#which + 1] = arg[i] end
  if #which == 0 then which = ORDER end
  for _, what in ipairs(which) do
    if not parts[what] then error("cpu_bench: unknown part '" .. what .. "' (" .. table.concat(ORDER, ", ") .. ")") end
  end
  parent(which)
end
