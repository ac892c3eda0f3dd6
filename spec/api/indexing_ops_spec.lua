-- spec/api/indexing_ops_spec.lua — nonzero, masked_select, t[index] / t[mask] and assignment
-- through them, diag/diagonal, roll, repeat_interleave, meshgrid and unfold against PyTorch
-- (1-based indices here), gradients through the views, and errors.
local tcl = require "tcl"
local torch_ref = require "spec.support.torch_ref"
local helper = require "spec.support.helper"
local Tensor = tcl.Tensor
local L = torch_ref.literal

describe("indexing ops", function()
  it("match torch", function()
    Tensor.manual_seed(3)
    local x = Tensor.randn(3, 4):realize()
    local v = Tensor({ 1.0, 2, 3 })
    local put = x:clone()
    put[Tensor({ 3, 1 })] = 7
    local masked = x:clone()
    masked[x:gt(0.5)] = -1
    local xg = x:clone():requires_grad_(true)
    ;(xg:diagonal(1) * Tensor({ 1, 2, 3 })):sum():backward()
    local a, b = Tensor.meshgrid(Tensor({ 1, 2 }), Tensor({ 3, 4, 5 }), "xy")
    local u = Tensor({ { 3, 1, 3 }, { 2, 1, 7 } })
    local uv, ui, uc = u:unique({ return_inverse = true, return_counts = true })
    local ours = {
      nonzero = x:gt(0):nonzero() - 1, masked_select = x:masked_select(x:gt(0)),
      rows = x[Tensor({ { 3, 1 }, { 2, 2 } })], by_mask = x[x:lt(0)], put = put, masked = masked,
      diag0 = x:diagonal(), diag1 = x:diagonal(1), diagm1 = x:diagonal(-1), diag_grad = xg.grad,
      diag_mat = v:diag(), diag_mat2 = v:diag(-2), roll = x:roll(1, 2), roll2 = x:roll({ -1, 2 }, { 1, 2 }),
      roll_flat = x:roll(5), rep = v:repeat_interleave(2), rep_t = x:repeat_interleave(Tensor({ 2, 0, 1 }), 1),
      mesh_a = a, mesh_b = b, uv = uv, ui = ui - 1, uc = uc,
      uf = Tensor({ 2.5, -0.5, -1, 2.5 }):unique(), unfold = x:unfold(2, 2, 1), unfold2 = x:unfold(1, 2, 2),
    }
    local ref = torch_ref.run({
      "x = " .. L(x), "v = " .. L(v),
      "out['nonzero'] = torch.nonzero(x > 0)", "out['masked_select'] = torch.masked_select(x, x > 0)",
      "out['rows'] = x[torch.tensor([[2, 0], [1, 1]])]", "out['by_mask'] = x[x < 0]",
      "put = x.clone(); put[torch.tensor([2, 0])] = 7; out['put'] = put",
      "m = x.clone(); m[x > 0.5] = -1; out['masked'] = m",
      "out['diag0'] = x.diagonal()", "out['diag1'] = x.diagonal(1)", "out['diagm1'] = x.diagonal(-1)",
      "xg = x.clone().requires_grad_(True)",
      "with torch.enable_grad(): (xg.diagonal(1) * torch.tensor([1., 2, 3])).sum().backward()",
      "out['diag_grad'] = xg.grad",
      "out['diag_mat'] = torch.diag(v)", "out['diag_mat2'] = torch.diag(v, -2)",
      "out['roll'] = torch.roll(x, 1, 1)", "out['roll2'] = torch.roll(x, (-1, 2), (0, 1))",
      "out['roll_flat'] = torch.roll(x, 5)", "out['rep'] = v.repeat_interleave(2)",
      "out['rep_t'] = x.repeat_interleave(torch.tensor([2, 0, 1]), 0)",
      "a, b = torch.meshgrid(torch.tensor([1, 2]), torch.tensor([3, 4, 5]), indexing='xy')",
      "out['mesh_a'] = a", "out['mesh_b'] = b",
      "uv, ui, uc = torch.unique(torch.tensor([[3, 1, 3], [2, 1, 7]]), return_inverse=True, return_counts=True)",
      "out['uv'], out['ui'], out['uc'] = uv, ui, uc",
      "out['uf'] = torch.unique(torch.tensor([2.5, -0.5, -1, 2.5]))",
      "out['unfold'] = x.unfold(1, 2, 1)", "out['unfold2'] = x.unfold(0, 2, 2)",
    })
    torch_ref.assert_close(ours, ref, 0)
  end)

  it("name the problem in their errors", function()
    local x = Tensor({ { 1, 2 }, { 3, 4 } })
    assert.matches("masked_select: mask must be a bool tensor, got int32",
      helper.message_of(function() x:masked_select(x) end))
    assert.matches("index: a tensor index must hold integers %(1%-based%) or bools, got float32",
      helper.message_of(function() return x[Tensor({ 1.0 })] end))
    assert.matches("index_select indices are 1%-based", helper.message_of(function() x[Tensor({ 0 })]:tolist() end))
    assert.matches("diagonal: dim1 and dim2 are the same dim 1", helper.message_of(function() x:diagonal(0, 1, 1) end))
    assert.matches("unfold: size 3 is larger than dim 1 of size 2", helper.message_of(function() x:unfold(1, 3, 1) end))
    assert.matches("repeat_interleave: repeats has 3 counts for a dim of size 2",
      helper.message_of(function() x:repeat_interleave(Tensor({ 1, 1, 1 }), 1) end))
    assert.matches("meshgrid: indexing must be 'ij' or 'xy', got yx",
      helper.message_of(function() Tensor.meshgrid({ Tensor({ 1 }) }, "yx") end))
    assert.matches("unique: sorted = false is not supported",
      helper.message_of(function() x:unique({ sorted = false }) end))
  end)
end)
