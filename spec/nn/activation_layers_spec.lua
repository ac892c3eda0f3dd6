-- spec/nn/activation_layers_spec.lua — the layer objects nn.ReLU/GELU/SiLU/Sigmoid/Tanh/Identity/Softmax/
-- LogSoftmax/LeakyReLU/ELU/Flatten/Unflatten/MaxPool2d/AvgPool2d/AdaptiveAvgPool2d against torch.nn's,
-- alone and in a Sequential, and their argument errors
local tcl = require "tcl"
local Tensor, nn = tcl.Tensor, tcl.nn
local torch_ref = require "spec.support.torch_ref"

local function close(got, want, what)
  assert.are.equal(#want, #got, what)
  for i = 1, #want do
    assert.is_true(math.abs(got[i] - want[i]) < 1e-5, string.format("%s[%d]: %g vs %g", what, i, got[i], want[i]))
  end
end

describe("tcl.nn activation and Flatten layers", function()
  it("match torch.nn", function()
    if not torch_ref.python() then pending("torch is not available") return end
    local v = {}
    for i = 1, 24 do v[i] = math.sin(i * 1.3) * 3 end
    local x = Tensor(v):reshape({ 2, 3, 4 })
    local cases = {
      { nn.ReLU(), "torch.nn.ReLU()" },
      { nn.GELU(), "torch.nn.GELU(approximate='tanh')" }, { nn.SiLU(), "torch.nn.SiLU()" },
      { nn.Sigmoid(), "torch.nn.Sigmoid()" }, { nn.Tanh(), "torch.nn.Tanh()" },
      { nn.Identity(), "torch.nn.Identity()" }, { nn.Softmax(2), "torch.nn.Softmax(1)" },
      { nn.LogSoftmax(-1), "torch.nn.LogSoftmax(-1)" }, { nn.LeakyReLU(), "torch.nn.LeakyReLU()" },
      { nn.LeakyReLU(0.2), "torch.nn.LeakyReLU(0.2)" }, { nn.ELU(), "torch.nn.ELU()" },
      { nn.ELU(0.5), "torch.nn.ELU(0.5)" }, { nn.Flatten(), "torch.nn.Flatten()" },
      { nn.Flatten(1, 2), "torch.nn.Flatten(0, 1)" },
      { nn.Unflatten(3, { 2, 2 }), "torch.nn.Unflatten(2, (2, 2))" },
      { nn.Sequential { nn.Unflatten(3, { 2, 2 }), nn.MaxPool2d({ 2, 1 }) },
        "torch.nn.Sequential(torch.nn.Unflatten(2, (2, 2)), torch.nn.MaxPool2d((2, 1)))" },
      { nn.Sequential { nn.Unflatten(3, { 2, 2 }), nn.AvgPool2d({ 1, 2 }) },
        "torch.nn.Sequential(torch.nn.Unflatten(2, (2, 2)), torch.nn.AvgPool2d((1, 2)))" },
      { nn.Sequential { nn.Unflatten(3, { 2, 2 }), nn.AdaptiveAvgPool2d(1) },
        "torch.nn.Sequential(torch.nn.Unflatten(2, (2, 2)), torch.nn.AdaptiveAvgPool2d(1))" },
      { nn.Sequential { nn.Flatten(), nn.Tanh(), nn.Softmax(-1) },
        "torch.nn.Sequential(torch.nn.Flatten(), torch.nn.Tanh(), torch.nn.Softmax(-1))" },
    }
    local lines = { "x = " .. torch_ref.literal(x) }
    for k, c in ipairs(cases) do
      lines[#lines + 1] = string.format("out['c%d'] = %s(x)", k, c[2])
      lines[#lines + 1] = string.format("out['s%d'] = list(%s(x).shape)", k, c[2])
    end
    local ref = torch_ref.run(lines)
    for k, c in ipairs(cases) do
      local y = c[1](x)
      assert.are.same(ref["s" .. k], y:size(), c[2])
      close(y:flatten():tolist(), Tensor(ref["c" .. k]):flatten():tolist(), c[2])
    end
  end)

  it("name themselves in errors and in tostring", function()
    local ok, err = pcall(function() return nn.Softmax() end)
    assert.is_false(ok)
    assert.matches("nn.Softmax: needs a dim", tostring(err))
    ok, err = pcall(function() return nn.LogSoftmax(0) end)
    assert.is_false(ok)
    assert.matches("nn.LogSoftmax: dim must be a nonzero integer", tostring(err))
    ok, err = pcall(function() return nn.Flatten(0) end)
    assert.is_false(ok)
    assert.matches("nn.Flatten: start_dim", tostring(err))
    ok, err = pcall(function() return nn.ReLU()("x") end)
    assert.is_false(ok)
    assert.matches("nn.ReLU", tostring(err))
    assert.are.equal("Softmax(dim=-1)", tostring(nn.Softmax(-1)))
    assert.are.equal("LeakyReLU(negative_slope=0.2)", tostring(nn.LeakyReLU(0.2)))
  end)
end)
