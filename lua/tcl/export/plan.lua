-- tcl.export.plan — what an exported model does: the kernels a function runs on example inputs,
-- captured as tcl.jit captures them, and the role of every buffer they touch. Layer: export
-- (over tcl.api.jit's recorder and tcl.schedule.buffers).
--
--   local p = plan.capture(fn, inputs)   -- inputs: realized CPU tensors
--   p.steps      { { kernel = k, buffers = { b1, b2, ... } } } in run order (b1: the written one)
--   p.kernels    { { name =, entry =, object =, nparams = } } the distinct kernels, by first use
--   p.buffers    every buffer once: { storage =, dtype =, numel =, bytes =, role =, first =, last = }
--                role: "input" (p.inputs[b.input]), "output" (written by a kernel into
--                p.outputs[b.output]), "constant" (read, never written: weights), "intermediate",
--                "variables" (the int32 values of the variables a kernel made for variable sizes
--                reads, its last argument: b.names lists them; filled per run, never a weight)
--   p.inputs     { { buffer =, shape =, dtype = } }
--   p.outputs    { { buffer =, shape =, dtype =, copy_of = (a buffer: the output is a copy of
--                an input, a constant or another output, made after the steps) } }
--   p.constants  the constant buffers the plan reads, by first use
--   p.results    fn's results of the captured call (tensors)
--   p.variables  { [name] = true } the variables the kernels read (tcl.variables)
--   plan.fold(p) (optional) drops the steps that compute constants from constants (see M.fold)
--
-- The function is called twice: a warm-up (it compiles, and realizes lazy state once, such as
-- weights) and the captured call. Results are made contiguous (t:contiguous()), so a view is
-- stored by a copy kernel in a buffer of its own. An exported model is a pure function of its
-- inputs: a kernel that writes a buffer which existed before the call (an in-place update of
-- state: assign, BatchNorm's running statistics while training), writes an input, or reads a
-- buffer that a later kernel writes is an error.
local core = require "tcl.core"
local devices = require "tcl.devices"
local class = require "tcl.api.class"
local tensor = require "tcl.api.tensor"
local jit = require "tcl.api.jit"
local buffers = require "tcl.schedule.buffers"
local shapes = require "tcl.shape"
local variables = require "tcl.variables"

local M = {}

local is_tensor = class.is_tensor

local function fail(fmt, ...) error("export: " .. string.format(fmt, ...), 0) end

local PURE = "export supports pure functions of their inputs"

local function numel_of(shape)
  local n = 1
  for _, d in ipairs(shape) do n = n * d end
  return n
end

-- The runtime buffer that holds tensor t's elements in order, or nil. A shape of variable
-- sizes is stored at its largest size, or at this call's (a buffer reshaped to bound sizes):
-- either way its elements come first, in order.
local function storage_of(t)
  local node = buffers.viewed(t.uop)
  if not node then return nil end
  local storage = buffers.get(node)
  if shapes.is_symbolic(t._shape) then
    local now = 1
    for _, d in ipairs(t._shape) do now = now * variables.value(d) end
    if storage.numel ~= now and storage.numel ~= shapes.max_numel(t._shape) then return nil end
  elseif storage.numel ~= numel_of(t._shape) then
    return nil
  end
  return storage, node
end

--- Checks the example inputs (a list of realized CPU tensors, none sharing memory with
-- another); returns their storages.
function M.check_inputs(inputs)
  if type(inputs) ~= "table" or is_tensor(inputs) then
    fail("inputs must be a list of example tensors, got %s", is_tensor(inputs) and "a tensor" or type(inputs))
  end
  if #inputs == 0 then fail("inputs is empty; an exported model takes one or more input tensors") end
  for i = 1, #inputs do
    local t = inputs[i]
    if not is_tensor(t) then fail("input %d is %s, not a tensor", i, type(t)) end
    if devices.base(t.device) ~= "CPU" then
      fail("input %d is on device %s; export compiles for the CPU device (create the inputs and the model on CPU)",
        i, t.device)
    end
  end
  for k in pairs(inputs) do
    if math.type(k) ~= "integer" or k < 1 or k > #inputs then fail("inputs must be a list (keys 1..n)") end
  end
  tensor.realize_all(table.unpack(inputs))
  local storages, seen = {}, {}
  for i, t in ipairs(inputs) do
    local storage = storage_of(t)
    if not storage then
      fail("input %d is a view into a larger buffer; pass a tensor of its own (t:clone():realize())", i)
    end
    if seen[storage] then
      fail("inputs %d and %d share memory; an exported model's inputs must not alias", seen[storage], i)
    end
    seen[storage] = i
    storages[i] = storage
  end
  return storages
end

local function describe_kernel(step, kernel)
  return string.format("kernel %d (%s)", step, kernel.name)
end

--- Runs fn on inputs twice (warm-up, capture) and classifies the captured plan (see the header).
function M.capture(fn, inputs)
  local input_storages = M.check_inputs(inputs)
  local args = table.pack(table.unpack(inputs))
  do -- the warm-up: as the captured call, unrecorded
    local warm = table.pack(fn(table.unpack(args, 1, args.n)))
    local bad = jit.bad_results(warm, "export")
    if bad then error(bad, 0) end
    for i = 1, warm.n do warm[i] = warm[i]:contiguous() end
    tensor.realize_all(table.unpack(warm, 1, warm.n))
  end

  local first_id = core.fresh_id() -- BUFFER nodes with smaller ids existed before the capture
  local recorded, results = jit.record(fn, args, { who = "export", contiguous = true, unchecked = true })
  if #recorded == 0 then
    fail("the function runs no kernel on these inputs (it returns inputs or constants as they are); nothing to export")
  end

  local p = { steps = {}, kernels = {}, buffers = {}, inputs = {}, outputs = {}, constants = {}, results = results,
    variables = {} }
  local by_storage, kernel_of = {}, {}
  local function buffer_of(storage, pre_existing)
    local b = by_storage[storage]
    if not b then
      b = { storage = storage, dtype = storage.dtype, numel = storage.numel,
        bytes = storage.numel * storage.dtype.itemsize, pre_existing = pre_existing }
      by_storage[storage] = b
      p.buffers[#p.buffers + 1] = b
    end
    return b
  end
  for i, t in ipairs(inputs) do
    local b = buffer_of(input_storages[i], true)
    b.role, b.input = "input", i
    p.inputs[i] = { buffer = b, shape = table.move(t._shape, 1, #t._shape, 1, {}), dtype = t.dtype }
  end

  local written, seen_write = {}, {}
  for _, r in ipairs(recorded) do written[r.storages[1]] = true end
  for s, r in ipairs(recorded) do
    local kernel, program = r.kernel, r.kernel.program
    if kernel.device ~= "CPU" or type(program.object) ~= "string" then
      fail("%s runs on device %s; export links CPU kernels only", describe_kernel(s, kernel), kernel.device)
    end
    local k = kernel_of[program.entry]
    if not k then
      k = { name = kernel.name, entry = program.entry, object = program.object, nparams = #program.params }
      kernel_of[program.entry] = k
      p.kernels[#p.kernels + 1] = k
    end
    local step = { kernel = k, buffers = {}, parallel_size = program.parallel_size, name = kernel.name }
    local values_slot = kernel.variables and #r.storages or nil
    for slot, storage in ipairs(r.storages) do
      local node, b = r.nodes[slot]
      if slot == values_slot and not node then
        -- the values of the variables the kernel reads (tcl.schedule's variable_args): written
        -- by the exported program from the run's sizes before the step, so neither an input
        -- nor a weight (a step reading it is never folded)
        b = buffer_of(storage, false)
        b.role, b.names = "variables", kernel.variables
        for _, name in ipairs(kernel.variables) do p.variables[name] = true end
      else
        b = buffer_of(storage, node.arg[1] < first_id)
        if slot == 1 then
          if b.role == "input" then
            fail("%s writes input %d in place; %s", describe_kernel(s, kernel), b.input, PURE)
          elseif b.pre_existing then
            fail("%s writes a tensor that existed before the call (state updated in place, such as assign or "
              .. "BatchNorm's running statistics while training); %s", describe_kernel(s, kernel), PURE)
          end
          b.role, b.writes = "intermediate", (b.writes or 0) + 1
          seen_write[storage] = true
        elseif written[storage] and not seen_write[storage] then
          fail("%s reads a buffer before a later kernel writes it (state carried between calls); %s",
            describe_kernel(s, kernel), PURE)
        end
      end
      step.buffers[slot] = b
    end
    p.steps[s] = step
  end

  for o = 1, results.n do
    local t = results[o]
    local storage = storage_of(t)
    if not storage then fail("result %d is not stored in a buffer of its own", o) end
    local b = by_storage[storage] or buffer_of(storage, true)
    local out = { shape = table.move(t._shape, 1, #t._shape, 1, {}), dtype = t.dtype }
    if b.role == "intermediate" then
      b.role, b.output = "output", o
      out.buffer = b
    else
      out.copy_of = b -- an input, a constant or an earlier output returned again
    end
    p.outputs[o] = out
  end
  for _, b in ipairs(p.buffers) do
    if not b.role then b.role = "constant" end
  end
  M.lifetimes(p)
  return p
end

--- Sets every buffer's lifetime from p.steps (first: the step that first writes it, last: the
-- last step that reads or writes it; an output lives to the copy after the last step) and
-- p.constants: the constant buffers the steps read or the outputs copy, by first use.
function M.lifetimes(p)
  for _, b in ipairs(p.buffers) do b.first, b.last = nil, nil end
  local constants, listed = {}, {}
  local function use(b)
    if b.role == "constant" and not listed[b] then
      listed[b] = true
      constants[#constants + 1] = b
    end
  end
  for s, step in ipairs(p.steps) do
    for slot, b in ipairs(step.buffers) do
      if slot == 1 or b.role == "variables" then b.first = b.first or s end
      b.last = math.max(b.last or s, s)
      use(b)
    end
  end
  for _, out in ipairs(p.outputs) do
    if out.buffer then out.buffer.last = #p.steps + 1 end -- held until it is copied out
    if out.copy_of then use(out.copy_of) end
  end
  p.constants = constants
end

--- Constant folding: a step that reads only constants (weights, or what such steps computed)
-- computes the same values on every run, and the captured run has computed them: its buffer
-- becomes a constant holding those values, and the step is dropped (a weight transposed for a
-- matmul, say, is then stored transposed). Steps writing an output, or a buffer written more
-- than once, stay. Returns how many steps were dropped.
function M.fold(p)
  local kept, dropped = {}, 0
  for _, step in ipairs(p.steps) do
    local out, foldable = step.buffers[1], true
    for slot = 2, #step.buffers do
      if step.buffers[slot].role ~= "constant" then foldable = false break end
    end
    if foldable and out.role == "intermediate" and out.writes == 1 then
      out.role, out.folded = "constant", true
      dropped = dropped + 1
    else
      kept[#kept + 1] = step
    end
  end
  if #kept == 0 then -- nothing would be left to run: keep the plan as it is
    for _, step in ipairs(p.steps) do
      if step.buffers[1].folded then step.buffers[1].role, step.buffers[1].folded = "intermediate", nil end
    end
    return 0
  end
  p.steps = kept
  local used = {}
  for _, step in ipairs(kept) do used[step.kernel] = true end
  local kernels = {}
  for _, k in ipairs(p.kernels) do
    if used[k] then kernels[#kernels + 1] = k end
  end
  p.kernels = kernels
  M.lifetimes(p)
  return dropped
end

return M
