-- tcl.heuristics.gpu — the default heuristic for renderers with workgroups (CUDA, Metal,
-- EMU's GPU mode); tcl.heuristics.default hands such kernels here. The API it uses is
-- tcl.heuristics.kernel's.
--
-- In order:
--  0. A matmul of float16/bfloat16 (CUDA) or float32 (Metal) inputs that the target's tensor
--     cores take gets TC alone, with the tile configuration tcl.heuristics.tensor_cores.choose
--     picks (blocks as large as the sizes divide, up to 2 x 2 warps of 4 x 8 tiles, smaller
--     when there would be fewer workgroups than a large GPU has SMs): the pass "tensor cores"
--     turns it into warp tiles of WMMA.
--  1. Small outputs of long reductions: the reduction is shared by a workgroup (GROUP): each
--     thread reduces every n-th element (neighbouring threads read neighbouring elements),
--     the partials meet in local memory. Without it a kernel like sum() would run its whole
--     reduction on one thread. (GROUPTOP, contiguous slices per thread, measured 3.7x slower
--     on an H200 for sum() of 2^26 floats: 962 against 3602 GB/s.) A column sum, whose reads
--     step by one element along an output axis and not along the reduction, first gets
--     COLUMN_THREADS threads over that axis (LOCAL) and the group the rest (sum(1) of a
--     512 x 512 matrix: 32 columns x 8 rows of threads), so that a warp reads 32 neighbouring
--     elements of a row; a group over the rows alone would read 32 rows' elements, a cache
--     line each (EMU's memory profile: 13 % of the sectors it touched were needed, now 100 %).
--     A reduction over several axes none of which is that long, with as many steps in all (a
--     batch norm's sums per channel over N, H and W), shares one of them (shared_axis): it
--     had a thread per channel, 8 threads for a whole (16, 8, 26, 26) tensor.
--  2. Register tiles: a reduction that is not shared and whose output has a reuse axis (a
--     float32 matmul's rows: B does not depend on them) gets TILE_THREADS x TILE_THREADS
--     threads over the reuse axis and the unit-stride output axis (LOCAL, the unit-stride
--     axis's threads neighbouring in the warp), and each thread a tile of up to 4 x 4 outputs
--     a workgroup apart (UPCAST of the two axes' outer parts: the loads stay coalesced). Each
--     value a thread loads in the reduction then feeds 4 products instead of one; the tile
--     shrinks while the kernel would have fewer workgroups than a large GPU runs at once
--     (tcl.heuristics.tensor_cores.PARALLEL_WORKGROUPS).
--  2b. Rows: a reduction that is neither shared nor tiled, along an axis some read steps by 1
--     (a softmax over many rows: attention's), gets a warp per row (GROUP of 32 on that axis):
--     the warp's lanes read neighbouring elements, and the pass "group reduces" combines them
--     by shuffles, without local memory or a barrier; the workgroup takes several rows (3).
--     A thread per row would read its own row, every load of a warp touching 32 cache lines.
--     Rows that a warp does not divide get the largest power of two lanes that divides them,
--     from MIN_ROW_LANES on (rows of 16: two a warp, EMU's memory profile 13 % -> 100 %).
--  3. Workgroups: the innermost output axis (contiguous in memory for the stores) is split
--     into threads of a workgroup (LOCAL), as many as divide it up to LOCAL_MAX threads in
--     all; then the next axis with the room left. Neighbouring threads then touch
--     neighbouring addresses (coalesced loads and stores).
--  3b. Transposing elementwise kernels (a store that steps by one element along one axis, a
--     load along another, as x:transpose(1, 2):contiguous()): a square tile of TRANSPOSE_TILE
--     x TRANSPOSE_TILE threads over the two axes and nothing else; the pass "stage
--     transposes" (tcl.codegen.passes.stage_transposes) reads the load through local memory, so that
--     the lanes read neighbours and write neighbours (EMU's memory profile: the load 13 % of
--     the sectors it touched, then 100 %).
--  4. Large elementwise kernels: UPCAST of the innermost axis's outer part, 4 elements per
--     thread, a workgroup apart (still coalesced).
local tensor_cores = require "tcl.heuristics.tensor_cores"

local M = {}

--- A reduction this long, feeding at most GROUP_MAX_OUTPUTS outputs, is shared by a workgroup.
M.GROUP_MIN_STEPS = 256
M.GROUP_MAX_OUTPUTS = 4096
--- Threads of one group reduction, and of a workgroup in all.
M.GROUP_SIZES = { 256, 128, 64, 32, 16 }
M.LOCAL_MAX = 256
--- Threads over the columns of a shared column sum: a warp's.
M.COLUMN_THREADS = 32
--- The fewest lanes a row gets (step 2b); shorter rows keep a thread each.
M.MIN_ROW_LANES = 4

--- The side of the square tile of threads a transposing elementwise kernel gets (step 3b).
M.TRANSPOSE_TILE = 16

--- Elements per thread of large elementwise kernels, and from how many outputs on: measured on
-- an H200 (a*b+1 on 2^26 float32, bench/gpu_bench.lua variants): 4274 GB/s with 4, 4213 with
-- 2, 3428 with one element per thread (the device's copy: 4140 GB/s).
M.UPCAST_ELEMENTWISE = 4
M.UPCAST_MIN_OUTPUTS = 1 << 20

local LOCAL_SIZES = { 256, 128, 64, 32, 16, 8, 4, 2 }

--- Register tiles: threads along each of the two axes, and the tiles per thread (along the
-- reuse axis, along the unit-stride axis), largest first.
M.TILE_THREADS = 16
M.TILE_SHAPES = { { 4, 4 }, { 2, 4 }, { 4, 2 }, { 2, 2 }, { 1, 4 }, { 1, 2 } }

-- A warp per row (step 2b) when the last reduce axis is one some read steps by 1 and a warp
-- divides it; for shorter rows, the largest power of two lanes that divides them, from
-- MIN_ROW_LANES on (rows of 16: a half warp each, two rows a warp). Returns the threads made.
local function lanes_per_row(k, reduce)
  local warp = k.caps.warp or 32
  local last = reduce[#reduce]
  local lanes = warp
  while lanes >= M.MIN_ROW_LANES and last.size % lanes ~= 0 do lanes = lanes // 2 end
  if lanes < M.MIN_ROW_LANES then return 1 end
  for _, b in ipairs(k:buffers()) do
    -- GROUP counts the reduce axes (#reduce: the last)
    if not b.store and b.strides[last.axis] == 1 then
      return k:try_apply("GROUP", #reduce, lanes) and lanes or 1
    end
  end
  return 1
end

-- Applies the register tile (step 2) when the kernel has one; returns the threads it made.
local function register_tile(k)
  local vec, reuse = k:tile_axes()
  local t = M.TILE_THREADS
  if not vec or vec.size % t ~= 0 or reuse.size % t ~= 0 or t * t > (k.caps.threads_max or t * t) then return 1 end
  local others = k:output_size() // (vec.size * reuse.size)
  local shape
  for _, s in ipairs(M.TILE_SHAPES) do
    local rows, cols = s[1], s[2]
    if (reuse.size // t) % rows == 0 and (vec.size // t) % cols == 0 then
      local workgroups = reuse.size // (t * rows) * (vec.size // (t * cols)) * others
      -- as many workgroups as a large GPU runs at once (tensor_cores.PARALLEL_WORKGROUPS)
      if workgroups >= tensor_cores.PARALLEL_WORKGROUPS then shape = s break end
    end
  end
  -- the reuse axis's threads first: the unit-stride axis's, made later, take dim x (gpu dims)
  local reuse_axis, vec_axis = reuse.axis, vec.axis
  if not k:try_apply("LOCAL", reuse_axis, t) then return 1 end
  if not k:try_apply("LOCAL", vec_axis, t) then return t end
  -- the global parts keep their axis numbers: upcast them, lanes a workgroup apart
  if shape then
    if shape[2] > 1 then k:try_apply("UPCAST", vec_axis, shape[2]) end
    if shape[1] > 1 then k:try_apply("UPCAST", reuse_axis, shape[1]) end
  end
  return t * t
end

-- A shared column sum (step 1): when some read steps along the reduce axis red by more than
-- one element (a column sum's rows; the second operand of a small matmul, x @ W, along its
-- reduction), and every read steps by 1 or 0 along an output axis that COLUMN_THREADS divides
-- (the columns; x does not depend on W's columns), that axis gets as many threads; returns
-- the threads made.
local function column_threads(k, red)
  local loads = {}
  for _, b in ipairs(k:buffers()) do
    if not b.store then loads[#loads + 1] = b end
  end
  -- lanes along an axis read neighbours or one value in each load that steps by 1 or 0 there
  local function neighbours(r)
    local some = false
    for _, b in ipairs(loads) do
      local s = b.strides[r.axis]
      if s ~= 0 and s ~= 1 then return false end
      some = some or s == 1
    end
    return some
  end
  local function lanes_apart(r)
    for _, b in ipairs(loads) do
      local s = b.strides[r.axis]
      if s ~= 0 and s ~= 1 then return true end
    end
    return false
  end
  -- the group's lanes along the reduction would read some load an element a sector apart
  if not lanes_apart(red) then return 1 end
  for _, r in ipairs(k:axes("global", "loop")) do
    if r.size % M.COLUMN_THREADS == 0 and neighbours(r) then
      return k:try_apply("LOCAL", r.axis, M.COLUMN_THREADS) and M.COLUMN_THREADS or 1
    end
  end
  return 1
end

-- A transposing elementwise kernel (step 3b): the store steps by one element along output
-- axis a, some load along another output axis b (and not along a). Both get TRANSPOSE_TILE
-- threads, the later axis first (LOCAL keeps the numbers of the axes before the one it splits);
-- the pass "stage transposes" then reads the load through local memory. Returns the threads.
local function transpose_tile(k)
  local t = M.TRANSPOSE_TILE
  local store, outputs = nil, k:axes("global", "loop")
  for _, b in ipairs(k:buffers()) do
    if b.store then
      if store then return 1 end
      store = b
    end
  end
  if not store then return 1 end
  local a
  for _, r in ipairs(outputs) do
    if store.strides[r.axis] == 1 then a = r end
  end
  if not a or a.size % t ~= 0 then return 1 end
  for _, b in ipairs(k:buffers()) do
    if not b.store and b.strides[a.axis] ~= 1 then
      for _, r in ipairs(outputs) do
        if r ~= a and b.strides[r.axis] == 1 and r.size % t == 0 and t * t <= (k.caps.threads_max or t * t) then
          local first, second = a, r
          if first.axis < second.axis then first, second = second, first end
          if k:try_apply("LOCAL", first.axis, t) then
            if k:try_apply("LOCAL", second.axis, t) then return t * t end
            return t
          end
          return 1
        end
      end
    end
  end
  return 1
end

local function largest_divisor(n, sizes, limit)
  for _, s in ipairs(sizes) do
    if s <= limit and n % s == 0 and s < n then return s end
  end
  return nil
end

-- The reduce axis a long reduction shares among a workgroup (step 1), its position among the
-- reduce axes and the group's size (nil for none): the first axis when it has GROUP_MIN_STEPS
-- steps (the group size chosen by the caller). A reduction over several shorter axes with as
-- many steps in all (a batch norm's sums over N, H and W) shares one of them whole or in
-- part: from GROUP_SIZES' smallest to LOCAL_MAX threads, preferring an axis some read steps
-- along by one element (the lanes read neighbours), then the larger group.
local function shared_axis(k, reduce)
  if #reduce == 0 then return nil end
  if reduce[1].size >= M.GROUP_MIN_STEPS then return reduce[1], 1 end
  local steps = 1
  for _, r in ipairs(reduce) do steps = steps * r.size end
  if steps < M.GROUP_MIN_STEPS then return nil end
  local unit = {}
  for _, b in ipairs(k:buffers()) do
    for _, r in ipairs(reduce) do
      if not b.store and b.strides[r.axis] == 1 then unit[r] = true end
    end
  end
  local best, at, size
  for i, r in ipairs(reduce) do
    local n = r.size <= M.LOCAL_MAX and r.size or largest_divisor(r.size, M.GROUP_SIZES, M.LOCAL_MAX)
    if n and n >= M.GROUP_SIZES[#M.GROUP_SIZES] then
      local better = not best or (unit[r] and not unit[best]) or (unit[r] == unit[best] and n > size)
      if better then best, at, size = r, i, n end
    end
  end
  return best, at, size
end

function M.optimize(k)
  -- a matmul the target's tensor cores take: TC, and nothing else (the pass lowers it whole)
  local gpu = k.caps.gpu
  local found = (k.caps.tensor_cores or 0) > 0 and tensor_cores.match(k:graph(), gpu)
  local config = found and tensor_cores.choose(found, k.caps.threads_max)
  if config and k:try_apply("TC", 1, tensor_cores.arg_of(config)) then return end
  local threads = 1
  local reduce = k:axes("reduce")
  local shared, which, whole = nil, nil, nil
  if k:output_size() <= M.GROUP_MAX_OUTPUTS then shared, which, whole = shared_axis(k, reduce) end
  if shared then
    local columns = column_threads(k, shared)
    local sizes = columns > 1 and LOCAL_SIZES or M.GROUP_SIZES
    local n = whole or largest_divisor(shared.size, sizes, M.LOCAL_MAX // columns)
    -- GROUP counts the reduce axes (1 = the first)
    threads = columns
    if n and k:try_apply("GROUP", which, n) then threads = columns * n end
  end
  if #reduce > 0 and threads == 1 then threads = register_tile(k) end
  if #reduce > 0 and threads == 1 then threads = lanes_per_row(k, reduce) end
  -- a transposing kernel's tile is all it gets
  if #reduce == 0 and threads == 1 and transpose_tile(k) > 1 then return end
  local limit = math.min(M.LOCAL_MAX, k.caps.threads_max or M.LOCAL_MAX)
  local outputs = k:axes("global", "loop")
  for i = #outputs, 1, -1 do
    local room = limit // threads
    if room < 2 then break end
    local r = outputs[i]
    local n = r.size <= room and r.size > 1 and r.size or largest_divisor(r.size, LOCAL_SIZES, room)
    -- LOCAL counts every range; axes before r keep their numbers while r is split
    if n and k:try_apply("LOCAL", r.axis, n) then threads = threads * n end
  end
  -- elementwise: each thread takes UPCAST_ELEMENTWISE elements a workgroup apart (the outer
  -- part of the innermost axis), loads in flight that a thread per element lacks
  if #reduce == 0 and k:output_size() >= M.UPCAST_MIN_OUTPUTS then
    local global = k:axes("global", "loop")
    local r = global[#global]
    if r and r.size % M.UPCAST_ELEMENTWISE == 0 then k:try_apply("UPCAST", r.axis, M.UPCAST_ELEMENTWISE) end
  end
end

return M.optimize
