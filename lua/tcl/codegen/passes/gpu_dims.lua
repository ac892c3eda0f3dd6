-- tcl.codegen.passes.gpu_dims — the pass "gpu dims": a kernel's output loops become the launch of a
-- GPU (docs/design/encodings.md, "GPU-shaped kernels"). Layer: codegen (a hand-written pass of
-- the pipeline, for GPU renderers only).
--
-- Ranges of axis type "global" or "loop" become workgroup indices (SPECIAL gidx), ranges of
-- type "local" or "group_reduce" thread indices within the workgroup (SPECIAL lidx); the loops
-- that closed them go (their ENDs become GROUPs: ordering only). The innermost range (the
-- largest axis id: the last output dim, contiguous in memory) gets dim 0, x, so that threads
-- next to each other touch memory next to each other. The thread ranges go in the order
-- tcl.codegen.passes.thread_order picks: the one whose first warp touches the fewest sectors of
-- global memory (by default the group_reduce ones innermost, then by axis id; SHUFFLEs keep
-- the groups innermost, WMMA the default). Up to three ranges of a kind map to
-- x, y, z directly when the target's limits allow it; otherwise they share dim 0 and each is
-- recovered by // and %. A launch the target cannot run (more threads per workgroup than it
-- has, a grid beyond its limits) is an error naming the kernel's sizes.
--
-- A range of variable size (tcl.variables) stays a loop inside each thread: a launch's sizes are
-- fixed when the program is built.
--
-- Which index each range gets depends on all of the kernel's ranges and its memory accesses
-- (M.context, once per kernel); the rules then replace each RANGE by its index and drop the
-- END of each range that is gone.
local UOp = require "tcl.uop"
local P = require "tcl.pattern"
local core = require "tcl.core"
local thread_order = require "tcl.codegen.passes.thread_order"

local M = {}

local new = UOp.new
local INDEX = core.dtype "index"

local GRID_TYPES = { global = true, loop = true }
local LOCAL_TYPES = { ["local"] = true, group_reduce = true }

local const = UOp.index_const

local function sizes_text(ranges)
  local parts = {}
  for i, r in ipairs(ranges) do parts[i] = tostring(r:range_size()) end
  return table.concat(parts, "x")
end

--- { [range] = index expression } for ranges (innermost first) on the SPECIALs prefix0..2.
local function assign(ranges, prefix, max, total_max, what)
  local out = {}
  if #ranges == 0 then return out end
  local product = 1
  for _, r in ipairs(ranges) do product = product * r:range_size() end
  if total_max and product > total_max then
    error(string.format("%d %s (%s) are more than the target's %d", product, what, sizes_text(ranges), total_max), 0)
  end
  local direct = #ranges <= 3
  for d, r in ipairs(ranges) do
    if direct and r:range_size() > max[d] then direct = false end
  end
  if direct then
    for d, r in ipairs(ranges) do
      out[r] = new("SPECIAL", INDEX, { const(r:range_size()) }, prefix .. (d - 1))
    end
    return out
  end
  if product > max[1] then
    error(string.format("%d %s (%s) do not fit the target's launch (at most %d in one dim)", product, what,
      sizes_text(ranges), max[1]), 0)
  end
  -- all on dim 0: the innermost range varies fastest
  local flat = new("SPECIAL", INDEX, { const(product) }, prefix .. "0")
  local stride = 1
  for _, r in ipairs(ranges) do
    local index = stride == 1 and flat or flat // const(stride)
    if stride * r:range_size() < product then index = index % const(r:range_size()) end
    out[r] = index
    stride = stride * r:range_size()
  end
  return out
end

--- The rewrites' context: { index_of = { [range] = its index expression }, launched = { [index
-- expression] = true } }, or nil when the kernel has no range that becomes a launch index.
function M.context(sink, ctx)
  local gpu = ctx.renderer.gpu
  local grid, threads, shuffled, wmma = {}, {}, false, false
  for _, u in ipairs(sink:toposort()) do
    if u.op == "RANGE" and u:range_size() then -- a range of variable size stays a loop in each thread
      local t = u:axis_type()
      if GRID_TYPES[t] then grid[#grid + 1] = u elseif LOCAL_TYPES[t] then threads[#threads + 1] = u end
    elseif u.op == "SHUFFLE" then
      shuffled = true
    elseif u.op == "WMMA" then
      wmma = true
    end
  end
  if #grid == 0 and #threads == 0 then return nil end
  local innermost_first = function(a, b) return a:axis_id() > b:axis_id() end
  table.sort(grid, innermost_first)
  threads = thread_order.order(threads, #threads > 1 and thread_order.accesses(sink) or {}, shuffled, wmma)
  local index_of = assign(grid, "gidx", gpu.grid_max, nil, "workgroups")
  for r, index in pairs(assign(threads, "lidx", gpu.local_max, gpu.threads_max, "threads per workgroup")) do
    index_of[r] = index
  end
  local launched = {}
  for _, index in pairs(index_of) do launched[index] = true end
  return { index_of = index_of, launched = launched }
end

M.rules = P.rules {
  { P.op("RANGE", nil, { name = "r" }), function(m, ctx) return ctx.index_of[m.r] end },
  -- the loop of a range that became an index is gone: its body only orders what comes after
  { P.op("END", nil, { name = "e" }), function(m, ctx)
    local src = m.e.src
    if not ctx.launched[src[#src]] then return nil end
    if #src == 2 then return src[1] end
    return new("GROUP", m.e.dtype, { table.unpack(src, 1, #src - 1) })
  end },
}

return M
