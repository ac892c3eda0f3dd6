-- tcl.onnx.ops.scan_ops — ONNX's TopK and CumSum on the Tensor API's stable sort and running
-- sum: TopK's ties keep the lower index first, as ONNX requires; its indices are 0-based int64.
local M = {}


function M.TopK(ctx, node)
  local x = node.inputs[1]
  local k
  if node.opset and node.opset < 10 then k = node.attrs.k else k = ctx:ints(node.inputs[2])[1] end
  local shape = x:size()
  local axis = ctx:axis(node.attrs.axis or -1, #shape)
  local n = shape[axis + 1]
  if k < 0 or k > n then ctx:fail("k = %d is outside 0..%d (the size of axis %d)", k, n, axis) end
  local largest = (node.attrs.largest or 1) ~= 0
  local values, indices = x:sort(axis + 1, largest)
  values = values:narrow(axis + 1, 1, k)
  indices = indices:narrow(axis + 1, 1, k):cast("int64") - 1
  return values, indices
end

function M.CumSum(ctx, node)
  local x = node.inputs[1]
  local rank = #x:size()
  local axis = ctx:axis(ctx:ints(node.inputs[2])[1], rank) + 1
  local dtype = tostring(x.dtype)
  local y = x
  local reverse = (node.attrs.reverse or 0) ~= 0
  if reverse then y = y:flip({ axis }) end
  local total = y:cumsum(axis):cast(dtype)
  if (node.attrs.exclusive or 0) ~= 0 then total = (total - y):cast(dtype) end
  if reverse then total = total:flip({ axis }) end
  return total
end

return M
