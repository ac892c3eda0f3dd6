-- spec/api/einsum_spec.lua — Tensor.einsum against torch.einsum (explicit and implicit outputs,
-- ellipsis, repeated labels, several operands, gradients), the kernels of a matmul-shaped
-- einsum against matmul's, and its errors.
local tcl = require "tcl"
local torch_ref = require "spec.support.torch_ref"
local helper = require "spec.support.helper"
local Tensor = tcl.Tensor
local L = torch_ref.literal


describe("einsum", function()
  it("matches torch.einsum", function()
    Tensor.manual_seed(9)
    local a, b = Tensor.randn(2, 3):realize(), Tensor.randn(3, 4):realize()
    local c = Tensor.randn(5, 2, 3):realize()
    local s = Tensor.randn(3, 3):realize()
    local v = Tensor.randn(4):realize()
    local g = a:clone():requires_grad_(true)
    Tensor.einsum("ij,jk->ik", g, b):sum():backward()
    local cases = {
      { "ij,jk->ik", { a, b } }, { "ij,jk", { a, b } }, { "bij,jk->bik", { c, b } }, { "...ij,jk->...ik", { c, b } },
      { "ii->i", { s } }, { "ii", { s } }, { "ij->ji", { a } }, { "i,j->ij", { v, v } }, { "ij,jk,k->i", { a, b, v } },
      { "bij->", { c } }, { "ij,ij->i", { a, a } },
    }
    local lines, ours = { "import torch" }, {}
    for i, case in ipairs(cases) do
      local args = {}
      for k, t in ipairs(case[2]) do args[k] = L(t) end
      lines[#lines + 1] = string.format("out['%d'] = torch.einsum(%q, %s)", i, case[1], table.concat(args, ", "))
      ours[tostring(i)] = Tensor.einsum(case[1], table.unpack(case[2]))
    end
    lines[#lines + 1] = "g = " .. L(a) .. ".requires_grad_(True)"
    lines[#lines + 1] = "with torch.enable_grad(): torch.einsum('ij,jk->ik', g, " .. L(b) .. ").sum().backward()"
    lines[#lines + 1] = "out['grad'] = g.grad"
    ours.grad = g.grad
    local ref = torch_ref.run(lines)
    torch_ref.assert_close(ours, ref, 1e-5)
  end)

  it("schedules a matmul-shaped einsum into as many kernels as matmul", function()
    local schedule = require "tcl.schedule"
    local a, b = Tensor.rand(8, 16):realize(), Tensor.rand(16, 4):realize()
    assert.are.equal(#schedule.create({ a:matmul(b).uop }).kernels,
      #schedule.create({ Tensor.einsum("ij,jk->ik", a, b).uop }).kernels)
  end)

  it("names the problem in its errors", function()
    assert.matches("einsum: equation \"ij,jk\" has 2 terms for 1 operands",
      helper.message_of(function() Tensor.einsum("ij,jk", Tensor.ones(2, 2)) end))
    assert.matches("einsum: operand 2 is not a Tensor",
      helper.message_of(function() Tensor.einsum("i,i", Tensor.ones(2), 3) end))
    assert.matches("einsum: equation must be a string", helper.message_of(function() Tensor.einsum(1) end))
  end)
end)
