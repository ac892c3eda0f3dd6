-- bench/intern_bench.lua — how fast UOps are interned from Lua (tcl.core.uop through the
-- binding in src/core/lua_core.c), in nodes per second: NEW nodes (CONST nodes with distinct
-- args, ADD nodes over distinct source pairs) and ALREADY-INTERNED nodes (the same calls
-- again), for a graph of kernel size (10k nodes, repeated) and a large one (200k nodes by
-- default). Each figure is the median of 7 runs, in CPU time (os.clock); the target is 1
-- million new nodes per second.
-- Baseline in the same run: an equivalent plain Lua table per node ({op=, dtype=, arg=} or
-- {op=, dtype=, src={a, b}}), kept in an array the same way.
--
-- Run (from the repository root, after a Release build in build-rel/):
--   LUA_PATH='lua/?.lua;lua/?/init.lua' LUA_CPATH='build-rel/lua/?.so' lua5.4 bench/intern_bench.lua [nodes]
--   tcl bench/intern_bench.lua [nodes]          (where the tcl program is built)
-- Ops are given by name and dtypes by name, as user code writes them; the "by id" lines
-- pass the op id and dtype object instead, which shows what the name lookups cost.
local core = require "tcl.core"
local uop = core.uop

local RUNS = 7
local TARGET_NEW_PER_SECOND = 1e6
local LARGE = tonumber(arg and arg[1]) or 200000

-- CPU seconds spent by f(), with a full collection before so garbage of earlier phases is
-- not charged to it.
local function timed(f)
  collectgarbage()
  collectgarbage()
  local t0 = os.clock()
  f()
  return os.clock() - t0
end

local function median(values)
  table.sort(values)
  return values[(#values + 1) // 2]
end

-- figures[name] = {nodes = n, seconds = s}, summed over the repetitions of one run;
-- order lists the names in the order they were first recorded (per_run has one list per name).
local figures, order, per_run
local function record(name, count, seconds)
  if not figures[name] then
    figures[name] = { nodes = 0, seconds = 0 }
    if not per_run[name] then
      per_run[name] = {}
      order[#order + 1] = name
    end
  end
  figures[name].nodes = figures[name].nodes + count
  figures[name].seconds = figures[name].seconds + seconds
end

local CONST, int64 = core.ops.CONST, core.dtype("int64")
local run_offset = 0 -- new args each run, so "new" really is new even if a node survived

local function one_run(nodes, side)
  local consts, adds = {}, {}
  local base = run_offset
  run_offset = run_offset + 10 * nodes

  record("new CONST nodes", nodes, timed(function()
    for i = 1, nodes do consts[i] = uop("CONST", "int64", nil, base + i) end
  end))
  record("already-interned CONST nodes", nodes, timed(function()
    for i = 1, nodes do local _ = uop("CONST", "int64", nil, base + i) end
  end))
  record("new ADD nodes (distinct source pairs)", side * side, timed(function()
    local k = 0
    for i = 1, side do
      local a = consts[i]
      for j = 1, side do
        k = k + 1
        adds[k] = uop("ADD", "int64", { a, consts[j] })
      end
    end
  end))
  record("already-interned ADD nodes", side * side, timed(function()
    for i = 1, side do
      local a = consts[i]
      for j = 1, side do local _ = uop("ADD", "int64", { a, consts[j] }) end
    end
  end))
  local by_id = {}
  record("new CONST nodes, by id", nodes, timed(function()
    for i = 1, nodes do by_id[i] = uop(CONST, int64, nil, base + nodes + i) end
  end))
  record("already-interned CONST nodes, by id", nodes, timed(function()
    for i = 1, nodes do local _ = uop(CONST, int64, nil, base + nodes + i) end
  end))
  local total = #consts + #adds + #by_id
  consts, adds, by_id = nil, nil, nil -- luacheck: ignore 311 331 (drops the references for the collector)
  local t0 = os.clock()
  collectgarbage()
  collectgarbage()
  record("freeing all of them (collection)", total, os.clock() - t0)

  -- the baseline keeps what it builds, as the node table does
  local plain_consts, plain_adds = {}, {} -- luacheck: ignore 241
  record("baseline: a plain table per CONST", nodes, timed(function()
    for i = 1, nodes do plain_consts[i] = { op = "CONST", dtype = "int64", arg = base + i } end
  end))
  record("baseline: a plain table per ADD", side * side, timed(function()
    local k = 0
    for i = 1, side do
      local a = plain_consts[i]
      for j = 1, side do
        k = k + 1
        plain_adds[k] = { op = "ADD", dtype = "int64", src = { a, plain_consts[j] } }
      end
    end
  end))
end

-- One graph size, `repeat_count` repetitions per run; prints the medians over RUNS runs.
local function measure(title, nodes, repeat_count)
  local side = math.floor(math.sqrt(nodes))
  order, per_run = {}, {}
  for _ = 1, RUNS do
    figures = {}
    for _ = 1, repeat_count do one_run(nodes, side) end
    for name, f in pairs(figures) do table.insert(per_run[name], f.nodes / f.seconds) end
  end
  print(string.format("\n%s: %d CONST + %d ADD nodes, %d repetition(s) per run, median of %d runs",
    title, nodes, side * side, repeat_count, RUNS))
  local rate = {}
  for _, name in ipairs(order) do
    rate[name] = median(per_run[name])
    local line = string.format("  %-44s %8.2f M nodes/s", name, rate[name] / 1e6)
    if name == "new CONST nodes" or name == "new ADD nodes (distinct source pairs)" then
      line = line .. string.format("   target >= %.0f: %s", TARGET_NEW_PER_SECOND / 1e6,
        rate[name] >= TARGET_NEW_PER_SECOND and "PASS" or "MISS")
    elseif name == "baseline: a plain table per CONST" then
      line = line .. string.format("   tcl new CONST: %.0f%% of this", 100 * rate["new CONST nodes"] / rate[name])
    elseif name == "baseline: a plain table per ADD" then
      line = line .. string.format("   tcl new ADD: %.0f%% of this",
        100 * rate["new ADD nodes (distinct source pairs)"] / rate[name])
    end
    print(line)
  end
end

print(string.format("intern_bench (Lua, %s), CPU time", _VERSION))
measure("graph of kernel size", 10000, 10)
measure("large graph", LARGE, 1)
