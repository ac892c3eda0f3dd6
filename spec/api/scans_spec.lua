-- spec/api/scans_spec.lua — topk, cumprod, cummax, cummin, logcumsumexp and norm against PyTorch
-- (values, 1-based indices, gradients) and their errors.
local tcl = require "tcl"
local torch_ref = require "spec.support.torch_ref"
local helper = require "spec.support.helper"
local Tensor = tcl.Tensor
local L = torch_ref.literal


describe("scans", function()
  it("match torch", function()
    Tensor.manual_seed(5)
    local x = Tensor({ { 3, 1, 4, 1, 5 }, { 9, 2, 6, 5, 3 }, { 5, 8, 9, 7, 9 } }):float()
    local r = Tensor.randn(3, 5):realize()
    local tv, ti = x:topk(3, 2)
    local sv, si = x:topk(2, 1, false)
    local mv, mi = x:cummax(2)
    local nv, ni = r:cummin(1)
    local g = r:clone():requires_grad_(true)
    g:cumprod(2):sum():backward()
    local lg = r:clone():requires_grad_(true)
    lg:logcumsumexp(2):sum():backward()
    local ours = {
      tv = tv, ti = ti - 1, sv = sv, si = si - 1, mv = mv, mi = mi - 1, nv = nv, ni = ni - 1,
      cumprod = r:cumprod(2), cumprod_grad = g.grad, lcse = r:logcumsumexp(1), lcse_grad = lg.grad,
      norm = r:norm(), norm1 = r:norm(1, 2), norm3 = r:norm(3, 1, true), norminf = r:norm(math.huge, 2),
      norm0 = x:norm(0), fro = r:norm("fro", { 1, 2 }),
    }
    local ref = torch_ref.run({
      "x = " .. L(x), "r = " .. L(r),
      "tv, ti = torch.topk(x, 3, 1)", "out['tv'], out['ti'] = tv, ti",
      "sv, si = torch.topk(x, 2, 0, largest=False)", "out['sv'], out['si'] = sv, si",
      "mv, mi = torch.cummax(x, 1)", "out['mv'], out['mi'] = mv, mi",
      "nv, ni = torch.cummin(r, 0)", "out['nv'], out['ni'] = nv, ni",
      "out['cumprod'] = torch.cumprod(r, 1)",
      "g = r.clone().requires_grad_(True)",
      "with torch.enable_grad(): torch.cumprod(g, 1).sum().backward()", "out['cumprod_grad'] = g.grad",
      "out['lcse'] = torch.logcumsumexp(r, 0)",
      "lg = r.clone().requires_grad_(True)",
      "with torch.enable_grad(): torch.logcumsumexp(lg, 1).sum().backward()", "out['lcse_grad'] = lg.grad",
      "out['norm'] = torch.linalg.vector_norm(r)", "out['norm1'] = torch.linalg.vector_norm(r, 1, 1)",
      "out['norm3'] = torch.linalg.vector_norm(r, 3, 0, keepdim=True)",
      "out['norminf'] = torch.linalg.vector_norm(r, float('inf'), 1)",
      "out['norm0'] = torch.linalg.vector_norm(x, 0)", "out['fro'] = torch.norm(r, 'fro')",
    })
    torch_ref.assert_close(ours, ref, 1e-5)
  end)

  it("name the problem in their errors", function()
    local x = Tensor({ 1.0, 2, 3 })
    assert.matches("topk: k = 4 is outside 0..3", helper.message_of(function() x:topk(4) end))
    assert.matches("topk: largest must be a boolean", helper.message_of(function() x:topk(1, 1, 1) end))
    assert.matches("norm: the nuclear norm needs singular values", helper.message_of(function() x:norm("nuc") end))
    assert.matches("norm: needs a float tensor, got int32", helper.message_of(function() Tensor({ 1 }):norm() end))
    assert.matches("logcumsumexp: needs a float tensor", helper.message_of(function() Tensor({ 1 }):logcumsumexp() end))
    assert.matches("cummax: is not defined for bool tensors",
      helper.message_of(function() Tensor({ true }):cummax() end))
  end)
end)
