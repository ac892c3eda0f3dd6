-- tcl.codegen.passes.reuse_values — the pass "reuse reduced values": a reduction's costly
-- per-element value that the kernel computes again, over other ranges of the same sizes, is
-- kept in a scratch array while the reduction runs and read back where it was recomputed.
-- Layer: codegen (a hand-written pass of the pipeline, lua/tcl/patterns/pipeline.lua; why not
-- rules: below).
--
-- A row-fused softmax (tcl.schedule.realize_points, "Row fusion") is one kernel of three
-- passes over each row: the max, the sum of e(k) = exp(x[k] - max) over a reduce range k, and
-- the store of e(j) / sum over an output range j. e(j) is e(k) with k replaced by j: the same
-- graph but for its range, so the exponential runs twice per element. With
--   REDUCE(v, r...)  and  u = v with each r replaced by a range s of the same size
-- somewhere else in the kernel (the graph is hash-consed: u is found by building it), this
-- pass makes, with scratch a fresh DEFINE_REG of as many elements as the ranges r... run
-- (idx(r) = their row-major position, a vector range innermost so that its lanes are
-- contiguous):
--   REDUCE(LOAD(INDEX(AFTER(scratch, STORE(INDEX(scratch, idx(r)), v)), idx(r))), r...)
--   u  ->  LOAD(INDEX(AFTER(scratch, that REDUCE), idx(s)))
-- The store and the load after it in the reduce loop are one address (LLVM forwards the
-- value); the AFTER on the new REDUCE places every read of u after the whole reduction (the
-- linearizer orders by sources), inside the same iterations of the loops around it: u uses
-- the same outer ranges as v (everything in it but the ranges r... is the same nodes).
--
-- Which values: v holds an op that costs more than a store and a load (a transcendental, a
-- division, a square root, or an op the renderer lacks: those are decomposed into dozens of
-- ops later), and u is not in the reduction's own graph (its value would be needed before the
-- scratch is filled). The scratch holds at most MAX_BYTES (tcl.schedule.realize_points
-- ROW_FUSE_BYTES, the longest row fused: it stays in the L1 cache). Renderers: only those with
-- a stack for a thread's array (M.applies: the CPU's LLVM renderer); EMU, CUDA and Metal keep
-- recomputing, with the same values (the value stored is the value recomputed).
--
-- Not rules: u is found by building it from v and the kernel's ranges (a search over pairs of
-- nodes, not a local pattern), and both the REDUCE and every u change together.
local UOp = require "tcl.uop"
local P = require "tcl.pattern"
local core = require "tcl.core"

local M = {}

local new = UOp.new
local VOID = core.dtype "void"

--- The largest scratch array, in bytes (tcl.schedule.realize_points.ROW_FUSE_BYTES).
M.MAX_BYTES = 32768
--- The most assignments of other ranges to a reduction's ranges that are tried (each builds
-- the value once): a reduction over many ranges, each with many of the same size, is left.
M.MAX_TRIES = 256

-- ops that cost more than a store and a load, before the transcendental pass
local COSTLY = { EXP2 = true, LOG2 = true, SIN = true, COS = true, POW = true, SQRT = true, FDIV = true,
  RECIPROCAL = true }
-- the axis types of the ranges whose values are kept: loops of one thread
local KEPT = { reduce = true, vector = true }
local MATCHED = { reduce = true, vector = true, loop = true }

