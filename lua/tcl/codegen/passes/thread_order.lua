-- tcl.codegen.passes.thread_order — which of a GPU kernel's thread ranges (local and group_reduce)
-- varies fastest across the lanes of a warp. The pass "gpu dims" gives them the launch's dims
-- in this order (x first); the pass "group reduces" asks it whether a group's threads will be
-- consecutive lanes, as shuffles need. Layer: codegen.
--
-- The order is the one whose first warp touches the fewest 32-byte sectors of global memory,
-- summed over the kernel's accesses to its buffers (the INDEXes of PARAMs with an affine index:
-- a sum of ranges times constants; the rest are left out), each lane at its coordinates of the
-- order and every other range at 0, and each access counted as often as a thread makes it (a
-- load inside a reduction once per step): the model of EMU's memory profile (src/runtime/emu/
-- emu_profile.h), worked out from the index expressions. Ties keep the default order: the
-- group_reduce ranges innermost (a group's threads read neighbouring elements, and may shuffle),
-- then by axis id, largest first (the last output dim is contiguous in memory). The search
-- changes the default where it costs sectors: a column sum (its threads over the columns step
-- by one element, its group over the rows by a row), a LOCAL split of an outer axis that got a
-- larger axis id than the innermost one, a transposing copy (the order with the fewer sectors
-- of its load and its store together).
--
-- Constraints: with SHUFFLEs (shuffled) the group_reduce ranges stay innermost in the default
-- order (lanes of a group consecutive, in the order "group reduces" numbered them); in a
-- kernel with WMMA (by_axis) the default order stands: the tensor cores pass numbered its
-- lanes by axis id. More than MAX_SEARCH ranges, or an access whose index is not affine (its
-- sectors unknown), keep the default order too.
local affine = require "tcl.affine"

local M = {}

--- Sectors of memory a GPU serves a warp's access in, and the lanes of a warp.
M.SECTOR_BYTES = 32
M.WARP = 32
--- The most thread ranges whose orders are searched (4! = 24 orders).
M.MAX_SEARCH = 4


--- The kernel's accesses to its buffers with affine indices: { { form =, itemsize =, weight =
-- }, ... }, weight the times a thread makes it: the product of the sizes of the reduce ranges
-- its index steps along (a load inside a reduction runs once per step, the store after it
-- once). The list has opaque = true when some access's index is not affine (a reshaped
-- permute's // and %): M.order then keeps the default, as it cannot count that access.
function M.accesses(sink)
  local memo, out = {}, { opaque = false }
  for _, u in ipairs(sink:toposort()) do
    if u.op == "INDEX" and #u.src >= 2 then
      local buf = u.src[1]
      while buf.op == "AFTER" do buf = buf.src[1] end
      local form = buf.op == "PARAM" and affine.form(u.src[2], memo)
      if buf.op == "PARAM" and not form then out.opaque = true end
      if form then
        local weight = 1
        for r, c in pairs(form) do
          if c ~= 0 and r:axis_type() == "reduce" then weight = weight * r:range_size() end
        end
        out[#out + 1] = { form = form, itemsize = u.dtype.itemsize, weight = weight }
      end
    end
  end
  return out
end

--- The sectors the first warp touches under order (thread ranges, innermost first), summed
-- over accesses (each { form =, itemsize =, weight = (default 1) }).
function M.sectors(order, accesses)
  local lanes = 1
  for _, r in ipairs(order) do lanes = lanes * r:range_size() end
  lanes = math.min(lanes, M.WARP)
  -- each lane's coordinate along each range of the order
  local coords = {}
  for k, r in ipairs(order) do
    local size, stride, column = r:range_size(), 1, {}
    for j = 1, k - 1 do stride = stride * order[j]:range_size() end
    for lane = 0, lanes - 1 do column[lane] = lane // stride % size end
    coords[k] = column
  end
  local total = 0
  for _, a in ipairs(accesses) do
    local coef = {}
    for k, r in ipairs(order) do coef[k] = a.form[r] or 0 end
    local seen, n, bytes = {}, 0, a.itemsize
    for lane = 0, lanes - 1 do
      local offset = 0
      for k = 1, #order do offset = offset + coef[k] * coords[k][lane] end
      for s = offset * bytes // M.SECTOR_BYTES, ((offset + 1) * bytes - 1) // M.SECTOR_BYTES do
        if not seen[s] then seen[s], n = true, n + 1 end
      end
    end
    total = total + n * (a.weight or 1)
  end
  return total
end

-- The accesses that depend on some of threads, one entry per distinct set of coefficients
-- along them (an UPCAST's copies of a load differ only in their constant), their weights
-- added; the rest touch a sector each under any order.
local function distinct(accesses, threads)
  local out, by_key = {}, {}
  for _, a in ipairs(accesses) do
    local parts, moves = { a.itemsize }, false
    for i, r in ipairs(threads) do
      parts[i + 1] = a.form[r] or 0
      moves = moves or parts[i + 1] ~= 0
    end
    if moves then
      local key = table.concat(parts, ",")
      local entry = by_key[key]
      if entry then
        entry.weight = entry.weight + a.weight
      else
        entry = { form = a.form, itemsize = a.itemsize, weight = a.weight }
        by_key[key], out[#out + 1] = entry, entry
      end
    end
  end
  return out
end

-- Every order of list (Heap's algorithm), each passed to fn as a fresh table.
local function permutations(list, fn)
  local a, n, c = { table.unpack(list) }, #list, {}
  local function swap(x, y) a[x + 1], a[y + 1] = a[y + 1], a[x + 1] end
  for k = 0, n - 1 do c[k] = 0 end
  fn({ table.unpack(a) })
  local i = 1
  while i < n do
    if c[i] < i then
      if i % 2 == 0 then swap(0, i) else swap(c[i], i) end
      fn({ table.unpack(a) })
      c[i], i = c[i] + 1, 1
    else
      c[i], i = 0, i + 1
    end
  end
end

--- The thread ranges in launch order, innermost (dim x) first (the header). accesses:
-- M.accesses(sink); shuffled: the kernel combines groups by SHUFFLE; by_axis: it has WMMA.
function M.order(threads, accesses, shuffled, by_axis)
  local groups, locals = {}, {}
  for _, r in ipairs(threads) do
    if r:axis_type() == "group_reduce" then groups[#groups + 1] = r else locals[#locals + 1] = r end
  end
  local largest_first = function(a, b) return a:axis_id() > b:axis_id() end
  table.sort(groups, largest_first)
  table.sort(locals, largest_first)
  local best = { table.unpack(groups) }
  for _, r in ipairs(locals) do best[#best + 1] = r end
  if by_axis or #threads < 2 or #threads > M.MAX_SEARCH or accesses.opaque then return best end
  accesses = distinct(accesses, threads)
  if #accesses == 0 then return best end
  local fewest = M.sectors(best, accesses)
  local function consider(order)
    local n = M.sectors(order, accesses)
    if n < fewest then best, fewest = order, n end
  end
  if shuffled then
    -- the groups first, as numbered; only the local ranges' order is free
    permutations(locals, function(order)
      local full = { table.unpack(groups) }
      for _, r in ipairs(order) do full[#full + 1] = r end
      consider(full)
    end)
  else
    permutations(threads, consider)
  end
  return best
end

return M
