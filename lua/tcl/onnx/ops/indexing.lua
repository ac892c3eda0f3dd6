-- tcl.onnx.ops.indexing — ONNX's element indexing: GatherElements, ScatterElements
-- (and the old Scatter), GatherND, ScatterND, NonZero, Compress, ReverseSequence. ONNX's 0-based
-- indices (negative ones counting from the end) become tcl's 1-based ones for Tensor.gather /
-- scatter / index_select; NonZero and Compress have data-dependent sizes and read their
-- condition on the host.
local Tensor = require "tcl.api.tensor"

local M = {}


-- 0-based ONNX indices (negative from the end of a dim of size n) as 1-based int64
local function one_based(index, n)
  local i = index:cast("int64")
  return Tensor.where(i:lt(0), i + (n + 1), i + 1)
end

function M.GatherElements(ctx, node)
  local x, index = node.inputs[1], node.inputs[2]
  local axis = ctx:axis(node.attrs.axis or 0, #x:size())
  return x:gather(axis + 1, one_based(index, x:size()[axis + 1]))
end

local REDUCE = { none = nil, add = "sum", mul = "prod", max = "amax", min = "amin" }

function M.ScatterElements(ctx, node)
  local x, index, updates = node.inputs[1], node.inputs[2], node.inputs[3]
  local axis = ctx:axis(node.attrs.axis or 0, #x:size())
  local idx = one_based(index, x:size()[axis + 1])
  local reduction = node.attrs.reduction or "none"
  if reduction == "none" then return x:scatter(axis + 1, idx, updates) end
  local reduce = REDUCE[reduction] or ctx:fail("unknown reduction %s", reduction)
  return x:scatter_reduce(axis + 1, idx, updates, reduce, true)
end

M.Scatter = M.ScatterElements

-- The row-major linear position (1-based) of the k leading coordinates in the last dim of
-- indices, over dims sizes[1..k], and the shape of indices without that last dim.
local function linear_index(indices, sizes)
  local ishape = indices:size()
  local k = ishape[#ishape]
  local lead = {}
  for d = 1, #ishape - 1 do lead[d] = ishape[d] end
  local lin
  local stride = 1
  for j = k, 1, -1 do
    local coordinate = indices:narrow(#ishape, j, 1):reshape(lead):cast("int64")
    coordinate = Tensor.where(coordinate:lt(0), coordinate + sizes[j], coordinate)
    local term = coordinate * stride
    lin = lin and (lin + term) or term
    stride = stride * sizes[j]
  end
  if not lin then lin = Tensor.zeros(lead, { dtype = "int64" }) end
  return lin + 1, lead, k, stride
end

local function product(list, from, to)
  local p = 1
  for i = from, to do p = p * list[i] end
  return p
end

function M.GatherND(ctx, node)
  local x, indices = node.inputs[1], node.inputs[2]
  local b = node.attrs.batch_dims or 0
  local xs, is = x:size(), indices:size()
  local k = is[#is]
  if b + k > #xs then ctx:fail("indices address %d dims after %d batch dims of a rank-%d input", k, b, #xs) end
  local sizes = {}
  for j = 1, k do sizes[j] = xs[b + j] end
  local lin, lead = linear_index(indices, sizes)
  local batch = product(xs, 1, b)
  local positions = product(xs, b + 1, b + k)
  local rest = product(xs, b + k + 1, #xs)
  local m = product(lead, b + 1, #lead)
  local flat = x:reshape({ batch, positions, rest })
  local idx = lin:reshape({ batch, m, 1 }):expand(batch, m, rest)
  local picked = flat:gather(2, idx)
  local out = {}
  for d = 1, #lead do out[#out + 1] = lead[d] end
  for d = b + k + 1, #xs do out[#out + 1] = xs[d] end
  return picked:reshape(out)
end

function M.ScatterND(ctx, node)
  local x, indices, updates = node.inputs[1], node.inputs[2], node.inputs[3]
  local xs, is = x:size(), indices:size()
  local k = is[#is]
  if k > #xs then ctx:fail("indices address %d dims of a rank-%d input", k, #xs) end
  local sizes = {}
  for j = 1, k do sizes[j] = xs[j] end
  local lin, lead = linear_index(indices, sizes)
  local positions = product(xs, 1, k)
  local rest = product(xs, k + 1, #xs)
  local m = product(lead, 1, #lead)
  local flat = x:reshape({ positions, rest })
  local idx = lin:reshape({ m, 1 }):expand(m, rest)
  local upd = updates:reshape({ m, rest })
  local reduction = node.attrs.reduction or "none"
  local y
  if reduction == "none" then
    y = flat:scatter(1, idx, upd)
  else
    y = flat:scatter_reduce(1, idx, upd, REDUCE[reduction] or ctx:fail("unknown reduction %s", reduction), true)
  end
  return y:reshape(xs)
end

-- the flat row-major positions (0-based) of the true / non-zero entries, read on the host
local function nonzero_positions(ctx, x)
  local values = ctx:values(x)
  local list = {}
  for i, v in ipairs(values) do
    if v ~= 0 and v ~= false then list[#list + 1] = i - 1 end
  end
  return list
end

function M.NonZero(ctx, node)
  local x = node.inputs[1]
  local shape = x:size()
  local rank = #shape
  local positions = nonzero_positions(ctx, x)
  local rows = {}
  for d = 1, rank do rows[d] = {} end
  for j, p in ipairs(positions) do
    for d = rank, 1, -1 do
      rows[d][j] = p % shape[d]
      p = p // shape[d]
    end
  end
  if #positions == 0 then return Tensor.zeros({ rank, 0 }, { dtype = "int64" }) end
  if rank == 0 then return Tensor.zeros({ 0, 1 }, { dtype = "int64" }) end
  return Tensor(rows, { dtype = "int64" })
end

function M.Compress(ctx, node)
  local x, condition = node.inputs[1], node.inputs[2]
  local axis = node.attrs.axis
  if axis == nil then x = x:reshape({ x:numel() }) axis = 0 end
  local rank = #x:size()
  axis = ctx:axis(axis, rank)
  local picked = {}
  local n = x:size()[axis + 1]
  for i, v in ipairs(ctx:values(condition)) do
    if i > n then break end
    if v ~= 0 and v ~= false then picked[#picked + 1] = i end
  end
  if #picked == 0 then
    return x:narrow(axis + 1, 1, 0)
  end
  return x:index_select(axis + 1, Tensor(picked, { dtype = "int64" }))
end

function M.ReverseSequence(ctx, node)
  local x, lens = node.inputs[1], node.inputs[2]
  local shape = x:size()
  local batch_axis, time_axis = node.attrs.batch_axis or 1, node.attrs.time_axis or 0
  local steps = shape[time_axis + 1]
  local lengths = ctx:ints(lens)
  -- source time index (1-based) for every (batch, time), broadcast over the other dims
  local src = {}
  for b = 1, shape[batch_axis + 1] do
    local row = {}
    for t = 1, steps do row[t] = t <= lengths[b] and (lengths[b] - t + 1) or t end
    src[b] = row
  end
  local idx = Tensor(src, { dtype = "int64" })
  if time_axis < batch_axis then idx = idx:transpose(1, 2) end
  local view = {}
  for d = 1, #shape do view[d] = (d == batch_axis + 1 or d == time_axis + 1) and shape[d] or 1 end
  idx = idx:reshape(view):expand(table.unpack(shape))
  return x:gather(time_axis + 1, idx)
end

return M
