-- tcl.api.math_ops — erf, erfc, inverse and hyperbolic trigonometry, log1p, expm1, log10, fmod,
-- remainder, copysign, lerp, isfinite, isclose/allclose and the bitwise not and shifts, built
-- from the graph's primitives (EXP2, LOG2, SQRT, RECIPROCAL, WHERE ...): they fuse, run on every
-- device, and autograd differentiates them through those primitives. Each transcendental keeps
-- float16/bfloat16 in float32 until the end; its measured error is in Tensor.ULP_BOUNDS (see
-- spec/api/math_ops_spec.lua). Layer: lua/tcl/api.
local check = require "tcl.api.check"
local class = require "tcl.api.class"
local rules = require "tcl.api.dtype_rules"
local nodes = require "tcl.api.nodes"
local elementwise = require "tcl.api.elementwise"
local core = require "tcl.core"

local fail, is_tensor = check.fail, class.is_tensor
local dtypes = core.dtypes
local where = elementwise.where
local M = {}

local PI = math.pi
local LN2 = math.log(2)

local function tensor_arg(fn, x)
  if not is_tensor(x) then fail(fn, "expected a Tensor, got %s", check.type_name(x)) end
  return x
end

-- fn computed on x as a float tensor (ints and bool as float32; float16/bfloat16 in float32,
-- rounded once at the end)
local function float_op(name, f)
  return function(x)
    tensor_arg(name, x)
    local dt = x.uop.dtype
    local out = rules.float_of(dt)
    local work = out.itemsize < 4 and dtypes.float32 or out
    return nodes.cast(f(nodes.cast(x, work)), out)
  end
end

