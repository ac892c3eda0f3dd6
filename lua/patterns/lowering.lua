-- patterns/lowering.lua — rule sets that lower a scheduled kernel to what a device runs:
-- explicit, gated LOADs; accumulators for REDUCE; one END per loop. Layer: rule files
-- (lua/patterns), run in the order of patterns/pipeline.lua.
--
-- What the scheduler hands over (src/core/ENCODINGS.md, "Kernels"): SINK(arg {name}) of
-- STOREs and ENDs; STORE(INDEX(PARAM, i), value[, gate]) inside ENDs that close the output
-- loops (one RANGE per END, or END(x, r1, r2, ...) with the outermost range first); values
-- read a buffer either as INDEX(PARAM, i) used directly as a value or as LOAD(INDEX(...)
-- [, gate]), both are fine; REDUCE(value, RANGE...) with arg "ADD", "MUL" or "MAX" (the
-- value's dtype), its ranges used only inside it. A read whose index may fall outside its
-- buffer must be gated: LOAD(INDEX, gate), or an INDEX directly under WHERE(valid, INDEX,
-- 0), which becomes LOAD(INDEX, valid). Nothing else is gated here: an ungated read out of
-- bounds is an error at run time (EMU), never a silent read.
--
-- What comes out (see tcl.linearize and src/runtime/emu.h): no REDUCE, every buffer read a
-- LOAD, every RANGE closed by exactly one END(deps..., RANGE). Two nodes beyond ENCODINGS'
-- table appear: AFTER(x, deps...) = x once deps have run (orders accumulator accesses), and
-- END with several deps before its range (merged loops).
--
--   M.empty        loops of size 0 removed: REDUCE over them -> identity, END -> nothing
--   M.early        INDEX used as a value -> LOAD (gated by a WHERE directly above it);
--                  WHERE(g, LOAD gated by g, 0) -> the load; END over several ranges -> nested ENDs
--   M.reduces      REDUCE -> accumulator in a DEFINE_REG (needs ctx {next_slot = n})
--   M.lower_reduces(sink)   runs M.reduces with fresh DEFINE_REG slots
--   M.merge_ends(sink)      one END per RANGE
local tcl = require "tcl"
local P = require "tcl.pattern"
local linearize = require "tcl.linearize"

local M = {}

local uop = tcl.uop
local BOOL, INDEX, VOID = tcl.dtype "bool", tcl.dtype "index", tcl.dtype "void"

--- A CONST of dtype d with the arg kind ENCODINGS asks for.
local const = require("tcl.uop").const


local REDUCE_OPS = { ADD = true, MUL = true, MAX = true }

local function reduce_op(red)
  local op = red.arg
  if type(op) == "table" then op = op[1] end
  if not REDUCE_OPS[op] then
    error(string.format("REDUCE: op must be ADD, MUL or MAX, got %s", tostring(op)), 0)
  end
  return op
end

local function identity(op, d)
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
      if empty_range(src[i]) then return identity(reduce_op(m.root), m.root.dtype) end
    end
  end },
  -- the body of an END over an empty range never runs: nothing is left (an empty GROUP)
  { P.op("END", nil, { name = "root" }), function(m)
    for _, s in ipairs(m.root.src) do
      if empty_range(s) then return uop("GROUP", VOID, {}) end
    end
  end },
}

---------------------------------------------------------------------------------------------
-- loads and gates

-- Ops whose sources (from `first_value[op]` on, default 1) are values: an INDEX there is a read.
local VALUE_USERS, first_value = {}, { STORE = 2, INDEX = 2 }
for name in pairs(tcl.groups.ALU) do VALUE_USERS[#VALUE_USERS + 1] = name end
for _, name in ipairs { "CAST", "BITCAST", "REDUCE", "STORE", "INDEX" } do VALUE_USERS[#VALUE_USERS + 1] = name end
table.sort(VALUE_USERS)

local function add_loads(m)
  local u = m.root
  local src, changed = u.src, false
  for i = first_value[u.op] or 1, #src do
    local s = src[i]
    if s.op == "INDEX" then
      src[i] = uop("LOAD", s.dtype, { s })
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
    return uop("LOAD", m.at.dtype, { m.at, m.g })
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
      e = { uop("END", VOID, e) }
    end
    return e[1]
  end },
}

---------------------------------------------------------------------------------------------
-- reductions -> accumulators

