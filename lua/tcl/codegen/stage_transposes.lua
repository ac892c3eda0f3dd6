-- tcl.codegen.stage_transposes — the pass "stage transposes": in a GPU kernel without
-- reductions whose workgroup is a square tile of T x T threads (two local ranges, the GPU
-- heuristic's choice for a transposing copy), a load that steps by one element along one
-- local range (lb) while the store steps by one along the other (la) goes through local
-- memory, so that both touch neighbouring elements with neighbouring lanes. Layer: codegen (a
-- hand-written pass of the pipeline, for GPU renderers only).
--
-- Each such LOAD v = LOAD(INDEX(buf, f(la, lb)), gate(la, lb)) becomes
--   STORE(INDEX(tile, lb * (T + 1) + la), LOAD(... f(lb, la) ..., gate(lb, la)))
--   ... one BARRIER after the stores of every staged load ...
--   LOAD(INDEX(AFTER(tile, BARRIER), la * (T + 1) + lb))
-- tile a DEFINE_LOCAL of T x (T + 1) elements. With la and lb swapped, thread (la, lb) loads the
-- element (a = lb, b = la) of its workgroup's tile, the lanes (la) reading neighbours along b,
-- and keeps it at row a, column b; after the barrier it reads the element (la, lb) its store
-- needs. Swapping is possible because the tile is square. The rows are T + 1 apart so that the
-- lanes' reads (down a column) fall in distinct banks. The load's index and gate may use only
-- constants, ranges and arithmetic: a gather (an index loaded from memory) stays as it is.
local UOp = require "tcl.uop"
local core = require "tcl.core"

local M = {}

local new = UOp.new
local INDEX = core.dtype "index"
local VOID = core.dtype "void"

local function const(v) return new("CONST", INDEX, nil, v) end
local function size_of(r) return r.src[1].arg end

-- The coefficient of range r in index expression u when u is affine in it (sums of ranges
-- times constants); nil when it is not affine. memo caches subexpressions, for one r.
local function coefficient(u, r, memo)
  local hit = memo[u]
  if hit ~= nil then return hit or nil end
  local out
  if u.op == "CONST" then
    out = 0
  elseif u.op == "RANGE" then
    out = u == r and 1 or 0
  elseif u.op == "ADD" then
    local a, b = coefficient(u.src[1], r, memo), coefficient(u.src[2], r, memo)
    out = a and b and a + b
  elseif u.op == "MUL" then
    local a, b = u.src[1], u.src[2]
    if b.op ~= "CONST" then a, b = b, a end
    local ca = b.op == "CONST" and math.type(b.arg) == "integer" and coefficient(a, r, memo)
    out = ca and ca * b.arg
  end
  memo[u] = out or false
  return out or nil
end

-- Whether the subtree of u holds only constants, ranges and arithmetic (no memory).
local function pure(u, seen)
  if seen[u] ~= nil then return seen[u] end
  local ok = u.op ~= "LOAD" and u.op ~= "INDEX" and u.op ~= "PARAM" and u.op ~= "DEFINE_LOCAL"
    and u.op ~= "DEFINE_REG" and u.op ~= "AFTER"
  for _, s in ipairs(u.src) do ok = ok and pure(s, seen) end
  seen[u] = ok
  return ok
end

-- u with ranges a and b exchanged (memo: node -> replacement).
local function swapped(u, a, b, memo)
  local hit = memo[u]
  if hit then return hit end
  local out
  if u == a then
    out = b
  elseif u == b then
    out = a
  else
    local src, changed = {}, false
    for i, s in ipairs(u.src) do
      src[i] = swapped(s, a, b, memo)
      changed = changed or src[i] ~= s
    end
    out = changed and new(u.op, u.dtype, src, u.arg, u.tag) or u
  end
  memo[u] = out
  return out
end

-- The kernel's two local ranges of one size, its single STORE to a buffer, and whether it has
-- anything that rules the pass out (reductions, other thread ranges, several stores).
local function shape_of(sink)
  local locals, stores = {}, {}
  for _, u in ipairs(sink:toposort()) do
    if u.op == "RANGE" then
      local t = u:axis_type()
      if t == "local" then locals[#locals + 1] = u
      elseif t ~= "global" and t ~= "loop" then return nil end
    elseif u.op == "REDUCE" or u.op == "BARRIER" or u.op == "DEFINE_LOCAL" or u.op == "WMMA" then
      return nil
    elseif u.op == "STORE" then
      stores[#stores + 1] = u
    end
  end
  if #locals ~= 2 or #stores ~= 1 or size_of(locals[1]) ~= size_of(locals[2]) then return nil end
  return locals, stores[1]
end

function M.run(sink)
  local locals, store = shape_of(sink)
  if not locals then return sink end
  local target = store.src[1]
  if target.op ~= "INDEX" or #target.src < 2 then return sink end
  local la, lb
  for i = 1, 2 do
    if coefficient(target.src[2], locals[i], {}) == 1 then la, lb = locals[i], locals[3 - i] end
  end
  if not la then return sink end
  local T = size_of(la)
  local seen = {}
  local staged = {} -- LOAD -> its read from the tile (filled below)
  local stores, list = {}, {}
  for _, u in ipairs(sink:toposort()) do
    if u.op == "LOAD" and u.src[1].op == "INDEX" and #u.src[1].src >= 2 then
      local index = u.src[1]
      local buf = index.src[1]
      local along_b, along_a = coefficient(index.src[2], lb, {}), coefficient(index.src[2], la, {})
      local ok = buf.op == "PARAM" and along_b == 1 and along_a ~= 1 and u.dtype.itemsize >= 1
      for i = 2, #index.src do ok = ok and pure(index.src[i], seen) end
      for i = 2, #u.src do ok = ok and pure(u.src[i], seen) end
      if ok then
        local slot = #list
        local tile = new("DEFINE_LOCAL", u.dtype, nil, { slot, T * (T + 1) })
        local from = swapped(u, la, lb, {})
        local put = new("STORE", VOID, { new("INDEX", u.dtype, { tile, lb * const(T + 1) + la }), from })
        stores[#stores + 1] = put
        list[#list + 1] = { load = u, tile = tile }
      end
    end
  end
  if #list == 0 then return sink end
  local barrier = new("BARRIER", VOID, stores)
  for _, s in ipairs(list) do
    local seen_tile = new("AFTER", s.load.dtype, { s.tile, barrier })
    staged[s.load] = new("LOAD", s.load.dtype, { new("INDEX", s.load.dtype, { seen_tile, la * const(T + 1) + lb }) })
  end
  -- the kernel with each staged LOAD replaced by its read from the tile
  local map = {}
  for _, u in ipairs(sink:toposort()) do
    local node = staged[u]
    if not node then
      local src, changed = {}, false
      for i, s in ipairs(u.src) do
        src[i] = map[s] or s
        changed = changed or src[i] ~= s
      end
      node = changed and new(u.op, u.dtype, src, u.arg, u.tag) or u
    end
    map[u] = node
  end
  return map[sink]
end

return M
