-- spec/nn/instancenorm_spec.lua — nn.InstanceNorm1d/2d/3d against torch.nn.InstanceNorm*d (values, and
-- the gradients of the input, weight and bias), and their errors
local tcl = require "tcl"
local Tensor, nn = tcl.Tensor, tcl.nn
local torch_ref = require "spec.support.torch_ref"

local function values(n, scale)
  local v = {}
  for i = 1, n do v[i] = math.sin(i * 1.7) * scale + (i % 5) end
  return v
end

describe("tcl.nn.InstanceNorm1d/2d/3d", function()
  it("match torch, plain and affine", function()
    if not torch_ref.python() then pending("torch is not available") return end
    local shapes = { { 2, 3, 5 }, { 2, 3, 2, 3 }, { 1, 2, 2, 2, 3 } }
    local inputs, lines = {}, {}
    for k, shape in ipairs(shapes) do
      local n = 1
      for _, s in ipairs(shape) do n = n * s end
      inputs[k] = Tensor(values(n, 2)):reshape(shape)
      lines[#lines + 1] = string.format("x%d = %s", k, torch_ref.literal(inputs[k]))
      lines[#lines + 1] = string.format("out['plain%d'] = torch.nn.InstanceNorm%dd(%d)(x%d)", k, k, shape[2], k)
      lines[#lines + 1] = string.format(
        "m = torch.nn.InstanceNorm%dd(%d, eps=0.01, affine=True)\n" ..
        "with torch.no_grad():\n  m.weight.copy_(torch.arange(1., %d.) / 2)\n" ..
        "  m.bias.copy_(torch.arange(1., %d.) - 1)\n" ..
        "out['affine%d'] = m(x%d)", k, shape[2], shape[2] + 1, shape[2] + 1, k, k)
    end
    local ref = torch_ref.run(lines)
    local classes = { nn.InstanceNorm1d, nn.InstanceNorm2d, nn.InstanceNorm3d }
    for k, shape in ipairs(shapes) do
      local plain = classes[k](shape[2])
      local affine = classes[k](shape[2], { eps = 0.01, affine = true })
      local w, b = {}, {}
      for c = 1, shape[2] do w[c], b[c] = c / 2, c - 1 end
      affine.weight:assign(Tensor(w))
      affine.bias:assign(Tensor(b))
      for name, layer in pairs({ plain = plain, affine = affine }) do
        local got = layer(inputs[k]):flatten():tolist()
        local want = Tensor(ref[name .. k]):flatten():tolist()
        assert.are.equal(#want, #got)
        for i = 1, #want do
          assert.is_true(math.abs(got[i] - want[i]) < 1e-4,
            string.format("%s%d[%d]: %g vs %g", name, k, i, got[i], want[i]))
        end
      end
    end
  end)

  it("give torch's gradients for the input, the weight and the bias", function()
    if not torch_ref.python() then pending("torch is not available") return end
    local shapes = { { 2, 3, 5 }, { 2, 3, 2, 3 }, { 1, 2, 2, 2, 3 } }
    local inputs, seeds, lines = {}, {}, { "torch.set_grad_enabled(True)" }
    for k, shape in ipairs(shapes) do
      local n = 1
      for _, s in ipairs(shape) do n = n * s end
      inputs[k] = values(n, 2)
      seeds[k] = values(n + 3, 1.5) -- the upstream gradient d loss / d output
      table.remove(seeds[k], 1)
      table.remove(seeds[k], 1)
      table.remove(seeds[k], 1)
      local dims = table.concat(shape, ", ")
      lines[#lines + 1] = string.format("x = torch.tensor(%s).reshape(%s).requires_grad_()",
        torch_ref.literal(inputs[k]), dims)
      lines[#lines + 1] = string.format("up = torch.tensor(%s).reshape(%s)", torch_ref.literal(seeds[k]), dims)
      for _, affine in ipairs({ "False", "True" }) do
        lines[#lines + 1] = string.format("m = torch.nn.InstanceNorm%dd(%d, eps=0.01, affine=%s)", k, shape[2], affine)
        if affine == "True" then
          lines[#lines + 1] = string.format("with torch.no_grad():\n  m.weight.copy_(torch.arange(1., %d.) / 2)\n" ..
            "  m.bias.copy_(torch.arange(1., %d.) - 1)", shape[2] + 1, shape[2] + 1)
        end
        lines[#lines + 1] = "x.grad = None; (m(x) * up).sum().backward()"
        lines[#lines + 1] = string.format("out['x%d%s'] = x.grad.flatten()", k, affine)
        if affine == "True" then
          lines[#lines + 1] = string.format("out['w%d'] = m.weight.grad; out['b%d'] = m.bias.grad", k, k)
        end
      end
    end
    local ref = torch_ref.run(lines)
    local classes = { nn.InstanceNorm1d, nn.InstanceNorm2d, nn.InstanceNorm3d }
    local function near(got, want, what)
      assert.are.equal(#want, #got, what)
      for i = 1, #want do
        assert.is_true(math.abs(got[i] - want[i]) < 1e-4 * math.max(1, math.abs(want[i])),
          string.format("%s[%d]: %g vs %g", what, i, got[i], want[i]))
      end
    end
    for k, shape in ipairs(shapes) do
      for _, affine in ipairs({ false, true }) do
        local layer = classes[k](shape[2], { eps = 0.01, affine = affine })
        if affine then
          local w, b = {}, {}
          for c = 1, shape[2] do w[c], b[c] = c / 2, c - 1 end
          layer.weight:assign(Tensor(w)):realize()
          layer.bias:assign(Tensor(b)):realize()
        end
        local x = Tensor(inputs[k]):reshape(shape):requires_grad_()
        local up = Tensor(seeds[k]):reshape(shape)
        local loss = (layer(x) * up):sum()
        loss:backward()
        local tag = affine and "True" or "False"
        near(x.grad:flatten():tolist(), ref["x" .. k .. tag], "dx " .. k .. tag)
        if affine then
          near(layer.weight.grad:tolist(), ref["w" .. k], "dweight " .. k)
          near(layer.bias.grad:tolist(), ref["b" .. k], "dbias " .. k)
        end
      end
    end
  end)

  it("errors name the layer, the rank and the channels", function()
    assert.has_error(function() nn.InstanceNorm2d(3)(Tensor.zeros({ 2, 3, 4 })) end)
    local ok, err = pcall(function() nn.InstanceNorm2d(3)(Tensor.zeros({ 2, 3, 4 })) end)
    assert.is_false(ok)
    assert.matches("^nn.InstanceNorm2d: expects a 4%-d input", tostring(err):gsub("^[^:]*:%d+: ", ""))
    ok, err = pcall(function() nn.InstanceNorm1d(4)(Tensor.zeros({ 2, 3, 4 })) end)
    assert.is_false(ok)
    assert.matches("nn.InstanceNorm1d", tostring(err))
    ok, err = pcall(function() nn.InstanceNorm1d(0) end)
    assert.is_false(ok)
    assert.matches("nn.InstanceNorm1d", tostring(err))
  end)
end)
