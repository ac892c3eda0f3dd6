-- spec/support/reference.lua — a naive, obviously-correct reference for the Tensor API specs.
--
-- Tensors here are plain Lua tables { shape = {...}, data = {...}, dtype = "float32" }: data is
-- the row-major flat list of element values (Lua floats for float dtypes, Lua integers for
-- integer dtypes, booleans for bool). Every operation is written straight from its definition
-- with explicit loops over multi-indices (1-based, like the API), computing in double precision
-- or exact 64-bit integers and then rounding the result into its dtype (float32 through
-- string.pack, float16/bfloat16 by a small round-to-nearest-even encoder, integers by two's
-- complement wraparound). Nothing here uses tcl: it is the independent side of the comparison.
--
-- Also here: a seeded PRNG with random shape/data generators, the tinygrad promotion lattice,
-- view builders that make non-contiguous inputs, and the comparison of a tcl tensor with a
-- reference tensor under per-dtype tolerances.
local R = {}

local INF, NAN = math.huge, 0.0 / 0.0
R.INF, R.NAN = INF, NAN

local function is_nan(x) return x ~= x end
R.is_nan = is_nan

-- ---------------------------------------------------------------------------------------------
-- dtypes: facts, promotion, value conversion

local DTYPES = {
  bool = { kind = "bool", bits = 8 },
  int8 = { kind = "int", bits = 8, signed = true },
  uint8 = { kind = "int", bits = 8, signed = false },
  int16 = { kind = "int", bits = 16, signed = true },
  uint16 = { kind = "int", bits = 16, signed = false },
  int32 = { kind = "int", bits = 32, signed = true },
  uint32 = { kind = "int", bits = 32, signed = false },
  int64 = { kind = "int", bits = 64, signed = true },
  float16 = { kind = "float", mantissa = 10, min_exp = -14, max_exp = 15 },
  bfloat16 = { kind = "float", mantissa = 7, min_exp = -126, max_exp = 127 },
  float32 = { kind = "float", single = true },
  float64 = { kind = "float" },
}
R.DTYPES = DTYPES

function R.is_float(dtype) return DTYPES[dtype].kind == "float" end
function R.is_int(dtype) return DTYPES[dtype].kind == "int" end
function R.is_bool(dtype) return dtype == "bool" end

-- tinygrad's promotion lattice: each dtype's direct successors; the least upper bound of two
-- dtypes is the first dtype in PRIORITY that both reach.
local SUCCESSORS = {
  bool = { "int8", "uint8" }, int8 = { "int16" }, int16 = { "int32" }, int32 = { "int64" },
  int64 = { "float16", "bfloat16" }, uint8 = { "int16", "uint16" }, uint16 = { "int32", "uint32" },
  uint32 = { "int64", "uint64" }, uint64 = { "float16", "bfloat16" },
  float16 = { "float32" }, bfloat16 = { "float32" }, float32 = { "float64" }, float64 = {},
}
local PRIORITY = { "bool", "int8", "uint8", "int16", "uint16", "int32", "uint32", "int64", "uint64",
  "float16", "bfloat16", "float32", "float64" }

