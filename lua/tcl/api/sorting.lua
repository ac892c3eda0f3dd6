-- tcl.api.sorting — sort, argsort, randperm and multinomial, built from movement ops,
-- elementwise compare/where and Tensor.rand, so they stay lazy graphs run on the device.
-- Layer: lua/tcl/api.
--
-- Sorting is a bitonic network: the sorted dim goes last, the rest is flattened into rows,
-- and each row is padded to a power of two N with values that sort after every real one.
-- Each of the log2(N) (log2(N) + 1) / 2 passes compares every element with one partner
-- (a FLIP of a reshaped view: the mirror image inside blocks of 2d, or the element d places
-- away) and keeps its own value or takes the partner's (WHERE). Ties are broken by the
-- original position, carried along as a second array: the order is then total, so the network
-- gives the stable order (PyTorch's stable=True). NaN sorts as the largest value. Each pass but
-- the last is stored (contiguous): fused, every pass would read the previous one twice,
-- doubling the work per pass. Indices are 1-based, like argmax's. sort's values are a composite
-- for autograd (tcl.api.gradients.mark): their gradient is sorted back through the network by
-- the indices, O(n log^2 n) like the sort, instead of differentiating each pass.
local core = require "tcl.core"
local class = require "tcl.api.class"
local check = require "tcl.api.check"
local nodes = require "tcl.api.nodes"
local creation = require "tcl.api.creation"
local gradients = require "tcl.api.gradients"
local index_checks = require "tcl.api.index_checks"

local fail = check.fail
local dtypes = core.dtypes
local M = {}

local INT32_MAX = 2147483647

-- The index dtype for positions 0 .. count - 1 (and 1-based indices up to count).
local function index_dtype(count)
  return count <= INT32_MAX and dtypes.int32 or dtypes.int64
end

local function no_extra_arguments(fn, expected, n)
  if n > expected then fail(fn, "too many arguments: expected at most %d, got %d", expected, n) end
end

-- The value that sorts after every real value of dtype dt: NaN for ascending floats (NaN is the
-- largest, and ties among NaNs go by position, which pads have the largest of), -inf for
-- descending ones (a format without infinities, fp8e4m3, saturates it to its lowest value:
-- ties again go by position), and the largest (smallest) integer.
local function pad_value(dt, descending)
  if dt.is_float then return descending and -math.huge or 0 / 0 end
  if dt.is_bool then return not descending end
  if descending then return dt.min end
  if dt.name == "uint64" then return -1 end -- uint64's largest value is stored as its bits, -1
  return dt.max
end

-- Whether key a comes strictly before key b in the sorted order (NaN largest).
local function key_before(a, b, descending)
  local is_float = a.uop.dtype.is_float
  if descending then
    local greater = b:lt(a)
    if is_float then greater = greater:logical_or(a:isnan():logical_and(b:isnan():logical_not())) end
    return greater
  end
  local less = a:lt(b)
  if is_float then less = less:logical_or(b:isnan():logical_and(a:isnan():logical_not())) end
  return less
end

-- (key, position) of a before that of b: positions are distinct, so the order is total.
local function before(a_key, a_pos, b_key, b_pos, descending)
  local first = key_before(a_key, b_key, descending)
  local tie = key_before(b_key, a_key, descending):logical_not()
  return first:logical_or(tie:logical_and(a_pos:lt(b_pos)))
end

-- One compare-exchange pass over rows of width N = blocks * 2 * d: element (h, r) of each block
-- (h in {0, 1}, r < d) meets element (1 - h, d - 1 - r) when mirror, else (1 - h, r). The
-- first of a pair (h = 0) keeps the one that comes before, the second the other. The last pass
-- is not stored: it fuses into whatever uses the result (cutting off the padding, 1-based).
local function pass(keys, positions, payloads, d, mirror, descending, last)
  local rows, width = keys._shape[1], keys._shape[2]
  local blocked = { rows, width // (2 * d), 2, d }
  local flags = { 0, 0, 1, mirror and 1 or 0 }
  local function partner_of(t) return nodes.flip(nodes.reshape(t, blocked), flags) end
  local k, p = nodes.reshape(keys, blocked), nodes.reshape(positions, blocked)
  local pk, pp = partner_of(keys), partner_of(positions)
  local is_first = nodes.pad(nodes.const(true, dtypes.bool, { 1, 1, 1, 1 }, keys.device), { 0, 0, 0, 0, 0, 1, 0, 0 })
  -- exactly one of the two comes before the other: the first takes the partner when the
  -- partner comes first, the second when it comes first itself
  local take = is_first:bitwise_xor(before(k, p, pk, pp, descending))
  local function exchanged(t, partner)
    local result = nodes.reshape(take:where(partner, t), { rows, width })
    return last and result or nodes.contiguous(result)
  end
  local moved = {}
  for i, t in ipairs(payloads) do moved[i] = exchanged(nodes.reshape(t, blocked), partner_of(t)) end
  return exchanged(k, pk), exchanged(p, pp), moved
end

-- Sorts each row of keys (rows, n) along its last dim, stable; payloads (rows, n tensors) move
-- with their keys. Returns the sorted keys, the 0-based original positions (index_dtype(n)) and
-- the moved payloads.
local function sort_rows(keys, descending, payloads)
  payloads = payloads or {}
  local rows, n = keys._shape[1], keys._shape[2]
  local width = 1
  while width < n do width = width * 2 end
  local pos_dtype = index_dtype(width)
  local device = keys.device
  if n <= 1 then
    return keys, nodes.const(0, index_dtype(n), { rows, n }, device), payloads
  end
  local positions = class.Tensor.arange(width, { dtype = pos_dtype.name, device = device })
  positions = nodes.expand(nodes.reshape(positions, { 1, width }), { rows, width })
  if width > n then
    keys = keys:pad({ {}, { 0, width - n } }, pad_value(keys.uop.dtype, descending))
    for i, t in ipairs(payloads) do payloads[i] = t:pad({ {}, { 0, width - n } }) end
  end
  local size = 2
  while size <= width do
    local d = size // 2
    keys, positions, payloads = pass(keys, positions, payloads, d, true, descending, size == width and d == 1)
    d = d // 2
    while d >= 1 do
      keys, positions, payloads = pass(keys, positions, payloads, d, false, descending, size == width and d == 1)
      d = d // 2
    end
    size = size * 2
  end
  local window = { 0, rows, 0, n }
  for i, t in ipairs(payloads) do payloads[i] = nodes.shrink(t, window) end
  return nodes.shrink(keys, window), nodes.cast(nodes.shrink(positions, window), index_dtype(n)), payloads
end

-- x with axis moved last and the other dims flattened into rows; and the function that takes
-- a (rows, n) result back to x's layout.
local function as_rows(x, axis)
  local ndim = #x._shape
  local order = {}
  for a = 0, ndim - 1 do if a ~= axis then order[#order + 1] = a end end
  order[#order + 1] = axis
  local moved = nodes.permute(x, order)
  local n = x._shape[axis + 1]
  local rows = 1
  for a = 0, ndim - 1 do if a ~= axis then rows = rows * x._shape[a + 1] end end
  local inverse = {}
  for i, a in ipairs(order) do inverse[a + 1] = i - 1 end
  local moved_shape = nodes.copy_shape(moved)
  local function back(t) return nodes.permute(nodes.reshape(t, moved_shape), inverse) end
  return nodes.reshape(moved, { rows, n }), back
end

-- The sort of x along 0-based axis: values (in x's dtype) and 0-based positions.
local function sort_along(x, axis, descending, payloads)
  local rows, back = as_rows(x, axis)
  local keys = rows
  if keys.uop.dtype.is_bool then keys = nodes.cast(keys, dtypes.uint8) end
  local moved = {}
  for i, t in ipairs(payloads or {}) do moved[i] = (as_rows(t, axis)) end
  local sorted, positions, moved_payloads = sort_rows(keys, descending, moved)
  for i, t in ipairs(moved_payloads) do moved_payloads[i] = back(t) end
  return back(nodes.cast(sorted, x.uop.dtype)), back(positions), moved_payloads
end

-- The checked (x, axis, descending) of sort and argsort; a 0-d x sorts as one element.
local function sort_args(fn, n, x, dim, descending)
  no_extra_arguments(fn, 3, n)
  check.tensor(fn, x)
  if descending ~= nil and type(descending) ~= "boolean" then
    fail(fn, "descending must be a boolean, got %s", check.type_name(descending))
  end
  local axis
  if #x._shape == 0 then
    if dim ~= nil and dim ~= 1 and dim ~= -1 then
      check.integer(fn, "dim", dim)
      fail(fn, "dim %s out of range for a 0-d tensor (1 or -1)", tostring(dim))
    end
    axis = 0
  else
    if dim ~= nil and type(dim) ~= "number" then fail(fn, "dim must be an integer, got %s", check.type_name(dim)) end
    axis = check.dim(fn, dim or -1, x._shape)
  end
  return axis, descending == true
end

local function one_based(positions) return positions:add(1) end

--- values, indices: x sorted along dim (default -1; 1-based, negative from the end), ascending
--  unless descending. Stable (equal values keep their order); NaN sorts as the largest value.
--  indices are 1-based int32 (int64 past 2^31 - 1 elements): x:gather-like, values[i] =
--  x[indices[i]] along dim. The gradient of values flows back to the element each came from.
function M.sort(...)
  local fn, n = "sort", select("#", ...)
  local x, dim, descending = ...
  local axis, desc = sort_args(fn, n, x, dim, descending)
  local scalar = #x._shape == 0
  local source = scalar and nodes.reshape(x, { 1 }) or x
  local values, positions = sort_along(source, axis, desc)
  local indices = one_based(positions)
  if scalar then values, indices = nodes.reshape(values, {}), nodes.reshape(indices, {}) end
  -- the derivative rules (tcl.patterns) get the network to run from here: they may not require
  -- the API
  values = gradients.mark(values, "sort", { x, indices },
    { axis = axis, descending = desc, unsort = M._unsort, sort_like = M._sort_like })
  return values, indices
end

--- The indices of sort (1-based int32, int64 past 2^31 - 1 elements).
function M.argsort(...)
  local fn, n = "argsort", select("#", ...)
  local x, dim, descending = ...
  local axis, desc = sort_args(fn, n, x, dim, descending)
  if #x._shape == 0 then return nodes.const(1, dtypes.int32, {}, x.device) end
  local _, positions = sort_along(x, axis, desc)
  return one_based(positions)
end

--- The gradient of sort's values (the composite rule of tcl.patterns.gradient): g moved back
--  to where each value came from, i.e. g sorted by the indices. 0-based axis; indices 1-based.
function M._unsort(g, indices, axis)
  if #g._shape == 0 then return g end
  local _, _, moved = sort_along(indices, axis, false, { g })
  return moved[1]
end

--- The tangent of sort's values (tcl.patterns.tangent): t moved like x's values.
function M._sort_like(x, t, axis, descending)
  if #x._shape == 0 then return t end
  local _, _, moved = sort_along(x, axis, descending, { t })
  return moved[1]
end

-- ---------------------------------------------------------------------------------------
-- random permutations and sampling

--- A uniformly random permutation of 1..n: randperm(n, {dtype=, device=}); int32 (int64 past
--  2^31 - 1) unless an integer dtype is given. The argsort of n uniform float32 keys
--  (Tensor.rand): with 2^24 possible keys, ties are rare for small n and keep the order of
--  their positions (a permutation still, very slightly biased).
function M.randperm(...)
  local fn, count = "randperm", select("#", ...)
  no_extra_arguments(fn, 2, count)
  local n, opts = ...
  n = check.integer_at_least(fn, "n", n, 0)
  local dtype, device = creation._options(fn, opts, index_dtype(n))
  if not dtype.is_int then fail(fn, "dtype must be an integer dtype, got %s", dtype.name) end
  if n > dtype.max then
    fail(fn, "n = %d does not fit in %s", n, dtype.name)
  end
  if n == 0 then return nodes.const(0, dtype, { 0 }, device) end
  local keys = class.Tensor.rand(n, { device = device })
  local _, positions = sort_along(keys, 0, false)
  return nodes.cast(one_based(positions), dtype)
end

-- Rows (one per distribution) of a checked probs tensor: (rows, categories), and whether it
-- was 1-d.
local function distributions(fn, probs)
  check.tensor(fn, probs)
  local ndim = #probs._shape
  if ndim ~= 1 and ndim ~= 2 then
    fail(fn, "probs must be 1-d or 2-d, got shape %s", check.shape_str(probs._shape))
  end
  if not probs.uop.dtype.is_float then fail(fn, "probs must be a float tensor, got %s", probs.uop.dtype.name) end
  local categories = probs._shape[ndim]
  if categories == 0 then fail(fn, "probs %s has no categories", check.shape_str(probs._shape)) end
  if ndim == 1 then return nodes.reshape(probs, { 1, categories }), true end
  return probs, false
end

-- Per row (rows, 1): true where the weights are not a distribution (a negative, NaN or infinite
-- weight, or a sum of 0).
local function invalid_rows(weights)
  local bad = weights:lt(0):logical_or(weights:isnan()):logical_or(weights:isinf())
  return bad:any(2, true):logical_or(weights:sum(2, true):eq(0))
end

--- num_samples 1-based int32 category indices per distribution: multinomial(probs, num_samples,
--  replacement). probs is 1-d (categories) or 2-d (distributions, categories) of non-negative
--  weights, not necessarily normalized. Without replacement (the default, as in PyTorch) the
--  samples of a row are distinct: the num_samples smallest exponential races -log(1 - u) / w.
--  With replacement: inverse CDF, the count of cumulative weights <= u * total.
--  The weights are not read on the host: a row with a negative, NaN or infinite weight, or
--  summing to 0, and a sample without replacement past the row's count of non-zero weights,
--  are errors raised by the next read to the host (tcl.api.index_checks); their samples are 0.
function M.multinomial(...)
  local fn, count = "multinomial", select("#", ...)
  no_extra_arguments(fn, 3, count)
  local probs, num_samples, replacement = ...
  local weights, one_d = distributions(fn, probs)
  num_samples = check.integer_at_least(fn, "num_samples", num_samples, 1)
  if replacement ~= nil and type(replacement) ~= "boolean" then
    fail(fn, "replacement must be a boolean, got %s", check.type_name(replacement))
  end
  local rows, categories = weights._shape[1], weights._shape[2]
  if not replacement and num_samples > categories then
    fail(fn, "cannot take %d samples without replacement from %d categories (probs %s)", num_samples, categories,
      check.shape_str(probs._shape))
  end
  check.shape_fits(fn, { rows, num_samples, categories })
  local device = probs.device
  local index = index_dtype(categories)
  local invalid = invalid_rows(weights)
  weights = weights:detach()
  local samples
  if replacement then
    local cdf = weights:cumsum(2)
    local total = nodes.shrink(cdf, { 0, rows, categories - 1, categories })
    cdf = cdf:div(total) -- the last positive category's cumulative weight is exactly 1 > u
    local u = class.Tensor.rand(rows, num_samples, 1, { dtype = cdf.dtype, device = device })
    local passed = nodes.reshape(cdf, { rows, 1, categories }):le(u)
    samples = nodes.reduce(nodes.cast(passed, index), "ADD", { 2 })
    samples = nodes.reshape(samples, { rows, num_samples }):add(1)
  else
    local u = class.Tensor.rand(rows, categories, { dtype = weights.dtype, device = device })
    local race = u:neg():add(1):log():neg():div(weights) -- a weight of 0 never finishes: inf
    local times, positions = sort_rows(race, false)
    local window = { 0, rows, 0, num_samples }
    local finished = nodes.shrink(times, window):isinf():logical_not()
    samples = finished:where(nodes.cast(nodes.shrink(positions, window), index):add(1), 0)
  end
  -- the weights are known only on the device: a bad row is flagged for the next read to the host
  -- (tcl.api.index_checks), and its samples are 0, never a valid index
  index_checks.flag_if(fn, invalid, "a row of probs has a negative, infinite or NaN weight, or weights summing "
    .. "to 0")
  if not replacement then
    index_checks.flag_if(fn, samples:eq(0):logical_and(invalid:logical_not()), string.format("a row of probs has "
      .. "fewer than %d non-zero weights: cannot take %d samples without replacement", num_samples, num_samples))
  end
  samples = invalid:where(0, samples)
  samples = nodes.cast(samples, index)
  if one_d then return nodes.reshape(samples, { num_samples }) end
  return samples
end

return M