-- atan on [0, tan(pi/12)]: its Taylor series to z^15 (error below float64's ulp there)
local function atan_small(z)
  local z2 = z * z
  -- atan z = z - z * z2 * q, q = 1/3 - z2 (1/5 - z2 (1/7 - ...))
  local q = z2 * 0 + 1 / 15
  for _, c in ipairs({ 1 / 13, 1 / 11, 1 / 9, 1 / 7, 1 / 5, 1 / 3 }) do q = -(z2 * q) + c end
  return z - z * (z2 * q)
end

local TAN_PI_12 = 2 - math.sqrt(3)
local SQRT3 = math.sqrt(3)

-- atan of x >= 0: 1/x above 1, then a shift by pi/6 above tan(pi/12), then the series
local function atan_nonnegative(a)
  local inverted = a:gt(1)
  local b = where(inverted, a:reciprocal(), a)
  local shifted = b:gt(TAN_PI_12)
  local z = where(shifted, (b * SQRT3 - 1) / (b + SQRT3), b)
  local r = atan_small(z)
  r = where(shifted, r + PI / 6, r)
  return where(inverted, -r + PI / 2, r)
end

local function signed(x, f)
  local r = f(x:abs())
  return where(x:lt(0), -r, r)
end

--- arctangent; max error ULP_BOUNDS.atan.
M.atan = float_op("atan", function(x) return signed(x, atan_nonnegative) end)

--- arcsine (NaN outside [-1, 1]); max error ULP_BOUNDS.asin.
M.asin = float_op("asin", function(x)
  return signed(x, function(a) return atan_nonnegative(a / ((-a + 1) * (a + 1)):sqrt()) end)
end)

--- arccosine (NaN outside [-1, 1]): 2 atan(sqrt((1 - x) / (1 + x))), exact near 1; ULP_BOUNDS.acos.
M.acos = float_op("acos", function(x)
  return atan_nonnegative(((-x + 1) / (x + 1)):sqrt()) * 2
end)

--- atan2(y, x): the angle of (x, y) in (-pi, pi], with torch's signs at zeros and infinities
--  for finite inputs; ULP_BOUNDS.atan2.
function M.atan2(y, x)
  tensor_arg("atan2", y)
  if not is_tensor(x) then x = class.Tensor.full({}, x, { dtype = rules.float_of(y.uop.dtype).name }) end
  local out = rules.float_of(rules.promote("atan2", y.uop.dtype, x.uop.dtype))
  local work = out.itemsize < 4 and dtypes.float32 or out
  local yf, xf = nodes.cast(y, work), nodes.cast(x, work)
  local ay, ax = yf:abs(), xf:abs()
  -- the angle of (|x|, |y|) in [0, pi/2]: atan of the smaller over the larger ratio
  local steep = ay:gt(ax)
  local ratio = where(steep, ax / ay, ay / ax)
  ratio = where(ay:eq(0):logical_and(ax:eq(0)), 0, ratio)
  local base = atan_nonnegative(ratio)
  base = where(steep, -base + PI / 2, base)
  local negative_x = xf:lt(0):logical_or(xf:eq(0):logical_and(xf:reciprocal():lt(0)))
  local angle = where(negative_x, -base + PI, base)
  local negative_y = yf:lt(0):logical_or(yf:eq(0):logical_and(yf:reciprocal():lt(0)))
  angle = where(negative_y, -angle, angle)
  angle = where(yf:ne(yf):logical_or(xf:ne(xf)), yf + xf, angle)
  return nodes.cast(angle, out)
end

-- e^x / 2 and e^-x / 2 for x >= 0: the first as (e^(x/2) / 2) e^(x/2) where e^x overflows
-- (x/2 is exact; e^(x - ln 2) would cost |x| ulps in the rounding of x - ln 2), so sinh and
-- cosh overflow only when they must
local function half_exps(x)
  local half = (x * 0.5):exp()
  local up = where(x:lt(88), x:exp() * 0.5, half * 0.5 * half)
  return up, (-x):exp() * 0.5
end

--- hyperbolic sine (its series below 1 in magnitude); ULP_BOUNDS.sinh.
M.sinh = float_op("sinh", function(x)
  local up, down = half_exps(x:abs())
  local big = up - down
  local x2 = x * x
  local series = x * (((((x2 * (1 / 39916800) + 1 / 362880) * x2 + 1 / 5040) * x2 + 1 / 120) * x2 + 1 / 6) * x2 + 1)
  return where(x:abs():lt(1), series, where(x:lt(0), -big, big))
end)

--- hyperbolic cosine; ULP_BOUNDS.cosh.
M.cosh = float_op("cosh", function(x)
  local up, down = half_exps(x:abs())
  return up + down
end)

--- log(1 + x), accurate for tiny x (log(u) * x / (u - 1), u = 1 + x); ULP_BOUNDS.log1p.
M.log1p = float_op("log1p", function(x)
  local u = x + 1
  local d = u - 1
  local corrected = u:log() * (x / d)
  return where(d:eq(0), x, where(u:eq(math.huge), u, corrected))
end)

--- e^x - 1, accurate for tiny x ((u - 1) * x / log u, u = e^x); ULP_BOUNDS.expm1.
M.expm1 = float_op("expm1", function(x)
  local u = x:exp()
  local d = u - 1
  local corrected = d * (x / u:log())
  return where(u:eq(1), x, where(d:eq(-1), d, where(u:eq(math.huge), u, corrected)))
end)

local function log1p_raw(x) return M.log1p(x) end

--- inverse hyperbolic sine; ULP_BOUNDS.asinh.
M.asinh = float_op("asinh", function(x)
  return signed(x, function(a)
    local a2 = a * a
    local small = log1p_raw(a + a2 / ((a2 + 1):sqrt() + 1))
    return where(a:gt(1e18), a:log() + LN2, small)
  end)
end)

--- inverse hyperbolic cosine (NaN below 1); ULP_BOUNDS.acosh.
M.acosh = float_op("acosh", function(x)
  local t = x - 1
  local near = log1p_raw(t + (t * 2 + t * t):sqrt())
  return where(x:lt(1), 0 / 0, where(x:gt(1e18), x:log() + LN2, near))
end)

--- inverse hyperbolic tangent (+-inf at +-1, NaN outside); ULP_BOUNDS.atanh.
M.atanh = float_op("atanh", function(x)
  return signed(x, function(a) return log1p_raw(a * 2 / (-a + 1)) * 0.5 end)
end)

--- log base 10; ULP_BOUNDS.log10.
M.log10 = float_op("log10", function(x) return x:log2() * (math.log(2) / math.log(10)) end)

-- erf: its Taylor series below 0.5; above, 1 - t P(t) e^(-x^2) with t = 1 / (1 + p x)
-- (Abramowitz & Stegun 7.1.26), whose t P(t) e^(-x^2) is also erfc's tail.
local ERF_P = 0.3275911
local ERF_A = { 0.254829592, -0.284496736, 1.421413741, -1.453152027, 1.061405429 }
local TWO_OVER_SQRT_PI = 2 / math.sqrt(PI)

local function erf_series(x)
  local x2 = x * x
  -- x - x^3/3 + x^5/10 - x^7/42 + x^9/216 - x^11/1320 + x^13/9360 = x - x x2 q
  local q = x2 * 0 + 1 / 9360
  for _, c in ipairs({ 1 / 1320, 1 / 216, 1 / 42, 1 / 10, 1 / 3 }) do q = -(x2 * q) + c end
  return (x - x * (x2 * q)) * TWO_OVER_SQRT_PI
end

-- e^(-a^2) without the rounding of a^2 (whose error e^ multiplies by a^2): a = h + l with h
-- on a grid of 1/256, so h^2 is exact (in float32 for a < 16, where its tail has long
-- underflowed; in float64 always), and e^(-a^2) = e^(-h^2) e^(-(a - h)(a + h))
local function exp_minus_square(a)
  local h = (a * 256):floor() / 256
  return (-(h * h)):exp() * (-((a - h) * (a + h))):exp()
end

-- erfc for a >= 0.5: A&S 7.1.26 (absolute error 1.5e-7: relative 1e-6 at most below 1), and
-- from 1 on the continued fraction e^(-a^2) / sqrt(pi) / (a + (1/2) / (a + 1 / (a + (3/2) / ...)))
-- taken to 64 levels (relative error below 1e-9 from 1 on, checked against float64 math.erfc)
local function erfc_tail(a)
  a = a:minimum(27) -- erfc underflows to 0 before 10.1 in float32 and 26.6 in float64
  local t = (a * ERF_P + 1):reciprocal()
  local poly = t * ERF_A[5]
  for i = 4, 1, -1 do poly = (poly + ERF_A[i]) * t end
  local e = exp_minus_square(a)
  local b = a:maximum(1)
  local fraction = b
  for k = 64, 1, -1 do fraction = b + (k / 2) / fraction end
  return where(a:lt(1), poly * e, e / fraction * (1 / math.sqrt(PI)))
end

--- the error function; ULP_BOUNDS.erf.
M.erf = float_op("erf", function(x)
  local a = x:abs()
  local big = -erfc_tail(a) + 1
  local r = where(a:lt(0.5), erf_series(a), big)
  r = where(x:lt(0), -r, r)
  return where(x:ne(x), x, r)
end)

--- 1 - erf(x), without the cancellation for large x; ULP_BOUNDS.erfc.
M.erfc = float_op("erfc", function(x)
  local a = x:abs()
  local tail = erfc_tail(a)
  local positive = where(a:lt(0.5), -erf_series(a) + 1, tail)
  local r = where(x:lt(0), -positive + 2, positive)
  r = where(x:lt(0):logical_and(a:lt(0.5)), erf_series(a) + 1, r)
  return where(x:ne(x), x, r)
end)

-- binary operands as tensors of one dtype
local function pair(fn, a, b)
  if not is_tensor(a) and not is_tensor(b) then fail(fn, "expected a Tensor operand") end
  local ref = is_tensor(a) and a or b
  local function tensor(v)
    if is_tensor(v) then return v end
    if type(v) ~= "number" then fail(fn, "expected a Tensor or a number, got %s", check.type_name(v)) end
    return class.Tensor.full({}, v, { dtype = rules.of_value(v) == dtypes.float32 and rules.float_of(ref.uop.dtype).name
      or ref.uop.dtype.name, device = ref.device })
  end
  a, b = tensor(a), tensor(b)
  local dt = rules.promote(fn, a.uop.dtype, b.uop.dtype)
  return nodes.cast(a, dt), nodes.cast(b, dt), dt
end

--- C's fmod: the remainder of a / b truncated toward zero, with a's sign (torch.fmod).
function M.fmod(a, b)
  local x, y, dt = pair("fmod", a, b)
  if dt.is_bool then fail("fmod", "is not defined for bool tensors") end
  local r = x:abs():mod(y:abs())
  return nodes.cast(where(x:lt(0), -r, r), dt)
end

--- The remainder with the divisor's sign (Python's %, torch.remainder); the same as Tensor.mod.
function M.remainder(a, b)
  local x, y, dt = pair("remainder", a, b)
  if dt.is_bool then fail("remainder", "is not defined for bool tensors") end
  return x:mod(y)