-- REDUCE(value, r...) becomes, with acc a fresh one-element DEFINE_REG:
--   init = STORE(INDEX(AFTER(acc, outer ranges...), 0), identity)   before the reduce loops
--   cur  = INDEX(AFTER(acc, init, r...), 0)                          inside them
--   END(...END(STORE(cur, op(LOAD(cur), value)), r_last)..., r_first)
--   result LOAD(INDEX(AFTER(acc, that END), 0))                      after them
-- The outer ranges (those the value uses besides its own) keep init inside their loops, so
-- the accumulator restarts on each of their iterations; AFTER(acc, init, r...) keeps the
-- accumulating load inside the reduce loops and after init.
local function lower_reduce(m, ctx)
  local red = m.root
  local d, op = red.dtype, reduce_op(red)
  local src = red.src
  local value = src[1]
  if value.dtype ~= d then
    error(string.format("REDUCE: dtype %s differs from its value's %s", tostring(d), tostring(value.dtype)), 0)
  end
  local rr, own = {}, {}
  for i = 2, #src do
    if src[i].op ~= "RANGE" then
      error(string.format("REDUCE: source %d is a %s, not a RANGE", i, src[i].op), 0)
    end
    rr[#rr + 1] = src[i]
    own[src[i]] = true
  end
  if #rr == 0 then return value end
  local outer = {}
  for _, r in ipairs(linearize.ranges_used(value)) do
    if not own[r] then outer[#outer + 1] = r end
  end

  local slot = ctx.next_slot
  ctx.next_slot = slot + 1
  local zero = const(INDEX, 0)
  local acc = uop("DEFINE_REG", d, nil, { slot, 1 })
  local acc_outer = acc
  if #outer > 0 then
    local s = { acc }
    for _, r in ipairs(outer) do s[#s + 1] = r end
    acc_outer = uop("AFTER", d, s)
  end
  local init = uop("STORE", VOID, { uop("INDEX", d, { acc_outer, zero }), identity(op, d) })
  local s = { acc, init }
  for _, r in ipairs(rr) do s[#s + 1] = r end
  local cur = uop("INDEX", d, { uop("AFTER", d, s), zero })
  local e = uop("STORE", VOID, { cur, uop(op, d, { uop("LOAD", d, { cur }), value }) })
  for i = #rr, 1, -1 do e = uop("END", VOID, { e, rr[i] }) end
  return uop("LOAD", d, { uop("INDEX", d, { uop("AFTER", d, { acc, e }), zero }) })
end

M.reduces = P.rules {
  { P.op("REDUCE", nil, { name = "root" }), lower_reduce },
}

--- The sink with every REDUCE lowered; accumulators take DEFINE_REG slots after the
-- kernel's own.
function M.lower_reduces(sink)
  local next_slot = 0
  local has_reduce = false
  for _, u in ipairs(sink:toposort()) do
    if u.op == "DEFINE_REG" then next_slot = math.max(next_slot, u.arg[1] + 1) end
    if u.op == "REDUCE" then has_reduce = true end
  end
  if not has_reduce then return sink end
  return M.reduces:rewrite(sink, { ctx = { next_slot = next_slot }, name = "lower reduces" })
end

---------------------------------------------------------------------------------------------
-- one END per RANGE

local function axis_of(r)
  local arg = r.arg
  return type(arg) == "table" and math.type(arg[1]) == "integer" and arg[1] or nil
end

--- Several ENDs of one RANGE become one END(deps..., RANGE) when their loops can be one:
-- they use the same outer ranges and neither depends on the other. Otherwise the later
-- END's loop gets a copy of the range (a fresh axis id) and stays a loop of its own.
local function merge_ends_once(sink)
  local g = linearize.analyze(sink)
  local multi_end = {} -- the ranges closed by more than one END
  for _, r in ipairs(g.ranges) do
    if g.ends[r] and #g.ends[r] > 1 then multi_end[#multi_end + 1] = r end
  end
  if #multi_end == 0 then return nil end

  local next_axis = 0
  for _, r in ipairs(g.ranges) do
    local a = axis_of(r)
    if a and a >= next_axis then next_axis = a + 1 end
  end
  local function key(set) return table.concat(set, ",") end
  local function depends(a, b) -- a uses b
    for _, u in ipairs(a:toposort()) do
      if u == b then return true end
    end
    return false
  end

  -- g.ends[r] is in toposort order, so an END can depend only on the ones before it

  local map = {}
  for _, r in ipairs(multi_end) do
    local groups = {}
    for _, e in ipairs(g.ends[r]) do
      local k, joined = key(g.uses[e]), nil
      for _, grp in ipairs(groups) do
        if grp.key == k then
          local free = true
          for _, other in ipairs(grp.ends) do
            if depends(e, other) then free = false break end
          end
          if free then joined = grp break end
        end
      end
      if joined then
        joined.ends[#joined.ends + 1] = e
        joined.member[e] = true
      else
        groups[#groups + 1] = { key = k, ends = { e }, member = { [e] = true } }
      end
    end
    for gi, grp in ipairs(groups) do
      local range, rename = r, nil
      if gi > 1 then
        local arg = r.arg
        local new_arg = { next_axis }
        if type(arg) == "table" then for i = 2, #arg do new_arg[i] = arg[i] end end
        next_axis = next_axis + 1
        range = uop("RANGE", r.dtype, r.src, new_arg, r.tag)
        -- r becomes the copy in this group's bodies, but not inside the other loops of r
        -- that they depend on (mapping those ENDs to themselves stops the substitution)
        rename = { [r] = range }
        for _, other in ipairs(g.ends[r]) do
          if not grp.member[other] then rename[other] = other end
        end
      end
      local deps, seen = {}, {}
      for _, e in ipairs(grp.ends) do
        local s = g.src[e]
        for i = 1, #s - 1 do
          local d = s[i]
          if rename then d = P.substitute(d, rename) end
          if not seen[d] then seen[d] = true deps[#deps + 1] = d end
        end
      end
      deps[#deps + 1] = range
      local merged = uop("END", VOID, deps)
      for _, e in ipairs(grp.ends) do map[e] = merged end
    end
  end
  return P.substitute(sink, map)
end

function M.merge_ends(sink)
  -- substitute does not look inside a replacement, so ENDs nested in merged ones are
  -- merged by the next round; each round merges at least the outermost
  for _ = 1, 1000 do
    local merged = merge_ends_once(sink)
    if not merged then return sink end
    sink = merged
  end
  error("merge ends: does not settle", 0)
end

return M
