-- tcl.schedule — realize: split the lazy tensor graph into kernels, order them, run them.
-- Layer: Lua scheduler (DESIGN.md, "Data flow" step 2). Input: tensor-graph nodes
-- (ENCODINGS.md); output: kernel ASTs (built by tcl.rangeify) on BUFFER nodes (tcl.buffers).
--
--   local schedule = require "tcl.schedule"
--   local s = schedule.create({ out1, out2 })   -- plan only: kernels, buffers, results
--   local realized = schedule.run({ out1, out2 }) -- plan, compile (tcl.lower), run
--
-- Realize points (nodes whose value is stored in a buffer by a kernel of their own):
--   * the requested outputs and every CONTIGUOUS;
--   * a REDUCE_AXIS whose result is broadcast (reached from a growing EXPAND through fused
--     nodes): fused, it would be recomputed for every broadcast element;
--   * a REDUCE_AXIS inside another reduction (reached from a REDUCE_AXIS's source through
--     fused nodes): fused, it would be recomputed on every step of the outer loop;
--   * a REDUCE_AXIS that several kernels need: reductions are computed once.
-- Everything else (elementwise and movement ops) is fused into each kernel that uses it,
-- recomputed there. A BUFFER is loaded, never recomputed; a realize point that only views
-- stored elements in order (RESHAPE/CONTIGUOUS/DETACH of a BUFFER or of another realize
-- point) shares that buffer and needs no kernel.
--
-- These facts flow from consumers to sources, so one pass over the graph in reverse
-- topological order decides them: when a node is reached, all its consumers are decided.
-- Kernels are then built in topological order, which is a dependency order: a kernel only
-- loads buffers stored by earlier kernels (or already realized).
local tcl = require "tcl"
local shape = require "tcl.shape"
local buffers = require "tcl.buffers"
local rangeify = require "tcl.rangeify"

local M = {}

--- DEBUG level: M.debug when set (specs), else the DEBUG environment variable.
local function debug_level()
  if M.debug ~= nil then return M.debug end
  return math.tointeger(tonumber(os.getenv("DEBUG") or "")) or 0 -- as lower.lua reads it
end

local function check_outputs(outputs, fn)
  if type(outputs) ~= "table" or #outputs == 0 then
    error(string.format("schedule.%s: expected a non-empty list of tensor-graph nodes", fn), 3)
  end
  for i, node in ipairs(outputs) do
    if type(node) ~= "userdata" or node.op == nil then
      error(string.format("schedule.%s: output %d is a %s, not a UOp", fn, i, type(node)), 3)
    end
  end
end

local VIEW_OPS = { RESHAPE = true, CONTIGUOUS = true, DETACH = true }

--- The BUFFER node that already holds node's elements in order, or nil: node is a BUFFER,
-- or a RESHAPE/CONTIGUOUS/DETACH chain over a BUFFER or over a node stored_in a buffer.
local function stored_elsewhere(node, stored_in)
  while VIEW_OPS[node.op] do
    node = node.src[1]
    local buf = stored_in[node.id]
    if buf then return buf end
  end
  if node.op == "BUFFER" then return node end
  return nil
end

local function grows(expand, in_shape)
  local new = expand.arg
  for i = 1, #new do if new[i] ~= in_shape[i] then return true end end
  return false
end

--- The node viewed as shape shp over the BUFFER node buf.
local function as_view(buf, shp)
  if #shp == 1 and shp[1] == buf.arg[2] then return buf end
  return tcl.uop("RESHAPE", buf.dtype, { buf }, shp)
end

--- The device of the buffers the graph reads (the default when it reads none); kernels
-- run where their data is, so a graph over several devices is an error.
local function graph_device(order)
  local device
  for _, node in ipairs(order) do
    if node.op == "BUFFER" then
      local d = node.arg[3]
      if device and d ~= device then
        error(string.format("schedule.create: the graph reads buffers on several devices (%s and %s); copy them to one",
          device, tostring(d)), 0)
      end
      device = d
    end
  end
  return device or buffers.device
end

local MANY = {} -- "reached from more than one kernel" (a root id otherwise)