end

-- whether the sign bit of a float tensor is set (-0.0 and -NaN included)
local function sign_bit(x)
  local dt = x.uop.dtype
  local int = ({ [2] = dtypes.int16, [4] = dtypes.int32, [8] = dtypes.int64 })[dt.itemsize]
  if not int then return x:lt(0) end
  return x:bitcast(int.name):lt(0)
end

--- |a| with b's sign (sign bits: -0.0 counts as negative), as torch.copysign; ints give floats.
function M.copysign(a, b)
  local x, y, dt = pair("copysign", a, b)
  local out = rules.float_of(dt)
  x, y = nodes.cast(x, out), nodes.cast(y, out)
  local m = x:abs()
  return where(sign_bit(y), -m, m)
end

--- start + weight * (stop - start) (torch.lerp's form: from stop's end when weight >= 0.5).
function M.lerp(start, stop, weight)
  tensor_arg("lerp", start)
  tensor_arg("lerp", stop)
  if not start.uop.dtype.is_float then fail("lerp", "needs float tensors, got %s", start.uop.dtype.name) end
  local w = weight
  if not is_tensor(w) then
    if type(w) ~= "number" then fail("lerp", "weight must be a number or a Tensor, got %s", check.type_name(w)) end
    w = class.Tensor.full({}, w, { dtype = start.uop.dtype.name, device = start.device })
  end
  local diff = stop - start
  return where(w:abs():lt(0.5), start + w * diff, stop - diff * (-w + 1))
