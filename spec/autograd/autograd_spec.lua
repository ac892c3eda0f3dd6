-- spec/autograd/autograd_spec.lua — reverse-mode gradients (Tensor:backward, Tensor:gradient), the
-- functional transforms (tcl.grad, value_and_grad, vjp, jvp) and their rules
-- (tcl.patterns.gradient, tcl.patterns.tangent): every differentiable op of the Tensor API
-- against central finite differences in float64, analytic formulas, broadcasting,
-- non-contiguous inputs, reductions over several dims, nodes used twice, the requires_grad
-- bookkeeping and its errors.
local tcl = require "tcl"
local splitmix = require "spec.support.splitmix"
local Tensor = tcl.Tensor

local F64 = { dtype = "float64" }

-- A reproducible list of n values in [lo, hi).
local function values(n, seed, lo, hi)
  local rng, list = splitmix.new(seed), {}
  for i = 1, n do list[i] = rng:uniform(lo, hi) end
  return list
end

local numel = require("tcl.shape").numel

local function tensor64(flat, shape) return Tensor(flat, F64):reshape(table.unpack(shape)) end

-- The loss sum(f(x1, x2, ...) * weights) for fixed random weights, as a number, for inputs
-- given as flat lists.
local function loss_value(f, flats, shapes, weights)
  local args = {}
  for i, flat in ipairs(flats) do args[i] = tensor64(flat, shapes[i]) end
  local y = f(table.unpack(args))
  return (y * weights(y)):sum():item()
end

