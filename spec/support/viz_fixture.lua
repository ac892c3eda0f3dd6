-- spec/support/viz_fixture.lua — a synthetic viewer data table (the schema tcl.viz.capture
-- produces; its header describes the table), for spec/viz/page_spec.lua and for timing the
-- viewer's layout on large graphs by hand. Deterministic: the same arguments give the same table.
--
--   local fixture = require "spec.support.viz_fixture"
--   local data = fixture.data { layers = 12, pass_names = { "add loads", ... } }
--   fixture.reach(data, root_id, stop)  -- ids reachable from root (a set) and their count
--   fixture.PEAKS, fixture.RUNS           -- the profile's figures, for checking the page's maths
local M = {}

-- a growing node list; add() returns the new node's 1-based id
local function node_list()
  local nodes = {}
  local function add(op, dtype, arg, src, shape, tag)
    nodes[#nodes + 1] = { op = op, dtype = dtype, arg = arg or "", src = src or {}, shape = shape, tag = tag }
    return #nodes
  end
  return nodes, add
end

-- A tensor graph of `layers` blocks y = max(sum(x * w) + b, 0) with a residual, each block's
-- input used by several nodes (shared subtrees); returns the SINK's id and the ids by role.
local function tensor_graph(add, layers, width)
  local roles = { shared = {}, reduces = {}, stores = {} }
  local x = add("BUFFER", "float32", "", {}, "(16, 32)", "buffer 1")
  local outputs = {}
  for l = 1, layers do
    local w = add("BUFFER", "float32", "", {}, "(32, 32)", "buffer " .. (l + 1))
    local xr = add("RESHAPE", "float32", "(16, 1, 32)", { x }, "(16, 1, 32)")
    local xe = add("EXPAND", "float32", "(16, 32, 32)", { xr }, "(16, 32, 32)")
    local wr = add("RESHAPE", "float32", "(1, 32, 32)", { w }, "(1, 32, 32)")
    local we = add("EXPAND", "float32", "(16, 32, 32)", { wr }, "(16, 32, 32)")
    local prod = add("MUL", "float32", "", { xe, we }, "(16, 32, 32)")
    local sum = add("REDUCE_AXIS", "float32", "ADD (3,)", { prod }, "(16, 32, 1)")
    local flat = add("RESHAPE", "float32", "(16, 32)", { sum }, "(16, 32)")
    local acc = flat
    for j = 1, width do -- a chain of elementwise ops, each with its own constant
      local c = add("CONST", "float32", tostring(j * 0.5), {}, "(16, 32)")
      acc = add(j % 2 == 1 and "ADD" or "MUL", "float32", "", { acc, c }, "(16, 32)")
    end
    local zero = add("CONST", "float32", "0", {}, "(16, 32)")
    local relu = add("MAX", "float32", "", { acc, zero }, "(16, 32)")
    -- the residual uses x again, and relu is used twice: both are shared
    local res = add("ADD", "float32", "", { relu, x }, "(16, 32)")
    local sq = add("MUL", "float32", "", { relu, relu }, "(16, 32)")
    x = add("SUB", "float32", "", { res, sq }, "(16, 32)")
    roles.shared[#roles.shared + 1] = relu
    roles.reduces[#roles.reduces + 1] = sum
    outputs[#outputs + 1] = x
  end
  local stores = {}
  for i, o in ipairs(outputs) do
    if i % 4 == 0 or i == #outputs then stores[#stores + 1] = o end
  end
  roles.stores = stores
  return add("SINK", "void", "", stores), roles
end

-- A kernel AST that grows with `step` (a pass's graph after `step` passes): loads, ALU, store.
local function kernel_ast(add, name, step)
  local out = add("PARAM", "float32*", "0", {}, nil, "buffer out")
  local inp = add("PARAM", "float32*", "1", {}, nil, "buffer in")
  local r = add("RANGE", "int32", "0 LOOP", { add("CONST", "int32", "512") })
  local v = add("LOAD", "float32", "", { add("INDEX", "float32*", "", { inp, r }) })
  for s = 1, step % 5 + 1 do
    v = add(s % 2 == 1 and "ADD" or "MUL", "float32", "", { v, add("CONST", "float32", tostring(s)) })
  end
  local st = add("STORE", "void", "", { add("INDEX", "float32*", "", { out, r }), v })
  return add("SINK", "void", name, { add("END", "void", "", { st, r }) })
end

-- the profile's runs: { kernel, calls, seconds per call, ops, bytes }
M.RUNS = { { 1, 2, 1.0e-3, 4.0e6, 8.0e6 }, { 2, 3, 2.5e-4, 6.0e6, 1.0e6 }, { 3, 1, 5.0e-4, 1.0e5, 4.0e6 } }
M.PEAKS = { CPU = { gflops = 200.0, gbs = 20.0 } }
M.KERNEL_NAMES = { "r_16_32_32", "E_16_32n1", "E_512_4u" }

--- The data table. opts: layers (blocks of the tensor graph, 12 gives about 400 nodes), width
-- (elementwise ops per block), pass_names (the pipeline's pass names).
function M.data(opts)
  local nodes, add = node_list()
  local graph1, roles = tensor_graph(add, opts.layers or 12, opts.width or 6)
  local graph2 = tensor_graph(add, 2, 2)
  local kernels = {}
  for k, name in ipairs(M.KERNEL_NAMES) do
    local passes, prev = {}, kernel_ast(add, name, 0)
    local ast = prev
    for p, pass_name in ipairs(opts.pass_names) do
      local ran = pass_name ~= "tensor cores"
      local after = ran and kernel_ast(add, name, p) or prev
      passes[p] = { name = pass_name, ran = ran, before = prev, after = after, seconds = 1e-4 * p,
        rules = ran and { { rule = "lua/tcl/patterns/lowering.lua:" .. (100 + p), count = p + k },
          { rule = "lua/tcl/patterns/symbolic.lua:" .. (40 + p), count = 1 } } or {},
        matches = ran and p + k + 1 or 0 }
      prev = after
    end
    kernels[k] = { name = name, device = "CPU", ast = ast, passes = passes,
      opts = k == 1 and "UPCAST(1,4) UNROLL(0,4)" or "", optimizer = k == 1 and "BEAM 2" or "heuristic default",
      beam = k == 1 and { width = 2, cached = false, candidates = {
        { opts = "", seconds = 3.0e-4, round = 1 }, { opts = "UPCAST(1,4)", seconds = 1.2e-4, round = 1 },
        { opts = "UPCAST(1,4) UNROLL(0,4)", seconds = 9.0e-5, round = 2 },
        { opts = "UPCAST(1,8) UNROLL(0,8)", seconds = false, round = 2 } } } or nil,
      linear = "0: PARAM float32* 0\n1: PARAM float32* 1\n2: RANGE int32 (512)\n3: LOAD </script> float32",
      code = "define void @" .. name .. "(ptr %0, ptr %1) {\nentry:\n  ret void\n}\n", code_language = "llvm",
      assembly = k ~= 3 and (name .. ":\n\tvmovups (%rsi), %ymm0\n\tret\n") or nil,
      ops = 4096 * k, bytes = 8192 * k }
  end
  kernels[3].error = "lowered again, the kernel is named 'E_512', not 'E_512_4u'"
  -- realize 1: kernel 1 computes the reductions' cones, 2 the elementwise rest, 3 a copy
  local reach1 = M.reach({ nodes = nodes }, graph1)
  local computes = { {}, {}, {} }
  for id in pairs(reach1) do
    local op = nodes[id].op
    if op == "REDUCE_AXIS" or op == "MUL" and nodes[nodes[id].src[1]].op == "EXPAND" or op == "EXPAND" then
      table.insert(computes[1], id)
    elseif op ~= "BUFFER" and op ~= "SINK" then
      table.insert(computes[2], id)
    end
  end
  for _, c in ipairs(computes) do table.sort(c) end
  computes[3] = { roles.stores[#roles.stores] }
  local decisions = {}
  for i, id in ipairs(roles.reduces) do
    decisions[#decisions + 1] = { node = id, stored = i % 3 == 0, why = i % 3 == 0 and "a reduction used by 2 kernels"
      or "fused into its only user" }
  end
  decisions[#decisions + 1] = { node = roles.shared[1], stored = false, why = "elementwise: recomputed by each user" }
  local realizes = {
    { label = "realize 1", graph = graph1, plan_reused = false, repeats = 2, decisions = decisions, kernels = {
      { name = M.KERNEL_NAMES[1], kernel = 1, root = roles.reduces[1], computes = computes[1],
        reads = { "buffer 1", "buffer 2" },
        writes = "buffer 20", why = "a reduction used by 2 kernels" },
      { name = M.KERNEL_NAMES[2], kernel = 2, root = roles.stores[1], computes = computes[2], reads = { "buffer 20" },
        writes = "buffer 21", why = "output" },
      { name = M.KERNEL_NAMES[3], kernel = 3, root = roles.stores[#roles.stores], computes = computes[3],
        reads = { "buffer 21" }, writes = "buffer 22", why = "output" } } },
    { label = "realize 2", graph = graph2, plan_reused = true, decisions = {}, kernels = {
      { name = M.KERNEL_NAMES[2], kernel = 2, root = graph2, computes = {}, reads = { "buffer 21" },
        writes = "buffer 23",
        why = "output" } } },
  }
  local runs = {}
  for _, r in ipairs(M.RUNS) do
    for _ = 1, r[2] do
      runs[#runs + 1] = { kernel = r[1], name = M.KERNEL_NAMES[r[1]], device = "CPU", seconds = r[3], ops = r[4],
        bytes = r[5] }
    end
  end
  return {
    version = 1, title = "synthetic <model>.lua", created = "2026-11-29 13:40:00",
    nodes = nodes, realizes = realizes, kernels = kernels,
    profile = { runs = runs, peaks = M.PEAKS, total_seconds = 0.01, dropped_runs = 4 },
    dropped_realizes = 5,
  }, roles
end

--- The ids reachable from root (a set) and their count, not entering the sources of ids in stop.
function M.reach(data, root, stop)
  local seen, count, stack = {}, 0, { root }
  while #stack > 0 do
    local id = table.remove(stack)
    if not seen[id] then
      seen[id], count = true, count + 1
      if not (stop and stop[id]) then
        for _, s in ipairs(data.nodes[id].src) do stack[#stack + 1] = s end
      end
    end
  end
  return seen, count
end

return M
