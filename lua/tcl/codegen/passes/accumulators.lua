-- tcl.codegen.passes.accumulators — the pass "lower reduces": every REDUCE becomes an accumulator in
-- a DEFINE_REG. Layer: codegen (a pass of rules of the pipeline, lua/tcl/patterns/pipeline.lua:
-- M.rules, with the context M.context gives).
--
-- REDUCE(value, r...) becomes, with acc a fresh one-element DEFINE_REG:
--   init = STORE(INDEX(AFTER(acc, outer ranges...), 0), identity)   before the reduce loops
--   cur  = INDEX(AFTER(acc, init, r...), 0)                          inside them
--   END(...END(STORE(cur, op(LOAD(cur), value)), r_last)..., r_first)
--   result LOAD(INDEX(AFTER(acc, that END), 0))                      after them
-- The outer ranges (those the value uses besides its own) keep init inside their loops, so
-- the accumulator restarts on each of their iterations; AFTER(acc, init, r...) keeps the
-- accumulating load inside the reduce loops and after init. Accumulators take DEFINE_REG
-- slots after the kernel's own.
--
-- Vector lanes. A range of axis type "vector" among r... (an unroll axis that tcl.codegen.passes.expand
-- kept as lanes) is no loop: the accumulator holds one partial result per lane, updated inside
-- the other ranges' loops, and the result is REDUCE(acc's value, that range), which the
-- renderer combines across the lanes (a REDUCE over vector ranges only gets an accumulator
-- too, so that its vector range has an END like every range).
local UOp = require "tcl.uop"
local P = require "tcl.pattern"
local core = require "tcl.core"
local linearize = require "tcl.codegen.driver.linearize"
local lowering = require "tcl.patterns.lowering"

local M = {}

local new = UOp.new
local INDEX, VOID = core.dtype "index", core.dtype "void"

local function lower_reduce(m, ctx)
  local red = m.root
  local d, op = red.dtype, lowering.reduce_op(red)
  local src = red.src
  local value = src[1]
  if value.dtype ~= d then
    error(string.format("REDUCE: dtype %s differs from its value's %s", tostring(d), tostring(value.dtype)), 0)
  end
  local rr, own, lanes = {}, {}, {}
  for i = 2, #src do
    if src[i].op ~= "RANGE" then
      error(string.format("REDUCE: source %d is a %s, not a RANGE", i, src[i].op), 0)
    end
    if src[i]:axis_type() == "vector" then lanes[#lanes + 1] = src[i]
    else rr[#rr + 1] = src[i] end
    own[src[i]] = true
  end
  if #rr == 0 and #lanes == 0 then return value end
  local outer, open = {}, false
  for _, r in ipairs(linearize.ranges_used(value)) do
    if not own[r] then outer[#outer + 1] = r else open = true end
  end
  -- over vector ranges only, already lowered (its value, the accumulator, has them closed):
  -- the renderer's
  if #rr == 0 and not open then return nil end
  -- the vector ranges close innermost, inside the loops (they open none)
  for _, r in ipairs(lanes) do rr[#rr + 1] = r end

  local slot = ctx.next_slot
  ctx.next_slot = slot + 1
  local zero = UOp.const(INDEX, 0)
  local acc = new("DEFINE_REG", d, nil, { slot, 1 })
  local acc_outer = #outer > 0 and new("AFTER", d, { acc, table.unpack(outer) }) or acc
  local init = new("STORE", VOID, { new("INDEX", d, { acc_outer, zero }), lowering.identity(op, d) })
  local cur = new("INDEX", d, { new("AFTER", d, { acc, init, table.unpack(rr) }), zero })
  local e = new("STORE", VOID, { cur, new(op, d, { new("LOAD", d, { cur }), value }) })
  for i = #rr, 1, -1 do e = new("END", VOID, { e, rr[i] }) end
  local result = new("LOAD", d, { new("INDEX", d, { new("AFTER", d, { acc, e }), zero }) })
  if #lanes == 0 then return result end
  return new("REDUCE", d, { result, table.unpack(lanes) }, red.arg, red.tag)
end

M.rules = P.rules {
  { P.op("REDUCE", nil, { name = "root" }), lower_reduce },
}

--- The rewrites' context: { next_slot = the first DEFINE_REG slot the kernel leaves free }, or
-- nil when the kernel has no REDUCE.
function M.context(sink)
  for _, u in ipairs(sink:toposort()) do
    if u.op == "REDUCE" then return { next_slot = sink:free_slot("DEFINE_REG") } end
  end
  return nil
end

return M