-- Checks backward's gradient of every input against central differences of the loss.
local function check_gradient(name, f, shapes, opts)
  opts = opts or {}
  local flats = {}
  for i, shape in ipairs(shapes) do
    flats[i] = values(numel(shape), 17 * i + #name, opts.lo or -2, opts.hi or 2)
  end
  local weight_cache = {}
  local function weights(y)
    local key = table.concat(y.shape, "x")
    if not weight_cache[key] then weight_cache[key] = values(numel(y.shape), 99, 0.5, 1.5) end
    return tensor64(weight_cache[key], y.shape)
  end
  local leaves = {}
  for i, flat in ipairs(flats) do leaves[i] = tensor64(flat, shapes[i]):requires_grad_() end
  local y = f(table.unpack(leaves))
  local loss = (y * weights(y)):sum()
  loss:backward()
  local h = opts.h or 1e-6
  for i, flat in ipairs(flats) do
    assert.is_not_nil(leaves[i].grad, name .. ": input " .. i .. " got no gradient")
    local analytic = leaves[i].grad:data()
    for k = 1, #flat do
      local keep = flat[k]
      flat[k] = keep + h
      local up = loss_value(f, flats, shapes, weights)
      flat[k] = keep - h
      local down = loss_value(f, flats, shapes, weights)
      flat[k] = keep
      local numeric = (up - down) / (2 * h)
      local tolerance = (opts.tol or 1e-5) * math.max(1, math.abs(numeric))
      if math.abs(analytic[k] - numeric) > tolerance then
        error(string.format("%s: d loss / d x%d[%d] is %.10g, finite differences give %.10g", name, i, k,
          analytic[k], numeric), 0)
      end
    end
  end
end

describe("gradients against central finite differences (float64)", function()
  local UNARY = {
    neg = function(x) return -x end,
    exp = function(x) return x:exp() end,
    exp2 = function(x) return x:exp2() end,
    sqrt = function(x) return x:abs():add(0.5):sqrt() end,
    rsqrt = function(x) return x:abs():add(0.5):rsqrt() end,
    log = function(x) return x:abs():add(0.5):log() end,
    log2 = function(x) return x:abs():add(0.5):log2() end,
    reciprocal = function(x) return x:abs():add(0.5):reciprocal() end,
    sin = function(x) return x:sin() end,
    cos = function(x) return x:cos() end,
    tan = function(x) return (x * 0.5):tan() end,
    sigmoid = function(x) return x:sigmoid() end,
    tanh = function(x) return x:tanh() end,
    relu = function(x) return x:relu() end,
    leaky_relu = function(x) return x:leaky_relu(0.1) end,
    gelu = function(x) return x:gelu() end,
    silu = function(x) return x:silu() end,
    softplus = function(x) return x:softplus(2) end,
    elu = function(x) return x:elu(0.7) end,
    abs = function(x) return x:abs() end,
    square = function(x) return x:square() end,
    pow_const = function(x) return x:abs():add(0.5) ^ 2.5 end,
    pow_int = function(x) return x ^ 3 end,
    clamp = function(x) return x:clamp(-1, 1) end,
    cast_roundtrip = function(x) return x:float():double() * 2 end,
  }
  for name, f in pairs(UNARY) do
    -- the float32 round trip rounds x: finite differences need a step far above its ulp
    local opts = name == "cast_roundtrip" and { tol = 1e-3, h = 1e-3 } or nil
    it(name, function() check_gradient(name, f, { { 2, 3 } }, opts) end)
  end

  local BINARY = {
    add = function(a, b) return a + b end,
    sub = function(a, b) return a - b end,
    mul = function(a, b) return a * b end,
    div = function(a, b) return a / (b:abs() + 0.5) end,
    maximum = function(a, b) return a:maximum(b) end,
    minimum = function(a, b) return a:minimum(b) end,
    pow = function(a, b) return (a:abs() + 0.5) ^ b end,
    where = function(a, b) return a:gt(b):where(a * 2, b * b) end,
    mod = function(a, b) return a % (b:abs() + 1) end,
  }
  for name, f in pairs(BINARY) do
    it(name, function() check_gradient(name, f, { { 2, 3 }, { 2, 3 } }) end)
  end

  it("broadcasting, both ways", function()
    check_gradient("broadcast", function(a, b) return a * b + a end, { { 3, 1 }, { 1, 4 } })
    check_gradient("broadcast rank", function(a, b) return a - b end, { { 2, 3, 4 }, { 4 } })
  end)

  it("non-contiguous inputs", function()
    check_gradient("transpose", function(a, b) return a:transpose(1, 2) * b end, { { 3, 2 }, { 2, 3 } })
    check_gradient("slice", function(a) return a:slice({ 2, 3 }, { 1, 3, 2 }):exp() end, { { 4, 4 } })
  end)

  it("reductions over one and several dims", function()
    check_gradient("sum all", function(x) return x:sum() end, { { 2, 3, 2 } })
    check_gradient("sum dims", function(x) return x:sum({ 1, 3 }) end, { { 2, 3, 2 } })
    check_gradient("mean", function(x) return x:mean(2, true) end, { { 2, 3, 2 } })
    check_gradient("max", function(x) return x:max(2) end, { { 3, 4 } })
    check_gradient("min dims", function(x) return x:min({ 1, 2 }) end, { { 3, 4 } })
    check_gradient("prod", function(x) return x:prod(2) end, { { 2, 3 } }, { lo = 0.5, hi = 2 })
    check_gradient("var", function(x) return x:var(2) end, { { 3, 4 } })
    check_gradient("std", function(x) return x:std(1) end, { { 3, 4 } })
    check_gradient("logsumexp", function(x) return x:logsumexp(2) end, { { 3, 4 } })
    check_gradient("softmax", function(x) return x:softmax(2) end, { { 3, 4 } })
    check_gradient("log_softmax", function(x) return x:log_softmax(1) end, { { 3, 4 } })
    check_gradient("cumsum", function(x) return x:cumsum(2) end, { { 2, 4 } })
  end)

  it("movement ops", function()
    check_gradient("reshape", function(x) return x:reshape(3, 2):exp() end, { { 2, 3 } })
    check_gradient("permute", function(x) return x:permute(3, 1, 2) * x:permute(3, 1, 2) end, { { 2, 3, 2 } })
    check_gradient("expand", function(x) return x:expand(3, 4) end, { { 3, 1 } })
    check_gradient("pad", function(x) return x:pad({ { 1, 2 }, { 0, 1 } }):sin() end, { { 2, 3 } })
    check_gradient("flip", function(x) return x:flip(2) * x end, { { 2, 3 } })
    check_gradient("cat", function(a, b) return Tensor.cat({ a, b * 2, a }, 1) end, { { 2, 3 }, { 1, 3 } })
    check_gradient("stack", function(a, b) return Tensor.stack({ a, b }, 2) end, { { 2, 3 }, { 2, 3 } })
    check_gradient("repeat", function(x) return x["repeat"](x, 2, 3) end, { { 2, 2 } })
  end)

  it("nn functions", function()
    check_gradient("matmul", function(a, b) return a:matmul(b) end, { { 3, 4 }, { 4, 2 } })
    check_gradient("batched matmul", function(a, b) return a:matmul(b) end, { { 2, 2, 3 }, { 3, 2 } })
    check_gradient("linear", function(x, w, b) return x:linear(w, b) end, { { 2, 3 }, { 3, 4 }, { 4 } })
    check_gradient("conv2d", function(x, w) return x:conv2d(w, nil, { padding = 1, stride = 2 }) end,
      { { 1, 2, 5, 5 }, { 3, 2, 3, 3 } })
    check_gradient("conv2d rows past the last window", function(x, w, b)
      return x:conv2d(w, b, { padding = { { 1, 0 }, { 2, 1 } }, stride = { 2, 3 } })
    end, { { 2, 2, 6, 7 }, { 3, 2, 3, 2 }, { 3 } })
    check_gradient("conv2d dilated", function(x, w) return x:conv2d(w, nil, { dilation = 2, padding = 1 }) end,
      { { 1, 2, 6, 6 }, { 2, 2, 3, 3 } })
    check_gradient("conv2d groups (through the graph)", function(x, w) return x:conv2d(w, nil, { groups = 2 }) end,
      { { 1, 4, 4, 4 }, { 2, 2, 3, 3 } })
    check_gradient("max_pool2d", function(x) return x:max_pool2d(2) end, { { 1, 1, 4, 4 } })
    check_gradient("avg_pool2d", function(x) return x:avg_pool2d(2) end, { { 1, 2, 4, 4 } })
    check_gradient("layernorm", function(x) return x:layernorm(2) end, { { 3, 4 } })
    check_gradient("cross_entropy", function(x)
      return x:cross_entropy(Tensor({ 2, 1, 4 }):long())
    end, { { 3, 4 } })
  end)

  it("a node used twice, and a chain through a shared value", function()
    check_gradient("x * x", function(x) return x * x end, { { 5 } })
    check_gradient("shared exp", function(x)
      local y = x:exp()
      return y + y * y
    end, { { 5 } })
  end)
end)

describe("analytic gradients", function()
  it("d sum(a * b) = b and a; d sum(x^2)/2 = x", function()
    local a = Tensor({ 1.0, 2.0, 3.0 }, { requires_grad = true })
    local b = Tensor({ 4.0, 5.0, 6.0 }, { requires_grad = true })
    ;(a * b):sum():backward()
    assert.same({ 4.0, 5.0, 6.0 }, a.grad:tolist())
    assert.same({ 1.0, 2.0, 3.0 }, b.grad:tolist())
    local x = Tensor({ -1.5, 0.25, 3.0 }, { requires_grad = true })
    assert.same({ -1.5, 0.25, 3.0 }, ((x * x):sum() / 2):gradient(x):tolist())
  end)

  it("sigmoid' = s (1 - s), tanh' = 1 - t^2, exp' = exp (the composite derivatives)", function()
    local xs = { -3.0, -0.5, 0.0, 0.75, 4.0 }
    local x = Tensor(xs, F64):requires_grad_()
    local ds = x:sigmoid():sum():gradient(x)
    local dt = x:tanh():sum():gradient(x)
    local de = x:exp():sum():gradient(x)
    for i, v in ipairs(xs) do
      local s = 1 / (1 + math.exp(-v))
      assert.near(s * (1 - s), ds:data()[i], 1e-12)
      local th = (math.exp(v) - math.exp(-v)) / (math.exp(v) + math.exp(-v))
      assert.near(1 - th * th, dt:data()[i], 1e-12)
      assert.near(math.exp(v), de:data()[i], 1e-12 * math.exp(v))
    end
  end)

  it("the maximum's gradient is shared among ties", function()
    local x = Tensor({ 1.0, 3.0, 3.0, 2.0 }, { requires_grad = true })
    assert.same({ 0.0, 0.5, 0.5, 0.0 }, x:max():gradient(x):tolist())
  end)

  it("integer and bool paths give no gradient", function()
    local x = Tensor({ 1.5, 2.5 }, { requires_grad = true })
    local y = x:int():float() + x:gt(2):float() * 0 + x
    assert.same({ 1.0, 1.0 }, y:sum():gradient(x):tolist())
  end)
end)

describe("backward and .grad", function()
  it("accumulates across calls, and t.grad = nil clears", function()
    local w = Tensor({ 1.0, 2.0 }, { requires_grad = true })
    ;(w * 3):sum():backward()
    ;(w * w):sum():backward()
    assert.same({ 5.0, 7.0 }, w.grad:tolist())
    w.grad = nil
    ;(w * 3):sum():backward()
    assert.same({ 3.0, 3.0 }, w.grad:tolist())
  end)

  it("gradient() leaves .grad alone and works for intermediate tensors", function()
    local x = Tensor({ 1.0, 2.0 }, { requires_grad = true })
    local h = x * 2
    local loss = (h * h):sum()
    local dh, dx = loss:gradient(h, x)
    assert.same({ 4.0, 8.0 }, dh:tolist())
    assert.same({ 8.0, 16.0 }, dx:tolist())
    assert.is_nil(x.grad)
  end)

  it("backward with a gradient for a tensor of several elements", function()
    local x = Tensor({ 1.0, 2.0, 3.0 }, { requires_grad = true })
    ;(x * x):backward(Tensor({ 1.0, 0.0, 2.0 }))
    assert.same({ 2.0, 0.0, 12.0 }, x.grad:tolist())
  end)

  it("works after the loss (or an intermediate) was realized", function()
    local x = Tensor({ 1.0, 2.0 }, { requires_grad = true })
    local h = (x * x):realize()
    local loss = (h * 3):sum()
    assert.equal(15.0, loss:item())
    loss:backward()
    assert.same({ 6.0, 12.0 }, x.grad:tolist())
  end)

  it("detach and no_grad stop the gradient; requires_grad passes on", function()
    local x = Tensor({ 1.0, 2.0 }, { requires_grad = true })
    assert.is_true(x.requires_grad)
    assert.is_true((x * 2).requires_grad)
    assert.is_false(x:detach().requires_grad)
    local c = tcl.no_grad(function() return x * 10 end)
    assert.is_false(c.requires_grad)
    local loss = (x * x:detach() + c):sum()
    assert.same({ 1.0, 2.0 }, loss:gradient(x):tolist())
    assert.is_true(tcl.no_grad(function() return tcl.enable_grad(function() return (x * 2).requires_grad end) end))
  end)

  it("a leaf made from a lazy tensor is a node of its own", function()
    local a = Tensor.ones(3, { requires_grad = true })
    local b = Tensor.ones(3, { requires_grad = true })
    ;(a * 2 + b * 3):sum():backward()
    assert.same({ 2.0, 2.0, 2.0 }, a.grad:tolist())
    assert.same({ 3.0, 3.0, 3.0 }, b.grad:tolist())
  end)

  it("gradients reach a parameter used through reshapes", function()
    local w = Tensor({ 1.0, 2.0, 3.0, 4.0 }, { requires_grad = true }):reshape(2, 2)
    w = w:detach():requires_grad_()
    local loss = (w:reshape(4) * Tensor({ 1.0, 2.0, 3.0, 4.0 })):sum()
    assert.same({ { 1.0, 2.0 }, { 3.0, 4.0 } }, loss:gradient(w):tolist())
  end)

  it("errors name the problem", function()
    local x = Tensor({ 1.0, 2.0 }, { requires_grad = true })
    assert.has_error(function() (x * 2):backward() end,
      "backward: needs a gradient argument for a tensor of shape (2,) (only a one-element tensor gets 1 by default)")
    assert.has_error(function() Tensor({ 1.0 }):sum():backward() end,
      "backward: the tensor does not require gradients: no tensor it is computed from has requires_grad set "
      .. "(or it was computed under tcl.no_grad)")
    assert.has_error(function() Tensor({ 1, 2 }):requires_grad_() end,
      "requires_grad_: only float tensors can require gradients, got a int32 tensor")
    assert.has_error(function() (x * 2):requires_grad_(false) end,
      "requires_grad_: the tensor is computed from tensors that require gradients; use detach() for a tensor "
      .. "without them")
    assert.has_error(function() x:sum():backward(Tensor({ 1.0, 2.0 })) end,
      "backward: the gradient has shape (2,), the tensor ()")
    assert.has_error(function() Tensor.zeros(2, { requires_grad = 1 }) end,
      "zeros: requires_grad must be a boolean, got number")
  end)

  it("survives garbage-collection pressure over many steps", function()
    local w = Tensor({ 0.5, -0.5 }, { requires_grad = true })
    for step = 1, 300 do
      local loss = ((w * w):sum() + w:exp():sum()):realize()
      assert.is_true(loss:item() > 0)
      w.grad = nil
      loss:backward()
      if step % 50 == 0 then collectgarbage() end
    end
    local g = w.grad:tolist()
    assert.near(2 * 0.5 + math.exp(0.5), g[1], 1e-5)
    assert.near(-1 + math.exp(-0.5), g[2], 1e-5)
  end)
end)

describe("functional transforms", function()
  local function cube_sum(x) return (x * x * x):sum() end

  it("grad and value_and_grad, argnums as a number or a list", function()
    local x = Tensor({ 1.0, 2.0, 3.0 })
    assert.same({ 3.0, 12.0, 27.0 }, tcl.grad(cube_sum)(x):tolist())
    local f = function(a, b) return (a * b * b):sum() end
    local db = tcl.grad(f, 2)(x, x)
    assert.same({ 2.0, 8.0, 18.0 }, db:tolist())
    local v, da, db2 = tcl.value_and_grad(f, { 1, 2 })(x, x)
    assert.equal(36.0, v:item())
    assert.same({ 1.0, 4.0, 9.0 }, da:tolist())
    assert.same({ 2.0, 8.0, 18.0 }, db2:tolist())
    assert.is_nil(x.grad)
  end)

  it("higher-order gradients: d2/dx2 x^3 = 6x, d2/dx2 sin = -sin", function()
    local x = Tensor({ 1.0, 2.0, 3.0 }, F64)
    local d2 = tcl.grad(function(y) return tcl.grad(cube_sum)(y):sum() end)(x)
    assert.same({ 6.0, 12.0, 18.0 }, d2:tolist())
    local sin_sum = function(y) return y:sin():sum() end
    local d2sin = tcl.grad(function(y) return tcl.grad(sin_sum)(y):sum() end)(x):tolist()
    for i, v in ipairs({ 1.0, 2.0, 3.0 }) do assert.near(-math.sin(v), d2sin[i], 1e-12) end
    local d3 = tcl.grad(function(y) return tcl.grad(function(z) return tcl.grad(sin_sum)(z):sum() end)(y):sum() end)
    for i, v in ipairs(d3(x):tolist()) do assert.near(-math.cos(i), v, 1e-12) end
  end)

  it("nested transforms keep their variables apart", function()
    -- d/da [a * (d/db a b)] = d/da a^2 = 2a, also when b is given the same tensor as a
    local a = Tensor({ 1.5 })
    local g = tcl.grad(function(x) return (x * tcl.grad(function(y) return (x * y):sum() end)(x)):sum() end)(a)
    assert.equal(3.0, g:item())
  end)

  it("vjp with several results, jvp against finite differences", function()
    local x = Tensor({ 0.5, -1.0, 2.0 }, F64)
    local y1, y2, pullback = tcl.vjp(function(a) return a:exp(), (a * a):sum() end, x)
    assert.near(math.exp(0.5) + 0.5 * 0.5, y1:tolist()[1] + 0.25, 1e-12)
    assert.equal(5.25, y2:item())
    local dx = pullback(Tensor({ 1.0, 0.0, 2.0 }, F64), Tensor(3.0, F64)):tolist()
    assert.near(math.exp(0.5) + 6 * 0.5, dx[1], 1e-12)
    assert.near(0 + 6 * -1.0, dx[2], 1e-12)
    assert.near(2 * math.exp(2.0) + 6 * 2.0, dx[3], 1e-12)

    local f = function(a, b) return (a:sin() * b):tanh() + a:sigmoid():softplus() end
    local xs, bs, ts, us = { 0.3, -0.7 }, { 1.2, 0.4 }, { 1.0, -2.0 }, { 0.5, 0.25 }
    local _, tan = tcl.jvp(f, { Tensor(xs, F64), Tensor(bs, F64) }, { Tensor(ts, F64), Tensor(us, F64) })
    local h = 1e-6
    local function at(s)
      local a, b = {}, {}
      for i = 1, 2 do a[i], b[i] = xs[i] + s * ts[i], bs[i] + s * us[i] end
      return f(Tensor(a, F64), Tensor(b, F64)):tolist()
    end
    local up, down, got = at(h), at(-h), tan:tolist()
    for i = 1, 2 do assert.near((up[i] - down[i]) / (2 * h), got[i], 1e-7) end

    -- conv2d's forward rule: bilinear in input and weight
    local cx, cw = Tensor.randn(1, 2, 5, 5, F64), Tensor.randn(3, 2, 3, 3, F64)
    local tx, tw = Tensor.randn(1, 2, 5, 5, F64), Tensor.randn(3, 2, 3, 3, F64)
    local conv = function(a, b) return a:conv2d(b, nil, { stride = 2, padding = 1 }) end
    local _, ct = tcl.jvp(conv, { cx, cw }, { tx, tw })
    local expected = (conv(tx, cw) + conv(cx, tw)):data()
    for i, v in ipairs(ct:data()) do assert.near(expected[i], v, 1e-12) end
  end)

  it("vmap batches a function written for one example, in one graph", function()
    local f = function(x, w) return x:matmul(w):relu():sum() + x:exp():mean() end
    local xs, w = Tensor.randn(5, 3), Tensor.randn(3, 4)
    local batched = tcl.vmap(f, { 1, false })(xs, w)
    assert.same({ 5 }, batched.shape)
    local got = batched:tolist()
    for i = 1, 5 do assert.near(f(xs[i], w):item(), got[i], 1e-5) end
    -- batch dim 2 in and out
    local m = Tensor({ { 1.0, 2.0 }, { 3.0, 4.0 }, { 5.0, 6.0 } })
    assert.same({ { 11.0, 16.0 }, { 15.0, 20.0 }, { 19.0, 24.0 } },
      tcl.vmap(function(x) return x * 2 + x:sum() end, 2, 2)(m):tolist())
    -- a result that does not depend on the batch is repeated
    assert.same({ { 7.0 }, { 7.0 } }, tcl.vmap(function(_) return Tensor({ 7.0 }) end)(Tensor.zeros(2, 3)):tolist())
  end)

  it("vmap composes with grad: per-example gradients, and the gradient of a vmapped function", function()
    local xs = Tensor({ { 1.0, 2.0 }, { -1.0, 0.5 }, { 0.0, 3.0 } })
    local per_example = tcl.vmap(tcl.grad(function(x) return (x * x):sum() * x[1] end))(xs):tolist()
    for i, row in ipairs(xs:tolist()) do
      local a, b = row[1], row[2]
      assert.near(3 * a * a + b * b, per_example[i][1], 1e-5)
      assert.near(2 * a * b, per_example[i][2], 1e-5)
    end
    local g = tcl.grad(function(x) return tcl.vmap(function(r) return r:exp():sum() end)(x):sum() end)(xs):tolist()
    for i, row in ipairs(xs:tolist()) do
      for j, v in ipairs(row) do assert.near(math.exp(v), g[i][j], 1e-5 * math.exp(v)) end
    end
  end)

  it("errors", function()
    assert.has_error(function() tcl.vmap(function(x) return x end)(Tensor.zeros(2), Tensor.zeros(3)) end,
      "vmap: argument 2 has batch size 3 along dim 1, an earlier one 2")
    assert.has_error(function() tcl.vmap(function(x) return x end, 3)(Tensor.zeros(2)) end,
      "vmap: in_dims[1] = 3 is out of range for 1 dims (1-based, negative from the end)")
    assert.has_error(function() tcl.grad(function(x) return x * 2 end)(Tensor({ 1.0, 2.0 })) end,
      "grad: the function must return a tensor with one element, got shape (2,)")
    assert.has_error(function() tcl.grad(cube_sum)(3) end,
      "grad: argument 1 is number; it must be a tensor to be differentiated")
    assert.has_error(function() tcl.grad(cube_sum, 0) end, "grad: argnums must be positions >= 1, got 0")
    assert.has_error(function() tcl.jvp(cube_sum, { Tensor({ 1.0 }) }, {}) end,
      "jvp: got 1 primals and 0 tangents; give one tangent per primal")
  end)
end)

describe("Tensor.assign (in place)", function()
  it("kernels reading the old value run before the assignment, readers of the new one after", function()
    local a = Tensor({ 1.0, 2.0, 3.0 })
    local old = a * 2
    a:assign(a + 100)
    local new = a * 2
    tcl.realize(new, a, old)
    assert.same({ 2.0, 4.0, 6.0 }, old:tolist())
    assert.same({ 202.0, 204.0, 206.0 }, new:tolist())
    assert.same({ 101.0, 102.0, 103.0 }, a:tolist())
  end)

  it("a value that reads the target at other elements is stored apart first", function()
    local m = Tensor({ { 1.0, 2.0 }, { 3.0, 4.0 } })
    m:assign(m:transpose(1, 2))
    assert.same({ { 1.0, 3.0 }, { 2.0, 4.0 } }, m:tolist())
    local v = Tensor({ 1.0, 2.0, 3.0, 4.0 })
    v:assign(v:flip(1) + v)
    assert.same({ 5.0, 5.0, 5.0, 5.0 }, v:tolist())
  end)

  it("an assignment runs once, whatever graphs still hold it", function()
    local c = Tensor({ 1.0, 2.0 })
    c:assign(c + 1)
    local later = c * 10
    assert.same({ 2.0, 3.0 }, c:tolist())
    assert.same({ 20.0, 30.0 }, later:tolist())
    assert.same({ 2.0, 3.0 }, c:tolist())
    for _ = 1, 1100 do c:assign(c + 1):realize() end -- past the table's pruning point
    assert.same({ 1102.0, 1103.0 }, c:tolist())
  end)

  it("a pending assignment runs with the next realize on its device", function()
    local s = Tensor({ 1.0 })
    s:assign(s + 1)
    assert.equal("ASSIGN", s.uop.op)
    local report = tcl.profile(function() (Tensor({ 5.0 }) * 2):realize() end)
    assert.equal(2, #report.kernels)
    assert.are_not.equal("ASSIGN", s.uop.op)
    assert.same({ 2.0 }, s:tolist())
  end)

  it("a jitted step updates its buffers in place", function()
    local p = Tensor({ 0.0, 0.0 })
    local step = tcl.jit(function(g) p:assign(p + g):realize(); return p * 1 end)
    for _ = 1, 4 do step(Tensor({ 1.0, 2.0 })) end
    assert.same({ 4.0, 8.0 }, p:tolist())
    assert.equal(2, step:stats().replayed)
  end)

  it("a chain of assignments runs in order; a cycle is an error", function()
    local a, b = Tensor({ 1.0 }), Tensor({ 2.0 })
    a:assign(b * 1)
    b:assign(a * 3) -- reads a's new value
    tcl.realize(b, a)
    assert.same({ 2.0 }, a:tolist())
    assert.same({ 6.0 }, b:tolist())
    local old_a, old_b = a * 1, b * 1
    a:assign(old_b)
    b:assign(old_a)
    local ok, err = pcall(tcl.realize, a, b)
    assert.is_false(ok)
    assert.truthy(err:find("realize: assignments read each other's old values in a cycle", 1, true))
  end)

  it("errors: values of the wrong shape or kind", function()
    assert.has_error(function() Tensor({ 1.0, 2.0 }):assign(Tensor({ 1.0, 2.0, 3.0 })) end,
      "assign: a value of shape (3,) cannot be assigned to a tensor of shape (2,)")
    assert.has_error(function() Tensor({ 1.0 }):assign("x") end,
      "assign: the value must be a tensor or a number, got string")
  end)
end)
