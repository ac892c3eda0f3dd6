-- spec/nn/nn_init_spec.lua — tcl.nn.init (lua/tcl/api/init_weights.lua): fans and gains against
-- hand-computed values, exact bounds of the uniform initializers, means and standard
-- deviations of large draws against the formulas (tolerances of several standard errors),
-- trunc_normal inside [a, b] with the moments of the truncated normal (integrated here by
-- Simpson's rule), targets given as shapes or tensors, reproducibility under manual_seed, the
-- layers' default initialization, and every argument error.
local tcl = require "tcl"
local helper = require "spec.support.helper"
local Tensor, init = tcl.Tensor, tcl.nn.init

-- min, max, mean and standard deviation (unbiased) of a tensor's values.
local function stats(t)
  local values = t:data()
  local lo, hi, sum = math.huge, -math.huge, 0
  for _, v in ipairs(values) do
    lo, hi, sum = math.min(lo, v), math.max(hi, v), sum + v
  end
  local mean = sum / #values
  local squares = 0
  for _, v in ipairs(values) do squares = squares + (v - mean) ^ 2 end
  return lo, hi, mean, math.sqrt(squares / (#values - 1)), #values
end

-- Asserts |got - expected| <= tolerance.
local function near(got, expected, tolerance, what)
  assert(math.abs(got - expected) <= tolerance,
    string.format("%s: %.9g, expected %.9g +- %.3g", what, got, expected, tolerance))
end

-- A large draw's mean and std against a distribution's: 5 standard errors (the std's relative
-- standard error is about 1 / sqrt(2 n) for these light-tailed distributions).
local function check_moments(t, mean, std, what)
  local _, _, m, s, n = stats(t)
  near(m, mean, 5 * std / math.sqrt(n), what .. " mean")
  near(s, std, 5 * std / math.sqrt(2 * n) * 1.5, what .. " std")
end

-- Asserts values inside [-bound, bound] that reach past 0.99 bound on both sides (a narrower
-- bound would fail).
local function check_bound(t, bound, what)
  local lo, hi = stats(t)
  assert(lo >= -bound and hi <= bound, string.format("%s outside +-%.9g: %.9g .. %.9g", what, bound, lo, hi))
  assert(lo < -0.99 * bound and hi > 0.99 * bound, string.format("%s does not reach +-%.9g: %.9g .. %.9g",
    what, bound, lo, hi))
end

local function same_values(a, b)
  local x, y = a:data(), b:data()
  if #x ~= #y then return false end
  for i = 1, #x do if x[i] ~= y[i] then return false end end
  return true
end

describe("nn.init", function()
  it("is tcl.nn.init", function()
    assert.are.equal(require("tcl.api.init_weights"), tcl.nn.init)
  end)

  it("computes fan_in and fan_out as PyTorch does", function()
    assert.are.same({ 3, 5 }, { init.calculate_fans({ 5, 3 }) })
    -- conv weight (out, in, kh, kw): the kernel multiplies both
    assert.are.same({ 3 * 2 * 4, 8 * 2 * 4 }, { init.calculate_fans({ 8, 3, 2, 4 }) })
    assert.are.same({ 7 * 5, 2 * 5 }, { init.calculate_fans(Tensor.zeros(2, 7, 5)) })
    helper.fails_with("nn.init.calculate_fans: fan_in and fan_out need a shape of at least 2 dims, got (4,)",
      init.calculate_fans, { 4 })
    helper.fails_with("nn.init.calculate_fans: fan_in and fan_out need a shape of at least 2 dims, got ()",
      init.calculate_fans, Tensor(1.0))
  end)

  it("has PyTorch's gains", function()
    for _, name in ipairs({ "linear", "conv1d", "conv2d", "conv3d", "conv_transpose1d", "conv_transpose2d",
      "conv_transpose3d", "sigmoid" }) do
      assert.are.equal(1.0, init.calculate_gain(name))
    end
    assert.are.equal(5 / 3, init.calculate_gain("tanh"))
    assert.are.equal(1.4142135623730951, init.calculate_gain("relu"))
    assert.are.equal(0.75, init.calculate_gain("selu"))
    near(init.calculate_gain("leaky_relu"), 1.4141428569978354, 1e-15, "leaky_relu default slope 0.01")
    near(init.calculate_gain("leaky_relu", 0.2), 1.3867504905630728, 1e-15, "leaky_relu 0.2")
    near(init.calculate_gain("leaky_relu", math.sqrt(5)), 0.5773502691896258, 1e-15, "leaky_relu sqrt(5)")
  end)

  it("uniform: values in [a, b] spread over it, with the uniform's moments", function()
    tcl.manual_seed(1)
    local t = init.uniform({ 300, 200 }, { a = -0.5, b = 2 })
    assert.are.same({ 300, 200 }, t.shape)
    assert.are.equal(tcl.float32, t.dtype)
    local lo, hi = stats(t)
    assert(lo >= -0.5 and hi <= 2 and lo < -0.499 and hi > 1.999, lo .. " .. " .. hi)
    check_moments(t, 0.75, 2.5 / math.sqrt(12), "uniform")
    lo, hi = stats(init.uniform({ 1000 }))
    assert(lo >= 0 and hi < 1 and lo < 0.01 and hi > 0.99, "default [0, 1): " .. lo .. " .. " .. hi)
  end)

  it("normal: mean and std", function()
    tcl.manual_seed(2)
    check_moments(init.normal({ 250, 200 }, { mean = 3, std = 0.5 }), 3, 0.5, "normal")
    check_moments(init.normal(40000), 0, 1, "normal default")
  end)

  it("kaiming_uniform: bound gain * sqrt(3 / fan) for each mode and nonlinearity", function()
    tcl.manual_seed(3)
    local shape = { 64, 50, 3, 3 } -- fan_in 450, fan_out 576
    check_bound(init.kaiming_uniform(shape), math.sqrt(2) * math.sqrt(3 / 450), "default (leaky_relu, a = 0)")
    check_bound(init.kaiming_uniform(shape, { mode = "fan_out", nonlinearity = "relu" }),
      math.sqrt(2) * math.sqrt(3 / 576), "fan_out relu")
    check_bound(init.kaiming_uniform(shape, { nonlinearity = "tanh" }), 5 / 3 * math.sqrt(3 / 450), "tanh")
    check_bound(init.kaiming_uniform(shape, { a = 0.2 }), math.sqrt(2 / 1.04) * math.sqrt(3 / 450), "a = 0.2")
    check_bound(init.kaiming_uniform({ 300, 100 }, { nonlinearity = "linear" }), math.sqrt(3 / 100), "linear")
    local t = init.kaiming_uniform(shape, { nonlinearity = "selu", mode = "fan_out" })
    check_bound(t, 0.75 * math.sqrt(3 / 576), "selu fan_out")
    check_moments(t, 0, 0.75 / math.sqrt(576), "selu fan_out")
  end)

  it("kaiming_normal: std gain / sqrt(fan)", function()
    tcl.manual_seed(4)
    local shape = { 64, 50, 3, 3 }
    check_moments(init.kaiming_normal(shape), 0, math.sqrt(2 / 450), "default")
    check_moments(init.kaiming_normal(shape, { mode = "fan_out" }), 0, math.sqrt(2 / 576), "fan_out")
    check_moments(init.kaiming_normal(shape, { nonlinearity = "sigmoid" }), 0, 1 / math.sqrt(450), "sigmoid")
    check_moments(init.kaiming_normal(shape, { a = 1 }), 0, 1 / math.sqrt(450), "a = 1")
  end)

  it("xavier_uniform and xavier_normal (glorot_*): gain * sqrt(2 / (fan_in + fan_out))", function()
    tcl.manual_seed(5)
    local shape = { 200, 300 } -- fan_in 300, fan_out 200
    check_bound(init.xavier_uniform(shape), math.sqrt(6 / 500), "xavier_uniform")
    check_bound(init.xavier_uniform(shape, { gain = 2.5 }), 2.5 * math.sqrt(6 / 500), "gain 2.5")
    check_bound(init.glorot_uniform({ 16, 8, 5, 5 }), math.sqrt(6 / (200 + 400)), "glorot conv")
    check_moments(init.xavier_normal(shape), 0, math.sqrt(2 / 500), "xavier_normal")
    check_moments(init.glorot_normal(shape, { gain = 0.5 }), 0, 0.5 * math.sqrt(2 / 500), "glorot_normal")
    -- the aliases are the same functions
    assert.are.equal(init.xavier_uniform, init.glorot_uniform)
    assert.are.equal(init.xavier_normal, init.glorot_normal)
  end)

  -- the truncated normal's mean and std, by Simpson's rule on the density over [a, b]
  local function truncated_moments(mean, std, a, b)
    local n, lo, hi = 20000, (a - mean) / std, (b - mean) / std
    local h = (hi - lo) / n
    local m0, m1, m2 = 0, 0, 0
    for i = 0, n do
      local x = lo + i * h
      local w = (i == 0 or i == n) and 1 or (i % 2 == 1 and 4 or 2)
      local density = w * math.exp(-x * x / 2)
      m0, m1, m2 = m0 + density, m1 + density * x, m2 + density * x * x
    end
    local mu = m1 / m0
    return mean + std * mu, std * math.sqrt(m2 / m0 - mu * mu)
  end

  it("trunc_normal: values inside [a, b] with the truncated normal's moments", function()
    tcl.manual_seed(6)
    for _, case in ipairs({
      { opts = {}, mean = 0, std = 1, a = -2, b = 2 },
      { opts = { mean = 1, std = 2, a = 0, b = 3 }, mean = 1, std = 2, a = 0, b = 3 },
      { opts = { std = 0.02 }, mean = 0, std = 0.02, a = -2, b = 2 }, -- PyTorch's ViT use: a, b far out
      { opts = { a = 2.5, b = 4 }, mean = 0, std = 1, a = 2.5, b = 4 }, -- the upper tail
      { opts = { a = -9, b = -7 }, mean = 0, std = 1, a = -9, b = -7 }, -- deep in the lower tail
      { opts = { a = -0.1, b = 0.3, dtype = "float64" }, mean = 0, std = 1, a = -0.1, b = 0.3 },
    }) do
      local what = string.format("trunc_normal(mean %g, std %g, [%g, %g])", case.mean, case.std, case.a, case.b)
      local t = init.trunc_normal({ 200, 100 }, case.opts)
      local lo, hi = stats(t)
      assert(lo >= case.a and hi <= case.b, string.format("%s: values %.9g .. %.9g", what, lo, hi))
      local m, s = truncated_moments(case.mean, case.std, case.a, case.b)
      check_moments(t, m, s, what)
    end
    assert.are.equal(tcl.float64, init.trunc_normal({ 2, 2 }, { dtype = "float64" }).dtype)
  end)

  it("takes a shape, a size or a tensor, whose shape, dtype and device the result has", function()
    local like = Tensor.zeros({ 3, 4 }, { dtype = "float64" })
    for _, name in ipairs({ "uniform", "normal", "kaiming_uniform", "kaiming_normal", "xavier_uniform",
      "xavier_normal", "trunc_normal", "zeros", "ones", "eye" }) do
      local t = init[name](like)
      assert.are.same({ 3, 4 }, t.shape, name)
      assert.are.equal(tcl.float64, t.dtype, name)
      assert.are.equal(like.device, t.device, name)
      assert.are.equal(tcl.float16, init[name](like, { dtype = "float16" }).dtype, name)
      assert.are.equal(tcl.float32, init[name]({ 3, 4 }).dtype, name)
    end
    assert.are.same({ 5 }, init.normal(5).shape)
    assert.are.same({ { 1, 0, 0 }, { 0, 1, 0 } }, init.eye({ 2, 3 }):tolist())
    assert.are.same({ 7, 7 }, init.constant({ 2 }, 7, { dtype = "int32" }):tolist())
    assert.are.same({ 2.5, 2.5 }, init.constant(Tensor.ones(2), 2.5):tolist())
    assert.are.same({ 0, 0 }, init.zeros(2):tolist())
    assert.are.same({ 1, 1 }, init.ones(Tensor.zeros(2, { dtype = "int32" })):tolist())
    -- no elements: nothing to draw
    assert.are.same({ 0, 5 }, init.kaiming_uniform({ 0, 5 }).shape)
    assert.are.same({ 0, 0 }, init.xavier_normal({ 0, 0 }).shape)
  end)

  it("draws lazily from the device stream: manual_seed reproduces the values", function()
    local t = init.kaiming_uniform({ 8, 6 })
    assert.is_nil(require("tcl.schedule.buffers").viewed(t.uop)) -- a graph, not a buffer
    local function draw()
      return { init.kaiming_uniform({ 8, 6 }), init.normal({ 50 }), init.trunc_normal({ 3, 3 }),
        init.xavier_normal({ 4, 4 }) }
    end
    tcl.manual_seed(42)
    local first, second = draw(), draw()
    tcl.manual_seed(42)
    local again = draw()
    for i = 1, #first do
      assert(same_values(first[i], again[i]), "draw " .. i .. " differs after manual_seed")
      assert(not same_values(first[i], second[i]), "draw " .. i .. " repeats without a seed")
    end
    -- kaiming_uniform is rand scaled: the same seed gives rand * 2 bound - bound
    local bound = math.sqrt(2) * math.sqrt(3 / 6)
    tcl.manual_seed(9)
    local k = init.kaiming_uniform({ 8, 6 })
    tcl.manual_seed(9)
    assert(same_values(k, Tensor.rand({ 8, 6 }) * (2 * bound) - bound))
  end)

  it("is what Linear and Conv2d initialize with (kaiming_uniform a = sqrt(5), bias in 1/sqrt(fan_in))", function()
    for _, dtype in ipairs({ "float32", "float64" }) do
      tcl.manual_seed(7)
      local layer = tcl.nn.Linear(50, 30, { dtype = dtype })
      tcl.manual_seed(7)
      local w = init.kaiming_uniform({ 30, 50 }, { a = math.sqrt(5), dtype = dtype })
      local b = init.uniform({ 30 }, { a = -1 / math.sqrt(50), b = 1 / math.sqrt(50), dtype = dtype })
      assert(same_values(layer.weight, w) and same_values(layer.bias, b), dtype)
      -- and the values the layers had before nn.init existed: rand * 2 bound - bound with
      -- bound = 1 / sqrt(fan_in); kaiming's sqrt(3) * gain / sqrt(fan_in) may differ from it in
      -- float64's last bit, which float32 rounds away
      tcl.manual_seed(7)
      local bound = 1 / math.sqrt(50)
      local before = Tensor.rand({ 30, 50 }, { dtype = dtype }):mul(2 * bound):sub(bound)
      if dtype == "float32" then
        assert(same_values(layer.weight, before), dtype)
      else
        local x, y = layer.weight:data(), before:data()
        for i = 1, #x do near(x[i], y[i], 2 ^ -52 * bound, "float64 weight " .. i) end
      end
    end
    tcl.manual_seed(8)
    local conv = tcl.nn.Conv2d(6, 8, { 3, 2 }, { groups = 2 })
    tcl.manual_seed(8)
    local bound = 1 / math.sqrt(3 * 3 * 2)
    assert(same_values(conv.weight, Tensor.rand({ 8, 3, 3, 2 }):mul(2 * bound):sub(bound)))
    assert(same_values(conv.bias, Tensor.rand({ 8 }):mul(2 * bound):sub(bound)))
  end)

  it("refuses bad arguments naming the function", function()
    local cases = {
      { "nn.init.kaiming_uniform: fan_in and fan_out need a shape of at least 2 dims, got (5,)",
        init.kaiming_uniform, 5 },
      { "nn.init.kaiming_normal: fan_in and fan_out need a shape of at least 2 dims, got ()", init.kaiming_normal, {} },
      { "nn.init.xavier_uniform: fan_in and fan_out need a shape of at least 2 dims, got (5,)",
        init.glorot_uniform, { 5 } },
      { "nn.init.kaiming_uniform: unknown option 'slope'", init.kaiming_uniform, { 2, 2 }, { slope = 1 } },
      { "nn.init.kaiming_uniform: got 3 arguments, expected at most 2: nn.init.kaiming_uniform(shape_or_tensor, opts)",
        init.kaiming_uniform, { 2, 2 }, {}, 3 },
      { "nn.init.kaiming_uniform: mode must be 'fan_in' or 'fan_out', got 'fan_avg'",
        init.kaiming_uniform, { 2, 2 }, { mode = "fan_avg" } },
      { "nn.init.kaiming_normal: unknown nonlinearity 'gelu' (one of linear, conv1d, conv2d, conv3d, "
        .. "conv_transpose1d, conv_transpose2d, conv_transpose3d, sigmoid, tanh, relu, leaky_relu, selu)",
        init.kaiming_normal, { 2, 2 }, { nonlinearity = "gelu" } },
      { "nn.init.kaiming_normal: a is the negative slope of leaky_relu, got nonlinearity 'relu'",
        init.kaiming_normal, { 2, 2 }, { nonlinearity = "relu", a = 0.1 } },
      { "nn.init.kaiming_uniform: a must be a finite number, got string", init.kaiming_uniform, { 2, 2 }, { a = "1" } },
      { "nn.init.kaiming_uniform: nonlinearity must be a string, got number",
        init.kaiming_uniform, { 2, 2 }, { nonlinearity = 1 } },
      { "nn.init.calculate_gain: nonlinearity 'relu' takes no parameter, got 0.5", init.calculate_gain, "relu", 0.5 },
      { "nn.init.calculate_gain: the negative slope must be a finite number, got inf",
        init.calculate_gain, "leaky_relu", math.huge },
      { "nn.init.calculate_gain: got 3 arguments, expected at most 2", init.calculate_gain, "relu", nil, 1 },
      { "nn.init.uniform: a (2) must be <= b (1)", init.uniform, { 3 }, { a = 2, b = 1 } },
      { "nn.init.uniform: b must be a finite number, got nan", init.uniform, { 3 }, { b = 0 / 0 } },
      { "nn.init.uniform: dtype must be a float dtype, got int32", init.uniform, { 3 }, { dtype = "int32" } },
      { "nn.init.uniform: dtype must be a float dtype, got int32", init.uniform, Tensor.zeros(3, { dtype = "int32" }) },
      { "nn.init.uniform: options must be a table, got number", init.uniform, { 3 }, 1 },
      { "nn.init.uniform: expected a shape or a tensor, got string", init.uniform, "3" },
      { "nn.init.normal: sizes must be >= 0, got (-1,)", init.normal, -1 },
      { "nn.init.normal: std must be >= 0, got -1", init.normal, { 3 }, { std = -1 } },
      { "nn.init.xavier_normal: gain must be a finite number, got boolean",
        init.xavier_normal, { 3, 3 }, { gain = true } },
      { "nn.init.xavier_normal: unknown option 'mode'", init.glorot_normal, { 3, 3 }, { mode = "fan_in" } },
      { "nn.init.trunc_normal: a (1) must be < b (1)", init.trunc_normal, { 3 }, { a = 1, b = 1 } },
      { "nn.init.trunc_normal: std must be > 0, got 0", init.trunc_normal, { 3 }, { std = 0 } },
      { "nn.init.trunc_normal: a must be a finite number, got -inf", init.trunc_normal, { 3 }, { a = -math.huge } },
      { "nn.init.constant: value must be a number, got nil", init.constant, { 3 } },
      { "nn.init.constant: unknown option 'value'", init.constant, { 3 }, 1, { value = 1 } },
      { "nn.init.eye: needs a 2-d shape, got (2, 2, 2)", init.eye, { 2, 2, 2 } },
      { "nn.init.zeros: got 3 arguments, expected at most 2", init.zeros, { 3 }, nil, 1 },
    }
    for _, case in ipairs(cases) do
      helper.fails_with(case[1], table.unpack(case, 2))
    end
  end)
end)
