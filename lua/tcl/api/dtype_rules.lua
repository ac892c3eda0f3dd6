-- tcl.api.dtype_rules — which dtype a result has: dtype arguments, the dtype of Lua data,
-- promotion of operands (tinygrad's rules), accumulation dtypes. Layer: lua/tcl/api.
--
-- The promotion lattice itself is the core's (tcl.promote, src/core/dtype.c); this file
-- only adds the rules about Lua numbers, which are weak: next to a tensor a number takes
-- the tensor's dtype when it fits its kind, so `int8_tensor + 1` stays int8 and
-- `float16_tensor * 2.5` stays float16, but `int_tensor + 0.5` becomes float32.
local core = require "tcl.core"
local check = require "tcl.api.check"

local dtypes = core.dtypes
local M = {}

M.default_float = dtypes.float32
M.default_int = dtypes.int32

--- A dtype object from a dtype object or its name (aliases too); fails naming fn.
function M.dtype(fn, v)
  if type(v) ~= "string" and type(v) ~= "userdata" then
    check.fail(fn, "dtype must be a dtype or a dtype name, got %s", check.type_name(v))
  end
  local ok, dt = pcall(core.dtype, v)
  if not ok then
    if type(v) == "string" then check.fail(fn, "unknown dtype '%s'", check.quote(v)) end
    check.fail(fn, "dtype must be a dtype or a dtype name, got %s", check.type_name(v))
  end
  if dt.name == "void" or dt.name == "index" then check.fail(fn, "%s is not a tensor dtype", dt.name) end
  return dt
end

--- The dtype of a lone Lua value: boolean -> bool, integer -> int32 (int64 when it does not
--  fit), float -> float32.
function M.of_value(v)
  if type(v) == "boolean" then return dtypes.bool end
  if math.type(v) == "integer" then
    if v < dtypes.int32.min or v > dtypes.int32.max then return dtypes.int64 end
    return dtypes.int32
  end
  return M.default_float
end

--- The dtype of a list of Lua values: the widest kind wins (bool < int < float).
function M.of_values(values)
  local kind = nil -- nil (empty), "bool", "int", "float"
  local wide = false
  for i = 1, #values do
    local v = values[i]
    if type(v) == "boolean" then
      kind = kind or "bool"
    elseif math.type(v) == "integer" then
      if kind == nil or kind == "bool" then kind = "int" end
      if v < dtypes.int32.min or v > dtypes.int32.max then wide = true end
    else
      kind = "float"
    end
  end
  if kind == "bool" then return dtypes.bool end
  if kind == "int" then return wide and dtypes.int64 or dtypes.int32 end
  return M.default_float
end

--- The dtype a Lua number takes next to a tensor of dtype `dt` (before promotion).
function M.of_scalar_beside(dt, v)
  if type(v) == "boolean" then return dt end
  if math.type(v) == "integer" then
    if dt.is_float or dt.is_int then return dt end
    return M.of_value(v)
  end
  if dt.is_float then return dt end
  return M.default_float
end

-- A number as the messages show it: integers as they are, floats with %.17g (1000.0, 2.5).
local function number_str(v)
  if math.type(v) == "integer" then return tostring(v) end
  if v ~= v then return "nan" end
  return math.type(v) == "float" and v == math.floor(v) and math.abs(v) < 2 ^ 63 and string.format("%.1f", v)
    or string.format("%.17g", v)
end

--- value (a Lua number or boolean) as the fill of a tensor of dtype dt, as PyTorch takes a
--  fill (full, pad, masked_fill, where, assign): a bool tensor takes any value as its truth
--  (nonzero is true); an integer tensor takes a number of its range (a float truncates toward
--  zero: 2.5 is 2), an unsigned one also negatives down to -max, which wrap (-1 is uint8 255,
--  PyTorch's rule); a float tensor any number but a finite one beyond its largest. Anything
--  else fails naming fn, instead of wrapping (1000 into int8 was -24). Returns the value of
--  dt's kind: a boolean, an integer or a float.
function M.fill_value(fn, value, dt)
  if dt.is_bool then
    if type(value) == "boolean" then return value end
    return value ~= 0
  end
  if type(value) == "boolean" then value = value and 1 or 0 end
  if dt.is_int then
    local lowest = dt.is_unsigned and -dt.max or dt.min
    if value ~= value or value < lowest or value > dt.max then
      check.fail(fn, "value %s does not fit %s (%s to %s)", number_str(value), dt.name, number_str(lowest),
        number_str(dt.max))
    end
    return math.tointeger(value) or math.tointeger(value < 0 and math.ceil(value) or math.floor(value)) or value
  end
  if math.abs(value) > dt.max and math.abs(value) ~= math.huge then
    check.fail(fn, "value %s does not fit %s (largest finite %s)", number_str(value), dt.name, number_str(dt.max))
  end
  return value + 0.0
end

--- The common dtype of two dtypes (tinygrad's lattice).
function M.promote(fn, a, b)
  if rawequal(a, b) then return a end
  local ok, dt = pcall(core.promote, a, b)
  if not ok then check.fail(fn, "no common dtype for %s and %s", a.name, b.name) end
  return dt
end

--- The float dtype an op on `dt` computes in: dt itself if float, else float32.
function M.float_of(dt)
  if dt.is_float then return dt end
  return M.default_float
end

--- The dtype an integer sum or product runs in and returns, as PyTorch's: int64 for bool and
--  every integer dtype (an int32 sum of 10^10 ones needs it), but uint64, which stays.
function M.integer_accumulator(dt)
  if dt.name == "uint64" then return dt end
  return dtypes.int64
end

--- The dtype a matmul or convolution of dtype dt accumulates in: integers in their own width,
--  at least 32 bits (a matmul of int32 is int32, as PyTorch's), floats in at least float32.
function M.product_accumulator(dt)
  if dt.is_bool then return dtypes.int32 end
  if dt.is_unsigned then return core.promote(dt, dtypes.uint32) end
  if dt.is_int then return core.promote(dt, dtypes.int32) end
  return core.promote(dt, dtypes.float32)
end

--- The dtype sum accumulates in: bool and integers in int64 (integer_accumulator), floats in
--  at least float32.
function M.sum_accumulator(dt)
  if dt.is_bool or dt.is_int then return M.integer_accumulator(dt) end
  return core.promote(dt, dtypes.float32)
end

--- The dtype a sum returns: the accumulator's, except that low-precision floats (float16,
--  bfloat16, fp8) go back to their own dtype, as in tinygrad.
function M.sum_result(dt)
  if dt.is_float and dt.itemsize < 4 then return dt end
  return M.sum_accumulator(dt)
end

return M
