-- bench/schedule_bench.lua — how fast tcl.schedule plans whole models, and what the plan
-- does: for a GPT-2 small layer (spec/support/models.lua) and the 784-256-10 MLP, the kernels,
-- the time schedule.create takes (the first call of the process, which also computes every
-- node's shape and interns each kernel's nodes, and the median of further calls on fresh
-- graphs of the same model, which find those kernel nodes interned), and the ALU ops the
-- kernels execute on data against the ops the graph asks for (1.00x: nothing recomputed).
--
--   LUA_PATH='lua/?.lua;lua/?/init.lua;./?.lua' LUA_CPATH='build-rel/lua/?.so' lua5.4 bench/schedule_bench.lua [runs]
--
-- Not a test: it prints figures. Schedule on a quiet machine and a Release build.
local tcl = require "tcl"
local models = require "spec.support.models"
local schedule = require "tcl.schedule"
local shape = require "tcl.shape"
local lower = require "tcl.codegen.driver.lower"
local linearize = require "tcl.codegen.driver.linearize"
local estimates = require "tcl.codegen.driver.estimates"

local runs = tonumber(arg and arg[1]) or 21
local ALU = tcl.groups.ALU

local function graph_ops(root)
  local n = 0
  for _, u in ipairs(root:toposort()) do
    if ALU[u.op] or u.op == "CAST" then n = n + shape.numel(shape.shared(u))
    elseif u.op == "REDUCE_AXIS" then n = n + shape.numel(shape.shared(u.src[1])) end
  end
  return n
end

local function executed_ops(sched)
  local renderer, n = lower.backend("EMU").renderer, 0
  for _, k in ipairs(sched.kernels) do
    local ctx = { name = k.name, device = "EMU", renderer = renderer }
    n = n + estimates.of(linearize.linearize(lower.run_passes(k.ast, ctx))).value_ops
  end
  return n
end

local function bench(name, build)
  local times, sched, graph = {}, nil, nil
  for i = 1, runs do
    graph = build().uop -- a fresh graph (new input buffers) each time
    local start = tcl.clock()
    sched = schedule.create({ graph })
    times[i] = tcl.clock() - start
  end
  local first = times[1]
  table.remove(times, 1)
  table.sort(times)
  local names = {}
  for i, k in ipairs(sched.kernels) do names[i] = k.name end
  print(string.format("%s: %d kernels (%s)", name, #sched.kernels, table.concat(names, ", ")))
  print(string.format("  schedule.create: first %.2f ms, median of %d more %.2f ms", first * 1e3, #times,
    times[(#times + 1) // 2] * 1e3))
  local executed, asked = executed_ops(sched), graph_ops(graph)
  print(string.format("  executes %d ALU ops on data for a graph of %d: %.3fx", executed, asked, executed / asked))
end

bench("GPT-2 small layer (d 768, 12 heads, seq 128)", function()
  return (models.gpt2_layer(tcl.Tensor, models.GPT2_SMALL, { empty = true }))
end)
bench("MLP 784-256-10, batch 128, softmax", function()
  return (models.mlp(tcl.Tensor, models.MNIST_MLP, { empty = true }))
end)
