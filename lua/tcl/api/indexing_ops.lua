-- tcl.api.indexing_ops — nonzero and masked_select (their sizes depend on the data: they read it
-- on the host), tensor indexing t[index] / t[mask] and assignment through them, diag/diagonal,
-- roll, repeat_interleave, meshgrid and unfold. Indices are 1-based, like every index in tcl.
-- Layer: lua/tcl/api.
local check = require "tcl.api.check"
local class = require "tcl.api.class"
local nodes = require "tcl.api.nodes"
local index_checks = require "tcl.api.index_checks"

local fail, is_tensor = check.fail, class.is_tensor
local M = {}

local function tensor_arg(fn, v, what)
  if not is_tensor(v) then fail(fn, "%s must be a Tensor, got %s", what or "input", check.type_name(v)) end
  return v
end

local function flat(v, out)
  if type(v) == "table" then for _, x in ipairs(v) do flat(x, out) end else out[#out + 1] = v end
  return out
end

--- The 1-based positions of the non-zero (true) entries as an int64 tensor (count, ndim), in
--  row-major order (torch.nonzero + 1). It reads x on the host (its size depends on the data).
function M.nonzero(x)
  tensor_arg("nonzero", x)
  local shape = x._shape
  local values = #shape == 0 and { x:item() } or flat(x:tolist(), {})
  local rows = {}
  for i, v in ipairs(values) do
    if v ~= 0 and v ~= false then
      local p, row = i - 1, {}
      for d = #shape, 1, -1 do
        row[d] = p % shape[d] + 1
        p = p // shape[d]
      end
      rows[#rows + 1] = row
    end
  end
  if #rows == 0 or #shape == 0 then
    return class.Tensor.zeros({ #rows, #shape }, { dtype = "int64", device = x.device })
  end
  return class.Tensor(rows, { dtype = "int64", device = x.device })
end

--- The entries of x where the bool mask (broadcast to x) is true, as a 1-d tensor; reads the
--  mask on the host (the result's size depends on it).
function M.masked_select(x, mask)
  local fn = "masked_select"
  tensor_arg(fn, x)
  tensor_arg(fn, mask, "mask")
  if not mask.uop.dtype.is_bool then fail(fn, "mask must be a bool tensor, got %s", mask.uop.dtype.name) end
  local shape = {}
  local n = math.max(#x._shape, #mask._shape)
  for i = 1, n do
    local a, b = x._shape[#x._shape - n + i] or 1, mask._shape[#mask._shape - n + i] or 1
    if a ~= b and a ~= 1 and b ~= 1 then
      fail(fn, "mask %s does not broadcast to input %s", check.shape_str(mask._shape), check.shape_str(x._shape))
    end
    shape[i] = math.max(a, b)
  end
  local total = check.numel(shape)
  local xs = x:reshape(#x._shape == 0 and { 1 } or x._shape):expand(table.unpack(shape)):reshape({ total })
  local ms = mask:reshape(#mask._shape == 0 and { 1 } or mask._shape):expand(table.unpack(shape)):reshape({ total })
  local picked = {}
  for i, v in ipairs(ms:tolist()) do if v then picked[#picked + 1] = i end end
  if #picked == 0 then return xs:narrow(1, 1, 0) end
  return xs:index_select(1, class.Tensor(picked, { dtype = "int64", device = x.device }))
end

--- values[, inverse][, counts]: the distinct entries of x (flattened) in ascending order, as
--  torch.unique(sorted=True, dim=None); opts.return_inverse gives each entry's 1-based position in
--  values (x's shape), opts.return_counts how often each value occurs. Reads x on the host (the
--  size depends on the data); NaNs are each distinct and sort last (torch leaves their place unspecified).
function M.unique(x, opts)
  local fn = "unique"
  tensor_arg(fn, x)
  opts = check.options(fn, opts, { return_inverse = true, return_counts = true, sorted = true })
  if opts.sorted == false then fail(fn, "sorted = false is not supported (the values are always sorted)") end
  local values = #x._shape == 0 and { x:item() } or flat(x:tolist(), {})
  local keyed = {}
  for i, v in ipairs(values) do keyed[i] = { v = v, i = i } end
  local function key(v) return type(v) == "boolean" and (v and 1 or 0) or v end
  table.sort(keyed, function(a, b)
    local ka, kb = key(a.v), key(b.v)
    if ka ~= ka or kb ~= kb then
      if ka ~= ka and kb ~= kb then return a.i < b.i end
      return kb ~= kb
    end
    if ka ~= kb then return ka < kb end
    return a.i < b.i
  end)
  local distinct, counts, inverse = {}, {}, {}
  for _, e in ipairs(keyed) do
    local last = distinct[#distinct]
    if #distinct == 0 or key(last) ~= key(e.v) or e.v ~= e.v then
      distinct[#distinct + 1] = e.v
      counts[#distinct] = 0
    end
    counts[#distinct] = counts[#distinct] + 1
    inverse[e.i] = #distinct
  end
  local dtype, device = x.uop.dtype.name, x.device
  local out = #distinct == 0 and class.Tensor.zeros({ 0 }, { dtype = dtype, device = device })
    or class.Tensor(distinct, { dtype = dtype, device = device })
  local results = { out }
  if opts.return_inverse then
    local inv = #inverse == 0 and class.Tensor.zeros({ 0 }, { dtype = "int64", device = device })
      or class.Tensor(inverse, { dtype = "int64", device = device })
    results[#results + 1] = inv:reshape(x._shape)
  end
  if opts.return_counts then
    results[#results + 1] = #counts == 0 and class.Tensor.zeros({ 0 }, { dtype = "int64", device = device })
      or class.Tensor(counts, { dtype = "int64", device = device })
  end
  return table.unpack(results)
end

--- t[index] for an integer tensor index (1-based rows of dim 1: the result has index's shape
--  followed by t's other dims) or a bool mask (masked_select). Tensor's t[...] calls this.
function M._tensor_index(t, key)
  if key.uop.dtype.is_bool then return M.masked_select(t, key) end
  if not key.uop.dtype.is_int then
    fail("index", "a tensor index must hold integers (1-based) or bools, got %s", key.uop.dtype.name)
  end
  if #t._shape == 0 then fail("index", "cannot index a 0-d tensor with a tensor") end
  local n = check.numel(key._shape)
  local rows = t:index_select(1, key:reshape({ n }))
  local shape = {}
  for _, s in ipairs(key._shape) do shape[#shape + 1] = s end
  for d = 2, #t._shape do shape[#shape + 1] = t._shape[d] end
  return rows:reshape(shape)
end

--- t[index] = value / t[mask] = value: writes value (a number or a tensor broadcast to the
--  selected rows / entries) into t at once.
function M._tensor_index_put(t, key, value)
  local replaced
  if key.uop.dtype.is_bool then
    if is_tensor(value) and #value._shape == 1 and check.numel(value._shape) > 1 then
      fail("index", "t[mask] = v takes a number or a tensor that broadcasts to t, not a list of %d values",
        value._shape[1])
    end
    replaced = class.Tensor.where(key, value, t)
  elseif key.uop.dtype.is_int then
    local n = check.numel(key._shape)
    local idx = key:reshape({ n })
    index_checks.check_range("index", idx, t._shape[1], "row indices")
    local rest = {}
    for d = 2, #t._shape do rest[#rest + 1] = t._shape[d] end
    local rows = { n, table.unpack(rest) }
    local v = value
    if not is_tensor(v) then v = class.Tensor.full(rows, v, { dtype = t.uop.dtype.name, device = t.device }) end
    v = v:cast(t.uop.dtype.name):expand(table.unpack(rows))
    local view = { n }
    for _ = 2, #t._shape do view[#view + 1] = 1 end
    replaced = t:scatter(1, idx:reshape(view):expand(table.unpack(rows)), v)
  else
    fail("index", "a tensor index must hold integers (1-based) or bools, got %s", key.uop.dtype.name)
  end
  class.Tensor.assign(t, replaced:cast(t.uop.dtype.name))
  class.Tensor.realize(t)
end

--- diagonal(offset, dim1, dim2): the diagonal of the dims dim1, dim2 (default 1, 2) as the last
--  dim, offset > 0 above the main one; a view.
function M.diagonal(x, offset, dim1, dim2)
  local fn = "diagonal"
  tensor_arg(fn, x)
  offset = offset == nil and 0 or check.integer(fn, "offset", offset)
  local a = check.dim(fn, dim1 or 1, x._shape)
  local b = check.dim(fn, dim2 or 2, x._shape)
  if a == b then fail(fn, "dim1 and dim2 are the same dim %d", a + 1) end
  local order = {}
  for d = 0, #x._shape - 1 do if d ~= a and d ~= b then order[#order + 1] = d end end
  order[#order + 1], order[#order + 2] = a, b
  local y = nodes.permute(x, order)
  local r, c = x._shape[a + 1], x._shape[b + 1]
  local count = offset >= 0 and math.max(0, math.min(r, c - offset)) or math.max(0, math.min(r + offset, c))
  local row0, col0 = offset >= 0 and 0 or -offset, offset >= 0 and offset or 0
  local lead = {}
  for i = 1, #order - 2 do lead[i] = y._shape[i] end
  if count == 0 then
    local shape = { table.unpack(lead) }
    shape[#shape + 1] = 0
    return class.Tensor.zeros(shape, { dtype = x.uop.dtype.name, device = x.device })
  end
  -- the window [row0, row0 + count) x [col0, col0 + count) flattened: the diagonal is every
  -- (count + 1)-th element
  local window = {}
  for i = 1, #lead do window[2 * i - 1], window[2 * i] = 0, lead[i] end
  window[#window + 1], window[#window + 2] = row0, row0 + count
  window[#window + 1], window[#window + 2] = col0, col0 + count
  local sq = nodes.shrink(y, window)
  local flat_shape = { table.unpack(lead) }
  flat_shape[#flat_shape + 1] = count * count
  local f = nodes.reshape(sq, flat_shape)
  local padded = { table.unpack(lead) }
  local amounts = {}
  for i = 1, #lead do amounts[2 * i - 1], amounts[2 * i] = 0, 0 end
  amounts[#amounts + 1], amounts[#amounts + 2] = 0, count
  f = nodes.pad(f, amounts) -- count * (count + 1) elements: rows of count + 1, column 0
  padded[#padded + 1], padded[#padded + 2] = count, count + 1
  f = nodes.reshape(f, padded)
  local keep = {}
  for i = 1, #lead do keep[2 * i - 1], keep[2 * i] = 0, lead[i] end
  keep[#keep + 1], keep[#keep + 2], keep[#keep + 3], keep[#keep + 4] = 0, count, 0, 1
  local out = { table.unpack(lead) }
  out[#out + 1] = count
  return nodes.reshape(nodes.shrink(f, keep), out)
end

--- diag(x, offset): a 1-d x becomes the square matrix with x on diagonal offset; a 2-d x gives
--  that diagonal (torch.diag).
function M.diag(x, offset)
  local fn = "diag"
  tensor_arg(fn, x)
  offset = offset == nil and 0 or check.integer(fn, "offset", offset)
  if #x._shape == 2 then return M.diagonal(x, offset) end
  if #x._shape ~= 1 then fail(fn, "needs a 1-d or 2-d tensor, got shape %s", check.shape_str(x._shape)) end
  local n = x._shape[1]
  local size = n + math.abs(offset)
  local r = class.Tensor.arange(1, size + 1, { dtype = "int64", device = x.device }):reshape({ size, 1 })
  local c = class.Tensor.arange(1, size + 1, { dtype = "int64", device = x.device }):reshape({ 1, size })
  local on = (c - r):eq(offset)
  -- the value on row r (offset >= 0) or column c (offset < 0)
  local padded = x:pad({ { 0, math.abs(offset) } }, 0)
  local values = offset >= 0 and padded:reshape({ size, 1 }) or padded:reshape({ 1, size })
  local zero = x.uop.dtype.is_bool and false or 0
  return class.Tensor.where(on, values, zero)
end

--- Rolls x by shifts along dims (numbers or lists; without dims, the flattened tensor).
function M.roll(x, shifts, dims)
  local fn = "roll"
  tensor_arg(fn, x)
  if dims == nil then
    local n = check.numel(x._shape)
    return M.roll(x:reshape({ n }), shifts, 1):reshape(x._shape)
  end
  if type(shifts) ~= "table" then shifts = { shifts } end
  if type(dims) ~= "table" then dims = { dims } end
  if #shifts ~= #dims then fail(fn, "%d shifts for %d dims", #shifts, #dims) end
  local y = x
  for i, s in ipairs(shifts) do
    s = check.integer(fn, "shift", s)
    local d = check.dim(fn, dims[i], x._shape) + 1
    local n = x._shape[d]
    if n > 0 then
      s = s % n
      if s ~= 0 then y = class.Tensor.cat({ y:narrow(d, n - s + 1, s), y:narrow(d, 1, n - s) }, d) end
    end
  end
  return y
end

--- Each element repeated `repeats` times (a number, or an integer tensor of one count per
--  element along dim, read on the host) along dim (default: x flattened), torch's order.
function M.repeat_interleave(x, repeats, dim)
  local fn = "repeat_interleave"
  tensor_arg(fn, x)
  if dim == nil then x, dim = x:reshape({ check.numel(x._shape) }), 1 end
  local axis = check.dim(fn, dim, x._shape) + 1
  local n = x._shape[axis]
  if not is_tensor(repeats) then
    local r = check.integer_at_least(fn, "repeats", repeats, 0)
    local shape = {}
    for d = 1, #x._shape do
      shape[#shape + 1] = x._shape[d]
      if d == axis then shape[#shape + 1] = 1 end
    end
    local grown = {}
    for i, s in ipairs(shape) do grown[i] = s end
    grown[axis + 1] = r
    local out = {}
    for d = 1, #x._shape do out[d] = d == axis and n * r or x._shape[d] end
    return x:reshape(shape):expand(table.unpack(grown)):reshape(out)
  end
  local counts = repeats:tolist()
  if type(counts) ~= "table" then counts = { counts } end
  if #counts == 1 and n ~= 1 then
    local c = counts[1]
    counts = {}
    for i = 1, n do counts[i] = c end
  end
  if #counts ~= n then fail(fn, "repeats has %d counts for a dim of size %d", #counts, n) end
  local picked = {}
  for i, c in ipairs(counts) do
    if c < 0 then fail(fn, "repeats must be >= 0, got %d", c) end
    for _ = 1, c do picked[#picked + 1] = i end
  end
  if #picked == 0 then return x:narrow(axis, 1, 0) end
  return x:index_select(axis, class.Tensor(picked, { dtype = "int64", device = x.device }))
end

--- Grids from 1-d tensors (a list or several arguments); indexing "ij" (default) or "xy".
function M.meshgrid(...)
  local fn = "meshgrid"
  local args = table.pack(...)
  local list, indexing = args, "ij"
  if args.n >= 1 and type(args[1]) == "table" and not is_tensor(args[1]) then
    list, indexing = args[1], args[2] or "ij"
  elseif args.n >= 1 and type(args[args.n]) == "string" then
    indexing = args[args.n]
    list = { table.unpack(args, 1, args.n - 1) }
  end
  if indexing ~= "ij" and indexing ~= "xy" then
    fail(fn, "indexing must be 'ij' or 'xy', got %s", tostring(indexing))
  end
  local sizes = {}
  for i, t in ipairs(list) do
    tensor_arg(fn, t, "argument " .. i)
    if #t._shape > 1 then fail(fn, "argument %d must be 0-d or 1-d, got shape %s", i, check.shape_str(t._shape)) end
    sizes[i] = check.numel(t._shape)
  end
  local n = #list
  local order = {}
  for i = 1, n do order[i] = i end
  if indexing == "xy" and n >= 2 then order[1], order[2] = 2, 1 end
  local shape = {}
  for i = 1, n do shape[i] = sizes[order[i]] end
  local out = {}
  for i, t in ipairs(list) do
    local view = {}
    for d = 1, n do view[d] = order[d] == i and sizes[i] or 1 end
    out[i] = t:reshape(view):expand(table.unpack(shape))
  end
  return table.unpack(out, 1, n)
end

--- unfold(dim, size, step): the windows of `size` elements every `step` along dim, as a new
--  last dim (torch.Tensor.unfold); a view.
function M.unfold(x, dim, size, step)
  local fn = "unfold"
  tensor_arg(fn, x)
  local axis = check.dim(fn, dim, #x._shape == 0 and { 1 } or x._shape) + 1
  size = check.integer_at_least(fn, "size", size, 0)
  step = check.integer_at_least(fn, "step", step, 1)
  local n = x._shape[axis] or 1
  if size > n then fail(fn, "size %d is larger than dim %d of size %d", size, axis, n) end
  local count = (n - size) // step + 1
  local parts = {}
  for k = 1, count do parts[k] = x:narrow(axis, (k - 1) * step + 1, size):unsqueeze(axis) end
  local stacked = count == 1 and parts[1] or class.Tensor.cat(parts, axis) -- (.., count, size, ..)
  local order = {}
  for d = 0, #stacked._shape - 1 do if d ~= axis then order[#order + 1] = d end end
  order[#order + 1] = axis
  return nodes.permute(stacked, order)
end

return M
