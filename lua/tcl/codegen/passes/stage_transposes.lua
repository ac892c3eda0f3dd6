-- tcl.codegen.passes.stage_transposes — the pass "stage transposes": in a GPU kernel without
-- reductions whose workgroup is a square tile of T x T threads (two local ranges, the GPU
-- heuristic's choice for a transposing copy), a load that steps by one element along one
-- local range (lb) while the store steps by one along the other (la) goes through local
-- memory, so that both touch neighbouring elements with neighbouring lanes. Layer: codegen (a
-- pass of rules of the pipeline, for GPU renderers only: M.rules, with the context M.context
-- gives: which loads are staged depends on the whole kernel's shape and on the room left in
-- local memory, so M.context builds each staged load's replacement, and the rule puts it in).
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
local affine = require "tcl.affine"
local P = require "tcl.pattern"

local M = {}

local new = UOp.new
local VOID = core.dtype "void"

local const = UOp.index_const
local stride = affine.stride

-- Whether the subtree of u holds only constants, ranges and arithmetic (no memory).
local function pure(u, seen)
  if seen[u] ~= nil then return seen[u] end
  local ok = u.op ~= "LOAD" and u.op ~= "INDEX" and u.op ~= "PARAM" and u.op ~= "DEFINE_LOCAL"
    and u.op ~= "DEFINE_REG" and u.op ~= "AFTER"
  for _, s in ipairs(u.src) do ok = ok and pure(s, seen) end
  seen[u] = ok
  return ok
end

-- The kernel's two local ranges of one size and its single STORE; nil when anything rules the
-- pass out (reductions, other thread ranges, local memory, several stores).
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
  if #locals ~= 2 or #stores ~= 1 or locals[1]:range_size() ~= locals[2]:range_size() then return nil end
  return locals, stores[1]
end

--- The rewrites' context: { staged = { [LOAD] = its read from the tile } }, or nil when no load
-- is staged.
function M.context(sink, ctx)
  local locals, store = shape_of(sink)
  if not locals then return nil end
  local target = store.src[1]
  if target.op ~= "INDEX" or #target.src < 2 then return nil end
  local memo = {}
  local la, lb
  for i = 1, 2 do
    if stride(target.src[2], locals[i], memo) == 1 then la, lb = locals[i], locals[3 - i] end
  end
  if not la then return nil end
  local T = la:range_size()
  -- the tiles stay within the target's local memory (the loads past it are read directly)
  local gpu = ctx and ctx.renderer and ctx.renderer.gpu
  local room = gpu and gpu.local_bytes or math.huge
  local seen = {}
  local staged = {} -- LOAD -> its read from the tile (filled below)
  local stores, list = {}, {}
  for _, u in ipairs(sink:toposort()) do
    if u.op == "LOAD" and u.src[1].op == "INDEX" and #u.src[1].src >= 2 then
      local index = u.src[1]
      local buf = index.src[1]
      local along_b, along_a = stride(index.src[2], lb, memo), stride(index.src[2], la, memo)
      -- (a load that does not move along la is read by all the lanes at once already)
      local bytes = T * (T + 1) * u.dtype.itemsize
      local ok = buf.op == "PARAM" and along_b == 1 and along_a ~= 1 and along_a ~= 0 and bytes <= room
      for i = 2, #index.src do ok = ok and pure(index.src[i], seen) end
      for i = 2, #u.src do ok = ok and pure(u.src[i], seen) end
      if ok then
        room = room - bytes
        local slot = #list
        local tile = new("DEFINE_LOCAL", u.dtype, nil, { slot, T * (T + 1) })
        local from = P.substitute(u, { [la] = lb, [lb] = la })
        local put = new("STORE", VOID, { new("INDEX", u.dtype, { tile, lb * const(T + 1) + la }), from })
        stores[#stores + 1] = put
        list[#list + 1] = { load = u, tile = tile }
      end
    end
  end
  if #list == 0 then return nil end
  local barrier = new("BARRIER", VOID, stores)
  for _, s in ipairs(list) do
    local seen_tile = new("AFTER", s.load.dtype, { s.tile, barrier })
    staged[s.load] = new("LOAD", s.load.dtype, { new("INDEX", s.load.dtype, { seen_tile, la * const(T + 1) + lb }) })
  end
  return { staged = staged }
end

M.rules = P.rules {
  -- each staged LOAD becomes its read from the tile
  { P.op("LOAD", nil, { name = "load" }), function(m, ctx) return ctx.staged[m.load] end },
}

return M
