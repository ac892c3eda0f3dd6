-- spec/codegen/thread_order_spec.lua — tcl.codegen.passes.thread_order: which thread ranges of a GPU kernel
-- vary fastest across a warp's lanes. Hand-built index expressions; the sector counts are
-- worked out by hand, the orders follow from them (and from the constraints of SHUFFLE and
-- WMMA). The end-to-end effect (EMU's memory profile of lowered kernels) is in
-- gpu_lowering_spec.
local tcl = require "tcl"
local UOp = require "tcl.uop"
local thread_order = require "tcl.codegen.passes.thread_order"

local IDX, F32, F16 = tcl.dtype "index", tcl.dtype "float32", tcl.dtype "float16"

local function c(v) return UOp.new("CONST", IDX, nil, v) end
local function range(size, axis, kind) return UOp.new("RANGE", IDX, { c(size) }, { axis, kind or "local" }) end
local function param(dt, slot, n) return UOp.new("PARAM", dt, nil, { slot, n }) end
-- buf[sum of terms], a term being a range or { range, coefficient }
local function at(buf, ...)
  local index
  for _, t in ipairs { ... } do
    local term = t.op and t or UOp.new("MUL", IDX, { t[1], c(t[2]) })
    index = index and UOp.new("ADD", IDX, { index, term }) or term
  end
  return UOp.new("INDEX", buf.dtype, { buf, index })
end
-- A sink over the given INDEXes (loaded, so that the graph is a kernel's shape).
local function sink(...)
  local loads = {}
  for i, x in ipairs { ... } do loads[i] = UOp.new("LOAD", x.dtype, { x }) end
  return UOp.new("SINK", tcl.dtype "void", loads)
end

local function names(order, of)
  local out = {}
  for i, r in ipairs(order) do out[i] = of[r] end
  return table.concat(out, " ")
end

describe("tcl.codegen.passes.thread_order", function()
  it("counts the sectors a warp touches: 4 for 32 neighbouring floats, 32 for floats 32 bytes apart", function()
    local x = range(32, 1)
    local a = thread_order.accesses(sink(at(param(F32, 1, 256), x)))
    assert.are.equal(4, thread_order.sectors({ x }, a))
    a = thread_order.accesses(sink(at(param(F32, 1, 256), { x, 8 })))
    assert.are.equal(32, thread_order.sectors({ x }, a))
    a = thread_order.accesses(sink(at(param(F16, 1, 256), x), at(param(F32, 2, 1), c(0))))
    assert.are.equal(2 + 1, thread_order.sectors({ x }, a)) -- 64 bytes of halves, one float all lanes read
    -- 16 lanes: half a warp
    local small = range(16, 1)
    a = thread_order.accesses(sink(at(param(F32, 1, 256), { small, 2 })))
    assert.are.equal(4, thread_order.sectors({ small }, a))
  end)

  it("keeps the default order where it costs no sectors: groups innermost, then by axis id", function()
    local rows, group = range(8, 1), range(32, 2, "group_reduce")
    local of = { [rows] = "rows", [group] = "group" }
    -- a row sum: the group reads a row's neighbours
    local a = thread_order.accesses(sink(at(param(F32, 1, 8 * 1024), { rows, 1024 }, group)))
    assert.are.equal("group rows", names(thread_order.order({ rows, group }, a, false, false), of))
    local x, y = range(16, 3), range(16, 2)
    of = { [x] = "x", [y] = "y" }
    a = thread_order.accesses(sink(at(param(F32, 1, 4096), { y, 64 }, x)))
    assert.are.equal("x y", names(thread_order.order({ y, x }, a, false, false), of))
    -- no affine access: the default
    assert.are.equal("x y", names(thread_order.order({ y, x }, {}, false, false), of))
  end)

  it("puts a column sum's threads over the columns first, and the inner part of a split axis", function()
    local cols, group = range(32, 1), range(8, 2, "group_reduce")
    local of = { [cols] = "cols", [group] = "group" }
    -- x[r * 512 + col]: the group steps by 512 floats
    local a = thread_order.accesses(sink(at(param(F32, 1, 512 * 512), { group, 512 }, cols)))
    -- the group first: lanes 8 rows x 4 columns, a sector per row
    assert.are.equal(8, thread_order.sectors({ group, cols }, a))
    assert.are.equal(4, thread_order.sectors({ cols, group }, a))
    assert.are.equal("cols group", names(thread_order.order({ cols, group }, a, false, false), of))
    -- an axis of 1200 rows split by LOCAL after the columns' (axis 2): its local part got axis 3
    local col, row = range(16, 2), range(16, 3)
    of = { [col] = "col", [row] = "row" }
    a = thread_order.accesses(sink(at(param(F32, 1, 19200), { row, 16 }, col)))
    assert.are.equal("col row", names(thread_order.order({ col, row }, a, false, false), of))
  end)

  it("weighs a transposing copy's load and store together", function()
    -- out[w * 8 + ch] = in[ch * 256 + w]: 8 channels, 16 positions
    local ch, w = range(8, 4), range(16, 3)
    local of = { [ch] = "ch", [w] = "w" }
    local a = thread_order.accesses(sink(at(param(F32, 0, 128), { w, 8 }, ch), at(param(F32, 1, 2048), { ch, 256 }, w)))
    -- channels first: the store's 4 sectors, the load's 8 (4 positions of 8 channels); positions
    -- first: 16 + 4
    assert.are.equal(12, thread_order.sectors({ ch, w }, a))
    assert.are.equal(20, thread_order.sectors({ w, ch }, a))
    assert.are.equal("ch w", names(thread_order.order({ w, ch }, a, false, false), of))
  end)

  it("counts an access inside a reduction once per step, and keeps the default for an index it cannot read", function()
    -- out[j] = sum over r, g of x[r * 8 + g] * w[(r * 8 + g) * 64 + j]: once a step x and w,
    -- once the store; the group first touches fewer sectors for the store, far more for w
    local j, g, r = range(32, 2), range(8, 3, "group_reduce"), range(32, 1, "reduce")
    local of = { [j] = "j", [g] = "g" }
    local a = thread_order.accesses(sink(at(param(F32, 0, 64), j), at(param(F32, 1, 256), { r, 8 }, g),
      at(param(F32, 2, 16384), { r, 512 }, { g, 64 }, j)))
    assert.is_false(a.opaque)
    assert.are.same({ 1, 32, 32 }, { a[1].weight, a[2].weight, a[3].weight })
    -- j first: 4 + 1 * 32 + 4 * 32; g first: 1 + 1 * 32 + 8 * 32
    assert.are.equal(164, thread_order.sectors({ j, g }, a))
    assert.are.equal(289, thread_order.sectors({ g, j }, a))
    assert.are.equal("j g", names(thread_order.order({ j, g }, a, false, false), of))
    -- an index through // (a permuted reshape): no count, the default order
    local split = UOp.new("IDIV", IDX, { j, c(4) })
    a = thread_order.accesses(sink(at(param(F32, 0, 64), split), at(param(F32, 2, 16384), { g, 64 }, j)))
    assert.is_true(a.opaque)
    assert.are.equal("g j", names(thread_order.order({ j, g }, a, false, false), of))
  end)

  it("keeps shuffled groups innermost and a WMMA kernel's order whatever the sectors", function()
    local cols, group = range(32, 1), range(8, 2, "group_reduce")
    local of = { [cols] = "cols", [group] = "group" }
    local a = thread_order.accesses(sink(at(param(F32, 1, 512 * 512), { group, 512 }, cols)))
    assert.are.equal("group cols", names(thread_order.order({ cols, group }, a, true, false), of))
    assert.are.equal("group cols", names(thread_order.order({ cols, group }, a, false, true), of))
    -- with shuffles the local ranges' order is still searched
    local x, y = range(16, 2), range(16, 3)
    local g = range(2, 4, "group_reduce")
    of = { [x] = "x", [y] = "y", [g] = "g" }
    a = thread_order.accesses(sink(at(param(F32, 1, 4096), { y, 64 }, { x, 2 }, g)))
    assert.are.equal("g x y", names(thread_order.order({ x, y, g }, a, true, false), of))
  end)
end)
