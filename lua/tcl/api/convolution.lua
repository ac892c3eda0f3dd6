-- tcl.api.convolution — N-d convolution (1-d, 2-d, 3-d) and transposed convolution, with
-- torch's names conv1d/conv2d/conv3d and conv_transpose1d/2d/3d. The 2-d zero-padded case is
-- nn.conv2d itself (its kernels and its whole-op gradient); other ranks multiply the sliding
-- windows (tcl.api.nn's windows) by the filters and sum, like conv2d's composite. Padding modes
-- other than zeros pad the input first (tcl.api.pad_modes). A transposed convolution is the
-- convolution of the stride-spread input with the flipped, regrouped filters.
local class = require "tcl.api.class"
local check = require "tcl.api.check"
local nodes = require "tcl.api.nodes"
local rules = require "tcl.api.dtype_rules"
local reduce = require "tcl.api.reduce"
local nn = require "tcl.api.nn"
local pad_modes = require "tcl.api.pad_modes"
local gradient = require "tcl.patterns.gradient"

local is_tensor, fail, shape_str = class.is_tensor, check.fail, check.shape_str
local M = {}

local function tensor_arg(fn, x, what)
  if not is_tensor(x) then fail(fn, "%s must be a tensor, got %s", what or "input", check.type_name(x)) end
  return x
end

-- Checks x, w, b for an n-d (transposed) convolution; returns groups.
local function check_operands(fn, n, x, w, b, transposed, groups_opt)
  tensor_arg(fn, x)
  tensor_arg(fn, w, "weight")
  if b ~= nil then tensor_arg(fn, b, "bias") end
  local xs, ws = x._shape, w._shape
  if #xs ~= n + 2 or #ws ~= n + 2 then
    fail(fn, "needs a %d-d input (N, C, %d spatial dims) and a %d-d weight, got %s and %s", n + 2, n, n + 2,
      shape_str(xs), shape_str(ws))
  end
  local groups = groups_opt == nil and 1 or check.integer_at_least(fn, "groups", groups_opt, 1)
  local cout
  if transposed then
    -- weight (Cin, Cout/groups, k...)
    if xs[2] ~= ws[1] or ws[1] % groups ~= 0 then
      fail(fn, "input %s and weight %s do not match with %d group(s): the weight's first dim must be the %d "
        .. "input channels, divisible by groups", shape_str(xs), shape_str(ws), groups, xs[2])
    end
    cout = ws[2] * groups
  else
    -- weight (Cout, Cin/groups, k...)
    if xs[2] ~= ws[2] * groups or ws[1] % groups ~= 0 then
      fail(fn, "input %s and weight %s do not match with %d group(s): input channels must be %d * %d and "
        .. "%d output channels must split into groups", shape_str(xs), shape_str(ws), groups, ws[2], groups, ws[1])
    end
    cout = ws[1]
  end
  if b ~= nil and (#b._shape ~= 1 or b._shape[1] ~= cout) then
    fail(fn, "bias has shape %s, expected (%d,) for weight %s", shape_str(b._shape), cout, shape_str(ws))
  end
  return groups, cout
end

local function with_bias(y, b, n)
  if b == nil then return y end
  local shape = { 1, b._shape[1] }
  for i = 1, n do shape[2 + i] = 1 end
  return y:add(b:reshape(shape))
end

-- The padding pairs for padding = "valid", "same" (stride 1; the odd cell goes after, as torch),
-- a number, one number per dim, or {before, after} pairs.
local function resolve_padding(fn, padding, kernel, dilation, stride)
  local n = #kernel
  if padding == "valid" then return nn._padding_pairs(fn, 0, n) end
  if padding == "same" then
    local pairs_ = {}
    for i = 1, n do
      if stride[i] ~= 1 then fail(fn, "padding 'same' needs stride 1, got stride %s", shape_str(stride)) end
      local total = dilation[i] * (kernel[i] - 1)
      pairs_[i] = { total // 2, total - total // 2 }
    end
    return pairs_
  end
  if type(padding) == "string" then
    fail(fn, "padding must be 'valid', 'same', a number, one per spatial dim or {before, after} pairs, got '%s'",
      check.quote(padding))
  end
  return nn._padding_pairs(fn, padding, n)
end

local CONV_OPTIONS = { stride = true, padding = true, dilation = true, groups = true, padding_mode = true }

-- The n-d convolution; fn names the user's function.
local function conv_nd(fn, n, x, w, b, opts)
  opts = check.options(fn, opts, CONV_OPTIONS)
  local groups, cout = check_operands(fn, n, x, w, b, false, opts.groups)
  local xs, ws = x._shape, w._shape
  local kernel = {}
  for i = 1, n do kernel[i] = ws[2 + i] end
  local stride = nn._per_dim(fn, "stride", opts.stride, n, 1, 1)
  local dilation = nn._per_dim(fn, "dilation", opts.dilation, n, 1, 1)
  local pads = resolve_padding(fn, opts.padding, kernel, dilation, stride)
  local mode = opts.padding_mode or "zeros"
  if mode ~= "zeros" then
    if not pad_modes.MODES[mode] then
      fail(fn, "padding_mode must be 'zeros', 'reflect', 'replicate' or 'circular', got '%s'", check.quote(mode))
    end
    local all = { { 0, 0 }, { 0, 0 } }
    for i = 1, n do all[2 + i] = pads[i] end
    x = pad_modes.apply(fn, x, all, mode)
    pads = nn._padding_pairs(fn, 0, n)
  end
  if n == 2 then
    return nn.conv2d(x, w, b, { stride = stride, padding = pads, dilation = dilation, groups = groups })
  end
  local padded, out = nn._pad_for_windows(fn, x, kernel, stride, dilation, pads, 0)
  local batch, cin_per_group = xs[1], ws[2]
  local products, result = { batch, groups, cout // groups, cin_per_group }, { batch, cout }
  for i = 1, n do products[#products + 1], result[#result + 1] = out[i], out[i] end
  for i = 1, n do products[#products + 1] = kernel[i] end
  check.shape_fits(fn, products)
  local win = nn._windows(padded, kernel, stride, dilation, out) -- (N, Cin, O..., K...)
  local win_shape, w_shape = { batch, groups, 1, cin_per_group }, { 1, groups, cout // groups, cin_per_group }
  for i = 1, n do win_shape[#win_shape + 1], w_shape[#w_shape + 1] = out[i], 1 end
  for i = 1, n do win_shape[#win_shape + 1], w_shape[#w_shape + 1] = kernel[i], kernel[i] end
  local dtype = rules.promote(fn, x.uop.dtype, w.uop.dtype)
  local window_products = win:reshape(win_shape):mul(w:reshape(w_shape))
  local summed = { 4 }
  for i = 1, n do summed[#summed + 1] = 4 + n + i end
  local accumulator = rules.product_accumulator(window_products.uop.dtype)
  local y = nodes.cast(reduce._sum_in(window_products, summed, accumulator), dtype):reshape(result)
  return with_bias(y, b, n)
end

--- N-d convolution of x (N, Cin, d1, ..., dn) with w (Cout, Cin/groups, k1, ..., kn), n = 1, 2 or 3
--  (from w's rank), and optional bias b (Cout). opts: stride, dilation (a number or one per
--  spatial dim), padding ('valid', 'same' (stride 1), a number, one per dim, or {before, after}
--  pairs), groups, padding_mode ('zeros' (default), 'reflect', 'replicate', 'circular').
function M.conv(x, w, b, opts)
  tensor_arg("conv", w, "weight")
  local n = #w._shape - 2
  if n < 1 or n > 3 then fail("conv", "needs a 3-d, 4-d or 5-d weight, got shape %s", shape_str(w._shape)) end
  return conv_nd("conv", n, x, w, b, opts)
end

--- 1-d convolution of x (N, Cin, L) with w (Cout, Cin/groups, k): Tensor.conv's options.
function M.conv1d(x, w, b, opts) return conv_nd("conv1d", 1, x, w, b, opts) end

--- 3-d convolution of x (N, Cin, D, H, W) with w (Cout, Cin/groups, kD, kH, kW): Tensor.conv's options.
function M.conv3d(x, w, b, opts) return conv_nd("conv3d", 3, x, w, b, opts) end

local TRANSPOSE_OPTIONS = { stride = true, padding = true, output_padding = true, dilation = true, groups = true }

-- The n-d transposed convolution: the input spread by the stride (stride-1 zeros between
-- elements), padded by dilation * (k - 1) - padding (negative amounts crop) plus output_padding
-- after, convolved at stride 1 with the flipped filters, input and output channels swapped per group.
-- A strided 2-d one without groups is computed by phases instead (conv2d's input gradient).
local function conv_transpose_nd(fn, n, x, w, b, opts)
  opts = check.options(fn, opts, TRANSPOSE_OPTIONS)
  local groups, cout = check_operands(fn, n, x, w, b, true, opts.groups)
  local xs, ws = x._shape, w._shape
  local stride = nn._per_dim(fn, "stride", opts.stride, n, 1, 1)
  local dilation = nn._per_dim(fn, "dilation", opts.dilation, n, 1, 1)
  local pads = nn._padding_pairs(fn, opts.padding, n)
  local extra = nn._per_dim(fn, "output_padding", opts.output_padding, n, 0, 0)
  -- a strided 2-d one without groups by phases, as conv2d's input gradient
  -- (tcl.patterns.gradient): no multiplies by the spread's zeros, no index divisions
  local by_phases = n == 2 and groups == 1 and (stride[1] > 1 or stride[2] > 1) and x.uop.dtype == w.uop.dtype
  local spread, amounts, out_sizes = x, { { 0, 0 }, { 0, 0 } }, {}
  for i = 1, n do
    local k, s, d = ws[2 + i], stride[i], dilation[i]
    if extra[i] >= math.max(s, d) then
      fail(fn, "output_padding %s must be smaller than the stride %s or the dilation %s", shape_str(extra),
        shape_str(stride), shape_str(dilation))
    end
    local size = xs[2 + i]
    local out_size = (size - 1) * s - pads[i][1] - pads[i][2] + d * (k - 1) + extra[i] + 1
    out_sizes[i] = out_size
    if out_size < 1 or size < 1 then
      fail(fn, "input %s and weight %s (stride %s, padding %d and %d on dim %d) give an empty output", shape_str(xs),
        shape_str(ws), shape_str(stride), pads[i][1], pads[i][2], 2 + i)
    end
    if s > 1 and not by_phases then
      -- (…, L, …) -> (…, L, 1, …) padded to (…, L, s, …) -> (…, L*s, …), cut to (L-1)*s+1
      local axis = 2 + i
      local shape = spread._shape
      local split = table.move(shape, 1, axis, 1, {})
      split[axis + 1] = 1
      table.move(shape, axis + 1, #shape, axis + 2, split)
      local grow = {}
      for j = 1, #split do grow[j] = { 0, 0 } end
      grow[axis + 1] = { 0, s - 1 }
      local merged = table.move(shape, 1, #shape, 1, {})
      merged[axis] = size * s
      spread = spread:reshape(split):pad(grow):reshape(merged)
      local cut = {}
      for j = 1, #merged do cut[j] = { 0, 0 } end
      cut[axis] = { 0, -(s - 1) }
      spread = spread:pad(cut)
    end
    local reach = d * (k - 1)
    amounts[2 + i] = { reach - pads[i][1], reach - pads[i][2] + extra[i] }
  end
  if by_phases then
    local y = gradient.conv2d_input_grad(x, w, out_sizes, { stride = stride, dilation = dilation, pads = pads })
    return with_bias(y, b, n)
  end
  spread = spread:pad(amounts)
  -- (Cin, Cout/g, k...) -> (g, Cin/g, Cout/g, k...) -> (g, Cout/g, Cin/g, k...) -> (Cout, Cin/g, k...)
  local cin_per_group, cout_per_group = ws[1] // groups, ws[2]
  local grouped, order, regrouped = { groups, cin_per_group, cout_per_group }, { 1, 3, 2 }, { cout, cin_per_group }
  local flips = {}
  for i = 1, n do
    grouped[3 + i], order[3 + i], regrouped[2 + i], flips[i] = ws[2 + i], 3 + i, ws[2 + i], 2 + i
  end
  local filters = w:flip(flips):reshape(grouped):permute(order):reshape(regrouped)
  return conv_nd(fn, n, spread, filters, b, { dilation = dilation, groups = groups })
end

--- N-d transposed convolution (the gradient of conv with respect to its input) of x (N, Cin,
--  d1, ..., dn) with w (Cin, Cout/groups, k1, ..., kn), n from w's rank, and optional bias b
--  (Cout). opts: stride, padding (a number, one per dim or {before, after} pairs: cells cut
--  from the output), output_padding (cells added after, each below the stride or the
--  dilation), dilation, groups. Output size per dim: (L - 1) * stride - padding before - padding
--  after + dilation * (k - 1) + output_padding + 1.
function M.conv_transpose(x, w, b, opts)
  tensor_arg("conv_transpose", w, "weight")
  local n = #w._shape - 2
  if n < 1 or n > 3 then
    fail("conv_transpose", "needs a 3-d, 4-d or 5-d weight, got shape %s", shape_str(w._shape))
  end
  return conv_transpose_nd("conv_transpose", n, x, w, b, opts)
end

--- 1-d transposed convolution: Tensor.conv_transpose with a 3-d weight.
function M.conv_transpose1d(x, w, b, opts) return conv_transpose_nd("conv_transpose1d", 1, x, w, b, opts) end
--- 2-d transposed convolution: Tensor.conv_transpose with a 4-d weight.
function M.conv_transpose2d(x, w, b, opts) return conv_transpose_nd("conv_transpose2d", 2, x, w, b, opts) end
--- 3-d transposed convolution: Tensor.conv_transpose with a 5-d weight.
function M.conv_transpose3d(x, w, b, opts) return conv_transpose_nd("conv_transpose3d", 3, x, w, b, opts) end

return M
