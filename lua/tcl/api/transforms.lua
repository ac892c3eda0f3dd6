-- tcl.api.transforms — functional transforms in the style of JAX and rune: grad,
-- value_and_grad, vjp, jvp (forward mode) and vmap. Layer: lua/tcl/api.
--
--   local df = tcl.grad(function(x) return (x * x):sum() end)   -- df(x) = 2x
--   local d2 = tcl.grad(function(x) return tcl.grad(f)(x):sum() end)
--   local y, pullback = tcl.vjp(f, x)        -- pullback(cotangent) -> dx
--   local y, ty = tcl.jvp(f, { x }, { tx })   -- forward mode: ty = J tx
--
-- Argument positions (argnums) are 1-based. A transform gives each differentiated argument a
-- node of its own (a CONTIGUOUS tagged with a fresh number, free once the argument is stored):
-- nodes are hash-consed, so the same tensor passed twice, or a tensor that f also reaches
-- another way, still gets the partial derivative of its own position, and nested transforms
-- (grad of grad) never confuse their variables. Gradients are built with create_graph, so
-- they can be differentiated again.
local core = require "tcl.core"
local class = require "tcl.api.class"
local check = require "tcl.api.check"
local nodes = require "tcl.api.nodes"
local gradients = require "tcl.api.gradients"
local shapes = require "tcl.shape"

local is_tensor = class.is_tensor
local M = {}

local function fail(fn, fmt, ...) error(fn .. ": " .. string.format(fmt, ...), 0) end

local function callable(v)
  return type(v) == "function" or (type(getmetatable(v)) == "table" and getmetatable(v).__call ~= nil)
end

-- x's values on a node of its own (nodes are hash-consed): a CONTIGUOUS tagged with a number
-- the core never handed out before (free once x is stored), which realize leaves in place
-- (_traced) since transforms find their arguments by it.
local function own_node(x, kind)
  local t = class.wrap(core.uop("CONTIGUOUS", x.uop.dtype, { x.uop }, nil, { kind, core.fresh_id() }),
    nodes.copy_shape(x), x.device)
  rawset(t, "_traced", true)
  return t
end

--- A tensor with x's values on a node of its own that requires gradients (see the header).
local function traced(fn, x, position)
  if not is_tensor(x) then fail(fn, "argument %d is %s; it must be a tensor to be differentiated", position,
    check.type_name(x)) end
  if not x.uop.dtype.is_float then
    fail(fn, "argument %d is a %s tensor; only float tensors are differentiated", position, x.uop.dtype.name)
  end
  local t = own_node(x, "traced")
  rawset(t, "_needs_grad", true)
  return t
end

-- argnums as a list of positions (default {1}); `many`: whether a list was given.
local function positions(fn, argnums)
  if argnums == nil then return { 1 }, false end
  if math.type(argnums) == "integer" then
    if argnums < 1 then fail(fn, "argnums must be positions >= 1, got %d", argnums) end
    return { argnums }, false
  end
  if type(argnums) ~= "table" or #argnums == 0 then
    fail(fn, "argnums must be a position or a non-empty list of positions, got %s", check.type_name(argnums))
  end
  for _, a in ipairs(argnums) do
    if math.type(a) ~= "integer" or a < 1 then fail(fn, "argnums must be positions >= 1, got %s", tostring(a)) end
  end
  return argnums, true
end

-- Calls f with the arguments at `nums` traced; returns f's results (packed) and the tracers.
local function call_traced(fn, f, nums, ...)
  local args = table.pack(...)
  local tracers = {}
  for k, i in ipairs(nums) do
    if i > args.n then fail(fn, "argnums names argument %d, but the function got %d", i, args.n) end
    args[i] = traced(fn, args[i], i)
    tracers[k] = args[i]
  end
  local results = table.pack(class.with_grad_enabled(true, f, table.unpack(args, 1, args.n)))
  return results, tracers
end

