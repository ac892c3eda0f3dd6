-- tcl.codegen.passes.expand — the pass "expand": upcast and unroll axes become straight-line code,
-- one copy of the computation per lane. Layer: codegen (a hand-written pass of the pipeline,
-- lua/tcl/patterns/pipeline.lua), right after the optimizer.
--
-- An UNROLL axis u of a REDUCE(value, r..., u) becomes REDUCE(op(value[u=0], value[u=1], ...),
-- r...): the lanes are combined by the reduction's op in a balanced tree, then accumulated as
-- before. An UPCAST axis of a store's END chain becomes one STORE per lane (GROUP of them)
-- inside the chain's other loops. Lanes are the computation with the axis replaced by a
-- constant, so a value that does not depend on the axis is shared by every lane (hash
-- consing): a register tile of a matmul reads each row of A once per lane of B's axis only.
-- Contiguous lanes (loads and stores at consecutive addresses, the same op on each lane)
-- are what LLVM's SLP vectorizer turns into vector instructions, so each upcast lane of a
-- unit-stride axis ends up in one lane of a vector register.
--
-- Vector lanes. For a renderer that renders vectors (ctx.renderer.vector_lanes, the largest
-- count it takes), one upcast axis of a store's chain whose lanes are consecutive elements of
-- every store (coefficient 1 in each store's index) is not copied: it stays a RANGE of axis
-- type "vector", which the renderer turns into vector values of that many lanes (LLVM vector
-- types: wide loads and stores where the memory is contiguous). The other upcast axes are
-- copied as above, so a matmul's 8 x 32 register tile is 16 copies of a 16-lane vector row,
-- not 256 scalar copies: LLVM compiles it in a fraction of the time, and an elementwise tail
-- after the reduction (bias, GELU) is computed once per vector.
--
-- The tail in a loop. When a store's value does much more than its reductions (a GELU after a
-- matmul's sum: at least EPILOGUE_LOOP_OPS ops per element), copying it once per lane of the
-- copied axes would make the kernel that much longer to compile. Instead each copy stores its
-- reductions' results in a register array (one element per copy, a vector of the vector
-- range's lanes), and one loop over the copies then computes the tail and stores it, the
-- copied axes decoded from the loop's counter: the tail is built once.
--
-- Afterwards the index arithmetic is simplified again (lane constants fold into offsets).
--
-- Not rules, but for the unroll part (unroll_rules: each REDUCE over unroll axes on its own):
-- an upcast axis is expanded over a store's whole END chain at once. Which axes stay vector
-- lanes depends on every store's index in the chain, the order of the copies on the chain's
-- order, and the tail loop on the whole stored value; the chains are rebuilt one per source
-- of the SINK.
local UOp = require "tcl.uop"
local P = require "tcl.pattern"
local core = require "tcl.core"
local affine = require "tcl.affine"
local symbolic = require "tcl.patterns.symbolic"
local transcendental = require "tcl.patterns.transcendental"

local M = {}

local new, const = UOp.new, UOp.const
local INDEX, VOID = core.dtype "index", core.dtype "void"

-- The lanes of an upcast or unroll range (its size, which must be a constant).
local function lane_count(r)
  return r:range_size() or
    error(string.format("expand: %s axis %s has no constant size", tostring(r:axis_type()), tostring(r.arg[1])), 0)
end

-- Every assignment of constants to the ranges, the last range fastest: a list of maps.
local function lanes(ranges)
  local out = { {} }
  for _, r in ipairs(ranges) do
    local grown = {}
    for _, lane in ipairs(out) do
      for v = 0, lane_count(r) - 1 do
        local m = {}
        for k, x in pairs(lane) do m[k] = x end
        m[r] = const(INDEX, v)
        grown[#grown + 1] = m
      end
    end
    out = grown
  end
  return out
end

-- op over the values in a balanced tree (more independent work than a chain).
local function tree(op, dtype, values)
  while #values > 1 do
    local next_level = {}
    for i = 1, #values, 2 do
      next_level[#next_level + 1] = values[i + 1] and new(op, dtype, { values[i], values[i + 1] }) or values[i]
    end
    values = next_level
  end
  return values[1]
end

local reduce_op = require("tcl.patterns.lowering").reduce_op

local unroll_lane_range -- (below, with the coefficients of index expressions)

local function unroll_reduce(m, ctx)
  local red = m.root
  local src = red.src
  local keep, unrolled = {}, {}
  for i = 2, #src do
    if src[i]:axis_type() == "unroll" then unrolled[#unrolled + 1] = src[i] else keep[#keep + 1] = src[i] end
  end
  if #unrolled == 0 then return nil end
  local value = src[1]
  local chosen = ctx and ctx.max_lanes and unroll_lane_range(value, unrolled, ctx.max_lanes)
  if chosen then -- lanes of a vector, reduced over as the REDUCE's last range
    local vector = new("RANGE", INDEX, { chosen:source(1) }, { chosen.arg[1], "vector" })
    value = P.substitute(value, { [chosen] = vector })
    local rest = {}
    for _, r in ipairs(unrolled) do
      if r ~= chosen then rest[#rest + 1] = r end
    end
    unrolled = rest
    keep[#keep + 1] = vector
  end
  local values = {}
  for _, lane in ipairs(lanes(unrolled)) do values[#values + 1] = P.substitute(value, lane) end
  local combined = tree(reduce_op(red), red.dtype, values)
  if #keep == 0 then return combined end
  return new("REDUCE", red.dtype, { combined, table.unpack(keep) }, red.arg, red.tag)
end

local unroll_rules = P.rules {
  { P.op("REDUCE", nil, { name = "root" }), unroll_reduce },
}

-- The unroll range of a REDUCE's value to keep as vector lanes: one of 2 to max_lanes lanes
-- (the largest such) that every load using it reads at consecutive elements (coefficient 1),
-- when the value uses no upcast axis (whose lanes may become the store's vector) or only
-- upcast axes that no load steps along by one element (a dot tile, x W^T: its rows and columns
-- are copies, each with a vector accumulator of reduce lanes); or nil.
function unroll_lane_range(value, unrolled, max_lanes)
  local indices, upcasts = {}, {}
  for _, u in ipairs(value:toposort()) do
    if u.op == "RANGE" and u:axis_type() == "upcast" then upcasts[#upcasts + 1] = u end
    if u.op == "INDEX" then indices[#indices + 1] = u:source(2) end
  end
  for _, r in ipairs(upcasts) do
    local memo = {}
    for _, e in ipairs(indices) do
      local c = affine.coefficient(e, r, memo)
      if c == nil or c == 1 or c == -1 then return nil end
    end
  end
  local best
  for _, r in ipairs(unrolled) do
    local n = lane_count(r)
    if n >= 2 and n <= max_lanes and (not best or n > lane_count(best)) then
      local memo, reads, ok = {}, 0, true
      for _, e in ipairs(indices) do
        local c = affine.coefficient(e, r, memo)
        -- not affine as written (a permuted read, (k0 * 16 + u) // 64): maybe once simplified
        -- with the range's bounds (k0 // 4)
        if c == nil then c = affine.coefficient(symbolic.simplify(e), r, {}) end
        if c == 1 then reads = reads + 1 elseif c ~= 0 then ok = false break end
      end
      if ok and reads > 0 then best = r end
    end
  end
  return best
end

-- The upcast ranges of the chain to keep as vector lanes, innermost first, or nil: one whose
-- lanes are consecutive elements of every store in body (the largest such), then, while the
-- lanes stay within max_lanes, another whose step in every store is the block's size so far
-- (UPCAST 16 then 2 of one axis: one block of 32 consecutive elements).
local function vector_ranges(body, upcast, max_lanes)
  local indices = {}
  for _, u in ipairs(body:toposort()) do
    if u.op == "STORE" then
      local index = u:source(1)
      if index.op ~= "INDEX" then return nil end
      indices[#indices + 1] = index:source(2)
    end
  end
  if #indices == 0 then return nil end
  local memo = {}
  local function step_is(r, want)
    memo[r] = memo[r] or {}
    for _, e in ipairs(indices) do
      if affine.coefficient(e, r, memo[r]) ~= want then return false end
    end
    return true
  end
  local chosen, count = {}, 1
  local grown = true
  while grown do
    grown = false
    local best
    for _, r in ipairs(upcast) do
      local n = lane_count(r)
      local taken = false
      for _, c in ipairs(chosen) do taken = taken or c == r end
      if not taken and n >= 2 and count * n <= max_lanes and (not best or n > lane_count(best))
        and step_is(r, count) then
        best = r
      end
    end
    if best then
      chosen[#chosen + 1] = best
      count = count * lane_count(best)
      grown = true
    end
  end
  if #chosen == 0 then return nil end
  return chosen, count
end

--- Ops per element of a store's value outside its reductions from which the tail is computed
-- in a loop over the copies rather than copied (see the header).
M.EPILOGUE_LOOP_OPS = 16

-- The ops of a store's value outside its reductions (index arithmetic and loads not counted)
-- and the outermost REDUCEs in it.
local function tail_of(store)
  local reduces, ops, seen, stack = {}, 0, {}, { store:source(2) }
  while #stack > 0 do
    local u = table.remove(stack)
    if not seen[u] then
      seen[u] = true
      if u.op == "REDUCE" then
        reduces[#reduces + 1] = u
      elseif u.op ~= "LOAD" and u.op ~= "CONST" and u.dtype ~= INDEX then
        local weight = transcendental.weight(u.op)
        ops = ops + (weight and weight.ops or 1)
        for _, x in ipairs(u.src) do stack[#stack + 1] = x end
      end
    end
  end
  return ops, reduces
end

-- The copies of body (a STORE) for the lane assignments of the copied ranges, with its tail
-- in a loop over them (the header); ids = { axis =, slot = } hands out fresh axis numbers and
-- register slots.
local function tail_loop(body, copied, assignments, reduces, ids)
  local count = #assignments
  local fills, tiles = {}, {}
  for j, red in ipairs(reduces) do
    tiles[j] = new("DEFINE_REG", red.dtype, nil, { ids.slot, count })
    ids.slot = ids.slot + 1
    for c, lane in ipairs(assignments) do
      local at = new("INDEX", red.dtype, { tiles[j], const(INDEX, c - 1) })
      fills[#fills + 1] = new("STORE", VOID, { at, P.substitute(red, lane) })
    end
  end
  local filled = #fills == 1 and fills[1] or new("GROUP", VOID, fills)
  local loop = new("RANGE", INDEX, { const(INDEX, count) }, { ids.axis, "loop" })
  ids.axis = ids.axis + 1
  -- lanes() takes the ranges in order, the last fastest: the counter decodes the same way
  local map, block = {}, 1
  for k = #copied, 1, -1 do
    local n = lane_count(copied[k])
    local x = block == 1 and loop or loop // const(INDEX, block)
    if k > 1 then x = x % const(INDEX, n) end
    map[copied[k]], block = x, block * n
  end
  for j, red in ipairs(reduces) do
    local ready = new("AFTER", red.dtype, { tiles[j], filled })
    map[red] = new("LOAD", red.dtype, { new("INDEX", red.dtype, { ready, loop }) })
  end
  return new("END", VOID, { P.substitute(body, map), loop })
end

-- Whether a REDUCE in body keeps vector lanes (unroll_lane_range) while its value uses one of
-- the upcast ranges: those are then copied, not made the store's vector (no vector of vectors).
local function reduces_in_lanes(body, upcast)
  local is_upcast = {}
  for _, r in ipairs(upcast) do is_upcast[r] = true end
  for _, u in ipairs(body:toposort()) do
    if u.op == "REDUCE" then
      local kept = false
      for i = 2, #u.src do kept = kept or u.src[i]:axis_type() == "vector" end
      if kept then
        for _, x in ipairs(u:source(1):toposort()) do
          if is_upcast[x] then return true end
        end
      end
    end
  end
  return false
end

-- One source of the SINK: its END chain with the upcast ranges expanded into lanes (one kept
-- as a vector range when max_lanes is given).
local function upcast_chain(top, max_lanes, ids)
  local ranges, body = {}, top
  while body.op == "END" and #body.src == 2 and body:source(2).op == "RANGE" do
    ranges[#ranges + 1] = body:source(2)
    body = body:source(1)
  end
  local keep, upcast = {}, {}
  for _, r in ipairs(ranges) do
    if r:axis_type() == "upcast" then upcast[#upcast + 1] = r else keep[#keep + 1] = r end
  end
  if #upcast == 0 then return top end
  local vector
  local chosen, count = nil, nil
  if max_lanes and not reduces_in_lanes(body, upcast) then chosen, count = vector_ranges(body, upcast, max_lanes) end
  if chosen then
    -- one range of all the chosen lanes: the innermost is v mod n1, the next (v // n1) mod n2, ...
    vector = new("RANGE", INDEX, { const(INDEX, count) }, { chosen[1].arg[1], "vector" })
    local map, block, is_chosen = {}, 1, {}
    for n, r in ipairs(chosen) do
      local size = lane_count(r)
      local e = block == 1 and vector or vector // const(INDEX, block)
      if n < #chosen then e = e % const(INDEX, size) end
      map[r], block, is_chosen[r] = e, block * size, true
    end
    body = P.substitute(body, map)
    local copied = {}
    for _, r in ipairs(upcast) do
      if not is_chosen[r] then copied[#copied + 1] = r end
    end
    upcast = copied
  end
  -- ranges[] is outermost first; lanes are taken in that order, the innermost axis fastest
  local assignments = lanes(upcast)
  local e
  if #assignments > 1 and body.op == "STORE" then
    local ops, reduces = tail_of(body)
    if #reduces > 0 and ops >= M.EPILOGUE_LOOP_OPS then e = tail_loop(body, upcast, assignments, reduces, ids) end
  end
  if not e then
    local stores = {}
    for _, lane in ipairs(assignments) do stores[#stores + 1] = P.substitute(body, lane) end
    e = #stores == 1 and stores[1] or new("GROUP", VOID, stores)
  end
  if vector then e = new("END", VOID, { e, vector }) end
  for i = #keep, 1, -1 do e = new("END", VOID, { e, keep[i] }) end
  return e
end

--- The sink with every upcast and unroll axis expanded (unchanged when there are none). Sets
-- ctx.upcast_lanes when a store was expanded into lanes: the backend then takes its vectors
-- from the lanes (tcl.codegen.devices.llvm turns its loop vectorizer off).
function M.run(sink, ctx)
  -- one walk: whether there are lanes, and the fresh axis ids and register slots (the unroll
  -- rewrite below makes neither)
  local found = false
  for _, u in ipairs(sink:toposort()) do
    local t = u:axis_type()
    if t == "upcast" or t == "unroll" then found = true break end
  end
  if not found then return sink end
  local ids = { axis = sink:free_axis_id(), slot = sink:free_slot("DEFINE_REG") }
  local max_lanes = ctx and ctx.renderer and ctx.renderer.vector_lanes
  sink = unroll_rules:rewrite(sink, { name = "expand unroll", ctx = { max_lanes = max_lanes } })
  local src, changed = sink.src, false
  for i, s in ipairs(src) do
    local e = upcast_chain(s, max_lanes, ids)
    if e ~= s then src[i], changed = e, true end
  end
  if changed then
    sink = sink:replace { src = src }
    if ctx then ctx.upcast_lanes = true end
  end
  for _, u in ipairs(sink:toposort()) do
    if u.op == "RANGE" and u:axis_type() == "upcast" then
      error("expand: an upcast axis is used outside the END chains of the kernel's stores", 0)
    end
  end
  return symbolic.symbolic:rewrite(sink, { name = "symbolic after expand" })
end

return M
