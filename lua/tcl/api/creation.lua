-- tcl.api.creation — making tensors: from Lua data (Tensor(data, opts)), filled shapes (zeros,
-- ones, full, empty and their _like forms), ranges (arange, linspace) and eye. Layer: lua/tcl/api.
--
-- Lua data goes to the device through tcl.schedule.buffers (a BUFFER node of its values, reshaped);
-- constant fills are a CONST broadcast to the shape, so they cost no memory until used;
-- eye is a lazy band mask built from movement ops.
local variables = require "tcl.variables"
local core = require "tcl.core"
local alu = require "tcl.alu"
local class = require "tcl.api.class"
local check = require "tcl.api.check"
local nodes = require "tcl.api.nodes"
local rules = require "tcl.api.dtype_rules"

local is_tensor, fail, wrap = class.is_tensor, check.fail, class.wrap
local dtypes = core.dtypes
local MAX_NDIM = require("tcl.shape").MAX_NDIM
local buffers = require "tcl.schedule.buffers"
local M = {}

local OPTIONS = { dtype = true, device = true }


local function device_option(fn, device)
  if device == nil then return class.default_device(fn) end
  if type(device) ~= "string" then fail(fn, "device must be a string, got %s", check.type_name(device)) end
  local ok, checked = pcall(class.checked_device, fn, device)
  if not ok then fail(fn, "%s", (checked:gsub("^[^:]*: ", ""))) end
  return checked
end

--- The checked options {dtype=, device=}: dtype (or the default) and device.
local function options(fn, opts, default_dtype)
  opts = check.options(fn, opts, OPTIONS)
  local dtype = opts.dtype ~= nil and rules.dtype(fn, opts.dtype) or default_dtype
  return dtype, device_option(fn, opts.device)
end
M._options = options

