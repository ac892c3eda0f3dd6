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

--- The dtype sum accumulates in: ints and bool widen to at least int32 (uint32 for unsigned),
--  floats to at least float32.
function M.sum_accumulator(dt)
  if dt.is_bool then return dtypes.int32 end
  if dt.is_unsigned then return core.promote(dt, dtypes.uint32) end
  if dt.is_int then return core.promote(dt, dtypes.int32) end
  return core.promote(dt, dtypes.float32)
end

--- The dtype a sum returns: the accumulator's, except that low-precision floats (float16,
--  bfloat16, fp8) go back to their own dtype, as in tinygrad.
function M.sum_result(dt)
  if dt.is_float and dt.itemsize < 4 then return dt end
  return M.sum_accumulator(dt)
end

return M
