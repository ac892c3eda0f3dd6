-- tcl.api.layers — tcl.nn: neural-network layers as objects that hold their tensors (Linear,
-- Conv2d, BatchNorm, LayerNorm, RMSNorm, GroupNorm, Embedding, Dropout, Sequential) and the
-- scoped training switches nn.train / nn.eval. Layer: lua/tcl/api.
--
--   local nn = tcl.nn
--   local model = nn.Sequential{ nn.Linear(784, 256), Tensor.relu, nn.Linear(256, 10) }
--   local logits = model(x)                   -- a lazy graph, like any Tensor expression
--
-- A layer is a table whose metatable is its class (`getmetatable(layer) == nn.Linear`):
-- `layer(x)` runs its forward, `tostring(layer)` reads like PyTorch's repr. Its tensors are
-- plain fields with PyTorch's names (weight, bias, running_mean, running_var,
-- num_batches_tracked) and it has no other tensor-valued fields, so a walk over a model's
-- fields finds its state under PyTorch's names (a Sequential keeps its steps in `layers`:
-- layers.1.weight). Construction realizes every tensor into a buffer of its own; forward
-- builds lazy graphs from the Tensor methods of tcl.api.nn, elementwise and reduce.
local class = require "tcl.api.class"
local check = require "tcl.api.check"
local creation = require "tcl.api.creation"
local init = require "tcl.api.init_weights"
local nn_ops = require "tcl.api.nn"
local rules = require "tcl.api.dtype_rules"
local Tensor = require "tcl.api.tensor" -- the class with every method installed

local fail, shape_str, is_tensor = check.fail, check.shape_str, class.is_tensor
local M = {}

-- ---------------------------------------------------------------------------------------
-- the pieces every layer uses

-- A learnable tensor: realized into a buffer of its own, marked for gradients.
local function parameter(t)
  return t:realize():requires_grad_(true)
end

-- Makes the next realize store v into t's own buffer (Tensor.assign, lazy): the running
-- statistics are updated together with whatever is realized next (an optimizer step).
-- v is detached: statistics are computed from graphs that track gradients.
local function update_in_place(t, v)
  t:assign(v:detach():cast(t.dtype))
end

-- A layer class: instances have it as metatable, so `layer(x)` runs forward and the class's
-- methods are found through __index. Calling the class constructs an instance.
local function layer_class(name, construct, forward, describe)
  local fn = "nn." .. name
  local Class = { __name = fn, forward = forward }
  Class.__index = Class
  -- a stray argument to the constructor or to forward is an error (check.fixed_arguments)
  local checked_forward = check.fixed_arguments(fn, forward, 1)
  local checked_construct = check.fixed_arguments(fn, construct, 1)
  Class.__call = function(self, ...) return checked_forward(self, ...) end
  Class.__tostring = function(self) return name .. "(" .. describe(self) .. ")" end
  setmetatable(Class, {
    __name = fn .. " class",
    __call = function(_, ...) return setmetatable(checked_construct(fn, ...), Class) end,
  })
  -- errors raised from inside a forward by the Tensor API name the layer
  check.function_names[Class.__call] = fn
  check.function_names[forward] = fn
  return Class
end

local function value_str(v)
  if type(v) == "number" and math.type(v) == "float" then return string.format("%g", v) end
  return tostring(v)
end

-- An integer >= minimum (1: "a positive integer", 0: "a non-negative integer").
local function integer_from(minimum)
  local kind = minimum == 1 and "positive" or "non-negative"
  return function(fn, what, v)
    local i = type(v) == "number" and math.tointeger(v) or nil
    if i == nil or i < minimum then
      local got = type(v) == "number" and value_str(v) or check.type_name(v)
      fail(fn, "%s must be a %s integer, got %s", what, kind, got)
    end
    return check.integer(fn, what, i)
  end
end
local positive_integer, non_negative_integer = integer_from(1), integer_from(0)

local function boolean(fn, what, v, default)
  if v == nil then return default end
  if type(v) ~= "boolean" then fail(fn, "%s must be a boolean, got %s", what, check.type_name(v)) end
  return v
end

local function positive_number(fn, what, v, default)
  if v == nil then return default end
  if type(v) ~= "number" or not (v > 0 and v < math.huge) then
    fail(fn, "%s must be a positive number, got %s", what, type(v) == "number" and value_str(v) or check.type_name(v))
  end
  return v
end

-- {a, b} from a number (both) or a pair, each checked by `each`.
local function pair(fn, what, v, each)
  if type(v) == "number" then
    local i = each(fn, what, v)
    return { i, i }
  end
  if type(v) ~= "table" or is_tensor(v) or #v ~= 2 then
    fail(fn, "%s must be an integer or a pair {h, w}, got %s", what, check.type_name(v))
  end
  return { each(fn, what, v[1]), each(fn, what, v[2]) }
end

-- A normalized shape: a size or a non-empty list of sizes (the trailing dims of the input).
local function trailing_shape(fn, v)
  if type(v) == "number" then return { positive_integer(fn, "normalized_shape", v) } end
  if type(v) ~= "table" or is_tensor(v) or #v == 0 then
    fail(fn, "normalized_shape must be a positive integer or a non-empty list of them, got %s", check.type_name(v))
  end
  local shape = {}
  for i = 1, #v do shape[i] = positive_integer(fn, "normalized_shape", v[i]) end
  return check.shape_fits(fn, shape)
end

-- The dtype and device options shared by every constructor (float dtypes only).
local function placement(fn, opts)
  local dtype, device = creation._options(fn, { dtype = opts.dtype, device = opts.device }, rules.default_float)
  if not dtype.is_float then fail(fn, "dtype must be a float dtype, got %s", dtype.name) end
  return { dtype = dtype, device = device }
