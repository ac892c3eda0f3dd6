-- tcl.api.init_weights — tcl.nn.init: weight initializers with torch.nn.init's formulas, as
-- functions that return new tensors (tcl tensors are immutable, so there is no in-place `_`
-- form). Layer: lua/tcl/api.
--
--   local w = tcl.nn.init.kaiming_uniform({ 256, 784 }, { nonlinearity = "relu" })
--   local v = tcl.nn.init.trunc_normal(w, { std = 0.02 })   -- w's shape, dtype and device
--
-- Every function takes the target first: a shape (a size or a list of sizes; float32 on the
-- default device unless the options say otherwise) or a tensor, whose shape, dtype and device
-- the result takes (the options dtype and device override them); nothing of the tensor's
-- values is read. Required parameters follow as positional arguments (constant's value), the
-- optional ones are named in an options table (PyTorch's keyword arguments). Random values
-- are lazy graphs on the device drawn with Tensor.rand / Tensor.randn, so tcl.manual_seed
-- makes them reproducible. orthogonal (needs a QR decomposition) and sparse are not provided.
local check = require "tcl.api.check"
local class = require "tcl.api.class"
local creation = require "tcl.api.creation"
local rules = require "tcl.api.dtype_rules"
local Tensor = require "tcl.api.tensor" -- the class with every method installed

local fail = check.fail
local M = {}

local function number_str(v)
  if type(v) ~= "number" then return check.type_name(v) end
  if v ~= v then return "nan" end
  return string.format("%.17g", v)
end

-- A finite number, `default` when nil.
local function finite(fn, what, v, default)
  if v == nil then return default end
  if type(v) ~= "number" or v ~= v or v == math.huge or v == -math.huge then
    fail(fn, "%s must be a finite number, got %s", what, number_str(v))
  end
  return v
end

-- The target's shape, dtype and device from a shape or a tensor and the options (dtype,
-- device and the function's own keys, listed in `known`); random initializers need a float
-- dtype. Returns shape, { dtype =, device = } and the checked options.
local function target(fn, shape_or_tensor, opts, known, float_only)
  opts = check.options(fn, opts, setmetatable({ dtype = true, device = true }, { __index = known }))
  local shape, dtype_opts = nil, { dtype = opts.dtype, device = opts.device }
  if class.is_tensor(shape_or_tensor) then
    shape = shape_or_tensor.shape
    if dtype_opts.dtype == nil then dtype_opts.dtype = shape_or_tensor.dtype end
    if dtype_opts.device == nil then dtype_opts.device = shape_or_tensor.device end
  elseif type(shape_or_tensor) == "number" or type(shape_or_tensor) == "table" then
    shape = check.shape(fn, shape_or_tensor)
  else
    fail(fn, "expected a shape or a tensor, got %s", check.type_name(shape_or_tensor))
  end
  local dtype, device = creation._options(fn, dtype_opts, rules.default_float)
  if float_only and not dtype.is_float then fail(fn, "dtype must be a float dtype, got %s", dtype.name) end
  return shape, { dtype = dtype, device = device }, opts
end

--- fan_in, fan_out of a weight of `shape` as PyTorch computes them: dims 1 and 2 are the
--  output and input features (channels), and the dims after them (a convolution's kernel)
--  multiply both. A shape or a tensor; fewer than 2 dims is an error.
local function fans(fn, shape)
  if #shape < 2 then
    fail(fn, "fan_in and fan_out need a shape of at least 2 dims, got %s", check.shape_str(shape))
  end
  local receptive = 1
  for i = 3, #shape do receptive = receptive * shape[i] end
  return shape[2] * receptive, shape[1] * receptive
end

function M.calculate_fans(shape_or_tensor)
  local fn = "nn.init.calculate_fans"
  local shape = class.is_tensor(shape_or_tensor) and shape_or_tensor.shape or check.shape(fn, shape_or_tensor)
  return fans(fn, shape)
end

-- The recommended gains, PyTorch's table.
local UNIT_GAIN = { linear = true, sigmoid = true, conv1d = true, conv2d = true, conv3d = true,
  conv_transpose1d = true, conv_transpose2d = true, conv_transpose3d = true }
local NAMES = "linear, conv1d, conv2d, conv3d, conv_transpose1d, conv_transpose2d, conv_transpose3d, "
  .. "sigmoid, tanh, relu, leaky_relu, selu"

local function gain_of(fn, nonlinearity, param)
  if type(nonlinearity) ~= "string" then
    fail(fn, "nonlinearity must be a string, got %s", check.type_name(nonlinearity))
  end
  if nonlinearity == "leaky_relu" then
    local slope = finite(fn, "the negative slope", param, 0.01)
    return math.sqrt(2 / (1 + slope * slope))
  end
  local gain
  if UNIT_GAIN[nonlinearity] then gain = 1.0
  elseif nonlinearity == "tanh" then gain = 5 / 3
  elseif nonlinearity == "relu" then gain = math.sqrt(2)
  elseif nonlinearity == "selu" then gain = 3 / 4
  else fail(fn, "unknown nonlinearity '%s' (one of %s)", check.quote(nonlinearity), NAMES) end
  if param ~= nil then fail(fn, "nonlinearity '%s' takes no parameter, got %s", nonlinearity, number_str(param)) end
  return gain
end

--- calculate_gain(nonlinearity, param): the recommended gain for a nonlinearity (1 for linear,
--  the conv* and sigmoid, 5/3 tanh, sqrt(2) relu, sqrt(2 / (1 + slope^2)) leaky_relu with
--  param the negative slope, default 0.01, 3/4 selu).
function M.calculate_gain(nonlinearity, param)
  return gain_of("nn.init.calculate_gain", nonlinearity, param)
end

-- uniform in [a, b) and normal(mean, std) in the target dtype (the layers' values depend on
-- this exact sequence: rand * (b - a) + a).
local function uniform_in(shape, a, b, where)
  return Tensor.rand(shape, where):mul(b - a):add(a)
end

local function normal_with(shape, mean, std, where)
  return Tensor.randn(shape, where):mul(std):add(mean)
end

--- uniform(target, {a = 0, b = 1}): uniform in [a, b) (up to the rounding of the dtype, which
--  may give b itself).
function M.uniform(shape_or_tensor, opts)
  local fn = "nn.init.uniform"
  local shape, where, o = target(fn, shape_or_tensor, opts, { a = true, b = true }, true)
  local a, b = finite(fn, "a", o.a, 0.0), finite(fn, "b", o.b, 1.0)
  if a > b then fail(fn, "a (%s) must be <= b (%s)", number_str(a), number_str(b)) end
  return uniform_in(shape, a, b, where)
end

--- normal(target, {mean = 0, std = 1}).
function M.normal(shape_or_tensor, opts)
  local fn = "nn.init.normal"
  local shape, where, o = target(fn, shape_or_tensor, opts, { mean = true, std = true }, true)
  local mean, std = finite(fn, "mean", o.mean, 0.0), finite(fn, "std", o.std, 1.0)
  if std < 0 then fail(fn, "std must be >= 0, got %s", number_str(std)) end
  return normal_with(shape, mean, std, where)
end

--- constant(target, value, {dtype =, device =}), zeros(target, opts), ones(target, opts).
function M.constant(shape_or_tensor, value, opts)
  local fn = "nn.init.constant"
  local shape, where = target(fn, shape_or_tensor, opts, {})
  if type(value) ~= "number" and type(value) ~= "boolean" then
    fail(fn, "value must be a number, got %s", check.type_name(value))
  end
  return Tensor.full(shape, value, where)
end

function M.zeros(shape_or_tensor, opts)
  local shape, where = target("nn.init.zeros", shape_or_tensor, opts, {})
  return Tensor.zeros(shape, where)
end

function M.ones(shape_or_tensor, opts)
  local shape, where = target("nn.init.ones", shape_or_tensor, opts, {})
  return Tensor.ones(shape, where)
end

--- eye(target, opts): the 2-d identity (ones on the diagonal of a rows x cols matrix).
function M.eye(shape_or_tensor, opts)
  local fn = "nn.init.eye"
  local shape, where = target(fn, shape_or_tensor, opts, {})
  if #shape ~= 2 then fail(fn, "needs a 2-d shape, got %s", check.shape_str(shape)) end
  return Tensor.eye(shape[1], shape[2], where)
end

-- The fan that `mode` picks.
local function mode_fan(fn, shape, mode)
  local fan_in, fan_out = fans(fn, shape)
  if mode == nil or mode == "fan_in" then return fan_in end
  if mode == "fan_out" then return fan_out end
  fail(fn, "mode must be 'fan_in' or 'fan_out', got %s",
    type(mode) == "string" and "'" .. mode .. "'" or check.type_name(mode))
end

local KAIMING = { a = true, mode = true, nonlinearity = true }

-- std = gain / sqrt(fan) of kaiming_* (nil for no elements): nonlinearity defaults to
-- leaky_relu, whose slope is a.
local function kaiming(fn, shape, o)
  local nonlinearity = o.nonlinearity == nil and "leaky_relu" or o.nonlinearity
  local a = finite(fn, "a", o.a, 0.0)
  if o.a ~= nil and nonlinearity ~= "leaky_relu" then
    fail(fn, "a is the negative slope of leaky_relu, got nonlinearity '%s'", check.quote(nonlinearity))
  end
  local gain = gain_of(fn, nonlinearity, nonlinearity == "leaky_relu" and a or nil)
  local fan = mode_fan(fn, shape, o.mode)
  if fan == 0 then return nil end
  return gain / math.sqrt(fan)
end

--- kaiming_uniform(target, {a = 0, mode = "fan_in", nonlinearity = "leaky_relu"}) (He
--  initialization): uniform in [-bound, bound) with bound = gain * sqrt(3 / fan), gain =
--  calculate_gain(nonlinearity, a) and fan fan_in or fan_out (calculate_fans).
function M.kaiming_uniform(shape_or_tensor, opts)
  local fn = "nn.init.kaiming_uniform"
  local shape, where, o = target(fn, shape_or_tensor, opts, KAIMING, true)
  local std = kaiming(fn, shape, o)
  if std == nil then return Tensor.zeros(shape, where) end -- no elements
  local bound = math.sqrt(3) * std
  return uniform_in(shape, -bound, bound, where)
end

--- kaiming_normal(target, opts as kaiming_uniform): normal(0, gain / sqrt(fan)).
function M.kaiming_normal(shape_or_tensor, opts)
  local fn = "nn.init.kaiming_normal"
  local shape, where, o = target(fn, shape_or_tensor, opts, KAIMING, true)
  local std = kaiming(fn, shape, o)
  if std == nil then return Tensor.zeros(shape, where) end
  return normal_with(shape, 0.0, std, where)
end

-- xavier's std: gain * sqrt(2 / (fan_in + fan_out)).
local function xavier_std(fn, shape, o)
  local gain = finite(fn, "gain", o.gain, 1.0)
  local fan_in, fan_out = fans(fn, shape)
  if fan_in + fan_out == 0 then return nil end
  return gain * math.sqrt(2 / (fan_in + fan_out))
end

--- xavier_uniform(target, {gain = 1}) (Glorot initialization; also glorot_uniform): uniform in
--  [-bound, bound) with bound = gain * sqrt(6 / (fan_in + fan_out)).
function M.xavier_uniform(shape_or_tensor, opts)
  local fn = "nn.init.xavier_uniform"
  local shape, where, o = target(fn, shape_or_tensor, opts, { gain = true }, true)
  local std = xavier_std(fn, shape, o)
  if std == nil then return Tensor.zeros(shape, where) end
  local bound = math.sqrt(3) * std
  return uniform_in(shape, -bound, bound, where)
end

--- xavier_normal(target, {gain = 1}) (also glorot_normal): normal(0, gain * sqrt(2 / (fan_in + fan_out))).
function M.xavier_normal(shape_or_tensor, opts)
  local fn = "nn.init.xavier_normal"
  local shape, where, o = target(fn, shape_or_tensor, opts, { gain = true }, true)
  local std = xavier_std(fn, shape, o)
  if std == nil then return Tensor.zeros(shape, where) end
  return normal_with(shape, 0.0, std, where)
end

M.glorot_uniform = M.xavier_uniform
M.glorot_normal = M.xavier_normal

-- ---------------------------------------------------------------------------------------
-- trunc_normal: the inverse CDF of the standard normal applied to uniforms in [Phi(alpha),
-- Phi(beta)), alpha and beta being a and b in standard units. Each uniform is kept both as p
-- and as q = 1 - p (each from constants computed in float64 here), and the quantile is taken
-- of the smaller one, so intervals deep in either tail keep their resolution.

-- erfc(x) for x >= 0 in float64: the series erf(x) = 2/sqrt(pi) exp(-x^2) sum (2x^2)^n x /
-- (1 3 5 ... (2n+1)) (positive terms, no cancellation) below 2.5, the continued fraction
-- erfc(x) = exp(-x^2) / sqrt(pi) / (x + (1/2) / (x + 1 / (x + (3/2) / (x + ...)))) above.
local function erfc(x)
  if x < 2.5 then
    local term, sum, n = x, x, 0
    while term > 1e-17 * sum do
      n = n + 1
      term = term * 2 * x * x / (2 * n + 1)
      sum = sum + term
    end
    return 1 - 2 / math.sqrt(math.pi) * math.exp(-x * x) * sum
  end
  local t = x
  for k = 200, 1, -1 do t = x + (k / 2) / t end
  return math.exp(-x * x) / math.sqrt(math.pi) / t
end

-- Phi(x) for x <= 0 (the standard normal's lower tail, accurate relative to its size).
local function lower_tail(x) return 0.5 * erfc(-x / math.sqrt(2)) end

-- Acklam's rational approximations of the normal quantile (relative error below 1.2e-9): a
-- central one for p in [P_LOW, 1/2], a tail one in sqrt(-2 log p) below P_LOW.
local P_LOW = 0.02425
local CENTRAL_NUM = { -3.969683028665376e+01, 2.209460984245205e+02, -2.759285104469687e+02,
  1.383577518672690e+02, -3.066479806614716e+01, 2.506628277459239e+00 }
local CENTRAL_DEN = { -5.447609879822406e+01, 1.615858368580409e+02, -1.556989798598866e+02,
  6.680131188771972e+01, -1.328068155288572e+01, 1 }
local TAIL_NUM = { -7.784894002430293e-03, -3.223964580411365e-01, -2.400758277161838e+00,
  -2.549732539343734e+00, 4.374664141464968e+00, 2.938163982698783e+00 }
local TAIL_DEN = { 7.784695709041462e-03, 3.224671290700398e-01, 2.445134137142996e+00,
  3.754408661907416e+00, 1 }

-- Horner's rule on a tensor.
local function polynomial(x, coefficients)
  local y = x * coefficients[1] + coefficients[2]
  for i = 3, #coefficients do y = y * x + coefficients[i] end
  return y
end

-- The quantile of s in (0, 1/2] (a tensor): <= 0.
local function lower_quantile(s)
  local c = s - 0.5
  local r = c * c
  local central = polynomial(r, CENTRAL_NUM) * c / polynomial(r, CENTRAL_DEN)
  local t = (s:log() * -2):sqrt()
  local tail = polynomial(t, TAIL_NUM) / polynomial(t, TAIL_DEN)
  return s:lt(P_LOW):where(tail, central)
end

--- trunc_normal(target, {mean = 0, std = 1, a = -2, b = 2}): normal(mean, std) conditioned on
--  [a, b] (a and b in the values' units, as in PyTorch), by the inverse CDF: no rejection, no
--  mass piled on the ends. Computed in float32 (float64 for float64); the quantile's
--  approximation error (1.2e-9 relative) is below float32's, and a last clamp to [a, b] only
--  removes rounding.
function M.trunc_normal(shape_or_tensor, opts)
  local fn = "nn.init.trunc_normal"
  local shape, where, o = target(fn, shape_or_tensor, opts, { mean = true, std = true, a = true, b = true }, true)
  local mean, std = finite(fn, "mean", o.mean, 0.0), finite(fn, "std", o.std, 1.0)
  local a, b = finite(fn, "a", o.a, -2.0), finite(fn, "b", o.b, 2.0)
  if std <= 0 then fail(fn, "std must be > 0, got %s", number_str(std)) end
  if a >= b then fail(fn, "a (%s) must be < b (%s)", number_str(a), number_str(b)) end
  local alpha, beta = (a - mean) / std, (b - mean) / std
  -- p_a = Phi(alpha) and q_a = 1 - p_a, and the width Phi(beta) - Phi(alpha), each without
  -- subtracting nearly equal numbers
  local p_a = alpha <= 0 and lower_tail(alpha) or 1 - lower_tail(-alpha)
  local q_a = alpha <= 0 and 1 - lower_tail(alpha) or lower_tail(-alpha)
  local width
  if alpha >= 0 then width = lower_tail(-alpha) - lower_tail(-beta)
  elseif beta <= 0 then width = lower_tail(beta) - lower_tail(alpha)
  else width = 1 - lower_tail(alpha) - lower_tail(-beta) end
  local work = where.dtype.name == "float64" and "float64" or "float32"
  local u = Tensor.rand(shape, { dtype = work, device = where.device })
  local p, q = u * width + p_a, u * -width + q_a
  -- the smallest normal float32: a uniform that rounds to 0 gives a finite quantile (clamped)
  local s = p:minimum(q):maximum(1.1754943508222875e-38)
  local z = lower_quantile(s)
  local x = p:le(q):where(z, -z)
  return (x * std + mean):clamp(a, b):cast(where.dtype)
end

-- every function refuses a stray argument; the glorot aliases name their xavier function
return check.fix_arguments(M, "nn.init.", { glorot_uniform = true, glorot_normal = true })
