-- spec/api/math_ops_spec.lua — the math ops (erf ... atanh, log1p, expm1, log10) within their
-- Tensor.ULP_BOUNDS of PyTorch's float64 values rounded to float32 over a sweep, their
-- gradients, the exact ops (fmod, remainder, copysign, lerp, isfinite, isclose, bitwise), the
-- activations against torch.nn.functional, and their errors.
local tcl = require "tcl"
local torch_ref = require "spec.support.torch_ref"
local helper = require "spec.support.helper"
local Tensor = tcl.Tensor
local L = torch_ref.literal

-- float32 bits as an ordered integer: the ulp distance of two floats is the difference
local function ordered(v)
  local bits = string.unpack("<i4", string.pack("<f", v))
  return bits < 0 and -(bits & 0x7fffffff) or bits
end

local function ulps(a, b)
  if a ~= a and b ~= b then return 0 end
  if a ~= a or b ~= b then return math.huge end
  if a == b then return 0 end
  if math.abs(b) == math.huge or math.abs(a) == math.huge then return math.huge end
  return math.abs(ordered(a) - ordered(b))
end

local FUNCTIONS = { "erf", "erfc", "asin", "acos", "atan", "sinh", "cosh", "asinh", "acosh", "atanh", "log1p",
  "expm1", "log10" }

