-- tcl.api.elementwise — elementwise Tensor methods: arithmetic with numpy broadcasting and
-- tinygrad's dtype promotion, comparisons, math functions, activations, where, casts.
-- Layer: lua/tcl/api.
--
-- Operands are tensors or Lua numbers/booleans, on either side. Broadcasting is made explicit
-- in the graph (RESHAPE + EXPAND), numbers become CONST nodes broadcast the same way, and
-- every op is decomposed into the ALU ops of ENCODINGS.md: exp = EXP2(x * log2 e),
-- log = LOG2(x) * ln 2, tan = SIN(x) / COS(x), and so on.
local core = require "tcl.core"
local class = require "tcl.api.class"
local check = require "tcl.api.check"
local nodes = require "tcl.api.nodes"
local rules = require "tcl.api.dtype_rules"

local is_tensor, fail = class.is_tensor, check.fail
local dtypes = core.dtypes
local M = {}

local LOG2_E = 1 / math.log(2)
local LN_2 = math.log(2)
local SQRT_2_OVER_PI = math.sqrt(2 / math.pi)

--- The numpy broadcast of several shapes; fails naming fn and all the shapes.
local function broadcast_shape(fn, shapes)
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
  for i = 1, count do
    local v = args[i]
    if is_tensor(v) then
      tensor_dtype = tensor_dtype and rules.promote(fn, tensor_dtype, v.uop.dtype) or v.uop.dtype
      if device and v.device ~= device then
        fail(fn, "tensors are on different devices, %s and %s", device, v.device)
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
      out[i] = nodes.const(v, dtype, shape, device)
    end
  end
  return out, dtype
end

local tensor_arg = check.tensor

-- A scalar of x's shape and dtype (for formulas).
local function like(x, value)
  return nodes.const(value, x.uop.dtype, x._shape, x.device)
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
  operands("clamp", all)
  if lo ~= nil then x = M.maximum(x, lo) end
  if hi ~= nil then x = M.minimum(x, hi) end
  return x
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
  local c = nodes.broadcast_to(as_bool(cond), shape)
  local x, y = nodes.broadcast_to(t[1], shape), nodes.broadcast_to(t[2], shape)
  return nodes.alu("WHERE", dt, { c, x, y })
end

--- where(cond, a, b): a where cond is true, else b. Also cond:where(a, b).
function M.where(cond, a, b) return (where_as("where", cond, a, b)) end

--- Value where mask is true, x elsewhere.
function M.masked_fill(x, mask, value)
  tensor_arg("masked_fill", x)
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
  return class.wrap(core.uop("BITCAST", dt, { x.uop }), nodes.copy_shape(x), x.device)
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

--- x cast to the float dtype math functions compute in (float32 for int and bool tensors).
local function float_arg(fn, x)
  tensor_arg(fn, x)
  return nodes.cast(x, rules.float_of(x.uop.dtype))
end

local function unary(op, x) return nodes.alu(op, x.uop.dtype, { x }) end

--- -x; for bool tensors it is logical not (as in tinygrad).
function M.neg(x)
  tensor_arg("neg", x)
  if x.uop.dtype.is_bool then return M.logical_not(x) end
  return unary("NEG", x)
end

function M.exp2(x) return unary("EXP2", float_arg("exp2", x)) end
function M.log2(x) return unary("LOG2", float_arg("log2", x)) end
-- exp x = 2^(x log2 e). The product's rounding error is an error in the exponent, which grows
-- with |x|: for floats narrower than float32 it is made in float32, and rounded once at the end
-- (in bfloat16 it would be 7 % off at x = 17).
function M.exp(x)
  x = float_arg("exp", x)
  local dt = x.uop.dtype
  if dt.itemsize >= 4 then return unary("EXP2", x:mul(LOG2_E)) end
  return nodes.cast(unary("EXP2", nodes.cast(x, dtypes.float32):mul(LOG2_E)), dt)
end
function M.log(x) return unary("LOG2", float_arg("log", x)):mul(LN_2) end
function M.sqrt(x) return unary("SQRT", float_arg("sqrt", x)) end
function M.rsqrt(x) return unary("RECIPROCAL", unary("SQRT", float_arg("rsqrt", x))) end
function M.reciprocal(x) return unary("RECIPROCAL", float_arg("reciprocal", x)) end
function M.sin(x) return unary("SIN", float_arg("sin", x)) end
function M.cos(x) return unary("COS", float_arg("cos", x)) end

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
  return M.where(x:le(0), like(x, 0):sub(x), x)
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
  return M.maximum(x, 0)
end

function M.sigmoid(x)
  x = float_arg("sigmoid", x)
  return M.exp(x:neg()):add(1):reciprocal()
end

-- tanh x = sign(x) (1 - e) / (1 + e) with e = exp(-2|x|), which never overflows; near 0,
-- where 1 - e cancels, its Taylor series to x^7 (exact to float32 precision for |x| < 0.05).
function M.tanh(x)
  x = float_arg("tanh", x)
  local e = M.exp(M.abs(x):mul(-2))
  local ratio = e:neg():add(1):div(e:add(1))
  local far = M.where(x:lt(0), ratio:neg(), ratio)
  local x2 = x:mul(x)
  local near = x:mul(x2:mul(x2:mul(x2:mul(-17 / 315):add(2 / 15)):add(-1 / 3)):add(1))
  return M.where(M.abs(x):lt(0.05), near, far)
end

--- GELU with the tanh approximation (tinygrad's).
function M.gelu(x)
  x = float_arg("gelu", x)
  local inner = x:mul(SQRT_2_OVER_PI):mul(x:mul(x):mul(0.044715):add(1))
  return x:mul(0.5):mul(M.tanh(inner):add(1))
end

function M.silu(x)
  x = float_arg("silu", x)
  return x:mul(M.sigmoid(x))
end
M.swish = M.silu

--- log(1 + exp(beta x)) / beta, computed without overflow for large x.
function M.softplus(x, beta)
  x = float_arg("softplus", x)
  beta = beta == nil and 1 or check.number("softplus", "beta", beta)
  local bx = x:mul(beta)
  return M.maximum(bx, 0):add(M.exp(M.abs(bx):neg()):add(1):log()):div(beta)
end

function M.leaky_relu(x, slope)
  tensor_arg("leaky_relu", x)
  slope = slope == nil and 0.01 or check.number("leaky_relu", "slope", slope)
  return M.where(x:lt(0), x:mul(slope), x)
end

function M.elu(x, alpha)
  x = float_arg("elu", x)
  alpha = alpha == nil and 1.0 or check.number("elu", "alpha", alpha)
  return M.where(x:gt(0), x, M.exp(x):sub(1):mul(alpha))
end

return M
