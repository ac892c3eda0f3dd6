-- tcl.onnx.ops.sorting — ONNX handlers for sorting and running ops: TopK, CumSum.
-- ONNX's 0-based axes and indices are converted to tcl's 1-based API here; TopK's indices come
-- back 0-based int64.
local M = {}

-- an ONNX axis (0-based, negative from the end) as a 1-based tcl dim
local function dim_of(ctx, axis, rank)
  local a = axis < 0 and axis + rank or axis
  if a < 0 or a >= rank then ctx:fail("axis %d is out of range for rank %d", axis, rank) end
  return a + 1
end

-- The k largest (or smallest) elements along axis, and their 0-based int64 indices. tcl's sort
-- is stable, so among equal values the lower index comes first, as ONNX asks.
function M.TopK(ctx, node)
  local x = node.inputs[1]
  local k
  if node.opset < 10 then k = node.attrs.k else
    local ks = ctx:ints(node.inputs[2])
    if #ks ~= 1 then ctx:fail("K must hold one value, got %d", #ks) end
    k = ks[1]
  end
  local dim = dim_of(ctx, node.attrs.axis or -1, #x.shape)
  local n = x.shape[dim]
  if k < 0 or k > n then ctx:fail("K %d is out of range for axis of size %d", k, n) end
  local largest = node.attrs.largest ~= 0
  local values, indices = x:sort(dim, largest)
  values = values:narrow(dim, 1, k)
  indices = indices:narrow(dim, 1, k):cast("int64"):sub(1)
  return values, indices
end

-- Running sum along axis (a scalar input), optionally exclusive (out[i] sums x[j], j < i) and
-- reverse (sums from the end).
function M.CumSum(ctx, node)
  local x, axes = node.inputs[1], ctx:ints(node.inputs[2])
  if #axes ~= 1 then ctx:fail("axis must hold one value, got %d", #axes) end
  local dim = dim_of(ctx, axes[1], #x.shape)
  local reverse, exclusive = node.attrs.reverse == 1, node.attrs.exclusive == 1
  local source = reverse and x:flip({ dim }) or x
  local total = source:cumsum(dim):cast(x.dtype)
  if exclusive then total = total:sub(source) end
  if reverse then total = total:flip({ dim }) end
  return total
end

return M