local function reachable(name)
  local seen, frontier = { [name] = true }, { name }
  while #frontier > 0 do
    for _, next_name in ipairs(SUCCESSORS[table.remove(frontier)]) do
      if not seen[next_name] then
        seen[next_name] = true
        frontier[#frontier + 1] = next_name
      end
    end
  end
  return seen
end

function R.promote(a, b)
  local above_a, above_b = reachable(a), reachable(b)
  for _, name in ipairs(PRIORITY) do
    if above_a[name] and above_b[name] then return name end
  end
  error("no common dtype for " .. a .. " and " .. b)
end

-- The float dtype an op that needs floats computes in (ints and bool go to float32).
function R.float_of(dtype)
  if R.is_float(dtype) then return dtype end
  return "float32"
end

-- PyTorch's dtype of an integer sum, cumsum and prod: int64 for bool and every integer dtype
-- but uint64 (issue 33); float16/bfloat16 accumulate in float32 but come back as themselves.
function R.sum_dtype(dtype)
  if R.is_float(dtype) then return dtype end
  if dtype == "uint64" then return dtype end
  return "int64"
end

-- Rounds x to the nearest value with `mantissa` fraction bits and exponents >= min_exp
-- (subnormals below), ties to even; beyond the largest finite value it becomes infinite.
local function round_binary_float(x, mantissa, min_exp, max_exp)
  if is_nan(x) or x == 0 or x == INF or x == -INF then return x end
  local sign = x < 0 and -1.0 or 1.0
  local magnitude = math.abs(x)
  local exponent = math.floor(math.log(magnitude, 2))
  while 2.0 ^ exponent > magnitude do exponent = exponent - 1 end
  while 2.0 ^ (exponent + 1) <= magnitude do exponent = exponent + 1 end
  if exponent < min_exp then exponent = min_exp end
  local quantum = 2.0 ^ (exponent - mantissa)
  local steps = magnitude / quantum
  local whole = math.floor(steps)
  local fraction = steps - whole
  if fraction > 0.5 or (fraction == 0.5 and whole % 2 == 1) then whole = whole + 1 end
  local rounded = whole * quantum
  local largest = (2.0 - 2.0 ^ -mantissa) * 2.0 ^ max_exp
  if rounded > largest then return sign * INF end
  return sign * rounded
end

function R.round_float32(x) return (string.unpack("f", string.pack("f", x))) end
function R.round_float16(x) return round_binary_float(x, 10, -14, 15) end
function R.round_bfloat16(x) return round_binary_float(x, 7, -126, 127) end

local function wrap_integer(v, info)
  if info.bits == 64 then return v end
  local modulus = 1 << info.bits
  v = v & (modulus - 1)
  if info.signed and v >= (modulus >> 1) then v = v - modulus end
  return v
end

local function truncate_toward_zero(x)
  if x >= 0 then return math.floor(x) end
  return math.ceil(x)
end

-- Converts a Lua value (number or boolean) into a value of `dtype`, with cast semantics:
-- floats round to nearest even, float -> int truncates toward zero then wraps, bool is x ~= 0.
function R.convert(v, dtype)
  local info = DTYPES[dtype]
  assert(info, "reference: unknown dtype " .. tostring(dtype))
  if info.kind == "bool" then
    if type(v) == "boolean" then return v end
    return v ~= 0
  end
  if type(v) == "boolean" then v = v and 1 or 0 end
  if info.kind == "int" then
    if math.type(v) == "float" then
      assert(v == v and v > -2.0 ^ 63 and v < 2.0 ^ 63, "reference: float out of integer range")
      v = math.tointeger(truncate_toward_zero(v))
    end
    return wrap_integer(v, info)
  end
  v = v + 0.0
  if info.single then return R.round_float32(v) end
  if info.mantissa then return round_binary_float(v, info.mantissa, info.min_exp, info.max_exp) end
  return v
end

-- The dtype tcl gives a bare Lua value (tinygrad's from_py with Lua's number subtypes).
function R.dtype_of_value(v)
  if type(v) == "boolean" then return "bool" end
  if math.type(v) == "integer" then return "int32" end
  return "float32"
end

-- The dtype a Lua number takes next to a tensor of `dtype` (tinygrad's _broadcasted): it
-- adopts the tensor's dtype when the tensor is float, or when both are integers.
function R.dtype_beside(dtype, v)
  if R.is_float(dtype) then return dtype end
  if R.is_int(dtype) and math.type(v) == "integer" then return dtype end
  return R.dtype_of_value(v)
end

-- ---------------------------------------------------------------------------------------------
-- tensors: shape arithmetic, indexing, nested tables

function R.numel(shape)
  local n = 1
  for _, size in ipairs(shape) do n = n * size end
  return n
end

local function copy(list)
  local out = {}
  for i, v in ipairs(list) do out[i] = v end
  return out
end
R.copy = copy

function R.tensor(shape, data, dtype)
  assert(#data == R.numel(shape), "reference: data does not fill the shape")
  return { shape = copy(shape), data = data, dtype = dtype }
end

local function strides_of(shape)
  local strides, step = {}, 1
  for d = #shape, 1, -1 do
    strides[d] = step
    step = step * shape[d]
  end
  return strides
end

-- Flat position (1-based) of a 1-based multi-index.
local function flat_position(shape, index)
  local position, step = 1, 1
  for d = #shape, 1, -1 do
    position = position + (index[d] - 1) * step
    step = step * shape[d]
  end
  return position
end

function R.get(t, index) return t.data[flat_position(t.shape, index)] end

-- Calls visit(index) for every multi-index of shape in row-major order. The index table is
-- reused between calls: copy it to keep it.
function R.each_index(shape, visit)
  local ndim = #shape
  if R.numel(shape) == 0 then return end
  local index = {}
  for d = 1, ndim do index[d] = 1 end
  while true do
    visit(index)
    local d = ndim
    while d >= 1 do
      if index[d] < shape[d] then
        index[d] = index[d] + 1
        break
      end
      index[d] = 1
      d = d - 1
    end
    if d < 1 then return end
  end
end

-- A tensor of shape whose element at each index is value_at(index), converted to dtype.
function R.build(shape, dtype, value_at)
  local data = {}
  R.each_index(shape, function(index) data[#data + 1] = R.convert(value_at(index), dtype) end)
  return R.tensor(shape, data, dtype)
end

function R.to_nested(t)
  local shape = t.shape
  if #shape == 0 then return t.data[1] end
  local position = 0
  local function level(d)
    local out = {}
    for i = 1, shape[d] do
      if d == #shape then
        position = position + 1
        out[i] = t.data[position]
      else
        out[i] = level(d + 1)
      end
    end
    return out
  end
  return level(1)
end

function R.from_nested(nested, dtype)
  local shape, data = {}, {}
  local probe = nested
  while type(probe) == "table" do
    shape[#shape + 1] = #probe
    probe = probe[1]
  end
  local function walk(v, d)
    if d > #shape then
      data[#data + 1] = R.convert(v, dtype)
    else
      assert(type(v) == "table" and #v == shape[d], "reference: ragged nested table")
      for i = 1, #v do walk(v[i], d + 1) end
    end
  end
  walk(nested, 1)
  return R.tensor(shape, data, dtype)
end

function R.scalar(v, dtype) return R.tensor({}, { R.convert(v, dtype) }, dtype) end

function R.shape_string(shape)
  if #shape == 1 then return "(" .. shape[1] .. ",)" end
  local parts = {}
  for i, size in ipairs(shape) do parts[i] = tostring(size) end
  return "(" .. table.concat(parts, ", ") .. ")"
end

-- A 1-based positive dim from an API dim (negative counts from the end).
function R.dim(d, ndim)
  if d < 0 then return ndim + d + 1 end
  return d
end

-- ---------------------------------------------------------------------------------------------
-- elementwise: broadcasting and the scalar semantics of every op

function R.broadcast_shape(a, b)
  local ndim = math.max(#a, #b)
  local out = {}
  for i = 1, ndim do
    local sa = a[#a - ndim + i] or 1
    local sb = b[#b - ndim + i] or 1
    if sa == sb or sb == 1 then
      out[i] = sa
    elseif sa == 1 then
      out[i] = sb
    else
      error("reference: shapes do not broadcast")
    end
  end
  return out
end

-- Reads t at an index of a (larger or equal) broadcast shape.
local function broadcast_get(t, index)
  local shape = t.shape
  local offset = #index - #shape
  local own = {}
  for d = 1, #shape do
    own[d] = shape[d] == 1 and 1 or index[d + offset]
  end
  return R.get(t, own)
end

-- Applies fn elementwise over broadcast tensors: fn(values...) -> value of out_dtype.
function R.map(out_dtype, fn, ...)
  local inputs = { ... }
  local shape = {}
  for _, t in ipairs(inputs) do shape = R.broadcast_shape(shape, t.shape) end
  return R.build(shape, out_dtype, function(index)
    local values = {}
    for i, t in ipairs(inputs) do values[i] = broadcast_get(t, index) end
    return fn(table.unpack(values, 1, #inputs))
  end)
end

-- Turns a Lua number/boolean operand into a 0-d tensor with the dtype it takes next to
-- `other` (a tensor), and converts both to their promoted dtype.
local function operands(a, b)
  if type(a) ~= "table" then a = R.scalar(a, R.dtype_beside(b.dtype, a)) end
  if type(b) ~= "table" then b = R.scalar(b, R.dtype_beside(a.dtype, b)) end
  return a, b, R.promote(a.dtype, b.dtype)
end

local function as_dtype(t, dtype)
  if t.dtype == dtype then return t end
  return R.map(dtype, function(v) return v end, t)
end
R.cast = as_dtype

local function round_half_even(x)
  if is_nan(x) or x == INF or x == -INF then return x end
  local whole = math.floor(x)
  local fraction = x - whole
  local result
  if fraction > 0.5 then
    result = whole + 1
  elseif fraction < 0.5 then
    result = whole
  else
    result = (whole % 2 == 0) and whole or whole + 1
  end
  return result + 0.0
end

local function truncate(x)
  if is_nan(x) or x == INF or x == -INF then return x end
  return truncate_toward_zero(x) + 0.0
end

local function sigmoid(x) return 1.0 / (1.0 + math.exp(-x)) end
local function tanh(x)
  if x > 20 then return 1.0 end
  if x < -20 then return -1.0 end
  if math.abs(x) < 1e-4 then return x - x ^ 3 / 3 end -- the series: exp loses digits here
  local e = math.exp(2 * x)
  return (e - 1) / (e + 1)
end

-- Float functions: computed in double on the (already rounded) inputs.
R.float_functions = {
  exp = math.exp,
  log = function(x) return math.log(x) end,
  exp2 = function(x) return 2.0 ^ x end,
  log2 = function(x) return math.log(x, 2) end,
  sqrt = math.sqrt,
  rsqrt = function(x) return 1.0 / math.sqrt(x) end,
  sin = math.sin,
  cos = math.cos,
  tan = math.tan,
  reciprocal = function(x) return 1.0 / x end,
  sigmoid = sigmoid,
  tanh = tanh,
  -- tinygrad's gelu: the tanh approximation.
  gelu = function(x) return 0.5 * x * (1 + tanh(math.sqrt(2 / math.pi) * (x + 0.044715 * x ^ 3))) end,
  silu = function(x) return x * sigmoid(x) end,
  softplus = function(x) return math.log(1 + math.exp(x)) end,
  elu = function(x) if x > 0 then return x end return math.exp(x) - 1 end,
}

-- Functions that keep the dtype (ints stay ints): given the value, return the value.
R.same_dtype_functions = {
  neg = function(x) return -x end,
  abs = function(x) return math.abs(x) end,
  sign = function(x)
    if is_nan(x) then return x end
    if x > 0 then return 1 elseif x < 0 then return -1 end
    return 0
  end,
  square = function(x) return x * x end,
  relu = function(x)
    if x > 0 or x ~= x then return x end -- NaN stays NaN, as in torch
    return math.type(x) == "integer" and 0 or 0.0
  end,
  floor = function(x) if math.type(x) == "integer" then return x end return math.floor(x) + 0.0 end,
  ceil = function(x) if math.type(x) == "integer" then return x end return math.ceil(x) + 0.0 end,
  trunc = function(x) if math.type(x) == "integer" then return x end return truncate(x) end,
  round = function(x) if math.type(x) == "integer" then return x end return round_half_even(x) end,
}

function R.unary(name, t)
  local float_fn = R.float_functions[name]
  if float_fn then
    local dtype = R.float_of(t.dtype)
    return R.map(dtype, float_fn, as_dtype(t, dtype))
  end
  local fn = assert(R.same_dtype_functions[name], "reference: unknown unary op " .. name)
  return R.map(t.dtype, fn, t)
end

function R.leaky_relu(t, slope)
  local dtype = R.float_of(t.dtype)
  return R.map(dtype, function(x) if x >= 0 then return x end return slope * x end, as_dtype(t, dtype))
end

-- Lua's %: floor modulo, the remainder has the sign of the divisor; for floats it is exact
-- (C's fmod, then moved into the divisor's sign).
local function floor_mod(a, b) return a % b end

local function integer_power(base, exponent, info)
  local result = 1
  for _ = 1, exponent do result = wrap_integer(result * base, info) end
  return result
end

local function compare_key(v)
  if type(v) == "boolean" then return v and 1 or 0 end
  return v
end

-- Binary ops: name -> { fn, result = "promoted" | "float" | "bool" }.
R.binary_ops = {
  add = { fn = function(a, b) return a + b end },
  sub = { fn = function(a, b) return a - b end },
  mul = { fn = function(a, b) return a * b end },
  div = { fn = function(a, b) return a / b end, result = "float" },
  mod = { fn = floor_mod },
  maximum = { fn = function(a, b)
    if is_nan(a) or is_nan(b) then return NAN end
    if compare_key(a) >= compare_key(b) then return a end
    return b
  end },
  minimum = { fn = function(a, b)
    if is_nan(a) or is_nan(b) then return NAN end
    if compare_key(a) <= compare_key(b) then return a end
    return b
  end },
  eq = { fn = function(a, b) return a == b end, result = "bool" },
  ne = { fn = function(a, b) return a ~= b end, result = "bool" },
  lt = { fn = function(a, b) return compare_key(a) < compare_key(b) end, result = "bool" },
  le = { fn = function(a, b) return compare_key(a) <= compare_key(b) end, result = "bool" },
  gt = { fn = function(a, b) return compare_key(a) > compare_key(b) end, result = "bool" },
  ge = { fn = function(a, b) return compare_key(a) >= compare_key(b) end, result = "bool" },
  logical_and = { fn = function(a, b) return a and b end },
  logical_or = { fn = function(a, b) return a or b end },
}

-- A binary op on two operands (reference tensors or Lua values, at least one a tensor).
function R.binary(name, a, b)
  if name == "pow" then return R.pow(a, b) end
  local op = assert(R.binary_ops[name], "reference: unknown binary op " .. name)
  local common
  a, b, common = operands(a, b)
  if op.result == "float" then common = R.float_of(common) end
  local out_dtype = op.result == "bool" and "bool" or common
  return R.map(out_dtype, op.fn, as_dtype(a, common), as_dtype(b, common))
end

function R.pow(a, b)
  local common
  a, b, common = operands(a, b)
  if R.is_int(common) then
    local info = DTYPES[common]
    return R.map(common, function(x, y)
      assert(y >= 0, "reference: negative integer exponent")
      return integer_power(x, y, info)
    end, as_dtype(a, common), as_dtype(b, common))
  end
  common = R.float_of(common)
  return R.map(common, function(x, y) return x ^ y end, as_dtype(a, common), as_dtype(b, common))
end

function R.logical_not(t) return R.map("bool", function(v) return not v end, as_dtype(t, "bool")) end

function R.where(cond, a, b)
  if type(a) ~= "table" and type(b) ~= "table" then
    a = R.scalar(a, R.dtype_of_value(a))
  end
  local common
  a, b, common = operands(a, b)
  return R.map(common, function(c, x, y) if c then return x end return y end,
    as_dtype(cond, "bool"), as_dtype(a, common), as_dtype(b, common))
end

function R.clamp(t, lo, hi)
  local out = t
  if lo ~= nil then out = R.binary("maximum", out, lo) end
  if hi ~= nil then out = R.binary("minimum", out, hi) end
  return out
end

-- ---------------------------------------------------------------------------------------------
-- reductions

-- dims: nil (all), a number or a list of API dims. Returns a set of 1-based dims.
function R.dim_set(dims, ndim)
  local set = {}
  if dims == nil then
    for d = 1, ndim do set[d] = true end
  elseif type(dims) == "number" then
    set[R.dim(dims, ndim)] = true
  else
    for _, d in ipairs(dims) do set[R.dim(d, ndim)] = true end
  end
  return set
end

-- Folds the values along the reduced dims: fold(values in row-major order) -> value.
function R.reduce(t, dims, keepdim, out_dtype, fold)
  local reduced = R.dim_set(dims, #t.shape)
  local kept_shape, final_shape = {}, {}
  for d, size in ipairs(t.shape) do
    kept_shape[d] = reduced[d] and 1 or size
    if not reduced[d] or keepdim then final_shape[#final_shape + 1] = kept_shape[d] end
  end
  local result = R.build(kept_shape, out_dtype, function(index)
    local window = {}
    for d, size in ipairs(t.shape) do window[d] = reduced[d] and size or 1 end
    local values = {}
    R.each_index(window, function(offset)
      local full = {}
      for d = 1, #t.shape do full[d] = reduced[d] and offset[d] or index[d] end
      values[#values + 1] = R.get(t, full)
    end)
    return fold(values)
  end)
  result.shape = final_shape
  return result
end

local function number_of(v)
  if type(v) == "boolean" then return v and 1 or 0 end
  return v
end

local function total(values)
  local s = 0
  for _, v in ipairs(values) do s = s + number_of(v) end
  return s
end

local function float_total(values)
  local s = 0.0
  for _, v in ipairs(values) do s = s + number_of(v) end
  return s
end

function R.sum(t, dims, keepdim)
  local dtype = R.sum_dtype(t.dtype)
  if R.is_float(dtype) then return R.reduce(t, dims, keepdim, dtype, float_total) end
  return R.reduce(t, dims, keepdim, dtype, total)
end

function R.prod(t, dims, keepdim)
  local dtype = R.sum_dtype(t.dtype)
  return R.reduce(t, dims, keepdim, dtype, function(values)
    local p = R.is_float(dtype) and 1.0 or 1
    for _, v in ipairs(values) do
      p = p * number_of(v)
      if R.is_int(dtype) then p = R.convert(p, dtype) end
    end
    return p
  end)
end

local function extreme(values, better)
  local best = values[1]
  for i = 2, #values do
    local v = values[i]
    if is_nan(v) or (not is_nan(best) and better(v, best)) then best = v end
  end
  return best
end

function R.max(t, dims, keepdim)
  return R.reduce(t, dims, keepdim, t.dtype, function(values)
    return extreme(values, function(x, y) return compare_key(x) > compare_key(y) end)
  end)
end

function R.min(t, dims, keepdim)
  return R.reduce(t, dims, keepdim, t.dtype, function(values)
    return extreme(values, function(x, y) return compare_key(x) < compare_key(y) end)
  end)
end

function R.mean(t, dims, keepdim)
  return R.reduce(t, dims, keepdim, R.float_of(t.dtype), function(values)
    return float_total(values) / #values
  end)
end

local function variance(values, correction)
  local mean = float_total(values) / #values
  local squares = 0.0
  for _, v in ipairs(values) do squares = squares + (number_of(v) - mean) ^ 2 end
  return squares / math.max(0, #values - correction)
end

function R.var(t, dims, keepdim, correction)
  if correction == nil then correction = 1 end
  return R.reduce(t, dims, keepdim, R.float_of(t.dtype), function(values)
    return variance(values, correction)
  end)
end

function R.std(t, dims, keepdim, correction)
  if correction == nil then correction = 1 end
  return R.reduce(t, dims, keepdim, R.float_of(t.dtype), function(values)
    return math.sqrt(variance(values, correction))
  end)
end

-- First position (1-based, within the reduced values) of the extreme value.
local function first_extreme_position(values, better)
  local best_position = 1
  for i = 2, #values do
    if better(compare_key(values[i]), compare_key(values[best_position])) then best_position = i end
  end
  return best_position
end

-- argmax/argmin take dim nil (over the flattened tensor: a 0-d result, keepdim ignored, as in
-- torch and tinygrad) or one dim.
function R.argmax(t, dim, keepdim)
  return R.reduce(t, dim, dim ~= nil and keepdim, "int32", function(values)
    return first_extreme_position(values, function(x, y) return x > y end)
  end)
end

function R.argmin(t, dim, keepdim)
  return R.reduce(t, dim, dim ~= nil and keepdim, "int32", function(values)
    return first_extreme_position(values, function(x, y) return x < y end)
  end)
end

function R.any(t, dims, keepdim)
  return R.reduce(t, dims, keepdim, "bool", function(values)
    for _, v in ipairs(values) do if R.convert(v, "bool") then return true end end
    return false
  end)
end

function R.all(t, dims, keepdim)
  return R.reduce(t, dims, keepdim, "bool", function(values)
    for _, v in ipairs(values) do if not R.convert(v, "bool") then return false end end
    return true
  end)
end

local function log_sum_exp(values)
  local largest = -INF
  for _, v in ipairs(values) do largest = math.max(largest, v) end
  if largest == -INF then return -INF end
  local s = 0.0
  for _, v in ipairs(values) do s = s + math.exp(v - largest) end
  return largest + math.log(s)
end

function R.logsumexp(t, dims, keepdim)
  return R.reduce(as_dtype(t, R.float_of(t.dtype)), dims, keepdim, R.float_of(t.dtype), log_sum_exp)
end

-- Values along one dim at every position of the other dims: calls fn(values, set) where
-- set(i, value) writes the i-th output along the dim.
local function along_dim(t, dim, out_dtype, fn)
  local d = R.dim(dim, #t.shape)
  local out_data = {}
  local outer = copy(t.shape)
  outer[d] = 1
  local strides = strides_of(t.shape)
  R.each_index(outer, function(index)
    local base = flat_position(t.shape, index)
    local values = {}
    for i = 1, t.shape[d] do values[i] = t.data[base + (i - 1) * strides[d]] end
    fn(values, function(i, value) out_data[base + (i - 1) * strides[d]] = R.convert(value, out_dtype) end)
  end)
  return R.tensor(t.shape, out_data, out_dtype)
end

function R.softmax(t, dim)
  local dtype = R.float_of(t.dtype)
  return along_dim(t, dim or -1, dtype, function(values, set)
    local lse = log_sum_exp(values)
    for i, v in ipairs(values) do set(i, math.exp(v - lse)) end
  end)
end

function R.log_softmax(t, dim)
  local dtype = R.float_of(t.dtype)
  return along_dim(t, dim or -1, dtype, function(values, set)
    local lse = log_sum_exp(values)
    for i, v in ipairs(values) do set(i, v - lse) end
  end)
end

function R.cumsum(t, dim)
  local dtype = R.sum_dtype(t.dtype)
  return along_dim(t, dim, dtype, function(values, set)
    local running = R.is_float(dtype) and 0.0 or 0
    for i, v in ipairs(values) do
      running = running + number_of(v)
      set(i, running)
    end
  end)
end

-- ---------------------------------------------------------------------------------------------
-- movement: each op gives the input index an output index reads from

function R.reshape(t, shape)
  assert(R.numel(shape) == #t.data, "reference: reshape changes the size")
  return R.tensor(shape, copy(t.data), t.dtype)
end

function R.permute(t, order)
  local shape = {}
  for i, d in ipairs(order) do shape[i] = t.shape[d] end
  return R.build(shape, t.dtype, function(index)
    local source = {}
    for i, d in ipairs(order) do source[d] = index[i] end
    return R.get(t, source)
  end)
end

function R.transpose(t, d1, d2)
  local order = {}
  for d = 1, #t.shape do order[d] = d end
  d1, d2 = R.dim(d1, #t.shape), R.dim(d2, #t.shape)
  order[d1], order[d2] = order[d2], order[d1]
  return R.permute(t, order)
end

function R.expand(t, shape)
  return R.build(shape, t.dtype, function(index) return broadcast_get(t, index) end)
end

-- pads: one {before, after} per dim (negative values crop); the new cells hold value.
function R.pad(t, pads, value)
  local shape = {}
  for d, size in ipairs(t.shape) do shape[d] = size + pads[d][1] + pads[d][2] end
  return R.build(shape, t.dtype, function(index)
    local source = {}
    for d = 1, #t.shape do
      source[d] = index[d] - pads[d][1]
      if source[d] < 1 or source[d] > t.shape[d] then return value end
    end
    return R.get(t, source)
  end)
end

function R.flip(t, dims)
  local flipped = R.dim_set(dims, #t.shape)
  return R.build(t.shape, t.dtype, function(index)
    local source = {}
    for d, size in ipairs(t.shape) do source[d] = flipped[d] and size - index[d] + 1 or index[d] end
    return R.get(t, source)
  end)
end

-- The positions a slice {start, stop, step} (inclusive, 1-based, negative from the end, {}
-- the whole dim) selects from a dim of `size`.
function R.slice_positions(spec, size)
  local step = spec[3] or 1
  local function resolve(i, default)
    if i == nil then return default end
    if i < 0 then return size + i + 1 end
    return i
  end
  local positions = {}
  if step > 0 then
    local first, last = resolve(spec[1], 1), resolve(spec[2], size)
    first, last = math.max(first, 1), math.min(last, size)
    for i = first, last, step do positions[#positions + 1] = i end
  else
    local first, last = resolve(spec[1], size), resolve(spec[2], 1)
    first, last = math.min(first, size), math.max(last, 1)
    for i = first, last, step do positions[#positions + 1] = i end
  end
  return positions
end

-- specs: one slice spec per leading dim (missing trailing dims are whole).
function R.slice(t, specs)
  local selected, shape = {}, {}
  for d, size in ipairs(t.shape) do
    selected[d] = R.slice_positions(specs[d] or {}, size)
    shape[d] = #selected[d]
  end
  return R.build(shape, t.dtype, function(index)
    local source = {}
    for d = 1, #shape do source[d] = selected[d][index[d]] end
    return R.get(t, source)
  end)
end

function R.narrow(t, dim, start, length)
  local d = R.dim(dim, #t.shape)
  local specs = {}
  for i = 1, #t.shape do specs[i] = {} end
  specs[d] = { start, start + length - 1 }
  if length == 0 then
    local shape = copy(t.shape)
    shape[d] = 0
    return R.tensor(shape, {}, t.dtype)
  end
  return R.slice(t, specs)
end

-- t[i]: the i-th entry along the first dim (negative from the end), that dim removed.
function R.index(t, i)
  if i < 0 then i = t.shape[1] + i + 1 end
  local shape = {}
  for d = 2, #t.shape do shape[d - 1] = t.shape[d] end
  return R.build(shape, t.dtype, function(index)
    local source = { i }
    for d = 1, #shape do source[d + 1] = index[d] end
    return R.get(t, source)
  end)
end

function R.cat(list, dim)
  local d = R.dim(dim or 1, #list[1].shape)
  local shape = copy(list[1].shape)
  shape[d] = 0
  local owner, offset = {}, {}
  for _, t in ipairs(list) do
    for i = 1, t.shape[d] do
      owner[shape[d] + i] = t
      offset[shape[d] + i] = shape[d]
    end
    shape[d] = shape[d] + t.shape[d]
  end
  local dtype = list[1].dtype
  for i = 2, #list do dtype = R.promote(dtype, list[i].dtype) end
  return R.build(shape, dtype, function(index)
    local position = index[d]
    local source = copy(index)
    source[d] = position - offset[position]
    return R.get(owner[position], source)
  end)
end

function R.unsqueeze(t, dim)
  local d = dim < 0 and #t.shape + dim + 2 or dim
  local shape = copy(t.shape)
  table.insert(shape, d, 1)
  return R.reshape(t, shape)
end

function R.stack(list, dim)
  local expanded = {}
  for i, t in ipairs(list) do expanded[i] = R.unsqueeze(t, dim or 1) end
  return R.cat(expanded, dim or 1)
end

function R.squeeze(t, dim)
  local shape = {}
  local target = dim and R.dim(dim, #t.shape)
  for d, size in ipairs(t.shape) do
    if not (size == 1 and (target == nil or target == d)) then shape[#shape + 1] = size end
  end
  return R.reshape(t, shape)
end

function R.flatten(t, first, last)
  local ndim = #t.shape
  if ndim == 0 then return R.reshape(t, { 1 }) end
  first, last = R.dim(first or 1, ndim), R.dim(last or -1, ndim)
  local shape = {}
  for d = 1, first - 1 do shape[#shape + 1] = t.shape[d] end
  local merged = 1
  for d = first, last do merged = merged * t.shape[d] end
  shape[#shape + 1] = merged
  for d = last + 1, ndim do shape[#shape + 1] = t.shape[d] end
  return R.reshape(t, shape)
end

-- repeat(reps): tiles the tensor reps[i] times along each dim (extra leading reps add dims).
function R.repeat_tensor(t, reps)
  local lead = #reps - #t.shape
  local shape = {}
  for i, r in ipairs(reps) do shape[i] = r * (i > lead and t.shape[i - lead] or 1) end
  return R.build(shape, t.dtype, function(index)
    local source = {}
    for d = 1, #t.shape do source[d] = (index[d + lead] - 1) % t.shape[d] + 1 end
    return R.get(t, source)
  end)
end

function R.split(t, size, dim)
  local d = R.dim(dim or 1, #t.shape)
  local parts, start = {}, 1
  while start <= t.shape[d] do
    local length = math.min(size, t.shape[d] - start + 1)
    parts[#parts + 1] = R.narrow(t, d, start, length)
    start = start + length
  end
  return parts
end

function R.chunk(t, count, dim)
  local d = R.dim(dim or 1, #t.shape)
  local size = math.max(1, (t.shape[d] + count - 1) // count)
  return R.split(t, size, d)
end

-- ---------------------------------------------------------------------------------------------
-- linear algebra and nn

-- matmul with numpy semantics: 1-D operands get a dim prepended/appended and removed after;
-- batch dims broadcast. Computed in double, rounded into the promoted dtype.
function R.matmul(a, b)
  local dtype = R.promote(a.dtype, b.dtype)
  local a_vector, b_vector = #a.shape == 1, #b.shape == 1
  if a_vector then a = R.reshape(a, { 1, a.shape[1] }) end
  if b_vector then b = R.reshape(b, { b.shape[1], 1 }) end
  local m, k, n = a.shape[#a.shape - 1], a.shape[#a.shape], b.shape[#b.shape]
  assert(k == b.shape[#b.shape - 1], "reference: matmul inner dims differ")
  local batch_a, batch_b = {}, {}
  for d = 1, #a.shape - 2 do batch_a[d] = a.shape[d] end
  for d = 1, #b.shape - 2 do batch_b[d] = b.shape[d] end
  local batch = R.broadcast_shape(batch_a, batch_b)
  local shape = copy(batch)
  shape[#shape + 1] = m
  shape[#shape + 1] = n
  local function read(t, batch_index, row, column)
    local index = {}
    local offset = #batch - (#t.shape - 2)
    for d = 1, #t.shape - 2 do index[d] = t.shape[d] == 1 and 1 or batch_index[d + offset] end
    index[#t.shape - 1], index[#t.shape] = row, column
    return number_of(R.get(t, index))
  end
  local result = R.build(shape, dtype, function(index)
    local row, column = index[#batch + 1], index[#batch + 2]
    local s = R.is_float(dtype) and 0.0 or 0
    for i = 1, k do s = s + read(a, index, row, i) * read(b, index, i, column) end
    return s
  end)
  local final = copy(batch)
  if not a_vector then final[#final + 1] = m end
  if not b_vector then final[#final + 1] = n end
  result.shape = final
  return result
end

-- x @ w + b, w of shape (in, out).
function R.linear(x, w, b)
  local y = R.matmul(x, w)
  if b then y = R.binary("add", y, b) end
  return y
end

-- A per-dim option as two numbers: a number for both dims or {h, w}.
local function pair(v)
  if type(v) == "table" then return v[1], v[2] end
  return v, v
end

-- Padding as {top, bottom, left, right}: a number, {h, w} or {{top, bottom}, {left, right}}.
local function padding_of(v)
  if type(v) == "table" and type(v[1]) == "table" then return { v[1][1], v[1][2], v[2][1], v[2][2] } end
  local h, w = pair(v)
  return { h, h, w, w }
end

-- conv2d straight from the definition: input (N, C, H, W), weight (O, C/groups, KH, KW).
function R.conv2d(x, w, b, opts)
  opts = opts or {}
  local groups = opts.groups or 1
  local sh, sw = pair(opts.stride or 1)
  local dh, dw = pair(opts.dilation or 1)
  local pads = padding_of(opts.padding or 0)
  local n, c, h, width = table.unpack(x.shape)
  local o, cg, kh, kw = table.unpack(w.shape)
  assert(cg * groups == c, "reference: conv2d channels do not match groups")
  local og = o // groups
  local oh = (h + pads[1] + pads[2] - dh * (kh - 1) - 1) // sh + 1
  local ow = (width + pads[3] + pads[4] - dw * (kw - 1) - 1) // sw + 1
  local dtype = R.promote(x.dtype, w.dtype)
  return R.build({ n, o, oh, ow }, dtype, function(index)
    local batch, out_channel, row, column = index[1], index[2], index[3], index[4]
    local group = (out_channel - 1) // og
    local s = b and number_of(b.data[out_channel]) or 0.0
    for ic = 1, cg do
      for i = 1, kh do
        for j = 1, kw do
          local y = (row - 1) * sh - pads[1] + (i - 1) * dh + 1
          local xcol = (column - 1) * sw - pads[3] + (j - 1) * dw + 1
          if y >= 1 and y <= h and xcol >= 1 and xcol <= width then
            s = s + R.get(x, { batch, group * cg + ic, y, xcol }) * R.get(w, { out_channel, ic, i, j })
          end
        end
      end
    end
    return s
  end)
end

-- Sliding windows over the last two dims: fold(in-bounds values, window size) -> value.
local function pool2d(x, kernel, stride, padding, dilation, out_dtype, fold)
  local kh, kw = pair(kernel)
  local sh, sw = pair(stride or kernel)
  local dh, dw = pair(dilation or 1)
  local pads = padding_of(padding or 0)
  local ndim = #x.shape
  local h, w = x.shape[ndim - 1], x.shape[ndim]
  local oh = (h + pads[1] + pads[2] - dh * (kh - 1) - 1) // sh + 1
  local ow = (w + pads[3] + pads[4] - dw * (kw - 1) - 1) // sw + 1
  local shape = copy(x.shape)
  shape[ndim - 1], shape[ndim] = oh, ow
  return R.build(shape, out_dtype, function(index)
    local values = {}
    for i = 1, kh do
      for j = 1, kw do
        local y = (index[ndim - 1] - 1) * sh - pads[1] + (i - 1) * dh + 1
        local xc = (index[ndim] - 1) * sw - pads[3] + (j - 1) * dw + 1
        if y >= 1 and y <= h and xc >= 1 and xc <= w then
          local source = copy(index)
          source[ndim - 1], source[ndim] = y, xc
          values[#values + 1] = R.get(x, source)
        end
      end
    end
    return fold(values, kh * kw)
  end)
end

function R.max_pool2d(x, kernel, stride, padding, dilation)
  return pool2d(x, kernel, stride, padding, dilation, x.dtype, function(values)
    local best = values[1]
    for _, v in ipairs(values) do if v > best then best = v end end
    return best
  end)
end

-- Average over the whole window, padding counted (count_include_pad); ints give float32.
function R.avg_pool2d(x, kernel, stride, padding)
  return pool2d(x, kernel, stride, padding, 1, R.float_of(x.dtype), function(values, window)
    return float_total(values) / window
  end)
end

-- (x - mean) / sqrt(biased var + eps) over `dim` (a number or list; default the last).
function R.layernorm(x, dim, eps)
  eps = eps or 1e-5
  local mean = R.mean(x, dim or -1, true)
  local centered = R.map(x.dtype, function(a, m) return a - m end, x, mean)
  local var = R.var(x, dim or -1, true, 0)
  return R.map(R.float_of(x.dtype), function(c, v) return c / math.sqrt(v + eps) end, centered, var)
end

-- (x - mean) * weight * invstd + bias, parameters of shape (C,) on dim 2.
function R.batchnorm(x, weight, bias, mean, invstd)
  local shape = { 1, x.shape[2] }
  for _ = 3, #x.shape do shape[#shape + 1] = 1 end
  local function channel(p) return R.reshape(p, shape) end
  return R.map(x.dtype, function(v, wv, bv, mv, iv) return (v - mv) * wv * iv + bv end,
    x, channel(weight), channel(bias), channel(mean), channel(invstd))
end

function R.one_hot(labels, classes)
  local shape = copy(labels.shape)
  shape[#shape + 1] = classes
  return R.build(shape, "int32", function(index)
    local source = {}
    for d = 1, #labels.shape do source[d] = index[d] end
    return R.get(labels, source) == index[#shape] and 1 or 0
  end)
end

-- softmax(q k^T / sqrt(d) + mask) v; a bool mask keeps where true; causal keeps j <= i.
function R.scaled_dot_product_attention(q, k, v, mask, causal)
  local d = q.shape[#q.shape]
  local scores = R.matmul(q, R.transpose(k, -2, -1))
  scores = R.map("float64", function(s) return s / math.sqrt(d) end, scores)
  if mask then
    if mask.dtype == "bool" then
      scores = R.map("float64", function(s, keep) if keep then return s end return -INF end, scores, mask)
    else
      scores = R.map("float64", function(s, add) return s + add end, scores, mask)
    end
  end
  if causal then
    local ndim = #scores.shape
    scores = R.build(scores.shape, "float64", function(index)
      if index[ndim] > index[ndim - 1] then return -INF end
      return R.get(scores, index)
    end)
  end
  local weights = R.softmax(scores, -1)
  local out = R.matmul(weights, v)
  return as_dtype(out, q.dtype)
end

-- Cross-entropy of logits with classes on dim 2 (dim 1 when 1-D) against target
-- probabilities of the same shape, or 1-based class indices of the shape without the class
-- dim. opts: reduction ("mean", "sum", "none"), label_smoothing.
function R.cross_entropy(logits, target, opts)
  opts = opts or {}
  local class_dim = #logits.shape >= 2 and 2 or 1
  local classes = logits.shape[class_dim]
  local smoothing = opts.label_smoothing or 0
  local indices = #target.shape == #logits.shape - 1
  local log_probabilities = R.log_softmax(as_dtype(logits, "float64"), class_dim)
  local loss_shape = copy(logits.shape)
  table.remove(loss_shape, class_dim)
  local dtype = R.float_of(logits.dtype)
  local losses = R.build(loss_shape, "float64", function(index)
    local s = 0.0
    for c = 1, classes do
      local full = copy(index)
      table.insert(full, class_dim, c)
      local p
      if indices then p = R.get(target, index) == c and 1 or 0 else p = number_of(R.get(target, full)) end
      p = p * (1 - smoothing) + smoothing / classes
      s = s - R.get(log_probabilities, full) * p
    end
    return s
  end)
  local reduction = opts.reduction or "mean"
  if reduction == "none" then return as_dtype(losses, dtype) end
  local sum = float_total(losses.data)
  if reduction == "sum" then return R.scalar(sum, dtype) end
  return R.scalar(sum / #losses.data, dtype)
end

-- The mean over the labels (any leading shape) of -log_softmax(logits)[..., label], labels
-- 1-based; labels equal to ignore_index do not count.
function R.sparse_categorical_crossentropy(logits, labels, ignore_index)
  local log_probabilities = R.log_softmax(as_dtype(logits, "float64"), -1)
  local sum_of_losses, count = 0.0, 0
  R.each_index(labels.shape, function(index)
    local label = R.get(labels, index)
    if label ~= ignore_index then
      local full = copy(index)
      full[#full + 1] = label
      sum_of_losses = sum_of_losses - R.get(log_probabilities, full)
      count = count + 1
    end
  end)
  return R.scalar(sum_of_losses / count, R.float_of(logits.dtype))
end

-- ---------------------------------------------------------------------------------------------
-- seeded random generators (splitmix64)

-- The generator of spec/support/splitmix.lua, with the methods below for shapes, values,
-- tensors and views.
local splitmix = require "spec.support.splitmix"
local Random = setmetatable({}, { __index = splitmix.Generator })
Random.__index = Random

function R.random(seed)
  return setmetatable({ state = seed }, Random)
end

-- A generator seeded from a name (a case's description), so each case is reproducible.
function R.random_for(name)
  local seed = 1469598103934665603
  for i = 1, #name do seed = (seed ~ name:byte(i)) * 1099511628211 end
  return R.random(seed), seed
end

function Random:permutation(n)
  local order = {}
  for i = 1, n do order[i] = i end
  for i = n, 2, -1 do
    local j = self:integer(1, i)
    order[i], order[j] = order[j], order[i]
  end
  return order
end

-- A random shape. opts: ndim (exact) or min_ndim/max_ndim, max_numel (default 48),
-- zero (probability of a size-0 dim, default 0), ones (probability of size 1, default 0.2),
-- max_size (default 5).
function Random:shape(opts)
  opts = opts or {}
  local max_numel = opts.max_numel or 48
  for _ = 1, 100 do
    local ndim = opts.ndim or self:integer(opts.min_ndim or 1, opts.max_ndim or 3)
    local shape = {}
    for d = 1, ndim do
      if opts.zero and self:chance(opts.zero) then
        shape[d] = 0
      elseif self:chance(opts.ones or 0.2) then
        shape[d] = 1
      else
        shape[d] = self:integer(2, opts.max_size or 5)
      end
    end
    if R.numel(shape) <= max_numel then return shape end
  end
  error("reference: no shape within max_numel")
end

-- A shape that broadcasts with `shape` to `shape`: some leading dims dropped, some set to 1.
function Random:broadcast_partner(shape)
  local drop = self:integer(0, #shape)
  local partner = {}
  for d = drop + 1, #shape do
    partner[#partner + 1] = self:chance(0.4) and 1 or shape[d]
  end
  return partner
end

-- A random value of dtype. opts: lo, hi (defaults per dtype), positive, nonzero, integral.
function Random:value(dtype, opts)
  opts = opts or {}
  if dtype == "bool" then return self:chance(0.5) end
  local info = DTYPES[dtype]
  if info.kind == "int" then
    local lowest = info.signed and -(1 << (math.min(info.bits, 32) - 1)) or 0
    local highest = (1 << (math.min(info.bits, 32) - (info.signed and 1 or 0))) - 1
    local lo = math.max(opts.lo and math.tointeger(math.ceil(opts.lo)) or -20, lowest)
    local hi = math.min(opts.hi and math.tointeger(math.floor(opts.hi)) or 20, highest)
    if opts.positive then lo = math.max(lo, 1) end
    local v
    repeat v = self:integer(lo, hi) until not (opts.nonzero and v == 0)
    return v
  end
  local lo, hi = opts.lo or -3.0, opts.hi or 3.0
  if opts.positive then lo = math.max(lo, 0.05) end
  local v
  repeat
    v = self:uniform(lo, hi)
    if opts.integral then v = math.floor(v) + 0.0 end
  until not (opts.nonzero and math.abs(v) < 0.05)
  return R.convert(v, dtype)
end

-- A random reference tensor of shape and dtype (value opts as in Random:value).
function Random:tensor(shape, dtype, opts)
  local data = {}
  for i = 1, R.numel(shape) do data[i] = self:value(dtype, opts) end
  return R.tensor(shape, data, dtype)
end

-- ---------------------------------------------------------------------------------------------
-- building tcl tensors from reference tensors, and non-contiguous views

-- The tcl tensor holding the reference tensor's values (contiguous, realized or lazy).
function R.to_tcl(Tensor, t)
  if #t.shape == 0 then return Tensor(t.data[1], { dtype = t.dtype }) end -- false too
  if R.numel(t.shape) == 0 then return Tensor({}, { dtype = t.dtype }):reshape(t.shape) end
  return Tensor(R.to_nested(t), { dtype = t.dtype })
end

R.VIEW_KINDS = { "permuted", "flipped", "padded", "sliced", "expanded" }

-- A non-contiguous input of `shape`: returns the reference tensor and a function that builds
-- the same values in tcl by a movement op applied to a different (contiguous) tensor.
-- kind: "permuted", "flipped", "padded", "sliced" or "expanded".
function Random:view(kind, shape, dtype, opts)
  local ndim = #shape
  if kind == "permuted" then
    local order = self:permutation(ndim)
    local inverse = {}
    for i, d in ipairs(order) do inverse[d] = i end
    local base_shape = {}
    for i = 1, ndim do base_shape[i] = shape[order[i]] end
    local base = self:tensor(base_shape, dtype, opts)
    return R.permute(base, inverse), function(Tensor)
      return R.to_tcl(Tensor, base):permute(inverse)
    end
  elseif kind == "flipped" then
    local base = self:tensor(shape, dtype, opts)
    local dims = {}
    for d = 1, ndim do if self:chance(0.6) or d == 1 then dims[#dims + 1] = d end end
    return R.flip(base, dims), function(Tensor) return R.to_tcl(Tensor, base):flip(dims) end
  elseif kind == "padded" then
    -- pad with a value from the data's range, cropping elsewhere: pads of +1/-1 mixed.
    local pads, base_shape = {}, {}
    for d = 1, ndim do
      local before = shape[d] >= 1 and self:integer(0, 1) or 0
      local after = self:integer(-1, 1)
      if shape[d] - before - after < 0 then after = shape[d] - before end
      pads[d] = { before, after }
      base_shape[d] = shape[d] - before - after
    end
    local base = self:tensor(base_shape, dtype, opts)
    local fill = self:value(dtype, opts)
    return R.pad(base, pads, fill), function(Tensor) return R.to_tcl(Tensor, base):pad(pads, fill) end
  elseif kind == "sliced" then
    -- a strided window of a bigger tensor (shape must have no size-0 dim)
    local specs, base_shape = {}, {}
    for d = 1, ndim do
      assert(shape[d] > 0, "reference: sliced views need non-empty dims")
      local step = self:integer(1, 2)
      local start = self:integer(1, 2)
      local stop = start + (shape[d] - 1) * step
      base_shape[d] = stop + self:integer(0, 1)
      specs[d] = { start, stop, step }
    end
    local base = self:tensor(base_shape, dtype, opts)
    return R.slice(base, specs), function(Tensor) return R.to_tcl(Tensor, base):slice(table.unpack(specs)) end
  elseif kind == "expanded" then
    local base_shape = {}
    for d = 1, ndim do base_shape[d] = self:chance(0.5) and 1 or shape[d] end
    local base = self:tensor(base_shape, dtype, opts)
    return R.expand(base, shape), function(Tensor) return R.to_tcl(Tensor, base):expand(shape) end
  end
  error("reference: unknown view kind " .. tostring(kind))
end

-- ---------------------------------------------------------------------------------------------
-- comparing a tcl tensor with a reference tensor

-- Tolerances: |actual - expected| <= atol + rtol * |expected|.
R.TOLERANCE = {
  exact = { rtol = 0, atol = 0 },
  float32 = { rtol = 2e-6, atol = 1e-6 },            -- one rounding of + - * / and casts
  float32_function = { rtol = 1e-4, atol = 1e-5 },   -- transcendental / composite functions
  float32_reduce = { rtol = 1e-5, atol = 1e-5 },     -- sums in another order
  float16 = { rtol = 2e-3, atol = 1e-3 },
  float16_function = { rtol = 5e-3, atol = 3e-3 },
  bfloat16 = { rtol = 1.6e-2, atol = 1e-2 },
  bfloat16_function = { rtol = 3e-2, atol = 2e-2 },
  float64 = { rtol = 1e-12, atol = 1e-12 },
  float64_function = { rtol = 1e-9, atol = 1e-12 },
}

-- The tolerance for a dtype and kind of op ("arith", "function" or "reduce").
function R.tolerance(dtype, kind)
  if not R.is_float(dtype) then return R.TOLERANCE.exact end
  if dtype == "float16" then
    return kind == "arith" and R.TOLERANCE.float16 or R.TOLERANCE.float16_function
  end
  if dtype == "bfloat16" then
    return kind == "arith" and R.TOLERANCE.bfloat16 or R.TOLERANCE.bfloat16_function
  end
  if dtype == "float64" then
    return kind == "arith" and R.TOLERANCE.float64 or R.TOLERANCE.float64_function
  end
  if kind == "function" then return R.TOLERANCE.float32_function end
  if kind == "reduce" then return R.TOLERANCE.float32_reduce end
  return R.TOLERANCE.float32
end

local function value_string(v)
  if math.type(v) == "float" then return string.format("%.9g", v) end
  return tostring(v)
end

local function index_string(path)
  local parts = {}
  for i, p in ipairs(path) do parts[i] = tostring(p) end
  return "[" .. table.concat(parts, "][") .. "]"
end

local function values_match(actual, expected, tol)
  if type(expected) == "boolean" then return actual == expected end
  if type(actual) ~= "number" then return false end
  if is_nan(expected) then return is_nan(actual) end
  if expected == INF or expected == -INF then return actual == expected end
  if is_nan(actual) then return false end
  return math.abs(actual - expected) <= tol.atol + tol.rtol * math.abs(expected)
end

-- Compares nested tables (tolist) with the reference's nested tables. Returns nil, or a
-- message naming the first mismatch and the number of mismatches.
function R.compare(actual, expected, tol, allow)
  local mismatches, first = 0, nil
  local function walk(a, e, path)
    if type(e) == "table" then
      if type(a) ~= "table" or #a ~= #e then
        mismatches = mismatches + 1
        first = first or string.format("at %s: expected a list of %d, got %s", index_string(path), #e,
          type(a) == "table" and ("a list of " .. #a) or value_string(a))
        return
      end
      for i = 1, #e do
        path[#path + 1] = i
        walk(a[i], e[i], path)
        path[#path] = nil
      end
    elseif not values_match(a, e, tol) and not (allow and allow(a, e, copy(path))) then
      mismatches = mismatches + 1
      first = first or string.format("at %s: expected %s, got %s", index_string(path),
        value_string(e), value_string(a))
    end
  end
  walk(actual, expected, {})
  if mismatches == 0 then return nil end
  return string.format("%d mismatching value(s), first %s", mismatches, first)
end

local function shapes_equal(a, b)
  if #a ~= #b then return false end
  for i = 1, #a do if a[i] ~= b[i] then return false end end
  return true
end

-- Reports a mismatch found by R.check, naming the spec line that called R.check: a failed
-- luassert assertion when running under busted (so it counts as a failure, not an error),
-- else a plain error.
local function fail_check(message)
  local caller = debug.getinfo(3, "Sl")
  if caller then message = string.format("%s:%d: %s", caller.short_src, caller.currentline, message) end
  local has_luassert, luassert = pcall(require, "luassert")
  if has_luassert then luassert(false, message) end
  error(message, 0)
end

-- Asserts that tcl tensor `t` has the reference tensor's shape, dtype and values.
-- context: a string naming the case (op, shapes, dtype, seed) for the failure message.
-- opts: tol (a tolerance table), kind ("arith"/"function"/"reduce"), allow(actual, expected,
-- path) to accept an alternative value, check_dtype (default true).
function R.check(t, expected, context, opts)
  opts = opts or {}
  local shape = t.shape
  if not shapes_equal(shape, expected.shape) then
    fail_check(string.format("%s: shape %s, expected %s", context, R.shape_string(shape),
      R.shape_string(expected.shape)))
  end
  if opts.check_dtype ~= false and tostring(t.dtype) ~= expected.dtype then
    fail_check(string.format("%s: dtype %s, expected %s", context, tostring(t.dtype), expected.dtype))
  end
  local tol = opts.tol or R.tolerance(expected.dtype, opts.kind or "arith")
  local actual = t:tolist()
  local problem = R.compare(actual, R.to_nested(expected), tol, opts.allow)
  if problem then fail_check(context .. ": " .. problem) end
end

return R