-- The gradients of out (a tensor) with respect to the tracers, seeded with seed (nil: 1).
local function pull(fn, out, seed, tracers)
  if rawget(out, "_needs_grad") ~= true then -- does not depend on them
    local zeros = {}
    for i, t in ipairs(tracers) do zeros[i] = nodes.const(0, t.uop.dtype, nodes.copy_shape(t), t.device) end
    return zeros
  end
  if seed == nil then
    if check.numel(out._shape) ~= 1 then
      fail(fn, "the function must return a tensor with one element, got shape %s", check.shape_str(out._shape))
    end
    seed = nodes.const(1, out.uop.dtype, nodes.copy_shape(out), out.device)
  end
  local targets = {}
  for i, t in ipairs(tracers) do targets[i] = t.uop end
  local grads = class.with_grad_enabled(true, gradients.compute, out.uop, seed, targets, out.device)
  for i, t in ipairs(tracers) do
    local g = grads[i] or nodes.const(0, t.uop.dtype, nodes.copy_shape(t), t.device)
    rawset(g, "_needs_grad", true) -- differentiable again
    grads[i] = g
  end
  return grads
end

local function check_scalar_result(fn, results)
  local out = results[1]
  if results.n == 0 or not is_tensor(out) then
    fail(fn, "the function must return a tensor, got %s", results.n == 0 and "nothing" or check.type_name(out))
  end
  if not out.uop.dtype.is_float then fail(fn, "the function must return a float tensor, got %s", out.uop.dtype.name) end
  return out
end

