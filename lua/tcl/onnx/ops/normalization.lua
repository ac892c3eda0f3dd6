-- tcl.onnx.ops.normalization — ONNX's normalizations: LayerNormalization (with its Mean and
-- InvStdDev outputs), BatchNormalization (inference, and training mode's batch statistics and
-- running averages), InstanceNormalization, LRN and MeanVarianceNormalization.

local M = {}

local function dtype_of(t) return tostring(t.dtype) end

-- a per-channel tensor (C) viewed to broadcast along dim 2 of a rank-r input
local function per_channel(t, rank)
  local view = { 1, t:numel() }
  for _ = 3, rank do view[#view + 1] = 1 end
  return t:reshape(view)
end

function M.LayerNormalization(ctx, node)
  local x, scale, bias = node.inputs[1], node.inputs[2], node.inputs[3]
  local shape = x:size()
  local rank = #shape
  local axis = node.attrs.axis or -1
  if axis < 0 then axis = axis + rank end
  if axis < 0 or axis >= rank then ctx:fail("axis %d is out of range for rank %d", node.attrs.axis or -1, rank) end
  local eps = node.attrs.epsilon or 1e-5
  local stash = (node.attrs.stash_type or 1) == 1 and "float32" or dtype_of(x)
  local dims = {}
  for d = axis + 1, rank do dims[#dims + 1] = d end
  local xf = x:cast(stash)
  local mean = xf:mean(dims, true)
  local centered = xf - mean
  local var = (centered * centered):mean(dims, true)
  local inv = (var + eps):rsqrt()
  local y = centered * inv * scale:cast(stash)
  if bias then y = y + bias:cast(stash) end
  return y:cast(dtype_of(x)), mean, inv
end

function M.BatchNormalization(_, node)
  local x, scale, b, mean, var = table.unpack(node.inputs, 1, 5)
  local rank = #x:size()
  local eps = node.attrs.epsilon or 1e-5
  if (node.attrs.training_mode or 0) == 0 then
    local inv = (var + eps):rsqrt()
    return (x - per_channel(mean, rank)) * per_channel(inv * scale, rank) + per_channel(b, rank)
  end
  local momentum = node.attrs.momentum or 0.9
  local dims = { 1 }
  for d = 3, rank do dims[#dims + 1] = d end
  local batch_mean = x:mean(dims)
  local centered = x - per_channel(batch_mean, rank)
  local batch_var = (centered * centered):mean(dims)
  local y = centered * per_channel((batch_var + eps):rsqrt() * scale, rank) + per_channel(b, rank)
  local running_mean = mean * momentum + batch_mean * (1 - momentum)
  local running_var = var * momentum + batch_var * (1 - momentum)
  return y, running_mean, running_var
end

function M.InstanceNormalization(_, node)
  local x, scale, b = node.inputs[1], node.inputs[2], node.inputs[3]
  local rank = #x:size()
  local eps = node.attrs.epsilon or 1e-5
  local dims = {}
  for d = 3, rank do dims[#dims + 1] = d end
  local mean = x:mean(dims, true)
  local centered = x - mean
  local var = (centered * centered):mean(dims, true)
  return centered * (var + eps):rsqrt() * per_channel(scale, rank) + per_channel(b, rank)
end

function M.LRN(ctx, node)
  local x = node.inputs[1]
  local shape = x:size()
  local size = node.attrs.size or ctx:fail("size is required")
  local alpha, beta, bias = node.attrs.alpha or 1e-4, node.attrs.beta or 0.75, node.attrs.bias or 1.0
  local before, after = (size - 1) // 2, size - 1 - (size - 1) // 2
  local c = shape[2]
  local squares = x * x
  local pads = { { 0, 0 }, { before, after } }
  for _ = 3, #shape do pads[#pads + 1] = { 0, 0 } end
  local padded = squares:pad(pads, 0)
  local sum
  for k = 1, size do
    local part = padded:narrow(2, k, c)
    sum = sum and sum + part or part
  end
  return x / (sum * (alpha / size) + bias):pow(beta)
end

function M.MeanVarianceNormalization(_, node)
  local x = node.inputs[1]
  local axes = node.attrs.axes or { 0, 2, 3 }
  local dims = {}
  for i, a in ipairs(axes) do dims[i] = (a < 0 and a + #x:size() or a) + 1 end
  local mean = x:mean(dims, true)
  local centered = x - mean
  local var = (centered * centered):mean(dims, true)
  return centered / (var:sqrt() + 1e-9)
end

return M
