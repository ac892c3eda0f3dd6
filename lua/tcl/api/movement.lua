-- tcl.api.movement — Tensor methods that move data without computing on it: reshape, permute,
-- expand, pad, flip, slicing, indexing, cat/stack, repeat, split. Layer: lua/tcl/api.
--
-- Dims and indices are 1-based, negative ones count from the end (-1 is the last); they
-- become the 0-based axes of the RESHAPE/PERMUTE/EXPAND/PAD/SHRINK/FLIP nodes. Every result
-- is a lazy view: no data is copied until a kernel reads it.
local core = require "tcl.core"
local class = require "tcl.api.class"
local check = require "tcl.api.check"
local nodes = require "tcl.api.nodes"
local rules = require "tcl.api.dtype_rules"

local is_tensor, fail, shape_str = class.is_tensor, check.fail, check.shape_str
local M = {}

local tensor_arg = check.tensor
local shapes = require "tcl.shape"
local MAX_NUMEL, MAX_NDIM, shape_problem = shapes.MAX_NUMEL, shapes.MAX_NDIM, shapes.problem
local variables = require "tcl.variables"
local is_symbolic = variables.is_symbolic

--- Integers from varargs or from one table (sizes may be negative: -1 has meanings here).
local function int_list(fn, what, ...)
  local list = ...
  if type(list) ~= "table" or is_tensor(list) then
    list = table.pack(...) ; list.n = nil
  else
    check.list(fn, what .. "s", list)
    if select("#", ...) > 1 then
      fail(fn, "the %ss are one table or several integers, got a table and %d more arguments", what,
        select("#", ...) - 1)
    end
  end
  local out = {}
  for i = 1, #list do
    local v = list[i]
    out[i] = is_symbolic(v) and check.size(fn, what, v) or check.integer(fn, what, v)
  end
  return out
end

-- ---------------------------------------------------------------------------------------
-- reshape family

-- reshape under the name fn ("reshape" or "view"), for the error messages.
-- reshape with a symbolic size, or of a tensor with one: the sizes' product must equal the
-- element count as an expression (for every value of the variables); a -1 is inferred from
-- this call's values and checked the same way.
local function symbolic_reshape(fn, x, sizes)
  local numel = nodes.numel(x._shape)
  local infer_at, known = nil, 1
  for i, s in ipairs(sizes) do
    if s == -1 then
      if infer_at then fail(fn, "only one size can be -1, got %s", shape_str(sizes)) end
      infer_at = i
    else
      if not is_symbolic(s) and s < 0 then fail(fn, "sizes must be >= 0 or -1, got %s", shape_str(sizes)) end
      known = variables.mul(known, s)
    end
  end
  if infer_at then
    local total, part = variables.value(numel), variables.value(known)
    local inferred = part ~= 0 and total % part == 0 and total // part or nil
    if not inferred or not variables.equal(variables.mul(known, inferred), numel) then
      fail(fn, "cannot reshape %s to %s: the -1 is not the same for every value of the variables (give every size)",
        shape_str(x._shape), shape_str(sizes))
    end
    sizes[infer_at] = inferred
  end
  local product = nodes.numel(sizes)
  -- binding a tensor of known size to a shape of variables: their values must fit it
  local binds = not is_symbolic(numel) and is_symbolic(product) and variables.try_value(product) == numel
  if not binds and not variables.equal(product, numel) then
    fail(fn, "cannot reshape %s (%s elements) to %s (%s elements)", shape_str(x._shape), variables.format(numel),
      shape_str(sizes), variables.format(product))
  end
  return nodes.reshape(x, check.shape_fits(fn, sizes))
end

