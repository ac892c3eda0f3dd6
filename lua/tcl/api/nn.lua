-- tcl.api.nn — linear algebra and neural-network functions on tensors: matmul, linear, conv2d,
-- pooling, normalization, dropout, one_hot, attention and losses. Layer: lua/tcl/api.
--
-- All are compositions of the elementwise, movement and reduce methods, as in tinygrad:
-- matmul is a broadcast multiply and a sum over the shared dim; convolution and pooling cut
-- sliding windows out of the input with movement ops only (no copies), multiply and reduce.
local class = require "tcl.api.class"
local check = require "tcl.api.check"
local devices = require "tcl.devices"
local nodes = require "tcl.api.nodes"
local rules = require "tcl.api.dtype_rules"
local reduce = require "tcl.api.reduce"
local gradients = require "tcl.api.gradients"
local index_checks = require "tcl.api.index_checks"
local sharding = require "tcl.api.sharding"

local is_tensor, fail, shape_str = class.is_tensor, check.fail, check.shape_str
local shapes = require "tcl.shape"
local conv_phases = require "tcl.conv_phases"
local MAX_NUMEL, shape_problem = shapes.MAX_NUMEL, shapes.problem
local M = {}

local function tensor_arg(fn, x, what)
  if not is_tensor(x) then fail(fn, "%s must be a tensor, got %s", what or "input", check.type_name(x)) end
  return x
end

local function slice_of(list, first, last)
  return table.move(list, first, last, 1, {})
end

local try_broadcast = check.broadcast_shapes

-- ---------------------------------------------------------------------------------------
-- linear algebra

