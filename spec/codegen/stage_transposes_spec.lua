-- spec/codegen/stage_transposes_spec.lua — the pass "stage transposes" (tcl.codegen.passes.stage_transposes)
-- on hand-built kernels at the point of the pipeline where it runs: which loads it stages,
-- what it leaves alone, and the local-memory budget. Values and the effect on coalescing are
-- in gpu_lowering_spec (the pass inside the whole pipeline, run on EMU's GPU mode).
local tcl = require "tcl"
local UOp = require "tcl.uop"
local stage = require "tcl.codegen.passes.stage_transposes"
local lower = require "tcl.codegen.driver.lower"

local IDX, F32, F64, VOID = tcl.dtype "index", tcl.dtype "float32", tcl.dtype "float64", tcl.dtype "void"

-- the pass, as the driver runs it (its rules with its context)
local function run_stage(sink, ctx) return lower.run_rules(stage, sink, ctx) end

local function c(v) return UOp.new("CONST", IDX, nil, v) end
local function range(size, axis, kind) return UOp.new("RANGE", IDX, { c(size) }, { axis, kind or "local" }) end
local function param(dt, slot, n) return UOp.new("PARAM", dt, nil, { slot, n }) end
local function load(buf, index) return UOp.new("LOAD", buf.dtype, { UOp.new("INDEX", buf.dtype, { buf, index }) }) end
-- out[row * 16 + col] = value, a SINK
local function kernel(out, index, value)
  return UOp.new("SINK", VOID, { UOp.new("STORE", VOID, { UOp.new("INDEX", out.dtype, { out, index }), value }) })
end

local function ops(sink)
  local n = {}
  for _, u in ipairs(sink:toposort()) do n[u.op] = (n[u.op] or 0) + 1 end
  return n
end

local GPU = { renderer = { gpu = { local_bytes = 48 * 1024 } } }

describe("the pass \"stage transposes\"", function()
  local row, col = range(16, 1), range(16, 2)
  local out = param(F32, 0, 256)

  it("reads a load that steps along the other thread axis than the store through a padded tile", function()
    -- out[row][col] = x[col][row]: the store steps by one along col, the load along row
    local x = param(F32, 1, 256)
    local sink = kernel(out, row * 16 + col, load(x, col * 16 + row))
    local staged = run_stage(sink, GPU)
    local n = ops(staged)
    assert.are.same({ 1, 1, 2 }, { n.DEFINE_LOCAL, n.BARRIER, n.STORE })
    local tile
    for _, u in ipairs(staged:toposort()) do
      if u.op == "DEFINE_LOCAL" then tile = u end
    end
    assert.are.same({ 0, 16 * 17 }, tile.arg)
    -- the global load now has the thread axes exchanged: it steps by one along col
    local global_index
    for _, u in ipairs(staged:toposort()) do
      if u.op == "INDEX" and u.src[1] == x then global_index = u.src[2] end
    end
    assert.are.equal(row * 16 + col, global_index)
  end)

  it("leaves loads that already step along the store's axis, or not at all along it, and gathers", function()
    local y, v = param(F32, 1, 256), param(F32, 2, 16)
    local straight = kernel(out, row * 16 + col, load(y, row * 16 + col) + load(v, row))
    assert.are.equal(straight, run_stage(straight, GPU))
    -- an index loaded from memory (by a load that steps along the store's axis)
    local where = param(tcl.dtype "int32", 2, 256)
    local gathered = UOp.new("CAST", IDX, { load(where, row * 16 + col) })
    local gather = kernel(out, row * 16 + col, load(param(F32, 1, 256), gathered))
    assert.are.equal(gather, run_stage(gather, GPU))
  end)

  it("needs a square workgroup of two thread axes, and no reductions", function()
    local x = param(F32, 1, 512)
    local wide = range(32, 2)
    local oblong = kernel(param(F32, 0, 512), row * 32 + wide, load(x, wide * 16 + row))
    assert.are.equal(oblong, run_stage(oblong, GPU))
    local group = range(16, 2, "group_reduce")
    local grouped = kernel(out, row * 16 + group, load(x, group * 16 + row))
    assert.are.equal(grouped, run_stage(grouped, GPU))
  end)

  it("stages no more tiles than the target's local memory holds", function()
    local a, b = param(F64, 1, 256), param(F64, 2, 256)
    local sink = kernel(param(F64, 0, 256), row * 16 + col, load(a, col * 16 + row) + load(b, col * 16 + row))
    assert.are.equal(2, ops(run_stage(sink, GPU)).DEFINE_LOCAL)
    -- one tile of 16 x 17 float64 is 2176 bytes
    local small = { renderer = { gpu = { local_bytes = 3000 } } }
    assert.are.equal(1, ops(run_stage(sink, small)).DEFINE_LOCAL)
    assert.are.equal(sink, run_stage(sink, { renderer = { gpu = { local_bytes = 2000 } } }))
  end)
end)
