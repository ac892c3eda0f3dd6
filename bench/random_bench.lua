-- bench/random_bench.lua — making random and filled tensors on the device (issue 32): a
-- Linear(4096, 4096) layer created and realized (its kaiming-uniform weight and bias),
-- Tensor.randn(2048, 2048), Tensor.rand(12000, 12000) (144M numbers, more than the old host
-- generator could make) and Tensor.arange(2^22), each realized, against torch making the same
-- (bench/random_baselines.py), with the default threads and THREADS=1. Medians of RUNS (7)
-- runs after one warm-up (the kernels compiled), wall clock. Target: the layer in at most 1/3
-- of torch's time.
--
--   LUA_PATH='lua/?.lua;lua/?/init.lua;./?.lua' LUA_CPATH='build-rel/lua/?.so' lua5.4 bench/random_bench.lua
local support = require "bench.support"

local shell_quote, capture, figure, median = support.shell_quote, support.capture, support.figure, support.median
local RUNS = tonumber(os.getenv("BENCH_RUNS") or "") or 7
local self_path = arg and arg[0] or "bench/random_bench.lua"

-- name, what, the work (it returns what must be realized)
local ROWS = {
  { "linear", "nn.Linear(4096, 4096) created and realized", function(tcl)
    local layer = tcl.nn.Linear(4096, 4096)
    return layer.weight, layer.bias
  end },
  { "randn", "Tensor.randn(2048, 2048)", function(tcl) return tcl.Tensor.randn(2048, 2048) end },
  { "rand_big", "Tensor.rand(12000, 12000)", function(tcl) return tcl.Tensor.rand(12000, 12000) end },
  { "arange", "Tensor.arange(2^22)", function(tcl) return tcl.Tensor.arange(1 << 22) end },
}
local TARGET = { linear = 1 / 3 }

local function child()
  local tcl = require "tcl"
  for _, row in ipairs(ROWS) do
    local times = {}
    for i = 0, RUNS do
      collectgarbage()
      local start = tcl.clock()
      tcl.realize(row[3](tcl))
      if i > 0 then times[i] = tcl.clock() - start end
    end
    figure(row[1] .. "_tcl", median(times) * 1e3, "ms")
  end
end

local function parent()
  for _, threads in ipairs { "", "1" } do
    local count = threads == "" and (tonumber(capture("nproc")) or 1) or 1
    print(threads == "" and "== default threads (the cores)" or "== THREADS=1")
    local out = capture((threads == "" and "" or "THREADS=1 ") .. "lua5.4 " .. shell_quote(self_path) .. " --child")
      .. capture(support.python() .. " bench/random_baselines.py --threads " .. math.tointeger(count) .. " --runs "
        .. RUNS)
    local figures = {}
    for name, value in out:gmatch("figure (%S+) (%S+)") do figures[name] = tonumber(value) end
    for line in out:gmatch("[^\n]+") do
      if not line:match("^figure") then print("  " .. line) end
    end
    for _, row in ipairs(ROWS) do
      local mine, torch = figures[row[1] .. "_tcl"], figures[row[1] .. "_torch"]
      local line = string.format("  %-44s tcl %s", row[2], mine and string.format("%8.1f ms", mine) or "(failed)")
      if mine and torch then
        local ratio = mine / torch
        line = line .. string.format("  torch %8.1f ms  tcl/torch %.2f", torch, ratio)
        if TARGET[row[1]] then
          local pass = ratio <= TARGET[row[1]] and "PASS" or "MISS"
          line = line .. string.format("  target <= %.2f: %s", TARGET[row[1]], pass)
        end
      end
      print(line)
    end
  end
end

if arg and arg[1] == "--child" then child() else parent() end
