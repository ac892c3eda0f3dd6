-- spec/codegen/reuse_values_spec.lua — the pass "reuse reduced values"
-- (tcl.codegen.passes.reuse_values): a row-fused softmax computes its exponential once per
-- element on CPU (the sum loop keeps it in a scratch array, the store loop reads it back and
-- multiplies by the row's reciprocal sum), values equal to a naive Lua reference on CPU and
-- EMU (which recomputes); other renderers keep their kernels.
local tcl = require "tcl"
local schedule = require "tcl.schedule"
local lower = require "tcl.codegen.driver.lower"
local linearize = require "tcl.codegen.driver.linearize"
local reuse_values = require "tcl.codegen.passes.reuse_values"
local ref_softmax = require("spec.support.helper").naive_softmax
local Tensor = tcl.Tensor

local HAVE_RENDERER = pcall(require, "tcl.llvm")
local DEVICES = HAVE_RENDERER and { "CPU", "EMU" } or { "EMU" }

-- The linear program of the one kernel of t (its schedule must be one kernel) for device.
local function linear(t, device)
  local kernels = schedule.create({ t.uop }).kernels
  assert.are.equal(1, #kernels)
  local ctx = { name = kernels[1].name, device = device, renderer = lower.backend(device).renderer }
  return linearize.linearize(lower.run_passes(kernels[1].ast, ctx))
end

-- How many nodes of each op the list holds, and those inside the loop that stores to PARAM 0
-- (the output): the ops between that loop's RANGE and its END; index arithmetic not counted.
local function op_counts(list)
  local all, store_loop = {}, {}
  local INDEX = tcl.dtype "index"
  for _, u in ipairs(list) do
    if u.dtype ~= INDEX then all[u.op] = (all[u.op] or 0) + 1 end
  end
  local at = {}
  for i, u in ipairs(list) do at[u] = i end
  local store
  for _, u in ipairs(list) do
    if u.op == "STORE" and u.src[1].op == "INDEX" and u.src[1].src[1].op == "PARAM" and u.src[1].src[1].arg[1] == 0 then
      store = u
    end
  end
  -- the innermost loop (not a vector range) around the store: the last RANGE before it whose END comes after
  local first
  for i = at[store], 1, -1 do
    local u = list[i]
    if u.op == "RANGE" and u:axis_type() ~= "vector" then
      local closed = false
      for j = i + 1, at[store] do
        if list[j].op == "END" and list[j].src[#list[j].src] == u then closed = true break end
      end
      if not closed then first = i break end
    end
  end
  for i = first, #list do
    local u = list[i]
    if u.op == "END" and u.src[#u.src] == list[first] then break end
    if u.dtype ~= INDEX then store_loop[u.op] = (store_loop[u.op] or 0) + 1 end
  end
  return all, store_loop
end


describe("reuse reduced values", function()
  it("runs for the CPU's LLVM renderer only", function()
    assert.is_false(reuse_values.applies({ renderer = lower.backend("EMU").renderer }))
    assert.is_false(reuse_values.applies({ renderer = { name = "cuda", gpu = {} } }))
    assert.is_false(reuse_values.applies({}))
    if HAVE_RENDERER then assert.is_true(reuse_values.applies({ renderer = lower.backend("CPU").renderer })) end
  end)

  it("softmax 4096x1024 on CPU: one kernel, one exponential per element, no exp or division in its store loop",
    function()
      if not HAVE_RENDERER then return end
      local x = Tensor.empty(4096, 1024)
      local all, store_loop = op_counts(linear(x:softmax(-1), "CPU"))
      -- the exponential (exp2's polynomial: 7 MULACCs) once, in the sum's loop
      assert.are.equal(7, all.MULACC)
      assert.is_nil(store_loop.MULACC)
      assert.is_nil(store_loop.FDIV)
      assert.is_nil(store_loop.RECIPROCAL)
      assert.is_nil(all.FDIV)
      assert.are.equal(1, all.RECIPROCAL) -- one per row, outside the store loop
      assert.are.equal(1, store_loop.MUL) -- e * (1 / sum)
      -- the scratch row: 1024 float32 = 4 KB
      local rows = 0
      for _, u in ipairs(linear(x:softmax(-1), "CPU")) do
        if u.op == "DEFINE_REG" and u.arg[2] == 1024 then rows = rows + 1 end
      end
      assert.are.equal(1, rows)
    end)

  it("EMU recomputes the exponential (its renderer keeps the kernel as it was)", function()
    local x = Tensor.empty(64, 256)
    local all, store_loop = op_counts(linear(x:softmax(-1), "EMU"))
    assert.are.equal(14, all.MULACC)
    assert.are.equal(7, store_loop.MULACC)
    assert.is_nil(all.FDIV)
  end)

  it("leaves rows over MAX_BYTES, and values with nothing costly, to recompute", function()
    if not HAVE_RENDERER then return end
    local saved = reuse_values.MAX_BYTES
    reuse_values.MAX_BYTES = 1024
    local ok, err = pcall(function()
      local all = op_counts(linear(Tensor.empty(64, 1024):softmax(-1), "CPU"))
      assert.are.equal(14, all.MULACC)
    end)
    reuse_values.MAX_BYTES = saved
    assert(ok, err)
    -- layernorm: x - mean is recomputed (one op), no scratch
    for _, u in ipairs(linear(Tensor.empty(64, 1024):layernorm(-1), "CPU")) do
      assert.is_false(u.op == "DEFINE_REG" and u.arg[2] > 16, "a scratch array in layernorm")
    end
  end)

  it("gives softmax's values on every device (naive Lua reference)", function()
    for _, shape in ipairs { { 8, 1024 }, { 7, 257 }, { 3, 5, 48 }, { 64, 256 } } do
      local x = Tensor.randn(table.unpack(shape)):realize()
      local n = shape[#shape]
      local flat = x:reshape(-1, n):tolist()
      for _, device in ipairs(DEVICES) do
        local got = x:to(device):softmax(-1):reshape(-1, n):tolist()
        for r, row in ipairs(flat) do
          local want = ref_softmax(row)
          for c = 1, n do
            assert(math.abs(got[r][c] - want[c]) <= 2e-6 * want[c] + 1e-12,
              string.format("%s %s [%d][%d]: %.9g, want %.9g", device, table.concat(shape, "x"), r, c, got[r][c],
                want[c]))
          end
        end
      end
    end
  end)

  it("keeps softmax's values where its weights feed a matmul, and its gradient", function()
    local x, w = Tensor.randn(16, 64):realize(), Tensor.randn(64, 8):realize()
    local want = x:to("EMU"):softmax(-1):matmul(w:to("EMU")):tolist()
    for _, device in ipairs(DEVICES) do
      local got = x:to(device):softmax(-1):matmul(w:to(device)):tolist()
      for r = 1, 16 do
        for c = 1, 8 do assert.near(want[r][c], got[r][c], 1e-5 * math.max(1, math.abs(want[r][c]))) end
      end
    end
  end)
end)