-- When a CPU matmul (..., m, k) @ (k, n) packs its weight (specs change these; "_": not part of
-- the Tensor class): into panels of `panel` columns (the register tile's vector axis, two
-- vectors of 16 float32 lanes), when m (all rows) is at least min_rows and the weight has at
-- least min_elements (more than a core's L2 holds).
M._packing = { panel = 32, min_rows = 128, min_elements = 1 << 20 }

-- A large CPU matmul x (..., m, k) @ w (k, n) with its weight packed: w stored once as column
-- panels (n / panel, k, panel), each contiguous, and the product computed panel by
-- panel as (rows, n / P, P) summed over k. Reading w's columns directly, a tile steps down w
-- by its row stride at every step of k: 4 KB for n = 1024, so every row lands in the same
-- L1 cache set and the same page (matmul 1024, 1 thread: 58 GFLOPS unpacked, 92-97 packed,
-- 159 with the panels in L2-sized groups, OpenBLAS 110-150). The packing is one pass over
-- w, under 3 % of the product's time from 1024 rows on; at 128 rows about 30 % (GPT-2's layer
-- at 128 tokens, 1 thread: 5.4 ms of packing for 19 ms of products), and the packed product
-- still wins by far (that layer: 27-38 -> 21-22 ms at 1 thread, 16-18 -> 13 ms at 2; its fc1
-- read a 768 x 3072 weight at a 12 KB stride before). Below 128 rows (decoding a few tokens)
-- the pass would cost about what the product does. nil where it does not apply.
local function packed_product(x, w, k, n)
  local packing = M._packing
  local P = packing.panel
  -- a variable size (tcl.var) is a node, not a number: such products take the plain path
  if math.type(k) ~= "integer" or math.type(n) ~= "integer" then return nil end
  if devices.base(x.device) ~= "CPU" or w.device ~= x.device or #w._shape ~= 2 or not x.uop.dtype.is_float
    or x.uop.dtype ~= w.uop.dtype or n % P ~= 0 or k * n < packing.min_elements then
    return nil
  end
  local rows = 1
  for i = 1, #x._shape - 1 do rows = rows * x._shape[i] end
  if math.type(rows) ~= "integer" or rows < packing.min_rows then return nil end
  local panels = w:reshape(k, n // P, P):permute(2, 1, 3):contiguous() -- (n / P, k, P)
  local product = x:reshape(rows, 1, 1, k):mul(panels:permute(1, 3, 2):reshape(1, n // P, P, k))
  local accumulator = rules.product_accumulator(product.uop.dtype)
  local out_shape = slice_of(x._shape, 1, #x._shape - 1)
  out_shape[#out_shape + 1] = n
  -- stored as (rows, n / P, P): a view of it as (..., n) would put n's division by P in the
  -- kernel's index of the panels
  return reduce._sum_in(product, { 4 }, accumulator):contiguous():reshape(out_shape)
end

-- Matrix product with numpy's rules: 1-D . 1-D is a dot product, a 1-D operand acts as a
-- row (left) or column (right) vector and loses its dim, leading dims broadcast. fn names
-- the user's function in errors (matmul, dot or linear).
local function matmul_as(fn, x, w)
  tensor_arg(fn, x)
  tensor_arg(fn, w, "other")
  local xs, ws = x._shape, w._shape
  local nx, nw = #xs, #ws
  if nx == 0 or nw == 0 then
    fail(fn, "needs tensors of at least 1 dim, got shapes %s and %s", shape_str(xs), shape_str(ws))
  end
  local k = xs[nx]
  local kw = nw == 1 and ws[1] or ws[nw - 1]
  if k ~= kw then
    fail(fn, "shapes %s and %s are not aligned: %d (dim %d) ~= %d (dim %d)", shape_str(xs), shape_str(ws), k, nx, kw,
      nw == 1 and 1 or nw - 1)
  end
  local dtype = rules.promote(fn, x.uop.dtype, w.uop.dtype)
  -- the result: x's dims but the last, then w's last (a 1-d operand adds none); with k = 0
  -- it has elements however empty x and w are
  local batch -- nil when the batch dims do not broadcast (reported below)
  if nw <= 2 then batch = slice_of(xs, 1, nx - 2)
  elseif nx <= 2 then batch = slice_of(ws, 1, nw - 2)
  else batch = try_broadcast(slice_of(xs, 1, nx - 2), slice_of(ws, 1, nw - 2)) end
  if batch then
    local result = slice_of(batch, 1, #batch)
    if nx >= 2 then result[#result + 1] = xs[nx - 1] end
    if nw >= 2 then result[#result + 1] = ws[nw] end
    if shape_problem(result) then
      fail(fn, "%s times %s gives shape %s, which %s", shape_str(xs), shape_str(ws), shape_str(result),
        shape_problem(result))
    end
  end
  local product, reduce_dim
  if nw == 1 then
    product, reduce_dim = x:mul(w), -1                  -- (..., k) * (k)
  elseif nx == 1 then
    product, reduce_dim = x:reshape(k, 1):mul(w), -2    -- (k, 1) * (..., k, n)
  else
    if batch == nil then fail(fn, "batch dims of %s and %s cannot be broadcast", shape_str(xs), shape_str(ws)) end
    -- every product is made before the sum: (batch..., m, n, k) of them
    local products = slice_of(batch, 1, #batch)
    products[#products + 1], products[#products + 2], products[#products + 3] = xs[nx - 1], ws[nw], k
    if shape_problem(products) then
      fail(fn, "the products of %s and %s, of shape %s, cannot be made: that shape %s", shape_str(xs), shape_str(ws),
        shape_str(products), shape_problem(products))
    end
    local packed = packed_product(x, w, k, ws[nw])
    if packed then return nodes.cast(packed, dtype) end
    -- (..., m, 1, k) * (..., 1, n, k), summed over k: the reduced dim is innermost for both
    local x_shape = slice_of(xs, 1, nx - 1)
    x_shape[#x_shape + 1], x_shape[#x_shape + 2] = 1, k
    local wt = w:transpose(-1, -2)
    local w_shape = slice_of(ws, 1, nw - 2)
    w_shape[#w_shape + 1], w_shape[#w_shape + 2], w_shape[#w_shape + 3] = 1, ws[nw], k
    product, reduce_dim = x:reshape(x_shape):mul(wt:reshape(w_shape)), -1
  end
  return nodes.cast(reduce._sum_in(product, reduce_dim, rules.product_accumulator(product.uop.dtype)), dtype)
end

function M.matmul(x, w)
  -- a plain x times a sharded w (a column-parallel layer): the sharded tensors' matmul
  if sharding.is_sharded(w) then return sharding._matmul(x, w) end
  return matmul_as("matmul", x, w)
end
function M.dot(x, w) return matmul_as("dot", x, w) end

--- x:matmul(w) + b, w being (in x out) as in tinygrad; b is optional.
function M.linear(x, w, b)
  tensor_arg("linear", x)
  tensor_arg("linear", w, "weight")
  if b ~= nil then tensor_arg("linear", b, "bias") end
  local y = matmul_as("linear", x, w)
  if b == nil then return y end
  local out = try_broadcast(y._shape, b._shape)
  if out == nil then
    fail("linear", "bias %s does not broadcast to the output %s of %s and %s", shape_str(b._shape),
      shape_str(y._shape), shape_str(x._shape), shape_str(w._shape))
  end
  if shape_problem(out) then
    fail("linear", "bias %s broadcast with the output %s gives shape %s, which %s", shape_str(b._shape),
      shape_str(y._shape), shape_str(out), shape_problem(out))
  end
  return y:add(b)
end

-- ---------------------------------------------------------------------------------------
-- sliding windows (for convolution and pooling)

-- Windows along one axis of size L: kernel k, stride s, dilation d. Replaces the axis by two,
-- (k, o), where o is the number of windows and element (j, i) is x[i*s + j*d].
-- Non-overlapping windows (d = 1, s >= k) are one reshape. Otherwise the axis is repeated r
-- times into a flat run of r*L (element q is x[q mod L]) and read back as rows of L + d: row j
-- starts d elements further into x than row j - 1. Every step is a movement op.
local function windows_along(x, axis, k, s, d, o)
  local shape = x._shape
  local L = shape[axis + 1]
  local before, after = slice_of(shape, 1, axis), slice_of(shape, axis + 2, #shape)
  local function with(mid)
    local out = table.move(before, 1, #before, 1, {})
    for _, v in ipairs(mid) do out[#out + 1] = v end
    for _, v in ipairs(after) do out[#out + 1] = v end
    return out
  end
  local function window(lo_hi_mid)
    local w = {}
    for i = 1, #before do w[#w + 1], w[#w + 2] = 0, before[i] end
    for _, pair in ipairs(lo_hi_mid) do w[#w + 1], w[#w + 2] = pair[1], pair[2] end
    for i = 1, #after do w[#w + 1], w[#w + 2] = 0, after[i] end
    return w
  end
  local function padding(mid)
    local p = {}
    for _ = 1, #before do p[#p + 1], p[#p + 2] = 0, 0 end
    for _, pair in ipairs(mid) do p[#p + 1], p[#p + 2] = pair[1], pair[2] end
    for _ = 1, #after do p[#p + 1], p[#p + 2] = 0, 0 end
    return p
  end
  local rows -- (…, k, o, …)
  if d == 1 and s >= k then
    local used = o * s
    local fitted = used <= L and nodes.shrink(x, window({ { 0, used } }))
      or nodes.pad(x, padding({ { 0, used - L } }))
    local split = nodes.reshape(fitted, with({ o, s }))
    local kept = nodes.shrink(split, window({ { 0, o }, { 0, k } }))
    rows = nodes.permute(kept, (function()
      local order = {}
      for i = 1, #before do order[#order + 1] = i - 1 end
      order[#order + 1], order[#order + 2] = #before + 1, #before
      for i = 1, #after do order[#order + 1] = #before + 1 + i end
      return order
    end)())
  else
    local repeats = (k * (L + d) + L - 1) // L
    local spread = nodes.expand(nodes.reshape(x, with({ 1, L })), with({ repeats, L }))
    local flat = nodes.reshape(spread, with({ repeats * L }))
    local run = nodes.shrink(flat, window({ { 0, k * (L + d) } }))
    local grid = nodes.reshape(run, with({ k, L + d }))
    -- columns 0, s, 2s, ... (o of them): cut to (o-1)*s + 1, pad to o*s, keep one of each s
    local span = (o - 1) * s + 1
    local cut = nodes.shrink(grid, window({ { 0, k }, { 0, span } }))
    local padded = nodes.pad(cut, padding({ { 0, 0 }, { 0, o * s - span } }))
    local split = nodes.reshape(padded, with({ k, o, s }))
    rows = nodes.reshape(nodes.shrink(split, window({ { 0, k }, { 0, o }, { 0, 1 } })), with({ k, o }))
  end
  return rows
end

-- x (..., L1, ..., Ln) -> (..., O1, ..., On, K1, ..., Kn): sliding windows over the last n dims.
local function windows(x, kernel, stride, dilation, out_sizes)
  local n = #kernel
  local lead = #x._shape - n
  for i = 1, n do
    -- after i-1 steps the shape is (lead..., K1, O1, ..., K(i-1), O(i-1), Li, ...)
    local axis = lead + 2 * (i - 1)
    x = windows_along(x, axis, kernel[i], stride[i], dilation[i], out_sizes[i])
  end
  local order = {}
  for i = 1, lead do order[#order + 1] = i - 1 end
  for i = 1, n do order[#order + 1] = lead + 2 * (i - 1) + 1 end -- the O dims
  for i = 1, n do order[#order + 1] = lead + 2 * (i - 1) end     -- the K dims
  return nodes.permute(x, order)
end

-- A per-spatial-dim list of n integers from a number or a table of n numbers.
local function per_dim(fn, what, v, n, default, minimum)
  if v == nil then v = default end
  local list = {}
  if type(v) == "number" then
    for i = 1, n do list[i] = check.integer_at_least(fn, what, v, minimum) end
  elseif type(v) == "table" and not is_tensor(v) and #v == n then
    for i = 1, n do list[i] = check.integer_at_least(fn, what, v[i], minimum) end
  else
    fail(fn, "%s must be a number or a table of %d numbers, got %s", what, n, check.type_name(v))
  end
  return list
end

-- Padding as {before, after} per spatial dim from a number, {p1, p2} or {{b1, a1}, {b2, a2}}.
local function padding_pairs(fn, v, n)
  if v == nil then v = 0 end
  local pairs_ = {}
  if type(v) == "table" and not is_tensor(v) and type(v[1]) == "table" and not is_tensor(v[1]) then
    if #v ~= n then fail(fn, "padding needs %d {before, after} pairs, got %d", n, #v) end
    for i = 1, n do
      local pair = v[i]
      if type(pair) ~= "table" or is_tensor(pair) then
        fail(fn, "padding of spatial dim %d must be a {before, after} pair, got %s", i, check.type_name(pair))
      end
      pairs_[i] = { check.integer_at_least(fn, "padding", pair[1], 0),
        check.integer_at_least(fn, "padding", pair[2], 0) }
    end
  else
    for i, p in ipairs(per_dim(fn, "padding", v, n, 0, 0)) do pairs_[i] = { p, p } end
  end
  return pairs_
end

-- Whether the views windows() builds over `shape` fit: the step along axis L (kernel k,
-- stride s, dilation d, o windows) holds at most (the other dims) * max(L, o * s, k * (L + d) + L)
-- elements (see windows_along), and turns L into (k, o). Counted in floats, which do not
-- overflow.
local function windows_fit(shape, kernel, stride, dilation, out_sizes)
  local n = #kernel
  local lead = #shape - n
  local current = {}
  for i = 1, #shape do current[i] = shape[i] + 0.0 end
  for i = 1, n do
    local axis = lead + 2 * (i - 1) + 1
    local L, k, s, d, o = current[axis], kernel[i] + 0.0, stride[i] + 0.0, dilation[i] + 0.0, out_sizes[i] + 0.0
    local other = 1.0
    for j, v in ipairs(current) do if j ~= axis then other = other * v end end
    local widest = math.max(L, o * s, k * (L + d) + L)
    if widest > MAX_NUMEL or other * widest > MAX_NUMEL then return false end
    current[axis] = k
    table.insert(current, axis + 1, o)
  end
  return true
end

-- Pads the last n dims by pairs with `value` and checks the windows fit; returns the padded
-- tensor and the output sizes.
local function pad_for_windows(fn, x, kernel, stride, dilation, pads, value)
  local n = #kernel
  local lead = #x._shape - n
  local pad_list, out_sizes, padded_shape = {}, {}, slice_of(x._shape, 1, lead)
  for i = 1, lead do pad_list[i] = { 0, 0 } end
  for i = 1, n do
    pad_list[lead + i] = pads[i]
    local size = x._shape[lead + i] + pads[i][1] + pads[i][2]
    padded_shape[lead + i] = size
    -- (no product past the size is formed: dilation and kernel may each be up to 2^53)
    local fits = kernel[i] == 1 or dilation[i] <= (size - 1) // (kernel[i] - 1)
    local reach = fits and dilation[i] * (kernel[i] - 1) + 1
    if not fits or reach > size then
      local spatial = slice_of(x._shape, lead + 1, #x._shape)
      fail(fn, "kernel %s (dilation %s) does not fit the padded input %s of %s", shape_str(kernel),
        shape_str(dilation), shape_str(spatial), shape_str(x._shape))
    end
    out_sizes[i] = (size - reach) // stride[i] + 1
  end
  -- the sliding windows view the input as (..., out sizes..., kernel sizes...)
  local windows_shape = slice_of(x._shape, 1, lead)
  for i = 1, n do windows_shape[#windows_shape + 1] = out_sizes[i] end
  for i = 1, n do windows_shape[#windows_shape + 1] = kernel[i] end
  check.shape_fits(fn, windows_shape)
  check.shape_fits(fn, padded_shape)
  if not windows_fit(padded_shape, kernel, stride, dilation, out_sizes) then
    fail(fn, "the windows of kernel %s (stride %s, dilation %s) over %s need more than 2^53 elements",
      shape_str(kernel), shape_str(stride), shape_str(dilation), shape_str(padded_shape))
  end
  return x:pad(pad_list, value), out_sizes
end

-- A strided conv2d (groups 1) of the padded input xp as the sum of stride-1 convolutions, one
-- per phase of the input (tcl.conv_phases): the phases are stored once, each contiguous, so
-- no kernel reads with a stride (the strided windows read every s-th element, which the
-- vector lanes of a tile cannot load as one).
local function strided_by_phases(xp, w, stride, dilation, out)
  local n, cin, hp, wp = table.unpack(xp._shape)
  local sh, sw = stride[1], stride[2]
  local rows, cols = (hp + sh - 1) // sh, (wp + sw - 1) // sw
  local phases = xp:pad({ {}, {}, { 0, rows * sh - hp }, { 0, cols * sw - wp } })
    :reshape(n, cin, rows, sh, cols, sw):permute(1, 2, 4, 6, 3, 5):contiguous() -- (N, Cin, sh, sw, rows, cols)
  local y
  for rh = 0, sh - 1 do
    local a = conv_phases.taps(sh, dilation[1], w._shape[3], rh)
    for rw = 0, sw - 1 do
      local b = a and conv_phases.taps(sw, dilation[2], w._shape[4], rw)
      if b then
        local window = phases:slice({}, {}, rh + 1, rw + 1,
          { a.offset + 1, a.offset + out[1] + (a.taps - 1) * a.dilation },
          { b.offset + 1, b.offset + out[2] + (b.taps - 1) * b.dilation })
        local taps = w:slice({}, {}, conv_phases.kernel_slice(a), conv_phases.kernel_slice(b))
        local part = window:conv2d(taps, nil, { dilation = { a.dilation, b.dilation } })
        y = y and y:add(part) or part
      end
    end
  end
  return y
end

--- 2-D convolution of x (N, Cin, H, W) with w (Cout, Cin/groups, kH, kW) and optional bias b
--  (Cout); opts: stride, padding, dilation (a number or one per spatial dim; padding also
--  {{top, bottom}, {left, right}}) and groups.
function M.conv2d(x, w, b, opts)
  local fn = "conv2d"
  tensor_arg(fn, x)
  tensor_arg(fn, w, "weight")
  if b ~= nil then tensor_arg(fn, b, "bias") end
  opts = check.options(fn, opts, { stride = true, padding = true, dilation = true, groups = true })
  local xs, ws = x._shape, w._shape
  if #xs ~= 4 or #ws ~= 4 then
    fail(fn, "needs a 4-d input (N, C, H, W) and a 4-d weight, got %s and %s", shape_str(xs), shape_str(ws))
  end
  local groups = opts.groups == nil and 1 or check.integer_at_least(fn, "groups", opts.groups, 1)
  local cout, cin_per_group = ws[1], ws[2]
  if xs[2] ~= cin_per_group * groups or cout % groups ~= 0 then
    fail(fn, "input %s and weight %s do not match with %d group(s): input channels must be %d * %d and "
      .. "%d output channels must split into groups",
      shape_str(xs), shape_str(ws), groups, cin_per_group, groups, cout)
  end
  if b ~= nil and (#b._shape ~= 1 or b._shape[1] ~= cout) then
    fail(fn, "bias has shape %s, expected (%d,) for weight %s", shape_str(b._shape), cout, shape_str(ws))
  end
  local kernel = { ws[3], ws[4] }
  local stride = per_dim(fn, "stride", opts.stride, 2, 1, 1)
  local dilation = per_dim(fn, "dilation", opts.dilation, 2, 1, 1)
  local pads = padding_pairs(fn, opts.padding, 2)
  local padded, out = pad_for_windows(fn, x, kernel, stride, dilation, pads, 0)
  local n = xs[1]
  -- every input window meets every filter of its group before the sum; the result (which has
  -- elements even when the channels are empty) is the products without the summed dims
  local products = { n, groups, cout // groups, cin_per_group, out[1], out[2], kernel[1], kernel[2] }
  local result = { n, cout, out[1], out[2] }
  for _, shape in ipairs({ result, products }) do
    if shape_problem(shape) then
      fail(fn, "input %s and weight %s make shape %s, which %s", shape_str(xs), shape_str(ws), shape_str(shape),
        shape_problem(shape))
    end
  end
  local whole = groups == 1 and x.uop.dtype == w.uop.dtype -- differentiated as a whole (below)
  local y
  if whole and (stride[1] > 1 or stride[2] > 1) then
    y = strided_by_phases(padded, w, stride, dilation, out)
  else
    local win = windows(padded, kernel, stride, dilation, out) -- (N, Cin, OH, OW, kH, kW)
    win = win:reshape(n, groups, 1, cin_per_group, out[1], out[2], kernel[1], kernel[2])
    local wr = w:reshape(1, groups, cout // groups, cin_per_group, 1, 1, kernel[1], kernel[2])
    local dtype = rules.promote(fn, x.uop.dtype, w.uop.dtype)
    local window_products = win:mul(wr)
    local accumulator = rules.product_accumulator(window_products.uop.dtype)
    y = nodes.cast(reduce._sum_in(window_products, { 4, 7, 8 }, accumulator), dtype):reshape(n, cout, out[1], out[2])
  end
  if whole then
    -- differentiated as a whole (tcl.patterns.gradient's conv2d: the input's gradient is a
    -- transposed convolution, by phases when strided), not through the windows. Measured
    -- faster on examples/fashion_mnist.lua's CNN: a train step (bench/train_bench.lua
    -- cnn_epoch, THREADS=1, Debug build on a shared 2-core machine, 2026-11-28) took 513-640 ms
    -- with it against 787-1067 ms through the windows. A stride-2 backward (8x64x56x56, w
    -- 64x64x3x3, Release, 2 threads, busy machine, 2026-11-29) takes 70 ms by phases against
    -- 470 ms for the transposed convolution over the zero-dilated gradient
    gradients.mark(y, "conv2d", { x, w }, { stride = stride, dilation = dilation, pads = pads })
  end
  if b == nil then return y end
  return y:add(b:reshape(1, cout, 1, 1))
end

-- Shared by the 2-D pools: windows over the last two dims of x (at least 2-d).
local function pool2d(fn, x, kernel_size, stride, padding, dilation, pad_value)
  tensor_arg(fn, x)
  if #x._shape < 2 then fail(fn, "needs at least 2 dims, got %s", shape_str(x._shape)) end
  local kernel = per_dim(fn, "kernel size", kernel_size, 2, nil, 1)
  local strides = per_dim(fn, "stride", stride, 2, kernel, 1)
  local dilations = per_dim(fn, "dilation", dilation, 2, 1, 1)
  local pads = padding_pairs(fn, padding, 2)
  local padded, out = pad_for_windows(fn, x, kernel, strides, dilations, pads, pad_value)
  return windows(padded, kernel, strides, dilations, out)
end

--- Max over kernel windows of the last two dims; stride defaults to the kernel size; padding
--  never wins (it is the lowest value of the dtype).
function M.max_pool2d(x, kernel_size, stride, padding, dilation)
  tensor_arg("max_pool2d", x)
  local dt = x.uop.dtype
  local lowest = dt.is_float and -math.huge or dt.is_bool and false or dt.min
  return pool2d("max_pool2d", x, kernel_size, stride, padding, dilation, lowest):max({ -2, -1 })
end

--- Mean over kernel windows of the last two dims (padding counts as zeros, like torch).
function M.avg_pool2d(x, kernel_size, stride, padding)
  return pool2d("avg_pool2d", x, kernel_size, stride, padding, nil, 0):mean({ -2, -1 })
end

-- ---------------------------------------------------------------------------------------
-- normalization, dropout

--- (x - mean) / sqrt(var + eps) over dim d (default -1, or a table of dims), biased variance.
function M.layernorm(x, d, eps)
  tensor_arg("layernorm", x)
  eps = eps == nil and 1e-5 or check.number("layernorm", "eps", eps)
  check.dims("layernorm", d or -1, x._shape)
  local centered = x:sub(x:mean(d or -1, true))
  return centered:mul(centered:square():mean(d or -1, true):add(eps):rsqrt())
end

--- (x - mean) * weight * invstd + bias per channel (dim 2), tinygrad's argument order;
--  weight and bias may be nil.
function M.batchnorm(x, weight, bias, mean, invstd)
  local fn = "batchnorm"
  tensor_arg(fn, x)
  if #x._shape < 2 then fail(fn, "needs at least 2 dims (N, C, ...), got %s", shape_str(x._shape)) end
  local channels = x._shape[2]
  local shape = { 1, channels }
  for _ = 3, #x._shape do shape[#shape + 1] = 1 end
  local function per_channel(t, what, optional)
    if t == nil and optional then return nil end
    tensor_arg(fn, t, what)
    if #t._shape ~= 1 or t._shape[1] ~= channels then
      fail(fn, "%s has shape %s, expected (%d,) for input %s", what, shape_str(t._shape), channels, shape_str(x._shape))
    end
    return t:reshape(shape)
  end
  weight, bias = per_channel(weight, "weight", true), per_channel(bias, "bias", true)
  mean, invstd = per_channel(mean, "mean"), per_channel(invstd, "invstd")
  local y = x:sub(mean)
  if weight then y = y:mul(weight) end
  y = y:mul(invstd)
  if bias then y = y:add(bias) end
  return y
end

--- While tcl.training is true, zeroes each element with probability p (default 0.5) and
--  scales the rest by 1/(1-p); otherwise returns x.
function M.dropout(x, p)
  tensor_arg("dropout", x)
  p = p == nil and 0.5 or check.number("dropout", "p", p)
  if not (p >= 0 and p <= 1) then fail("dropout", "p must be in [0, 1], got %s", tostring(p)) end
  if not class.training or p == 0 then return x end
  if p == 1 then return x:mul(0) end
  local keep = class.Tensor.rand(x._shape, { device = x.device }):ge(p)
  return keep:where(x:mul(1 / (1 - p)), 0)
end

-- ---------------------------------------------------------------------------------------
-- encodings, attention, losses

-- one_hot for fn (the user-facing function): n classes, entries equal to `ignored` (when
-- given) are rows of zeros; every other index outside 1..n is reported by the next read to the
-- host (tcl.api.index_checks), named after fn.
local function one_hot_for(fn, x, n, what, ignored)
  local shape = nodes.copy_shape(x)
  shape[#shape + 1] = n
  check.shape_fits(fn, shape)
  index_checks.check_range(fn, x, n, what, ignored)
  local classes = class.Tensor.arange(1, n + 1, { device = x.device })
  return x:unsqueeze(-1):eq(classes):where(1, 0)
end
M._one_hot_for = one_hot_for

--- int32 one-hot vectors along a new last dim of n classes; x holds 1-based class indices
--  (n defaults to the largest index, which realizes x). An index outside 1..n is an error,
--  raised by the next read to the host (tcl.api.index_checks).
function M.one_hot(x, n)
  tensor_arg("one_hot", x)
  if not x.uop.dtype.is_int then
    fail("one_hot", "needs an integer tensor of class indices, got %s", x.uop.dtype.name)
  end
  if n == nil then n = math.max(0, x:max():item()) end
  n = check.integer_at_least("one_hot", "number of classes", n, 0)
  return one_hot_for("one_hot", x, n, "class indices")
end

--- softmax(q k^T / sqrt(d) + mask) v over the last two dims. mask: bool (true keeps) or
--  additive; causal masks out keys after each query.
function M.scaled_dot_product_attention(q, k, v, mask, causal)
  local fn = "scaled_dot_product_attention"
  tensor_arg(fn, q, "query")
  tensor_arg(fn, k, "key")
  tensor_arg(fn, v, "value")
  local qs, ks, vs = q._shape, k._shape, v._shape
  if #qs < 2 or #ks < 2 or #vs < 2 or qs[#qs] ~= ks[#ks] or ks[#ks - 1] ~= vs[#vs - 1] then
    fail(fn, "query %s, key %s and value %s do not fit: need (..., L, E), (..., S, E) and (..., S, Ev)",
      shape_str(qs), shape_str(ks), shape_str(vs))
  end
  if mask ~= nil then tensor_arg(fn, mask, "mask") end
  local batch = try_broadcast(slice_of(qs, 1, #qs - 2), slice_of(ks, 1, #ks - 2))
  batch = batch and try_broadcast(batch, slice_of(vs, 1, #vs - 2))
  if batch == nil then
    fail(fn, "the batch dims of query %s, key %s and value %s cannot be broadcast", shape_str(qs), shape_str(ks),
      shape_str(vs))
  end
  local L, S, E, Ev = qs[#qs - 1], ks[#ks - 1], qs[#qs], vs[#vs]
  local function with(...)
    local shape = slice_of(batch, 1, #batch)
    for _, size in ipairs({ ... }) do shape[#shape + 1] = size end
    return shape
  end
  -- the products made before each sum: q k^T and then the weights times v
  for _, products in ipairs({ with(L, S, E), with(L, Ev, S) }) do
    if shape_problem(products) then
      fail(fn, "query %s, key %s and value %s make products of shape %s, which %s", shape_str(qs), shape_str(ks),
        shape_str(vs), shape_str(products), shape_problem(products))
    end
  end
  if causal and not nodes.band_mask_fits(L, S) then
    fail(fn, "the causal %d x %d mask needs more than 2^53 elements", L, S)
  end
  if mask ~= nil then
    local scores = with(L, S)
    local masked = try_broadcast(scores, mask._shape)
    if masked == nil or not check.same_shape(masked, scores) then
      fail(fn, "mask %s does not broadcast to the scores %s", shape_str(mask._shape), shape_str(scores))
    end
  end
  local scores = q:matmul(k:transpose(-1, -2)):div(math.sqrt(qs[#qs]))
  if causal then
    scores = nodes.band_mask(L, S, -math.huge, 0, q.device):where(scores, -math.huge)
  end
  if mask ~= nil then
    if mask.uop.dtype.is_bool then scores = mask:where(scores, -math.huge)
    else scores = scores:add(mask) end
  end
  return scores:softmax(-1):matmul(v)
end

--- Cross entropy of logits x (classes along dim 2, or dim 1 for 1-d x) against target:
--  1-based class indices (x's shape without the class dim; outside 1..C is an error at the next
--  read to the host) or probabilities (x's shape).
--  opts: reduction ("mean", "sum" or "none") and label_smoothing.
function M.cross_entropy(x, target, opts)
  local fn = "cross_entropy"
  tensor_arg(fn, x)
  tensor_arg(fn, target, "target")
  opts = check.options(fn, opts, { reduction = true, label_smoothing = true })
  local reduction = opts.reduction or "mean"
  local smoothing = opts.label_smoothing == nil and 0 or check.number(fn, "label_smoothing", opts.label_smoothing)
  if #x._shape == 0 then fail(fn, "needs logits with a class dim, got %s", shape_str(x._shape)) end
  local class_dim = #x._shape >= 2 and 2 or 1
  local classes = x._shape[class_dim]
  local y = target
  if #target._shape == #x._shape - 1 and target.uop.dtype.is_int then
    local expected = nodes.copy_shape(x)
    table.remove(expected, class_dim)
    if not check.same_shape(expected, target._shape) then
      fail(fn, "target %s does not fit logits %s: expected %s", shape_str(target._shape), shape_str(x._shape),
          shape_str(expected))
    end
    y = one_hot_for(fn, target, classes, "class indices")
    if class_dim == 2 and #y._shape > 2 then
      local order = { 1, #y._shape }
      for i = 2, #y._shape - 1 do order[#order + 1] = i end
      y = y:permute(order)
    end
  elseif not check.same_shape(target._shape, x._shape) then
    fail(fn, "target %s does not fit logits %s: give class indices or probabilities of the same shape",
      shape_str(target._shape), shape_str(x._shape))
  end
  if smoothing ~= 0 then y = y:mul(1 - smoothing):add(smoothing / classes) end
  local losses = x:log_softmax(class_dim):mul(y):sum(class_dim):neg()
  if reduction == "mean" then return losses:mean() end
  if reduction == "sum" then return losses:sum() end
  if reduction == "none" then return losses end
  fail(fn, "reduction must be 'mean', 'sum' or 'none', got %s", tostring(reduction))
end

--- Cross entropy of logits x (..., C) against 1-based integer labels (...), the mean over
--  the labels; labels equal to opts.ignore_index do not count, others outside 1..C are an
--  error at the next read to the host.
function M.sparse_categorical_crossentropy(x, labels, opts)
  local fn = "sparse_categorical_crossentropy"
  tensor_arg(fn, x)
  tensor_arg(fn, labels, "labels")
  opts = check.options(fn, opts, { ignore_index = true })
  if #x._shape == 0 then fail(fn, "needs logits with a class dim, got %s", shape_str(x._shape)) end
  local expected = slice_of(x._shape, 1, #x._shape - 1)
  if not labels.uop.dtype.is_int or not check.same_shape(expected, labels._shape) then
    fail(fn, "labels must be integers of shape %s for logits %s, got %s %s", shape_str(expected), shape_str(x._shape),
      labels.uop.dtype.name, shape_str(labels._shape))
  end
  local ignored = opts.ignore_index ~= nil and check.any_integer(fn, "ignore_index", opts.ignore_index) or nil
  local picked = x:log_softmax(-1):mul(one_hot_for(fn, labels, x._shape[#x._shape], "labels", ignored)):sum(-1)
  if ignored == nil then return picked:mean():neg() end
  local counted = labels:ne(ignored)
  return counted:where(picked, 0):sum():neg():div(counted:sum())
end

-- shared with tcl.api.convolution and tcl.api.pooling (the _ prefix: not Tensor methods)
M._windows, M._pad_for_windows, M._per_dim, M._padding_pairs = windows, pad_for_windows, per_dim, padding_pairs

return M
