-- tcl.patterns.lowering — rule sets that lower a scheduled kernel to what a device runs:
-- loops of size 0 removed, explicit and gated LOADs, one range per END. Layer: rule files
-- (lua/tcl/patterns), run in the order of lua/tcl/patterns/pipeline.lua; the passes after
-- them (accumulators, merged ENDs, ...) are in lua/tcl/codegen/passes/.
--
-- What the scheduler hands over (docs/design/encodings.md, "Kernels"): SINK(arg {name}) of
-- STOREs and ENDs; STORE(INDEX(PARAM, i), value[, gate]) inside ENDs that close the output
-- loops (one RANGE per END, or END(x, r1, r2, ...) with the outermost range first); values
-- read a buffer either as INDEX(PARAM, i) used directly as a value or as LOAD(INDEX(...)
-- [, gate]), both are fine; REDUCE(value, RANGE...) with arg "ADD", "MUL" or "MAX" (the
-- value's dtype), its ranges used only inside it. A read whose index may fall outside its
-- buffer must be gated: LOAD(INDEX, gate), or an INDEX directly under WHERE(valid, INDEX,
-- 0), which becomes LOAD(INDEX, valid). Nothing else is gated here: an ungated read out of
-- bounds is an error at run time (EMU), never a silent read.
--
-- What comes out of the whole pipeline (see tcl.codegen.driver.linearize and src/runtime/emu/emu.h):
-- no REDUCE, every buffer read a LOAD, every RANGE closed by exactly one END(deps...,
-- RANGE). Two nodes beyond docs/design/encodings.md's table appear: AFTER(x, deps...) = x once deps have
-- run (orders accumulator accesses), and END with several deps before its range (merged
-- loops).
--
--   M.empty        loops of size 0 removed: REDUCE over them -> identity, END -> nothing
--   M.early        INDEX used as a value -> LOAD (gated by a WHERE directly above it);
--                  WHERE(g, LOAD gated by g, 0) -> the load; END over several ranges -> nested ENDs
--   M.reduce_op(reduce), M.identity(op, dtype)   the REDUCE facts the accumulators share
local UOp = require "tcl.uop"
local P = require "tcl.pattern"
local core = require "tcl.core"

local M = {}

local new, const = UOp.new, UOp.const
local BOOL, VOID = core.dtype "bool", core.dtype "void"

local REDUCE_OPS = { ADD = true, MUL = true, MAX = true }

--- The op of a REDUCE node ("ADD", "MUL" or "MAX"); an error for anything else.
function M.reduce_op(red)
  local op = red.arg
  if type(op) == "table" then op = op[1] end
  if not REDUCE_OPS[op] then
    error(string.format("REDUCE: op must be ADD, MUL or MAX, got %s", tostring(op)), 0)
  end
  return op
end

--- The identity of a reduction: what a reduction over nothing gives.
function M.identity(op, d)
  if op == "ADD" then return const(d, 0) end
  if op == "MUL" then return const(d, 1) end
  if d == BOOL then return const(d, false) end
  if d.is_float then return const(d, -math.huge) end
  return const(d, d.min)
end

--- Whether r is a RANGE of a constant size <= 0: its loop never runs.
local function empty_range(r)
  if r.op ~= "RANGE" then return false end
  local n = r:source(1)
  return n.op == "CONST" and n.arg <= 0
end

---------------------------------------------------------------------------------------------
-- empty loops. They go first: the linearizer hoists nodes out of loops they do not use,
-- which would run the reads of a loop that never runs (symbolic may already have dropped
-- the empty range from an index, whose bounds it cannot know).

M.empty = P.rules {
  -- a REDUCE over an empty range is its identity
  { P.op("REDUCE", nil, { name = "root" }), function(m)
    local src = m.root.src
    for i = 2, #src do
      if empty_range(src[i]) then return M.identity(M.reduce_op(m.root), m.root.dtype) end
    end
  end },
  -- the body of an END over an empty range never runs: nothing is left (an empty GROUP)
  { P.op("END", nil, { name = "root" }), function(m)
    for _, s in ipairs(m.root.src) do
      if empty_range(s) then return new("GROUP", VOID, {}) end
    end
  end },
}

---------------------------------------------------------------------------------------------
-- loads and gates

-- Ops whose sources (from `first_value[op]` on, default 1) are values: an INDEX there is a read.
local VALUE_USERS, first_value = {}, { STORE = 2, INDEX = 2 }
for name in pairs(core.groups.ALU) do VALUE_USERS[#VALUE_USERS + 1] = name end
for _, name in ipairs { "CAST", "BITCAST", "REDUCE", "STORE", "INDEX" } do VALUE_USERS[#VALUE_USERS + 1] = name end
table.sort(VALUE_USERS)

local function add_loads(m)
  local u = m.root
  local src, changed = u.src, false
  for i = first_value[u.op] or 1, #src do
    local s = src[i]
    if s.op == "INDEX" then
      src[i] = new("LOAD", s.dtype, { s })
      changed = true
    end
  end
  if changed then return u:replace { src = src } end
end

--- Whether bool node `gate` is g or an AND with g among its conjuncts.
local function has_conjunct(gate, g)
  if gate == g then return true end
  if gate.op == "AND" then return has_conjunct(gate:source(1), g) or has_conjunct(gate:source(2), g) end
  return false
end

local function is_plus_zero(c)
  local v = c.arg
  if v == false then return true end
  return type(v) == "number" and v == 0 and 1 / v > 0
end

--- Whether the graph under root reads INDEX node at ungated (root is evaluated anyway).
local function reads_ungated(root, at)
  for _, x in ipairs(root:toposort()) do
    if x.op == "LOAD" and x.nsrc == 1 and x:source(1) == at then return true end
  end
  return false
end

M.early = P.rules {
  -- the pad idiom WHERE(valid, INDEX, 0) reads only where valid: LOAD(INDEX, valid) (a
  -- gated-off load reads 0), unless the condition reads the same element anyway (relu)
  { P.op("WHERE", { P.var "g", P.op("INDEX", nil, { name = "at" }), P.cvar "zero" }), function(m)
    if not is_plus_zero(m.zero) then return nil end
    if reads_ungated(m.g, m.at) then return nil end
    return new("LOAD", m.at.dtype, { m.at, m.g })
  end },
  -- WHERE(g, LOAD(i, gate), 0) with g among the gate's conjuncts is the load itself
  { P.op("WHERE", { P.var "g", P.op("LOAD", nil, { name = "load" }), P.cvar "zero" }), function(m)
    local load = m.load
    if load.nsrc == 2 and has_conjunct(load:source(2), m.g) and is_plus_zero(m.zero) then return load end
  end },
  -- an INDEX read as a value is a LOAD
  { P.op(VALUE_USERS, nil, { name = "root" }), add_loads },
  -- END(x, r1, r2, ...) -> END(END(x, r2), r1): one range per END, the first outermost
  { P.op("END", nil, { name = "root" }), function(m)
    local src = m.root.src
    local n = #src
    if n < 3 or src[n].op ~= "RANGE" or src[n - 1].op ~= "RANGE" then return nil end
    local first = n
    while first > 1 and src[first - 1].op == "RANGE" do first = first - 1 end
    if first == 1 then error("END with only ranges: it closes no body", 0) end
    local e = table.move(src, 1, first - 1, 1, {}) -- the deps, then each range innermost first
    for i = n, first, -1 do
      e[#e + 1] = src[i]
      e = { new("END", VOID, e) }
    end
    return e[1]
  end },
}

return M
