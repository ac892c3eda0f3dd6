-- spec/api/graph_functions_spec.lua — exp, sigmoid, tanh, silu, softplus and elu are one node each
-- in the tensor graph (EXP, SIGMOID, TANH, SILU, SOFTPLUS, ELU: src/core/ops.h), differentiated
-- by one rule each of tcl.patterns.gradient and tcl.patterns.tangent (no composite marks), and
-- decomposed by tcl.patterns.transcendental only when a kernel is lowered for a renderer that
-- lacks them. Derivatives are checked against the exact formulas in Lua's double math.
local tcl = require "tcl"
local core = require "tcl.core"
local UOp = require "tcl.uop"
local gradients = require "tcl.api.gradients"
local gradient_rules = require "tcl.patterns.gradient"
local tangent_rules = require "tcl.patterns.tangent"
local transcendental = require "tcl.patterns.transcendental"
local Tensor = tcl.Tensor

local function sigmoid(x) return 1 / (1 + math.exp(-x)) end
local function tanh(x)
  if math.abs(x) > 20 then return x > 0 and 1 or -1 end
  local e = math.exp(2 * x)
  return (e - 1) / (e + 1)
end

-- name = { op, derivative (exact, double) }
local FUNCTIONS = {
  exp = { "EXP", math.exp },
  sigmoid = { "SIGMOID", function(x) return sigmoid(x) * (1 - sigmoid(x)) end },
  tanh = { "TANH", function(x) return 1 - tanh(x) ^ 2 end },
  silu = { "SILU", function(x) return sigmoid(x) * (1 + x * (1 - sigmoid(x))) end },
  softplus = { "SOFTPLUS", sigmoid },
  elu = { "ELU", function(x) return x > 0 and 1 or math.exp(x) end },
}
local NAMES = { "exp", "sigmoid", "tanh", "silu", "softplus", "elu" }
local POINTS = { -60.0, -3.0, -0.75, -0.0, 0.0, 0.5, 2.0, 40.0 }

-- |got - want| within 1e-6 of max(1, |want|) (float32 arithmetic on both sides of a formula)
local function assert_near(want, got, what)
  if math.abs(got - want) > 1e-6 * math.max(1, math.abs(want)) then
    error(string.format("%s: %.9g, expected %.9g", what, got, want), 2)
  end
end

local function ops_of(node)
  local seen = {}
  for _, u in ipairs(node:toposort()) do seen[u.op] = true end
  return seen
end

describe("exp and friends are graph ops", function()
  it("each is one node of the tensor graph, float16 computed in float32", function()
    for _, name in ipairs(NAMES) do
      local op = FUNCTIONS[name][1]
      local y = Tensor({ 0.5, -1.0 })[name](Tensor({ 0.5, -1.0 }))
      assert.are.equal(op, y.uop.op, name)
      assert.are.equal("float32", y.uop.dtype.name, name)
      local h = Tensor({ 0.5, -1.0 }):half()[name](Tensor({ 0.5, -1.0 }):half())
      assert.are.equal("CAST", h.uop.op, name .. " float16")
      assert.are.equal(op, h.uop.src[1].op, name .. " float16")
      assert.are.equal("float32", h.uop.src[1].dtype.name, name .. " float16")
    end
  end)

  it("carries no composite mark: its derivative is its op's rule", function()
    for _, name in ipairs(NAMES) do
      local x = Tensor({ 0.5, -1.0 }, { requires_grad = true })
      local y = x[name](x)
      assert.is_nil(gradients.composite_of(y.uop), name)
      assert.is_nil(gradient_rules.composites[name], name)
      assert.is_nil(tangent_rules.composites[name], name)
    end
  end)

  it("backward and jvp give the exact derivative, also at large |x| (no NaN from the unused branches)", function()
    for _, name in ipairs(NAMES) do
      local derivative = FUNCTIONS[name][2]
      local x = Tensor(POINTS, { requires_grad = true })
      x[name](x):sum():backward()
      local _, jvp = tcl.jvp(function(t) return t[name](t) end, { Tensor(POINTS) }, { Tensor.ones(#POINTS) })
      local grad, tangent = x.grad:tolist(), jvp:tolist()
      for i, v in ipairs(POINTS) do
        assert_near(derivative(v), grad[i], string.format("%s'(%g) by backward", name, v))
        assert_near(derivative(v), tangent[i], string.format("%s'(%g) by jvp", name, v))
      end
    end
  end)

  it("has second derivatives through its rule (tanh'' = -2 tanh (1 - tanh^2))", function()
    local d2 = tcl.grad(function(x) return tcl.grad(function(y) return y:tanh():sum() end)(x):sum() end)
    local got = d2(Tensor({ -1.5, 0.25, 2.0 })):tolist()
    for i, v in ipairs({ -1.5, 0.25, 2.0 }) do
      assert_near(-2 * tanh(v) * (1 - tanh(v) ^ 2), got[i], string.format("tanh''(%g)", v))
    end
  end)

  it("of a constant equals that of a tensor, bit for bit (it is not folded by another formula)", function()
    for _, v in ipairs({ -16.8675, -7.2487, -17.2481, 0.3 }) do
      for _, name in ipairs(NAMES) do
        local folded = Tensor.full({ 1 }, v)[name](Tensor.full({ 1 }, v)):item()
        local loaded = Tensor({ v })[name](Tensor({ v })):item()
        assert.are.equal(string.pack("<d", loaded), string.pack("<d", folded), string.format("%s(%g)", name, v))
      end
    end
  end)

  it("is decomposed for renderers that lack it, float32 and float64, and left alone for the others", function()
    for _, dtype in ipairs({ "float32", "float64" }) do
      for _, name in ipairs(NAMES) do
        local op = FUNCTIONS[name][1]
        local x = UOp.new("DEFINE_VAR", core.dtype(dtype), nil, "x")
        local node = UOp.new(op, core.dtype(dtype), { x })
        local lacking = transcendental.run(node, { renderer = { name = "test", lacks = { [op] = true, EXP2 = true,
          LOG2 = true } } })
        local seen = ops_of(lacking)
        assert.is_nil(seen[op], name .. " " .. dtype)
        assert.is_nil(dtype == "float32" and seen.EXP2 or nil, name .. " float32 EXP2")
        local having = transcendental.run(node, { renderer = { name = "test", lacks = { EXP2 = true } } })
        assert.are.equal(node, having, name .. " " .. dtype .. " left alone")
      end
    end
  end)
end)
