-- tcl.codegen.passes.kblock — the pass "kblock": lowers a kblock axis (the KBLOCK opt, src/opt/kernel_opt.h:
-- cache blocking of a reduction) into a loop over blocks around the output loops, with the
-- partial results kept in the output buffer between blocks. Layer: codegen (a pass of rules of
-- the pipeline, lua/tcl/patterns/pipeline.lua), right after the optimizer.
--
-- The optimizer leaves STORE(out[i], f(REDUCE(v, kb, k...))) with kb the kblock range. Block kb
-- reduces its own steps and combines them with what the blocks before it left in out[i]:
--   partial = REDUCE(v, k...)
--   total   = op(WHERE(kb == 0, identity, LOAD(out[i], gate kb != 0)), partial)
--   STORE(out[i], WHERE(kb < last, total, f(total)))
-- so the last block stores the finished value (f, a bias or an activation, applied once), and
-- kb's loop goes inside the thread axis and around every other loop of the store. Rules: the
-- STORE and the END (or SINK) kb's loop goes in are rewritten; M.context finds them.
local UOp = require "tcl.uop"
local core = require "tcl.core"
local lowering = require "tcl.patterns.lowering"
local P = require "tcl.pattern"

local M = {}

local new, const = UOp.new, UOp.const
local INDEX, BOOL, VOID = core.dtype "index", core.dtype "bool", core.dtype "void"

--- The rewrites' context, or nil when the kernel has no kblock axis: { kb = the kblock range,
-- reduce = the REDUCE over it, store = the kernel's one STORE, around = the range whose loop
-- kb's goes in, nil: around every loop }.
function M.context(sink)
  local kb, reduce
  for _, u in ipairs(sink:toposort()) do
    if u:axis_type() == "kblock" then kb = u end
    if u.op == "REDUCE" then
      for i = 2, #u.src do
        if u.src[i]:axis_type() == "kblock" then reduce = u end
      end
    end
  end
  if not kb then return nil end
  -- what KBLOCK's checks guarantee (src/opt/kernel_opt.c, kblock_obstacle)
  if not reduce or #sink.src ~= 1 then error("kblock: the kernel is not one store of one reduction", 0) end
  local store, around = sink:source(1), nil
  while store.op == "END" do
    -- the innermost thread axis: kb's loop goes right inside it
    if store:source(2):axis_type() == "thread" then around = store:source(2) end
    store = store:source(1)
  end
  if store.op ~= "STORE" then error("kblock: the kernel is not one store of one reduction", 0) end
  return { kb = kb, reduce = reduce, store = store, around = around }
end

-- The kernel's STORE of f(REDUCE(v, kb, k...)): block kb's partial combined with the blocks'
-- before it, f applied by the last block.
local function combine_blocks(m, ctx)
  local store, kb, reduce = m.store, ctx.kb, ctx.reduce
  if store ~= ctx.store then return nil end
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
  return new("STORE", VOID, { at, value, gate })
end

-- Whether u is the END of kb's loop.
local function closes(u, kb) return u.op == "END" and u.src[#u.src] == kb end

M.rules = P.rules {
  { P.op("STORE", nil, { name = "store" }), combine_blocks },
  -- kb's loop: inside the innermost thread axis, around every other loop of the store
  { P.op("END", nil, { name = "e" }), function(m, ctx)
    local e = m.e
    if ctx.around == nil or e.src[#e.src] ~= ctx.around or closes(e:source(1), ctx.kb) then return nil end
    return e:replace { src = { new("END", VOID, { e:source(1), ctx.kb }), ctx.around } }
  end },
  { P.op("SINK", nil, { name = "sink" }), function(m, ctx)
    if ctx.around ~= nil or closes(m.sink:source(1), ctx.kb) then return nil end
    return m.sink:replace { src = { new("END", VOID, { m.sink:source(1), ctx.kb }) } }
  end },
}

return M
