-- tcl.onnx.ops.normalization_rnn — ONNX's normalizations (LayerNormalization, BatchNormalization,
-- InstanceNormalization, MeanVarianceNormalization), built from tcl's reductions and elementwise
-- ops. Statistics are population ones (divide by the count), as ONNX defines them.
local Tensor = require "tcl.api.tensor"

local M = {}

local function dtype_of(t) return tostring(t.dtype) end

-- Mean and population variance of x over the 1-based dims, kept as size-1 dims.
local function moments(x, dims)
  local mean = x:mean(dims, true)
  local centered = x - mean
  return mean, (centered * centered):mean(dims, true), centered
end

-- A per-channel (C) parameter reshaped to broadcast against an N x C x D1 ... input.
local function per_channel(p, rank)
  local shape = { 1, p:size()[1] }
  for _ = 3, rank do shape[#shape + 1] = 1 end
  return p:reshape(shape)
end

function M.LayerNormalization(ctx, node)
  local x, scale, bias = node.inputs[1], node.inputs[2], node.inputs[3]
  local rank = #x:size()
  local axis = node.attrs.axis or -1
  if axis < 0 then axis = axis + rank end
  if axis < 0 or axis >= rank then ctx:fail("axis %d is out of range for rank %d", node.attrs.axis, rank) end
  local eps = node.attrs.epsilon or 1e-5
  local stash = (node.attrs.stash_type or 1) == 1 and "float32" or dtype_of(x)
  local xs = dtype_of(x) == stash and x or x:cast(stash)
  local dims = {}
  for d = axis + 1, rank do dims[#dims + 1] = d end
  local mean, var, centered = moments(xs, dims)
  local inv_std = (var + eps):sqrt():reciprocal()
  local y = centered * inv_std
  if dtype_of(y) ~= dtype_of(x) then y = y:cast(dtype_of(x)) end
  y = y * scale
  if bias then y = y + bias end
  return y, mean, inv_std
end

function M.BatchNormalization(ctx, node)
  local x, scale, bias, mean, var = table.unpack(node.inputs, 1, 5)
  local rank = #x:size()
  local eps = node.attrs.epsilon or 1e-5
  local training = (node.attrs.training_mode or 0) ~= 0
  if not training then
    local inv = (per_channel(var, rank) + eps):sqrt():reciprocal()
    return (x - per_channel(mean, rank)) * inv * per_channel(scale, rank) + per_channel(bias, rank)
  end
  if rank < 2 then ctx:fail("training mode needs an input of rank >= 2, got rank %d", rank) end
  local momentum = node.attrs.momentum or 0.9
  local dims = { 1 }
  for d = 3, rank do dims[#dims + 1] = d end
  local batch_mean, batch_var, centered = moments(x, dims)
  local y = centered * (batch_var + eps):sqrt():reciprocal() * per_channel(scale, rank)
    + per_channel(bias, rank)
  local c = { x:size()[2] }
  local running_mean = mean * momentum + batch_mean:reshape(c) * (1 - momentum)
  local running_var = var * momentum + batch_var:reshape(c) * (1 - momentum)
  return y, running_mean, running_var
end

function M.InstanceNormalization(ctx, node)
  local x, scale, bias = node.inputs[1], node.inputs[2], node.inputs[3]
  local rank = #x:size()
  if rank < 3 then ctx:fail("needs an input of rank >= 3 (N x C x D1 ...), got rank %d", rank) end
  local eps = node.attrs.epsilon or 1e-5
  local dims = {}
  for d = 3, rank do dims[#dims + 1] = d end
  local _, var, centered = moments(x, dims)
  return centered * (var + eps):sqrt():reciprocal() * per_channel(scale, rank) + per_channel(bias, rank)
end

function M.MeanVarianceNormalization(ctx, node)
  local x = node.inputs[1]
  local rank = #x:size()
  local dims = {}
  for _, a in ipairs(node.attrs.axes or { 0, 2, 3 }) do
    local d = a < 0 and a + rank or a
    if d < 0 or d >= rank then ctx:fail("axis %d is out of range for rank %d", a, rank) end
    dims[#dims + 1] = d + 1
  end
  local _, var, centered = moments(x, dims)
  return centered / (var + 1e-9):sqrt()
end

-- LRN: each element divided by (bias + alpha / size * the sum of squares over a window of
-- channels)^beta; the window sum is a banded C x C matrix times the squares (N, C, rest).
function M.LRN(ctx, node)
  local x = node.inputs[1]
  local shape = x:size()
  if #shape < 3 then ctx:fail("needs an input of rank >= 3 (N x C x D1 ...), got rank %d", #shape) end
  local size = node.attrs.size
  if not size or size < 1 then ctx:fail("attribute size must be a positive integer") end
  local alpha, beta, bias = node.attrs.alpha or 1e-4, node.attrs.beta or 0.75, node.attrs.bias or 1.0
  local c = shape[2]
  local below, above = (size - 1) // 2, size - 1 - (size - 1) // 2
  local band = {}
  for row = 1, c do
    for col = 1, c do
      band[#band + 1] = (col >= row - below and col <= row + above) and 1 or 0
    end
  end
  local rest = 1
  for d = 3, #shape do rest = rest * shape[d] end
  local squares = (x * x):reshape({ shape[1], c, rest })
  local window = Tensor(band, { dtype = dtype_of(x) }):reshape({ 1, c, c }):matmul(squares):reshape(shape)
  return x / (window * (alpha / size) + bias):pow(beta)
end

return M
