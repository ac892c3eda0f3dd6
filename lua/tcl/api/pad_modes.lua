-- tcl.api.pad_modes — padding that repeats the input instead of filling a value: reflect,
-- replicate and circular (Tensor.pad's string mode, conv's padding_mode, ONNX Pad). Built from
-- shrink, flip, expand and cat, so it is differentiable and runs on every device.
local class = require "tcl.api.class"
local check = require "tcl.api.check"
local nodes = require "tcl.api.nodes"

local fail, shape_str = check.fail, check.shape_str
local M = {}

M.MODES = { reflect = true, replicate = true, circular = true }

-- The half-open 0-based range [lo, hi) of dim `axis` (1-based) of x.
local function range_of(x, axis, lo, hi)
  local window = {}
  for i, n in ipairs(x._shape) do window[2 * i - 1], window[2 * i] = 0, n end
  window[2 * axis - 1], window[2 * axis] = lo, hi
  return nodes.shrink(x, window)
end

-- Pads dim `axis` of x by `before` and `after` copies taken from x as `mode` says.
local function pad_dim(fn, x, axis, before, after, mode)
  local size = x._shape[axis]
  local parts = {}
  local function too_wide(limit, what)
    fail(fn, "%s padding of %d and %d on dim %d of %s needs both %s %d", mode, before, after, axis,
      shape_str(x._shape), what, limit)
  end
  if mode == "reflect" then
    if before >= size or after >= size then too_wide(size, "below the size") end
    if before > 0 then parts[#parts + 1] = range_of(x, axis, 1, before + 1):flip(axis) end
    parts[#parts + 1] = x
    if after > 0 then parts[#parts + 1] = range_of(x, axis, size - 1 - after, size - 1):flip(axis) end
  elseif mode == "replicate" then
    if size == 0 then too_wide(0, "on a dim larger than") end
    local function edge(lo, count)
      local shape = table.move(x._shape, 1, #x._shape, 1, {})
      shape[axis] = count
      return range_of(x, axis, lo, lo + 1):expand(shape)
    end
    if before > 0 then parts[#parts + 1] = edge(0, before) end
    parts[#parts + 1] = x
    if after > 0 then parts[#parts + 1] = edge(size - 1, after) end
  else -- circular
    if before > size or after > size then too_wide(size, "at most the size") end
    if before > 0 then parts[#parts + 1] = range_of(x, axis, size - before, size) end
    parts[#parts + 1] = x
    if after > 0 then parts[#parts + 1] = range_of(x, axis, 0, after) end
  end
  if #parts == 1 then return x end
  return class.Tensor.cat(parts, axis)
end

--- x padded by pairs (one {before, after} per dim from the first; missing pairs pad nothing)
--  in mode reflect, replicate or circular; fn names the user's function in errors.
function M.apply(fn, x, pairs, mode)
  if not M.MODES[mode] then
    fail(fn, "mode must be 'constant', 'reflect', 'replicate' or 'circular', got '%s'", check.quote(mode))
  end
  if type(pairs) ~= "table" or class.is_tensor(pairs) or #pairs > #x._shape then
    fail(fn, "padding must be at most %d {before, after} pairs for shape %s, got %s", #x._shape,
      shape_str(x._shape), check.type_name(pairs))
  end
  for axis = 1, #pairs do
    local pair = pairs[axis]
    if type(pair) ~= "table" or class.is_tensor(pair) then
      fail(fn, "padding of dim %d must be a {before, after} pair, got %s", axis, check.type_name(pair))
    end
    local before = check.integer_at_least(fn, "padding", pair[1] or 0, 0)
    local after = check.integer_at_least(fn, "padding", pair[2] or 0, 0)
    if before > 0 or after > 0 then x = pad_dim(fn, x, axis, before, after, mode) end
  end
  return x
end

return M
