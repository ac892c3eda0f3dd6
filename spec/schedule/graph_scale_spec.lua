-- spec/schedule/graph_scale_spec.lua — deep and wide graphs (issue 33, items 16 and 17): the scheduler
-- walks graphs without recursion on their depth (lua/tcl/schedule/rangeify.lua), bounds the
-- size of a kernel (tcl.schedule.realize_points: MAX_FUSED_DEPTH, MAX_FUSED_LOADS), and a cat
-- of many pieces is joined in chunks (tcl.api.movement), so that 40,000-op chains, backward
-- through 20,000 ops and stacks of 10^5 tensors realize, and a cat's kernels grow linearly
-- with its number of pieces. Values are checked against naive Lua loops (exact arithmetic).
local tcl = require "tcl"
local schedule = require "tcl.schedule"
local realize_points = require "tcl.schedule.realize_points"
local Tensor = tcl.Tensor

-- The kernels that realizing t takes, planned only (nothing runs).
local function plan(t) return schedule.create({ t.uop }).kernels end

-- The number of nodes of op in a kernel's AST.
local function count(kernel, op)
  local n = 0
  for _, u in ipairs(kernel.ast:toposort()) do
    if u.op == op then n = n + 1 end
  end
  return n
end

-- n tensors {i, -i} (int32), i = 1..n.
local function pieces(n)
  local list = {}
  for i = 1, n do list[i] = Tensor({ i, -i }) end
  return list
end

-- These graphs are large: collect them after each spec, so that later specs in the same
-- process (tcl.live_nodes bounds in the fuzzer) start from a small graph.
local function collect()
  collectgarbage()
  collectgarbage()
  Tensor({ 0 }):realize() -- a realize frees the buffers of collected tensors
  collectgarbage()
  require("tcl.shape").prune()
end