-- f's value and its gradients at argnums, with errors that name fn.
local function value_and_grad_as(fn, f, argnums)
  if not callable(f) then fail(fn, "expected a function, got %s", check.type_name(f)) end
  local nums = positions(fn, argnums)
  return function(...)
    local results, tracers = call_traced(fn, f, nums, ...)
    local out = check_scalar_result(fn, results)
    return out, table.unpack(pull(fn, out, nil, tracers), 1, #nums)
  end
end

--- tcl.value_and_grad(f, argnums) -> a function returning f's value and its gradients with
-- respect to the arguments at argnums (default 1; a list gives one gradient per position).
-- f must return a one-element float tensor.
function M.value_and_grad(f, argnums) return value_and_grad_as("value_and_grad", f, argnums) end

--- tcl.grad(f, argnums) -> a function returning the gradients of f (a one-element float
-- result) with respect to the arguments at argnums; one value per position.
function M.grad(f, argnums)
  local value_and_grad = value_and_grad_as("grad", f, argnums)
  return function(...) return select(2, value_and_grad(...)) end
end

--- tcl.vjp(f, x1, x2, ...) -> f's results, and pullback(ct1, ct2, ...) -> the gradients with
-- respect to x1, x2, ... of sum_k <ct_k, result_k> (one cotangent per result, of its shape).
function M.vjp(f, ...)
  if not callable(f) then fail("vjp", "expected a function, got %s", check.type_name(f)) end
  local n = select("#", ...)
  if n == 0 then fail("vjp", "needs the primals (the arguments of f)") end
  local nums = {}
  for i = 1, n do nums[i] = i end
  local results, tracers = call_traced("vjp", f, nums, ...)
  if results.n == 0 then fail("vjp", "the function returned nothing") end
  for i = 1, results.n do
    if not is_tensor(results[i]) then fail("vjp", "result %d is %s, not a tensor", i, check.type_name(results[i])) end
  end
  local function pullback(...)
    local cts = table.pack(...)
    if cts.n ~= results.n then
      fail("vjp", "the pullback takes one cotangent per result (%d), got %d", results.n, cts.n)
    end
    local total
    for k = 1, results.n do
      local out, ct = results[k], cts[k]
      if not is_tensor(ct) then fail("vjp", "cotangent %d is %s, not a tensor", k, check.type_name(ct)) end
      if not nodes.same_shape(ct._shape, out._shape) then
        fail("vjp", "cotangent %d has shape %s, result %d has %s", k, check.shape_str(ct._shape), k,
          check.shape_str(out._shape))
      end
      if out.uop.dtype.is_float then
        local grads = pull("vjp", out, nodes.cast(ct, out.uop.dtype), tracers)
        if total then
          for i = 1, #grads do total[i] = total[i]:add(grads[i]) end
        else
          total = grads
        end
      end
    end
    if not total then -- no float result: nothing to differentiate
      total = {}
      for i, t in ipairs(tracers) do total[i] = nodes.const(0, t.uop.dtype, nodes.copy_shape(t), t.device) end
    end
    return table.unpack(total, 1, n)
  end
  local all = table.move(results, 1, results.n, 1, {})
  all[results.n + 1] = pullback
  return table.unpack(all, 1, results.n + 1)
end

--- tcl.jvp(f, primals, tangents) -> f's results, then their tangents (J t, forward mode): one
-- tangent per primal, of its shape; a result that does not depend on the primals gets zeros.
function M.jvp(f, primals, tangents)
  if not callable(f) then fail("jvp", "expected a function, got %s", check.type_name(f)) end
  if type(primals) ~= "table" or is_tensor(primals) or type(tangents) ~= "table" or is_tensor(tangents) then
    fail("jvp", "primals and tangents must be lists of tensors")
  end
  if #primals ~= #tangents then
    fail("jvp", "got %d primals and %d tangents; give one tangent per primal", #primals, #tangents)
  end
  local nums = {}
  for i = 1, #primals do nums[i] = i end
  local results, tracers = call_traced("jvp", f, nums, table.unpack(primals))
  local seeds = {}
  for i, t in ipairs(tracers) do
    local tangent = tangents[i]
    if not is_tensor(tangent) then fail("jvp", "tangent %d is %s, not a tensor", i, check.type_name(tangent)) end
    if not nodes.same_shape(tangent._shape, t._shape) then
      fail("jvp", "tangent %d has shape %s, primal %d has %s", i, check.shape_str(tangent._shape), i,
        check.shape_str(t._shape))
    end
    seeds[t.uop] = nodes.cast(tangent, t.uop.dtype)
  end
  local outputs = {}
  for k = 1, results.n do
    if not is_tensor(results[k]) then fail("jvp", "result %d is %s, not a tensor", k, check.type_name(results[k])) end
    outputs[k] = results[k].uop
  end
  local device = results.n > 0 and results[1].device or nil
  local ts = gradients.forward(outputs, seeds, device)
  local out = {}
  for k = 1, results.n do
    local r = results[k]
    out[k] = ts[k] or nodes.const(0, r.uop.dtype, nodes.copy_shape(r), r.device)
  end
  local all = table.move(results, 1, results.n, 1, {})
  table.move(out, 1, results.n, results.n + 1, all)
  return table.unpack(all, 1, 2 * results.n)
end

---------------------------------------------------------------------------------------------
-- vmap

local batching_file -- tcl.patterns.batching, loaded on first use

-- The 0-based position of a 1-based dim d (negative from the end) among ndim dims.
local function dim_index(fn, d, ndim, what)
  if math.type(d) ~= "integer" or d == 0 or d > ndim or d < -ndim then
    fail(fn, "%s %s is out of range for %d dims (1-based, negative from the end)", what, tostring(d), ndim)
  end
  return d > 0 and d - 1 or ndim + d
end

-- x with dim `from` (0-based) moved to position `to` (0-based).
local function move_dim(x, from, to)
  if from == to then return x end
  local order = {}
  for i = 0, #x._shape - 1 do if i ~= from then order[#order + 1] = i end end
  table.insert(order, to + 1, from)
  return nodes.permute(x, order)
end

-- t (not batched) broadcast along a new first dim of `size`.
local function with_batch(t, size)
  local one, full = { 1 }, { size }
  for k, v in ipairs(t._shape) do one[k + 1], full[k + 1] = v, v end
  return nodes.expand(nodes.reshape(t, one), full)
end

local Batch = {}
Batch.__index = Batch

function Batch:batched(i)
  local s = self.node.src[i]
  local b = self.map[s]
  if b then return b end
  return with_batch(class.wrap(s, shapes.of(s), self.device), self.size)
end

function Batch:result(t)
  self.out = t
  return core.uop("NOOP", nil, {}) -- any node but the matched one counts as a match
end

-- The batched form of every node of `outputs` that depends on a placeholder (map: node ->
-- Tensor with the batch dim in front, seeded with the placeholders).
local function batch_graph(outputs, map, size, device)
  batching_file = batching_file or require "tcl.patterns.batching"
  local order = core.uop("SINK", nil, outputs):toposort()
  for _, node in ipairs(order) do
    if node.op ~= "SINK" and not map[node] then
      local origin = node.op == "BUFFER" and gradients.origin_of(node)
      if origin and map[origin] then
        map[node] = nodes.reshape(map[origin], { size, node.arg[2] }) -- a BUFFER is flat
      else
        local depends = false
        for _, s in ipairs(node.src) do if map[s] then depends = true break end end
        if depends then
          local c = setmetatable({ node = node, map = map, size = size, device = device, graph = nodes }, Batch)
          if batching_file.rules:apply_once(node, c) == nil then
            error(string.format("vmap: no batching rule for %s in tcl.patterns.batching", node.op), 0)
          end
          local composite = gradients.composite_of(node)
          if composite and composite.elementwise then
            local inputs = {}
            for k, n in ipairs(composite.inputs) do inputs[k] = map[n] or class.wrap(n, {}, device) end
            gradients.mark(c.out, composite.name, inputs, composite.extra)
          end
          map[node] = c.out
        end
      end
    end
  end
end

-- in_dims/out_dims as a per-position list: nil -> all 1, a number -> all that number, a list
-- as given (false or nil entries: not batched).
local function dims_for(fn, dims, count, what)
  local list = {}
  if dims == nil or math.type(dims) == "integer" then
    for i = 1, count do list[i] = dims or 1 end
  elseif type(dims) == "table" then
    for i = 1, count do list[i] = dims[i] or nil end
  else
    fail(fn, "%s must be a dim, a list of dims (false: not batched) or nil, got %s", what, check.type_name(dims))
  end
  return list
end

--- tcl.vmap(f, in_dims, out_dims) -> a function that maps f, written for one example, over a
-- batch dim of its arguments in one graph: in_dims[i] is the batch dim of argument i (1-based,
-- negative from the end; false: argument i is not batched; a number: every tensor argument;
-- default 1), out_dims[k] where the batch dim goes in result k (default 1). Every batched
-- argument must have the same batch size. f runs once, on per-example placeholders, and its
-- graph is rebuilt with the batch dim by the rules of tcl.patterns.batching.
function M.vmap(f, in_dims, out_dims)
  if not callable(f) then fail("vmap", "expected a function, got %s", check.type_name(f)) end
  return function(...)
    local args = table.pack(...)
    local ins = dims_for("vmap", in_dims, args.n, "in_dims")
    local size, device, map = nil, nil, {}
    local call = table.move(args, 1, args.n, 1, {})
    for i = 1, args.n do
      local a, d = args[i], ins[i]
      if d and is_tensor(a) then
        local at = dim_index("vmap", d, #a._shape, "in_dims[" .. i .. "] =")
        local n = a._shape[at + 1]
        if size and n ~= size then
          fail("vmap", "argument %d has batch size %d along dim %d, an earlier one %d", i, n, d, size)
        end
        size, device = n, a.device
        local front = move_dim(a, at, 0)
        local example = nodes.copy_shape(front)
        table.remove(example, 1)
        local window = { 0, 1 } -- the first example: where f is traced
        for k, e in ipairs(example) do window[2 * k + 1], window[2 * k + 2] = 0, e end
        local first = nodes.reshape(nodes.shrink(front, window), example)
        local placeholder = own_node(first, "vmap")
        if rawget(a, "_needs_grad") then rawset(placeholder, "_needs_grad", true) end
        map[placeholder.uop] = front
        call[i] = placeholder
      elseif d and a ~= nil and not is_tensor(a) then
        fail("vmap", "argument %d is %s; only tensors can be batched (in_dims[%d] = false leaves it as it is)", i,
          check.type_name(a), i)
      end
    end
    if not size then fail("vmap", "no argument is batched: give at least one tensor argument a batch dim") end
    local results = table.pack(f(table.unpack(call, 1, args.n)))
    local outs = dims_for("vmap", out_dims, results.n, "out_dims")
    local uops = {}
    for k = 1, results.n do
      local r = results[k]
      if not is_tensor(r) then fail("vmap", "result %d is %s, not a tensor", k, check.type_name(r)) end
      uops[k] = r.uop
    end
    batch_graph(uops, map, size, device)
    local out = {}
    for k = 1, results.n do
      local r = results[k]
      local b = map[r.uop]
      -- a result that does not depend on the batched arguments is the same for every example
      if not b then b = with_batch(r, size) end
      local d = outs[k] or 1
      out[k] = move_dim(b, 0, dim_index("vmap", d, #b._shape, "out_dims[" .. k .. "] ="))
    end
    return table.unpack(out, 1, results.n)
  end
end

-- a stray argument (grad(f, 1, extra)) is an error (check.fixed_arguments)
return check.fix_arguments(M, "")
