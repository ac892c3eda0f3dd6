-- tcl.api.check — argument checking and error messages for the Tensor API. Layer: lua/tcl/api.
--
-- Every misuse of the API is a Lua error whose message starts with the name of the user-facing
-- function ("reshape: ...") and names the shapes involved. Errors are raised at the user's
-- line: the first stack frame outside lua/tcl/api, so a message points at the script, not at us.
-- All checks run before any node is built, so a failed call leaves nothing half-done.
local variables = require "tcl.variables"
local class = require "tcl.api.class"
local shape_of = require "tcl.shape"
local quote = require "tcl.quote"

local M = {}

-- The directory of this file: frames whose source starts with it belong to the API.
local API_SOURCE_PREFIX = debug.getinfo(1, "S").source:match("^(@.*[/\\])") or "@lua/tcl/api/"

local function is_api_frame(info)
  return info.source:sub(1, #API_SOURCE_PREFIX) == API_SOURCE_PREFIX
end

--- Raises "fn: message" at the first frame outside the API (no position if that is C).
function M.fail(fn, fmt, ...)
  local message = fn .. ": " .. string.format(fmt, ...)
  local level = 2
  while true do
    local info = debug.getinfo(level, "S")
    if info == nil then error(message, 0) end
    if not is_api_frame(info) then
      -- error's level counts from the function that calls error, as getinfo's does from here
      error(message, info.what == "C" and 0 or level)
    end
    level = level + 1
  end
end
local fail = M.fail

--- A user's string (a name, a key) bounded for a message (tcl.quote): "abc...(400000 bytes)".
M.quote = quote

--- "(2, 3)", "(4,)" and "()" like Python tuples, so shapes read the same as in tinygrad.
--  Entries that are not numbers (a list the user gave) are shown by their type name.
function M.shape_str(shape)
  local parts = {}
  for i = 1, #shape do
    local v = shape[i]
    parts[i] = type(v) == "number" and tostring(v) or variables.is_size(v) and variables.format(v) or M.type_name(v)
  end
  if #parts == 1 then return "(" .. parts[1] .. ",)" end
  return "(" .. table.concat(parts, ", ") .. ")"
end

--- The numpy broadcast of two shapes, or nil when they do not broadcast.
function M.broadcast_shapes(a, b)
  local n, out = math.max(#a, #b), {}
  for i = 1, n do
    local x, y = a[#a - n + i] or 1, b[#b - n + i] or 1
    if x ~= y and x ~= 1 and y ~= 1 then return nil end
    out[i] = x == 1 and y or x
  end
  return out
end

--- A short description of a Lua value for "expected X, got Y" messages.
function M.type_name(v)
  local t = type(v)
  if t == "table" and getmetatable(v) and getmetatable(v).__name then return getmetatable(v).__name end
  return t
end

--- x, when it is a tensor; fails "fn: expected a tensor, got ..." otherwise.
function M.tensor(fn, x)
  if not class.is_tensor(x) then fail(fn, "expected a tensor, got %s", M.type_name(x)) end
  return x
end

--- An integer from an integer-valued number (2.0 is accepted as 2); fails otherwise. Any
--  64-bit integer is accepted: for sizes, dims, indices and amounts use M.integer.
function M.any_integer(fn, what, v)
  local i = type(v) == "number" and math.tointeger(v) or nil
  if i == nil then
    if type(v) == "number" then fail(fn, "%s must be an integer, got %s", what, tostring(v)) end
    fail(fn, "%s must be an integer, got %s", what, M.type_name(v))
  end
  return i
end

local MAX_NUMEL = shape_of.MAX_NUMEL

--- An integer that takes part in size arithmetic (a size, dim, index, count or amount): at
--  most 2^53 in magnitude, like the sizes of a shape, so sums and products of a few of them
--  cannot overflow.
function M.integer(fn, what, v)
  local i = M.any_integer(fn, what, v)
  if i > MAX_NUMEL or i < -MAX_NUMEL then fail(fn, "%s %d is out of range (at most 2^53 in magnitude)", what, i) end
  return i
end

--- A symbolic size (tcl.var's bind, or arithmetic on one), in its normal form; an index node
--  of another kind is an error naming fn.
function M.size(fn, what, v)
  if not variables.is_size(v) then
    fail(fn, "%s must be an integer or a variable size (T:bind(n)), got %s", what, M.type_name(v))
  end
  local ok, normal = pcall(variables.normal, v)
  if not ok then fail(fn, "%s: %s", what, normal) end
  return normal
end

--- shape, when tcl accepts it (at most 2^53 elements, see tcl.shape); fails naming fn otherwise.
function M.shape_fits(fn, shape)
  local problem = shape_of.problem(shape)
  if problem then fail(fn, "shape %s %s", M.shape_str(shape), problem) end
  return shape
end

-- Functions that build their values in a Lua list on the host (arange, linspace, random
-- numbers, data, tolist) take at most this many: 2^27 values are a 2 GiB Lua table.
M.MAX_HOST_VALUES = 1 << 27

--- n, unless it is more than the MAX_HOST_VALUES `things` (default "values") that fn may
--  build in a Lua list.
function M.host_values(fn, n, things)
  if n > M.MAX_HOST_VALUES then
    fail(fn, "%s %s are more than the 2^27 (%d) built in one Lua list", n < 2 ^ 64 and string.format("%.0f", n)
      or string.format("%g", n), things or "values", M.MAX_HOST_VALUES)
  end
  return n
end

-- The user-facing name of each function of the Tensor class and of each metamethod of its
-- instances (api.tensor fills it: function -> name). Looked up by identity, so the name does
-- not depend on how the user called the function (`local mm = Tensor.matmul; mm(a, b)`).
M.function_names = setmetatable({}, { __mode = "k" })

--- The name of the user-facing function that is running: the outermost frame of the API
--  (metamethods by their operation: __mul is "mul", __call "Tensor"). For errors raised
--  where only the shape of a result is known.
--  A function that was tail-called from another one of the API is named by itself (the
--  caller's frame is gone); the functions check the shapes they make from their arguments
--  themselves, and this is only the safety net.
function M.api_function()
  local outermost, level = nil, 2
  while true do
    local info = debug.getinfo(level, "Sf")
    if info == nil or not is_api_frame(info) then break end
    outermost = info
    level = level + 1
  end
  return outermost and M.function_names[outermost.func] or "Tensor"
end

--- f, wrapped so that a call with a non-nil argument beyond f's parameters fails naming `name`
--  (x:gelu("tanh") is not read as x:gelu()). A method call's object counts as the first
--  argument, as in the signature the message shows. The first `hidden` parameters are not
--  the user's (a metamethod's class) and are left out of the counts and the signature. Vararg
--  functions check their arguments themselves and are returned as they are.
function M.fixed_arguments(name, f, hidden)
  local info = debug.getinfo(f, "u")
  if info.isvararg then return f end
  local nparams = info.nparams
  hidden = hidden or 0
  local function refuse(...)
    local n = select("#", ...)
    while n > nparams and select(n, ...) == nil do n = n - 1 end
    if n > nparams then
      local names = {}
      for i = hidden + 1, nparams do names[#names + 1] = debug.getlocal(f, i) or "?" end
      fail(name, "got %d argument%s, expected at most %d: %s(%s)", n - hidden, n - hidden == 1 and "" or "s",
        nparams - hidden, name,
        table.concat(names, ", "))
    end
  end
  local function checked(...)
    if select("#", ...) > nparams then refuse(...) end
    return f(...)
  end
  M.function_names[checked] = name
  -- checked tail-calls f: errors raised inside f find f as the outermost API frame
  if M.function_names[f] == nil then M.function_names[f] = name end
  return checked
end

--- Replaces every function of `functions` (a module's table) by M.fixed_arguments of it,
--  named prefix .. key, or renamed[key]; a function under several keys (an alias) is wrapped
--  once, under the name of the key that `aliases` does not list.
function M.fix_arguments(functions, prefix, aliases, renamed, hidden)
  local names = {}
  for key, f in pairs(functions) do
    if type(f) == "function" and type(key) == "string" and not (aliases and aliases[key]) then
      names[f] = renamed and renamed[key] or (prefix or "") .. key
    end
  end
  local wrapped = {}
  for key, f in pairs(functions) do
    if type(f) == "function" and type(key) == "string" then
      wrapped[f] = wrapped[f] or M.fixed_arguments(names[f] or (prefix or "") .. key, f, hidden)
      rawset(functions, key, wrapped[f])
    end
  end
  return functions
end

--- An integer >= minimum.
function M.integer_at_least(fn, what, v, minimum)
  local i = M.integer(fn, what, v)
  if i < minimum then fail(fn, "%s must be >= %d, got %d", what, minimum, i) end
  return i
end

--- A number (integer or float).
function M.number(fn, what, v)
  if type(v) ~= "number" then fail(fn, "%s must be a number, got %s", what, M.type_name(v)) end
  return v
end

--- A table; `nil` is allowed when optional is true.
function M.table(fn, what, v, optional)
  if v == nil and optional then return nil end
  if type(v) ~= "table" or class.is_tensor(v) then fail(fn, "%s must be a table, got %s", what, M.type_name(v)) end
  return v
end

-- The first key of t that is not an index of a list (1..#t): a named key or what is after
-- a hole; nil for a plain list.
local function non_list_key(t)
  local n = #t
  for k in pairs(t) do
    if math.type(k) ~= "integer" or k < 1 or k > n then return k end
  end
  return nil
end

local function key_str(k)
  return type(k) == "string" and string.format("'%s'", quote(k)) or tostring(k)
end

--- t, when it is a plain list (keys 1..#t); fails naming fn and `what` otherwise (a table of
--  options or with holes is not read as a shorter list).
function M.list(fn, what, t)
  local k = non_list_key(t)
  if k ~= nil then fail(fn, "%s must be a list, got a table with key %s", what, key_str(k)) end
  return t
end

-- A table given where a dim belongs, described for the error: its first key that is not a
-- list index ("{dim = 2}" is read as options by no dims slot), or the hole in it.
local function dims_table_problem(dims)
  local k = non_list_key(dims)
  if k == nil then return nil end
  local hint = type(k) == "string" and string.format(" (dims are passed positionally: 2, not {%s = 2})", k) or ""
  return string.format("a table with key %s%s", key_str(k), hint)
end

--- The 0-based axis of a user dim (1-based, negative from the end) of a tensor of `shape`.
--  `extra` widens the range by that many dims (unsqueeze takes a dim of the result).
function M.dim(fn, d, shape, extra)
  local ndim = #shape
  local n = ndim + (extra or 0)
  if type(d) == "table" and not class.is_tensor(d) then
    fail(fn, "dim must be an integer, got %s", dims_table_problem(d) or "a table")
  end
  local i = M.integer(fn, "dim", d)
  if i >= 1 and i <= n then return i - 1 end
  if i < 0 and i >= -n then return n + i end
  local hint = i == 0 and " (dims are 1-based)" or ""
  fail(fn, "dim %d out of range for a %d-d tensor of shape %s%s", i, ndim, M.shape_str(shape), hint)
end

--- The shape of flatten(start, stop) of a tensor of `shape` (user dims, default 1 and -1): dims
--  start..stop merged into one; an error when start comes after stop.
function M.flattened_shape(fn, shape, start, stop)
  local a = M.dim(fn, start or 1, shape)
  local b = M.dim(fn, stop or -1, shape)
  if a > b then fail(fn, "start dim %d is after end dim %d for %s", a + 1, b + 1, M.shape_str(shape)) end
  local out, merged = {}, 1
  for i = 1, #shape do
    if i - 1 < a or i - 1 > b then out[#out + 1] = shape[i]
    else
      merged = merged * shape[i]
      if i - 1 == b then out[#out + 1] = merged end
    end
  end
  return out
end

--- Sorted 0-based axes from nil (every axis), one dim or a table of dims; no duplicates.
function M.dims(fn, dims, shape)
  local axes = {}
  if dims == nil then
    for a = 0, #shape - 1 do axes[#axes + 1] = a end
    return axes
  end
  if type(dims) == "table" and not class.is_tensor(dims) then
    local problem = dims_table_problem(dims)
    if problem then fail(fn, "dims must be a dim or a list of dims, got %s", problem) end
    local seen = {}
    for _, d in ipairs(dims) do
      local a = M.dim(fn, d, shape)
      if seen[a] then fail(fn, "dim %d is given twice for shape %s", a + 1, M.shape_str(shape)) end
      seen[a] = true
      axes[#axes + 1] = a
    end
    table.sort(axes)
    return axes
  end
  if type(dims) ~= "number" then fail(fn, "dim must be an integer or a table of dims, got %s", M.type_name(dims)) end
  axes[1] = M.dim(fn, dims, shape)
  return axes
end

--- A shape from varargs or from one table: `f(2, 3)` and `f({2, 3})` both give {2, 3}.
--  Returns the shape and the index of the first argument after it (for trailing options).
function M.shape_args(fn, ...)
  local n = select("#", ...)
  local first = ...
  local list, next_index
  if type(first) == "table" and not class.is_tensor(first) then
    list, next_index = first, 2
  else
    list, next_index = {}, 1
    for i = 1, n do
      local v = select(i, ...)
      if type(v) ~= "number" and not variables.is_symbolic(v) then break end
      list[i] = v
      next_index = i + 1
    end
  end
  local shape = {}
  for i = 1, #list do
    if variables.is_symbolic(list[i]) then
      shape[i] = M.size(fn, "size", list[i]) -- a variable size (never negative: checked with the shape)
    else
      local size = M.integer(fn, "size", list[i])
      if size < 0 then fail(fn, "sizes must be >= 0, got %s", M.shape_str(list)) end
      shape[i] = size
    end
  end
  for k in pairs(list) do
    if math.type(k) ~= "integer" or k < 1 or k > #list then
      fail(fn, "a shape is a list of sizes, got a table with key %s", tostring(k))
    end
  end
  return M.shape_fits(fn, shape), next_index
end

--- A shape given as one argument: a size or a table of sizes (full, randint).
function M.shape(fn, shape)
  if type(shape) == "number" then shape = { shape } end
  if type(shape) ~= "table" or class.is_tensor(shape) then
    fail(fn, "shape must be a table of sizes, got %s", M.type_name(shape))
  end
  return (M.shape_args(fn, shape))
end

--- A shape (varargs or one table) followed by an optional options table: zeros(2, 3),
--  zeros({2, 3}), zeros(2, 3, {dtype = "int32"}). Returns the shape and the options (or nil).
function M.shape_and_options(fn, ...)
  local shape, next_index = M.shape_args(fn, ...)
  local n = select("#", ...)
  local opts = nil
  if next_index <= n then
    opts = select(next_index, ...)
    if type(opts) ~= "table" or class.is_tensor(opts) then
      fail(fn, "sizes must be integers, got %s", M.type_name(opts))
    end
    if next_index < n then fail(fn, "too many arguments: a shape and an options table expected") end
  end
  return shape, opts
end

--- Options table {dtype=, device=, ...}: nil becomes {}, unknown keys fail.
function M.options(fn, opts, known)
  if opts == nil then return {} end
  if type(opts) ~= "table" or class.is_tensor(opts) then
    fail(fn, "options must be a table, got %s", M.type_name(opts))
  end
  for k in pairs(opts) do
    if not known[k] then fail(fn, "unknown option '%s'", quote(k)) end
  end
  return opts
end

-- Shape helpers are tcl.shape's (one definition for the front end and the scheduler).
M.numel = shape_of.numel
M.copy = shape_of.copy
M.same_shape = shape_of.equal

return M