--- Whether the pass runs for ctx's renderer: the CPU's (LLVM; a thread's array is an alloca).
function M.applies(ctx)
  local renderer = ctx and ctx.renderer
  return renderer ~= nil and renderer.name == "llvm" and renderer.gpu == nil
end

local function costly(v, own, lacks)
  for _, u in ipairs(v:toposort()) do
    if (COSTLY[u.op] or (lacks and lacks[u.op])) and own[u] then return true end
  end
  return false
end

-- The nodes of v that depend on any of the ranges in set (the per-element part of v).
local function dependent(v, set)
  local dep = {}
  for _, u in ipairs(v:toposort()) do
    if set[u] then dep[u] = true
    else
      for _, s in ipairs(u.src) do
        if dep[s] then dep[u] = true break end
      end
    end
  end
  return dep
end

-- Every assignment of a candidate range to each range of rr (lists of candidates per range).
local function assignments(rr, cands)
  local out, pick = {}, {}
  local function walk(i)
    if i > #rr then
      local used, map = {}, {}
      for k, s in ipairs(pick) do
        if used[s] then return end
        used[s] = true
        map[rr[k]] = s
      end
      out[#out + 1] = map
      return
    end
    for _, s in ipairs(cands[i]) do
      pick[i] = s
      walk(i + 1)
    end
  end
  walk(1)
  return out
end

-- The row-major position of the ranges rr (already ordered, vector last) as an index.
local function position(rr, map)
  local idx
  for _, r in ipairs(rr) do
    local x = map and map[r] or r
    idx = idx and (idx * UOp.index_const(r:range_size()) + x) or x
  end
  return idx
end

-- One REDUCE's rewrite (the kernel, and the new REDUCE), or nil when it has nothing to reuse.
local function reuse_one(sink, red, nodes, ranges, ctx)
  local v = red.src[1]
  if v.dtype.itemsize == nil or v.dtype.itemsize <= 0 then return nil end
  local rr, vector, numel = {}, nil, 1
  for i = 2, #red.src do
    local r = red.src[i]
    local size = r.op == "RANGE" and r:range_size() or nil
    if not size or not KEPT[r:axis_type()] then return nil end
    if r:axis_type() == "vector" then
      if vector then return nil end
      vector = r
    else
      rr[#rr + 1] = r
    end
    numel = numel * size
  end
  if vector then rr[#rr + 1] = vector end
  if #rr == 0 or numel * v.dtype.itemsize > M.MAX_BYTES then return nil end
  local own = {}
  for _, r in ipairs(rr) do own[r] = true end
  if not costly(v, dependent(v, own), ctx and ctx.renderer and ctx.renderer.lacks) then return nil end

  local cands, tries = {}, 1
  for i, r in ipairs(rr) do
    local list, is_vector = {}, r:axis_type() == "vector"
    for _, s in ipairs(ranges) do
      local t = s:axis_type()
      if not own[s] and MATCHED[t] and (t == "vector") == is_vector and s:range_size() == r:range_size() then
        list[#list + 1] = s
      end
    end
    if #list == 0 then return nil end
    cands[i] = list
    tries = tries * #list
  end
  if tries > M.MAX_TRIES then return nil end
  local inside = {}
  for _, u in ipairs(red:toposort()) do inside[u] = true end
  local found = {}
  for _, map in ipairs(assignments(rr, cands)) do
    local u = P.substitute(v, map)
    if u ~= v and nodes[u] and not inside[u] then found[#found + 1] = { u = u, map = map } end
  end
  if #found == 0 then return nil end

  local scratch = new("DEFINE_REG", v.dtype, nil, { sink:free_slot("DEFINE_REG"), numel })
  local at = new("INDEX", v.dtype, { scratch, position(rr) })
  local stored = new("STORE", VOID, { at, v })
  local kept = new("LOAD", v.dtype,
    { new("INDEX", v.dtype, { new("AFTER", v.dtype, { scratch, stored }), position(rr) }) })
  local src = { kept }
  for i = 2, #red.src do src[i] = red.src[i] end
  local red2 = red:replace { src = src }
  local filled = new("AFTER", v.dtype, { scratch, red2 })
  local map = { [red] = red2 }
  for _, f in ipairs(found) do
    map[f.u] = new("LOAD", v.dtype, { new("INDEX", v.dtype, { filled, position(rr, f.map) }) })
  end
  return P.substitute(sink, map), red2
end

--- The pass: sink with every reusable reduced value kept (see the header).
function M.run(sink, ctx)
  if not M.applies(ctx) then return sink end
  local done = {}
  for _ = 1, 8 do
    local order = sink:toposort()
    local nodes, ranges, reduces = {}, {}, {}
    for _, u in ipairs(order) do
      nodes[u] = true
      if u.op == "RANGE" then ranges[#ranges + 1] = u
      elseif u.op == "REDUCE" and not done[u] then reduces[#reduces + 1] = u end
    end
    local changed = false
    for _, red in ipairs(reduces) do
      local out, red2 = reuse_one(sink, red, nodes, ranges, ctx)
      if out then
        sink, changed, done[red2] = out, true, true
        break
      end
      done[red] = true
    end
    if not changed then break end
  end
  return sink
end

return M
