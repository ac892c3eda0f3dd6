-- tcl.onnx.ops.elementwise — ONNX's elementwise handlers: arithmetic (Add ... Pow, Mod,
-- BitShift), comparisons and logic, unary math tcl has, the activations tcl has, Where, Clip,
-- the variadic Min/Max/Sum/Mean, MatMul and Gemm. ONNX keeps the inputs' type (no promotion:
-- an integer Div truncates, an integer Pow stays integer) and broadcasts like numpy.
local Tensor = require "tcl.api.tensor"

local M = {}

local function dtype_of(t) return tostring(t.dtype) end
local function is_float(t) return t.uop.dtype.is_float end

-- numbers known on the host for the result of a binary op on host-known inputs (shape math)
local function host_binary(ctx, y, a, b, f)
  local ka, kb = ctx.host[a], ctx.host[b]
  if ka and kb and (#ka == #kb or #ka == 1 or #kb == 1) and y:numel() == math.max(#ka, #kb) and #y:size() <= 1 then
    local out = {}
    for i = 1, math.max(#ka, #kb) do
      local va, vb = ka[#ka == 1 and 1 or i], kb[#kb == 1 and 1 or i]
      if type(va) ~= "number" or type(vb) ~= "number" then return y end
      out[i] = f(va, vb)
      if out[i] == nil then return y end
    end
    ctx:known(y, out)
  end
  return y
end

local function truncdiv(a, b)
  if b == 0 then return nil end
  local q = a // b
  if q < 0 and q * b ~= a then q = q + 1 end
  return q
end

function M.Add(ctx, node)
  local a, b = node.inputs[1], node.inputs[2]
  return host_binary(ctx, a + b, a, b, function(x, y) return x + y end)
end

function M.Sub(ctx, node)
  local a, b = node.inputs[1], node.inputs[2]
  return host_binary(ctx, a - b, a, b, function(x, y) return x - y end)
end

function M.Mul(ctx, node)
  local a, b = node.inputs[1], node.inputs[2]
  return host_binary(ctx, a * b, a, b, function(x, y) return x * y end)
end

function M.Div(ctx, node)
  local a, b = node.inputs[1], node.inputs[2]
  if is_float(a) then return a:div(b) end
  -- integers: C's division, truncating toward zero
  local q = a:floordiv(b)
  local inexact = (q * b):ne(a)
  local negative = a:lt(0):logical_xor(b:lt(0))
  local y = Tensor.where(inexact:logical_and(negative), q + 1, q):cast(dtype_of(a))
  return host_binary(ctx, y, a, b, truncdiv)
end

function M.Pow(_, node)
  local a, b = node.inputs[1], node.inputs[2]
  local dt = dtype_of(a)
  if is_float(a) then return a:pow(b:cast(dt)) end
  -- an integer base keeps its type: computed in float64, exact for the values ints reach
  return a:cast("float64"):pow(b:cast("float64")):cast(dt)
end

function M.Mod(_, node)
  local a, b = node.inputs[1], node.inputs[2]
  if (node.attrs.fmod or 0) == 1 then
    -- C's fmod: the sign of the dividend
    if is_float(a) then
      local r = a:abs():mod(b:abs())
      return Tensor.where(a:lt(0), -r, r)
    end
    local r = a:abs():mod(b:abs())
    return Tensor.where(a:lt(0), -r, r):cast(dtype_of(a))
  end
  if is_float(a) then
    -- fmod=0 with floats is not allowed by ONNX; numpy's % (the divisor's sign) is the answer
    return a:mod(b)
  end
  return a:mod(b)
end

function M.BitShift(ctx, node)
  local x, y = node.inputs[1], node.inputs[2]
  local dt = dtype_of(x)
  local power = Tensor.full({}, 2.0, { dtype = "float64" }):pow(y:cast("float64"))
  local direction = node.attrs.direction
  if direction == "LEFT" then
    return (x:cast("uint64") * power:cast("uint64")):cast(dt)
  elseif direction == "RIGHT" then
    return x:cast("uint64"):floordiv(power:cast("uint64")):cast(dt)
  end
  ctx:fail("direction must be LEFT or RIGHT, got %s", tostring(direction))
end

local function unary(method)
  return function(_, node) return node.inputs[1][method](node.inputs[1]) end
end

M.Neg = function(_, node) return -node.inputs[1] end
M.Abs = unary("abs")
M.Sqrt = unary("sqrt")
M.Reciprocal = unary("reciprocal")
M.Exp = unary("exp")
M.Log = unary("log")
M.Ceil = unary("ceil")
M.Floor = unary("floor")
M.Round = unary("round")
M.Sign = unary("sign")
M.Sin = unary("sin")
M.Cos = unary("cos")
M.Tan = unary("tan")
M.Tanh = unary("tanh")
M.Sigmoid = unary("sigmoid")
M.Relu = unary("relu")
M.Softplus = unary("softplus")
M.Not = unary("logical_not")

function M.LeakyRelu(_, node) return node.inputs[1]:leaky_relu(node.attrs.alpha or 0.01) end

function M.Elu(_, node) return node.inputs[1]:elu(node.attrs.alpha or 1.0) end

local function compare(method)
  return function(_, node) return node.inputs[1][method](node.inputs[1], node.inputs[2]) end
end
M.Equal = compare("eq")
M.Greater = compare("gt")
M.Less = compare("lt")
M.GreaterOrEqual = compare("ge")
M.LessOrEqual = compare("le")
M.And = compare("logical_and")
M.Or = compare("logical_or")
M.Xor = compare("logical_xor")

function M.Where(ctx, node)
  local c, a, b = node.inputs[1], node.inputs[2], node.inputs[3]
  local y = Tensor.where(c, a, b)
  if dtype_of(y) ~= dtype_of(a) then y = y:cast(dtype_of(a)) end
  local kc, ka, kb = ctx.host[c], ctx.host[a], ctx.host[b]
  if kc and ka and kb and #kc == #ka and #ka == #kb and #y:size() <= 1 and y:numel() == #kc then
    local out = {}
    for i = 1, #kc do out[i] = kc[i] and ka[i] or kb[i] end
    ctx:known(y, out)
  end
  return y
end

function M.Clip(ctx, node)
  local x = node.inputs[1]
  local lo, hi
  if node.opset and node.opset < 11 then
    lo, hi = node.attrs.min, node.attrs.max
  else
    lo = node.inputs[2] and ctx:numbers(node.inputs[2])[1]
    hi = node.inputs[3] and ctx:numbers(node.inputs[3])[1]
  end
  local y = x
  if lo ~= nil then y = y:maximum(Tensor.full({}, lo, { dtype = dtype_of(x) })) end
  if hi ~= nil then y = y:minimum(Tensor.full({}, hi, { dtype = dtype_of(x) })) end
  return y
end

local function variadic(combine)
  return function(ctx, node)
    local y
    for i = 1, node.ninputs do
      local t = node.inputs[i]
      if t then y = y and combine(y, t) or t end
    end
    if not y then ctx:fail("no inputs") end
    return y
  end
end
M.Max = variadic(function(a, b) return a:maximum(b) end)
M.Min = variadic(function(a, b) return a:minimum(b) end)
M.Sum = variadic(function(a, b) return a + b end)
function M.Mean(ctx, node)
  local total = M.Sum(ctx, node)
  local n = 0
  for i = 1, node.ninputs do if node.inputs[i] then n = n + 1 end end
  return total / n
end

function M.MatMul(_, node)
  local a, b = node.inputs[1], node.inputs[2]
  local y = a:matmul(b)
  if dtype_of(y) ~= dtype_of(a) then y = y:cast(dtype_of(a)) end
  return y
end

function M.Gemm(ctx, node)
  local a, b, c = node.inputs[1], node.inputs[2], node.inputs[3]
  if #a:size() ~= 2 or #b:size() ~= 2 then ctx:fail("A and B must be 2-d") end
  if (node.attrs.transA or 0) ~= 0 then a = a:transpose(1, 2) end
  if (node.attrs.transB or 0) ~= 0 then b = b:transpose(1, 2) end
  local alpha, beta = node.attrs.alpha or 1.0, node.attrs.beta or 1.0
  local y = a:matmul(b)
  if alpha ~= 1 then y = y * alpha end
  if c then y = y + (beta ~= 1 and c * beta or c) end
  return y
end

return M
