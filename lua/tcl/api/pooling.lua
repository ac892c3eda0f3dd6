-- tcl.api.pooling — N-d max and average pools (1-d, 2-d, 3-d; stride, padding, dilation,
-- ceil_mode, count_include_pad) and adaptive pools. The windows are tcl.api.nn's sliding
-- windows (views, no copies), reduced; ceil_mode pads after so the last partial window exists,
-- and an average's divisor counts, per output cell, the cells it covers (a product over dims,
-- computed here). Adaptive pools work one dim at a time: torch's windows [floor(o*L/O),
-- ceil((o+1)*L/O)) are a box, so their mean is a matrix product per dim and their max a max per
-- dim. max_pool2d and avg_pool2d (tcl.api.nn) keep their own, simpler windows.
local class = require "tcl.api.class"
local check = require "tcl.api.check"
local nn = require "tcl.api.nn"

local is_tensor, fail, shape_str = class.is_tensor, check.fail, check.shape_str
local M = {}

local function tensor_arg(fn, x)
  if not is_tensor(x) then fail(fn, "input must be a tensor, got %s", check.type_name(x)) end
  return x
end

local function lowest(dt)
  return dt.is_float and -math.huge or dt.is_bool and false or dt.min
end

-- Windows of the last n dims: the padded windows view (..., O..., K...), the output sizes and
-- the padding pairs actually used before any ceil_mode extension.
local function pooled_windows(fn, n, x, kernel_size, opts, pad_value, with_dilation)
  tensor_arg(fn, x)
  if #x._shape < n then fail(fn, "needs at least %d dims, got %s", n, shape_str(x._shape)) end
  local kernel = nn._per_dim(fn, "kernel size", kernel_size, n, nil, 1)
  local stride = nn._per_dim(fn, "stride", opts.stride, n, kernel, 1)
  local dilation = nn._per_dim(fn, "dilation", with_dilation and opts.dilation or nil, n, 1, 1)
  local pads = nn._padding_pairs(fn, opts.padding, n)
  local lead = #x._shape - n
  local grown = {}
  for i = 1, n do
    local size = x._shape[lead + i]
    local padded = size + pads[i][1] + pads[i][2]
    local reach = dilation[i] * (kernel[i] - 1) + 1
    if reach > padded then
      fail(fn, "kernel %s (dilation %s) does not fit dim %d of %s, %d with its padding", shape_str(kernel),
        shape_str(dilation), lead + i, shape_str(x._shape), padded)
    end
    local extra = 0
    if opts.ceil_mode then
      local out = -((padded - reach) // -stride[i]) + 1
      -- (a last window that would start in the padding after the input is dropped, as torch)
      if (out - 1) * stride[i] >= size + pads[i][1] then out = out - 1 end
      extra = math.max(0, (out - 1) * stride[i] + reach - padded)
    end
    grown[i] = { pads[i][1], pads[i][2] + extra }
  end
  local padded, out = nn._pad_for_windows(fn, x, kernel, stride, dilation, grown, pad_value)
  return nn._windows(padded, kernel, stride, dilation, out), out, {
    kernel = kernel, stride = stride, dilation = dilation, pads = pads, lead = lead }
end

local function last_dims(x, n)
  local dims = {}
  for i = 1, n do dims[i] = #x._shape - n + i end
  return dims
end

local POOL_OPTIONS = { stride = true, padding = true, dilation = true, ceil_mode = true, count_include_pad = true }

local function max_pool_nd(fn, n, x, kernel_size, opts)
  opts = check.options(fn, opts, POOL_OPTIONS)
  tensor_arg(fn, x)
  local win = pooled_windows(fn, n, x, kernel_size, opts, lowest(x.uop.dtype), true)
  return win:max(last_dims(win, n))
end

local function avg_pool_nd(fn, n, x, kernel_size, opts)
  opts = check.options(fn, opts, POOL_OPTIONS)
  tensor_arg(fn, x)
  local win, out, geo = pooled_windows(fn, n, x, kernel_size, opts, 0, true)
  local include_pad = opts.count_include_pad ~= false
  -- per dim, how many cells of each window count: those inside the padded input (include_pad)
  -- or inside the input itself
  local counts, uniform, volume = {}, true, 1
  for i = 1, n do
    local size, k, s, d = x._shape[geo.lead + i], geo.kernel[i], geo.stride[i], geo.dilation[i]
    local lo, hi = geo.pads[i][1], geo.pads[i][1] + size
    if include_pad then lo, hi = 0, size + geo.pads[i][1] + geo.pads[i][2] end
    counts[i] = {}
    for o = 0, out[i] - 1 do
      local c = 0
      for t = 0, k - 1 do
        local p = o * s + t * d
        if p >= lo and p < hi then c = c + 1 end
      end
      counts[i][o + 1] = c
      if c ~= k then uniform = false end
    end
    volume = volume * k
  end
  local total = win:sum(last_dims(win, n))
  if uniform then return total:div(volume) end
  local flat = { 1 }
  for i = 1, n do
    local next_flat = {}
    for _, v in ipairs(flat) do
      for _, c in ipairs(counts[i]) do next_flat[#next_flat + 1] = v * c end
    end
    flat = next_flat
  end
  local divisor = class.Tensor.new(flat, { dtype = total.uop.dtype, device = x.device }):reshape(out)
  return total:div(divisor)
end

--- Max over kernel windows of the last n dims, n = #kernel_size (a table of 1 to 3 sizes).
--  opts: stride (default the kernel), padding (a number, one per dim, or {before, after}
--  pairs; padding never wins), dilation, ceil_mode (keep a last partial window).
function M.max_pool(x, kernel_size, opts)
  if type(kernel_size) ~= "table" or is_tensor(kernel_size) or #kernel_size < 1 or #kernel_size > 3 then
    fail("max_pool", "kernel_size must be a table of 1 to 3 sizes, got %s", check.type_name(kernel_size))
  end
  return max_pool_nd("max_pool", #kernel_size, x, kernel_size, opts)
end

--- Mean over kernel windows of the last n dims, n = #kernel_size (a table of 1 to 3 sizes).
--  opts: stride, padding, dilation, ceil_mode (as max_pool) and count_include_pad (default
--  true: the padding counts in the divisor; cells added by ceil_mode never do).
function M.avg_pool(x, kernel_size, opts)
  if type(kernel_size) ~= "table" or is_tensor(kernel_size) or #kernel_size < 1 or #kernel_size > 3 then
    fail("avg_pool", "kernel_size must be a table of 1 to 3 sizes, got %s", check.type_name(kernel_size))
  end
  return avg_pool_nd("avg_pool", #kernel_size, x, kernel_size, opts)
end

--- 1-d max pool over the last dim: Tensor.max_pool's options.
function M.max_pool1d(x, kernel_size, opts) return max_pool_nd("max_pool1d", 1, x, kernel_size, opts) end
--- 3-d max pool over the last three dims: Tensor.max_pool's options.
function M.max_pool3d(x, kernel_size, opts) return max_pool_nd("max_pool3d", 3, x, kernel_size, opts) end
--- 1-d average pool over the last dim: Tensor.avg_pool's options.
function M.avg_pool1d(x, kernel_size, opts) return avg_pool_nd("avg_pool1d", 1, x, kernel_size, opts) end
--- 3-d average pool over the last three dims: Tensor.avg_pool's options.
function M.avg_pool3d(x, kernel_size, opts) return avg_pool_nd("avg_pool3d", 3, x, kernel_size, opts) end

-- The adaptive window [start, stop) (0-based) of output cell o of out over size.
local function adaptive_window(o, size, out)
  return (o * size) // out, -((-(o + 1) * size) // out)
end

local function adaptive_args(fn, n, x, output_size)
  tensor_arg(fn, x)
  if #x._shape < n then fail(fn, "needs at least %d dims, got %s", n, shape_str(x._shape)) end
  local out = nn._per_dim(fn, "output size", output_size, n, nil, 1)
  local lead = #x._shape - n
  for i = 1, n do
    if x._shape[lead + i] == 0 then fail(fn, "cannot pool the empty dim %d of %s", lead + i, shape_str(x._shape)) end
  end
  return out, lead
end

local function adaptive_avg(fn, n, x, output_size)
  local out, lead = adaptive_args(fn, n, x, output_size)
  if not x.uop.dtype.is_float then fail(fn, "needs a float input, got %s", x.uop.dtype.name) end
  for i = 1, n do
    local axis, size = lead + i, x._shape[lead + i]
    if size ~= out[i] then
      -- the mean over each window as a (size, out) matrix product along this dim
      local matrix = {}
      for j = 1, size do
        matrix[j] = {}
        for o = 1, out[i] do matrix[j][o] = 0 end
      end
      for o = 0, out[i] - 1 do
        local start, stop = adaptive_window(o, size, out[i])
        for j = start, stop - 1 do matrix[j + 1][o + 1] = 1 / (stop - start) end
      end
      local weights = class.Tensor.new(matrix, { dtype = x.uop.dtype, device = x.device })
      x = x:transpose(axis, -1):matmul(weights):transpose(axis, -1)
    end
  end
  return x
end

local function adaptive_max(fn, n, x, output_size)
  local out, lead = adaptive_args(fn, n, x, output_size)
  for i = 1, n do
    local axis, size = lead + i, x._shape[lead + i]
    if size ~= out[i] then
      local parts = {}
      for o = 0, out[i] - 1 do
        local start, stop = adaptive_window(o, size, out[i])
        parts[o + 1] = x:narrow(axis, start + 1, stop - start):max({ axis }, true)
      end
      x = class.Tensor.cat(parts, axis)
    end
  end
  return x
end

local function adaptive_rank(fn, output_size)
  if type(output_size) ~= "table" or is_tensor(output_size) or #output_size < 1 or #output_size > 3 then
    fail(fn, "output_size must be a table of 1 to 3 sizes, got %s", check.type_name(output_size))
  end
  return #output_size
end

--- Mean over adaptive windows of the last n dims, n = #output_size (1 to 3 sizes).
function M.adaptive_avg_pool(x, output_size)
  return adaptive_avg("adaptive_avg_pool", adaptive_rank("adaptive_avg_pool", output_size), x, output_size)
end
--- Max over adaptive windows of the last n dims, n = #output_size (1 to 3 sizes).
function M.adaptive_max_pool(x, output_size)
  return adaptive_max("adaptive_max_pool", adaptive_rank("adaptive_max_pool", output_size), x, output_size)
end

--- Mean over adaptive windows of the last dim down to output_size cells (as torch: cell o
--  covers [floor(o*L/O), ceil((o+1)*L/O))).
function M.adaptive_avg_pool1d(x, output_size) return adaptive_avg("adaptive_avg_pool1d", 1, x, output_size) end
--- Mean over adaptive windows of the last two dims down to output_size (a number or {h, w}).
function M.adaptive_avg_pool2d(x, output_size) return adaptive_avg("adaptive_avg_pool2d", 2, x, output_size) end
--- Mean over adaptive windows of the last three dims down to output_size (a number or {d, h, w}).
function M.adaptive_avg_pool3d(x, output_size) return adaptive_avg("adaptive_avg_pool3d", 3, x, output_size) end
--- Max over adaptive windows of the last dim (windows as adaptive_avg_pool1d).
function M.adaptive_max_pool1d(x, output_size) return adaptive_max("adaptive_max_pool1d", 1, x, output_size) end
--- Max over adaptive windows of the last two dims down to output_size (a number or {h, w}).
function M.adaptive_max_pool2d(x, output_size) return adaptive_max("adaptive_max_pool2d", 2, x, output_size) end
--- Max over adaptive windows of the last three dims down to output_size (a number or {d, h, w}).
function M.adaptive_max_pool3d(x, output_size) return adaptive_max("adaptive_max_pool3d", 3, x, output_size) end

M._pooled_windows, M._lowest = pooled_windows, lowest

return M
