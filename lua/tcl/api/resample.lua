-- tcl.api.resample — interpolate (nearest, linear/bilinear/trilinear, bicubic, area) and
-- pixel_shuffle / pixel_unshuffle. Every mode here is separable: resampling one dim from L to O
-- cells is a fixed (L, O) matrix (each output cell's weights on the input cells, computed here
-- from the source coordinate of the cell), so interpolate is one matrix product per dim; it is
-- differentiable and runs on every device. ONNX's Resize builds its coordinates with M._resample.
local class = require "tcl.api.class"
local check = require "tcl.api.check"
local nn = require "tcl.api.nn"

local is_tensor, fail, shape_str = class.is_tensor, check.fail, check.shape_str
local M = {}

local function tensor_arg(fn, x)
  if not is_tensor(x) then fail(fn, "input must be a tensor, got %s", check.type_name(x)) end
  return x
end

-- Keys's cubic convolution weight at distance d with parameter a (torch: -0.75).
local function cubic_weight(d, a)
  d = math.abs(d)
  if d <= 1 then return ((a + 2) * d - (a + 3)) * d * d + 1 end
  if d < 2 then return ((a * d - 5 * a) * d + 8 * a) * d - 4 * a end
  return 0
end

-- The (size, out) matrix of one dim: spec.source(o) is output cell o's coordinate in input
-- cells (0-based), spec.mode 'nearest' (spec.round(src) picks the cell), 'linear' or 'cubic'
-- (spec.cubic_a, spec.exclude_outside: weights of cells outside the input dropped and the rest
-- renormalized, else those cells are the edge's).
local function axis_matrix(size, out, spec)
  local matrix = {}
  for j = 1, size do
    matrix[j] = {}
    for o = 1, out do matrix[j][o] = 0 end
  end
  local function clamp(i) return math.max(0, math.min(size - 1, i)) end
  for o = 0, out - 1 do
    local src = spec.source(o)
    if spec.mode == "nearest" then
      local i = clamp(spec.round(src))
      matrix[i + 1][o + 1] = 1
    elseif spec.mode == "linear" then
      local base = math.floor(src)
      local t = src - base
      local lo, hi = clamp(base), clamp(base + 1)
      matrix[lo + 1][o + 1] = matrix[lo + 1][o + 1] + (1 - t)
      matrix[hi + 1][o + 1] = matrix[hi + 1][o + 1] + t
    else
      local base = math.floor(src)
      local t = src - base
      local weights, total = {}, 0
      for k = -1, 2 do
        local w = cubic_weight(t - k, spec.cubic_a or -0.75)
        if spec.exclude_outside and (base + k < 0 or base + k > size - 1) then w = 0 end
        weights[k], total = w, total + w
      end
      for k = -1, 2 do
        local w = spec.exclude_outside and weights[k] / total or weights[k]
        local i = clamp(base + k)
        matrix[i + 1][o + 1] = matrix[i + 1][o + 1] + w
      end
    end
  end
  return matrix
end

--- (internal) x resampled along dims: specs[i] = {axis = 1-based dim, out = size, mode, source,
--  round, cubic_a, exclude_outside} (see axis_matrix). Non-float inputs go through float32.
function M._resample(x, specs)
  local dtype = x.uop.dtype
  local work = dtype.is_float and x or x:float()
  for _, spec in ipairs(specs) do
    local size = work._shape[spec.axis]
    local weights = class.Tensor.new(axis_matrix(size, spec.out, spec), { dtype = work.uop.dtype, device = x.device })
    work = work:transpose(spec.axis, -1):matmul(weights):transpose(spec.axis, -1)
  end
  if dtype.is_float then return work end
  return work:round():cast(dtype)
end

local MODES = { nearest = 0, ["nearest-exact"] = 0, linear = 1, bilinear = 2, trilinear = 3, bicubic = 2, area = 0 }

--- Resizes the spatial dims of x (N, C, d1, ..., dn), n = 1 to 3, like torch's interpolate.
--  opts: size (a number or one per dim) or scale_factor (a number or one per dim; the output
--  is floor(size * factor) and the factor, not the size ratio, places the cells), mode
--  ('nearest' (default; torch's: the cell floor(o * in / out)), 'nearest-exact', 'linear'
--  (1-d), 'bilinear' (2-d), 'trilinear' (3-d), 'bicubic' (2-d, a = -0.75), 'area' (adaptive
--  average)), align_corners (linear and cubic modes: the corner cells' centers line up).
function M.interpolate(x, opts)
  local fn = "interpolate"
  tensor_arg(fn, x)
  opts = check.options(fn, opts, { size = true, scale_factor = true, mode = true, align_corners = true })
  local mode = opts.mode or "nearest"
  local need = MODES[mode]
  if need == nil then
    fail(fn, "mode must be nearest, nearest-exact, linear, bilinear, trilinear, bicubic or area, got '%s'",
      check.quote(tostring(mode)))
  end
  local n = #x._shape - 2
  if n < 1 or n > 3 or (need > 0 and n ~= need) then
    fail(fn, "mode '%s' needs a %s input (N, C, spatial...), got shape %s", mode,
      need > 0 and (need + 2 .. "-d") or "3-d to 5-d", shape_str(x._shape))
  end
  if (opts.size == nil) == (opts.scale_factor == nil) then
    fail(fn, "needs exactly one of size and scale_factor")
  end
  local align = opts.align_corners
  if align ~= nil and type(align) ~= "boolean" then
    fail(fn, "align_corners must be a boolean, got %s", check.type_name(align))
  end
  if align ~= nil and (mode == "nearest" or mode == "nearest-exact" or mode == "area") then
    fail(fn, "align_corners only applies to the linear and cubic modes, not '%s'", mode)
  end
  local out, ratio = {}, {}
  if opts.size ~= nil then
    out = nn._per_dim(fn, "size", opts.size, n, nil, 1)
    for i = 1, n do ratio[i] = x._shape[2 + i] / out[i] end
  else
    local factors = opts.scale_factor
    if type(factors) == "number" then
      factors = {}
      for i = 1, n do factors[i] = opts.scale_factor end
    end
    if type(factors) ~= "table" or is_tensor(factors) or #factors ~= n then
      fail(fn, "scale_factor must be a number or a table of %d numbers, got %s", n, check.type_name(opts.scale_factor))
    end
    for i = 1, n do
      local f = check.number(fn, "scale_factor", factors[i])
      if f <= 0 or f ~= f then fail(fn, "scale_factor must be positive, got %s", tostring(f)) end
      out[i] = math.floor(x._shape[2 + i] * f)
      if out[i] < 1 then
        fail(fn, "scale_factor %s makes dim %d of %s empty", tostring(f), 2 + i, shape_str(x._shape))
      end
      ratio[i] = 1 / f
    end
  end
  if mode == "area" then return x:adaptive_avg_pool(out) end
  local specs = {}
  for i = 1, n do
    local size, scale = x._shape[2 + i], ratio[i]
    local spec = { axis = 2 + i, out = out[i] }
    if mode == "nearest" then
      spec.mode, spec.round = "nearest", math.floor
      spec.source = function(o) return o * scale end
    elseif mode == "nearest-exact" then
      spec.mode, spec.round = "nearest", math.floor
      spec.source = function(o) return (o + 0.5) * scale end
    else
      spec.mode = mode == "bicubic" and "cubic" or "linear"
      if align then
        spec.source = function(o) return out[i] > 1 and o * (size - 1) / (out[i] - 1) or 0 end
      else
        spec.source = function(o) return (o + 0.5) * scale - 0.5 end
      end
    end
    specs[i] = spec
  end
  return M._resample(x, specs)
end

--- (..., C * r^2, H, W) -> (..., C, H * r, W * r): the r x r block of output cells of each
--  input cell comes from r^2 consecutive channels (torch's pixel_shuffle).
function M.pixel_shuffle(x, upscale_factor)
  local fn = "pixel_shuffle"
  tensor_arg(fn, x)
  local r = check.integer_at_least(fn, "upscale_factor", upscale_factor, 1)
  local s = x._shape
  local d = #s
  if d < 3 or s[d - 2] % (r * r) ~= 0 then
    fail(fn, "needs (..., C * %d, H, W) for upscale_factor %d, got shape %s", r * r, r, shape_str(s))
  end
  local lead = table.move(s, 1, d - 3, 1, {})
  local c, h, w = s[d - 2] // (r * r), s[d - 1], s[d]
  local split = table.move(lead, 1, #lead, 1, {})
  for _, v in ipairs({ c, r, r, h, w }) do split[#split + 1] = v end
  local order = {}
  for i = 1, #lead do order[i] = i end
  local b = #lead
  for _, v in ipairs({ b + 1, b + 4, b + 2, b + 5, b + 3 }) do order[#order + 1] = v end
  local result = table.move(lead, 1, #lead, 1, {})
  for _, v in ipairs({ c, h * r, w * r }) do result[#result + 1] = v end
  return x:reshape(split):permute(order):reshape(result)
end

--- (..., C, H * r, W * r) -> (..., C * r^2, H, W): the inverse of pixel_shuffle.
function M.pixel_unshuffle(x, downscale_factor)
  local fn = "pixel_unshuffle"
  tensor_arg(fn, x)
  local r = check.integer_at_least(fn, "downscale_factor", downscale_factor, 1)
  local s = x._shape
  local d = #s
  if d < 3 or s[d - 1] % r ~= 0 or s[d] % r ~= 0 then
    fail(fn, "needs (..., C, H, W) with H and W divisible by %d, got shape %s", r, shape_str(s))
  end
  local lead = table.move(s, 1, d - 3, 1, {})
  local c, h, w = s[d - 2], s[d - 1] // r, s[d] // r
  local split = table.move(lead, 1, #lead, 1, {})
  for _, v in ipairs({ c, h, r, w, r }) do split[#split + 1] = v end
  local order = {}
  for i = 1, #lead do order[i] = i end
  local b = #lead
  for _, v in ipairs({ b + 1, b + 3, b + 5, b + 2, b + 4 }) do order[#order + 1] = v end
  local result = table.move(lead, 1, #lead, 1, {})
  for _, v in ipairs({ c * r * r, h, w }) do result[#result + 1] = v end
  return x:reshape(split):permute(order):reshape(result)
end

return M