describe("deep graphs", function()
  after_each(collect)

  it("a 40,000-step chain of integer ops (120,000 ops) realizes with the exact value", function()
    local x = Tensor({ 1, 2, 3, 4 })
    local y, steps = x, 40000
    for _ = 1, steps do y = (y * 3 + 1) % 1000003 end
    local want = {}
    for i = 1, 4 do
      local v = i
      for _ = 1, steps do v = (v * 3 + 1) % 1000003 end
      want[i] = v
    end
    assert.same(want, y:tolist())
  end)

  it("splits a chain deeper than MAX_FUSED_DEPTH into kernels of bounded depth; a shorter one stays one kernel",
    function()
      local x = Tensor({ 1.5, 2.5 }, { dtype = "float32" })
      local short, long = x, x
      for _ = 1, 400 do short = short * 0.5 + x end -- 800 ops
      for _ = 1, 3000 do long = long * 0.5 + x end  -- 6,000 ops
      assert.equal(1, #plan(short))
      local kernels = plan(long)
      assert.is_true(#kernels >= 6000 // realize_points.MAX_FUSED_DEPTH, "kernels: " .. #kernels)
      for _, k in ipairs(kernels) do
        assert.is_true(count(k, "MUL") + count(k, "ADD") <= realize_points.MAX_FUSED_DEPTH + 2)
      end
    end)

  it("a chain of 80,000 alternating movement and elementwise ops realizes", function()
    local x = Tensor({ { 1, 2 }, { 3, 4 } })
    local y = x
    for _ = 1, 40000 do y = y:permute(2, 1) + 1 end -- an even number of transposes: x + 40000
    assert.same({ { 40001, 40002 }, { 40003, 40004 } }, y:tolist())
  end)

  it("a chain of 60,000 movement ops alone (flips, pads and shrinks) realizes", function()
    local x = Tensor({ 1, 2, 3 })
    local y = x
    for _ = 1, 20000 do y = y:flip(1):pad({ { 1, 1 } }):narrow(1, 2, 3) end -- an even number of flips: x
    assert.same({ 1, 2, 3 }, y:tolist())
  end)

  it("backward through a 40,000-op chain gives the exact gradient", function()
    local x = Tensor({ 1.5, -2 }, { dtype = "float32", requires_grad = true })
    local y = x
    local steps = 20000 -- two ops each, alternating the factor 0.5 and 2 (exact in float32)
    for i = 1, steps do y = y * (i % 2 == 1 and 0.5 or 2) + x end
    y:sum():backward()
    -- dy_i/dx = a_i * dy_{i-1}/dx + 1, dy_0/dx = 1
    local d = 1
    for i = 1, steps do d = (i % 2 == 1 and 0.5 or 2) * d + 1 end
    assert.same({ d, d }, x.grad:tolist())
    local want = {}
    for k, v in ipairs({ 1.5, -2 }) do
      local acc = v
      for i = 1, steps do acc = acc * (i % 2 == 1 and 0.5 or 2) + v end
      want[k] = acc
    end
    assert.same(want, y:tolist())
  end)
end)

describe("wide graphs", function()
  after_each(collect)
  it("stack of 10^5 tensors realizes with every value in place", function()
    local n = 100000
    local got = Tensor.stack(pieces(n)):tolist()
    assert.equal(n, #got)
    for i = 1, n do
      if got[i][1] ~= i or got[i][2] ~= -i then
        error(string.format("row %d is {%s, %s}", i, tostring(got[i][1]), tostring(got[i][2])))
      end
    end
  end)

  it("cat of 2,000 tensors (dim 1 and dim 2) realizes with every value in place", function()
    local n = 2000
    local list = pieces(n)
    local flat = Tensor.cat(list):tolist()
    assert.equal(2 * n, #flat)
    for i = 1, n do assert.is_true(flat[2 * i - 1] == i and flat[2 * i] == -i, "piece " .. i) end
    local rows = {}
    for i = 1, n do rows[i] = list[i]:reshape(2, 1) end
    local wide = Tensor.cat(rows, 2):tolist()
    for i = 1, n do assert.is_true(wide[1][i] == i and wide[2][i] == -i, "column " .. i) end
  end)

  it("cat of up to 32 pieces is one kernel; more pieces are chunks of 32 joined the same way", function()
    assert.equal(1, #plan(Tensor.cat(pieces(8))))
    assert.equal(1, #plan(Tensor.cat(pieces(32))))
    -- chunks of 32 and 1 (the lone piece is its own buffer: no copy), then their join
    assert.equal(2, #plan(Tensor.cat(pieces(33))))
    assert.equal(3, #plan(Tensor.cat(pieces(64))))
    local bools = {}
    for i = 1, 40 do bools[i] = Tensor({ i % 3 == 0 }) end
    local joined = Tensor.cat(bools):tolist()
    for i = 1, 40 do assert.equal(i % 3 == 0, joined[i]) end
  end)

  it("a cat's kernels grow linearly with its pieces: 2n pieces, about twice the loads and nodes", function()
    local function measure(n)
      local loads, nodes, widest = 0, 0, 0
      for _, k in ipairs(plan(Tensor.cat(pieces(n)))) do
        local l = count(k, "LOAD")
        loads, nodes, widest = loads + l, nodes + #k.ast:toposort(), math.max(widest, l)
      end
      return loads, nodes, widest
    end
    local loads1, nodes1, widest1 = measure(1000)
    local loads2, nodes2, widest2 = measure(2000)
    assert.is_true(widest1 <= realize_points.MAX_FUSED_LOADS and widest2 <= realize_points.MAX_FUSED_LOADS,
      string.format("a kernel reads %d and %d pieces", widest1, widest2))
    local load_ratio, node_ratio = loads2 / loads1, nodes2 / nodes1
    assert.is_true(load_ratio > 1.9 and load_ratio < 2.2, "loads ratio " .. load_ratio)
    assert.is_true(node_ratio > 1.9 and node_ratio < 2.2, "nodes ratio " .. node_ratio)
  end)

  it("an elementwise sum of 100 tensors is split into kernels of at most MAX_FUSED_LOADS loads", function()
    local list, sum = pieces(100), nil
    for _, t in ipairs(list) do sum = sum and sum + t or t end
    local kernels = plan(sum)
    assert.is_true(#kernels >= 3)
    for _, k in ipairs(kernels) do assert.is_true(count(k, "LOAD") <= realize_points.MAX_FUSED_LOADS + 1) end
    assert.same({ 5050, -5050 }, sum:tolist())
  end)
end)