end

-- PyTorch's default for Linear and Conv2d: the weight kaiming_uniform with a = sqrt(5) (bound
-- 1/sqrt(fan_in)), the bias uniform in the same bound.
local function default_weight(fn, shape, where)
  check.shape_fits(fn, shape)
  return parameter(init.kaiming_uniform(shape, { a = math.sqrt(5), dtype = where.dtype, device = where.device }))
end

local function default_bias(fn, shape, fan_in, where)
  check.shape_fits(fn, shape)
  local bound = 1 / math.sqrt(fan_in)
  return parameter(init.uniform(shape, { a = -bound, b = bound, dtype = where.dtype, device = where.device }))
end

local function filled(fn, shape, value, where)
  check.shape_fits(fn, shape)
  return Tensor.full(shape, value, where):realize()
end

local function input_tensor(fn, x)
  if not is_tensor(x) then fail(fn, "expected a tensor input, got %s", check.type_name(x)) end
  return x
end

-- (1, C, 1, ...) for a per-channel tensor (C,) against an input of ndim dims.
local function channel_shape(channels, ndim)
  local shape = { 1, channels }
  for _ = 3, ndim do shape[#shape + 1] = 1 end
  return shape
end

local function channels_input(fn, x, channels)
  input_tensor(fn, x)
  if #x._shape < 2 or x._shape[2] ~= channels then
    fail(fn, "expected input of shape (N, %d, ...), got shape %s", channels, shape_str(x._shape))
  end
  return x
end

local function trailing_input(fn, x, shape)
  input_tensor(fn, x)
  local xs, k = x._shape, #shape
  local fits = #xs >= k
  for i = 1, k do fits = fits and xs[#xs - k + i] == shape[i] end
  if not fits then
    fail(fn, "expected input with trailing dims %s, got shape %s", shape_str(shape), shape_str(xs))
  end
  return x
end

-- The last k dims, as a list of negative dims.
local function last_dims(k)
  local dims = {}
  for i = 1, k do dims[i] = i - k - 1 end
  return dims
end

-- ---------------------------------------------------------------------------------------
-- training mode

-- Runs fn(...) with tcl.training set to flag, and restores the previous value even when fn
-- raises an error.
local function with_training(fn_name, flag, fn, ...)
  if type(fn) ~= "function" and not (type(getmetatable(fn)) == "table" and getmetatable(fn).__call) then
    fail(fn_name, "expected a function, got %s", check.type_name(fn))
  end
  local previous = class.training
  -- closed when this function returns or an error leaves it (the error and its traceback
  -- pass through untouched)
  local _ <close> = setmetatable({}, { __close = function() class.training = previous end })
  class.training = flag
  return fn(...)
end

--- nn.train(fn, ...): fn(...) in training mode (dropout active, BatchNorm on batch statistics
--  and updating its running ones); returns fn's results. `tcl.training = true` is the unscoped switch.
function M.train(fn, ...) return with_training("nn.train", true, fn, ...) end

--- nn.eval(fn, ...): fn(...) with training off.
function M.eval(fn, ...) return with_training("nn.eval", false, fn, ...) end

-- ---------------------------------------------------------------------------------------
-- Linear, Conv2d

local function padding_str(padding)
  if type(padding) == "string" then return "'" .. padding .. "'" end
  return shape_str(padding)
end

--- Linear(in_features, out_features, {bias = true, dtype =, device =}): y = x W^T + b with
--  weight (out, in) as in PyTorch.
--- The batch size (rows of x) from which Linear copies W^T contiguous (see its forward).
M.CONTIGUOUS_WEIGHT_ROWS = 32

M.Linear = layer_class("Linear", function(fn, in_features, out_features, opts)
  in_features = positive_integer(fn, "in_features", in_features)
  out_features = positive_integer(fn, "out_features", out_features)
  opts = check.options(fn, opts, { bias = true, dtype = true, device = true })
  local with_bias = boolean(fn, "bias", opts.bias, true)
  local where = placement(fn, opts)
  return {
    in_features = in_features, out_features = out_features,
    weight = default_weight(fn, { out_features, in_features }, where),
    bias = with_bias and default_bias(fn, { out_features }, in_features, where) or nil,
  }
end, function(self, x)
  local fn = "nn.Linear"
  input_tensor(fn, x)
  if #x._shape == 0 or x._shape[#x._shape] ~= self.in_features then
    fail(fn, "expected input with last dim %d, got shape %s", self.in_features, shape_str(x._shape))
  end
  local w = self.weight:transpose(1, 2)
  -- x W^T with W in PyTorch's (out, in) layout reads W across its rows, which a register tile
  -- can only gather: for a batch of rows whose input needs no gradient (the data, at the first
  -- layer; inference) W^T is copied contiguous first, one pass over W (an MLP's first layer:
  -- 0.73 ms -> 0.27 ms at batch 128). Where x needs a gradient the copy would make x's
  -- gradient (g C^T) read across rows instead, so the view stays.
  if not x.requires_grad and x:numel() // self.in_features >= M.CONTIGUOUS_WEIGHT_ROWS then w = w:contiguous() end
  return x:linear(w, self.bias)
end, function(self)
  return string.format("in_features=%d, out_features=%d, bias=%s", self.in_features, self.out_features,
    tostring(self.bias ~= nil))
end)

--- Conv2d(in_channels, out_channels, kernel_size, {stride = 1, padding = 0, dilation = 1,
--  groups = 1, bias = true, dtype =, device =}) over (N, C, H, W) inputs. kernel_size, stride,
--  dilation and padding are a number or a pair {h, w}; padding may also be "valid" (0) or
--  "same" (stride 1: the output keeps the input's size; an odd total puts the extra row and
--  column after, as PyTorch does). weight (out, in / groups, kh, kw), bias (out).
M.Conv2d = layer_class("Conv2d", function(fn, in_channels, out_channels, kernel_size, opts)
  in_channels = positive_integer(fn, "in_channels", in_channels)
  out_channels = positive_integer(fn, "out_channels", out_channels)
  local kernel = pair(fn, "kernel_size", kernel_size, positive_integer)
  opts = check.options(fn, opts, { stride = true, padding = true, dilation = true, groups = true, bias = true,
    dtype = true, device = true })
  local stride = pair(fn, "stride", opts.stride or 1, positive_integer)
  local dilation = pair(fn, "dilation", opts.dilation or 1, positive_integer)
  local groups = positive_integer(fn, "groups", opts.groups or 1)
  if in_channels % groups ~= 0 then
    fail(fn, "in_channels (%d) must be divisible by groups (%d)", in_channels, groups)
  end
  if out_channels % groups ~= 0 then
    fail(fn, "out_channels (%d) must be divisible by groups (%d)", out_channels, groups)
  end
  -- padding: kept as "valid", "same" or a pair; pads: {before, after} per spatial dim
  local padding, pads = opts.padding or 0, {}
  if padding == "same" then
    if stride[1] ~= 1 or stride[2] ~= 1 then fail(fn, "padding 'same' needs stride 1, got %s", shape_str(stride)) end
    for i = 1, 2 do
      local total = dilation[i] * (kernel[i] - 1)
      pads[i] = { total // 2, total - total // 2 }
    end
  elseif padding == "valid" then
    pads = { { 0, 0 }, { 0, 0 } }
  elseif type(padding) == "string" then
    fail(fn, "padding must be 'valid', 'same', an integer or a pair {h, w}, got '%s'", check.quote(padding))
  else
    padding = pair(fn, "padding", padding, non_negative_integer)
    pads = { { padding[1], padding[1] }, { padding[2], padding[2] } }
  end
  local with_bias = boolean(fn, "bias", opts.bias, true)
  local where = placement(fn, opts)
  local weight_shape = { out_channels, in_channels // groups, kernel[1], kernel[2] }
  return {
    in_channels = in_channels, out_channels = out_channels, kernel_size = kernel, stride = stride,
    padding = padding, dilation = dilation, groups = groups, _pads = pads,
    weight = default_weight(fn, weight_shape, where),
    bias = with_bias and default_bias(fn, { out_channels }, init.calculate_fans(weight_shape), where) or nil,
  }
end, function(self, x)
  local fn = "nn.Conv2d"
  input_tensor(fn, x)
  local xs = x._shape
  if #xs ~= 4 or xs[2] ~= self.in_channels then
    fail(fn, "expected input of shape (N, %d, H, W), got shape %s", self.in_channels, shape_str(xs))
  end
  for i = 1, 2 do
    local padded = xs[2 + i] + self._pads[i][1] + self._pads[i][2]
    if padded < self.dilation[i] * (self.kernel_size[i] - 1) + 1 then
      fail(fn, "input %s is smaller than the kernel %s (padding %s, dilation %s)", shape_str(xs),
        shape_str(self.kernel_size), padding_str(self.padding), shape_str(self.dilation))
    end
  end
  return x:conv2d(self.weight, self.bias, { stride = self.stride, padding = self._pads, dilation = self.dilation,
    groups = self.groups })
end, function(self)
  local parts = { string.format("%d, %d, kernel_size=%s, stride=%s", self.in_channels, self.out_channels,
    shape_str(self.kernel_size), shape_str(self.stride)) }
  local p = self.padding
  if type(p) == "string" or p[1] ~= 0 or p[2] ~= 0 then parts[#parts + 1] = "padding=" .. padding_str(p) end
  if self.dilation[1] ~= 1 or self.dilation[2] ~= 1 then parts[#parts + 1] = "dilation=" .. shape_str(self.dilation) end
  if self.groups ~= 1 then parts[#parts + 1] = "groups=" .. self.groups end
  if self.bias == nil then parts[#parts + 1] = "bias=false" end
  return table.concat(parts, ", ")
end)

-- Conv1d, Conv3d, ConvTranspose1d/2d/3d: one constructor for n spatial dims (Tensor.conv and
-- Tensor.conv_transpose do the work and check the padding against the input).

-- n integers from a number or a list of n, each checked by `each`.
local function per_dim(fn, what, v, n, each)
  if type(v) == "number" then
    local list = {}
    for i = 1, n do list[i] = each(fn, what, v) end
    return list
  end
  if type(v) ~= "table" or is_tensor(v) or #v ~= n then
    fail(fn, "%s must be an integer or a list of %d integers, got %s", what, n, check.type_name(v))
  end
  local list = {}
  for i = 1, n do list[i] = each(fn, what, v[i]) end
  return list
end

local PADDING_MODES = { zeros = true, reflect = true, replicate = true, circular = true }

local function conv_layer(name, n, transposed)
  local known = { stride = true, padding = true, dilation = true, groups = true, bias = true, dtype = true,
    device = true }
  if transposed then known.output_padding = true else known.padding_mode = true end
  return layer_class(name, function(fn, in_channels, out_channels, kernel_size, opts)
    in_channels = positive_integer(fn, "in_channels", in_channels)
    out_channels = positive_integer(fn, "out_channels", out_channels)
    local kernel = per_dim(fn, "kernel_size", kernel_size, n, positive_integer)
    opts = check.options(fn, opts, known)
    local groups = positive_integer(fn, "groups", opts.groups or 1)
    if in_channels % groups ~= 0 or out_channels % groups ~= 0 then
      fail(fn, "in_channels (%d) and out_channels (%d) must be divisible by groups (%d)", in_channels, out_channels,
        groups)
    end
    local self = {
      in_channels = in_channels, out_channels = out_channels, kernel_size = kernel, groups = groups,
      stride = per_dim(fn, "stride", opts.stride or 1, n, positive_integer),
      dilation = per_dim(fn, "dilation", opts.dilation or 1, n, positive_integer),
    }
    local padding = opts.padding or 0
    if transposed then
      self.padding = per_dim(fn, "padding", padding, n, non_negative_integer)
      self.output_padding = per_dim(fn, "output_padding", opts.output_padding or 0, n, non_negative_integer)
    else
      if padding == "same" then
        for i = 1, n do
          if self.stride[i] ~= 1 then fail(fn, "padding 'same' needs stride 1, got %s", shape_str(self.stride)) end
        end
      elseif type(padding) == "string" and padding ~= "valid" then
        fail(fn, "padding must be 'valid', 'same', an integer or a list of %d, got '%s'", n, check.quote(padding))
      end
      self.padding = type(padding) == "string" and padding or per_dim(fn, "padding", padding, n, non_negative_integer)
      self.padding_mode = opts.padding_mode or "zeros"
      if not PADDING_MODES[self.padding_mode] then
        fail(fn, "padding_mode must be 'zeros', 'reflect', 'replicate' or 'circular', got %s",
          check.type_name(self.padding_mode))
      end
    end
    local where = placement(fn, opts)
    local weight_shape = { out_channels, in_channels // groups }
    if transposed then weight_shape = { in_channels, out_channels // groups } end
    for i = 1, n do weight_shape[2 + i] = kernel[i] end
    self.weight = default_weight(fn, weight_shape, where)
    if boolean(fn, "bias", opts.bias, true) then
      self.bias = default_bias(fn, { out_channels }, init.calculate_fans(weight_shape), where)
    end
    return self
  end, function(self, x)
    local fn = "nn." .. name
    input_tensor(fn, x)
    local xs = x._shape
    if #xs ~= n + 2 or xs[2] ~= self.in_channels then
      fail(fn, "expected input of shape (N, %d, %d spatial dims), got shape %s", self.in_channels, n, shape_str(xs))
    end
    if transposed then
      return x:conv_transpose(self.weight, self.bias, { stride = self.stride, padding = self.padding,
        output_padding = self.output_padding, dilation = self.dilation, groups = self.groups })
    end
    return x:conv(self.weight, self.bias, { stride = self.stride, padding = self.padding, dilation = self.dilation,
      groups = self.groups, padding_mode = self.padding_mode })
  end, function(self)
    local parts = { string.format("%d, %d, kernel_size=%s, stride=%s", self.in_channels, self.out_channels,
      shape_str(self.kernel_size), shape_str(self.stride)) }
    local p = self.padding
    if type(p) == "string" then parts[#parts + 1] = "padding=" .. p
    else
      for i = 1, n do if p[i] ~= 0 then parts[#parts + 1] = "padding=" .. shape_str(p) break end end
    end
    if self.output_padding then
      for i = 1, n do
        if self.output_padding[i] ~= 0 then
          parts[#parts + 1] = "output_padding=" .. shape_str(self.output_padding)
          break
        end
      end
    end
    for i = 1, n do
      if self.dilation[i] ~= 1 then parts[#parts + 1] = "dilation=" .. shape_str(self.dilation) break end
    end
    if self.groups ~= 1 then parts[#parts + 1] = "groups=" .. self.groups end
    if self.bias == nil then parts[#parts + 1] = "bias=false" end
    if self.padding_mode and self.padding_mode ~= "zeros" then
      parts[#parts + 1] = "padding_mode=" .. self.padding_mode
    end
    return table.concat(parts, ", ")
  end)
end

--- Conv1d(in_channels, out_channels, kernel_size, {stride = 1, padding = 0, dilation = 1,
--  groups = 1, bias = true, padding_mode = 'zeros', dtype =, device =}) over (N, C, L) inputs
--  (Tensor.conv1d). padding: a number, 'valid' or 'same'; padding_mode zeros, reflect,
--  replicate or circular. weight (out, in / groups, k), bias (out).
M.Conv1d = conv_layer("Conv1d", 1, false)

--- Conv3d(in_channels, out_channels, kernel_size, {stride, padding, dilation, groups, bias,
--  padding_mode, dtype, device}) over (N, C, D, H, W) inputs (Tensor.conv3d); sizes are a number
--  or a list of three. weight (out, in / groups, kd, kh, kw), bias (out).
M.Conv3d = conv_layer("Conv3d", 3, false)

--- ConvTranspose1d(in_channels, out_channels, kernel_size, {stride = 1, padding = 0,
--  output_padding = 0, dilation = 1, groups = 1, bias = true, dtype =, device =}) over (N, C, L)
--  inputs (Tensor.conv_transpose1d). weight (in, out / groups, k), bias (out).
M.ConvTranspose1d = conv_layer("ConvTranspose1d", 1, true)

--- ConvTranspose2d(in_channels, out_channels, kernel_size, {stride, padding, output_padding,
--  dilation, groups, bias, dtype, device}) over (N, C, H, W) inputs; sizes are a number or a
--  pair. weight (in, out / groups, kh, kw), bias (out).
M.ConvTranspose2d = conv_layer("ConvTranspose2d", 2, true)

--- ConvTranspose3d(in_channels, out_channels, kernel_size, {...as ConvTranspose2d}) over
--  (N, C, D, H, W) inputs. weight (in, out / groups, kd, kh, kw), bias (out).
M.ConvTranspose3d = conv_layer("ConvTranspose3d", 3, true)

-- ---------------------------------------------------------------------------------------
-- normalization

-- BatchNorm's forward (also under the names BatchNorm1d and BatchNorm2d, which check the rank).
local function batchnorm_forward(fn, self, x)
  channels_input(fn, x, self.num_features)
  local xs = x._shape
  local axes = {}
  for d = 1, #xs do if d ~= 2 then axes[#axes + 1] = d end end
  local tracking = self.running_mean ~= nil
  if class.training or not tracking then
    local count = check.numel(xs) // xs[2]
    if class.training and count <= 1 then
      fail(fn, "expected more than 1 value per channel when training, got input of shape %s", shape_str(xs))
    end
    local mean, var = x:mean(axes), x:var(axes, false, 0) -- the biased variance normalizes
    if class.training and tracking then
      local batches = self.num_batches_tracked + 1
      local take = self.momentum or batches:cast(self.running_mean.dtype):reciprocal()
      local keep = self.momentum and 1 - self.momentum or take:neg():add(1)
      local unbiased = var:mul(count / (count - 1))
      local new_mean = self.running_mean:mul(keep):add(mean:mul(take))
      local new_var = self.running_var:mul(keep):add(unbiased:mul(take))
      update_in_place(self.running_mean, new_mean)
      update_in_place(self.running_var, new_var)
      update_in_place(self.num_batches_tracked, batches)
    end
    return x:batchnorm(self.weight, self.bias, mean, var:add(self.eps):rsqrt())
  end
  return x:batchnorm(self.weight, self.bias, self.running_mean, self.running_var:add(self.eps):rsqrt())
end

local function batchnorm_class(name, ranks)
  return layer_class(name, function(fn, num_features, opts)
    num_features = positive_integer(fn, "num_features", num_features)
    opts = check.options(fn, opts, { eps = true, momentum = true, affine = true, track_running_stats = true,
      dtype = true, device = true })
    local momentum = opts.momentum
    if momentum == nil then momentum = 0.1 end
    if momentum ~= false and (type(momentum) ~= "number" or not (momentum >= 0 and momentum <= 1)) then
      fail(fn, "momentum must be a number in [0, 1] or false (a cumulative average), got %s",
        type(momentum) == "number" and value_str(momentum) or check.type_name(momentum))
    end
    local affine = boolean(fn, "affine", opts.affine, true)
    local track = boolean(fn, "track_running_stats", opts.track_running_stats, true)
    local where = placement(fn, opts)
    local shape = { num_features }
    return {
      num_features = num_features, eps = positive_number(fn, "eps", opts.eps, 1e-5), momentum = momentum,
      affine = affine, track_running_stats = track,
      weight = affine and parameter(filled(fn, shape, 1, where)) or nil,
      bias = affine and parameter(filled(fn, shape, 0, where)) or nil,
      running_mean = track and filled(fn, shape, 0, where) or nil,
      running_var = track and filled(fn, shape, 1, where) or nil,
      num_batches_tracked = track and Tensor.zeros({}, { dtype = "int64", device = where.device }):realize() or nil,
    }
  end, function(self, x)
    local fn = "nn." .. name
    input_tensor(fn, x)
    if ranks and not ranks[#x._shape] then
      fail(fn, "expected a %s input, got shape %s", ranks.text, shape_str(x._shape))
    end
    return batchnorm_forward(fn, self, x)
  end, function(self)
    return string.format("%d, eps=%s, momentum=%s, affine=%s, track_running_stats=%s", self.num_features,
      value_str(self.eps), self.momentum == false and "false" or value_str(self.momentum), tostring(self.affine),
      tostring(self.track_running_stats))
  end)
end

--- BatchNorm(num_features, {eps = 1e-5, momentum = 0.1, affine = true, track_running_stats =
--  true, dtype =, device =}) over dim 2 (channels) of (N, C, ...) inputs. In training mode it
--  normalizes with the batch's mean and biased variance and moves running_mean and running_var
--  (with the unbiased variance) by momentum, or by 1/num_batches_tracked when momentum is
--  false; otherwise it normalizes with the running statistics (or the batch's, without them).
M.BatchNorm = batchnorm_class("BatchNorm")
--- BatchNorm1d and BatchNorm2d: BatchNorm for (N, C) or (N, C, L), and (N, C, H, W) inputs.
M.BatchNorm1d = batchnorm_class("BatchNorm1d", { [2] = true, [3] = true, text = "2-d (N, C) or 3-d (N, C, L)" })
M.BatchNorm2d = batchnorm_class("BatchNorm2d", { [4] = true, text = "4-d (N, C, H, W)" })

--- LayerNorm(normalized_shape, {eps = 1e-5, elementwise_affine = true, bias = true, dtype =,
--  device =}): normalizes over the trailing dims normalized_shape (a size or a list of sizes).
M.LayerNorm = layer_class("LayerNorm", function(fn, normalized_shape, opts)
  local shape = trailing_shape(fn, normalized_shape)
  opts = check.options(fn, opts, { eps = true, elementwise_affine = true, bias = true, dtype = true, device = true })
  local affine = boolean(fn, "elementwise_affine", opts.elementwise_affine, true)
  local with_bias = boolean(fn, "bias", opts.bias, true)
  local where = placement(fn, opts)
  return {
    normalized_shape = shape, eps = positive_number(fn, "eps", opts.eps, 1e-5), elementwise_affine = affine,
    weight = affine and parameter(filled(fn, shape, 1, where)) or nil,
    bias = affine and with_bias and parameter(filled(fn, shape, 0, where)) or nil,
  }
end, function(self, x)
  trailing_input("nn.LayerNorm", x, self.normalized_shape)
  local y = x:layernorm(last_dims(#self.normalized_shape), self.eps)
  if self.weight then y = y:mul(self.weight) end
  if self.bias then y = y:add(self.bias) end
  return y
end, function(self)
  return string.format("%s, eps=%s, elementwise_affine=%s", shape_str(self.normalized_shape), value_str(self.eps),
    tostring(self.elementwise_affine))
end)

-- The machine epsilon of each float dtype: RMSNorm's default eps, as in PyTorch.
local EPSILON = { float64 = 2.0 ^ -52, float32 = 2.0 ^ -23, float16 = 2.0 ^ -10, bfloat16 = 2.0 ^ -7,
  fp8e4m3 = 2.0 ^ -3, fp8e5m2 = 2.0 ^ -2 }

--- RMSNorm(normalized_shape, {eps, elementwise_affine = true, dtype =, device =}):
--  x / sqrt(mean(x^2) + eps) * weight over the trailing dims; eps defaults to the input
--  dtype's machine epsilon (PyTorch's default).
M.RMSNorm = layer_class("RMSNorm", function(fn, normalized_shape, opts)
  local shape = trailing_shape(fn, normalized_shape)
  opts = check.options(fn, opts, { eps = true, elementwise_affine = true, dtype = true, device = true })
  local affine = boolean(fn, "elementwise_affine", opts.elementwise_affine, true)
  local where = placement(fn, opts)
  return {
    normalized_shape = shape, eps = positive_number(fn, "eps", opts.eps, nil), elementwise_affine = affine,
    weight = affine and parameter(filled(fn, shape, 1, where)) or nil,
  }
end, function(self, x)
  trailing_input("nn.RMSNorm", x, self.normalized_shape)
  local eps = self.eps or EPSILON[x.dtype.is_float and x.dtype.name or "float32"]
  local y = x:mul(x:square():mean(last_dims(#self.normalized_shape), true):add(eps):rsqrt())
  if self.weight then y = y:mul(self.weight) end
  return y
end, function(self)
  return string.format("%s, eps=%s, elementwise_affine=%s", shape_str(self.normalized_shape),
    self.eps and value_str(self.eps) or "nil", tostring(self.elementwise_affine))
end)

--- GroupNorm(num_groups, num_channels, {eps = 1e-5, affine = true, dtype =, device =}):
--  normalizes each group of num_channels / num_groups channels of (N, C, ...) inputs over the
--  group's channels and every position, then applies a per-channel weight and bias.
M.GroupNorm = layer_class("GroupNorm", function(fn, num_groups, num_channels, opts)
  num_groups = positive_integer(fn, "num_groups", num_groups)
  num_channels = positive_integer(fn, "num_channels", num_channels)
  if num_channels % num_groups ~= 0 then
    fail(fn, "num_channels (%d) must be divisible by num_groups (%d)", num_channels, num_groups)
  end
  opts = check.options(fn, opts, { eps = true, affine = true, dtype = true, device = true })
  local affine = boolean(fn, "affine", opts.affine, true)
  local where = placement(fn, opts)
  return {
    num_groups = num_groups, num_channels = num_channels, eps = positive_number(fn, "eps", opts.eps, 1e-5),
    affine = affine,
    weight = affine and parameter(filled(fn, { num_channels }, 1, where)) or nil,
    bias = affine and parameter(filled(fn, { num_channels }, 0, where)) or nil,
  }
end, function(self, x)
  channels_input("nn.GroupNorm", x, self.num_channels)
  local xs = x._shape
  local groups = self.num_groups
  local per_group = self.num_channels // groups -- times every position: (C / groups) * H * W ...
  for d = 3, #xs do per_group = per_group * xs[d] end
  local y = x:reshape(xs[1], groups, per_group):layernorm(3, self.eps):reshape(xs)
  local per_channel = channel_shape(self.num_channels, #xs)
  if self.weight then y = y:mul(self.weight:reshape(per_channel)) end
  if self.bias then y = y:add(self.bias:reshape(per_channel)) end
  return y
end, function(self)
  return string.format("%d, %d, eps=%s, affine=%s", self.num_groups, self.num_channels, value_str(self.eps),
    tostring(self.affine))
end)

local function instancenorm_class(name, rank)
  local fn = "nn." .. name
  return layer_class(name, function(_, num_features, opts)
    num_features = positive_integer(fn, "num_features", num_features)
    opts = check.options(fn, opts, { eps = true, affine = true, dtype = true, device = true })
    local affine = boolean(fn, "affine", opts.affine, false)
    local where = placement(fn, opts)
    return {
      num_features = num_features, eps = positive_number(fn, "eps", opts.eps, 1e-5), affine = affine,
      weight = affine and parameter(filled(fn, { num_features }, 1, where)) or nil,
      bias = affine and parameter(filled(fn, { num_features }, 0, where)) or nil,
    }
  end, function(self, x)
    x = input_tensor(fn, x)
    if #x._shape ~= rank then
      fail(fn, "expects a %d-d input (N, C, ...), got shape %s", rank, shape_str(x._shape))
    end
    channels_input(fn, x, self.num_features)
    local xs = x._shape
    local positions = 1
    for d = 3, #xs do positions = positions * xs[d] end
    -- each (sample, channel) plane is normalized on its own, in training and eval mode alike
    local y = x:reshape(xs[1], xs[2], positions):layernorm(3, self.eps):reshape(xs)
    local per_channel = channel_shape(self.num_features, #xs)
    if self.weight then y = y:mul(self.weight:reshape(per_channel)) end
    if self.bias then y = y:add(self.bias:reshape(per_channel)) end
    return y
  end, function(self)
    return string.format("%d, eps=%s, affine=%s", self.num_features, value_str(self.eps), tostring(self.affine))
  end)
end

--- InstanceNorm1d(num_features, {eps = 1e-5, affine = false, dtype =, device =}): normalizes each
--  channel of each sample of a 3-d (N, C, L) input over its positions (mean 0, variance 1, the
--  variance dividing by the count), then, when affine, applies a per-channel weight and bias.
--  Keeps no running statistics: training and eval mode compute the same.
M.InstanceNorm1d = instancenorm_class("InstanceNorm1d", 3)
--- InstanceNorm2d(num_features, {eps = 1e-5, affine = false, dtype =, device =}): InstanceNorm1d
--  for 4-d (N, C, H, W) inputs.
M.InstanceNorm2d = instancenorm_class("InstanceNorm2d", 4)
--- InstanceNorm3d(num_features, {eps = 1e-5, affine = false, dtype =, device =}): InstanceNorm1d
--  for 5-d (N, C, D, H, W) inputs.
M.InstanceNorm3d = instancenorm_class("InstanceNorm3d", 5)

-- ---------------------------------------------------------------------------------------
-- Activation and reshaping layers: module objects for the elementwise functions (for Sequential)

local function dim_argument(fn, what, v, default)
  if v == nil then return default end
  if math.type(v) ~= "integer" or v == 0 then
    fail(fn, "%s must be a nonzero integer dim (1-based, negative from the end), got %s", what, tostring(v))
  end
  return v
end

local function function_layer(name, construct, apply, describe)
  local fn = "nn." .. name
  return layer_class(name, construct or function(_) return {} end, function(self, x)
    return apply(self, input_tensor(fn, x))
  end, describe or function() return "" end)
end

--- ReLU(): max(x, 0) elementwise, as a layer.
M.ReLU = function_layer("ReLU", nil, function(_, x) return x:relu() end)
--- GELU(): Tensor.gelu (the tanh approximation of x * Phi(x)) elementwise, as a layer.
M.GELU = function_layer("GELU", nil, function(_, x) return x:gelu() end)
--- SiLU(): x * sigmoid(x) elementwise, as a layer.
M.SiLU = function_layer("SiLU", nil, function(_, x) return x:silu() end)
--- Sigmoid(): 1 / (1 + exp(-x)) elementwise, as a layer.
M.Sigmoid = function_layer("Sigmoid", nil, function(_, x) return x:sigmoid() end)
--- Tanh(): tanh elementwise, as a layer.
M.Tanh = function_layer("Tanh", nil, function(_, x) return x:tanh() end)
--- Identity(): returns its input unchanged.
M.Identity = function_layer("Identity", nil, function(_, x) return x end)
--- Softmax(dim): softmax along dim (1-based, negative from the end; required: dim 0 is an error).
M.Softmax = function_layer("Softmax", function(fn, dim)
  if dim == nil then fail(fn, "needs a dim (1-based, negative from the end)") end
  return { dim = dim_argument(fn, "dim", dim) }
end, function(self, x) return x:softmax(self.dim) end, function(self) return "dim=" .. self.dim end)
--- LogSoftmax(dim): log of softmax along dim (1-based, negative from the end; required).
M.LogSoftmax = function_layer("LogSoftmax", function(fn, dim)
  if dim == nil then fail(fn, "needs a dim (1-based, negative from the end)") end
  return { dim = dim_argument(fn, "dim", dim) }
end, function(self, x) return x:log_softmax(self.dim) end, function(self) return "dim=" .. self.dim end)
--- LeakyReLU(negative_slope = 0.01): x where x > 0, negative_slope * x elsewhere.
M.LeakyReLU = function_layer("LeakyReLU", function(fn, slope)
  if slope ~= nil and type(slope) ~= "number" then fail(fn, "negative_slope must be a number, got %s", type(slope)) end
  return { negative_slope = slope or 0.01 }
end, function(self, x) return x:leaky_relu(self.negative_slope) end,
  function(self) return "negative_slope=" .. value_str(self.negative_slope) end)
--- ELU(alpha = 1): x where x > 0, alpha * (exp(x) - 1) elsewhere.
M.ELU = function_layer("ELU", function(fn, alpha)
  if alpha ~= nil and type(alpha) ~= "number" then fail(fn, "alpha must be a number, got %s", type(alpha)) end
  return { alpha = alpha or 1.0 }
end, function(self, x) return x:elu(self.alpha) end, function(self) return "alpha=" .. value_str(self.alpha) end)
--- Flatten(start_dim = 2, end_dim = -1): joins dims start_dim..end_dim (1-based: the default keeps
--  the batch dim 1, like torch's start_dim=1).
M.Flatten = function_layer("Flatten", function(fn, start_dim, end_dim)
  return { start_dim = dim_argument(fn, "start_dim", start_dim, 2), end_dim = dim_argument(fn, "end_dim", end_dim, -1) }
end, function(self, x) return x:flatten(self.start_dim, self.end_dim) end,
  function(self) return string.format("start_dim=%d, end_dim=%d", self.start_dim, self.end_dim) end)

--- Unflatten(dim, sizes): splits dim (1-based) into the sizes of the table sizes (Tensor.unflatten).
M.Unflatten = function_layer("Unflatten", function(fn, dim, sizes)
  if type(sizes) ~= "table" then fail(fn, "sizes must be a table of sizes, got %s", type(sizes)) end
  return { dim = dim_argument(fn, "dim", dim), sizes = sizes }
end, function(self, x) return x:unflatten(self.dim, self.sizes) end,
  function(self) return string.format("dim=%d, sizes=%s", self.dim, shape_str(self.sizes)) end)
--- MaxPool2d(kernel_size, opts): Tensor.max_pool2d with these kernel_size and options, as a layer.
M.MaxPool2d = function_layer("MaxPool2d", function(_, kernel_size, opts)
  return { kernel_size = kernel_size, opts = opts }
end, function(self, x) return x:max_pool2d(self.kernel_size, self.opts) end)
--- AvgPool2d(kernel_size, opts): Tensor.avg_pool2d with these kernel_size and options, as a layer.
M.AvgPool2d = function_layer("AvgPool2d", function(_, kernel_size, opts)
  return { kernel_size = kernel_size, opts = opts }
end, function(self, x) return x:avg_pool2d(self.kernel_size, self.opts) end)
--- AdaptiveAvgPool2d(output_size): Tensor.adaptive_avg_pool2d (a number or {h, w}), as a layer.
M.AdaptiveAvgPool2d = function_layer("AdaptiveAvgPool2d", function(_, output_size)
  return { output_size = output_size }
end, function(self, x) return x:adaptive_avg_pool2d(self.output_size) end)

-- ---------------------------------------------------------------------------------------
-- Embedding, Dropout

--- Embedding(num_embeddings, embedding_dim, {dtype =, device =}): rows of weight
--  (num_embeddings, embedding_dim), initialized normal(0, 1), picked by integer indices of any
--  shape, which are 1-based like one_hot's class indices: (...) -> (..., embedding_dim). An
--  index outside 1..num_embeddings is an error, raised by the next read to the host.
M.Embedding = layer_class("Embedding", function(fn, num_embeddings, embedding_dim, opts)
  num_embeddings = positive_integer(fn, "num_embeddings", num_embeddings)
  embedding_dim = positive_integer(fn, "embedding_dim", embedding_dim)
  opts = check.options(fn, opts, { dtype = true, device = true })
  local where = placement(fn, opts)
  local shape = { num_embeddings, embedding_dim }
  check.shape_fits(fn, shape)
  return {
    num_embeddings = num_embeddings, embedding_dim = embedding_dim,
    weight = parameter(Tensor.randn(shape, where)),
  }
end, function(self, x)
  local fn = "nn.Embedding"
  input_tensor(fn, x)
  if not x.dtype.is_int then fail(fn, "expected integer indices, got %s", x.dtype.name) end
  -- one-hot rows times the weight: no index is read on the host, and the gradient reaches
  -- the weight through the matmul
  return nn_ops._one_hot_for(fn, x, self.num_embeddings, "indices"):cast(self.weight.dtype):matmul(self.weight)
end, function(self)
  return string.format("%d, %d", self.num_embeddings, self.embedding_dim)
end)

--- Dropout(p = 0.5): Tensor.dropout(x, p), which zeroes elements only while tcl.training is on.
M.Dropout = layer_class("Dropout", function(fn, p)
  if p == nil then p = 0.5 end
  if type(p) ~= "number" or not (p >= 0 and p < 1) then
    fail(fn, "p must be a number in [0, 1), got %s", type(p) == "number" and value_str(p) or check.type_name(p))
  end
  return { p = p }
end, function(self, x)
  return input_tensor("nn.Dropout", x):dropout(self.p)
end, function(self)
  return "p=" .. value_str(self.p)
end)

-- ---------------------------------------------------------------------------------------
-- Sequential

local function callable(v)
  return type(v) == "function" or (type(getmetatable(v)) == "table" and getmetatable(v).__call ~= nil)
end

--- Sequential{step, ...}: calls each step on the result of the one before. A step is a layer,
--  any callable table, or a function of one tensor (Tensor.relu). The steps are the list
--  `layers`, so their state is named layers.1.weight, layers.2.bias, ...
M.Sequential = layer_class("Sequential", function(fn, steps, ...)
  if select("#", ...) > 0 or type(steps) ~= "table" or is_tensor(steps) or getmetatable(steps) ~= nil then
    fail(fn, "expected one list of steps, as in nn.Sequential{nn.Linear(2, 3), Tensor.relu}")
  end
  local layers = {}
  for k in pairs(steps) do
    if math.type(k) ~= "integer" or k < 1 or k > #steps then
      fail(fn, "expected a list of steps, got a table with key %s", tostring(k))
    end
  end
  for i = 1, #steps do
    if not callable(steps[i]) then
      fail(fn, "step %d must be a layer or a function, got %s", i, check.type_name(steps[i]))
    end
    layers[i] = steps[i]
  end
  return { layers = layers }
end, function(self, x)
  for _, step in ipairs(self.layers) do x = step(x) end
  return x
end, function(self)
  if #self.layers == 0 then return "" end
  local lines = { "" }
  for i, step in ipairs(self.layers) do
    local text
    if type(step) == "function" then
      -- a Tensor method by its name, another function by where it is defined
      local name, info = check.function_names[step], debug.getinfo(step, "S")
      text = name and "Tensor." .. name or info.what == "C" and "function"
        or string.format("function (%s:%d)", info.short_src, info.linedefined)
    else
      text = tostring(step)
    end
    lines[#lines + 1] = "  (" .. i .. "): " .. text:gsub("\n", "\n  ")
  end
  return table.concat(lines, "\n") .. "\n"
end)

-- the recurrent layers (tcl.api.recurrent) and MultiheadAttention (tcl.api.attention), built
-- from the helpers above
local helpers = { layer_class = layer_class, parameter = parameter, positive_integer = positive_integer,
  non_negative_integer = non_negative_integer, boolean = boolean, placement = placement, value_str = value_str }
require "tcl.api.recurrent"(M, helpers)
require "tcl.api.attention"(M, helpers)

-- tcl.nn.state: parameters, state dicts and safetensors files (tcl.api.state)
M.state = require "tcl.api.state"
local grad_clipping = require "tcl.api.grad_clipping"
M.clip_grad_norm, M.clip_grad_value = grad_clipping.clip_grad_norm, grad_clipping.clip_grad_value
-- tcl.nn.init: weight initializers (tcl.api.init_weights)
M.init = init

return check.fix_arguments(M, "nn.")
