-- tcl.onnx.ops.reduce — ONNX's reductions (Reduce*, ArgMax/ArgMin) and the
-- normalizing ones along an axis (Softmax, LogSoftmax, Hardmax), with their opset differences:
-- Reduce* axes became an input at opset 13 (ReduceSum) and 18 (the others); Softmax and friends
-- before opset 13 flatten the input to 2-d at the axis.
local Tensor = require "tcl.api.tensor"
local nodes = require "tcl.api.nodes"

local M = {}

local function dtype_of(t) return tostring(t.dtype) end

-- The 1-based dims (a list) a Reduce* node reduces over, or nil for none (noop).
local function reduce_dims(ctx, node, input_since)
  local x = node.inputs[1]
  local rank = #x:size()
  local axes
  if node.opset and node.opset >= input_since then
    axes = node.inputs[2] and ctx:ints(node.inputs[2])
  else
    axes = node.attrs.axes
  end
  if axes == nil or #axes == 0 then
    if (node.attrs.noop_with_empty_axes or 0) ~= 0 then return nil end
    axes = {}
    for d = 0, rank - 1 do axes[#axes + 1] = d end
  end
  local dims, seen = {}, {}
  for _, a in ipairs(axes) do
    local d = a < 0 and a + rank or a
    if d < 0 or d >= rank then ctx:fail("axis %d is out of range for rank %d", a, rank) end
    if not seen[d] then seen[d] = true dims[#dims + 1] = d + 1 end
  end
  return dims
end

local function reduction(input_since, f)
  return function(ctx, node)
    local x = node.inputs[1]
    local dims = reduce_dims(ctx, node, input_since)
    if dims == nil then return x end
    local keep = (node.attrs.keepdims or 1) ~= 0
    if #dims == 0 then return x end
    local y = f(x, dims, keep)
    if dtype_of(y) ~= dtype_of(x) then y = y:cast(dtype_of(x)) end
    return y
  end
end

M.ReduceSum = reduction(13, function(x, dims, keep) return x:sum(dims, keep) end)
M.ReduceMean = reduction(18, function(x, dims, keep) return x:mean(dims, keep) end)
M.ReduceMax = reduction(18, function(x, dims, keep) return x:max(dims, keep) end)
M.ReduceMin = reduction(18, function(x, dims, keep) return x:min(dims, keep) end)
M.ReduceProd = reduction(18, function(x, dims, keep) return x:prod(dims, keep) end)
M.ReduceL1 = reduction(18, function(x, dims, keep) return x:abs():sum(dims, keep) end)
M.ReduceL2 = reduction(18, function(x, dims, keep) return (x * x):sum(dims, keep):sqrt() end)
M.ReduceSumSquare = reduction(18, function(x, dims, keep) return (x * x):sum(dims, keep) end)
M.ReduceLogSum = reduction(18, function(x, dims, keep) return x:sum(dims, keep):log() end)
M.ReduceLogSumExp = reduction(18, function(x, dims, keep) return x:logsumexp(dims, keep) end)

local function arg_reduce(method)
  return function(ctx, node)
    local x = node.inputs[1]
    local shape = x:size()
    local rank = #shape
    local axis = node.attrs.axis or 0
    if axis < 0 then axis = axis + rank end
    if axis < 0 or axis >= rank then ctx:fail("axis %d is out of range for rank %d", node.attrs.axis, rank) end
    local keep = (node.attrs.keepdims or 1) ~= 0
    local n = shape[axis + 1]
    local idx
    if (node.attrs.select_last_index or 0) ~= 0 then
      local flags = {}
      for d = 1, rank do flags[d] = d == axis + 1 and 1 or 0 end
      idx = (n - x:flip({ axis + 1 })[method](x:flip({ axis + 1 }), axis + 1, keep):cast("int64"))
      local _ = flags
    else
      idx = x[method](x, axis + 1, keep):cast("int64") - 1
    end
    return idx
  end
end
M.ArgMax = arg_reduce("argmax")
M.ArgMin = arg_reduce("argmin")

-- Applies f along one axis: opset >= 13 directly, before it on the input flattened to 2-d at
-- the axis (the old definition).
local function along_axis(f, default_new)
  return function(ctx, node)
    local x = node.inputs[1]
    local shape = x:size()
    local rank = #shape
    local old = node.opset and node.opset < 13
    local axis = node.attrs.axis or (old and 1 or default_new)
    if axis < 0 then axis = axis + rank end
    if axis < 0 or axis >= math.max(rank, 1) then
      ctx:fail("axis %d is out of range for rank %d", node.attrs.axis, rank)
    end
    if not old then return f(x, axis + 1) end
    local outer = 1
    for d = 1, axis do outer = outer * shape[d] end
    local inner = x:numel() // math.max(outer, 1)
    return f(x:reshape({ outer, inner }), 2):reshape(shape)
  end
end

M.Softmax = along_axis(function(x, d) return x:softmax(d) end, -1)
M.LogSoftmax = along_axis(function(x, d) return x:log_softmax(d) end, -1)
M.Hardmax = along_axis(function(x, d)
  local shape = x:size()
  local first = x:argmax(d, true) - 1
  local view = {}
  for i = 1, #shape do view[i] = i == d and shape[d] or 1 end
  local positions = Tensor.arange(0, shape[d], { dtype = "int64" }):reshape(view)
  return positions:eq(first:cast("int64")):cast(dtype_of(x))
end, -1)

function M.Trilu(ctx, node)
  local x = node.inputs[1]
  local k = node.inputs[2] and ctx:ints(node.inputs[2])[1] or 0
  local shape = x:size()
  local rows, cols = shape[#shape - 1], shape[#shape]
  local r = Tensor.arange(0, rows, { dtype = "int64" }):reshape({ rows, 1 })
  local c = Tensor.arange(0, cols, { dtype = "int64" }):reshape({ 1, cols })
  local keep
  if (node.attrs.upper or 1) ~= 0 then keep = (c - r):ge(k) else keep = (c - r):le(k) end
  local zero = dtype_of(x) == "bool" and false or 0
  return Tensor.where(keep, x, zero):cast(dtype_of(x))
end

function M.OneHot(ctx, node)
  local indices, depth, values = node.inputs[1], node.inputs[2], node.inputs[3]
  local n = math.tointeger(ctx:numbers(depth)[1]) or math.floor(ctx:numbers(depth)[1])
  local shape = indices:size()
  local rank = #shape + 1
  local axis = node.attrs.axis or -1
  if axis < 0 then axis = axis + rank end
  local idx = indices:cast("int64")
  idx = Tensor.where(idx:lt(0), idx + n, idx)
  local view = {}
  for d = 1, rank do view[d] = d == axis + 1 and 1 or shape[d <= axis and d or d - 1] end
  local pview = {}
  for d = 1, rank do pview[d] = d == axis + 1 and n or 1 end
  local hot = idx:reshape(view):eq(Tensor.arange(0, n, { dtype = "int64" }):reshape(pview))
  local off = nodes.shrink(values, { 0, 1 }):reshape({})
  local on = nodes.shrink(values, { 1, 2 }):reshape({})
  return Tensor.where(hot, on, off)
end

return M