--- Decides the realize points: returns the set of their node ids.
local function realize_points(order, sink, outputs)
  local realize = {}
  for _, out in ipairs(outputs) do realize[out.id] = true end
  for _, node in ipairs(order) do
    if node.op == "CONTIGUOUS" then realize[node.id] = true end
  end
  -- Consumers of each node (each consumer once, however many of its sources the node is).
  -- Lists grow in node order, so a repeated source of node already ends with node.
  local consumers = {}
  for _, node in ipairs(order) do
    for _, s in ipairs(node.src) do
      local list = consumers[s.id]
      if not list then list = {}; consumers[s.id] = list end
      if list[#list] ~= node then list[#list + 1] = node end
    end
  end
  -- Reverse topological order: per node, the kernel that computes it (root), whether it is
  -- broadcast in that kernel (expanded) and whether it is inside a reduction (in_reduce).
  local root_of, expanded, in_reduce, none = {}, {}, {}, {}
  for i = #order, 1, -1 do
    local node = order[i]
    if node ~= sink then
      local id = node.id
      local root, exp, red = nil, false, false
      for _, c in ipairs(consumers[id] or none) do
        if c ~= sink then
          local cid = c.id
          local c_root, c_exp, c_red
          if realize[cid] then
            c_root, c_exp, c_red = cid, false, false
          else
            c_root, c_exp, c_red = root_of[cid], expanded[cid], in_reduce[cid]
          end
          if c.op == "EXPAND" and grows(c, shape.shared(node)) then c_exp = true end
          if c.op == "REDUCE_AXIS" then c_red = true end
          if root == nil then root = c_root elseif root ~= c_root then root = MANY end
          exp, red = exp or c_exp, red or c_red
        end
      end
      if node.op == "REDUCE_AXIS" and (exp or red or root == MANY) then realize[id] = true end
      root_of[id], expanded[id], in_reduce[id] = root, exp, red
    end
  end
  return realize
end

--- Plans the realization of outputs (a list of tensor-graph nodes). Returns
--   { kernels = { {ast=, buffers=, name=}... } in dependency order,
--     outputs = { the realized node of each output, in order },
--     results = { [output node] = realized node },
--     stored = { [output node] = the BUFFER node holding its values } }
-- A realized node is the result BUFFER node viewed in the output's shape: RESHAPE(BUFFER,
-- shape), or the BUFFER itself when the shape is {numel}. Buffers are registered (tcl.buffers)
-- but allocated only when a kernel runs.
function M.create(outputs)
  check_outputs(outputs, "create")
  local sink = tcl.uop("SINK", nil, outputs)
  local order = sink:toposort()
  for _, node in ipairs(order) do -- validates every node (sources first: shallow recursion)
    if node ~= sink then shape.shared(node) end
  end
  local realize = realize_points(order, sink, outputs)
  local device = graph_device(order)

  local stored_in = {} -- node id -> BUFFER node holding the node's value
  local function stored(node) return stored_in[node.id] end
  local kernels = {}
  for _, node in ipairs(order) do
    if realize[node.id] then
      local buf = stored_elsewhere(node, stored_in)
      if not buf then
        local numel = shape.numel(shape.shared(node))
        local limit = buffers.too_large(node.dtype, numel, device)
        if limit then
          error(string.format("realize: a %s tensor of shape %s needs %.0f bytes, more than %s can hold (%d bytes)",
            node.dtype.name, shape.format(shape.shared(node)), numel * node.dtype.itemsize + 0.0, device, limit), 0)
        end
        buf = buffers.new(node.dtype, numel, device)
        if numel > 0 then kernels[#kernels + 1] = rangeify.kernel(node, buf, stored) end
      end
      stored_in[node.id] = buf
    end
  end

  local results, realized, stored_map = {}, {}, {}
  for i, node in ipairs(outputs) do
    realized[i] = as_view(stored_in[node.id], shape.shared(node))
    results[node] = realized[i]
    stored_map[node] = stored_in[node.id]
  end
  return { kernels = kernels, outputs = realized, results = results, stored = stored_map }
end

--- One line per schedule: the number of kernels and their names.
function M.summary(sched)
  local names = {}
  for i, k in ipairs(sched.kernels) do names[i] = k.name end
  return string.format("schedule: %d kernel%s%s%s", #names, #names == 1 and "" or "s", #names > 0 and ": " or "",
    table.concat(names, ", "))
end

--- Realizes outputs: frees dead buffers, plans, compiles each kernel (tcl.lower, cached by
-- the kernel's content) and runs it. Returns the list of realized nodes (see create) and
-- the schedule.
function M.run(outputs)
  check_outputs(outputs, "run")
  buffers.collect()
  local sched = M.create(outputs)
  if debug_level() >= 1 then io.stderr:write(M.summary(sched), "\n") end
  if #sched.kernels > 0 then
    local lower = require "tcl.lower"
    -- every buffer and program first, so running out of memory or a failed compile stops
    -- the realize before any kernel has run
    local programs, args = {}, {}
    for n, k in ipairs(sched.kernels) do
      programs[n] = lower.compile(k.ast, { name = k.name })
      local list = {}
      for i, b in ipairs(k.buffers) do
        local ok, storage = pcall(buffers.get, b)
        if not ok then error("realize: " .. tostring(storage), 0) end
        list[i] = storage
      end
      args[n] = list
    end
    for n, program in ipairs(programs) do program:run(args[n]) end
  end
  return sched.outputs, sched
end

return M
