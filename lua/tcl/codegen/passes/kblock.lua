-- tcl.codegen.passes.kblock — the pass "kblock": lowers a kblock axis (the KBLOCK opt, src/opt/kernel_opt.h:
-- cache blocking of a reduction) into a loop over blocks around the output loops, with the
-- partial results kept in the output buffer between blocks. Layer: codegen (a hand-written
-- pass of the pipeline, lua/tcl/patterns/pipeline.lua), right after the optimizer.
--
-- The optimizer leaves STORE(out[i], f(REDUCE(v, kb, k...))) with kb the kblock range. Block kb
-- reduces its own steps and combines them with what the blocks before it left in out[i]:
--   partial = REDUCE(v, k...)
--   total   = op(WHERE(kb == 0, identity, LOAD(out[i], gate kb != 0)), partial)
--   STORE(out[i], WHERE(kb < last, total, f(total)))
-- so the last block stores the finished value (f, a bias or an activation, applied once), and
-- kb's loop goes inside the thread axis and around every other loop of the store.
local UOp = require "tcl.uop"
local core = require "tcl.core"
local lowering = require "tcl.patterns.lowering"
local P = require "tcl.pattern"

local M = {}

local new, const = UOp.new, UOp.const
local INDEX, BOOL, VOID = core.dtype "index", core.dtype "bool", core.dtype "void"

--- The sink with its kblock axis lowered (unchanged when it has none).
function M.run(sink)
  local kb, reduce
  for _, u in ipairs(sink:toposort()) do
    if u:axis_type() == "kblock" then kb = u end
    if u.op == "REDUCE" then
      for i = 2, #u.src do
        if u.src[i]:axis_type() == "kblock" then reduce = u end
      end
    end
  end
  if not kb then return sink end
  -- what KBLOCK's checks guarantee (src/opt/kernel_opt.c, kblock_obstacle)
  if not reduce or #sink.src ~= 1 then error("kblock: the kernel is not one store of one reduction", 0) end
  local ranges, store = {}, sink:source(1)
  while store.op == "END" do
    ranges[#ranges + 1] = store:source(2)
    store = store:source(1)
  end
  if store.op ~= "STORE" then error("kblock: the kernel is not one store of one reduction", 0) end
  local d, op = reduce.dtype, lowering.reduce_op(reduce)
  local rest = { reduce:source(1) }
  for i = 2, #reduce.src do
    if reduce.src[i] ~= kb then rest[#rest + 1] = reduce.src[i] end
  end
  local partial = #rest == 1 and rest[1] or new("REDUCE", d, rest, reduce.arg, reduce.tag)
  local blocks = kb:range_size()
  local first = new("CMPEQ", BOOL, { kb, const(INDEX, 0) })
  local later = new("CMPNE", BOOL, { kb, const(INDEX, 0) })
  local at, gate = store:source(1), store.src[3]
  local before = new("LOAD", d, { at, gate and new("AND", BOOL, { gate, later }) or later })
  local prev = new("WHERE", d, { first, lowering.identity(op, d), before })
  local total = new(op, d, { prev, partial })
  local finished = P.substitute(store:source(2), { [reduce] = total })
  local not_last = new("CMPLT", BOOL, { kb, const(INDEX, blocks - 1) })
  local value = finished == total and total or new("WHERE", d, { not_last, total, finished })
  local e = new("STORE", VOID, { at, value, gate })
  -- ranges[] is outermost first: kb goes after the thread axes
  local placed = false
  for i = #ranges, 0, -1 do
    local r = ranges[i]
    if not placed and (r == nil or r:axis_type() == "thread") then
      e = new("END", VOID, { e, kb })
      placed = true
    end
    if r then e = new("END", VOID, { e, r }) end
  end
  return sink:replace { src = { e } }
end

return M
