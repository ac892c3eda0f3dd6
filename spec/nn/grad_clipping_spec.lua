-- spec/nn/grad_clipping_spec.lua — nn.clip_grad_norm / nn.clip_grad_value against torch.nn.utils, and errors
local tcl = require "tcl"
local Tensor, nn = tcl.Tensor, tcl.nn
local torch_ref = require "spec.support.torch_ref"

local function close(got, want, what)
  assert.are.equal(#want, #got, what)
  for i = 1, #want do
    assert.is_true(math.abs(got[i] - want[i]) < 1e-5, string.format("%s[%d]: %g vs %g", what, i, got[i], want[i]))
  end
end

local function params()
  local a, b = Tensor({ 1, 2, 3 }), Tensor({ { 1, 1 }, { 1, 1 } })
  a.grad, b.grad = Tensor({ 3, -4, 1 }), Tensor({ { 0.5, -2 }, { 6, 0.1 } })
  return { a, b, Tensor({ 5 }) }
end

describe("tcl.nn.clip_grad_norm and clip_grad_value", function()
  it("match torch.nn.utils", function()
    if not torch_ref.python() then pending("torch is not available") return end
    local ref = torch_ref.run({
      "def ps():\n  a = torch.tensor([1., 2, 3]); b = torch.ones(2, 2); c = torch.tensor([5.])\n" ..
      "  a.grad = torch.tensor([3., -4, 1]); b.grad = torch.tensor([[0.5, -2], [6, 0.1]])\n  return [a, b, c]",
      "p = ps(); out['n2'] = torch.nn.utils.clip_grad_norm_(p, 2.5).item(); out['g2'] = [p[0].grad, p[1].grad]",
      "p = ps(); out['nbig'] = torch.nn.utils.clip_grad_norm_(p, 100.).item(); out['gbig'] = [p[0].grad, p[1].grad]",
      "p = ps(); out['ninf'] = torch.nn.utils.clip_grad_norm_(p, 1., float('inf')).item()",
      "out['ginf'] = [p[0].grad, p[1].grad]",
      "p = ps(); torch.nn.utils.clip_grad_value_(p, 1.5); out['gv'] = [p[0].grad, p[1].grad]",
    })
    for _, c in ipairs({ { "2", 2.5 }, { "big", 100 }, { "inf", 1, math.huge } }) do
      local p = params()
      local total = nn.clip_grad_norm(p, c[2], c[3])
      close({ total:item() }, { ref["n" .. c[1]] }, "norm " .. c[1])
      close(p[1].grad:tolist(), ref["g" .. c[1]][1], "grad a " .. c[1])
      close(p[2].grad:flatten():tolist(), Tensor(ref["g" .. c[1]][2]):flatten():tolist(), "grad b " .. c[1])
      assert.is_nil(p[3].grad)
    end
    local p = params()
    nn.clip_grad_value(p, 1.5)
    close(p[1].grad:tolist(), ref.gv[1], "value a")
    close(p[2].grad:flatten():tolist(), Tensor(ref.gv[2]):flatten():tolist(), "value b")
  end)

  it("errors name the function and the argument", function()
    local ok, err = pcall(nn.clip_grad_norm, params(), -1)
    assert.is_false(ok)
    assert.matches("nn.clip_grad_norm: max_norm must be", tostring(err))
    ok, err = pcall(nn.clip_grad_norm, params(), 1, 3)
    assert.is_false(ok)
    assert.matches("nn.clip_grad_norm: norm_type must be 2", tostring(err))
    ok, err = pcall(nn.clip_grad_value, { 1 }, 1)
    assert.is_false(ok)
    assert.matches("nn.clip_grad_value: params%[1%]", tostring(err))
  end)
end)