--- A tensor on `device` holding the Lua values `flat` (already of `dtype`'s kind), shaped.
local function from_values(dtype, flat, shape, device)
  local node = buffers.from_list(dtype, flat, device)
  return nodes.reshape(wrap(node, { #flat }, device), shape)
end
M._from_values = from_values

-- Walks nested tables: the shape comes from the first elements, every other element must
-- agree (no ragged data), leaves must be numbers or booleans.
local function flatten(fn, data)
  local shape, probe = {}, data
  while type(probe) == "table" and not is_tensor(probe) do
    if #shape == MAX_NDIM then
      fail(fn, "data is nested deeper than the %d dims a tensor may have (does it contain itself?)", MAX_NDIM)
    end
    shape[#shape + 1] = #probe
    if #probe == 0 then break end
    probe = probe[1]
  end
  local flat, path = {}, {}
  local function where_in(depth)
    local parts = {}
    for i = 1, depth do parts[i] = "[" .. path[i] .. "]" end
    return #parts == 0 and "the data" or "data" .. table.concat(parts)
  end
  local function walk(node, depth)
    if depth > #shape then
      local kind = type(node)
      if kind ~= "number" and kind ~= "boolean" then
        if kind == "table" and not is_tensor(node) then
          fail(fn, "ragged data: %s is a table, expected a number (shape %s)", where_in(depth - 1),
              check.shape_str(shape))
        end
        fail(fn, "data must hold numbers or booleans, got %s at %s", check.type_name(node), where_in(depth - 1))
      end
      flat[#flat + 1] = node
      return
    end
    if type(node) ~= "table" or is_tensor(node) then
      fail(fn, "ragged data: %s is %s, expected a table of %d elements (shape %s)", where_in(depth - 1),
        check.type_name(node), shape[depth], check.shape_str(shape))
    end
    if #node ~= shape[depth] then
      fail(fn, "ragged data: %s has %d elements, expected %d (shape %s)", where_in(depth - 1), #node, shape[depth],
        check.shape_str(shape))
    end
    for i = 1, #node do
      path[depth] = i
      walk(node[i], depth + 1)
    end
    path[depth] = nil
  end
  check.shape_fits(fn, shape)
  walk(data, 1)
  return flat, shape
end

--- Tensor(data, {dtype=, device=}): data is a number, a boolean, a (nested) table of them,
--  or a tensor. Numbers with a fraction (or mixed data) give float32, integers int32,
--  booleans bool.
function M.new(data, opts)
  local fn = "Tensor"
  if is_tensor(data) then
    local dtype, device = options(fn, opts, data.uop.dtype)
    if opts and opts.device ~= nil and device ~= data.device then
      fail(fn, "cannot move a tensor from %s to %s", data.device, device)
    end
    return nodes.cast(data, dtype)
  end
  local kind = type(data)
  if kind == "number" or kind == "boolean" then
    local dtype, device = options(fn, opts, rules.of_value(data))
    return nodes.const(data, dtype, {}, device)
  end
  if kind ~= "table" then fail(fn, "expected a number, boolean, table or tensor, got %s", check.type_name(data)) end
  local flat, shape = flatten(fn, data)
  local dtype, device = options(fn, opts, rules.of_values(flat))
  for i = 1, #flat do flat[i] = alu.cast(flat[i], dtype) end
  return from_values(dtype, flat, shape, device)
end

--- Tensor.scalar(value, {dtype=, device=}): a 0-d tensor whose value is stored in a
--  one-element buffer, not compiled into kernels as Tensor(value) is. For values that change
--  on every call (a learning rate, a step count): kernels that read it stay the same, so
--  they are compiled once.
function M.scalar(value, opts)
  local fn = "scalar"
  if type(value) ~= "number" and type(value) ~= "boolean" then
    fail(fn, "value must be a number or a boolean, got %s", check.type_name(value))
  end
  local dtype, device = options(fn, opts, rules.of_value(value))
  return from_values(dtype, { alu.cast(rules.fill_value(fn, value, dtype), dtype) }, {}, device)
end

-- full under the name fn ("full" or "full_like"); shape is checked.
local function full_as(fn, shape, value, opts)
  if type(value) ~= "number" and type(value) ~= "boolean" then
    fail(fn, "value must be a number or a boolean, got %s", check.type_name(value))
  end
  local dtype, device = options(fn, opts, rules.of_value(value))
  return nodes.const(rules.fill_value(fn, value, dtype), dtype, shape, device)
end

function M.full(shape, value, opts)
  return full_as("full", check.shape("full", shape), value, opts)
end

-- zeros and ones: a CONST fill, float32 unless a dtype is given.
local function filled(fn, value)
  return function(...)
    local shape, opts = check.shape_and_options(fn, ...)
    local dtype, device = options(fn, opts, rules.default_float)
    return nodes.const(value, dtype, shape, device)
  end
end
M.zeros = filled("zeros", 0)
M.ones = filled("ones", 1)

--- A tensor with unspecified contents (a fresh buffer).
function M.empty(...)
  local shape, opts = check.shape_and_options("empty", ...)
  local dtype, device = options("empty", opts, rules.default_float)
  local numel = check.numel(shape)
  local node = buffers.new(dtype, numel, device)
  return nodes.reshape(wrap(node, { numel }, device), shape)
end

local function like_options(fn, t, opts)
  check.tensor(fn, t)
  opts = check.options(fn, opts, OPTIONS)
  local dtype = opts.dtype ~= nil and rules.dtype(fn, opts.dtype) or t.uop.dtype
  local device = opts.device ~= nil and device_option(fn, opts.device) or t.device
  return nodes.copy_shape(t), { dtype = dtype, device = device }
end

function M.zeros_like(t, opts)
  local shape, o = like_options("zeros_like", t, opts)
  return M.zeros(shape, o)
end

function M.ones_like(t, opts)
  local shape, o = like_options("ones_like", t, opts)
  return M.ones(shape, o)
end

function M.empty_like(t, opts)
  local shape, o = like_options("empty_like", t, opts)
  return M.empty(shape, o)
end

function M.full_like(t, value, opts)
  local shape, o = like_options("full_like", t, opts)
  return full_as("full_like", shape, value, o)
end

--- An integer tensor of shape {count} whose element i is i (0-based): an ARANGE node, which
--  the scheduler turns into the loop index, so it costs no memory or host work. int32 up to
--  2^31 elements, int64 beyond (int32 would wrap).
local function indices(count, device)
  local dtype = variables.max(count) <= 2 ^ 31 and dtypes.int32 or dtypes.int64
  return nodes.node("ARANGE", dtype, {}, count, { count }, device)
end
M._indices = indices

-- Whether every integer from a to b (either order) fits in int32.
local function int32_range(a, b)
  return math.min(a, b) >= -2 ^ 31 and math.max(a, b) < 2 ^ 31
end

--- arange(stop), arange(start, stop[, step]): start, start+step, ... up to stop (excluded).
--  int32 when every argument is an integer (int64 when the values need it), else float32; a
--  trailing options table. Integer values that do not fit the dtype asked for are an error.
--  Lazy: start + i * step over an index node, in int32 when every value fits, else in int64
--  (then cast, wrapping like alu.cast), and in float64 for floats (rounded once to the dtype).
-- arange(n) or arange(start, n) with a variable stop n (tcl.var): step 1, int32 unless a dtype
-- is given.
local function symbolic_arange(fn, args)
  local opts = type(args[args.n]) == "table" and args[args.n] or nil
  local count = opts and args.n - 1 or args.n
  if count > 2 or (count == 2 and math.type(args[1]) ~= "integer") then
    fail(fn, "with a variable size takes arange(n) or arange(start, n) with an integer start, step 1")
  end
  local start, stop = 0, args[1]
  if count == 2 then start, stop = args[1], args[2] end
  stop = check.size(fn, "stop", stop)
  local n = variables.sub(stop, start)
  if variables.min(n) < 0 then
    fail(fn, "stop %s may be below start %d (it takes %d..%d)", variables.format(stop), start, variables.min(stop),
      variables.max(stop))
  end
  local dtype, device = options(fn, opts, dtypes.int32)
  local values = nodes.cast(indices(n, device), dtype.is_int and dtypes.int64 or dtypes.float64)
  if start ~= 0 then values = values + nodes.const(start, values.uop.dtype, { n }, device) end
  return nodes.cast(values, dtype)
end

function M.arange(...)
  local fn = "arange"
  local args = table.pack(...)
  for i = 1, args.n do
    if variables.is_symbolic(args[i]) then return symbolic_arange(fn, args) end
  end
  local numbers, opts = {}, nil
  for i = 1, args.n do
    local v = args[i]
    if type(v) == "number" and opts == nil then numbers[#numbers + 1] = v
    elseif type(v) == "table" and i == args.n then opts = v
    else fail(fn, "expected numbers (start, stop, step) and an options table, got %s", check.type_name(v)) end
  end
  if #numbers == 0 or #numbers > 3 then fail(fn, "expected 1 to 3 numbers (start, stop, step), got %d", #numbers) end
  local start, stop, step = 0, numbers[1], 1
  if #numbers >= 2 then start, stop = numbers[1], numbers[2] end
  if #numbers == 3 then step = numbers[3] end
  if step == 0 then fail(fn, "step must not be 0") end
  local all_int = math.type(start) == "integer" and math.type(stop) == "integer" and math.type(step) == "integer"
  local dtype, device = options(fn, opts, all_int and dtypes.int32 or rules.default_float)
  -- counted in floats: integer differences such as stop - start may not fit in 64 bits
  local count = math.max(0, math.ceil((stop + 0.0 - start) / step))
  if count ~= count or count == math.huge then fail(fn, "cannot count from %s to %s by %s", start, stop, step) end
  if count > 2 ^ 53 then fail(fn, "%.0f values are more than the 2^53 elements a tensor may have", count) end
  count = math.tointeger(count)
  local last = start + (count - 1.0) * step -- in floats: it may not fit in 64 bits
  local work -- the dtype the values are computed in
  if all_int and count > 0 and dtype.is_int then
    if (opts == nil or opts.dtype == nil) and not int32_range(start, last) then dtype = dtypes.int64 end
    if math.min(start, last) < dtype.min or math.max(start, last) > dtype.max then
      fail(fn, "the values from %d to %.0f do not fit in %s", start, last, dtype.name)
    end
    work = int32_range(start, last) and dtypes.int32 or dtypes.int64
  else
    work = dtypes.float64
  end
  local index = indices(count, device)
  local values = nodes.cast(index, work)
  if step ~= 1 then values = values * nodes.const(step, work, { count }, device) end
  if start ~= 0 then values = values + nodes.const(start, work, { count }, device) end
  return nodes.cast(values, dtype)
end

--- n evenly spaced values from a to b, both included (float32 unless a dtype is given).
--  Lazy: a + i * (b - a) / (n - 1) in float64, rounded once to the dtype; the ends are a and b.
function M.linspace(a, b, n, opts)
  local fn = "linspace"
  check.number(fn, "start", a)
  check.number(fn, "end", b)
  n = check.integer_at_least(fn, "number of steps", n, 0)
  check.shape_fits(fn, { n })
  local dtype, device = options(fn, opts, rules.default_float)
  local f64 = dtypes.float64
  local function fill(v) return nodes.const(v, f64, { n }, device) end
  if n <= 1 then return nodes.cast(fill(a), dtype) end
  local index = indices(n, device)
  local values = nodes.cast(index, f64) * fill(b - a) / fill(n - 1) + fill(a)
  local last = index:eq(n - 1)
  return nodes.cast(last:where(fill(b), values), dtype)
end

--- The n x m identity (m defaults to n), float32 unless a dtype is given.
function M.eye(n, m, opts)
  local fn = "eye"
  if type(m) == "table" and opts == nil then m, opts = nil, m end
  n = check.integer_at_least(fn, "n", n, 0)
  m = m == nil and n or check.integer_at_least(fn, "m", m, 0)
  check.shape_fits(fn, { n, m })
  if not nodes.band_mask_fits(n, m) then fail(fn, "the %d x %d mask needs more than 2^53 elements", n, m) end
  local dtype, device = options(fn, opts, rules.default_float)
  return nodes.cast(nodes.band_mask(n, m, 0, 0, device), dtype)
end

-- x with the elements outside the band lo <= col - row <= hi of its last two dims zeroed;
-- the result keeps x's dtype (false for bool).
local function band(fn, x, k, lower)
  check.tensor(fn, x)
  if #x._shape < 2 then fail(fn, "needs at least 2 dims, got %s", check.shape_str(x._shape)) end
  if variables.is_symbolic(k) then k = check.size(fn, "diagonal", k) -- the KV cache's offset
  else k = k == nil and 0 or check.integer(fn, "diagonal", k) end
  local rows, cols = x._shape[#x._shape - 1], x._shape[#x._shape]
  if not nodes.band_mask_fits(rows, cols) then
    fail(fn, "the %s x %s mask of %s needs more than 2^53 elements", variables.format(rows), variables.format(cols),
      check.shape_str(x._shape))
  end
  local lo, hi = k, math.huge
  if lower then lo, hi = -math.huge, k end
  local zero = nodes.const(0, x.uop.dtype, {}, x.device)
  return nodes.band_mask(rows, cols, lo, hi, x.device):where(x, zero)
end

--- Keeps the elements on and above diagonal k of the last two dims (zeros elsewhere).
function M.triu(x, k) return band("triu", x, k, false) end

--- Keeps the elements on and below diagonal k of the last two dims (zeros elsewhere).
function M.tril(x, k) return band("tril", x, k, true) end

return M
