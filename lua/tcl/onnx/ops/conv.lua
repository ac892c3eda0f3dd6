-- tcl.onnx.ops.conv — ONNX handlers for convolution, pooling, padding and resampling:
-- Conv, ConvTranspose, MaxPool (with Indices), AveragePool, LpPool, GlobalAveragePool,
-- GlobalMaxPool, Pad, Resize, Upsample, MaxUnpool, GridSample, RoiAlign. They map onto Tensor.conv /
-- conv_transpose / max_pool / avg_pool / pad and tcl.api.resample's per-dim matrices; ONNX's pads lists
-- [b1, ..., bn, e1, ..., en] become {before, after} pairs, auto_pad is resolved here.
local Tensor = require "tcl.api.tensor"
local pooling = require "tcl.api.pooling"
local resample = require "tcl.api.resample"

local M = {}

local function dtype_of(t) return tostring(t.dtype) end

-- {before, after} pairs for the n spatial dims of a node: auto_pad SAME_UPPER / SAME_LOWER
-- (output ceil(L / stride); the odd cell after for UPPER, before for LOWER), VALID, or pads.
local function spatial_pads(ctx, node, x, kernel, strides, dilations)
  local n = #kernel
  local shape = x:size()
  local auto = node.attrs.auto_pad or "NOTSET"
  local pairs_ = {}
  if auto == "SAME_UPPER" or auto == "SAME_LOWER" then
    for i = 1, n do
      local size = shape[2 + i]
      local out = -(-size // strides[i])
      local total = math.max(0, (out - 1) * strides[i] + dilations[i] * (kernel[i] - 1) + 1 - size)
      local small = total // 2
      pairs_[i] = auto == "SAME_UPPER" and { small, total - small } or { total - small, small }
    end
  elseif auto == "VALID" then
    for i = 1, n do pairs_[i] = { 0, 0 } end
  elseif auto == "NOTSET" then
    local pads = node.attrs.pads or {}
    for i = 1, n do pairs_[i] = { pads[i] or 0, pads[n + i] or 0 } end
  else
    ctx:fail("unknown auto_pad '%s'", tostring(auto))
  end
  return pairs_
end

local function per_dim(list, n, default)
  local out = {}
  for i = 1, n do out[i] = list and list[i] or default end
  return out
end

function M.Conv(ctx, node)
  local x, w, b = node.inputs[1], node.inputs[2], node.inputs[3]
  local n = #w:size() - 2
  if n < 1 or n > 3 then ctx:fail("needs 1 to 3 spatial dims, got weight shape of rank %d", n + 2) end
  local kernel = {}
  for i = 1, n do kernel[i] = w:size()[2 + i] end
  local strides = per_dim(node.attrs.strides, n, 1)
  local dilations = per_dim(node.attrs.dilations, n, 1)
  local pads = spatial_pads(ctx, node, x, kernel, strides, dilations)
  return Tensor.conv(x, w, b, { stride = strides, dilation = dilations, padding = pads, groups = node.attrs.group })
end

function M.ConvTranspose(ctx, node)
  local x, w, b = node.inputs[1], node.inputs[2], node.inputs[3]
  local n = #w:size() - 2
  if n < 1 or n > 3 then ctx:fail("needs 1 to 3 spatial dims, got weight shape of rank %d", n + 2) end
  local xs, ws = x:size(), w:size()
  local strides = per_dim(node.attrs.strides, n, 1)
  local dilations = per_dim(node.attrs.dilations, n, 1)
  local extra = per_dim(node.attrs.output_padding, n, 0)
  local auto = node.attrs.auto_pad or "NOTSET"
  local pairs_ = {}
  local wanted = node.attrs.output_shape
  if wanted == nil and (auto == "SAME_UPPER" or auto == "SAME_LOWER") then
    wanted = {}
    for i = 1, n do wanted[i] = xs[2 + i] * strides[i] end
  end
  if wanted ~= nil then
    -- the output_shape may list the N and C dims too
    if #wanted == n + 2 then wanted = table.move(wanted, 3, n + 2, 1, {}) end
    for i = 1, n do
      local full = strides[i] * (xs[2 + i] - 1) + extra[i] + dilations[i] * (ws[2 + i] - 1) + 1
      local total = full - wanted[i]
      local small = total // 2
      pairs_[i] = auto == "SAME_UPPER" and { small, total - small } or { total - small, small }
    end
  else
    pairs_ = spatial_pads(ctx, node, x, {}, {}, {})
    local pads = node.attrs.pads or {}
    for i = 1, n do pairs_[i] = { pads[i] or 0, pads[n + i] or 0 } end
  end
  -- a negative pad asks for cells past the full output, which no input reaches: zeros
  local cut, grow, grows = {}, { { 0, 0 }, { 0, 0 } }, false
  for i = 1, n do
    cut[i] = { math.max(pairs_[i][1], 0), math.max(pairs_[i][2], 0) }
    grow[2 + i] = { math.max(-pairs_[i][1], 0), math.max(-pairs_[i][2], 0) }
    if grow[2 + i][1] > 0 or grow[2 + i][2] > 0 then grows = true end
  end
  local y = Tensor.conv_transpose(x, w, nil, { stride = strides, dilation = dilations, padding = cut,
    output_padding = extra, groups = node.attrs.group })
  if grows then y = y:pad(grow) end
  if b ~= nil then
    local shape = { 1, b:size()[1] }
    for i = 1, n do shape[2 + i] = 1 end
    y = y + b:reshape(shape)
  end
  return y
end

-- The kernel, strides, dilations and pads of a pooling node over x.
local function pool_geometry(ctx, node, x)
  local kernel = node.attrs.kernel_shape
  if kernel == nil then ctx:fail("needs kernel_shape") end
  local n = #kernel
  if n < 1 or n > 3 or #x:size() ~= n + 2 then
    ctx:fail("kernel_shape of %d dims for an input of rank %d", n, #x:size())
  end
  local strides = per_dim(node.attrs.strides, n, 1)
  local dilations = per_dim(node.attrs.dilations, n, 1)
  return kernel, strides, dilations, spatial_pads(ctx, node, x, kernel, strides, dilations)
end

function M.MaxPool(ctx, node)
  local x = node.inputs[1]
  local kernel, strides, dilations, pads = pool_geometry(ctx, node, x)
  local opts = { stride = strides, dilation = dilations, padding = pads, ceil_mode = (node.attrs.ceil_mode or 0) ~= 0 }
  local y = Tensor.max_pool(x, kernel, opts)
  if not node.wants(2) then return y end
  -- Indices: the flat (0-based) position in x of each window's first maximum; with
  -- storage_order 1 the spatial part counts column-major
  local shape = x:size()
  local n = #kernel
  local spatial = 1
  for i = 1, n do spatial = spatial * shape[2 + i] end
  local positions
  if (node.attrs.storage_order or 0) == 0 then
    positions = Tensor.arange(0, spatial, { dtype = "int64" })
  else
    local reversed, order = {}, {}
    for i = 1, n do reversed[i], order[i] = shape[2 + n + 1 - i], n + 1 - i end
    positions = Tensor.arange(0, spatial, { dtype = "int64" }):reshape(reversed):permute(order):contiguous()
  end
  local spatial_shape = { 1, 1 }
  for i = 1, n do spatial_shape[2 + i] = shape[2 + i] end
  local planes = Tensor.arange(0, shape[1] * shape[2], { dtype = "int64" }):reshape({ shape[1], shape[2] })
  for _ = 1, n do planes = planes:unsqueeze(-1) end
  local index = positions:reshape(spatial_shape) + planes * spatial
  local win = pooling._pooled_windows("MaxPool", n, x, kernel, opts, pooling._lowest(x.uop.dtype), true)
  local index_win = pooling._pooled_windows("MaxPool", n, index, kernel, opts, -1, true)
  local dims, keep_shape = {}, y:size()
  for i = 1, n do dims[i] = #win:size() - n + i end
  local full = table.move(keep_shape, 1, #keep_shape, 1, {})
  for _ = 1, n do full[#full + 1] = 1 end
  local is_max = win:eq(y:reshape(full))
  local big = math.maxinteger
  local indices = Tensor.where(is_max, index_win, big):min(dims)
  return y, indices
end

function M.AveragePool(ctx, node)
  local x = node.inputs[1]
  local kernel, strides, dilations, pads = pool_geometry(ctx, node, x)
  return Tensor.avg_pool(x, kernel, { stride = strides, dilation = dilations, padding = pads,
    ceil_mode = (node.attrs.ceil_mode or 0) ~= 0, count_include_pad = (node.attrs.count_include_pad or 0) ~= 0 })
end

function M.LpPool(ctx, node)
  local x = node.inputs[1]
  local kernel, strides, dilations, pads = pool_geometry(ctx, node, x)
  local p = node.attrs.p or 2
  local volume = 1
  for _, k in ipairs(kernel) do volume = volume * k end
  local powered = x:abs():pow(p)
  local mean = Tensor.avg_pool(powered, kernel, { stride = strides, dilation = dilations, padding = pads,
    ceil_mode = (node.attrs.ceil_mode or 0) ~= 0, count_include_pad = true })
  return (mean * volume):pow(1 / p)
end

local function spatial_dims(x)
  local dims = {}
  for d = 3, #x:size() do dims[#dims + 1] = d end
  return dims
end

function M.GlobalAveragePool(_, node)
  local x = node.inputs[1]
  return x:mean(spatial_dims(x), true)
end

function M.GlobalMaxPool(_, node)
  local x = node.inputs[1]
  return x:max(spatial_dims(x), true)
end

local PAD_MODES = { constant = "constant", reflect = "reflect", edge = "replicate", wrap = "circular" }

function M.Pad(ctx, node)
  local x = node.inputs[1]
  local rank = #x:size()
  local pads, value, axes
  if node.opset < 11 then
    pads, value = node.attrs.pads or node.attrs.paddings, node.attrs.value or 0
  else
    pads = ctx:ints(node.inputs[2])
    value = node.inputs[3] and ctx:numbers(node.inputs[3])[1] or 0
    axes = node.inputs[4] and ctx:ints(node.inputs[4])
  end
  local mode = PAD_MODES[node.attrs.mode or "constant"]
  if mode == nil then ctx:fail("unknown mode '%s'", tostring(node.attrs.mode)) end
  if axes == nil then
    axes = {}
    for i = 1, rank do axes[i] = i - 1 end
  end
  if #pads ~= 2 * #axes then ctx:fail("needs %d pads for %d axes, got %d", 2 * #axes, #axes, #pads) end
  local crops, grows = {}, {}
  for i = 1, rank do crops[i], grows[i] = { 0, 0 }, { 0, 0 } end
  for i, a in ipairs(axes) do
    local d = (a < 0 and a + rank or a) + 1
    local before, after = pads[i], pads[#axes + i]
    crops[d] = { math.min(before, 0), math.min(after, 0) }
    grows[d] = { math.max(before, 0), math.max(after, 0) }
  end
  if mode == "constant" then
    local pairs_ = {}
    for i = 1, rank do pairs_[i] = { crops[i][1] + grows[i][1], crops[i][2] + grows[i][2] } end
    if dtype_of(x) == "bool" then value = value ~= 0 end
    return x:pad(pairs_, value)
  end
  return x:pad(crops):pad(grows, mode)
end

-- ONNX's coordinate of output cell o in input cells for one dim of Resize.
local function coordinate(ctx, how, size, out, scale, roi_start, roi_end)
  if how == "half_pixel" then return function(o) return (o + 0.5) / scale - 0.5 end end
  if how == "pytorch_half_pixel" then
    return function(o) return out > 1 and (o + 0.5) / scale - 0.5 or 0 end
  end
  if how == "align_corners" then return function(o) return out > 1 and o * (size - 1) / (out - 1) or 0 end end
  if how == "asymmetric" then return function(o) return o / scale end end
  if how == "tf_half_pixel_for_nn" then return function(o) return (o + 0.5) / scale end end
  if how == "tf_crop_and_resize" then
    return function(o)
      if out > 1 then return roi_start * (size - 1) + o * (roi_end - roi_start) * (size - 1) / (out - 1) end
      return 0.5 * (roi_start + roi_end) * (size - 1)
    end
  end
  ctx:fail("unknown coordinate_transformation_mode '%s'", tostring(how))
end

local ROUNDING = {
  round_prefer_floor = function(v) return math.ceil(v - 0.5) end,
  round_prefer_ceil = function(v) return math.floor(v + 0.5) end,
  floor = math.floor,
  ceil = math.ceil,
}

-- Resize (and Upsample) of x to the scales or sizes (one per dim) with the node's attributes.
local function resize(ctx, node, x, scales, sizes, roi, legacy)
  local shape = x:size()
  local rank = #shape
  local mode = node.attrs.mode or "nearest"
  local how = legacy and "asymmetric" or node.attrs.coordinate_transformation_mode or "half_pixel"
  local round = ROUNDING[legacy and "floor" or node.attrs.nearest_mode or "round_prefer_floor"]
  if round == nil then ctx:fail("unknown nearest_mode '%s'", tostring(node.attrs.nearest_mode)) end
  local kinds = { nearest = "nearest", linear = "linear", bilinear = "linear", cubic = "cubic" }
  if kinds[mode] == nil then ctx:fail("unknown mode '%s'", tostring(mode)) end
  local specs, outside = {}, {}
  for d = 1, rank do
    local size, out, scale = shape[d], sizes and sizes[d], sizes and sizes[d] / shape[d] or scales[d]
    out = out or math.floor(size * scale)
    if out ~= size or scale ~= 1 or how == "tf_crop_and_resize" then
      -- (ONNX places the cells by the unrounded output length size * scale)
      local source = coordinate(ctx, how, size, size * scale, scale, roi and roi[d] or 0, roi and roi[rank + d] or 1)
      specs[#specs + 1] = { axis = d, out = out, mode = kinds[mode], source = source, round = round,
        cubic_a = node.attrs.cubic_coeff_a or -0.75, exclude_outside = (node.attrs.exclude_outside or 0) ~= 0 }
      if how == "tf_crop_and_resize" then
        local flags, any = {}, false
        for o = 0, out - 1 do
          local src = source(o)
          flags[o + 1] = src < 0 or src > size - 1
          any = any or flags[o + 1]
        end
        if any then outside[#outside + 1] = { d, flags } end
      end
    end
  end
  local y = resample._resample(x, specs)
  if #outside > 0 then
    local mask
    for _, entry in ipairs(outside) do
      local view = {}
      for d = 1, rank do view[d] = 1 end
      view[entry[1]] = #entry[2]
      local m = Tensor(entry[2]):reshape(view)
      mask = mask and mask:logical_or(m) or m
    end
    y = Tensor.where(mask, node.attrs.extrapolation_value or 0, y):cast(dtype_of(x))
  end
  return y
end

function M.Resize(ctx, node)
  local x = node.inputs[1]
  if node.opset < 11 then
    return resize(ctx, node, x, ctx:numbers(node.inputs[2]), nil, nil, true)
  end
  local roi = node.inputs[2] and ctx:numbers(node.inputs[2]) or nil
  local scales = node.inputs[3] and ctx:numbers(node.inputs[3]) or nil
  local sizes = node.inputs[4] and ctx:ints(node.inputs[4]) or nil
  if scales and #scales == 0 then scales = nil end
  if sizes and #sizes == 0 then sizes = nil end
  if roi and #roi == 0 then roi = nil end
  if (scales == nil) == (sizes == nil) then ctx:fail("needs exactly one of scales and sizes") end
  return resize(ctx, node, x, scales, sizes, roi, false)
end

function M.Upsample(ctx, node)
  local x = node.inputs[1]
  local scales = node.attrs.scales or ctx:numbers(node.inputs[2])
  return resize(ctx, node, x, scales, nil, nil, true)
end

-- MaxUnpool: Y (zeros of the unpooled shape) with Y.flat[I] = X. Each (n, c) plane's indices
-- are compared with the positions of its output plane (I holds flat positions in the whole
-- tensor, as MaxPool's Indices), so the cost is (input plane) x (output plane) per plane.
function M.MaxUnpool(ctx, node)
  local x, indices = node.inputs[1], node.inputs[2]
  local shape = x:size()
  local n = #shape - 2
  local kernel = node.attrs.kernel_shape
  if kernel == nil or #kernel ~= n then ctx:fail("needs kernel_shape of %d dims", n) end
  local strides = per_dim(node.attrs.strides, n, 1)
  local pads = node.attrs.pads or {}
  -- the indices address the default shape; an output_shape only adds zeros after (as ONNX's own
  -- implementation does)
  local out_shape = { shape[1], shape[2] }
  for i = 1, n do
    out_shape[2 + i] = (shape[2 + i] - 1) * strides[i] + kernel[i] - (pads[i] or 0) - (pads[n + i] or 0)
  end
  local planes, plane_in, plane_out = shape[1] * shape[2], 1, 1
  for i = 1, n do plane_in, plane_out = plane_in * shape[2 + i], plane_out * out_shape[2 + i] end
  local offsets = Tensor.arange(0, planes, { dtype = "int64" }):reshape({ planes, 1, 1 }) * plane_out
  local local_index = indices:cast("int64"):reshape({ planes, plane_in, 1 }) - offsets
  local positions = Tensor.arange(0, plane_out, { dtype = "int64" }):reshape({ 1, 1, plane_out })
  local values = x:reshape({ planes, plane_in, 1 })
  local zero = dtype_of(x) == "bool" and false or 0
  local y = Tensor.where(local_index:eq(positions), values, zero):sum(2)
  y = y:cast(dtype_of(x)):reshape(out_shape)
  if node.inputs[3] then
    local wanted, grow = ctx:ints(node.inputs[3]), {}
    for d = 1, #out_shape do
      if wanted[d] < out_shape[d] then
        ctx:fail("output_shape is smaller than the default %d in dim %d", out_shape[d], d)
      end
      grow[d] = { 0, wanted[d] - out_shape[d] }
    end
    y = y:pad(grow)
  end
  return y
end

-- GridSample (torch's grid_sample, 2-d): the output cell p of image n samples X at the grid's
-- (x, y) in [-1, 1]. Sampling is separable: per cell, a weight on every input column (and row)
-- from the coordinate's distance to it (the tent function for bilinear, Keys's cubic for
-- bicubic, a one-hot of the rounded coordinate for nearest; cells outside the image get none,
-- which is zero padding), then two contractions. border clamps and reflection mirrors the
-- coordinate first (bicubic: zero padding only).
local function unnormalized(coord, size, align)
  if align then return (coord + 1) * ((size - 1) / 2) end
  return ((coord + 1) * size - 1) / 2
end

local function reflected(ix, size, align)
  local low, high = -0.5, size - 0.5
  if align then low, high = 0, size - 1 end
  local span = high - low
  if span <= 0 then return ix * 0 end
  local distance = (ix - low):abs()
  local flips = (distance / span):floor()
  local extra = distance - flips * span
  local even = (flips - (flips / 2):floor() * 2):eq(0)
  return Tensor.where(even, extra + low, high - extra)
end

local function sample_weights(ix, size, mode, padding, align)
  if padding == "border" then ix = ix:clamp(0, size - 1)
  elseif padding == "reflection" then ix = reflected(ix, size, align):clamp(0, size - 1) end
  local shape = ix:size()
  local j = Tensor.arange(0, size, { dtype = "float32" }):reshape({ 1, 1, size })
  local d = ix:reshape({ shape[1], shape[2], 1 }) - j
  if mode == "nearest" then return ix:round():reshape({ shape[1], shape[2], 1 }):eq(j):cast("float32") end
  if mode == "bilinear" then return (1 - d:abs()):relu() end
  local a, t = -0.75, d:abs()
  local near = ((a + 2) * t - (a + 3)) * t * t + 1
  local far = ((a * t - 5 * a) * t + 8 * a) * t - 4 * a
  return Tensor.where(t:le(1), near, Tensor.where(t:lt(2), far, 0))
end

function M.GridSample(ctx, node)
  local x, grid = node.inputs[1], node.inputs[2]
  local xs, gs = x:size(), grid:size()
  if #xs ~= 4 or #gs ~= 4 or gs[4] ~= 2 then ctx:fail("needs a 4-d input and an (N, H, W, 2) grid") end
  local mode = node.attrs.mode or "bilinear"
  local padding = node.attrs.padding_mode or "zeros"
  local align = (node.attrs.align_corners or 0) ~= 0
  if mode ~= "bilinear" and mode ~= "nearest" and mode ~= "bicubic" then ctx:fail("unknown mode '%s'", mode) end
  if mode == "bicubic" and padding ~= "zeros" then ctx:fail("bicubic sampling supports zeros padding only") end
  local n, c, h, w = xs[1], xs[2], xs[3], xs[4]
  local cells = gs[2] * gs[3]
  local coords = grid:cast("float32"):reshape({ n, cells, 2 })
  local ix = unnormalized(coords:narrow(3, 1, 1):reshape({ n, cells }), w, align)
  local iy = unnormalized(coords:narrow(3, 2, 1):reshape({ n, cells }), h, align)
  local wx = sample_weights(ix, w, mode, padding, align) -- (N, P, W)
  local wy = sample_weights(iy, h, mode, padding, align) -- (N, P, H)
  local rows = x:cast("float32"):matmul(wx:permute(1, 3, 2):reshape({ n, 1, w, cells })) -- (N, C, H, P)
  local y = (rows * wy:permute(1, 3, 2):reshape({ n, 1, h, cells })):sum(3)
  return y:reshape({ n, c, gs[2], gs[3] }):cast(dtype_of(x))
end

-- RoiAlign (avg mode): the average of bilinear samples on a regular grid in each output bin of
-- each region. The samples form a product grid and bilinear weights factor into a row weight
-- times a column weight, so a region's output is Ay X Ax^T / count, with Ay (out_h, H) and
-- Ax (out_w, W) summing the samples' weights; they are built here from the regions' values
-- (read on the host), one matrix pair per region.
local function roi_axis_weights(start, bin, out, grid, size)
  local matrix = {}
  for p = 1, out do
    local row = {}
    for i = 1, size do row[i] = 0 end
    for s = 0, grid - 1 do
      local v = start + (p - 1) * bin + (s + 0.5) * bin / grid
      if v >= -1 and v <= size then
        v = math.max(v, 0)
        local low = math.floor(v)
        local high = low + 1
        if low >= size - 1 then low, high, v = size - 1, size - 1, size - 1 end
        local l = v - low
        row[low + 1] = row[low + 1] + (1 - l)
        row[high + 1] = row[high + 1] + l
      end
    end
    matrix[p] = row
  end
  return matrix
end

function M.RoiAlign(ctx, node)
  local x, rois, batch = node.inputs[1], node.inputs[2], node.inputs[3]
  if (node.attrs.mode or "avg") ~= "avg" then ctx:fail("only mode 'avg' is supported, got '%s'", node.attrs.mode) end
  local xs = x:size()
  local h, w = xs[3], xs[4]
  local out_h, out_w = node.attrs.output_height or 1, node.attrs.output_width or 1
  local ratio, scale = node.attrs.sampling_ratio or 0, node.attrs.spatial_scale or 1
  local half_pixel = (node.attrs.coordinate_transformation_mode or "half_pixel") == "half_pixel"
  local offset = half_pixel and 0.5 or 0
  local boxes, images = ctx:numbers(rois), ctx:ints(batch)
  local count_r = #images
  local ays, axs, picked = {}, {}, {}
  for r = 1, count_r do
    local x1, y1, x2, y2 = boxes[4 * r - 3], boxes[4 * r - 2], boxes[4 * r - 1], boxes[4 * r]
    local sw, sh = x1 * scale - offset, y1 * scale - offset
    local rw, rh = x2 * scale - offset - sw, y2 * scale - offset - sh
    if not half_pixel then rw, rh = math.max(rw, 1), math.max(rh, 1) end
    local gh = ratio > 0 and ratio or math.ceil(rh / out_h)
    local gw = ratio > 0 and ratio or math.ceil(rw / out_w)
    local count = math.max(gh * gw, 1)
    local ay = roi_axis_weights(sh, rh / out_h, out_h, gh, h)
    for _, row in ipairs(ay) do for i = 1, #row do row[i] = row[i] / count end end
    ays[r], axs[r] = ay, roi_axis_weights(sw, rw / out_w, out_w, gw, w)
    picked[r] = x:narrow(1, images[r] + 1, 1)
  end
  if count_r == 0 then return Tensor.zeros({ 0, xs[2], out_h, out_w }, { dtype = dtype_of(x) }) end
  local regions = Tensor.cat(picked, 1):cast("float32") -- (R, C, H, W)
  local ay = Tensor(ays, { dtype = "float32" }):reshape({ count_r, 1, out_h, h })
  local ax = Tensor(axs, { dtype = "float32" }):reshape({ count_r, 1, out_w, w })
  return ay:matmul(regions):matmul(ax:transpose(3, 4)):cast(dtype_of(x))
end

return M