local function reshape_as(fn, x, ...)
  tensor_arg(fn, x)
  local sizes = int_list(fn, "size", ...)
  if shapes.is_symbolic(sizes) or shapes.is_symbolic(x._shape) then return symbolic_reshape(fn, x, sizes) end
  local numel = nodes.numel(x._shape)
  local infer_at, known = nil, 1
  -- a target with a 0 has no elements, however large its other sizes (each at most 2^53)
  for _, s in ipairs(sizes) do if s == 0 then known = 0 end end
  for i, s in ipairs(sizes) do
    if s == -1 then
      if infer_at then fail(fn, "only one size can be -1, got %s", shape_str(sizes)) end
      infer_at = i
    elseif s < 0 then
      fail(fn, "sizes must be >= 0 or -1, got %s", shape_str(sizes))
    elseif known ~= 0 then
      -- no product past 2^53 is formed, so a huge size cannot wrap around to a valid count
      if s > MAX_NUMEL // known then
        fail(fn, "cannot reshape %s (%d elements) to %s: more than 2^53 elements", shape_str(x._shape), numel,
          shape_str(sizes))
      end
      known = known * s
    end
  end
  if infer_at then
    if known == 0 or numel % known ~= 0 then
      fail(fn, "cannot reshape %s (%d elements) to %s", shape_str(x._shape), numel, shape_str(sizes))
    end
    sizes[infer_at] = numel // known
  end
  if nodes.numel(sizes) ~= numel then
    fail(fn, "cannot reshape %s (%d elements) to %s (%d elements)", shape_str(x._shape), numel,
      shape_str(sizes), nodes.numel(sizes))
  end
  return nodes.reshape(x, check.shape_fits(fn, sizes))
end

--- reshape(2, 3) or reshape({2, 3}); one size may be -1 (inferred). view is the same.
function M.reshape(x, ...) return reshape_as("reshape", x, ...) end
function M.view(x, ...) return reshape_as("view", x, ...) end

--- Merges dims start..stop (inclusive, default all) into one.
function M.flatten(x, start, stop)
  tensor_arg("flatten", x)
  if #x._shape == 0 then return nodes.reshape(x, { 1 }) end
  return nodes.reshape(x, check.flattened_shape("flatten", x._shape, start, stop))
end

