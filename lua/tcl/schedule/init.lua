-- tcl.schedule — realize: split the lazy tensor graph into kernels, order them, run them.
-- Layer: Lua scheduler (docs/design/scheduling.md). Input: tensor-graph nodes
-- (docs/design/encodings.md); output: kernel ASTs (built by tcl.schedule.rangeify) on BUFFER
-- nodes (tcl.schedule.buffers).
--
--   local schedule = require "tcl.schedule"
--   local s = schedule.create({ out1, out2 })   -- plan only: kernels, buffers, results
--   local realized = schedule.run({ out1, out2 }) -- plan, compile (tcl.codegen.driver.lower), run
--   schedule.run(outputs, { device = "EMU" })   -- where a graph that reads no buffer runs
--
-- Which nodes are stored by a kernel of their own (the realize points) is the fusion policy
-- of tcl.schedule.realize_points; everything else is fused into the kernels that use it. A
-- BUFFER is loaded, never recomputed; a realize point that only views stored elements in
-- order (RESHAPE/CONTIGUOUS/DETACH of a BUFFER or of another realize point) shares that
-- buffer and needs no kernel. Kernels are built in topological order, which is a dependency
-- order: a kernel only loads buffers stored by earlier kernels (or already realized). An ASSIGN
-- stores into its target's buffer; tcl.schedule.assign orders the kernels around it.
local core = require "tcl.core"
local env = require "tcl.env"
local shape = require "tcl.shape"
local variables = require "tcl.variables"
local buffers = require "tcl.schedule.buffers"
local rangeify = require "tcl.schedule.rangeify"
local realize_points = require "tcl.schedule.realize_points"
local split_reduce = require "tcl.schedule.split_reduce"
local assign = require "tcl.schedule.assign"
local transfers = require "tcl.schedule.transfers"
local memory_check = require "tcl.schedule.memory_check"
local plan_cache = require "tcl.schedule.plan_cache"
local lower = require "tcl.codegen.driver.lower"
local pattern = require "tcl.pattern"

local M = {}

--- While set (tcl.viz), create explains its plans: sched.explained = { graph = (the planned
-- graph's SINK), realize = { [node id] = true } (the realize points), why = { [node id] =
-- the decision in words } (tcl.schedule.realize_points) }; and run calls observer(sched,
-- kernels) after each realize that ran kernels (the compiled kernels, in run order).
M.explain, M.observer = false, nil

