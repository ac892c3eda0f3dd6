-- spec/nn/grad_clipping_spec.lua — nn.clip_grad_norm / nn.clip_grad_value against torch.nn.utils (norm
-- orders 1, 2, 3.5 and inf, max_norm 0, no grads, non-finite norms), and errors
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

  it("match torch for norm orders 1 and 3.5, \"inf\", max_norm 0, and no grads at all", function()
    if not torch_ref.python() then pending("torch is not available") return end
    local ref = torch_ref.run({
      "def ps():\n  a = torch.tensor([1., 2, 3]); b = torch.ones(2, 2); c = torch.tensor([5.])\n" ..
      "  a.grad = torch.tensor([3., -4, 1]); b.grad = torch.tensor([[0.5, -2], [6, 0.1]])\n  return [a, b, c]",
      "p = ps(); out['n1'] = torch.nn.utils.clip_grad_norm_(p, 2.5, 1).item(); out['g1'] = [p[0].grad, p[1].grad]",
      "p = ps(); out['n35'] = torch.nn.utils.clip_grad_norm_(p, 2.5, 3.5).item(); out['g35'] = [p[0].grad, p[1].grad]",
      "p = ps(); out['ninfs'] = torch.nn.utils.clip_grad_norm_(p, 2.5, 'inf').item()",
      "out['ginfs'] = [p[0].grad, p[1].grad]",
      "p = ps(); out['n0'] = torch.nn.utils.clip_grad_norm_(p, 0.).item(); out['g0'] = [p[0].grad, p[1].grad]",
      "out['none'] = torch.nn.utils.clip_grad_norm_([torch.zeros(2)], 1.).item()",
    })
    for _, c in ipairs({ { "1", 2.5, 1 }, { "35", 2.5, 3.5 }, { "infs", 2.5, "inf" }, { "0", 0 } }) do
      local p = params()
      local total = nn.clip_grad_norm(p, c[2], c[3])
      close({ total:item() }, { ref["n" .. c[1]] }, "norm " .. c[1])
      close(p[1].grad:tolist(), ref["g" .. c[1]][1], "grad a " .. c[1])
      close(p[2].grad:flatten():tolist(), Tensor(ref["g" .. c[1]][2]):flatten():tolist(), "grad b " .. c[1])
    end
    assert.are.equal(ref.none, nn.clip_grad_norm({ Tensor({ 0, 0 }) }, 1):item())
  end)

  it("a non-finite total norm makes nan grads, or an error with error_if_nonfinite", function()
    local function inf_params()
      local a = Tensor({ 1, 2 })
      a.grad = Tensor({ math.huge, 1 })
      return { a }
    end
    local p = inf_params()
    assert.are.equal(math.huge, nn.clip_grad_norm(p, 1):item())
    local g = p[1].grad:tolist()
    assert.is_true(g[1] ~= g[1] and g[2] == 0, string.format("grads %s, %s", tostring(g[1]), tostring(g[2])))
    local ok, err = pcall(nn.clip_grad_norm, inf_params(), 1, 2, true)
    assert.is_false(ok)
    assert.matches("nn.clip_grad_norm: the total norm of order 2 of the gradients is inf (error_if_nonfinite = true)",
      tostring(err), 1, true)
    ok, err = pcall(nn.clip_grad_norm, params(), 1, 2, "yes")
    assert.is_false(ok)
    assert.matches("nn.clip_grad_norm: error_if_nonfinite must be a boolean", tostring(err), 1, true)
    assert.are.equal(6, nn.clip_grad_norm(params(), 1, math.huge, true):item()) -- finite: no error
  end)

  it("errors name the function and the argument", function()
    local ok, err = pcall(nn.clip_grad_norm, params(), -1)
    assert.is_false(ok)
    assert.matches("nn.clip_grad_norm: max_norm must be", tostring(err))
    ok, err = pcall(nn.clip_grad_norm, params(), 1, 0)
    assert.is_false(ok)
    assert.matches("nn.clip_grad_norm: norm_type must be a number > 0", tostring(err))
    ok, err = pcall(nn.clip_grad_norm, params(), 0 / 0)
    assert.is_false(ok)
    assert.matches("nn.clip_grad_norm: max_norm must be a number >= 0, got", tostring(err))
    ok, err = pcall(nn.clip_grad_value, { 1 }, 1)
    assert.is_false(ok)
    assert.matches("nn.clip_grad_value: params%[1%]", tostring(err))
  end)
end)
