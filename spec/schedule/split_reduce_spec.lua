-- spec/schedule/split_reduce_spec.lua — tcl.schedule.split_reduce: a reduction that reads at least
-- SPLIT_RATIO elements per output element runs as two kernels, the first parallel over the
-- split; smaller ones, and axes without a divisor in [8, 256], stay one kernel. Values are
-- exact for integers and max, within rounding for float sums.
local tcl = require "tcl"
local split_reduce = require "tcl.schedule.split_reduce"
local Tensor = tcl.Tensor
local kernel_names = require("spec.support.helper").scheduled_kernel_names


describe("split reductions", function()
  it("split a sum of 2^20 elements into 256 parallel partial sums and their sum", function()
    local x = Tensor.arange(1 << 20)
    assert.are.same({ "r_256_4096", "r_256" }, kernel_names(x:sum()))
    assert.are.equal((1 << 20) * ((1 << 20) - 1) // 2, x:cast("int64"):sum():item())
    assert.are.equal((1 << 20) - 1, x:max():item())
  end)

  it("keep every output element: a (4, 2^16) sum over its last dim, and keepdim", function()
    local x = Tensor.arange(4 * 65536):reshape(4, 65536)
    assert.are.same({ "r_4_256_256", "r_4_256" }, kernel_names(x:sum(2)))
    local want = {}
    for r = 0, 3 do want[r + 1] = 65536 * r * 65536 + 65536 * 65535 // 2 end
    assert.are.same(want, x:cast("int64"):sum(2):tolist())
    assert.are.same({ 4, 1 }, x:sum(2, true).shape)
    local f = Tensor.ones(4, 65536):sum(-1, true)
    assert.are.same({ { 65536.0 }, { 65536.0 }, { 65536.0 }, { 65536.0 } }, f:tolist())
  end)

  it("leave reductions below the ratio, and sizes without a divisor in range, whole", function()
    assert.are.equal(1, #kernel_names(Tensor.ones(split_reduce.SPLIT_RATIO - 1):sum()))
    assert.are.equal(2, #kernel_names(Tensor.ones(split_reduce.SPLIT_RATIO):sum()))
    assert.are.equal(1, #kernel_names(Tensor.ones(65537):sum())) -- a prime
    assert.are.equal(1, #kernel_names(Tensor.ones(64, 1024):sum(2)))
  end)

  it("sum floats to within rounding of the exact total", function()
    Tensor.manual_seed(3)
    local x = Tensor.rand(1 << 18):realize()
    local exact = 0
    for _, v in ipairs(x:tolist()) do exact = exact + v end
    assert.is_true(math.abs(x:sum():item() - exact) <= 1e-5 * exact)
    assert.is_true(math.abs(x:mean():item() - exact / (1 << 18)) <= 1e-5)
  end)
end)