--- A kernel's arguments with the values of the variables it reads appended: one int32 buffer,
-- the values in the order of the kernel's `variables` (names; see the pass "bind variables").
local function variable_args(list, names, values, device)
  local data = {}
  for i, name in ipairs(names) do
    local v = values[name]
    if v == nil then error(string.format("realize: a kernel reads variable %s, which has no value", name), 0) end
    data[i] = v
  end
  local out = table.move(list, 1, #list, 1, {})
  out[#out + 1] = buffers.host_ints(data, device)
  return out
end

--- A buffer read in a shape of variables larger than it is (x:reshape(4, T:bind(17)) of a
-- realized x) is copied into a new buffer of the shape's largest size, zero-filled past its
-- elements, and the graph reads that instead: the kernels then see a buffer of one size for
-- every value (the runtime checks buffer sizes). Returns the graph and { [staged storage] =
-- the source's storage } (tcl.jit copies a replay's argument into the staged storage again).
local function stage_widened(sink, widen)
  local map, staged = {}, {}
  for buffer, numel in pairs(widen) do
    local source = buffers.get(buffer)
    local copy = buffers.new(buffer.dtype, numel, buffer.arg[3])
    local storage = buffers.get(copy, "none")
    storage:write_bytes(buffers.padded_bytes(source, storage))
    map[buffer], staged[storage] = copy, source
  end
  return pattern.substitute(sink, map), staged
end

--- While set, called as recorder(kernel, buffer_nodes, storages, values, staged) for every
-- kernel that run executes, in order (tcl.jit captures execution plans with it): the compiled
-- kernel (tcl.codegen.driver.lower), its BUFFER nodes and their runtime buffers, in PARAM slot
-- order (a kernel with variables has one storage more, last: their values), the variables'
-- values { [name] = value } and the staged copies { [storage] = source storage } (stage_widened).
M.recorder = nil

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

local as_view = buffers.as_view

--- The device of the buffers the graph reads (`default`, else the default device, when it
-- reads none); kernels run where their data is, so a graph over several devices is an error.
local function graph_device(order, default)
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
  return device or default or buffers.device
end

--- Plans the realization of outputs (a list of tensor-graph nodes). Returns
--   { kernels = { {ast=, buffers=, name=, root=}... } in dependency order (root: the realize
--     point the kernel stores),
--     outputs = { the realized node of each output, in order },
--     results = { [output node] = realized node },
--     stored = { [output node] = the BUFFER node holding its values },
--     device = where the kernels run,
--     buffer_shapes = { [buffer id] = the shape of the value stored there, for the new buffers } }
-- A realized node is the result BUFFER node viewed in the output's shape: RESHAPE(BUFFER,
-- shape), or the BUFFER itself when the shape is {numel}. Buffers are registered (tcl.schedule.buffers)
-- but allocated only when a kernel runs. opts.device: the device of a graph that reads no
-- buffer (a constant, arange, ...); the default device when nil.
function M.create(outputs, opts)
  check_outputs(outputs, "create")
  local sink = core.uop("SINK", nil, outputs)
  local order = sink:toposort()
  local without = assign.without_realized(sink, order)
  if without ~= sink then
    sink, order = without, without:toposort()
  end
  for _, node in ipairs(order) do -- validates every node (sources first: shallow recursion)
    if node ~= sink then shape.shared(node) end
  end
  -- the graph that is planned: large reductions split in two stages (its outputs, by position)
  local current = sink.src
  local planned = split_reduce.apply(current, order)
  if planned ~= current then
    sink = core.uop("SINK", nil, planned)
    order = sink:toposort()
  end
  local device = graph_device(order, opts and opts.device)
  local why = M.explain and {} or nil
  local realize = realize_points.decide(order, sink, planned,
    { row_fuse = realize_points.row_fuse_on(device), why = why })

  local stored_in = {} -- node id -> BUFFER node holding the node's value
  local function stored(node) return stored_in[node.id] end
  -- ASSIGN node id -> the node that reads its value afterwards, for an assignment into a view
  -- that moves elements (its value is the view's elements of the buffer, not the buffer in order)
  local assigned_view = {}
  local kernels = {}
  local buffer_shapes = {} -- buffer id -> the shape of the value a kernel stores there (for messages)
  for _, node in ipairs(order) do
    if node.op == "ASSIGN" then
      local buf, base = assign.target_buffer(node, stored_in)
      if base then
        local base_view = base.op == "BUFFER" and base or as_view(buf, shape.shared(base))
        assigned_view[node.id] = pattern.substitute(node.src[1], { [base] = base_view })
      else
        stored_in[node.id] = buf
      end
      if shape.numel(shape.shared(node)) > 0 then
        local kernel = rangeify.kernel(node, buf, stored, base)
        if assign.reads_elsewhere(kernel) then
          -- the value reads the target at other elements: store it apart first, then copy it in
          local value = node.src[2]
          local temp = buffers.new(value.dtype, shape.numel(shape.shared(value)), device)
          buffer_shapes[temp.arg[1]] = shape.shared(value)
          local first = rangeify.kernel(value, temp, stored)
          first.root = value
          kernels[#kernels + 1] = first
          stored_in[value.id] = temp
          kernel = rangeify.kernel(node, buf, stored, base)
        end
        kernel.root, kernel.assigns, kernel.assigned_view = node, buf, assigned_view[node.id]
        kernels[#kernels + 1] = kernel
      end
    elseif realize[node.id] then
      local buf = stored_elsewhere(node, stored_in)
      if not buf then
        -- a value of variable size is stored in a buffer of its largest size, laid out as its
        -- shape for this call's values (rangeify's flat index); reads view it the same way
        local numel = shape.max_numel(shape.shared(node))
        local limit = buffers.too_large(node.dtype, numel, device)
        if limit then
          error(string.format("realize: a %s tensor of shape %s needs %.0f bytes, more than %s can hold (%d bytes)",
            node.dtype.name, shape.format(shape.shared(node)), numel * node.dtype.itemsize + 0.0, device, limit), 0)
        end
        buf = buffers.new(node.dtype, numel, device)
        buffer_shapes[buf.arg[1]] = shape.shared(node)
        if numel > 0 then
          local kernel = rangeify.kernel(node, buf, stored)
          kernel.root = node
          kernels[#kernels + 1] = kernel
        end
      end
      stored_in[node.id] = buf
    end
  end

  kernels = assign.order(kernels, stored_in)

  local results, realized, stored_map = {}, {}, {}
  for i, node in ipairs(outputs) do
    local stored_node = stored_in[planned[i].id]
    realized[i] = assigned_view[planned[i].id] or as_view(stored_node, shape.shared(node))
    results[node] = realized[i]
    stored_map[node] = stored_node
  end
  return { kernels = kernels, outputs = realized, results = results, stored = stored_map, device = device,
    buffer_shapes = buffer_shapes, explained = why and { graph = sink, realize = realize, why = why } }
end

--- One line per schedule: the number of kernels and their names; with timing (DEBUG=1 in
-- run), the time spent scheduling and how the kernels were had: compiled, read from the
-- device's disk cache, or found in memory.
function M.summary(sched, timing)
  local names = {}
  for i, k in ipairs(sched.kernels) do names[i] = k.name end
  local line = string.format("schedule: %d kernel%s%s%s", #names, #names == 1 and "" or "s", #names > 0 and ": " or "",
    table.concat(names, ", "))
  if timing then
    line = line .. string.format(" | %s in %.2f ms; %d compiled in %.2f ms, %d from disk, %d in memory",
      sched.from_plan_cache and "plan reused" or "scheduled", timing.schedule_seconds * 1e3, timing.compiled,
      timing.compile_seconds * 1e3, timing.from_disk,
      timing.in_memory)
  end
  return line
end

--- Realizes outputs: frees dead buffers, plans, compiles the kernels (tcl.codegen.driver.lower, all at
-- once: cached by content, the CPU device compiles on worker threads) and runs them. Returns
-- the list of realized nodes (see create) and the schedule. opts: as create's, plus noopt and
-- beam (per-call NOOPT and BEAM for these kernels).
function M.run(outputs, opts)
  check_outputs(outputs, "run")
  buffers.collect()
  -- copies between devices first: each realizes its source on its own device
  outputs = transfers.resolve(outputs, M.run, M.recorder)
  local start = core.clock()
  -- plans and kernels are made for the variables, never their values (tcl.variables): the
  -- graph is planned unbound, and the values go to the kernels that read a variable
  local values, staged = {}, nil
  if variables.in_use then
    local sink = core.uop("SINK", nil, outputs)
    local unbound, _, widen
    unbound, values, _, widen = variables.unbind(sink)
    if next(widen) then unbound, staged = stage_widened(unbound, widen) end
    if unbound ~= sink then outputs = unbound.src end
  end
  local sched = plan_cache.plan(outputs, opts, M.create)
  local scheduled = core.clock()
  if #sched.kernels == 0 then
    if env.DEBUG >= 1 then lower.log(M.summary(sched)) end
  else
    -- every buffer and program first, so running out of memory or a failed compile stops
    -- the realize before any kernel has run; and more new host memory than there is, before
    -- anything is compiled or allocated
    memory_check.check(sched)
    local items, args = {}, {}
    for n, k in ipairs(sched.kernels) do items[n] = { ast = k.ast, name = k.name } end
    local before = lower.stats()
    local programs = lower.compile_many(items, sched.device, { noopt = opts and opts.noopt, beam = opts and opts.beam })
    -- a kernel writes all of its output (slot 1), unless it assigns into a view of it: a new
    -- output's memory is not cleared first
    local output_fill = env.POISON_OUTPUTS and "poison" or "none"
    for n, k in ipairs(sched.kernels) do
      local list = {}
      for i, b in ipairs(k.buffers) do
        local ok, storage = pcall(buffers.get, b, i == 1 and not k.assigns and output_fill or nil)
        if not ok then error("realize: " .. tostring(storage), 0) end
        list[i] = storage
      end
      args[n] = list
    end
    if env.DEBUG >= 1 then
      local after = lower.stats()
      lower.log(M.summary(sched, { schedule_seconds = scheduled - start, compiled = after.built - before.built,
        compile_seconds = after.build_seconds - before.build_seconds, from_disk = after.disk_hits - before.disk_hits,
        in_memory = after.memory_hits - before.memory_hits }))
    end
    local recorder = M.recorder
    for n, program in ipairs(programs) do
      local kernel_args = args[n]
      local names = program.variables
      if names then kernel_args = variable_args(kernel_args, names, values, sched.device) end
      program:run(kernel_args)
      if recorder then recorder(program, sched.kernels[n].buffers, kernel_args, values, staged) end
    end
    for _, k in ipairs(sched.kernels) do
      if k.assigns then assign.remember(k.root, k.assigned_view or as_view(k.assigns, shape.shared(k.root))) end
    end
    if M.observer then M.observer(sched, programs) end
  end
  if next(values) then
    local outs = {}
    for i, node in ipairs(sched.outputs) do outs[i] = variables.rebind(node, values) end
    return outs, sched
  end
  return sched.outputs, sched
end

return M
