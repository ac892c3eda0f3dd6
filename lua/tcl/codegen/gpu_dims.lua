-- tcl.codegen.gpu_dims — the pass "gpu dims": a kernel's output loops become the launch of a
-- GPU (src/core/ENCODINGS.md, "GPU-shaped kernels"). Layer: codegen (a hand-written pass of
-- the pipeline, for GPU renderers only).
--
-- Ranges of axis type "global" or "loop" become workgroup indices (SPECIAL gidx), ranges of
-- type "local" or "group_reduce" thread indices within the workgroup (SPECIAL lidx); the loops
-- that closed them go (their ENDs become GROUPs: ordering only). The innermost range (the
-- largest axis id: the last output dim, contiguous in memory) gets dim 0, x, so that threads
-- next to each other touch memory next to each other. Among the thread ranges
-- (M.thread_order) the group_reduce ones come innermost, whatever their ids (their threads
-- read neighbouring elements, and shuffles need a group's threads to be consecutive lanes of
-- warps); but in a column sum, whose accesses step by one element along a local range and
-- along no group one, the local ones do (a warp then reads a row's neighbouring elements),
-- unless the pass "group reduces" combined the groups by SHUFFLE. Among the local ranges the
-- ones some access steps along by one element come first, then by axis id (but in kernels
-- with WMMA, whose lanes are numbered by axis id).
-- Up to three ranges of a kind map to
-- x, y, z directly when the target's limits allow it; otherwise they share dim 0 and each is
-- recovered by // and %. A launch the target cannot run (more threads per workgroup than it
-- has, a grid beyond its limits) is an error naming the kernel's sizes.
local UOp = require "tcl.uop"
local core = require "tcl.core"

local M = {}

local new = UOp.new
local INDEX = core.dtype "index"

local GRID_TYPES = { global = true, loop = true }
local LOCAL_TYPES = { ["local"] = true, group_reduce = true }

local function const(v) return new("CONST", INDEX, nil, v) end
local function size_of(r) return r.src[1].arg end
local function axis_of(r) return type(r.arg) == "table" and r.arg[1] or -1 end

--- The RANGEs that the index of some access to a kernel buffer (an INDEX of a PARAM) steps
-- along by exactly one element, as a set. Only affine indices count (sums of ranges times
-- constants).
function M.unit_stride_ranges(sink)
  local memo, unit = {}, {}
  local function affine(u)
    local hit = memo[u]
    if hit ~= nil then return hit or nil end
    local out
    if u.op == "CONST" and math.type(u.arg) == "integer" then
      out = {}
    elseif u.op == "RANGE" then
      out = { [u] = 1 }
    elseif u.op == "ADD" then
      local a, b = affine(u.src[1]), affine(u.src[2])
      if a and b then
        out = {}
        for r, c in pairs(a) do out[r] = c end
        for r, c in pairs(b) do out[r] = (out[r] or 0) + c end
      end
    elseif u.op == "MUL" then
      local a, b = u.src[1], u.src[2]
      if b.op ~= "CONST" then a, b = b, a end
      local fa = b.op == "CONST" and math.type(b.arg) == "integer" and affine(a)
      if fa then
        out = {}
        for r, c in pairs(fa) do out[r] = c * b.arg end
      end
    end
    memo[u] = out or false
    return out
  end
  for _, u in ipairs(sink:toposort()) do
    if u.op == "INDEX" and #u.src >= 2 then
      local buf = u.src[1]
      while buf.op == "AFTER" do buf = buf.src[1] end
      local form = buf.op == "PARAM" and affine(u.src[2])
      for r, c in pairs(form or {}) do
        if c == 1 then unit[r] = true end
      end
    end
  end
  return unit
end

