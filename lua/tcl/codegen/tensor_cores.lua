-- tcl.codegen.tensor_cores — the pass "tensor cores": a matmul kernel the optimizer marked
-- with TC becomes warp tiles of WMMA instructions (src/core/ENCODINGS.md). Layer: codegen (a
-- hand-written pass of the pipeline, for GPU renderers with tensor cores).
--
-- The kernel (what tcl.heuristics.tensor_cores.match accepts): STOREs of f(REDUCE(ADD,
-- MUL(a, b), k)), a over (m, k), b over (k, n). It becomes one warp (32 lanes, a workgroup) per
-- M x N tile of the output: tiles of m and n (and the other output ranges) as global ranges,
-- the lane as a local one, a loop over K-steps in which each lane loads its A and B fragment
-- registers (a and b with m, k, n replaced by the positions of the layout) and its C fragment
-- from a register array, and WMMA nodes out = 0..C-1 store the new accumulators back; after
-- the loop, each lane stores f of each accumulator at its C positions.
local UOp = require "tcl.uop"
local core = require "tcl.core"
local P = require "tcl.pattern"
local tensor_cores = require "tcl.heuristics.tensor_cores"

local M = {}

local new = UOp.new
local INDEX = core.dtype "index"
local VOID = core.dtype "void"
local F32 = core.dtype "float32"
local position = tensor_cores.position

local function const(v) return new("CONST", INDEX, nil, v) end

function M.run(sink, ctx)
  local opts = type(sink.arg) == "table" and sink.arg[2]
  if type(opts) ~= "string" or not opts:find("TC(", 1, true) then return sink end
  local found, why = tensor_cores.match(sink, ctx.renderer.gpu)
  if not found then error("TC: " .. why, 0) end
  local shape, m, n, k = found.shape, found.m, found.n, found.k
  local next_axis = 0
  for _, u in ipairs(sink:toposort()) do
    if u.op == "RANGE" and type(u.arg) == "table" and u.arg[1] >= next_axis then next_axis = u.arg[1] + 1 end
  end
  local function range(size, kind)
    local r = new("RANGE", INDEX, { const(size) }, { next_axis, kind })
    next_axis = next_axis + 1
    return r
  end
  local tile_m, tile_n = range(m.src[1].arg // shape.m, "global"), range(n.src[1].arg // shape.n, "global")
  local lane = range(32, "local")
  local step = range(k.src[1].arg // shape.k, "reduce")
  local others = {}
  for _, r in ipairs(found.outputs) do if r ~= m and r ~= n then others[#others + 1] = r end end

  local acc = new("DEFINE_REG", F32, nil, { 0, shape.regs[3] })
  local function acc_at(i, after)
    return new("INDEX", F32, { new("AFTER", F32, { acc, table.unpack(after) }), const(i) })
  end
  local init = {}
  for i = 0, shape.regs[3] - 1 do
    init[#init + 1] = new("STORE", VOID, { acc_at(i, { tile_m, tile_n, lane, table.unpack(others) }),
      new("CONST", F32, nil, 0.0) })
  end
  local init_done = new("GROUP", VOID, init)
  local sources = {}
  for i = 0, shape.regs[1] - 1 do
    local row, col = position(shape, "A", lane, i)
    sources[#sources + 1] = P.substitute(found.a, { [m] = tile_m * const(shape.m) + row,
      [k] = step * const(shape.k) + col })
  end
  for i = 0, shape.regs[2] - 1 do
    local row, col = position(shape, "B", lane, i)
    sources[#sources + 1] = P.substitute(found.b, { [k] = step * const(shape.k) + row,
      [n] = tile_n * const(shape.n) + col })
  end
  for i = 0, shape.regs[3] - 1 do
    sources[#sources + 1] = new("LOAD", F32, { acc_at(i, { init_done, step }) })
  end
  local updates = {}
  for i = 0, shape.regs[3] - 1 do
    local d = new("WMMA", F32, sources, { found.name, i })
    updates[#updates + 1] = new("STORE", VOID, { acc_at(i, { init_done, step }), d })
  end
  local loop = new("END", VOID, { new("GROUP", VOID, updates), step })

  -- the epilogue at each of the lane's C positions
  local stores = {}
  for i = 0, shape.regs[3] - 1 do
    local row, col = position(shape, "C", lane, i)
    local total = new("LOAD", F32, { acc_at(i, { loop }) })
    local map = { [found.reduce] = total, [m] = tile_m * const(shape.m) + row, [n] = tile_n * const(shape.n) + col }
    stores[#stores + 1] = P.substitute(found.store, map)
  end
  local body = new("GROUP", VOID, stores)
  for _, r in ipairs { lane, tile_n, tile_m, table.unpack(others) } do body = new("END", VOID, { body, r }) end
  return new("SINK", VOID, { body }, sink.arg, sink.tag)
end

return M