end

--- true where x is neither infinite nor NaN (always for integer and bool tensors).
function M.isfinite(x)
  tensor_arg("isfinite", x)
  if not x.uop.dtype.is_float then return class.Tensor.full(x:size(), true, { device = x.device }) end
  return (x - x):eq(0)
end

local function isclose_as(fn, a, b, rtol, atol, equal_nan)
  tensor_arg(fn, a)
  rtol = rtol == nil and 1e-5 or check.number(fn, "rtol", rtol)
  atol = atol == nil and 1e-8 or check.number(fn, "atol", atol)
  if rtol < 0 or atol < 0 then fail(fn, "rtol and atol must be >= 0, got %s and %s", rtol, atol) end
  if equal_nan ~= nil and type(equal_nan) ~= "boolean" then
    fail(fn, "equal_nan must be a boolean, got %s", check.type_name(equal_nan))
  end
  local x, y, dt = pair(fn, a, b)
  if not dt.is_float then
    local xf, yf = nodes.cast(x, dtypes.float64), nodes.cast(y, dtypes.float64)
    return x:eq(y):logical_or((xf - yf):abs():le(atol + rtol * 0 + (yf:abs() * rtol)))
  end
  local close = x:eq(y):logical_or((x - y):abs():le(y:abs() * rtol + atol))
  if equal_nan then close = close:logical_or(x:ne(x):logical_and(y:ne(y))) end
  return close
