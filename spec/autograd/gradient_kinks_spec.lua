-- spec/autograd/gradient_kinks_spec.lua — derivatives at the kinks follow PyTorch (docs/guide/training.md, "Autograd",
-- gradient conventions): relu, leaky_relu, elu, abs, sign, clamp with number and tensor bounds,
-- maximum / minimum ties, max / min reduction ties, in reverse mode (backward) and forward mode
-- (tcl.jvp). The expected values are literals computed with PyTorch 1.13 (python3-torch), e.g.
--   x = torch.tensor([-1., 0., 1.], requires_grad=True); torch.relu(x).sum().backward(); x.grad
--   torch.autograd.functional.jvp(torch.clamp, (x, lo, hi), (tx, tlo, thi))
local tcl = require "tcl"
local Tensor = tcl.Tensor

local TOLERANCE = 1e-6

local function flat(list, out)
  out = out or {}
  for _, v in ipairs(list) do
    if type(v) == "table" then flat(v, out) else out[#out + 1] = v end
  end
  return out
end

local function assert_close(expected, got, what)
  local e, g = flat(expected), flat(got)
  assert(#e == #g, string.format("%s: %d values, expected %d", what, #g, #e))
  for i = 1, #e do
    if math.abs(e[i] - g[i]) > TOLERANCE then
      error(string.format("%s: value %d is %.9g, expected %.9g (PyTorch)", what, i, g[i], e[i]), 2)
    end
  end
end

-- The gradients of sum(f(inputs...)) with respect to each input (lists of floats).
local function gradients(f, ...)
  local inputs = {}
  for i, values in ipairs({ ... }) do inputs[i] = Tensor(values, { requires_grad = true }) end
  f(table.unpack(inputs)):sum():backward()
  local grads = {}
  for i, t in ipairs(inputs) do grads[i] = t.grad:tolist() end
  return grads
end

-- The tangent of f at the primals (lists) along the tangents (lists).
local function tangent(f, primals, tangents)
  local p, t = {}, {}
  for i, values in ipairs(primals) do p[i] = Tensor(values) end
  for i, values in ipairs(tangents) do t[i] = Tensor(values) end
  local _, out = tcl.jvp(f, p, t)
  return out:tolist()
end

describe("gradients at the kinks follow PyTorch", function()
  it("relu'(0) = 0 and leaky_relu'(0) = the slope, in both modes", function()
    assert_close({ 0.0, 0.0, 1.0 }, gradients(Tensor.relu, { -1.0, 0.0, 1.0 })[1], "relu")
    assert_close({ 0.0, 0.0, 1.0 }, tangent(Tensor.relu, { { -1.0, 0.0, 1.0 } }, { { 1.0, 1.0, 1.0 } }), "relu jvp")
    local function leaky(x) return x:leaky_relu(0.25) end
    assert_close({ 0.25, 0.25, 1.0 }, gradients(leaky, { -1.0, 0.0, 1.0 })[1], "leaky_relu")
    assert_close({ 0.25, 0.25, 1.0 }, tangent(leaky, { { -1.0, 0.0, 1.0 } }, { { 1.0, 1.0, 1.0 } }), "leaky_relu jvp")
    assert_close({ -0.25, 0.0, 1.0 }, leaky(Tensor({ -1.0, 0.0, 1.0 })):tolist(), "leaky_relu values")
    -- relu's values are maximum(x, 0)'s, and a tcl.grad of it agrees
    local relu_grad = tcl.grad(function(x) return x:relu():sum() end)
    assert_close({ 0.0, 0.0, 1.0 }, relu_grad(Tensor({ -1.0, 0.0, 1.0 })):tolist(), "relu tcl.grad")
  end)

  it("elu'(0) = alpha, as PyTorch's", function()
    local function elu(x) return x:elu(0.5) end
    assert_close({ 0.18393972516059875, 0.5, 1.0 }, gradients(elu, { -1.0, 0.0, 1.0 })[1], "elu")
    assert_close({ 0.18393972516059875, 0.5, 1.0 }, tangent(elu, { { -1.0, 0.0, 1.0 } }, { { 1.0, 1.0, 1.0 } }),
      "elu jvp")
  end)

  it("abs'(0) = 0 (also at -0.0) and sign' = 0", function()
    assert_close({ -1.0, 0.0, 0.0, 1.0 }, gradients(Tensor.abs, { -2.0, -0.0, 0.0, 3.0 })[1], "abs")
    assert_close({ -1.0, 0.0, 0.0, 1.0 }, tangent(Tensor.abs, { { -2.0, -0.0, 0.0, 3.0 } }, { { 1.0, 1.0, 1.0, 1.0 } }),
      "abs jvp")
    assert_close({ 2.0, 0.0, 0.0, 3.0 }, Tensor({ -2.0, -0.0, 0.0, 3.0 }):abs():tolist(), "abs values")
    assert_close({ 0.0, 0.0, 0.0 }, gradients(Tensor.sign, { -1.0, 0.0, 1.0 })[1], "sign")
  end)

  it("clamp passes the whole gradient on [lo, hi], bounds included, and none outside", function()
    local x = { -1.0, 0.0, 0.5, 1.0, 2.0 }
    local function clamp01(t) return t:clamp(0, 1) end
    assert_close({ 0.0, 1.0, 1.0, 1.0, 0.0 }, gradients(clamp01, x)[1], "clamp(0, 1)")
    assert_close({ 0.0, 1.0, 1.0, 1.0, 0.0 }, tangent(clamp01, { x }, { { 1.0, 1.0, 1.0, 1.0, 1.0 } }), "clamp jvp")
    assert_close({ 0.0, 1.0, 1.0 }, gradients(function(t) return t:clamp(0) end, { -1.0, 0.0, 1.0 })[1], "clamp(0)")
    assert_close({ 1.0, 1.0, 0.0 }, gradients(function(t) return t:clip(nil, 0) end, { -1.0, 0.0, 1.0 })[1],
      "clip(nil, 0)")
  end)

  it("clamp with tensor bounds: each bound gets the gradient where it is the result", function()
    -- x inside, at lo, at hi, above, below, x = lo = hi, and bounds lo > hi (the result is hi)
    local x = { 0.0, 0.5, 1.0, 1.5, -0.5, 0.5, 0.0, 0.5, 2.0 }
    local lo = { 0.0, 0.0, 0.0, 0.0, 0.0, 0.5, 1.0, 1.0, 1.0 }
    local hi = { 1.0, 1.0, 1.0, 1.0, 1.0, 0.5, 0.0, 0.0, 0.0 }
    local grads = gradients(Tensor.clamp, x, lo, hi)
    assert_close({ 1.0, 1.0, 1.0, 0.0, 0.0, 1.0, 0.0, 0.0, 0.0 }, grads[1], "clamp x")
    assert_close({ 0.0, 0.0, 0.0, 0.0, 1.0, 0.0, 0.0, 0.0, 0.0 }, grads[2], "clamp lo")
    assert_close({ 0.0, 0.0, 0.0, 1.0, 0.0, 0.0, 1.0, 1.0, 1.0 }, grads[3], "clamp hi")
    assert_close({ 0.0, 0.5, 1.0, 1.0, 0.0, 0.5, 0.0, 0.0, 0.0 },
      Tensor.clamp(Tensor(x), Tensor(lo), Tensor(hi)):tolist(), "clamp values")
    local ones = { 1.0, 1.0, 1.0, 1.0, 1.0, 1.0, 1.0, 1.0, 1.0 }
    local tens, hundreds = {}, {}
    for i = 1, #ones do tens[i], hundreds[i] = 10.0, 100.0 end
    assert_close({ 1.0, 1.0, 1.0, 100.0, 10.0, 1.0, 100.0, 100.0, 100.0 },
      tangent(Tensor.clamp, { x, lo, hi }, { ones, tens, hundreds }), "clamp jvp")
    -- one bound only, a broadcast tensor
    local only = gradients(function(t, l) return t:clamp(l) end, { 0.0, 1.0, -1.0 }, { 0.0 })
    assert_close({ 1.0, 1.0, 0.0 }, only[1], "clamp(x, lo) x")
    assert_close({ 1.0 }, only[2], "clamp(x, lo) lo") -- PyTorch: (0, 0, 1) summed over the broadcast
  end)

  it("maximum / minimum share ties 0.5 / 0.5; max / min reductions share ties evenly", function()
    local grads = gradients(Tensor.maximum, { 1.0, 2.0, 3.0 }, { 2.0, 2.0, 2.0 })
    assert_close({ 0.0, 0.5, 1.0 }, grads[1], "maximum a")
    assert_close({ 1.0, 0.5, 0.0 }, grads[2], "maximum b")
    grads = gradients(Tensor.minimum, { 1.0, 2.0, 3.0 }, { 2.0, 2.0, 2.0 })
    assert_close({ 1.0, 0.5, 0.0 }, grads[1], "minimum a")
    assert_close({ 0.0, 0.5, 1.0 }, grads[2], "minimum b")
    assert_close({ 10.0, 5.5, 1.0 }, tangent(Tensor.maximum, { { 1.0, 2.0, 3.0 }, { 2.0, 2.0, 2.0 } },
      { { 1.0, 1.0, 1.0 }, { 10.0, 10.0, 10.0 } }), "maximum jvp")
    assert_close({ 0.0, 0.5, 0.5, 0.0 }, gradients(function(t) return t:min() end, { 1.0, 0.0, 0.0, 2.0 })[1], "min")
    -- with a dim: torch.amax's sharing (torch.max(x, dim) routes to the index it returns)
    assert_close({ { 0.0, 0.5, 0.5 }, { 1 / 3, 1 / 3, 1 / 3 } },
      gradients(function(t) return t:max(2) end, { { 1.0, 3.0, 3.0 }, { 2.0, 2.0, 2.0 } })[1], "max(x, 2)")
  end)
end)
