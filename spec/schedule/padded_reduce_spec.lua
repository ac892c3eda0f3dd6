-- spec/schedule/padded_reduce_spec.lua — a reduction that its kernel pads into a larger output
-- (the pieces of Tensor.cat, the gradient of a chunk of a product) is stored by a kernel of its
-- own once the padding would cost its loop PADDED_REDUCE_WASTE iterations per element
-- (tcl.schedule.realize_points); a short reduction or a small pad stays fused. Values are checked
-- against naive Lua products.
local tcl = require "tcl"
local schedule = require "tcl.schedule"
local realize_points = require "tcl.schedule.realize_points"
local Tensor = tcl.Tensor
local helper = require "spec.support.helper"
local kernel_names, naive_matmul = helper.scheduled_kernel_names, helper.naive_matmul


local function count_reduce_kernels(names)
  local n = 0
  for _, name in ipairs(names) do if name:sub(1, 2) == "r_" then n = n + 1 end end
  return n
end

--- rows x cols of deterministic values in [-1, 1]
local function values(rows, cols, seed)
  local out = {}
  for i = 1, rows do
    out[i] = {}
    for j = 1, cols do out[i][j] = math.sin(seed + 0.37 * i + 0.91 * j) end
  end
  return out
end


describe("padded reductions (realize_points.PADDED_REDUCE_*)", function()
  it("stores each product that Tensor.cat joins, and the join is one elementwise kernel", function()
    local a1, a2, b1, b2 = values(12, 32, 1), values(12, 32, 2), values(32, 5, 3), values(32, 7, 4)
    local y = Tensor.cat({ Tensor(a1):matmul(Tensor(b1)), Tensor(a2):matmul(Tensor(b2)) }, 2)
    local names = kernel_names(y)
    assert.are.equal(2, count_reduce_kernels(names))
    assert.are.equal(3, #names, table.concat(names, " "))
    assert.is_truthy(names[#names]:match("^E_"), "the join is elementwise: " .. table.concat(names, " "))
    local got = y:tolist()
    local p1, p2 = naive_matmul(a1, b1), naive_matmul(a2, b2)
    for i = 1, 12 do
      for j = 1, 12 do
        local want = j <= 5 and p1[i][j] or p2[i][j - 5]
        assert.is_true(math.abs(got[i][j] - want) < 1e-4, ("[%d][%d] %g vs %g"):format(i, j, got[i][j], want))
      end
    end
  end)

  it("keeps short reductions and small pads fused", function()
    -- rows of 4 joined in pairs: 4 * (2 - 1) iterations of padding, under the waste threshold
    local x = Tensor(values(6, 8, 5))
    local short = Tensor.cat({ x:narrow(2, 1, 4):sum(2, true), x:narrow(2, 5, 4):sum(2, true) }, 2)
    assert.are.same(1, #kernel_names(short))
    local got = short:tolist()
    local v = values(6, 8, 5)
    for i = 1, 6 do
      local s1, s2 = 0, 0
      for j = 1, 4 do s1, s2 = s1 + v[i][j], s2 + v[i][j + 4] end
      assert.is_true(math.abs(got[i][1] - s1) < 1e-5 and math.abs(got[i][2] - s2) < 1e-5)
    end
    -- a long reduction padded by one row of 16: growth 17/16, under PADDED_REDUCE_GROWTH
    local long = Tensor(values(16, 64, 6)):sum(2):pad({ { 0, 1 } })
    assert.are.same(1, #kernel_names(long))
  end)

  it("follows the constants: with no waste allowed even the short sums are stored", function()
    local saved = realize_points.PADDED_REDUCE_WASTE
    realize_points.PADDED_REDUCE_WASTE = 1
    local ok, err = pcall(function()
      local x = Tensor(values(6, 8, 5))
      local short = Tensor.cat({ x:narrow(2, 1, 4):sum(2, true), x:narrow(2, 5, 4):sum(2, true) }, 2)
      assert.are.same(3, #kernel_names(short))
    end)
    realize_points.PADDED_REDUCE_WASTE = saved
    assert(ok, err)
  end)

  it("stores attention's q, k and v gradients apart: no kernel loops over three gated reductions", function()
    local w = Tensor(values(12, 4, 7)):requires_grad_(true)
    local x = Tensor(values(40, 4, 8))
    local q, k, v = table.unpack(x:matmul(w:transpose(1, 2)):chunk(3, -1))
    local grad = q:matmul(k:transpose(1, 2)):matmul(v):square():sum():gradient(w)
    local most = 0
    for _, kernel in ipairs(schedule.create({ grad.uop }).kernels) do
      local n = 0
      for _, node in ipairs(kernel.ast:toposort()) do if node.op == "REDUCE" then n = n + 1 end end
      most = math.max(most, n)
    end
    assert.are.equal(1, most)
    -- the gradient's values: against the same graph with the rule off (three fused reductions)
    local saved = realize_points.PADDED_REDUCE_GROWTH
    realize_points.PADDED_REDUCE_GROWTH = math.huge
    local ok, fused = pcall(function()
      return q:matmul(k:transpose(1, 2)):matmul(v):square():sum():gradient(w):tolist()
    end)
    realize_points.PADDED_REDUCE_GROWTH = saved
    assert(ok, fused)
    local got = grad:tolist()
    for i = 1, 12 do
      for j = 1, 4 do
        assert.is_true(math.abs(got[i][j] - fused[i][j]) <= 1e-4 * math.max(1, math.abs(fused[i][j])))
      end
    end
  end)
end)