end

--- |a - b| <= atol + rtol |b| elementwise (and a == b, for infinities); NaNs equal only with
--  equal_nan. Defaults rtol 1e-5, atol 1e-8 (torch.isclose).
function M.isclose(a, b, rtol, atol, equal_nan) return isclose_as("isclose", a, b, rtol, atol, equal_nan) end

--- Whether every element isclose (reads the answer on the host: it realizes).
function M.allclose(a, b, rtol, atol, equal_nan)
  return isclose_as("allclose", a, b, rtol, atol, equal_nan):all():item()
end

--- ~x for integer tensors, logical not for bool.
function M.bitwise_not(x)
  tensor_arg("bitwise_not", x)
  local dt = x.uop.dtype
  if dt.is_bool then return x:logical_not() end
  if not dt.is_int then fail("bitwise_not", "needs an integer or bool tensor, got %s", dt.name) end
  return x:bitwise_xor(class.Tensor.full({}, -1, { dtype = dt.name, device = x.device }))
end

-- 2^b as a uint64 tensor (b in 0..63); shifts of 64 or more give 0 (as torch on CPU)
local function power_of_two(b)
  local bf = nodes.cast(b, dtypes.float64)
  local p = class.Tensor.full({}, 2.0, { dtype = "float64", device = b.device }):pow(bf)
  return p
end

local function shift_args(fn, a, b)
  tensor_arg(fn, a)
  local dt = a.uop.dtype
  if not dt.is_int then fail(fn, "needs integer tensors, got %s", dt.name) end
  if not is_tensor(b) then
    if math.type(b) ~= "integer" then fail(fn, "shift must be an integer or an integer Tensor, got %s", tostring(b)) end
    b = class.Tensor.full({}, b, { dtype = dt.name, device = a.device })
  end
  if not b.uop.dtype.is_int then fail(fn, "shift must be an integer tensor, got %s", b.uop.dtype.name) end
  return a, b, dt
end

--- a << b (bits shifted out are lost, as C's shift of the unsigned bits).
function M.bitwise_left_shift(a, b)
  local x, s, dt = shift_args("bitwise_left_shift", a, b)
  local p = power_of_two(s)
  local in_range = s:ge(0):logical_and(s:lt(dt.itemsize * 8))
  local shifted = nodes.cast(nodes.cast(x, dtypes.uint64) * nodes.cast(where(in_range, p, 0), dtypes.uint64), dt)
  return where(in_range, shifted, 0):cast(dt.name)
end

--- a >> b: arithmetic for signed tensors (rounds toward minus infinity), logical for unsigned.
function M.bitwise_right_shift(a, b)
  local x, s, dt = shift_args("bitwise_right_shift", a, b)
  local bits = dt.itemsize * 8
  local capped = s:minimum(bits - 1):maximum(0)
  if dt.is_unsigned then
    local q = nodes.cast(x, dtypes.uint64):floordiv(nodes.cast(power_of_two(capped), dtypes.uint64))
    return where(s:ge(bits), 0, q):cast(dt.name)
  end
  local q = nodes.cast(x, dtypes.int64):floordiv(nodes.cast(power_of_two(capped:minimum(62)), dtypes.int64))
  q = where(s:ge(63), where(x:lt(0), -1, 0), q)
  return q:cast(dt.name)
end

-- measured on CPU over spec/api/math_ops_spec.lua's sweep against float64 references rounded
-- to float32 (the spec asserts them on CPU and EMU)
local bounds = elementwise.ULP_BOUNDS
bounds.atan, bounds.asin, bounds.acos, bounds.atan2 = 2, 2, 2, 3
bounds.sinh, bounds.cosh, bounds.asinh, bounds.acosh, bounds.atanh = 1, 1, 3, 3, 3
bounds.log1p, bounds.expm1, bounds.log10 = 3, 3, 2
bounds.erf, bounds.erfc = 4, 13

return M
