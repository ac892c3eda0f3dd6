-- tcl.api.print — tostring(t) / print(t): the values laid out like numpy and tinygrad print them,
-- followed by the shape and dtype. Layer: lua/tcl/api.
--
--   Tensor([[1, 2],
--           [3, 4]], shape=(2, 2), dtype=int32)
--
-- Columns are right-aligned to the widest shown value. Tensors of more than 1000 elements
-- (or empty ones with more than 1000 empty brackets) are elided: dims longer than 6 show
-- their first and last 3 entries around a "...".
-- Printing realizes the entries it shows.
local check = require "tcl.api.check"
local shapes = require "tcl.shape"
local variables = require "tcl.variables"

local M = {}

local ELIDE_ABOVE = 1000 -- numel above which long dims are elided
local EDGE_ITEMS = 3     -- entries kept at each end of an elided dim
local PREFIX = "Tensor("

-- The entries of a dim of `size` to show: all, or the edges around "..." (0 stands for it).
local function shown_indices(size, elide)
  local list = {}
  if elide and size > 2 * EDGE_ITEMS then
    for i = 1, EDGE_ITEMS do list[#list + 1] = i end
    list[#list + 1] = 0
    for i = size - EDGE_ITEMS + 1, size do list[#list + 1] = i end
  else
    for i = 1, size do list[i] = i end
  end
  return list
end

-- One formatter for all the floats shown, so they line up: integral values as "2.0",
-- very large or small magnitudes in scientific notation, the rest with the same number of
-- decimals (up to 4), like numpy.
local function float_formatter(values)
  local integral, big, small = true, 0, math.huge
  for _, v in ipairs(values) do
    if v == v and v ~= math.huge and v ~= -math.huge then
      if v ~= math.floor(v) then integral = false end
      local a = math.abs(v)
      if a > big then big = a end
      if a ~= 0 and a < small then small = a end
    end
  end
  local function special(v)
    if v ~= v then return "nan" end
    if v == math.huge then return "inf" end
    if v == -math.huge then return "-inf" end
  end
  if big >= 1e8 or (not integral and small < 1e-4) then
    return function(v) return special(v) or string.format("%.4e", v) end
  end
  if integral then
    return function(v) return special(v) or string.format("%.1f", v) end
  end
  -- as many decimals as the most precise value needs (at most 4), the same for all
  local decimals = 1
  for _, v in ipairs(values) do
    if v == v and v ~= math.huge and v ~= -math.huge then
      local digits = #(string.format("%.4f", v):match("%.(%d-)0*$"))
      if digits > decimals then decimals = digits end
    end
  end
  local fixed = "%." .. decimals .. "f"
  return function(v) return special(v) or string.format(fixed, v) end
end

-- Whether long dims are elided: when there are more than ELIDE_ABOVE elements, or, for an
-- empty tensor, more than ELIDE_ABOVE empty brackets (the dims before its first 0, whose
-- product may be far above 2^53: it is not formed).
local function is_elided(shape)
  local n = 1
  for _, size in ipairs(shape) do
    if size == 0 then return false end
    n = n * size
    if n > ELIDE_ABOVE then return true end
  end
  return false
end

--- The printed form of flat row-major `values` of a tensor of `shape` and dtype name
--  `dtype_name`. `values` holds every element, or (when `edges_only` is true and the tensor
--  is elided) only the shown ones: each elided dim cut to its first and last EDGE_ITEMS.
function M._render(values, shape, dtype_name, edges_only, named_shape)
  local ndim = #shape
  local suffix = ", shape=" .. check.shape_str(named_shape or shape) .. ", dtype=" .. dtype_name .. ")"
  local elide = is_elided(shape)
  local cut = {} -- per dim: whether values holds only its edges
  for d = 1, ndim do cut[d] = edges_only and elide and shape[d] > 2 * EDGE_ITEMS end
  local strides, stride = {}, 1
  for d = ndim, 1, -1 do
    strides[d] = stride
    stride = stride * (cut[d] and 2 * EDGE_ITEMS or shape[d])
  end
  -- where entry i (1-based) of dim d is in values
  local function at(d, i)
    if cut[d] and i > EDGE_ITEMS then i = i - (shape[d] - 2 * EDGE_ITEMS) end
    return (i - 1) * strides[d]
  end
  -- first pass: which flat positions are shown
  local shown = {}
  local function collect(depth, offset)
    if depth > ndim then shown[#shown + 1] = offset; return end
    for _, i in ipairs(shown_indices(shape[depth], elide)) do
      if i ~= 0 then collect(depth + 1, offset + at(depth, i)) end
    end
  end
  collect(1, 0)
  local format
  local sample = values[shown[1] and shown[1] + 1]
  if math.type(sample) == "float" then
    local picked = {}
    for k, offset in ipairs(shown) do picked[k] = values[offset + 1] end
    format = float_formatter(picked)
  else
    format = tostring
  end
  local texts, width = {}, 0
  for _, offset in ipairs(shown) do
    local s = format(values[offset + 1])
    texts[offset] = s
    if #s > width then width = #s end
  end
  -- second pass: nested brackets, one line per innermost row, blank lines between blocks
  local function block(depth, offset)
    if depth > ndim then
      local s = texts[offset]
      return string.rep(" ", width - #s) .. s
    end
    local parts = {}
    for _, i in ipairs(shown_indices(shape[depth], elide)) do
      parts[#parts + 1] = i == 0 and "..." or block(depth + 1, offset + at(depth, i))
    end
    if depth == ndim then return "[" .. table.concat(parts, ", ") .. "]" end
    local indent = string.rep(" ", #PREFIX + depth)
    return "[" .. table.concat(parts, "," .. string.rep("\n", ndim - depth) .. indent) .. "]"
  end
  return PREFIX .. block(1, 0) .. suffix
end

--- tostring(t): renders t's values. A large tensor is cut to the entries shown before it
--  is realized, so printing computes and reads those only, however large the tensor is.
function M.to_string(t)
  local shape, shown = t._shape, t
  if shapes.is_symbolic(shape) then
    -- a variable size: the values for this call, the shape with its variables ("T=5")
    local concrete = {}
    for d, size in ipairs(shape) do concrete[d] = variables.value(size) end
    local values = check.numel(concrete) == 0 and {} or t:data()
    return M._render(values, concrete, t.uop.dtype.name, false, shape)
  end
  local elide = is_elided(shape)
  if elide then
    for d = 1, #shape do
      local size = shape[d]
      if size > 2 * EDGE_ITEMS then
        shown = shown.cat({ shown:narrow(d, 1, EDGE_ITEMS), shown:narrow(d, size - EDGE_ITEMS + 1, EDGE_ITEMS) }, d)
      end
    end
  end
  local values = check.numel(shape) == 0 and {} or shown:data()
  return M._render(values, shape, t.uop.dtype.name, elide)
end

return M