--- Splits dim d into the given sizes (one may be -1).
function M.unflatten(x, d, sizes)
  tensor_arg("unflatten", x)
  local axis = check.dim("unflatten", d, x._shape)
  check.table("unflatten", "sizes", sizes)
  local inner = reshape_as("unflatten", nodes.reshape(x, { x._shape[axis + 1] }), sizes)._shape
  local shape = {}
  for i = 1, axis do shape[#shape + 1] = x._shape[i] end
  for _, s in ipairs(inner) do shape[#shape + 1] = s end
  for i = axis + 2, #x._shape do shape[#shape + 1] = x._shape[i] end
  return nodes.reshape(x, check.shape_fits("unflatten", shape))
end

--- Inserts a size-1 dim so that it becomes dim d of the result.
function M.unsqueeze(x, d)
  tensor_arg("unsqueeze", x)
  local axis = check.dim("unsqueeze", d, x._shape, 1)
  local shape = nodes.copy_shape(x)
  table.insert(shape, axis + 1, 1)
  return nodes.reshape(x, check.shape_fits("unsqueeze", shape))
end

--- Removes size-1 dims: all of them (d nil), or those of d (a dim or a table) that have size 1.
function M.squeeze(x, d)
  tensor_arg("squeeze", x)
  local drop = {}
  if d == nil then
    for i, s in ipairs(x._shape) do if s == 1 then drop[i - 1] = true end end
  else
    for _, a in ipairs(check.dims("squeeze", d, x._shape)) do
      if x._shape[a + 1] == 1 then drop[a] = true end
    end
  end
  local shape = {}
  for i, s in ipairs(x._shape) do if not drop[i - 1] then shape[#shape + 1] = s end end
  return nodes.reshape(x, shape)
end

-- ---------------------------------------------------------------------------------------
-- permute, expand

--- permute(3, 1, 2): dim i of the result is dim order[i] of x.
function M.permute(x, ...)
  tensor_arg("permute", x)
  local dims = int_list("permute", "dim", ...)
  local ndim = #x._shape
  local order, seen = {}, {}
  local ok = #dims == ndim
  for i, d in ipairs(dims) do
    local a = (d >= 1 and d <= ndim) and d - 1 or (d < 0 and d >= -ndim) and ndim + d or nil
    if a == nil or seen[a] then ok = false else seen[a] = true; order[i] = a end
  end
  if not ok then
    fail("permute", "%s is not an order of the %d dims of %s", shape_str(dims), ndim, shape_str(x._shape))
  end
  return nodes.permute(x, order)
end

--- Swaps two dims (default 1 and 2).
function M.transpose(x, d1, d2)
  tensor_arg("transpose", x)
  local a = check.dim("transpose", d1 or 1, x._shape)
  local b = check.dim("transpose", d2 or 2, x._shape)
  local order = {}
  for i = 1, #x._shape do order[i] = i - 1 end
  order[a + 1], order[b + 1] = b, a
  return nodes.permute(x, order)
end

--- expand(4, -1, 3): size-1 dims grow, -1 keeps a dim, new dims may be added in front.
function M.expand(x, ...)
  tensor_arg("expand", x)
  local sizes = int_list("expand", "size", ...)
  local have = x._shape
  local extra = #sizes - #have
  local target = {}
  local ok = extra >= 0
  for i, s in ipairs(sizes) do
    local old = have[i - extra]
    if s == -1 then
      if old == nil then ok = false end
      target[i] = old or -1
    elseif not is_symbolic(s) and s < 0 then
      ok = false
      target[i] = s
    else
      if old ~= nil and old ~= 1 and not variables.equal(old, s) then ok = false end
      target[i] = s
    end
  end
  if not ok then fail("expand", "cannot expand %s to %s", shape_str(have), shape_str(sizes)) end
  return nodes.broadcast_to(x, check.shape_fits("expand", target))
end

-- ---------------------------------------------------------------------------------------
-- pad, flip, narrow

--- pad({{before, after}, ...}, value): one pair per dim from the first (missing pairs pad
--  nothing); negative amounts crop; the new cells hold value (default 0). With value a mode
--  'reflect' (mirror without repeating the edge), 'replicate' (repeat the edge) or 'circular'
--  (wrap around), the new cells copy the input instead (amounts >= 0; reflect needs each
--  below the dim's size, circular at most it); 'constant' is value 0.
function M.pad(x, pairs, value)
  tensor_arg("pad", x)
  if value == "constant" then value = nil end
  if type(value) == "string" then return require("tcl.api.pad_modes").apply("pad", x, pairs, value) end
  check.list("pad", "padding", check.table("pad", "padding", pairs))
  local ndim = #x._shape
  if #pairs > ndim then
    fail("pad", "%d (before, after) pairs for a %d-d tensor of shape %s", #pairs, ndim, shape_str(x._shape))
  end
  if value ~= nil and type(value) ~= "number" and type(value) ~= "boolean" then
    fail("pad", "value must be a number, got %s", check.type_name(value))
  end
  local grow, window, padded_shape = {}, {}, {}
  for i = 1, ndim do
    local pair = pairs[i] or { 0, 0 }
    if type(pair) ~= "table" or is_tensor(pair) then
      fail("pad", "padding of dim %d must be a {before, after} pair, got %s", i, check.type_name(pair))
    end
    check.list("pad", "padding of dim " .. i, pair)
    if #pair > 2 then fail("pad", "padding of dim %d must be a {before, after} pair, got %d numbers", i, #pair) end
    local before = check.integer("pad", "padding", pair[1] or 0)
    local after = check.integer("pad", "padding", pair[2] or 0)
    local size = x._shape[i]
    if size + math.min(before, 0) + math.min(after, 0) < 0 then
      fail("pad", "cannot crop dim %d of %s by %d and %d", i, shape_str(x._shape), -math.min(before, 0),
          -math.min(after, 0))
    end
    window[2 * i - 1], window[2 * i] = math.max(-before, 0), size - math.max(-after, 0)
    grow[2 * i - 1], grow[2 * i] = math.max(before, 0), math.max(after, 0)
    padded_shape[i] = size + before + after
  end
  check.shape_fits("pad", padded_shape)
  local cropped = nodes.shrink(x, window)
  local padded = nodes.pad(cropped, grow)
  -- the value becomes one of x's dtype (pad keeps it, as PyTorch's does): checked, not wrapped
  if value ~= nil then value = rules.fill_value("pad", value, x.uop.dtype) end
  if value == nil or value == 0 or value == false or padded == cropped then return padded end
  -- PAD fills zeros; a true-inside mask padded the same way says where the value goes
  local inside = nodes.pad(nodes.const(true, core.dtypes.bool, cropped._shape, x.device), grow)
  return inside:where(padded, value)
end

--- Reverses the given dims (a dim or a table of dims).
function M.flip(x, dims)
  tensor_arg("flip", x)
  if dims == nil then fail("flip", "needs the dims to flip of %s", shape_str(x._shape)) end
  local flags = {}
  for i = 1, #x._shape do flags[i] = 0 end
  for _, a in ipairs(check.dims("flip", dims, x._shape)) do flags[a + 1] = 1 end
  return nodes.flip(x, flags)
end

-- The 0-based position of a 1-based index (negative from the end) into dim d of `shape`.
local function position(fn, what, i, d, shape)
  i = check.integer(fn, what, i)
  local size = shape[d]
  if is_symbolic(size) then
    -- a dim of variable size: the index must lie in it for every value (x[{{1, 1}}] of a (T, 64)
    -- tensor); one counted from the end is a variable position
    local p = i > 0 and i - 1 or variables.add(size, i)
    if i == 0 or variables.min(p) < 0 or variables.min(variables.sub(variables.sub(size, 1), p)) < 0 then
      fail(fn, "%s %d may fall outside dim %d of size %s in %s (it takes %d..%d)", what, i, d, variables.format(size),
        shape_str(shape), variables.min(size), variables.max(size))
    end
    return p
  end
  local p = i > 0 and i - 1 or size + i
  if i == 0 or p < 0 or p >= size then
    fail(fn, "%s %d out of range for dim %d of size %d in %s", what, i, d, size, shape_str(shape))
  end
  return p
end

-- The 0-based position of a symbolic 1-based index i (positive: a variable index never counts
-- from the end) in dim d, checked to lie in the dim for every value of its variables.
local function symbolic_position(fn, what, i, d, shape)
  i = check.size(fn, what, i)
  local p = variables.sub(i, 1)
  if variables.min(p) < 0 or variables.min(variables.sub(variables.sub(shape[d], 1), p)) < 0 then
    fail(fn, "%s %s may fall outside dim %d of size %s in %s (it takes %d..%d)", what, variables.format(i), d,
      variables.format(shape[d]), shape_str(shape), variables.min(i), variables.max(i))
  end
  return p
end

--- The `length` elements of dim d from `start` (1-based, negative from the end).
function M.narrow(x, d, start, length)
  tensor_arg("narrow", x)
  local axis = check.dim("narrow", d, x._shape)
  local size = x._shape[axis + 1]
  length = check.integer_at_least("narrow", "length", length, 0)
  local s
  if length == 0 and (start == size + 1) then s = size
  else s = position("narrow", "start", start, axis + 1, x._shape) end
  if s + length > size then
    fail("narrow", "start %d with length %d runs past dim %d of size %d in %s", start, length, axis + 1, size,
      shape_str(x._shape))
  end
  local window = {}
  for i, n in ipairs(x._shape) do window[2 * i - 1], window[2 * i] = 0, n end
  window[2 * axis + 1], window[2 * axis + 2] = s, s + length
  return nodes.shrink(x, window)
end

-- ---------------------------------------------------------------------------------------
-- indexing

--- t[i]: the i-th slice along the first dim (1-based, negative from the end), a view.
function M.index(x, i)
  tensor_arg("index", x)
  if #x._shape == 0 then fail("index", "cannot index a 0-d tensor of shape ()") end
  local p = position("index", "index", i, 1, x._shape)
  local window, shape = { p, p + 1 }, {}
  for k = 2, #x._shape do
    window[2 * k - 1], window[2 * k] = 0, x._shape[k]
    shape[k - 1] = x._shape[k]
  end
  return nodes.reshape(nodes.shrink(x, window), shape)
end

--- Takes every `step`-th element along each dim (steps >= 1) with one pad/reshape/shrink.
local function stride(x, steps)
  local any = false
  for _, s in ipairs(steps) do if s ~= 1 then any = true end end
  if not any then return x end
  local grow, split, window, result = {}, {}, {}, {}
  for i, n in ipairs(x._shape) do
    local s = steps[i]
    local count = (n + s - 1) // s
    grow[2 * i - 1], grow[2 * i] = 0, count * s - n
    split[2 * i - 1], split[2 * i] = count, s
    window[4 * i - 3], window[4 * i - 2], window[4 * i - 1], window[4 * i] = 0, count, 0, 1
    result[i] = count
  end
  local padded = nodes.pad(x, grow)
  return nodes.reshape(nodes.shrink(nodes.reshape(padded, split), window), result)
end

--- slice({start, stop, step}, ...): one table per dim (inclusive 1-based start and stop,
--  negative from the end, step may be negative, {} for the whole dim); a number instead of
--  a table picks that index and drops the dim. Missing trailing dims are taken whole.
function M.slice(x, ...)
  tensor_arg("slice", x)
  local specs = table.pack(...)
  local ndim = #x._shape
  if specs.n > ndim then
    fail("slice", "%d dims given for a %d-d tensor of shape %s", specs.n, ndim, shape_str(x._shape))
  end
  local window, flips, steps, keep = {}, {}, {}, {}
  for d = 1, ndim do
    local size, spec = x._shape[d], specs[d]
    local lo, hi, flip, step, kept = 0, size, 0, 1, true
    if math.type(spec) == "integer" or (type(spec) == "number" and math.tointeger(spec)) then
      lo = position("slice", "index", spec, d, x._shape)
      hi, kept = variables.add(lo, 1), false
    elseif is_symbolic(spec) then
      lo = symbolic_position("slice", "index", spec, d, x._shape)
      hi, kept = variables.add(lo, 1), false
    elseif type(spec) == "table" and not is_tensor(spec) and (is_symbolic(spec[1]) or is_symbolic(spec[2])
        or (is_symbolic(size) and (spec[3] == nil or spec[3] == 1))) then
      -- a window with a variable start or stop (step 1): cache[{1, T}], cache[{pos, pos}]; or
      -- a window of a dim of variable size (x[{{1, 1}}] of a (T, 64) tensor)
      if spec[3] ~= nil and spec[3] ~= 1 then
        fail("slice", "dim %d: a window with a variable start or stop takes step 1, got %s", d, tostring(spec[3]))
      end
      local function bound(v, what, default)
        if v == nil then return default end
        if is_symbolic(v) then return symbolic_position("slice", what, v, d, x._shape) end
        local p = position("slice", what, v, d, x._shape)
        return p
      end
      lo = bound(spec[1], "start", 0)
      hi = variables.add(bound(spec[2], "stop", variables.sub(size, 1)), 1)
      if variables.min(variables.sub(hi, lo)) < 0 then
        fail("slice", "dim %d: the window %s..%s may end before it starts (for some values of its variables)", d,
          variables.format(variables.add(lo, 1)), variables.format(hi))
      end
    elseif spec ~= nil then
      if type(spec) ~= "table" or is_tensor(spec) then
        fail("slice", "dim %d: expected {start, stop, step} or an index, got %s", d, check.type_name(spec))
      end
      step = spec[3] == nil and 1 or check.integer("slice", "step", spec[3])
      if step == 0 then fail("slice", "step of dim %d must not be 0 (shape %s)", d, shape_str(x._shape)) end
      if step > 0 then
        local first = spec[1] == nil and 0 or position("slice", "start", spec[1], d, x._shape)
        local last = spec[2] == nil and size - 1 or position("slice", "stop", spec[2], d, x._shape)
        lo, hi = first, math.max(first, last + 1)
      else
        local first = spec[1] == nil and size - 1 or position("slice", "start", spec[1], d, x._shape)
        local last = spec[2] == nil and 0 or position("slice", "stop", spec[2], d, x._shape)
        lo, hi, flip, step = math.min(last, first + 1), first + 1, 1, -step
      end
    end
    window[2 * d - 1], window[2 * d] = lo, hi
    flips[d], steps[d], keep[d] = flip, step, kept
  end
  local y = stride(nodes.flip(nodes.shrink(x, window), flips), steps)
  local shape = {}
  for d = 1, ndim do if keep[d] then shape[#shape + 1] = y._shape[d] end end
  return nodes.reshape(y, shape)
end

-- ---------------------------------------------------------------------------------------
-- joining and splitting

local function tensor_list(fn, list)
  if type(list) ~= "table" or is_tensor(list) then
    fail(fn, "expected a list of tensors, got %s", check.type_name(list))
  end
  if #list == 0 then fail(fn, "needs at least one tensor") end
  for i = 1, #list do -- not ipairs: a hole (nil) is reported, not taken for the end
    if not is_tensor(list[i]) then fail(fn, "element %d is not a tensor but %s", i, check.type_name(list[i])) end
  end
  return list
end

-- The most pieces one kernel of a cat reads (tcl.schedule.realize_points.MAX_FUSED_LOADS).
local CAT_CHUNK = 32

-- cat under the name fn ("cat", or "stack" for its parts) of a checked list.
local cat_as
function cat_as(fn, list, d)
  local first = list[1]
  local ndim = #first._shape
  if ndim == 0 then fail(fn, "cannot join 0-d tensors (use stack)") end
  local axis = check.dim(fn, d or 1, first._shape)
  local dtype, total = first.uop.dtype, 0
  for i, t in ipairs(list) do
    local ok = #t._shape == ndim
    for k = 1, ndim do
      if k ~= axis + 1 and not variables.equal(t._shape[k], first._shape[k]) then ok = false end
    end
    if not ok then
      fail(fn, "shapes %s and %s do not match outside dim %d", shape_str(first._shape), shape_str(t._shape), axis + 1)
    end
    if t.device ~= first.device then
      fail(fn, "tensors are on different devices, %s and %s (move one with t:to(device))", first.device, t.device)
    end
    if i > 1 then dtype = rules.promote(fn, dtype, t.uop.dtype) end
    total = variables.add(total, t._shape[axis + 1]) -- (a variable size makes a variable total)
    if variables.max(total) > MAX_NUMEL then fail(fn, "the joined dim %d would be longer than 2^53", axis + 1) end
  end
  local joined = nodes.copy_shape(first)
  joined[axis + 1] = total
  check.shape_fits(fn, joined)
  local join_op = dtype.is_bool and "OR" or "ADD"
  -- the join of list[i..j] (of length `length` along the axis): one sum of padded parts
  local function flat(i, j, length)
    local result, offset = nil, 0
    for k = i, j do
      local t = list[k]
      local n = t._shape[axis + 1]
      local grow = {}
      for g = 1, ndim do grow[2 * g - 1], grow[2 * g] = 0, 0 end
      grow[2 * axis + 1], grow[2 * axis + 2] = offset, variables.sub(variables.sub(length, offset), n)
      offset = variables.add(offset, n)
      local part = nodes.pad(nodes.cast(t, dtype), grow)
      result = result == nil and part or nodes.alu(join_op, dtype, { result, part })
    end
    return result
  end
  if #list <= CAT_CHUNK then return flat(1, #list, total) end
  -- More pieces: chunks of CAT_CHUNK stored apart (CONTIGUOUS), then joined the same way, so
  -- no kernel reads more than CAT_CHUNK pieces, and a cat of n pieces costs O(n) to schedule
  -- and compile (one kernel over n pieces took O(n^2): 2,000 in 36 s). Each level copies the
  -- values once more: log_CAT_CHUNK(n) copies in all.
  local chunks = {}
  for i = 1, #list, CAT_CHUNK do
    local j, length = math.min(i + CAT_CHUNK - 1, #list), 0
    for k = i, j do length = variables.add(length, list[k]._shape[axis + 1]) end
    chunks[#chunks + 1] = nodes.contiguous(flat(i, j, length))
  end
  return cat_as(fn, chunks, d)
end

--- Joins tensors along dim d (default 1): each is padded to the full size and they are added
-- (beyond CAT_CHUNK tensors, chunk by chunk: see cat_as).
function M.cat(list, d)
  return (cat_as("cat", tensor_list("cat", list), d))
end

--- Joins same-shape tensors along a new dim d (default 1).
function M.stack(list, d)
  tensor_list("stack", list)
  local first = list[1]
  local axis = check.dim("stack", d or 1, first._shape, 1)
  local parts = {}
  for i, t in ipairs(list) do
    if not check.same_shape(t._shape, first._shape) then
      fail("stack", "shapes %s and %s differ", shape_str(first._shape), shape_str(t._shape))
    end
    local shape = nodes.copy_shape(t)
    table.insert(shape, axis + 1, 1)
    parts[i] = nodes.reshape(t, check.shape_fits("stack", shape))
  end
  return (cat_as("stack", parts, axis + 1))
end

--- Tiles x: repeat(2, 3) repeats dim 1 twice and dim 2 three times; more counts than dims
--  add leading dims. `repeat` is a Lua keyword, so it is called as t["repeat"](t, 2, 3) or
--  by its other name, t:tile(2, 3).
M["repeat"] = function(x, ...)
  tensor_arg("repeat", x)
  local counts = int_list("repeat", "count", ...)
  local ndim = #x._shape
  if #counts < ndim then
    fail("repeat", "needs at least %d counts for shape %s, got %d", ndim, shape_str(x._shape), #counts)
  end
  for _, c in ipairs(counts) do
    if c < 0 then fail("repeat", "counts must be >= 0, got %s", shape_str(counts)) end
  end
  if #counts > MAX_NDIM then
    fail("repeat", "%d counts give as many dims, more than the %d a tensor may have", #counts, MAX_NDIM)
  end
  local lead = #counts - ndim
  local with_ones, expanded, result = {}, {}, {}
  for i = 1, #counts do
    local size = i > lead and x._shape[i - lead] or 1
    if size > 0 and counts[i] > MAX_NUMEL // size then
      fail("repeat", "repeating %s by %s gives more than 2^53 elements", shape_str(x._shape), shape_str(counts))
    end
    with_ones[2 * i - 1], with_ones[2 * i] = 1, size
    expanded[2 * i - 1], expanded[2 * i] = counts[i], size
    result[i] = counts[i] * size
  end
  if shape_problem(result) then
    fail("repeat", "repeating %s by %s gives more than 2^53 elements", shape_str(x._shape), shape_str(counts))
  end
  return nodes.reshape(nodes.expand(nodes.reshape(x, with_ones), expanded), result)
end
M.tile = M["repeat"]

-- split under the name fn ("split" or "chunk").
local function split_as(fn, x, size, d)
  tensor_arg(fn, x)
  local axis = check.dim(fn, d or 1, x._shape)
  local n = x._shape[axis + 1]
  local sizes = {}
  if type(size) == "table" and not is_tensor(size) then
    local sum = 0
    for i, s in ipairs(size) do
      sizes[i] = check.integer_at_least(fn, "size", s, 0)
      sum = sum + sizes[i] -- at most n + 2^53: no overflow
      if sum > n then break end
    end
    if sum ~= n then
      fail(fn, "sizes %s add up to %s, but dim %d of %s has %d", shape_str(size), sum > n and "more" or tostring(sum),
        axis + 1, shape_str(x._shape), n)
    end
  else
    local step = check.integer_at_least(fn, "size", size, 1)
    check.host_values(fn, (n + step - 1) // step, "pieces")
    for start = 0, n - 1, step do sizes[#sizes + 1] = math.min(step, n - start) end
    if n == 0 then sizes[1] = 0 end
  end
  local pieces, offset = {}, 0
  for i, s in ipairs(sizes) do
    pieces[i] = M.narrow(x, axis + 1, offset + 1 <= n and offset + 1 or n + 1, s)
    offset = offset + s
  end
  return pieces
end

--- Pieces along dim d (default 1): of `size` each (the last may be smaller), or of the
--  sizes in a table (they must add up to the dim). Returns a list of tensors.
function M.split(x, size, d) return (split_as("split", x, size, d)) end

--- At most n pieces of equal size (the last may be smaller) along dim d (default 1).
function M.chunk(x, n, d)
  tensor_arg("chunk", x)
  n = check.integer_at_least("chunk", "number of chunks", n, 1)
  local axis = check.dim("chunk", d or 1, x._shape)
  local size = x._shape[axis + 1]
  return (split_as("chunk", x, math.max(1, (size + n - 1) // n), axis + 1))
end

--- A copy that the scheduler must store (a realize point); a tensor already stored in order
-- stays in its buffer.
function M.contiguous(x)
  tensor_arg("contiguous", x)
  return nodes.contiguous(x)
end

--- A copy in a buffer of its own, also of a tensor already stored (to keep a result of
-- tcl.jit past the plan's next call, say).
function M.clone(x)
  tensor_arg("clone", x)
  return nodes.clone(x)
end

--- x on device (any case: "cpu", "EMU", ...); x itself when it is there already. Lazy like
-- every op: the copy runs when the result is realized (before the kernels that read it),
-- and tcl.jit plans replay it. Gradients flow back to x's device.
function M.to(x, device)
  tensor_arg("to", x)
  if type(device) ~= "string" then check.fail("to", "expected a device name, got %s", check.type_name(device)) end
  device = class.checked_device("to", device)
  if device == x.device then return x end
  return nodes.to_device(x, device)
end

return M
