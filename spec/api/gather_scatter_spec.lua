-- spec/api/gather_scatter_spec.lua — gather, index_select, take_along_dim, scatter, scatter_add and
-- scatter_reduce against PyTorch (1-based indices here, 0-based there), their gradients, and errors.
local tcl = require "tcl"
local torch_ref = require "spec.support.torch_ref"
local helper = require "spec.support.helper"
local Tensor = tcl.Tensor
local L = torch_ref.literal


describe("gather and scatter", function()
  it("match torch's values and gradients", function()
    Tensor.manual_seed(7)
    local x = Tensor.randn(3, 5):realize()
    local idx = Tensor({ { 5, 1, 2 }, { 3, 3, 4 }, { 1, 5, 5 } }, { dtype = "int64" })
    local src = Tensor.randn(3, 3):realize()
    local sel = Tensor({ 3, 1, 3, 2 }, { dtype = "int64" })
    local xg = x:clone():requires_grad_(true)
    local g = xg:gather(2, idx)
    ;(g * Tensor({ { 1, 2, 3 }, { 4, 5, 6 }, { 7, 8, 9 } })):sum():backward()
    local ours = {
      gather = x:gather(2, idx):tolist(),
      gather_dim1 = x:gather(1, Tensor({ { 3, 1, 2, 2, 1 } }, { dtype = "int64" })):tolist(),
      gather_grad = xg.grad:tolist(),
      index_select = x:index_select(2, sel):tolist(),
      index_select0 = x:index_select(1, Tensor({ 2, 2 }, { dtype = "int64" })):tolist(),
      take = x:take_along_dim(idx, 2):tolist(),
      scatter = Tensor.zeros(3, 5):scatter(2, Tensor({ { 5, 1, 2 }, { 3, 2, 4 }, { 1, 4, 5 } }, { dtype = "int64" }),
        src):tolist(),
      scatter_value = Tensor.zeros(3, 5):scatter(2, idx:narrow(2, 1, 1), 2.5):tolist(),
      scatter_add = x:scatter_add(2, idx, src):tolist(),
      amax = x:scatter_reduce(2, idx, src, "amax"):tolist(),
      amin_excl = x:scatter_reduce(2, idx, src, "amin", false):tolist(),
      prod = x:scatter_reduce(2, idx, src, "prod"):tolist(),
      mean = x:scatter_reduce(2, idx, src, "mean"):tolist(),
    }
    local ref = torch_ref.run({
      "x = " .. L(x), "idx = " .. L(idx) .. " - 1", "src = " .. L(src), "sel = " .. L(sel) .. " - 1",
      "xg = x.clone().requires_grad_(True)",
      "with torch.enable_grad():",
      "    (torch.gather(xg, 1, idx) * torch.tensor([[1.,2,3],[4,5,6],[7,8,9]])).sum().backward()",
      "out['gather'] = torch.gather(x, 1, idx)",
      "out['gather_dim1'] = torch.gather(x, 0, torch.tensor([[2,0,1,1,0]]))",
      "out['gather_grad'] = xg.grad",
      "out['index_select'] = torch.index_select(x, 1, sel)",
      "out['index_select0'] = torch.index_select(x, 0, torch.tensor([1, 1]))",
      "out['take'] = torch.take_along_dim(x, idx, 1)",
      "out['scatter'] = torch.zeros(3, 5).scatter(1, torch.tensor([[4,0,1],[2,1,3],[0,3,4]]), src)",
      "out['scatter_value'] = torch.zeros(3, 5).scatter(1, idx[:, :1], 2.5)",
      "out['scatter_add'] = x.scatter_add(1, idx, src)",
      "out['amax'] = x.scatter_reduce(1, idx, src, 'amax')",
      "out['amin_excl'] = x.scatter_reduce(1, idx, src, 'amin', include_self=False)",
      "out['prod'] = x.scatter_reduce(1, idx, src, 'prod')",
      "out['mean'] = x.scatter_reduce(1, idx, src, 'mean')",
    })
    torch_ref.assert_close(ours, ref, 1e-5)
  end)

  it("report 0-based or out-of-range indices at the next read, and bad arguments at once", function()
    local x = Tensor({ { 1, 2 }, { 3, 4 } })
    local bad = x:gather(2, Tensor({ { 0, 1 }, { 1, 2 } }))
    assert.matches("gather: gather indices are 1%-based: expected 1..2", helper.message_of(function() bad:tolist() end))
    assert.matches("gather: index must be an integer tensor, got float32",
      helper.message_of(function() x:gather(2, Tensor({ { 1.0 } })) end))
    assert.matches("gather: input has 2 dims and index 1",
      helper.message_of(function() x:gather(2, Tensor({ 1 })) end))
    assert.matches("index_select: index must be 1%-d",
      helper.message_of(function() x:index_select(1, Tensor({ { 1 } })) end))
    assert.matches("scatter_reduce: reduce must be one of sum, prod, mean, amax, amin, got max",
      helper.message_of(function() x:scatter_reduce(1, Tensor({ { 1, 1 } }), Tensor({ { 1, 1 } }), "max") end))
    assert.matches("gather: dim", helper.message_of(function() x:gather(3, Tensor({ { 1 } })) end))
  end)

  it("fuse: a gather and a scatter_add of realized inputs are one kernel each", function()
    local schedule = require "tcl.schedule"
    local x = Tensor.rand(4, 6):realize()
    local idx = Tensor({ { 1 }, { 6 }, { 2 }, { 3 } }):realize()
    assert.are.equal(1, #schedule.create({ x:gather(2, idx).uop }).kernels)
    assert.are.equal(1, #schedule.create({ x:scatter_add(2, idx, Tensor.ones(4, 1)).uop }).kernels)
  end)
end)
