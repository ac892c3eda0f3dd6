-- spec/codegen/pass_helpers_spec.lua — the helpers every lowering pass shares, defined once: a range's
-- axis id and size, the next free axis id and slot, index constants (UOp methods, tcl.uop),
-- and the coefficient of a range in an index expression (tcl.affine: stride, from the affine
-- form of the whole expression, and coefficient, for an expression affine in that range alone).
local tcl = require "tcl"
local UOp = require "tcl.uop"
local affine = require "tcl.affine"

local IDX, F32, VOID = tcl.dtype "index", tcl.dtype "float32", tcl.dtype "void"

local function c(v) return UOp.new("CONST", IDX, nil, v) end
local function range(size, axis, kind) return UOp.new("RANGE", IDX, { c(size) }, { axis, kind or "loop" }) end

describe("a RANGE's helpers", function()
  it("give its axis id and its constant size", function()
    local r = range(16, 3, "upcast")
    assert.are.equal(3, r:axis_id())
    assert.are.equal(16, r:range_size())
    assert.are.equal("upcast", r:axis_type())
  end)

  it("give nil for a range of symbolic size, and for any other node", function()
    local n = UOp.new("DEFINE_VAR", IDX, nil, "n")
    local symbolic = UOp.new("RANGE", IDX, { n }, { 0, "loop" })
    assert.are.equal(0, symbolic:axis_id())
    assert.is_nil(symbolic:range_size())
    for _, node in ipairs { c(4), n, c(4) + n } do
      assert.is_nil(node:range_size())
      assert.is_nil(node:axis_id())
    end
  end)

  it("give the axis id and the register or local-memory slot a pass may add next", function()
    local out = UOp.new("PARAM", F32, nil, { 0, 8 })
    local reg = UOp.new("DEFINE_REG", F32, nil, { 2, 4 })
    local r, s = range(8, 5), range(4, 1, "reduce")
    local keep = UOp.new("STORE", VOID, { UOp.new("INDEX", F32, { reg, c(0) }), UOp.new("CONST", F32, nil, 0.0) })
    local store = UOp.new("STORE", VOID, { UOp.new("INDEX", F32, { out, r + s }), UOp.new("CONST", F32, nil, 1.0) })
    local sink = UOp.new("SINK", VOID, { keep, UOp.new("END", VOID, { UOp.new("END", VOID, { store, s }), r }) })
    assert.are.equal(6, sink:free_axis_id())
    assert.are.equal(3, sink:free_slot("DEFINE_REG"))
    assert.are.equal(0, sink:free_slot("DEFINE_LOCAL"))
    assert.are.equal(0, keep:free_axis_id())
  end)

  it("build index constants that are the nodes the passes built by hand", function()
    assert.are.equal(UOp.new("CONST", IDX, nil, 7), UOp.index_const(7))
    assert.are.equal(UOp.const(IDX, 7), UOp.index_const(7))
  end)
end)

describe("the coefficient of a range in an index expression", function()
  local r, s = range(8, 0), range(4, 1)
  local buf = UOp.new("PARAM", F32, nil, { 0, 32 })
  local loaded = UOp.new("LOAD", IDX, { UOp.new("INDEX", IDX, { buf, s }) })

  it("is the stride of the affine form (0 where the range is not used)", function()
    local e = r * 4 + s * 3 + 5
    assert.are.equal(4, affine.stride(e, r, {}))
    assert.are.equal(3, affine.stride(e, s, {}))
    assert.are.equal(0, affine.stride(c(2) + s, r, {}))
  end)

  it("has no stride when the expression is not affine, though it may be affine in the range", function()
    local e = r * 2 + s // 2
    assert.is_nil(affine.stride(e, r, {}))
    assert.are.equal(2, affine.coefficient(e, r, {}))
    assert.are.equal(1, affine.coefficient(r + loaded, r, {}))
    assert.is_nil(affine.stride(r + loaded, r, {}))
  end)

  it("is none when the range itself enters other than by sums and constant factors", function()
    assert.is_nil(affine.coefficient(r // 2 + s, r, {}))
    assert.is_nil(affine.coefficient(r * s, r, {}))
    assert.are.equal(0, affine.coefficient(s * s, r, {}))
    assert.are.equal(-3, affine.coefficient(s - r * 3, r, {}))
  end)
end)
