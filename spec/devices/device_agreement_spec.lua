-- spec/devices/device_agreement_spec.lua — CPU and EMU compute the elementwise ops and their gradients
-- bit for bit, at the special points where they differ first (0, -0, +-1, tiny, huge, +-inf,
-- NaN, denormals, the ends of exp's range), as docs/design/cpu.md states ("Rendering"): float32
-- transcendentals are the same polynomials on both (issue 33: EMU used its scalar ALU's, 1 ulp
-- away at cos(1), so sin's gradient at 1 differed). The one exception is documented there: a
-- NaN result is NaN on both, its sign and payload are not specified (LLVM may flip them).
local tcl = require "tcl"
local Tensor = tcl.Tensor

local POINTS = { 0.0, -0.0, 1.0, -1.0, 0.5, -0.5, 2.0, 3.0, 1e-30, -1e-30, 1e30, -1e30, 1e-45, -1e-45, 1e-40,
  88.5, -87.5, 100.0, -100.0, 1e4, math.pi, -math.pi / 2, math.huge, -math.huge, 0 / 0 }

local UNARY = { "neg", "abs", "sign", "sqrt", "rsqrt", "exp", "exp2", "log", "log2", "sin", "cos", "tan",
  "reciprocal", "square", "relu", "sigmoid", "tanh", "gelu", "silu", "softplus", "leaky_relu", "elu" }

local function bits(v) return string.unpack("<I4", string.pack("<f", v)) end

-- "" when a and b (lists of float32 values) agree bit for bit, NaN with NaN; else the first
-- difference.
local function difference(a, b, what)
  for i = 1, #a do
    local x, y = a[i], b[i]
    local both_nan = x ~= x and y ~= y
    if not both_nan and bits(x) ~= bits(y) then
      return string.format("%s at %.9g: CPU %.9g (0x%08x), EMU %.9g (0x%08x)", what, POINTS[i], x, bits(x), y,
        bits(y))
    end
  end
  return ""
end

-- The values f(x) and the gradient of sum(f(x)) on device, x = POINTS (float32).
local function value_and_grad(f, device)
  local x = Tensor(POINTS, { dtype = "float32", device = device, requires_grad = true })
  local y = f(x)
  y:sum():backward()
  return y:tolist(), x.grad:tolist()
end

describe("CPU and EMU, elementwise at special points", function()
  for _, name in ipairs(UNARY) do
    it(name .. ": values and gradients bit for bit", function()
      local f = function(x) return x[name](x) end
      local cpu_y, cpu_g = value_and_grad(f, "CPU")
      local emu_y, emu_g = value_and_grad(f, "EMU")
      assert.are.equal("", difference(cpu_y, emu_y, name))
      assert.are.equal("", difference(cpu_g, emu_g, name .. "'"))
    end)
  end

  it("binary ops: mul, div, pow, maximum, against 0, inf and NaN", function()
    for _, other in ipairs({ 0.0, -0.0, math.huge, 2.0, -3.0, 0 / 0 }) do
      for _, name in ipairs({ "mul", "div", "pow", "maximum", "minimum" }) do
        local f = function(x) return x[name](x, other) end
        local cpu_y, cpu_g = value_and_grad(f, "CPU")
        local emu_y, emu_g = value_and_grad(f, "EMU")
        local what = string.format("%s(x, %g)", name, other)
        assert.are.equal("", difference(cpu_y, emu_y, what))
        assert.are.equal("", difference(cpu_g, emu_g, what .. "'"))
      end
    end
  end)
end)
