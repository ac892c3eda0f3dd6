-- tcl.schedule.plan_cache — reuses a schedule for a graph of the same structure over other
-- buffers: calling the same function again on new inputs of the same shapes skips planning.
-- Layer: Lua scheduler, used by tcl.schedule.run.
--
-- The key of a graph is the graph itself with each BUFFER it reads replaced by a placeholder
-- numbered in topological order (same dtype, size and device): nodes are hash-consed, so two
-- graphs that differ only in which buffers they read give the same placeholder graph, the same
-- node. A plan is kept as a template: each kernel's AST (ASTs name PARAM slots, never
-- buffers, so the compiled kernel is reused as is), and for each of its slots either "input
-- buffer i" or "new buffer m"; the realized outputs likewise. A hit makes fresh buffers for the
-- new ones and fills the template in.
--
-- Graphs with an ASSIGN are planned every time: which assignments already ran is state outside
-- the graph (tcl.schedule.assign), and the kernels around them are reordered by it.
local core = require "tcl.core"
local env = require "tcl.env"
local pattern = require "tcl.pattern"
local shape = require "tcl.shape"
local buffers = require "tcl.schedule.buffers"
local realize_points = require "tcl.schedule.realize_points"

local M = {}

--- The most plans kept; the oldest goes first.
M.CAPACITY = 256

local entries = {} -- key -> template
local entry_count = 0
-- the keys in the order they were kept (queue[first..last]); a position whose key was kept
-- again later (template.position) is skipped
local queue, first, last = {}, 1, 0
local counts = { hits = 0, misses = 0, uncached = 0 }

local function keep(key, template)
  while entry_count >= M.CAPACITY and first <= last do
    local oldest = queue[first]
    queue[first] = nil
    local entry = entries[oldest]
    if entry and entry.position == first then
      entries[oldest] = nil
      entry_count = entry_count - 1
    end
    first = first + 1
  end
  entries[key] = template
  entry_count = entry_count + 1
  last = last + 1
  queue[last] = key
  template.position = last
end

--- The BUFFER nodes outputs read (in topological order) and the graph's key, or nil when the
-- graph is not one whose plan can be reused.
local function key_of(outputs, opts)
  local sink = core.uop("SINK", nil, outputs)
  local inputs, map = {}, {}
  for _, node in ipairs(sink:toposort()) do
    local op = node.op
    if op == "BUFFER" then
      local n = #inputs + 1
      inputs[n] = node
      local arg = node.arg
      map[node] = core.uop("BUFFER", node.dtype, nil, { -n, arg[2], arg[3] })
    elseif op == "ASSIGN" then
      return nil
    end
  end
  local placeholder_graph = pattern.substitute(sink, map)
  -- row fusion's and dequantization's settings change the kernels (EMU_GPU: EMU emulating a GPU is not row-fused)
  local key = string.format("%d|%s|%s|%s|%d|%d|%s", placeholder_graph.id, tostring(opts and opts.device),
    tostring(opts and opts.noopt), tostring(opts and opts.beam), realize_points.ROW_FUSE_BYTES,
    realize_points.DEQUANT_ROWS, tostring(env.EMU_GPU))
  return inputs, key, placeholder_graph
end

-- The template of a plan (tcl.schedule.create's result) made for a graph over inputs.
local function template_of(sched, outputs, inputs, placeholder_graph)
  local input_slot = {}
  for i, b in ipairs(inputs) do input_slot[b.arg[1]] = i end
  local new_slot, news = {}, {}
  local function slot_of(b)
    local id = b.arg[1]
    local i = input_slot[id]
    if i then return i end
    local m = new_slot[id]
    if not m then
      m = #news + 1
      new_slot[id] = m
      news[m] = { dtype = b.dtype, numel = b.arg[2], device = b.arg[3], shape = sched.buffer_shapes[id] }
    end
    return -m
  end
  local kernels = {}
  for n, k in ipairs(sched.kernels) do
    local slots = {}
    for j, b in ipairs(k.buffers) do slots[j] = slot_of(b) end
    kernels[n] = { ast = k.ast, name = k.name, slots = slots }
  end
  local results = {}
  for i, node in ipairs(outputs) do
    local realized = sched.outputs[i]
    local b = buffers.viewed(realized)
    if not b then return nil end
    results[i] = { slot = slot_of(b), shape = shape.shared(node) }
  end
  return { graph = placeholder_graph, kernels = kernels, news = news, results = results, device = sched.device }
end

local as_view = buffers.as_view

-- A plan over inputs from a template, in tcl.schedule.create's form.
local function instantiate(template, outputs, inputs)
  local made, buffer_shapes = {}, {}
  for m, spec in ipairs(template.news) do
    local b, id = buffers.new(spec.dtype, spec.numel, spec.device)
    made[m] = b
    buffer_shapes[id] = spec.shape
  end
  local function buffer(slot)
    if slot > 0 then return inputs[slot] end
    return made[-slot]
  end
  local kernels = {}
  for n, k in ipairs(template.kernels) do
    local list = {}
    for j, slot in ipairs(k.slots) do list[j] = buffer(slot) end
    kernels[n] = { ast = k.ast, name = k.name, buffers = list }
  end
  local realized, results, stored = {}, {}, {}
  for i, node in ipairs(outputs) do
    local r = template.results[i]
    local b = buffer(r.slot)
    realized[i] = as_view(b, r.shape)
    results[node] = realized[i]
    stored[node] = b
  end
  return { kernels = kernels, outputs = realized, results = results, stored = stored, device = template.device,
    buffer_shapes = buffer_shapes, from_plan_cache = true }
end

--- The plan of outputs (tcl.schedule.create's result): a template's when a graph of the same
-- structure was planned before, else create(outputs, opts)'s, kept for next time.
function M.plan(outputs, opts, create)
  if not env.PLAN_CACHE then return create(outputs, opts) end
  local inputs, key, placeholder_graph = key_of(outputs, opts)
  if not inputs then
    counts.uncached = counts.uncached + 1
    return create(outputs, opts)
  end
  local template = entries[key]
  if template then
    counts.hits = counts.hits + 1
    return instantiate(template, outputs, inputs)
  end
  counts.misses = counts.misses + 1
  local sched = create(outputs, opts)
  template = template_of(sched, outputs, inputs, placeholder_graph)
  if template then keep(key, template) end
  return sched
end

--- Counts since the state opened: hits, misses (planned and kept) and uncached (graphs with
-- an ASSIGN), and the plans kept now.
function M.stats()
  return { hits = counts.hits, misses = counts.misses, uncached = counts.uncached, entries = entry_count }
end

--- Forgets every plan.
function M.clear()
  entries, entry_count, queue, first, last = {}, 0, {}, 1, 0
end

return M
