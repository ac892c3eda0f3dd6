-- spec/nn/nn_layers_spec.lua — tcl.nn layers (lua/tcl/api/layers.lua): values against naive Lua
-- loops over the flat row-major data of small inputs (Linear, Conv2d with stride, padding,
-- dilation and groups, each norm in training and eval mode with the running statistics over
-- two steps, Embedding, Dropout, Sequential), default initialization, state field names,
-- training switches, every argument and input-shape error, tostring, and (when python3 with
-- torch is installed) torch.nn on the same weights.
local tcl = require "tcl"
local nn = require "tcl.api.layers"
local helper = require "spec.support.helper"
local Tensor = tcl.Tensor

local TOLERANCE = 1e-5

local function numel(shape)
  local n = 1
  for _, s in ipairs(shape) do n = n * s end
  return n
end

local function same_shape(a, b)
  if #a ~= #b then return false end
  for i = 1, #a do if a[i] ~= b[i] then return false end end
  return true
end

local function shape_text(shape) return "(" .. table.concat(shape, ", ") .. ")" end

-- Asserts that tensor t has `shape` and its values are within the tolerance of `expected`
-- (a flat row-major list), relative for large values.
local function check_values(t, shape, expected, what, tolerance)
  tolerance = tolerance or TOLERANCE
  assert(same_shape(t.shape, shape), what .. ": shape " .. shape_text(t.shape) .. ", expected " .. shape_text(shape))
  local got = t:data()
  assert(#got == #expected, what .. ": " .. #got .. " values, expected " .. #expected)
  for i = 1, #got do
    local difference = math.abs(got[i] - expected[i])
    if difference > tolerance * math.max(1, math.abs(expected[i])) or difference ~= difference then -- or NaN
      error(string.format("%s: value %d is %.9g, expected %.9g", what, i, got[i], expected[i]), 2)
    end
  end
end

-- A seeded float32 input and its values.
local function input(seed, shape)
  Tensor.manual_seed(seed)
  local t = Tensor.randn(shape):realize()
  return t, t:data()
end

-- Mean and variance (biased and unbiased) of a list.
local function moments(values)
  local sum = 0
  for _, v in ipairs(values) do sum = sum + v end
  local mean = sum / #values
  local squares = 0
  for _, v in ipairs(values) do squares = squares + (v - mean) ^ 2 end
  return mean, squares / #values, squares / (#values - 1)
end

-- ---------------------------------------------------------------------------------------
-- naive references on flat row-major lists

local function linear_ref(x, x_shape, w, b, out_features)
  local in_features = x_shape[#x_shape]
  local rows = #x // in_features
  local y = {}
  for r = 0, rows - 1 do
    for o = 0, out_features - 1 do
      local acc = b and b[o + 1] or 0
      for i = 0, in_features - 1 do acc = acc + x[r * in_features + i + 1] * w[o * in_features + i + 1] end
      y[r * out_features + o + 1] = acc
    end
  end
  return y
end

-- x (N, C, H, W), w (Co, C / groups, kh, kw); pads {{top, bottom}, {left, right}}.
local function conv2d_ref(x, xs, w, ws, b, stride, pads, dilation, groups)
  local N, C, H, W = xs[1], xs[2], xs[3], xs[4]
  local Co, Cg, kh, kw = ws[1], ws[2], ws[3], ws[4]
  local Ho = (H + pads[1][1] + pads[1][2] - dilation[1] * (kh - 1) - 1) // stride[1] + 1
  local Wo = (W + pads[2][1] + pads[2][2] - dilation[2] * (kw - 1) - 1) // stride[2] + 1
  local per_group = Co // groups
  local y = {}
  for n = 0, N - 1 do
    for o = 0, Co - 1 do
      local g = o // per_group
      for i = 0, Ho - 1 do
        for j = 0, Wo - 1 do
          local acc = b and b[o + 1] or 0
          for c = 0, Cg - 1 do
            for p = 0, kh - 1 do
              for q = 0, kw - 1 do
                local h = i * stride[1] + p * dilation[1] - pads[1][1]
                local v = j * stride[2] + q * dilation[2] - pads[2][1]
                if h >= 0 and h < H and v >= 0 and v < W then
                  local xi = ((n * C + g * Cg + c) * H + h) * W + v
                  local wi = ((o * Cg + c) * kh + p) * kw + q
                  acc = acc + x[xi + 1] * w[wi + 1]
                end
              end
            end
          end
          y[((n * Co + o) * Ho + i) * Wo + j + 1] = acc
        end
      end
    end
  end
  return y, { N, Co, Ho, Wo }
end

-- The flat indices of channel c of an (N, C, ...) list, per batch entry n (all n when nil).
local function channel_indices(shape, c, n)
  local C, inner = shape[2], numel(shape) // (shape[1] * shape[2])
  local list = {}
  for b = n or 0, n or shape[1] - 1 do
    for r = 0, inner - 1 do list[#list + 1] = (b * C + c) * inner + r + 1 end
  end
  return list
end

-- Per channel batch statistics of an (N, C, ...) list: means, biased and unbiased variances.
local function channel_moments(x, shape)
  local means, biased, unbiased = {}, {}, {}
  for c = 0, shape[2] - 1 do
    local values = {}
    for _, i in ipairs(channel_indices(shape, c)) do values[#values + 1] = x[i] end
    means[c + 1], biased[c + 1], unbiased[c + 1] = moments(values)
  end
  return means, biased, unbiased
end

local function batchnorm_ref(x, shape, mean, var, eps, weight, bias)
  local y = {}
  for c = 0, shape[2] - 1 do
    for _, i in ipairs(channel_indices(shape, c)) do
      y[i] = (x[i] - mean[c + 1]) / math.sqrt(var[c + 1] + eps) * (weight and weight[c + 1] or 1)
        + (bias and bias[c + 1] or 0)
    end
  end
  return y
end

-- Normalizes each run of `size` consecutive values; weight and bias repeat every run.
local function layernorm_ref(x, size, eps, weight, bias)
  local y = {}
  for start = 0, #x - size, size do
    local run = table.move(x, start + 1, start + size, 1, {})
    local mean, var = moments(run)
    for k = 1, size do
      y[start + k] = (run[k] - mean) / math.sqrt(var + eps) * (weight and weight[k] or 1) + (bias and bias[k] or 0)
    end
  end
  return y
end

local function rmsnorm_ref(x, size, eps, weight)
  local y = {}
  for start = 0, #x - size, size do
    local squares = 0
    for k = 1, size do squares = squares + x[start + k] ^ 2 end
    local scale = 1 / math.sqrt(squares / size + eps)
    for k = 1, size do y[start + k] = x[start + k] * scale * (weight and weight[k] or 1) end
  end
  return y
end

local function groupnorm_ref(x, shape, groups, eps, weight, bias)
  local y, per_group = {}, shape[2] // groups
  for n = 0, shape[1] - 1 do
    for g = 0, groups - 1 do
      local indices, values = {}, {}
      for c = g * per_group, (g + 1) * per_group - 1 do
        for _, i in ipairs(channel_indices(shape, c, n)) do
          indices[#indices + 1], values[#values + 1] = i, x[i]
        end
      end
      local mean, var = moments(values)
      for k, i in ipairs(indices) do
        local c = (i - 1) // (numel(shape) // (shape[1] * shape[2])) % shape[2]
        y[i] = (values[k] - mean) / math.sqrt(var + eps) * (weight and weight[c + 1] or 1) + (bias and bias[c + 1] or 0)
      end
    end
  end
  return y
end

-- Asserts that t's values lie in +-bound and reach past near * bound on both sides (so a
-- narrower bound fails), and are not all equal.
local function check_uniform(t, bound, near, what)
  local lo, hi = math.huge, -math.huge
  for _, v in ipairs(t:data()) do lo, hi = math.min(lo, v), math.max(hi, v) end
  assert(lo >= -bound and hi <= bound, what .. " outside +-" .. bound .. ": " .. lo .. " .. " .. hi)
  assert(lo < -near * bound and hi > near * bound, what .. " does not spread over +-" .. bound .. ": " .. lo
    .. " .. " .. hi)
end

-- ---------------------------------------------------------------------------------------
-- errors

-- Asserts that f(...) raises an error ending with `expected` and raised at a line of this spec.
local function expect_error(expected, f, ...)
  local ok, err = pcall(f, ...)
  assert(not ok, "expected the error: " .. expected)
  err = tostring(err)
  assert(err:sub(-#expected) == expected, "expected the error '" .. expected .. "', got '" .. err .. "'")
  assert(err:find("nn_layers_spec.lua:%d+: ") ~= nil, "the error is not raised at the caller's line: " .. err)
end

-- ---------------------------------------------------------------------------------------
-- state fields

-- "path" -> tensor for every tensor reachable through plain fields (what a state-dict walker sees).
local function tensor_fields(object, prefix, out)
  out = out or {}
  for key, value in pairs(object) do
    local path = (prefix and prefix .. "." or "") .. tostring(key)
    if Tensor.is_tensor(value) then out[path] = value
    elseif type(value) == "table" then tensor_fields(value, path, out) end
  end
  return out
end

local function sorted_keys(map)
  local keys = {}
  for k in pairs(map) do keys[#keys + 1] = k end
  table.sort(keys)
  return keys
end

-- The BUFFER node under a realized tensor's node.
local function buffer_of(t)
  local uop = t.uop
  while uop.op == "RESHAPE" do uop = uop.src[1] end
  return uop.op == "BUFFER" and uop or nil
end

describe("tcl.nn.Linear", function()
  it("computes x W^T + b with weight (out, in), over leading batch dims", function()
    local layer = nn.Linear(5, 3)
    local w, b = layer.weight:data(), layer.bias:data()
    assert.are.same({ 3, 5 }, layer.weight.shape)
    assert.are.same({ 3 }, layer.bias.shape)
    -- 40 and 2 * 20 rows reach the contiguous copy of W^T (nn.Linear.CONTIGUOUS_WEIGHT_ROWS)
    for _, shape in ipairs({ { 4, 5 }, { 2, 3, 5 }, { 5 }, { 40, 5 }, { 2, 20, 5 } }) do
      local x, xv = input(1, shape)
      local out_shape = { table.unpack(shape) }
      out_shape[#out_shape] = 3
      check_values(layer(x), out_shape, linear_ref(xv, shape, w, b, 3), "Linear " .. shape_text(shape))
    end
  end)

  it("the same values and gradients whether x needs a gradient (W^T read as a view) or not (a copy)", function()
    local layer = nn.Linear(6, 4)
    local x = Tensor.randn(40, 6)
    local xg = x:detach():requires_grad_()
    local plain, tracked = layer(x), layer(xg)
    local a, b = plain:data(), tracked:data()
    for i = 1, #a do assert.near(a[i], b[i], 1e-5) end
    local gw_plain = (plain * plain):sum():gradient(layer.weight):data()
    local gw_tracked = (tracked * tracked):sum():gradient(layer.weight):data()
    for i = 1, #gw_plain do assert.near(gw_plain[i], gw_tracked[i], 1e-4 * math.max(1, math.abs(gw_plain[i]))) end
  end)

  it("without bias", function()
    local layer = nn.Linear(4, 2, { bias = false })
    assert.is_nil(layer.bias)
    local x, xv = input(2, { 3, 4 })
    check_values(layer(x), { 3, 2 }, linear_ref(xv, { 3, 4 }, layer.weight:data(), nil, 2), "Linear no bias")
  end)

  it("initializes weight and bias uniform in +-1/sqrt(in_features), each a buffer of its own", function()
    Tensor.manual_seed(7)
    local layer = nn.Linear(50, 20)
    local bound = 1 / math.sqrt(50)
    check_uniform(layer.weight, bound, 0.95, "Linear weight")
    check_uniform(layer.bias, bound, 0.6, "Linear bias")
    for _, name in ipairs({ "weight", "bias" }) do assert.is_not_nil(buffer_of(layer[name])) end
    assert.are_not.equal(buffer_of(layer.weight), buffer_of(layer.bias))
  end)
end)

describe("tcl.nn dtype and device options", function()
  it("place every tensor, and forward runs there", function()
    local linear = nn.Linear(2, 3, { dtype = "float16", device = "EMU" })
    for _, t in ipairs({ linear.weight, linear.bias }) do
      assert.are.equal("float16", t.dtype.name)
      assert.are.equal("EMU", t.device)
    end
    local x, xv = input(5, { 4, 2 })
    local y = linear(Tensor(x:tolist(), { dtype = "float16", device = "EMU" }))
    assert.are.equal("float16", y.dtype.name)
    assert.are.equal("EMU", y.device)
    check_values(y, { 4, 3 }, linear_ref(xv, { 4, 2 }, linear.weight:data(), linear.bias:data(), 3), "float16", 1e-2)
    local bn = nn.BatchNorm(2, { dtype = "float64", device = "EMU" })
    local out = nn.train(bn, Tensor(x:tolist(), { device = "EMU" }))
    assert.are.equal("EMU", out.device)
    assert.are.equal("float64", bn.running_mean.dtype.name)
    assert.are.equal("EMU", bn.num_batches_tracked.device)
    local mean = channel_moments(xv, { 4, 2 })
    check_values(bn.running_mean, { 2 }, { 0.1 * mean[1], 0.1 * mean[2] }, "float64 running_mean on EMU")
  end)
end)

describe("tcl.nn.Conv2d", function()
  local CASES = {
    { "plain 3x3", 2, 3, 3, {}, { 2, 2, 5, 5 } },
    { "stride 2, padding 1", 2, 4, 3, { stride = 2, padding = 1 }, { 1, 2, 6, 5 } },
    { "rectangular kernel, pair stride and padding", 3, 2, { 2, 3 }, { stride = { 1, 2 }, padding = { 2, 1 } },
      { 2, 3, 4, 6 } },
    { "dilation 2", 1, 2, 3, { dilation = 2, padding = 2 }, { 1, 1, 6, 6 } },
    { "groups 2, no bias", 4, 6, 2, { groups = 2, bias = false }, { 2, 4, 4, 4 } },
    { "depthwise, stride and dilation pairs", 3, 3, 3, { groups = 3, stride = { 2, 1 }, dilation = { 1, 2 } },
      { 1, 3, 7, 7 } },
  }
  for _, case in ipairs(CASES) do
    local name, cin, cout, k, opts, shape = table.unpack(case)
    it(name, function()
      local layer = nn.Conv2d(cin, cout, k, opts)
      local x, xv = input(3, shape)
      local kernel = type(k) == "number" and { k, k } or k
      local function pair(v, default)
        v = v or default
        return type(v) == "number" and { v, v } or v
      end
      local p = pair(opts.padding, 0)
      local expected, out_shape = conv2d_ref(xv, shape, layer.weight:data(), layer.weight.shape,
        layer.bias and layer.bias:data(), pair(opts.stride, 1), { { p[1], p[1] }, { p[2], p[2] } },
        pair(opts.dilation, 1), opts.groups or 1)
      assert.are.same({ cout, cin // (opts.groups or 1), kernel[1], kernel[2] }, layer.weight.shape)
      check_values(layer(x), out_shape, expected, "Conv2d " .. name)
    end)
  end

  it("padding 'same' keeps the size (the extra row and column after) and 'valid' pads nothing", function()
    local layer = nn.Conv2d(1, 2, { 2, 3 }, { padding = "same", dilation = { 1, 2 } })
    local x, xv = input(4, { 1, 1, 4, 5 })
    -- total padding dilation * (k - 1): 1 rows (0 before, 1 after), 4 columns (2 and 2)
    local expected = conv2d_ref(xv, { 1, 1, 4, 5 }, layer.weight:data(), layer.weight.shape, layer.bias:data(),
      { 1, 1 }, { { 0, 1 }, { 2, 2 } }, { 1, 2 }, 1)
    check_values(layer(x), { 1, 2, 4, 5 }, expected, "Conv2d same")
    local valid = nn.Conv2d(1, 1, 3, { padding = "valid" })
    assert.are.same({ 1, 1, 2, 3 }, valid(x).shape)
  end)

  it("initializes weight and bias uniform in +-1/sqrt(in_channels / groups * kh * kw)", function()
    Tensor.manual_seed(8)
    local layer = nn.Conv2d(4, 8, { 3, 2 }, { groups = 2 })
    local bound = 1 / math.sqrt(2 * 3 * 2)
    check_uniform(layer.weight, bound, 0.9, "Conv2d weight")
    check_uniform(layer.bias, bound, 0.5, "Conv2d bias")
  end)
end)

describe("tcl.nn.BatchNorm", function()
  after_each(function() tcl.training = false end)

  -- Two training steps on two inputs, then eval; everything checked against the formulas.
  local function two_steps(layer, shape, momentum, what)
    local x1, v1 = input(11, shape)
    local x2, v2 = input(12, shape)
    local C = shape[2]
    local weight = {}
    for c = 1, C do weight[c] = 0.5 + c / 4 end
    local bias = {}
    for c = 1, C do bias[c] = c / 10 - 0.2 end
    layer.weight, layer.bias = Tensor(weight), Tensor(bias)
    local running_mean, running_var = {}, {}
    for c = 1, C do running_mean[c], running_var[c] = 0, 1 end
    for step, data in ipairs({ { x1, v1 }, { x2, v2 } }) do
      local mean, biased, unbiased = channel_moments(data[2], shape)
      local y = nn.train(layer, data[1])
      check_values(y, shape, batchnorm_ref(data[2], shape, mean, biased, 1e-5, weight, bias),
        what .. " training step " .. step)
      local factor = momentum or 1 / step
      for c = 1, C do
        running_mean[c] = (1 - factor) * running_mean[c] + factor * mean[c]
        running_var[c] = (1 - factor) * running_var[c] + factor * unbiased[c]
      end
      check_values(layer.running_mean, { C }, running_mean, what .. " running_mean after step " .. step)
      check_values(layer.running_var, { C }, running_var, what .. " running_var after step " .. step)
      assert.are.equal(step, layer.num_batches_tracked:item())
      assert.are.equal("int64", layer.num_batches_tracked.dtype.name)
      assert.are.same({}, layer.num_batches_tracked.shape)
    end
    local y = nn.eval(layer, x1)
    check_values(y, shape, batchnorm_ref(v1, shape, running_mean, running_var, 1e-5, weight, bias), what .. " eval")
    assert.are.equal(2, layer.num_batches_tracked:item()) -- eval leaves the statistics alone
    check_values(layer.running_mean, { C }, running_mean, what .. " running_mean after eval")
  end

  it("(N, C): batch statistics in training, running ones (momentum 0.1) in eval", function()
    local layer = nn.BatchNorm(3)
    assert.are.same({ 1, 1, 1 }, layer.weight:data())
    assert.are.same({ 0, 0, 0 }, layer.bias:data())
    assert.are.same({ 0, 0, 0 }, layer.running_mean:data())
    assert.are.same({ 1, 1, 1 }, layer.running_var:data())
    assert.are.equal(0, layer.num_batches_tracked:item())
    two_steps(layer, { 5, 3 }, 0.1, "BatchNorm (N, C)")
  end)

  it("(N, C, H, W) with momentum 0.3, and BatchNorm2d", function()
    two_steps(nn.BatchNorm(2, { momentum = 0.3 }), { 3, 2, 2, 3 }, 0.3, "BatchNorm (N, C, H, W)")
    two_steps(nn.BatchNorm2d(2), { 2, 2, 3, 2 }, 0.1, "BatchNorm2d")
  end)

  it("momentum false: the running statistics are the cumulative average", function()
    two_steps(nn.BatchNorm1d(4, { momentum = false }), { 3, 4, 2 }, false, "BatchNorm1d cumulative")
  end)

  it("tcl.training (the unscoped switch) and the default eval mode", function()
    local layer = nn.BatchNorm(2)
    local x, xv = input(13, { 4, 2 })
    local mean, biased = channel_moments(xv, { 4, 2 })
    tcl.training = true
    check_values(layer(x), { 4, 2 }, batchnorm_ref(xv, { 4, 2 }, mean, biased, 1e-5), "training")
    tcl.training = false
    local rm, rv = layer.running_mean:data(), layer.running_var:data()
    check_values(layer(x), { 4, 2 }, batchnorm_ref(xv, { 4, 2 }, rm, rv, 1e-5), "eval")
  end)

  it("without running statistics it always uses the batch's; without affine it has no weight", function()
    local layer = nn.BatchNorm(3, { track_running_stats = false, affine = false })
    for _, name in ipairs({ "weight", "bias", "running_mean", "running_var", "num_batches_tracked" }) do
      assert.is_nil(layer[name], name)
    end
    local x, xv = input(14, { 2, 3, 2 })
    local mean, biased = channel_moments(xv, { 2, 3, 2 })
    local expected = batchnorm_ref(xv, { 2, 3, 2 }, mean, biased, 1e-5)
    check_values(nn.eval(layer, x), { 2, 3, 2 }, expected, "eval, no running stats")
    check_values(nn.train(layer, x), { 2, 3, 2 }, expected, "training, no running stats")
  end)

  it("eps", function()
    local layer = nn.BatchNorm(2, { eps = 0.5 })
    local x, xv = input(15, { 3, 2 })
    local mean, biased = channel_moments(xv, { 3, 2 })
    check_values(nn.train(layer, x), { 3, 2 }, batchnorm_ref(xv, { 3, 2 }, mean, biased, 0.5), "eps 0.5")
  end)
end)

describe("tcl.nn.LayerNorm, RMSNorm and GroupNorm", function()
  it("LayerNorm over the last dim and over the last two, with weight and bias", function()
    local x, xv = input(21, { 2, 3, 4 })
    local layer = nn.LayerNorm(4)
    check_values(layer(x), { 2, 3, 4 }, layernorm_ref(xv, 4, 1e-5), "LayerNorm(4) defaults")
    local two = nn.LayerNorm({ 3, 4 }, { eps = 0.1 })
    local weight, bias = {}, {}
    for i = 1, 12 do weight[i], bias[i] = i / 6, 1 - i / 12 end
    two.weight = Tensor(weight):reshape(3, 4)
    two.bias = Tensor(bias):reshape(3, 4)
    check_values(two(x), { 2, 3, 4 }, layernorm_ref(xv, 12, 0.1, weight, bias), "LayerNorm({3, 4})")
    -- the same in training mode: a LayerNorm has no batch statistics
    check_values(nn.train(two, x), { 2, 3, 4 }, layernorm_ref(xv, 12, 0.1, weight, bias), "LayerNorm training")
    local plain = nn.LayerNorm(4, { elementwise_affine = false })
    assert.is_nil(plain.weight)
    assert.is_nil(plain.bias)
    check_values(plain(x), { 2, 3, 4 }, layernorm_ref(xv, 4, 1e-5), "LayerNorm without affine")
    assert.is_nil(nn.LayerNorm(4, { bias = false }).bias)
  end)

  it("RMSNorm, with the dtype's machine epsilon by default", function()
    local x, xv = input(22, { 3, 5 })
    local layer = nn.RMSNorm(5)
    assert.are.same({ 1, 1, 1, 1, 1 }, layer.weight:data())
    check_values(layer(x), { 3, 5 }, rmsnorm_ref(xv, 5, 2 ^ -23), "RMSNorm(5)")
    local weight = { 0.5, 1, 1.5, 2, 2.5 }
    layer.weight = Tensor(weight)
    check_values(nn.train(layer, x), { 3, 5 }, rmsnorm_ref(xv, 5, 2 ^ -23, weight), "RMSNorm weight")
    local small = Tensor({ { 1e-4, -1e-4 } })
    check_values(nn.RMSNorm(2, { eps = 1e-6 })(small), { 1, 2 }, rmsnorm_ref(small:data(), 2, 1e-6), "RMSNorm eps")
    assert.is_nil(nn.RMSNorm({ 2, 3 }, { elementwise_affine = false }).weight)
  end)

  it("GroupNorm over (N, C, H, W) and (N, C), in training and eval mode alike", function()
    local x, xv = input(23, { 2, 6, 2, 3 })
    local layer = nn.GroupNorm(3, 6)
    local weight, bias = {}, {}
    for c = 1, 6 do weight[c], bias[c] = c / 3, -c / 7 end
    layer.weight, layer.bias = Tensor(weight), Tensor(bias)
    local expected = groupnorm_ref(xv, { 2, 6, 2, 3 }, 3, 1e-5, weight, bias)
    check_values(layer(x), { 2, 6, 2, 3 }, expected, "GroupNorm(3, 6)")
    check_values(nn.train(layer, x), { 2, 6, 2, 3 }, expected, "GroupNorm(3, 6) training")
    local flat, fv = input(24, { 3, 4 })
    check_values(nn.GroupNorm(2, 4, { eps = 0.01 })(flat), { 3, 4 }, groupnorm_ref(fv, { 3, 4 }, 2, 0.01),
      "GroupNorm (N, C)")
    local plain = nn.GroupNorm(1, 6, { affine = false })
    assert.is_nil(plain.weight)
    check_values(plain(x), { 2, 6, 2, 3 }, groupnorm_ref(xv, { 2, 6, 2, 3 }, 1, 1e-5), "GroupNorm one group")
  end)
end)

describe("tcl.nn.Embedding", function()
  it("picks the rows of 1-based integer indices of any shape", function()
    Tensor.manual_seed(31)
    local layer = nn.Embedding(6, 3)
    assert.are.same({ 6, 3 }, layer.weight.shape)
    local w = layer.weight:data()
    local indices = { { 1, 6, 2 }, { 6, 3, 3 } }
    local expected = {}
    for _, row in ipairs(indices) do
      for _, i in ipairs(row) do
        for d = 1, 3 do expected[#expected + 1] = w[(i - 1) * 3 + d] end
      end
    end
    check_values(layer(Tensor(indices)), { 2, 3, 3 }, expected, "Embedding 2-d indices")
    check_values(layer(Tensor({ 4, 5 }, { dtype = "int64" })), { 2, 3 }, { w[10], w[11], w[12], w[13], w[14], w[15] },
      "Embedding int64 indices")
    check_values(layer(Tensor(2, { dtype = "int8" })), { 3 }, { w[4], w[5], w[6] }, "Embedding 0-d index")
  end)

  it("initializes the weight normal(0, 1)", function()
    Tensor.manual_seed(32)
    local values = nn.Embedding(100, 20).weight:data()
    local mean, var = moments(values)
    assert(math.abs(mean) < 0.1, "mean " .. mean)
    assert(math.abs(var - 1) < 0.15, "variance " .. var)
  end)
end)

describe("tcl.nn.Dropout", function()
  after_each(function() tcl.training = false end)

  it("is the identity in eval mode", function()
    local x = Tensor.ones(10)
    local layer = nn.Dropout(0.5)
    assert.are.equal(x, layer(x))
    assert.are.equal(x, nn.eval(layer, x))
  end)

  it("in training zeroes a plausible fraction and scales the rest by 1/(1-p)", function()
    Tensor.manual_seed(41)
    for _, p in ipairs({ 0.25, 0.6 }) do
      local values = nn.train(nn.Dropout(p), Tensor.full({ 4000 }, 3.0)):data()
      local zeros = 0
      for i, v in ipairs(values) do
        if v == 0 then zeros = zeros + 1
        else assert(math.abs(v - 3 / (1 - p)) < 1e-5, "kept value " .. i .. " is " .. v) end
      end
      local fraction = zeros / #values
      assert(math.abs(fraction - p) < 0.05, "p " .. p .. ": zeroed fraction " .. fraction)
    end
    assert.are.same({ 1, 2 }, nn.train(nn.Dropout(0), Tensor({ 1, 2 })):data())
  end)
end)

describe("tcl.nn.Sequential", function()
  it("runs layers and plain functions in order", function()
    Tensor.manual_seed(51)
    local first, last = nn.Linear(4, 5), nn.Linear(5, 2)
    local model = nn.Sequential { first, Tensor.relu, function(t) return t * 2 end, last }
    local x, xv = input(52, { 3, 4 })
    local hidden = linear_ref(xv, { 3, 4 }, first.weight:data(), first.bias:data(), 5)
    for i, v in ipairs(hidden) do hidden[i] = math.max(v, 0) * 2 end
    local expected = linear_ref(hidden, { 3, 5 }, last.weight:data(), last.bias:data(), 2)
    check_values(model(x), { 3, 2 }, expected, "Sequential")
    assert.are.equal(first, model.layers[1])
    assert.are.equal(x, nn.Sequential {}(x))
  end)

  it("names the state layers.<i>.<PyTorch name>, and forward adds no tensor fields", function()
    local model = nn.Sequential { nn.Conv2d(1, 2, 3), nn.BatchNorm(2), Tensor.relu,
      nn.Sequential { nn.GroupNorm(1, 2), nn.Dropout(0.1) } }
    local expected = { "layers.1.bias", "layers.1.weight", "layers.2.bias", "layers.2.num_batches_tracked",
      "layers.2.running_mean", "layers.2.running_var", "layers.2.weight", "layers.4.layers.1.bias",
      "layers.4.layers.1.weight" }
    assert.are.same(expected, sorted_keys(tensor_fields(model)))
    nn.train(model, Tensor.ones(2, 1, 4, 4))
    model(Tensor.ones(2, 1, 4, 4))
    assert.are.same(expected, sorted_keys(tensor_fields(model)))
    -- every tensor is a buffer of its own
    local seen = {}
    for path, t in pairs(tensor_fields(nn.Sequential { nn.Linear(2, 2), nn.BatchNorm(2), nn.LayerNorm(2) })) do
      local buffer = buffer_of(t)
      assert(buffer ~= nil, path .. " is not realized")
      assert(seen[buffer] == nil, path .. " shares its buffer with " .. tostring(seen[buffer]))
      seen[buffer] = path
    end
  end)

  it("parameters require gradients, running statistics do not", function()
    if not Tensor.requires_grad_ then
      pending("Tensor.requires_grad_ is not there yet")
      return
    end
    local model = nn.Sequential { nn.Linear(2, 2), nn.Conv2d(1, 1, 1), nn.BatchNorm(2), nn.LayerNorm(2),
      nn.RMSNorm(2), nn.GroupNorm(1, 2), nn.Embedding(3, 2) }
    for path, t in pairs(tensor_fields(model)) do
      local statistic = path:find("running_") or path:find("num_batches")
      assert(t.requires_grad == not statistic, path .. " requires_grad is " .. tostring(t.requires_grad))
    end
  end)
end)

describe("tcl.nn.train and tcl.nn.eval", function()
  after_each(function() tcl.training = false end)

  it("switch training for the call, return fn's results and restore the mode, also after an error", function()
    local function mode(...) return tcl.training, ... end
    assert.are.same({ true, 1, 2 }, { nn.train(mode, 1, 2) })
    assert.is_false(tcl.training)
    tcl.training = true
    assert.are.same({ false, "a" }, { nn.eval(mode, "a") })
    assert.is_true(tcl.training)
    assert.are.same({ true }, { nn.eval(nn.train, mode) })
    tcl.training = false
    local ok, err = pcall(nn.train, function() error("inside", 0) end)
    assert.is_false(ok)
    assert.are.equal("inside", err)
    assert.is_false(tcl.training)
    expect_error("nn.train: expected a function, got nil", function() nn.train() end)
    expect_error("nn.eval: expected a function, got number", function() nn.eval(3) end)
  end)
end)

describe("tcl.nn errors", function()
  it("constructor arguments", function()
    local cases = {
      { "nn.Linear: in_features must be a positive integer, got 0", nn.Linear, 0, 3 },
      { "nn.Linear: out_features must be a positive integer, got 2.5", nn.Linear, 3, 2.5 },
      { "nn.Linear: in_features must be a positive integer, got string", nn.Linear, "3", 2 },
      { "nn.Linear: bias must be a boolean, got number", nn.Linear, 3, 2, { bias = 1 } },
      { "nn.Linear: unknown option 'baias'", nn.Linear, 3, 2, { baias = false } },
      { "nn.Linear: dtype must be a float dtype, got int32", nn.Linear, 3, 2, { dtype = "int32" } },
      { "nn.Conv2d: in_channels must be a positive integer, got -1", nn.Conv2d, -1, 2, 3 },
      { "nn.Conv2d: out_channels must be a positive integer, got nil", nn.Conv2d, 1 },
      { "nn.Conv2d: kernel_size must be a positive integer, got 0", nn.Conv2d, 1, 2, 0 },
      { "nn.Conv2d: kernel_size must be an integer or a pair {h, w}, got nil", nn.Conv2d, 1, 2 },
      { "nn.Conv2d: kernel_size must be an integer or a pair {h, w}, got table", nn.Conv2d, 1, 2, { 1, 2, 3 } },
      { "nn.Conv2d: stride must be a positive integer, got 0", nn.Conv2d, 1, 2, 3, { stride = { 1, 0 } } },
      { "nn.Conv2d: padding must be a non-negative integer, got -1", nn.Conv2d, 1, 2, 3, { padding = -1 } },
      { "nn.Conv2d: padding must be 'valid', 'same', an integer or a pair {h, w}, got 'full'", nn.Conv2d, 1, 2, 3,
        { padding = "full" } },
      { "nn.Conv2d: padding 'same' needs stride 1, got (2, 2)", nn.Conv2d, 1, 2, 3, { padding = "same", stride = 2 } },
      { "nn.Conv2d: dilation must be a positive integer, got 0", nn.Conv2d, 1, 2, 3, { dilation = 0 } },
      { "nn.Conv2d: groups must be a positive integer, got 0", nn.Conv2d, 2, 2, 3, { groups = 0 } },
      { "nn.Conv2d: in_channels (3) must be divisible by groups (2)", nn.Conv2d, 3, 4, 3, { groups = 2 } },
      { "nn.Conv2d: out_channels (3) must be divisible by groups (2)", nn.Conv2d, 4, 3, 3, { groups = 2 } },
      { "nn.Conv2d: unknown option 'padding_mode'", nn.Conv2d, 1, 1, 1, { padding_mode = "zeros" } },
      { "nn.BatchNorm: num_features must be a positive integer, got 0", nn.BatchNorm, 0 },
      { "nn.BatchNorm: eps must be a positive number, got 0", nn.BatchNorm, 2, { eps = 0 } },
      { "nn.BatchNorm: momentum must be a number in [0, 1] or false (a cumulative average), got 1.5", nn.BatchNorm, 2,
        { momentum = 1.5 } },
      { "nn.BatchNorm: affine must be a boolean, got string", nn.BatchNorm, 2, { affine = "yes" } },
      { "nn.BatchNorm: track_running_stats must be a boolean, got number", nn.BatchNorm, 2,
        { track_running_stats = 0 } },
      { "nn.BatchNorm2d: num_features must be a positive integer, got nil", nn.BatchNorm2d },
      { "nn.LayerNorm: normalized_shape must be a positive integer, got 0", nn.LayerNorm, 0 },
      { "nn.LayerNorm: normalized_shape must be a positive integer, got 0", nn.LayerNorm, { 3, 0 } },
      { "nn.LayerNorm: normalized_shape must be a positive integer or a non-empty list of them, got table",
        nn.LayerNorm, {} },
      { "nn.LayerNorm: eps must be a positive number, got -1", nn.LayerNorm, 3, { eps = -1 } },
      { "nn.LayerNorm: elementwise_affine must be a boolean, got number", nn.LayerNorm, 3,
        { elementwise_affine = 1 } },
      { "nn.RMSNorm: normalized_shape must be a positive integer or a non-empty list of them, got nil", nn.RMSNorm },
      { "nn.RMSNorm: eps must be a positive number, got string", nn.RMSNorm, 3, { eps = "small" } },
      { "nn.GroupNorm: num_groups must be a positive integer, got 0", nn.GroupNorm, 0, 4 },
      { "nn.GroupNorm: num_channels must be a positive integer, got nil", nn.GroupNorm, 2 },
      { "nn.GroupNorm: num_channels (6) must be divisible by num_groups (4)", nn.GroupNorm, 4, 6 },
      { "nn.GroupNorm: affine must be a boolean, got number", nn.GroupNorm, 2, 4, { affine = 1 } },
      { "nn.Embedding: num_embeddings must be a positive integer, got 0", nn.Embedding, 0, 3 },
      { "nn.Embedding: embedding_dim must be a positive integer, got 1.5", nn.Embedding, 3, 1.5 },
      { "nn.Dropout: p must be a number in [0, 1), got 1", nn.Dropout, 1 },
      { "nn.Dropout: p must be a number in [0, 1), got -0.1", nn.Dropout, -0.1 },
      { "nn.Dropout: p must be a number in [0, 1), got string", nn.Dropout, "0.5" },
      { "nn.Sequential: expected one list of steps, as in nn.Sequential{nn.Linear(2, 3), Tensor.relu}",
        nn.Sequential, nn.Linear(2, 3) },
      { "nn.Sequential: step 2 must be a layer or a function, got number", nn.Sequential, { Tensor.relu, 3 } },
      { "nn.Sequential: expected a list of steps, got a table with key relu", nn.Sequential, { relu = Tensor.relu } },
    }
    for _, case in ipairs(cases) do
      expect_error(case[1], function() return (case[2](table.unpack(case, 3))) end) -- (no tail call: the
      -- spec's line must stay on the stack)
    end
  end)

  it("forward input shapes and dtypes", function()
    local cases = {
      { "nn.Linear: expected input with last dim 784, got shape (2, 10)", nn.Linear(784, 2), Tensor.ones(2, 10) },
      { "nn.Linear: expected input with last dim 3, got shape ()", nn.Linear(3, 2), Tensor(1.0) },
      { "nn.Linear: expected a tensor input, got number", nn.Linear(3, 2), 3 },
      { "nn.Conv2d: expected input of shape (N, 3, H, W), got shape (2, 4, 5, 5)", nn.Conv2d(3, 2, 3),
        Tensor.ones(2, 4, 5, 5) },
      { "nn.Conv2d: expected input of shape (N, 3, H, W), got shape (3, 5, 5)", nn.Conv2d(3, 2, 3),
        Tensor.ones(3, 5, 5) },
      { "nn.Conv2d: input (1, 1, 2, 5) is smaller than the kernel (3, 3) (padding (0, 0), dilation (1, 1))",
        nn.Conv2d(1, 1, 3), Tensor.ones(1, 1, 2, 5) },
      { "nn.BatchNorm: expected input of shape (N, 4, ...), got shape (2, 3)", nn.BatchNorm(4), Tensor.ones(2, 3) },
      { "nn.BatchNorm: expected input of shape (N, 4, ...), got shape (4,)", nn.BatchNorm(4), Tensor.ones(4) },
      { "nn.BatchNorm2d: expected a 4-d (N, C, H, W) input, got shape (2, 3)", nn.BatchNorm2d(3), Tensor.ones(2, 3) },
      { "nn.BatchNorm1d: expected a 2-d (N, C) or 3-d (N, C, L) input, got shape (2, 3, 1, 1)", nn.BatchNorm1d(3),
        Tensor.ones(2, 3, 1, 1) },
      { "nn.LayerNorm: expected input with trailing dims (3, 4), got shape (2, 4, 3)", nn.LayerNorm({ 3, 4 }),
        Tensor.ones(2, 4, 3) },
      { "nn.LayerNorm: expected input with trailing dims (3, 4), got shape (4,)", nn.LayerNorm({ 3, 4 }),
        Tensor.ones(4) },
      { "nn.RMSNorm: expected input with trailing dims (5,), got shape (5, 2)", nn.RMSNorm(5), Tensor.ones(5, 2) },
      { "nn.GroupNorm: expected input of shape (N, 4, ...), got shape (2, 2, 4)", nn.GroupNorm(2, 4),
        Tensor.ones(2, 2, 4) },
      { "nn.Embedding: expected integer indices, got float32", nn.Embedding(4, 2), Tensor({ 1.0, 2.0 }) },
      { "nn.Embedding: expected a tensor input, got table", nn.Embedding(4, 2), { 1, 2 } },
      { "nn.Dropout: expected a tensor input, got nil", nn.Dropout(0.5), nil },
    }
    for _, case in ipairs(cases) do
      expect_error(case[1], function() return (case[2](case[3])) end)
    end
    -- training needs more than one value per channel for the batch variance
    local layer = nn.BatchNorm(3)
    expect_error("nn.BatchNorm: expected more than 1 value per channel when training, got input of shape (1, 3)",
      function() return (nn.train(layer, Tensor.ones(1, 3))) end)
    assert.are.equal(0, layer.num_batches_tracked:item())
  end)
end)

describe("tcl.nn tostring", function()
  it("reads like PyTorch's repr", function()
    local cases = {
      { "Linear(in_features=784, out_features=256, bias=true)", nn.Linear(784, 256) },
      { "Linear(in_features=3, out_features=1, bias=false)", nn.Linear(3, 1, { bias = false }) },
      { "Conv2d(3, 64, kernel_size=(3, 3), stride=(1, 1))", nn.Conv2d(3, 64, 3) },
      { "Conv2d(4, 8, kernel_size=(3, 5), stride=(2, 1), padding=(1, 2), dilation=(2, 2), groups=4, bias=false)",
        nn.Conv2d(4, 8, { 3, 5 }, { stride = { 2, 1 }, padding = { 1, 2 }, dilation = 2, groups = 4, bias = false }) },
      { "Conv2d(1, 1, kernel_size=(3, 3), stride=(1, 1), padding='same')", nn.Conv2d(1, 1, 3, { padding = "same" }) },
      { "BatchNorm(64, eps=1e-05, momentum=0.1, affine=true, track_running_stats=true)", nn.BatchNorm(64) },
      { "BatchNorm2d(8, eps=0.001, momentum=false, affine=false, track_running_stats=false)",
        nn.BatchNorm2d(8, { eps = 1e-3, momentum = false, affine = false, track_running_stats = false }) },
      { "LayerNorm((10,), eps=1e-05, elementwise_affine=true)", nn.LayerNorm(10) },
      { "LayerNorm((2, 3), eps=1e-06, elementwise_affine=false)",
        nn.LayerNorm({ 2, 3 }, { eps = 1e-6, elementwise_affine = false }) },
      { "RMSNorm((4,), eps=nil, elementwise_affine=true)", nn.RMSNorm(4) },
      { "RMSNorm((4,), eps=1e-06, elementwise_affine=true)", nn.RMSNorm(4, { eps = 1e-6 }) },
      { "GroupNorm(2, 6, eps=1e-05, affine=true)", nn.GroupNorm(2, 6) },
      { "Embedding(100, 16)", nn.Embedding(100, 16) },
      { "Dropout(p=0.5)", nn.Dropout() },
      { "Dropout(p=0.1)", nn.Dropout(0.1) },
      { "Sequential()", nn.Sequential {} },
      { "Sequential(\n  (1): Linear(in_features=2, out_features=3, bias=true)\n  (2): Tensor.relu\n"
        .. "  (3): Sequential(\n    (1): Dropout(p=0.2)\n  )\n)",
        nn.Sequential { nn.Linear(2, 3), Tensor.relu, nn.Sequential { nn.Dropout(0.2) } } },
    }
    for _, case in ipairs(cases) do assert.are.equal(case[1], tostring(case[2])) end
    -- a function that is no Tensor method is shown by where it is defined
    local text = tostring(nn.Sequential { function(t) return t end, print })
    assert.matches("^Sequential%(\n  %(1%): function %([^\n]*nn_layers_spec%.lua:%d+%)\n  %(2%): function\n%)$", text)
    assert.are.equal(nn.Linear, getmetatable(nn.Linear(1, 1)))
  end)
end)

-- ---------------------------------------------------------------------------------------
-- torch.nn on the same weights and inputs

-- A Python literal of a nested Lua list of numbers.
local function python_literal(v)
  if type(v) == "table" then
    local parts = {}
    for i, x in ipairs(v) do parts[i] = python_literal(x) end
    return "[" .. table.concat(parts, ", ") .. "]"
  end
  return string.format("%.17g", v)
end

-- The python3 that imports torch, or nil and why not.
local function torch_python()
  for _, python in ipairs({ "python3", "/usr/bin/python3" }) do
    local status = helper.run(python .. " -c 'import torch'")
    if status == 0 then return python end
  end
  return nil, "no python3 on PATH or /usr/bin/python3 imports torch"
end

describe("tcl.nn against torch.nn", function()
  it("Linear, Conv2d, BatchNorm2d (two training steps, then eval), LayerNorm, GroupNorm, Embedding", function()
    local python, why = torch_python()
    if not python then
      print("nn_layers_spec: skipping the torch comparison: " .. why)
      pending(why)
      return
    end
    Tensor.manual_seed(61)
    local linear = nn.Linear(4, 3)
    local conv = nn.Conv2d(4, 6, { 3, 2 }, { stride = { 2, 1 }, padding = { 1, 2 }, dilation = { 1, 2 }, groups = 2 })
    local bn = nn.BatchNorm2d(4, { momentum = 0.2 })
    bn.weight, bn.bias = Tensor({ 0.5, 1, 1.5, 2 }), Tensor({ -1, 0, 1, 2 })
    local ln = nn.LayerNorm({ 2, 3 })
    local gn = nn.GroupNorm(2, 4)
    local emb = nn.Embedding(5, 3)
    local x_lin = Tensor.randn(2, 4):realize()
    local x_conv = Tensor.randn(2, 4, 5, 4):realize()
    local x_bn2 = Tensor.randn(2, 4, 5, 4):realize()
    local x_ln = Tensor.randn(3, 2, 3):realize()
    local indices = Tensor({ { 1, 5 }, { 3, 3 } })
    local ours = {
      linear = linear(x_lin),
      conv = conv(x_conv),
      bn_step1 = nn.train(bn, x_conv),
      bn_step2 = nn.train(bn, x_bn2),
    }
    ours.bn_mean, ours.bn_var = bn.running_mean, bn.running_var
    ours.bn_eval = nn.eval(bn, x_conv)
    ours.ln = ln(x_ln)
    ours.gn = gn(x_conv)
    ours.emb = emb(indices)
    local function t(tensor) return "torch.tensor(" .. python_literal(tensor:tolist()) .. ")" end
    local script = table.concat({
      "import torch",
      "torch.set_grad_enabled(False)",
      "def lua(v):",
      "    if isinstance(v, list): return '{' + ', '.join(lua(x) for x in v) + '}'",
      "    return repr(float(v))",
      "out = {}",
      "linear = torch.nn.Linear(4, 3)",
      "linear.weight[:] = " .. t(linear.weight),
      "linear.bias[:] = " .. t(linear.bias),
      "out['linear'] = linear(" .. t(x_lin) .. ")",
      "conv = torch.nn.Conv2d(4, 6, (3, 2), stride=(2, 1), padding=(1, 2), dilation=(1, 2), groups=2)",
      "conv.weight[:] = " .. t(conv.weight),
      "conv.bias[:] = " .. t(conv.bias),
      "x_conv = " .. t(x_conv),
      "out['conv'] = conv(x_conv)",
      "bn = torch.nn.BatchNorm2d(4, momentum=0.2)",
      "bn.weight[:] = torch.tensor([0.5, 1, 1.5, 2])",
      "bn.bias[:] = torch.tensor([-1.0, 0, 1, 2])",
      "bn.train()",
      "out['bn_step1'] = bn(x_conv)",
      "out['bn_step2'] = bn(" .. t(x_bn2) .. ")",
      "out['bn_mean'], out['bn_var'] = bn.running_mean, bn.running_var",
      "bn.eval()",
      "out['bn_eval'] = bn(x_conv)",
      "out['ln'] = torch.nn.LayerNorm((2, 3))(" .. t(x_ln) .. ")",
      "out['gn'] = torch.nn.GroupNorm(2, 4)(x_conv)",
      "emb = torch.nn.Embedding(5, 3)",
      "emb.weight[:] = " .. t(emb.weight),
      "out['emb'] = emb(" .. t(indices) .. " - 1)",
      "print('return {' + ', '.join(k + ' = ' + lua(v.tolist()) for k, v in out.items()) + '}')",
    }, "\n")
    local path = os.tmpname()
    helper.write(path, script)
    local status, stdout, stderr = helper.run(python .. " " .. path)
    os.remove(path)
    assert(status == 0, "python failed: " .. stderr)
    local theirs = assert(load(stdout))()
    local function flat(v, out)
      out = out or {}
      if type(v) == "table" then for _, x in ipairs(v) do flat(x, out) end else out[#out + 1] = v end
      return out
    end
    for _, name in ipairs(sorted_keys(ours)) do
      check_values(ours[name], ours[name].shape, flat(theirs[name]), "torch " .. name, 1e-4)
    end
  end)
end)