local function sweep()
  local values = { 0.0, -0.0, 1.0, -1.0, 0.5, -0.5, 2.0, 1e-30, -1e-30, 1e-7, 1e30, -1e30, math.huge, -math.huge,
    0 / 0 }
  for i = -400, 400 do values[#values + 1] = i / 100 end
  for e = -38, 38, 2 do values[#values + 1] = 1.7 * 10.0 ^ e values[#values + 1] = -1.3 * 10.0 ^ e end
  for i = 1, 200 do values[#values + 1] = 1 + i * 1e-5 values[#values + 1] = 1 - i * 1e-5 end
  for i = 1, 100 do values[#values + 1] = 85 + i * 0.05 values[#values + 1] = 8 + i * 0.05 end
  return values
end

describe("math ops", function()
  it("are within Tensor.ULP_BOUNDS of torch's float64 values over a sweep", function()
    local x = Tensor(sweep()):realize()
    local lines = { "x = " .. L(x) .. ".double()" }
    for _, f in ipairs(FUNCTIONS) do
      local name = f == "erfc" and "torch.special.erfc" or "torch." .. f
      lines[#lines + 1] = string.format("out[%q] = %s(x).float()", f, name)
    end
    local ref = torch_ref.run(lines)
    for _, f in ipairs(FUNCTIONS) do
      local got = x[f](x):tolist()
      local worst, at = 0, nil
      for i, want in ipairs(ref[f]) do
        local e = ulps(got[i], want)
        if e > worst then worst, at = e, i end
      end
      assert(worst <= Tensor.ULP_BOUNDS[f], string.format("%s: %s ulps at x = %s (got %s, torch %s), bound %d", f,
        worst, at and x:tolist()[at], at and got[at], at and ref[f][at], Tensor.ULP_BOUNDS[f]))
    end
  end)

  it("have torch's gradients", function()
    local x = Tensor({ -0.7, -0.2, 0.1, 0.45, 0.8 })
    local ours, lines = {}, { "x0 = " .. L(x) }
    for _, f in ipairs({ "erf", "erfc", "asin", "acos", "atan", "sinh", "cosh", "asinh", "atanh", "log1p", "expm1" }) do
      local xg = x:clone():requires_grad_(true)
      xg[f](xg):sum():backward()
      ours[f] = xg.grad:tolist()
      local name = f == "erfc" and "torch.special.erfc" or "torch." .. f
      lines[#lines + 1] = "x = x0.clone().requires_grad_(True)"
      lines[#lines + 1] = "with torch.enable_grad(): " .. name .. "(x).sum().backward()"
      lines[#lines + 1] = string.format("out[%q] = x.grad", f)
    end
    local ref = torch_ref.run(lines)
    for f, want in pairs(ref) do
      for i = 1, #want do
        assert(math.abs(ours[f][i] - want[i]) <= 1e-5 * math.max(1, math.abs(want[i])),
          string.format("%s'(%s): %s, torch %s", f, x:tolist()[i], ours[f][i], want[i]))
      end
    end
  end)

  it("compute fmod, remainder, copysign, lerp, atan2, isfinite, isclose and the bitwise ops as torch", function()
    local a = Tensor({ 5.5, -5.5, 3, -3, 0, -0.0, 7 })
    local b = Tensor({ 2, 2, -2, -2, 3, -1, 0.5 })
    local ia = Tensor({ 7, -7, 7, -7, 0, 1, -128 }, { dtype = "int32" })
    local ib = Tensor({ 3, 3, -3, -3, 5, 1, 7 }, { dtype = "int32" })
    local s = Tensor({ 0, 1, 3, 31, 2, 5, 1 }, { dtype = "int32" })
    local ours = {
      fmod = a:fmod(b):tolist(), remainder = a:remainder(b):tolist(), ifmod = ia:fmod(ib):tolist(),
      iremainder = ia:remainder(ib):tolist(), copysign = a:copysign(b):tolist(), lerp = a:lerp(b, 0.3):tolist(),
      lerp_hi = a:lerp(b, 0.8):tolist(), atan2 = a:atan2(b):tolist(),
      isfinite = Tensor({ 1, math.huge, -math.huge, 0 / 0 }):isfinite():tolist(),
      isclose = Tensor({ 1, 1.00001, 0 / 0, math.huge }):isclose(Tensor({ 1, 1, 0 / 0, math.huge })):tolist(),
      isclose_nan = Tensor({ 0 / 0 }):isclose(Tensor({ 0 / 0 }), 1e-5, 1e-8, true):tolist(),
      bnot = ia:bitwise_not():tolist(), lshift = ia:bitwise_left_shift(s):tolist(),
      rshift = ia:bitwise_right_shift(s):tolist(),
    }
    local ref = torch_ref.run({
      "a = " .. L(a), "b = " .. L(b), "ia = " .. L(ia), "ib = " .. L(ib), "s = " .. L(s),
      "out['fmod'] = torch.fmod(a, b)", "out['remainder'] = torch.remainder(a, b)",
      "out['ifmod'] = torch.fmod(ia, ib)", "out['iremainder'] = torch.remainder(ia, ib)",
      "out['copysign'] = torch.copysign(a, b)", "out['lerp'] = torch.lerp(a, b, 0.3)",
      "out['lerp_hi'] = torch.lerp(a, b, 0.8)", "out['atan2'] = torch.atan2(a, b)",
      "out['isfinite'] = torch.isfinite(torch.tensor([1, float('inf'), float('-inf'), float('nan')]))",
      "out['isclose'] = torch.isclose(torch.tensor([1, 1.00001, float('nan'), float('inf')]), " ..
        "torch.tensor([1., 1, float('nan'), float('inf')]))",
      "out['isclose_nan'] = torch.isclose(torch.tensor([float('nan')]), torch.tensor([float('nan')]), equal_nan=True)",
      "out['bnot'] = torch.bitwise_not(ia)", "out['lshift'] = torch.bitwise_left_shift(ia, s)",
      "out['rshift'] = torch.bitwise_right_shift(ia, s)",
    })
    for name, want in pairs(ref) do
      for i = 1, #want do
        local g, w = ours[name][i], want[i]
        local ok = g == w or (type(w) == "number" and math.abs(g - w) <= 1e-6 * math.max(1, math.abs(w)))
        assert(ok, string.format("%s[%d]: %s, torch %s", name, i, tostring(g), tostring(w)))
      end
    end
    assert.is_true(Tensor({ 1, 2 }):allclose(Tensor({ 1, 2.000001 })))
    assert.is_false(Tensor({ 1, 2 }):allclose(Tensor({ 1, 2.1 })))
  end)

  it("activations match torch.nn.functional", function()
    local x = Tensor({ -5, -3, -1.5, -0.2, 0, 0.3, 1, 3, 6.5 })
    local ours = {
      selu = x:selu():tolist(), celu = x:celu(0.7):tolist(), relu6 = x:relu6():tolist(),
      hardtanh = x:hardtanh(-2, 2):tolist(), hardsigmoid = x:hardsigmoid():tolist(),
      hardswish = x:hardswish():tolist(), mish = x:mish():tolist(), logsigmoid = x:logsigmoid():tolist(),
      softsign = x:softsign():tolist(), softmin = x:softmin(1):tolist(), prelu = x:prelu(0.1):tolist(),
    }
    local ref = torch_ref.run({
      "import torch.nn.functional as F", "x = " .. L(x),
      "out['selu'] = F.selu(x)", "out['celu'] = F.celu(x, 0.7)", "out['relu6'] = F.relu6(x)",
      "out['hardtanh'] = F.hardtanh(x, -2, 2)", "out['hardsigmoid'] = F.hardsigmoid(x)",
      "out['hardswish'] = F.hardswish(x)", "out['mish'] = F.mish(x)", "out['logsigmoid'] = F.logsigmoid(x)",
      "out['softsign'] = F.softsign(x)", "out['softmin'] = F.softmin(x, 0)",
      "out['prelu'] = F.prelu(x, torch.tensor([0.1]))",
    })
    for name, want in pairs(ref) do
      for i = 1, #want do
        assert(math.abs(ours[name][i] - want[i]) <= 1e-6 * math.max(1, math.abs(want[i])),
          string.format("%s(%s): %s, torch %s", name, x:tolist()[i], ours[name][i], want[i]))
      end
    end
  end)

  it("name the function in their errors", function()
    assert.matches("bitwise_not: needs an integer or bool tensor, got float32",
      helper.message_of(function() Tensor({ 1.5 }):bitwise_not() end))
    assert.matches("bitwise_left_shift: needs integer tensors, got float32",
      helper.message_of(function() Tensor({ 1.5 }):bitwise_left_shift(1) end))
    assert.matches("isclose: rtol and atol must be >= 0", helper.message_of(function()
      Tensor({ 1 }):isclose(Tensor({ 1 }), -1) end))
    assert.matches("hardtanh: min_val 2 is above max_val 1",
      helper.message_of(function() Tensor({ 1 }):hardtanh(2, 1) end))
    assert.matches("celu: alpha must not be 0", helper.message_of(function() Tensor({ 1 }):celu(0) end))
    assert.matches("lerp: needs float tensors, got int32", helper.message_of(function()
      Tensor({ 1 }):lerp(Tensor({ 2 }), 0.5) end))
    assert.matches("erf: expected a Tensor", helper.message_of(function() Tensor.erf(1) end))
  end)
end)