--- The thread ranges in launch order, innermost (dim x) first: the group_reduce ones, then
-- the local ones, each kind by axis id, largest first; but the local ones first when some
-- buffer access steps along one of them by one element and along no group_reduce one (a
-- column sum), unless the kernel combines groups by SHUFFLE (shuffled), which needs a group's
-- threads to be consecutive lanes. Among the local ones, those some access steps along by one
-- element come first (an axis split by two LOCALs, or LOCALs of several axes, may give the
-- inner part of an outer axis the larger id), unless by_axis: a kernel with WMMA, whose lanes
-- the tensor cores pass numbered by axis. unit: the set M.unit_stride_ranges gives.
function M.thread_order(threads, unit, shuffled, by_axis)
  local unit_group, unit_local = false, false
  for _, r in ipairs(threads) do
    if unit[r] then
      if r:axis_type() == "group_reduce" then unit_group = true else unit_local = true end
    end
  end
  local groups_first = shuffled or unit_group or not unit_local
  local sorted = { table.unpack(threads) }
  table.sort(sorted, function(a, b)
    local group_a, group_b = a:axis_type() == "group_reduce", b:axis_type() == "group_reduce"
    if group_a ~= group_b then return group_a == groups_first end
    if not group_a and not by_axis and (unit[a] or false) ~= (unit[b] or false) then return unit[a] or false end
    return axis_of(a) > axis_of(b)
  end)
  return sorted
end

local function sizes_text(ranges)
  local parts = {}
  for i, r in ipairs(ranges) do parts[i] = tostring(size_of(r)) end
  return table.concat(parts, "x")
end

--- { [range] = index expression } for ranges (innermost first) on the SPECIALs prefix0..2.
local function assign(ranges, prefix, max, total_max, what)
  local out = {}
  if #ranges == 0 then return out end
  local product = 1
  for _, r in ipairs(ranges) do product = product * size_of(r) end
  if total_max and product > total_max then
    error(string.format("%d %s (%s) are more than the target's %d", product, what, sizes_text(ranges), total_max), 0)
  end
  local direct = #ranges <= 3
  for d, r in ipairs(ranges) do
    if direct and size_of(r) > max[d] then direct = false end
  end
  if direct then
    for d, r in ipairs(ranges) do
      out[r] = new("SPECIAL", INDEX, { const(size_of(r)) }, prefix .. (d - 1))
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
    if stride * size_of(r) < product then index = index % const(size_of(r)) end
    out[r] = index
    stride = stride * size_of(r)
  end
  return out
end

function M.run(sink, ctx)
  local gpu = ctx.renderer.gpu
  local grid, threads, shuffled, wmma = {}, {}, false, false
  for _, u in ipairs(sink:toposort()) do
    if u.op == "RANGE" then
      local t = u:axis_type()
      if GRID_TYPES[t] then grid[#grid + 1] = u elseif LOCAL_TYPES[t] then threads[#threads + 1] = u end
    elseif u.op == "SHUFFLE" then
      shuffled = true
    elseif u.op == "WMMA" then
      wmma = true
    end
  end
  if #grid == 0 and #threads == 0 then return sink end
  local innermost_first = function(a, b) return axis_of(a) > axis_of(b) end
  table.sort(grid, innermost_first)
  threads = M.thread_order(threads, #threads > 1 and M.unit_stride_ranges(sink) or {}, shuffled, wmma)
  local replaced = assign(grid, "gidx", gpu.grid_max, nil, "workgroups")
  for r, index in pairs(assign(threads, "lidx", gpu.local_max, gpu.threads_max, "threads per workgroup")) do
    replaced[r] = index
  end

  local map = {}
  for _, u in ipairs(sink:toposort()) do
    local node = replaced[u]
    if not node then
      local src, changed = {}, false
      for i, s in ipairs(u.src) do
        src[i] = map[s] or s
        if src[i] ~= s then changed = true end
      end
      if u.op == "END" and replaced[u.src[#u.src]] then
        -- the loop is gone: its body only orders what comes after
        table.remove(src)
        node = #src == 1 and src[1] or new("GROUP", u.dtype, src)
      else
        node = changed and new(u.op, u.dtype, src, u.arg, u.tag) or u
      end
    end
    map[u] = node
  end
  return map[sink]
end

return M
