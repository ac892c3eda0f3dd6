-- tcl.api.jit — execution plans (tcl.jit): a function of tensors captured once as the list of
-- kernels it runs, then replayed on new inputs without scheduling, lowering or compiling.
-- Layer: lua/tcl/api (over tcl.schedule).
--
--   local step = tcl.jit(function(x, w) return (x:matmul(w) + 1):relu() end)
--   for i = 1, n do local y = step(batch[i], w) ... end
--
-- Calls with one signature (the shapes of the tensor arguments):
--   1st  runs fn as usual (a warm-up: it compiles, and realizes lazy state fn reads once,
--        such as weights, which a plan must not redo on every call); then every tensor made
--        before the call whose lazy node fn read (a closed-over Tensor.ones(2), x * 0 + 1) is
--        realized in place, so the plan reads its buffer and sees later assigns to it;
--   2nd  runs fn and captures every kernel it runs (tcl.schedule's recorder), with the runtime
--        buffers each one reads and writes;
--   3rd+ replay: pending assigns run, the tensor arguments are realized, put in the slots where the captured call's
--        arguments were, and the kernels run in order; fn is not called.
-- A new combination of shapes starts over with a plan of its own. What must stay as captured
-- is an error: the number of arguments, which of them are tensors, their dtypes and devices,
-- which of them are the same tensor, and the values of non-tensor arguments (they are
-- constants in the kernels; pass a value that changes as Tensor.scalar(v)).
--
-- fn must compute tensors only: reading values to the host while a plan is captured
-- (tolist, item, print, data) is an error, since a replay cannot repeat it. It returns one
-- or more tensors. Results of a replay are tensors over the plan's own buffers: the next call
-- of the same plan overwrites them (as tinygrad's TinyJit does), so copy what must be kept
-- (t:clone():realize()) before calling again. An argument that is a
-- result of the same plan is copied in first, so feeding results back (x = step(x)) is fine.
--
--   step:stats() -> { plans =, captured = (calls that captured), replayed =, kernels = (in
--                     the plans) }
--
-- tcl.jit(fn, { on_result = function(i, t, kernels_left) end }): during a replay, on_result is
-- called with each result as soon as the last kernel that writes it has run, before the plan's
-- later kernels (kernels_left of them; results no kernel writes, such as an argument returned,
-- come before the first). A caller can start work on a result while the plan computes the
-- others: the data-parallel wrapper starts each gradient bucket's all-reduce so. It must not
-- change the result or call the plan.
local class = require "tcl.api.class"
local check = require "tcl.api.check"
local tensor = require "tcl.api.tensor"
local schedule = require "tcl.schedule"
local buffers = require "tcl.schedule.buffers"
local pending_assigns = require "tcl.api.pending_assigns"
local views = require "tcl.api.views"
local index_checks = require "tcl.api.index_checks"
local variables = require "tcl.variables"
local shapes = require "tcl.shape"

local M = {}

local is_tensor = class.is_tensor

local function message(fmt, ...) return "jit: " .. string.format(fmt, ...) end

local function describe(v)
  if is_tensor(v) then return string.format("a %s tensor on %s", v.dtype.name, v.device) end
  if type(v) == "string" then return string.format("%q", v) end
  return tostring(v)
end

--- The calls' fixed facts (arity, kinds, dtypes, devices, constants) and the plan key (shapes
-- and which tensor arguments are the same tensor).
local function signature(args)
  local fixed, key = { n = args.n }, {}
  for i = 1, args.n do
    local a = args[i]
    if is_tensor(a) then
      fixed[i] = { tensor = true, dtype = a.dtype, device = a.device }
      local same = ""
      for j = 1, i - 1 do
        if is_tensor(args[j]) and args[j] == a then same = "=" .. j break end
      end
      -- a variable size keys by its variable: one plan for every value
      local sizes = {}
      for k, d in ipairs(a._shape) do sizes[k] = variables.format(d, true) end
      key[#key + 1] = table.concat(sizes, "x") .. same
    elseif variables.is_symbolic(a) then -- a bound variable (T:bind(n)): its value changes per call
      fixed[i] = { size = variables.format(a, true) }
      key[#key + 1] = "size " .. fixed[i].size
    else
      fixed[i] = { value = a }
      key[#key + 1] = "-"
    end
  end
  return fixed, table.concat(key, ",")
end

--- nil when the call's fixed facts are the first call's, else what differs.
local function misuse(first, now)
  if now.n ~= first.n then
    return message("called with %d arguments, but the function was first called with %d", now.n, first.n)
  end
  for i = 1, now.n do
    local a, b = first[i], now[i]
    if a.tensor ~= b.tensor then
      return message("argument %d is %s, but it was %s when first called", i,
        b.tensor and "a tensor" or "not a tensor", a.tensor and "a tensor" or "not a tensor")
    elseif a.tensor and a.dtype ~= b.dtype then
      return message("argument %d is %s, but the plans were captured with %s (a new dtype needs a new tcl.jit)",
        i, b.dtype.name, a.dtype.name)
    elseif a.size ~= b.size then
      return message("argument %d is %s, but it was %s when first called", i,
        b.size and "the variable size " .. b.size or "not a variable size",
        a.size and "the variable size " .. a.size or "not a variable size")
    elseif a.tensor and a.device ~= b.device then
      return message("argument %d is on %s, but the plans were captured on %s", i, b.device, a.device)
    elseif not a.tensor and not a.size and a.value ~= b.value and not (a.value ~= a.value and b.value ~= b.value) then
      return message("argument %d is %s, but it was %s when first called: values that are not tensors are "
        .. "compiled into the kernels (pass a changing value as Tensor.scalar(v))", i, describe(b.value),
        describe(a.value))
    end
  end
  return nil
end

local function tensors_in(args)
  local list = {}
  for i = 1, args.n do if is_tensor(args[i]) then list[#list + 1] = args[i] end end
  return list
end

-- The arguments are realized, and the assignments pending anywhere run: a plan reads buffers,
-- so an assignment made between calls (x:assign(v) of a tensor fn reads) is seen as the
-- function itself would see it.
local function realize_inputs(args)
  pending_assigns.run(tensor.realize_all)
  local list = tensors_in(args)
  if #list > 0 then tensor.realize_all(table.unpack(list)) end
end

local STORED_VIEW_OPS = { RESHAPE = true, PERMUTE = true, SHRINK = true, FLIP = true, EXPAND = true, PAD = true,
  DETACH = true }

--- Whether t's node reads only a buffer (a chain of movement ops over a BUFFER).
local function reads_a_buffer(t)
  local node = t.uop
  while STORED_VIEW_OPS[node.op] do node = node.src[1] end
  return node.op == "BUFFER"
end

--- Runs fn(...) as the warm-up call; then realizes, in place, every tensor made before the
-- call that a node built by fn read while its node was lazy (a closed-over Tensor.ones(2), a
-- model's weights still being computed), so that the plan captured next reads their buffers
-- instead of folding their expressions in: a later assign to them is seen by the replays.
local function warm_up(fn, ...)
  local outer = class.watch
  local watch = { made = setmetatable({}, { __mode = "k" }), used = setmetatable({}, { __mode = "k" }) }
  class.watch = watch
  local out = table.pack(pcall(fn, ...))
  class.watch = outer
  if outer then -- a warm-up inside another's: the outer one sees what this one used
    for t in pairs(watch.used) do if not outer.made[t] then outer.used[t] = true end end
    for t in pairs(watch.made) do outer.made[t] = true end
  end
  if not out[1] then error(out[2], 0) end
  local by_device = {}
  for t in pairs(watch.used) do
    -- a tensor marked to be recomputed where it is used (a weight dequantized inside the
    -- matmuls that read its blocks, tcl.api.gguf), or a view of one, stays lazy
    local base = rawget(t, "_view_base")
    if not reads_a_buffer(t) and not rawget(t, "_recompute") and not (base and rawget(base, "_recompute")) then
      if base then
        views.settle(t, base, tensor.realize_all, buffers.viewed)
      else
        local group = by_device[t.device] or {}
        by_device[t.device] = group
        group[#group + 1] = t
      end
    end
  end
  for _, group in pairs(by_device) do tensor.realize_all(table.unpack(group)) end
  return table.pack(table.unpack(out, 2, out.n))
end

--- nil when fn's results are tensors, else why not (who: the message's prefix, default "jit").
local function bad_results(results, who)
  who = who or "jit"
  if results.n == 0 then return who .. ": the function returned nothing; it must return tensors" end
  for i = 1, results.n do
    if not is_tensor(results[i]) then
      return string.format("%s: result %d is %s; a %s function returns tensors only", who, i, describe(results[i]),
        who == "jit" and "jitted" or "captured")
    end
  end
  return nil
end

M.bad_results = bad_results

---------------------------------------------------------------------------------------------
-- capturing

--- Runs fn on args (a table.pack) while recording every kernel it runs; returns the list of
-- { kernel =, nodes = (BUFFER nodes), storages = (runtime buffers, slot 1 the written one) } in
-- run order and fn's results (a table.pack, realized). Reading values to the host meanwhile is
-- an error. opts (optional): who (the prefix of error messages, default "jit"), contiguous (true:
-- each result becomes t:contiguous() before it is realized, so a view is stored by a copy kernel
-- in a buffer of its own), unchecked (true: no index checks are made meanwhile, as a program
-- that cannot report them needs). tcl.export captures its plans with this function too.
function M.record(fn, args, opts)
  local who = opts and opts.who or "jit"
  local recorded = {}
  index_checks.run_pending()
  local was_disabled = index_checks.disabled
  if opts and opts.unchecked then index_checks.disabled = true end
  -- a capture inside another's (a jitted function calling one) records for both
  local outer_recorder, outer_read_hook = schedule.recorder, buffers.read_hook
  schedule.recorder = function(kernel, nodes, storages, values, staged)
    recorded[#recorded + 1] = { kernel = kernel, nodes = nodes, storages = storages, staged = staged }
    if outer_recorder then outer_recorder(kernel, nodes, storages, values, staged) end
  end
  buffers.read_hook = function()
    error(who .. ": the function read tensor values to the host (tolist, item, print, data) while its plan was "
      .. "captured; a " .. (who == "jit" and "jitted" or "captured") .. " function must only compute tensors", 0)
  end
  local results = table.pack(pcall(function()
    local out = table.pack(fn(table.unpack(args, 1, args.n)))
    local bad = bad_results(out, who)
    if bad then error(bad, 0) end
    if opts and opts.contiguous then
      for i = 1, out.n do out[i] = out[i]:contiguous() end
    end
    tensor.realize_all(table.unpack(out, 1, out.n))
    return out
  end))
  schedule.recorder, buffers.read_hook = outer_recorder, outer_read_hook
  index_checks.disabled = was_disabled
  if not results[1] then error(results[2], 0) end
  return recorded, results[2]
end

--- Runs fn on args while recording its kernels; returns the plan and fn's results.
local function capture(fn, args)
  local recorded, out = M.record(fn, args)

  -- where each argument's buffer was: its storage -> the (first) argument's position
  local input_at = {}
  for i = args.n, 1, -1 do
    if is_tensor(args[i]) then input_at[buffers.get(buffers.viewed(args[i].uop))] = i end
  end
  -- checked: the devices whose index-check flag a step writes (a replay re-arms them)
  local plan = { steps = {}, outputs = {}, made = {}, staging = {}, checked = {} }
  for _, r in ipairs(recorded) do
    local flag_device = index_checks.flag_device(r.storages[1])
    if flag_device then plan.checked[#plan.checked + 1] = flag_device end
    local slots, list = {}, {}
    for k, storage in ipairs(r.storages) do
      local i = input_at[storage]
      -- an argument bound to a larger shape of variables is read through a staged copy of the
      -- largest size (tcl.schedule.run): a replay copies that call's argument into it again
      local source = r.staged and r.staged[storage]
      if source and input_at[source] then
        list[k] = storage
        slots[#slots + 1] = { k, input_at[source], staged = storage }
      elseif i then
        slots[#slots + 1] = { k, i }
      else
        list[k] = storage
      end
    end
    -- nodes: keep the plan's BUFFER nodes alive, so tcl.schedule.buffers never frees their memory;
    -- variables: a kernel made for variable sizes takes their values last (rewritten per replay)
    plan.steps[#plan.steps + 1] = { kernel = r.kernel, buffers = list, inputs = slots, nodes = r.nodes,
      variables = r.kernel.variables }
    -- slot 0 is what the kernel writes; an argument written in place (cache[i] = v of an
    -- argument) stays the argument's buffer
    if not input_at[r.storages[1]] then plan.made[r.storages[1]] = true end
  end
  -- the last step that writes each storage: a result is ready once it has run
  -- (an argument's storage by the argument's position: a step written in place into it)
  local last_write, last_write_of_input = {}, {}
  for k, step in ipairs(plan.steps) do
    if step.buffers[1] then last_write[step.buffers[1]] = k end
    for _, slot in ipairs(step.inputs) do
      if slot[1] == 1 and not slot.staged then last_write_of_input[slot[2]] = k end
    end
  end
  -- ready_after[k]: the results whose last kernel is step k (k = 0: none writes them)
  plan.ready_after = {}
  for i = 1, out.n do
    local t = out[i]
    local storage = buffers.get(buffers.viewed(t.uop))
    -- a result that is an argument (returned as it came) is that call's argument on replay
    local input = not plan.made[storage] and input_at[storage] or nil
    plan.outputs[i] = { uop = t.uop, shape = t.shape, device = t.device, input = input,
      symbolic = shapes.is_symbolic(t._shape) }
    local k
    if input then k = last_write_of_input[input] or 0 else k = last_write[storage] or 0 end
    local ready = plan.ready_after[k] or {}
    ready[#ready + 1] = i
    plan.ready_after[k] = ready
  end
  return plan, out
end

---------------------------------------------------------------------------------------------
-- replaying

-- The values of the variables in a call's arguments: bound sizes, and the sizes of tensors.
local function call_values(args)
  local values = {}
  for i = 1, args.n do
    local a = args[i]
    if is_tensor(a) then
      for _, d in ipairs(a._shape) do variables.values_in(d, values) end
    elseif variables.is_symbolic(a) then
      variables.values_in(a, values)
    end
  end
  return values
end

-- Result o of a replay with the call's arguments and variable values.
local function result_tensor(o, args, values)
  if o.input then return args[o.input] end
  if o.symbolic then -- a result of variable size: this call's values
    local shape = {}
    for k, d in ipairs(o.shape) do shape[k] = variables.rebind_size(d, values) end
    return class.wrap(variables.rebind(o.uop, values), shape, o.device)
  end
  return class.wrap(o.uop, table.move(o.shape, 1, #o.shape, 1, {}), o.device)
end

-- Makes the results listed in ready (indices) and hands each to on_result, with the number of
-- the plan's kernels still to run.
local function announce(ready, results, plan, args, values, on_result, kernels_left)
  for _, i in ipairs(ready) do
    results[i] = result_tensor(plan.outputs[i], args, values)
    on_result(i, results[i], kernels_left)
  end
end

local function replay(plan, args, on_result)
  realize_inputs(args)
  local values, data_of = call_values(args), {}
  local storages = {}
  for i = 1, args.n do
    local a = args[i]
    if is_tensor(a) then
      local storage = buffers.get(buffers.viewed(a.uop))
      if plan.made[storage] then -- a result of this plan: the plan would overwrite what it reads
        local copy = plan.staging[i]
        if not copy then
          copy = buffers.allocate(storage.dtype, storage.numel, storage.device)
          plan.staging[i] = copy
        end
        copy:copy_from(storage)
        storage = copy
      end
      storages[i] = storage
    end
  end
  local recorder = schedule.recorder -- set when this replay runs inside another plan's capture
  local results = {}
  local ready_after = on_result and plan.ready_after
  if ready_after and ready_after[0] then
    announce(ready_after[0], results, plan, args, values, on_result, #plan.steps)
  end
  for at, step in ipairs(plan.steps) do
    local list = step.buffers
    for _, slot in ipairs(step.inputs) do
      if slot.staged then
        slot.staged:write_bytes(buffers.padded_bytes(storages[slot[2]], slot.staged))
      else
        list[slot[1]] = storages[slot[2]]
      end
    end
    if step.variables then
      -- the values in the kernel's order, made once per replay for each kernel's list of names
      local data = data_of[step.variables]
      if not data then
        data = {}
        for k, name in ipairs(step.variables) do
          data[k] = values[name]
          if data[k] == nil then error(message("the plan's kernel %s reads variable %s, which no argument binds",
            step.kernel.name, name), 0) end
        end
        data_of[step.variables] = data
      end
      list[#list]:write(data)
    end
    step.kernel:run(list)
    if recorder then recorder(step.kernel, step.nodes, table.move(list, 1, #list, 1, {})) end
    if ready_after and ready_after[at] then
      announce(ready_after[at], results, plan, args, values, on_result, #plan.steps - at)
    end
  end
  for _, device in ipairs(plan.checked) do index_checks.arm(device) end
  for i, o in ipairs(plan.outputs) do
    if not results[i] then results[i] = result_tensor(o, args, values) end
  end
  return table.unpack(results, 1, #plan.outputs)
end

---------------------------------------------------------------------------------------------
-- the jitted function

local Jit = {}
Jit.__index = Jit
Jit.__name = "tcl.jit"

function Jit:__call(...)
  local args = table.pack(...)
  local fixed, key = signature(args)
  if self.fixed then
    local wrong = misuse(self.fixed, fixed)
    if wrong then error(wrong, 2) end
  else
    self.fixed = fixed
  end
  local plan = self.plans[key]
  if plan then
    self.replayed = self.replayed + 1
    return replay(plan, args, self.on_result)
  end
  realize_inputs(args)
  local seen = (self.calls[key] or 0) + 1
  self.calls[key] = seen
  if seen == 1 then -- warm-up
    local out = warm_up(self.fn, ...)
    local bad = bad_results(out)
    if bad then error(bad, 2) end
    return table.unpack(out, 1, out.n)
  end
  local out
  plan, out = capture(self.fn, args)
  self.plans[key] = plan
  self.captured = self.captured + 1
  return table.unpack(out, 1, out.n)
end

function Jit:stats()
  local plans, kernels = 0, 0
  for _, plan in pairs(self.plans) do
    plans = plans + 1
    kernels = kernels + #plan.steps
  end
  return { plans = plans, captured = self.captured, replayed = self.replayed, kernels = kernels }
end

function Jit:__tostring()
  local s = self:stats()
  return string.format("tcl.jit(%d plans, %d kernels)", s.plans, s.kernels)
end

--- tcl.jit(fn [, opts]): fn as a jitted function (see the header). opts.on_result: a function
-- called with (i, result i, kernels left) during each replay, as soon as result i is computed.
function M.jit(fn, opts)
  if type(fn) ~= "function" and not (getmetatable(fn) or {}).__call then
    error("jit: expected a function, got " .. type(fn), 2)
  end
  if opts ~= nil and (type(opts) ~= "table" or is_tensor(opts)) then
    error("jit: options must be a table such as { on_result = f }, got " .. check.type_name(opts), 2)
  end
  opts = opts or {}
  for k in pairs(opts) do
    if k ~= "on_result" then
      error(string.format("jit: unknown option '%s' (the one option is on_result)", tostring(k)), 2)
    end
  end
  if opts.on_result ~= nil and type(opts.on_result) ~= "function" then
    error("jit: on_result must be a function, got " .. check.type_name(opts.on_result), 2)
  end
  return setmetatable({ fn = fn, plans = {}, calls = {}, captured = 0, replayed = 0, on_result = opts.on_result },
    Jit)
end

-- a stray argument (tcl.jit(fn, opts, extra)) is an error (check.fixed_arguments)
M.jit = check.fixed_arguments("jit", M.jit)

return M
