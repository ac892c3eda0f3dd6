-- spec/schedule/row_fusion_spec.lua — row fusion (tcl.schedule.realize_points, "Row fusion"): a
-- reduction over trailing axes whose result is broadcast back over the same rows is computed
-- inside the kernel that uses it, one row at a time, so softmax and layernorm are one kernel
-- each; rows over ROW_FUSE_BYTES, reductions over leading axes, reductions that other kernels
-- need too, and devices with workgroups keep the reductions in kernels of their own. Values
-- are checked against naive Lua references on EMU (the reference device) and the default one.
local tcl = require "tcl"
local realize_points = require "tcl.schedule.realize_points"
local plan_cache = require "tcl.schedule.plan_cache"
local Tensor = tcl.Tensor
local helper = require "spec.support.helper"
local kernel_names, ref_softmax = helper.scheduled_kernel_names, helper.naive_softmax


--- fn() with ROW_FUSE_BYTES set to bytes (restored after, also on error).
local function with_row_bytes(bytes, fn)
  local saved = realize_points.ROW_FUSE_BYTES
  realize_points.ROW_FUSE_BYTES = bytes
  local ok, err = pcall(fn)
  realize_points.ROW_FUSE_BYTES = saved
  assert(ok, err)
end

-- naive references over rows (lists of numbers)

local function ref_layernorm(row)
  local mean, var = 0, 0
  for _, v in ipairs(row) do mean = mean + v end
  mean = mean / #row
  for _, v in ipairs(row) do var = var + (v - mean) ^ 2 end
  var = var / #row
  local out = {}
  for i, v in ipairs(row) do out[i] = (v - mean) / math.sqrt(var + 1e-5) end
  return out
end

local function ref_logsumexp(row)
  local m = -math.huge
  for _, v in ipairs(row) do m = math.max(m, v) end
  local s = 0
  for _, v in ipairs(row) do s = s + math.exp(v - m) end
  return m + math.log(s)
end

--- Asserts that rows (a list of rows) match ref row by row within tol (relative, at least
-- absolute tol).
local function assert_rows(got, rows, ref, tol, what)
  for r, row in ipairs(rows) do
    local want = ref(row)
    if type(want) == "number" then
      local g = type(got[r]) == "table" and got[r][1] or got[r]
      assert(math.abs(g - want) <= tol * math.max(1, math.abs(want)),
        string.format("%s row %d: %.9g, want %.9g", what, r, g, want))
    else
      for c, w in ipairs(want) do
        local g = got[r][c]
        assert(math.abs(g - w) <= tol * math.max(1, math.abs(w)),
          string.format("%s row %d col %d: %.9g, want %.9g", what, r, c, g, w))
      end
    end
  end
end

