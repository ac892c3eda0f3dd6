-- tcl.codegen.passes.group_reduce — the pass "group reduces": a reduction split across the threads
-- of a workgroup (GROUP, GROUPTOP opts: ranges of axis type "group_reduce") meets in local
-- memory. Layer: codegen (a pass of rules of the pipeline, for GPU renderers only: M.rules,
-- with the workgroup's facts that M.context finds in the whole kernel).
--
-- REDUCE(v, reduce ranges..., group ranges...) becomes
--   partial = REDUCE(v, reduce ranges...)        each thread's share (v when there is none)
--   STORE(INDEX(local, slot of this thread), partial); BARRIER
--   a tree over the group's slots when its size is a power of two: log2(size) steps, each
--   combining slot i with slot i + half in the threads i < half, then a barrier; the result
--   is the group's first slot. Other sizes: REDUCE(LOAD(INDEX(AFTER(local, BARRIER), slot of
--   group thread j)), j) over a fresh range, in every thread
-- where local is a DEFINE_LOCAL with one slot per thread of the workgroup: the slot counts the
-- local and group_reduce ranges, group ones innermost, so the group's partials lie side by
-- side. Every thread of a group then holds the same result, so the kernel's global stores are
-- gated to the first thread of each group range (two threads storing one element would be a
-- race). A second barrier after the loads keeps a later store into the same slots (the
-- reduction inside an outer loop) from overtaking a thread still reading them: the result is
-- used as AFTER(result, BARRIER).
--
-- On a target with warps of 32 (CUDA, Metal, EMU's GPU mode with theirs), a group of a power of
-- two threads in a workgroup of whole warps combines its partials with SHUFFLE (docs/design/encodings.md)
-- instead, when the dtype travels between lanes: the pass "gpu dims" puts the group ranges
-- innermost in the workgroup's linear thread order, so a thread's slot is its linear index and
-- a group's threads are consecutive lanes:
--   a group of up to 32 threads: log2(size) butterfly steps, v = op(v, SHUFFLE(v, m)) for
--     m = size/2 .. 1, and every thread holds the result: no local memory, no barrier;
--   a larger group: the butterfly over each warp (m = 16 .. 1), lane 0 of each warp stores the
--     warp's result in local memory, a barrier, then every lane loads the partial of warp
--     (lane mod W) of its group (W warps) and a butterfly over m = W/2 .. 1 combines them:
--     2 barriers (one for reuse, as above) where the tree takes log2(size) + 2.
local UOp = require "tcl.uop"
local P = require "tcl.pattern"
local core = require "tcl.core"
local thread_order = require "tcl.codegen.passes.thread_order"

local M = {}

local new = UOp.new
local INDEX = core.dtype "index"
local VOID = core.dtype "void"
local BOOL = core.dtype "bool"

-- Threads of a warp (SHUFFLE's: src/core/shuffle.h).
local WARP = 32

local const = UOp.const

-- The binary op of each reduction.
local ALU_OF = { ADD = "ADD", MUL = "MUL", MAX = "MAX" }

-- Butterfly steps over the lanes of aligned blocks of `width` lanes (a power of two up to a
-- warp): after them every lane holds op of the block's values.
local function butterfly(v, op, dtype, width)
  local m = width // 2
  while m >= 1 do
    v = new(op, dtype, { v, new("SHUFFLE", dtype, { v }, m) })
    m = m // 2
  end
  return v
end

local function grouped(u)
  if u.op ~= "REDUCE" then return false end
  for i = 2, #u.src do
    if u.src[i]:axis_type() == "group_reduce" then return true end
  end
  return false
end

--- The rewrites' context, or nil when no reduction is shared by a workgroup's threads: the
-- workgroup's facts (its threads, the group's size, this thread's slot, whether shuffles can
-- combine a group, the gate of the first thread of each group) and the free axis ids and
-- local memory slots, which the rewrites hand out.
function M.context(sink, ctx)
  local order = sink:toposort()
  local any = false
  for _, u in ipairs(order) do if grouped(u) then any = true break end end
  if not any then return nil end

  -- the workgroup's ranges: local ones first, group ones innermost; and the free axis ids
  local locals, groups = {}, {}
  for _, u in ipairs(order) do
    local t = u:axis_type()
    if t == "local" then locals[#locals + 1] = u elseif t == "group_reduce" then groups[#groups + 1] = u end
  end
  local by_axis = function(a, b) return a:axis_id() < b:axis_id() end
  table.sort(locals, by_axis)
  table.sort(groups, by_axis)
  local threads, group_threads = 1, 1
  for _, r in ipairs(locals) do threads = threads * r:range_size() end
  for _, r in ipairs(groups) do group_threads = group_threads * r:range_size() end
  threads = threads * group_threads

  -- this thread's slot, and its group's first slot (the local part times the group size)
  local function linear(ranges)
    local index
    for _, r in ipairs(ranges) do
      index = index and index * const(INDEX, r:range_size()) + r or r
    end
    return index
  end
  local local_part = linear(locals)
  local group_part = linear(groups)
  local group_base = local_part and local_part * const(INDEX, group_threads) or nil
  local own_slot = group_base and group_base + group_part or group_part

  -- shuffles need a group's threads to be consecutive lanes: the thread order "gpu dims" will
  -- pick (tcl.codegen.passes.thread_order) puts the group ranges innermost, as it does unless that
  -- costs sectors of memory (a column sum: its groups then meet through local memory)
  local warp = ctx and ctx.renderer and ctx.renderer.gpu and ctx.renderer.gpu.warp
  local lanes_in_order = warp == WARP and threads % WARP == 0 and group_threads & (group_threads - 1) == 0
  if lanes_in_order then -- the order is only asked when shuffles could use it
    local all = { table.unpack(locals) }
    for _, g in ipairs(groups) do all[#all + 1] = g end
    local lanes = thread_order.order(all, thread_order.accesses(sink), false, false)
    for i = 1, #groups do lanes_in_order = lanes_in_order and lanes[i]:axis_type() == "group_reduce" end
  end

  local first_of_group -- gate: this thread is the first of each group range
  for _, g in ipairs(groups) do
    local is_first = new("CMPEQ", BOOL, { g, const(INDEX, 0) })
    first_of_group = first_of_group and new("AND", BOOL, { first_of_group, is_first }) or is_first
  end
  return { threads = threads, group_threads = group_threads, group_part = group_part, group_base = group_base,
    own_slot = own_slot, lanes_in_order = lanes_in_order, first_of_group = first_of_group,
    next_axis = sink:free_axis_id(), next_slot = sink:free_slot("DEFINE_LOCAL") }
end

-- A REDUCE over group ranges: its partials meet in local memory (or through shuffles).
local function lower(red, ctx)
  if not grouped(red) then return nil end
  local threads, group_threads, group_part = ctx.threads, ctx.group_threads, ctx.group_part
  local group_base, own_slot = ctx.group_base, ctx.own_slot
  local value, keep = red.src[1], {}
  for i = 2, #red.src do
    if red.src[i]:axis_type() ~= "group_reduce" then keep[#keep + 1] = red.src[i] end
  end
  local partial = value
  if #keep > 0 then
    local src = { value }
    for _, r in ipairs(keep) do src[#src + 1] = r end
    partial = new("REDUCE", red.dtype, src, red.arg)
  end
  local op = ALU_OF[red.arg]
  if ctx.lanes_in_order and core.shuffles(red.dtype) then
    if group_threads <= WARP then return butterfly(partial, op, red.dtype, group_threads) end
    local warps = group_threads // WARP -- per group, at most 32 (1024 threads)
    local buf = new("DEFINE_LOCAL", red.dtype, nil, { ctx.next_slot, threads // WARP })
    ctx.next_slot = ctx.next_slot + 1
    local lane = group_part % const(INDEX, WARP)
    local store = new("STORE", VOID, { new("INDEX", red.dtype, { buf, own_slot // const(INDEX, WARP) }),
      butterfly(partial, op, red.dtype, WARP), new("CMPEQ", BOOL, { lane, const(INDEX, 0) }) })
    local seen = new("AFTER", red.dtype, { buf, new("BARRIER", VOID, { store }) })
    local slot = lane % const(INDEX, warps)
    if group_base then slot = group_base // const(INDEX, WARP) + slot end
    local total = butterfly(new("LOAD", red.dtype, { new("INDEX", red.dtype, { seen, slot }) }), op, red.dtype, warps)
    return new("AFTER", red.dtype, { total, new("BARRIER", VOID, { total }) })
  end
  local buf = new("DEFINE_LOCAL", red.dtype, nil, { ctx.next_slot, threads })
  ctx.next_slot = ctx.next_slot + 1
  local store = new("STORE", VOID, { new("INDEX", red.dtype, { buf, own_slot }), partial })
  local barrier = new("BARRIER", VOID, { store })
  local total
  if group_threads & (group_threads - 1) == 0 then
    -- a tree: at each step the first half of the group's threads combine their slot with the
    -- slot half a group further, then a barrier; log2(size) steps instead of a loop over
    -- the whole group in every thread
    local half = group_threads // 2
    while half >= 1 do
      local active = new("CMPLT", BOOL, { group_part, const(INDEX, half) })
      local seen = new("AFTER", red.dtype, { buf, barrier })
      local mine = new("LOAD", red.dtype, { new("INDEX", red.dtype, { seen, own_slot }), active })
      local other = new("LOAD", red.dtype, { new("INDEX", red.dtype, { seen, own_slot + const(INDEX, half) }),
        active })
      local combined = new(op, red.dtype, { mine, other })
      barrier = new("BARRIER", VOID, { new("STORE", VOID, { new("INDEX", red.dtype, { seen, own_slot }), combined,
        active }) })
      half = half // 2
    end
    local first = group_base or const(INDEX, 0)
    total = new("LOAD", red.dtype, { new("INDEX", red.dtype, { new("AFTER", red.dtype, { buf, barrier }), first }) })
  else
    -- any other size: every thread reduces the group's slots in a loop
    local j = new("RANGE", INDEX, { const(INDEX, group_threads) }, { ctx.next_axis, "reduce" })
    ctx.next_axis = ctx.next_axis + 1
    local slot = group_base and group_base + j or j
    local seen = new("AFTER", red.dtype, { buf, barrier })
    local load = new("LOAD", red.dtype, { new("INDEX", red.dtype, { seen, slot }) })
    total = new("REDUCE", red.dtype, { load, j }, red.arg)
  end
  return new("AFTER", red.dtype, { total, new("BARRIER", VOID, { total }) })
end

-- A store to a kernel buffer: only the first thread of each group stores (they all hold the
-- result).
local function first_thread_stores(m, ctx)
  local store, first = m.store, ctx.first_of_group
  local at, gate = store.src[1], store.src[3]
  if at.op ~= "INDEX" or at.src[1].op ~= "PARAM" then return nil end
  if gate == first or (gate and gate.op == "AND" and gate.src[2] == first) then return nil end -- gated already
  local src = { store.src[1], store.src[2], gate and new("AND", BOOL, { gate, first }) or first }
  return new("STORE", VOID, src, store.arg, store.tag)
end

M.rules = P.rules {
  { P.op("REDUCE", nil, { name = "red" }), function(m, ctx) return lower(m.red, ctx) end },
  { P.op("STORE", nil, { name = "store" }), first_thread_stores },
}

return M
