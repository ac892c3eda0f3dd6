-- tcl.api.elementwise — elementwise Tensor methods: arithmetic with numpy broadcasting and
-- tinygrad's dtype promotion, comparisons, math functions, activations, where, casts.
-- Layer: lua/tcl/api.
--
-- Operands are tensors or Lua numbers/booleans, on either side. Broadcasting is made explicit
-- in the graph (RESHAPE + EXPAND), numbers become CONST nodes broadcast the same way, and
-- every op is decomposed into the ALU ops of docs/design/encodings.md: log = LOG2(x) * ln 2,
-- tan = SIN(x) / COS(x), and so on; exp, sigmoid, tanh, silu, softplus and elu are one node each
-- (EXP ... ELU), which tcl.patterns.transcendental decomposes for the renderers that lack them.
local variables = require "tcl.variables"
local core = require "tcl.core"
local class = require "tcl.api.class"
local check = require "tcl.api.check"
local nodes = require "tcl.api.nodes"
local rules = require "tcl.api.dtype_rules"
local shape_equal = require("tcl.shape").equal
local gradients = require "tcl.api.gradients"

local is_tensor, fail = class.is_tensor, check.fail
-- relu, abs and clamp take their derivative at their kinks from tcl.patterns.gradient's
-- composites (PyTorch's values there), not from the max and where they are built of
local function mark(result, name, inputs, extra) return gradients.mark(result, name, inputs, extra, true) end
local dtypes = core.dtypes
local M = {}

local LOG2_E = 1 / math.log(2)
local LN_2 = math.log(2)
local SQRT_2_OVER_PI = math.sqrt(2 / math.pi)

--- The numpy broadcast of several shapes; fails naming fn and all the shapes.
local function broadcast_shape(fn, shapes)
  -- operands of one shape (the common case): that shape, a tensor's, so checked already
  local first, alike = shapes[1], true
  for k = 2, #shapes do
    if not shape_equal(shapes[k], first) then alike = false break end
  end
  if first and alike then return table.move(first, 1, #first, 1, {}) end
  local ndim = 0
  for _, s in ipairs(shapes) do ndim = math.max(ndim, #s) end
  local out = {}
  for i = 1, ndim do
    local size = 1
    for _, s in ipairs(shapes) do
      local d = s[#s - ndim + i] or 1
      if d ~= 1 then
        if size ~= 1 and size ~= d then
          local parts = {}
          for k, sk in ipairs(shapes) do parts[k] = check.shape_str(sk) end
          local listed = #parts == 2 and (parts[1] .. " and " .. parts[2])
            or (table.concat(parts, ", ", 1, #parts - 1) .. " and " .. parts[#parts])
          fail(fn, "shapes %s cannot be broadcast", listed)
        end
        size = d
      end
    end
    out[i] = size
  end
  return check.shape_fits(fn, out)
end

local function is_scalar(v)
  return type(v) == "number" or type(v) == "boolean"
end

--- Tensors of one shape and one dtype from operands that are tensors or Lua scalars (a
--  list; args.n, when given, is its length including nils).
--  The dtype follows tinygrad: tensors promote together, a scalar beside them takes their
--  dtype when it fits its kind (see api.dtype_rules). Returns the tensors and the dtype.
local function operands(fn, args, device)
  local tensor_dtype, shapes = nil, {}
  local count = args.n or #args -- n counts nil operands too, so they are reported
  for i = 1, count do -- a variable size (T:bind(n)) is its value for this call, as a tensor
    if variables.is_symbolic(args[i]) then
      local at = device
      for j = 1, count do if is_tensor(args[j]) then at = args[j].device break end end
      args[i] = nodes.size_value(check.size(fn, "operand", args[i]), at)
    end
  end
  for i = 1, count do
    local v = args[i]
    if is_tensor(v) then
      tensor_dtype = tensor_dtype and rules.promote(fn, tensor_dtype, v.uop.dtype) or v.uop.dtype
      if device and v.device ~= device then
        fail(fn, "tensors are on different devices, %s and %s (move one with t:to(device))", device, v.device)
      end
      device = v.device
      shapes[#shapes + 1] = v._shape
    elseif not is_scalar(v) then
      fail(fn, "expected a tensor or a number, got %s", check.type_name(v))
    end
  end
  local dtype = tensor_dtype
  for i = 1, count do
    local v = args[i]
    if not is_tensor(v) then
      local own = tensor_dtype and rules.of_scalar_beside(tensor_dtype, v) or rules.of_value(v)
      dtype = dtype and rules.promote(fn, dtype, own) or own
    end
  end
  local shape = broadcast_shape(fn, shapes)
  device = device or class.default_device()
  local out = {}
  for i = 1, count do
    local v = args[i]
    if is_tensor(v) then
      out[i] = nodes.broadcast_to(nodes.cast(v, dtype), shape)
    else
      out[i] = nodes.const(v, dtype, shape, device, true)
    end
  end
  return out, dtype
end

local tensor_arg = check.tensor

-- A scalar of x's shape and dtype (for formulas).
local function like(x, value)
  return nodes.const(value, x.uop.dtype, x._shape, x.device, true)
end

local function no_bool(fn, dtype)
  if dtype.is_bool then fail(fn, "not supported for bool tensors") end
end

-- ---------------------------------------------------------------------------------------
-- arithmetic

-- Binary ops that are one ALU node of the promoted dtype.
local function binary(fn, op)
  return function(a, b)
    local t, dt = operands(fn, { a, b, n = 2 })
    return nodes.alu(op, dt, t)
  end
end
M.add = binary("add", "ADD")
M.sub = binary("sub", "SUB")
M.mul = binary("mul", "MUL")

--- True division: integer operands are divided as float32 (as in tinygrad).
function M.div(a, b)
  local t, dt = operands("div", { a, b, n = 2 })
  local float = rules.float_of(dt)
  return nodes.alu("FDIV", float, { nodes.cast(t[1], float), nodes.cast(t[2], float) })
end

--- Lua's %: the remainder has the sign of the divisor (floor semantics). For floats FLOORMOD
-- is exact like Lua's float % (fmod, then the sign fix: see src/core/alu.h).
function M.mod(a, b)
  local t, dt = operands("mod", { a, b, n = 2 })
  no_bool("mod", dt)
  return nodes.alu("FLOORMOD", dt, t)
end

--- Lua's //: the quotient rounded toward minus infinity.
function M.floordiv(a, b)
  local t, dt = operands("floordiv", { a, b, n = 2 })
  no_bool("floordiv", dt)
  if dt.is_int then return nodes.alu("FLOORDIV", dt, t) end
  return nodes.alu("FDIV", dt, t):floor()
end

-- x^n for a small integer n >= 0 by repeated squaring: exact for integers, and the usual
-- fast path for x^2 on floats.
local function power_by_squaring(x, n)
  local result, base = nil, x
  while n > 0 do
    if n % 2 == 1 then result = result and result:mul(base) or base end
    n = n // 2
    if n > 0 then base = base:mul(base) end
  end
  return result or like(x, 1)
end

--- a ^ b. Floats use POW (C's pow); an integer tensor raised to a small non-negative Lua
--  integer is exact; other integer powers are computed in float32 and cast back.
function M.pow(a, b)
  local t, dt = operands("pow", { a, b, n = 2 })
  no_bool("pow", dt)
  if math.type(b) == "integer" and b >= 0 and b <= 64 and is_tensor(a) then
    return power_by_squaring(t[1], b)
  end
  if dt.is_float then return nodes.alu("POW", dt, t) end
  local float = rules.default_float
  return nodes.cast(nodes.alu("POW", float, { nodes.cast(t[1], float), nodes.cast(t[2], float) }), dt)
end

M.maximum = binary("maximum", "MAX")
M.minimum = binary("minimum", "MIN")

--- Clamps into [lo, hi]; either bound may be nil.
function M.clamp(x, lo, hi)
  tensor_arg("clamp", x)
  if lo == nil and hi == nil then fail("clamp", "needs at least one of lo and hi") end
  for _, bound in ipairs({ lo or 0, hi or 0 }) do
    if not (is_tensor(bound) or type(bound) == "number") then
      fail("clamp", "bounds must be tensors or numbers, got %s", check.type_name(bound))
    end
  end
  -- every operand checked together (shapes, dtypes, devices), so errors name clamp
  local all = { x }
  if lo ~= nil then all[#all + 1] = lo end
  if hi ~= nil then all[#all + 1] = hi end
  local broadcast = operands("clamp", all)
  local y = x
  if lo ~= nil then y = M.maximum(y, lo) end
  if hi ~= nil then y = M.minimum(y, hi) end
  -- its own derivative (PyTorch's): the whole gradient where lo <= x <= hi, none outside; the
  -- maximum and minimum it is built of would pass half of it at the bounds
  return mark(y, "clamp", broadcast, { lo = lo ~= nil and 2 or nil, hi = hi ~= nil and #all or nil })
end
M.clip = M.clamp

-- ---------------------------------------------------------------------------------------
-- comparisons and logic (bool results)

-- Comparisons that are one ALU node with a bool result.
local function compare(fn, op)
  return function(a, b) return nodes.alu(op, dtypes.bool, (operands(fn, { a, b, n = 2 }))) end
end
M.eq = compare("eq", "CMPEQ")
M.ne = compare("ne", "CMPNE")
M.lt = compare("lt", "CMPLT")

function M.gt(a, b)
  local t = operands("gt", { a, b, n = 2 })
  return nodes.alu("CMPLT", dtypes.bool, { t[2], t[1] })
end

-- a <= b as (a < b) or (a == b), so that NaN compares false like in Lua and IEEE.
function M.le(a, b)
  local t = operands("le", { a, b, n = 2 })
  return nodes.alu("OR", dtypes.bool, { nodes.alu("CMPLT", dtypes.bool, t), nodes.alu("CMPEQ", dtypes.bool, t) })
end

function M.ge(a, b)
  local t = operands("ge", { a, b, n = 2 })
  local less = nodes.alu("CMPLT", dtypes.bool, { t[2], t[1] })
  return nodes.alu("OR", dtypes.bool, { less, nodes.alu("CMPEQ", dtypes.bool, t) })
end

local function as_bool(t) return nodes.cast(t, dtypes.bool) end

function M.logical_not(x)
  tensor_arg("logical_not", x)
  local b = as_bool(x)
  return nodes.alu("CMPNE", dtypes.bool, { b, like(b, true) })
end

-- Logic on operands cast to bool (xor is "not equal").
local function logical(fn, op)
  return function(a, b)
    local t = operands(fn, { a, b, n = 2 })
    return nodes.alu(op, dtypes.bool, { as_bool(t[1]), as_bool(t[2]) })
  end
end
M.logical_and = logical("logical_and", "AND")
M.logical_or = logical("logical_or", "OR")
M.logical_xor = logical("logical_xor", "CMPNE")

local function bitwise(fn, op, a, b)
  local t, dt = operands(fn, { a, b, n = 2 })
  if dt.is_float then fail(fn, "needs integer or bool tensors, got %s", dt.name) end
  return nodes.alu(op, dt, t)
end
function M.bitwise_and(a, b) return bitwise("bitwise_and", "AND", a, b) end
function M.bitwise_or(a, b) return bitwise("bitwise_or", "OR", a, b) end
function M.bitwise_xor(a, b) return bitwise("bitwise_xor", "XOR", a, b) end

-- where under the name fn ("where" or "masked_fill").
local function where_as(fn, cond, a, b)
  tensor_arg(fn, cond)
  -- cond takes part in the broadcast and the device check, not in the dtype promotion
  local shapes = { cond._shape }
  for _, v in ipairs({ a, b }) do
    if is_tensor(v) then shapes[#shapes + 1] = v._shape end
  end
  local shape = broadcast_shape(fn, shapes)
  local t, dt = operands(fn, { a, b, n = 2 }, cond.device)
  for _, v in ipairs({ a, b }) do
    if not is_tensor(v) then rules.fill_value(fn, v, dt) end -- 1000 beside int8 fails, not wraps
  end
  local c = nodes.broadcast_to(as_bool(cond), shape)
  local x, y = nodes.broadcast_to(t[1], shape), nodes.broadcast_to(t[2], shape)
  return nodes.alu("WHERE", dt, { c, x, y })
end

--- where(cond, a, b): a where cond is true, else b. Also cond:where(a, b).
function M.where(cond, a, b) return (where_as("where", cond, a, b)) end

--- Value where mask is true, x elsewhere.
function M.masked_fill(x, mask, value)
  tensor_arg("masked_fill", x)
  -- a number takes x's dtype (PyTorch's rule: int8 stays int8, 2.5 fills an int tensor with 2)
  if is_scalar(value) then value = rules.fill_value("masked_fill", value, x.uop.dtype) end
  return (where_as("masked_fill", mask, value, x))
end

function M.isnan(x)
  tensor_arg("isnan", x)
  return M.ne(x, x)
end

function M.isinf(x)
  tensor_arg("isinf", x)
  if not x.uop.dtype.is_float then return like(nodes.cast(x, dtypes.bool), false) end
  return M.eq(M.abs(x), math.huge)
end

-- ---------------------------------------------------------------------------------------
-- casts

function M.cast(x, dtype)
  tensor_arg("cast", x)
  return nodes.cast(x, rules.dtype("cast", dtype))
end

--- The same bits read as another dtype of the same item size.
function M.bitcast(x, dtype)
  tensor_arg("bitcast", x)
  local dt = rules.dtype("bitcast", dtype)
  if dt.itemsize ~= x.uop.dtype.itemsize then
    fail("bitcast", "%s and %s differ in item size (%d and %d bytes)", x.uop.dtype.name, dt.name,
      x.uop.dtype.itemsize, dt.itemsize)
  end
  if rawequal(dt, x.uop.dtype) then return x end
  return nodes.node("BITCAST", dt, { x }, nil, nodes.copy_shape(x), x.device)
end

-- Casts to a fixed dtype: float, half, double, int, long, bool.
local function cast_to(fn, dtype)
  return function(x) tensor_arg(fn, x); return nodes.cast(x, dtype) end
end
M.float = cast_to("float", dtypes.float32)
M.half = cast_to("half", dtypes.float16)
M.double = cast_to("double", dtypes.float64)
M.int = cast_to("int", dtypes.int32)
M.long = cast_to("long", dtypes.int64)
M.bool = cast_to("bool", dtypes.bool)

function M.is_floating_point(x)
  tensor_arg("is_floating_point", x)
  return x.uop.dtype.is_float
end

-- ---------------------------------------------------------------------------------------
-- unary math

--- Max error in float32 ulps of each function against C's libm in double rounded once to
-- float32 (double formulas for tanh, expm1, log1p, which Lua's math lacks), over the whole
-- float32 range: edges, denormals, overflow and underflow thresholds, huge arguments.
-- spec/api/tensor_transcendental_accuracy_spec.lua asserts them on the default device (CPU) and on
-- EMU; the comment on each function says where its error comes from. Measured maxima (the
-- spec's sweeps plus 1M random inputs each) equal the bounds on one device or both. In float64
-- the same forms (float64 constants and polynomials) measure within 2 double ulps, gelu aside
-- (its z error again: ~600 double ulps at x = -19). Above 2:
-- silu (the product with x rounds once more than sigmoid), softplus (log1p's roundings), gelu
-- (its argument z is rounded in float32, an error that exp multiplies by |2z|, up to ~90).
M.ULP_BOUNDS = {
  exp = 1, exp2 = 1, log = 1, log2 = 1, sqrt = 0, sin = 1, cos = 1, tan = 2, tanh = 1, sigmoid = 2, silu = 3,
  softplus = 3, elu = 1, gelu = 256,
  logsumexp = 2, -- tcl.api.reduce
}

--- x cast to the float dtype math functions compute in (float32 for int and bool tensors).
local function float_arg(fn, x)
  tensor_arg(fn, x)
  return nodes.cast(x, rules.float_of(x.uop.dtype))
end

local function unary(op, x) return nodes.alu(op, x.uop.dtype, { x }) end

-- fn(x) for a float tensor x; for floats narrower than float32 (float16, bfloat16, fp8) computed
-- in float32 and rounded once at the end: their own precision would lose what the forms below
-- gain (the exponent of exp, tanh's polynomial).
local function in_float32(fn, x)
  local dt = x.uop.dtype
  if dt.itemsize < 4 then return nodes.cast(fn(nodes.cast(x, dtypes.float32)), dt) end
  return fn(x)
end

--- -x; for bool tensors it is logical not (as in tinygrad).
function M.neg(x)
  tensor_arg("neg", x)
  if x.uop.dtype.is_bool then return M.logical_not(x) end
  return unary("NEG", x)
end

--- 2^x (EXP2). Max error 1 ulp (ULP_BOUNDS.exp2): correctly rounded on EMU (C's exp2 in
-- double), the polynomial form of tcl.patterns.transcendental on CPU.
function M.exp2(x) return unary("EXP2", float_arg("exp2", x)) end
--- log2 x (LOG2). Max error 1 ulp (ULP_BOUNDS.log2), as exp2.
function M.log2(x) return unary("LOG2", float_arg("log2", x)) end

--- e^x (EXP, decomposed by tcl.patterns.transcendental: a Cody-Waite range reduction and 2^k
-- from bits). Max error 1 ulp over the float32 range on CPU and EMU (ULP_BOUNDS.exp; by the
-- error terms, exp2's rounding, r's and r log2 e's, below 2); overflows to inf and underflows
-- to 0 where C's exp does. float16, bfloat16 and the fp8 formats compute in float32 and round
-- once at the end; float64 computes in float64 (1 double ulp measured).
function M.exp(x)
  x = float_arg("exp", x)
  if x.uop.dtype.itemsize < 4 then return in_float32(M.exp, x) end
  return unary("EXP", x)
end
--- e^x as exp2(x log2 e): three graph ops instead of exp's range reduction, with an error of
-- about |x| 2^-24 relative (the rounding of the product, which exp2 scales by |x|). For the
-- callers whose own error bound is of that size: softmax (x - max rounded first costs the
-- same), where a cheap exponential lets the weights stay fused into attention's matmul.
function M._exp_base2(x)
  return unary("EXP2", x:mul(LOG2_E))
end
--- log x = log2(x) ln 2. Max error 1 ulp (ULP_BOUNDS.log): LOG2's, the product's rounding.
function M.log(x) return unary("LOG2", float_arg("log", x)):mul(LN_2) end
--- sqrt x (SQRT): correctly rounded (ULP_BOUNDS.sqrt = 0).
function M.sqrt(x) return unary("SQRT", float_arg("sqrt", x)) end
function M.rsqrt(x) return unary("RECIPROCAL", unary("SQRT", float_arg("rsqrt", x))) end
function M.reciprocal(x) return unary("RECIPROCAL", float_arg("reciprocal", x)) end
--- sin x (SIN). Max error 1 ulp (ULP_BOUNDS.sin) for every float32, huge arguments included.
function M.sin(x) return unary("SIN", float_arg("sin", x)) end
--- cos x (COS). Max error 1 ulp (ULP_BOUNDS.cos), as sin.
function M.cos(x) return unary("COS", float_arg("cos", x)) end

--- tan x = sin x / cos x. Max error 2 ulp (ULP_BOUNDS.tan): each quotient's error plus the
-- division's; both share one argument reduction on CPU (the same nodes).
function M.tan(x)
  x = float_arg("tan", x)
  return M.sin(x):div(M.cos(x))
end

function M.square(x)
  tensor_arg("square", x)
  return x:mul(x)
end

--- |x|; -0.0 gives +0.0.
function M.abs(x)
  tensor_arg("abs", x)
  local dt = x.uop.dtype
  if dt.is_bool or dt.is_unsigned then return x end
  if dt.is_int then return M.where(x:lt(0), unary("NEG", x), x) end
  -- its own derivative, sign(x) (0 at 0, as PyTorch's): the graph's would be -1 there
  return mark(M.where(x:le(0), like(x, 0):sub(x), x), "abs", { x })
end

--- -1, 0 or 1 in x's dtype (NaN stays NaN).
function M.sign(x)
  tensor_arg("sign", x)
  local dt = x.uop.dtype
  if dt.is_bool then return x end
  local s = M.where(x:lt(0), like(x, -1), M.where(x:gt(0), like(x, 1), like(x, 0)))
  if dt.is_float then s = s:add(x:mul(0)) end -- NaN * 0 is NaN: keeps NaN
  return s
end

function M.trunc(x)
  tensor_arg("trunc", x)
  if not x.uop.dtype.is_float then return x end
  return unary("TRUNC", x)
end

function M.floor(x)
  tensor_arg("floor", x)
  if not x.uop.dtype.is_float then return x end
  local t = unary("TRUNC", x)
  return M.where(x:lt(t), t:sub(1), t)
end

function M.ceil(x)
  tensor_arg("ceil", x)
  if not x.uop.dtype.is_float then return x end
  local t = unary("TRUNC", x)
  return M.where(x:gt(t), t:add(1), t)
end

--- Rounds half to even, like numpy, torch and tinygrad. Computed from the exact fraction
--  x - trunc(x), so large values and values just below .5 round correctly.
function M.round(x)
  tensor_arg("round", x)
  if not x.uop.dtype.is_float then return x end
  local t = unary("TRUNC", x)
  local fraction = M.abs(x:sub(t))
  local odd = t:sub(unary("TRUNC", t:mul(0.5)):mul(2)):ne(0)
  local away = fraction:gt(0.5):logical_or(fraction:eq(0.5):logical_and(odd))
  return M.where(away, t:add(M.sign(x)), t)
end

-- ---------------------------------------------------------------------------------------
-- activations

function M.relu(x)
  tensor_arg("relu", x)
  -- its own derivative, 0 at 0 (PyTorch's): the maximum's would share the gradient there
  return mark(M.maximum(x, 0), "relu", { x })
end

--- 1 / (1 + e^-x) (SIGMOID, decomposed by tcl.patterns.transcendental: e^-|x| as exp's two
-- factors, so that nothing overflows and denormal results round once). Max error 2 ulp over the
-- float32 range (ULP_BOUNDS.sigmoid): e^-|x|'s error, the rounding of 1 + e and the division's.
-- Denormal results (x < -87.3), 0 before, are within the bound too.
function M.sigmoid(x)
  x = float_arg("sigmoid", x)
  if x.uop.dtype.itemsize < 4 then return in_float32(M.sigmoid, x) end
  return unary("SIGMOID", x)
end

--- tanh x (TANH, decomposed by tcl.patterns.transcendental): a polynomial for |x| < 1, where
-- 1 - e^-2|x| would cancel, 1 - 2 / (1 + e^2|x|) beyond. Max error 1 ulp (ULP_BOUNDS.tanh; 4
-- with the former Taylor series below 0.05).
function M.tanh(x)
  x = float_arg("tanh", x)
  if x.uop.dtype.itemsize < 4 then return in_float32(M.tanh, x) end
  return unary("TANH", x)
end

--- GELU with the tanh approximation (tinygrad's): 0.5 x (1 + tanh z) with z = sqrt(2/pi) (x + 0.044715 x^3),
-- computed as x sigmoid(2z), the same function without 1 + tanh z's cancellation for x < 0
-- (which left no correct digit below x = -5). Max error 256 ulp (ULP_BOUNDS.gelu; 219 measured):
-- z is rounded in float32 (~2.5 ulp), an error that e^2z multiplies by |2z|, up to ~90 where
-- the result is still normal; 2 ulp for x >= 0, 4 on [-1, 0], 16 on [-3, -1].
function M.gelu(x)
  x = float_arg("gelu", x)
  if x.uop.dtype.itemsize < 4 then return in_float32(M.gelu, x) end
  return x:mul(M.sigmoid(x:mul(2 * SQRT_2_OVER_PI):mul(x:mul(x):mul(0.044715):add(1))))
end

--- x sigmoid(x) (SILU, decomposed by tcl.patterns.transcendental with x applied before
-- sigmoid's last factor, so that denormal results round once; silu(-inf) = -0, the limit).
-- Max error 3 ulp over the float32 range (ULP_BOUNDS.silu): sigmoid's and the product's.
function M.silu(x)
  x = float_arg("silu", x)
  if x.uop.dtype.itemsize < 4 then return in_float32(M.silu, x) end
  return unary("SILU", x)
end
M.swish = M.silu

--- log(1 + exp(beta x)) / beta = SOFTPLUS(beta x) / beta, where SOFTPLUS(y) = max(y, 0) +
-- log1p(e^-|y|) does not overflow for large y and is e^y, not 0, for y < -17 (decomposed by
-- tcl.patterns.transcendental). Max error 3 ulp over the float32 range with beta = 1
-- (ULP_BOUNDS.softplus): e's error, log's, and the roundings of the product and the ratio.
function M.softplus(x, beta)
  x = float_arg("softplus", x)
  beta = beta == nil and 1 or check.number("softplus", "beta", beta)
  if x.uop.dtype.itemsize < 4 then
    return in_float32(function(y) return M.softplus(y, beta) end, x)
  end
  if beta == 1 then return unary("SOFTPLUS", x) end -- x * 1 and y / 1 are exact: the same values
  return unary("SOFTPLUS", x:mul(beta)):div(beta)
end

function M.leaky_relu(x, slope)
  tensor_arg("leaky_relu", x)
  slope = slope == nil and 0.01 or check.number("leaky_relu", "slope", slope)
  -- the slope's side includes 0, so the gradient there is the slope (PyTorch's)
  return M.where(x:gt(0), x, x:mul(slope))
end

--- x for x > 0, alpha (e^x - 1) below: ELU(x) (decomposed by tcl.patterns.transcendental:
-- e^x - 1 as a polynomial on (-1, 0], where exp(x) - 1 would cancel, exp(x) - 1 below), times
-- alpha where x <= 0. Max error 1 ulp over the float32 range with alpha = 1 (ULP_BOUNDS.elu).
function M.elu(x, alpha)
  x = float_arg("elu", x)
  alpha = alpha == nil and 1.0 or check.number("elu", "alpha", alpha)
  if x.uop.dtype.itemsize < 4 then
    return in_float32(function(y) return M.elu(y, alpha) end, x)
  end
  local elu = unary("ELU", x)
  if alpha == 1 then return elu end
  return M.where(x:gt(0), x, elu:mul(alpha))
end

return M
