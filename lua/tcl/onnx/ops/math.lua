-- tcl.onnx.ops.math — ONNX's transcendental and activation handlers that map onto the
-- Tensor API's math_ops and activations (Erf, Asin ... Atanh, IsNaN, IsInf, Selu, Celu,
-- HardSigmoid, HardSwish, Softsign, ThresholdedRelu, Shrink, PRelu, Mish), keeping ONNX's
-- attribute defaults where they differ from PyTorch's (HardSigmoid's alpha and beta, Selu's).
local Tensor = require "tcl.api.tensor"

local M = {}

local function unary(method)
  return function(_, node) return node.inputs[1][method](node.inputs[1]) end
end

M.Erf = unary("erf")
M.Asin = unary("asin")
M.Acos = unary("acos")
M.Atan = unary("atan")
M.Sinh = unary("sinh")
M.Cosh = unary("cosh")
M.Asinh = unary("asinh")
M.Acosh = unary("acosh")
M.Atanh = unary("atanh")
M.IsNaN = unary("isnan")
M.Softsign = unary("softsign")
M.Mish = unary("mish")

function M.IsInf(_, node)
  local x = node.inputs[1]
  local positive, negative = (node.attrs.detect_positive or 1) ~= 0, (node.attrs.detect_negative or 1) ~= 0
  local inf = x:isinf()
  if positive and negative then return inf end
  if positive then return inf:logical_and(x:gt(0)) end
  if negative then return inf:logical_and(x:lt(0)) end
  return inf:logical_and(x:ne(x))
end

function M.Selu(_, node)
  local x = node.inputs[1]
  local alpha = node.attrs.alpha or 1.67326319217681884765625
  local gamma = node.attrs.gamma or 1.05070102214813232421875
  return Tensor.where(x:gt(0), x, x:exp() * alpha - alpha) * gamma
end

function M.Celu(_, node) return node.inputs[1]:celu(node.attrs.alpha or 1.0) end

function M.HardSigmoid(_, node)
  local x = node.inputs[1]
  local alpha, beta = node.attrs.alpha or 0.2, node.attrs.beta or 0.5
  return (x * alpha + beta):maximum(0):minimum(1)
end

function M.HardSwish(_, node) return node.inputs[1]:hardswish() end

function M.ThresholdedRelu(_, node)
  local x = node.inputs[1]
  return Tensor.where(x:gt(node.attrs.alpha or 1.0), x, 0)
end

function M.Shrink(_, node)
  local x = node.inputs[1]
  local bias, lambd = node.attrs.bias or 0.0, node.attrs.lambd or 0.5
  local dt = tostring(x.dtype)
  return Tensor.where(x:lt(-lambd), x + bias, Tensor.where(x:gt(lambd), x - bias, 0)):cast(dt)
end

function M.PRelu(_, node)
  local x, slope = node.inputs[1], node.inputs[2]
  return Tensor.where(x:ge(0), x, x * slope)
end

return M