describe("row fusion", function()
  before_each(function() plan_cache.clear() end)

  it("makes softmax(-1) of 4096 x 1024 one kernel, with the values of a naive reference", function()
    Tensor.manual_seed(11)
    local x = (Tensor.rand(4096, 1024) * 8 - 4):realize()
    assert.are.same({ "r_4096_1024_1024_1024" }, kernel_names(x:softmax(-1)))
    local rows, got = x:tolist(), x:softmax(-1):tolist()
    assert_rows(got, rows, ref_softmax, 2e-6, "softmax")
  end)

  for _, device in ipairs { "EMU", "default" } do
    local opts = device == "EMU" and { device = "EMU" } or {}
    it("computes softmax, log_softmax, logsumexp and layernorm in one kernel each on " .. device, function()
      Tensor.manual_seed(5)
      local x = (Tensor.rand({ 6, 40 }, opts) * 10 - 5):realize()
      local rows = x:tolist()
      assert.are.equal(1, #kernel_names(x:softmax(-1)))
      assert.are.equal(1, #kernel_names(x:log_softmax(-1)))
      assert.are.equal(1, #kernel_names(x:logsumexp(-1)))
      assert.are.equal(1, #kernel_names(x:layernorm(-1)))
      assert_rows(x:softmax(-1):tolist(), rows, ref_softmax, 2e-6, "softmax")
      assert_rows(x:logsumexp(-1):tolist(), rows, ref_logsumexp, 2e-6, "logsumexp")
      assert_rows(x:layernorm(-1):tolist(), rows, ref_layernorm, 1e-5, "layernorm")
      local lsm = x:log_softmax(-1):tolist()
      assert_rows(lsm, rows, function(row)
        local l, out = ref_logsumexp(row), {}
        for i, v in ipairs(row) do out[i] = v - l end
        return out
      end, 2e-6, "log_softmax")
      -- the same over the last two axes of a 3-d tensor: the row is 5 x 8 elements
      local y = x:reshape(6, 5, 8)
      assert.are.equal(1, #kernel_names(y:layernorm({ -2, -1 })))
      local flat = {}
      for r, row3 in ipairs(y:layernorm({ -2, -1 }):tolist()) do
        flat[r] = {}
        for _, part in ipairs(row3) do for _, v in ipairs(part) do flat[r][#flat[r] + 1] = v end end
      end
      assert_rows(flat, rows, ref_layernorm, 1e-5, "layernorm over two axes")
    end)
  end

  it("fuses nn.LayerNorm's affine part and a cross-entropy loss's row reductions too", function()
    Tensor.manual_seed(7)
    local ln = tcl.nn.LayerNorm(32)
    local x = Tensor.rand(8, 32):realize()
    assert.are.equal(1, #kernel_names(ln(x)))
    local logits, target = Tensor.rand(8, 10):realize(), Tensor({ 1, 2, 3, 4, 5, 6, 7, 8 }, { dtype = "int32" })
    local loss = logits:cross_entropy(target)
    local fused = #kernel_names(loss)
    local unfused
    with_row_bytes(0, function() unfused = #kernel_names(loss) end)
    assert.is_true(fused < unfused, string.format("%d kernels row-fused, %d not", fused, unfused))
  end)

  it("keeps rows over ROW_FUSE_BYTES in kernels of their own", function()
    local cols = realize_points.ROW_FUSE_BYTES // 4 * 2 -- float32 rows of twice the budget
    local x = Tensor.rand(2, cols):realize()
    assert.are.equal(3, #kernel_names(x:softmax(-1)))
    with_row_bytes(cols * 4, function() assert.are.equal(1, #kernel_names(x:softmax(-1))) end)
    with_row_bytes(0, function()
      assert.are.equal(3, #kernel_names(Tensor.rand(4, 8):softmax(-1)))
      assert.are.equal(3, #kernel_names(Tensor.rand(4, 8):layernorm(-1)))
    end)
  end)

  it("does not fuse a reduction over a leading axis, nor one two kernels of other shapes need", function()
    local x = Tensor.rand(16, 8):realize()
    -- the column sums broadcast over rows: the row loop is outside, each row would redo them
    assert.are.equal(2, #kernel_names(x + x:sum(1, true)))
    -- the row sums stored for a second output of another shape: one kernel computes them once
    local s = x:sum(-1, true)
    assert.are.same({ "r_16_8", "E_16_8", "E_16" }, kernel_names(x / s, (s * 2):reshape(16)))
    -- a row statistic under a matmul's reduction (its rows reduced again along another axis):
    -- not in the matmul's kernel; the exponentials are stored, the row max fused into theirs
    local w = Tensor.rand(8, 4):realize()
    assert.are.same({ "r_16_8_8", "r_16_4_8" }, kernel_names((x - x:max(-1, true)):exp():matmul(w)))
    local got = (x / s):tolist()
    for r, row in ipairs(x:tolist()) do
      local total = 0
      for _, v in ipairs(row) do total = total + v end
      for c, v in ipairs(row) do assert(math.abs(got[r][c] - v / total) <= 1e-6) end
    end
  end)

  it("is off for devices whose renderer maps every output element to a thread (GPUs)", function()
    assert.is_false(realize_points.row_fuse_on("CUDA"))
    assert.is_false(realize_points.row_fuse_on("METAL"))
    assert.is_true(realize_points.row_fuse_on("CPU"))
    assert.is_true(realize_points.row_fuse_on("EMU"))
    tcl.context { EMU_GPU = "CUDA" }(function() assert.is_false(realize_points.row_fuse_on("EMU")) end)
    local y = Tensor.rand(4, 8):realize():softmax(-1)
    local sink = tcl.uop("SINK", nil, { y.uop })
    local order = sink:toposort()
    local function stored(row_fuse)
      local realize, ops = realize_points.decide(order, sink, { y.uop }, { row_fuse = row_fuse }), {}
      for _, n in ipairs(order) do if realize[n.id] then ops[#ops + 1] = n.op end end
      return ops
    end
    assert.are.same({ "MUL" }, stored(true))
    -- the max and the sum's reciprocal (softmax multiplies by it)
    assert.are.same({ "REDUCE_AXIS", "RECIPROCAL", "MUL" }, stored(false))
  end)
end)
