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
--     on an H200 for sum() of 2^26 floats: 962 against 3602 GB/s.)
--  2. Workgroups: the innermost output axis (contiguous in memory for the stores) is split
--     into threads of a workgroup (LOCAL), as many as divide it up to LOCAL_MAX threads in
--     all; then the next axis with the room left. Neighbouring threads then touch
--     neighbouring addresses (coalesced loads and stores).
--  3. Large elementwise kernels: UPCAST of the innermost axis's outer part, 4 elements per
--     thread, a workgroup apart (still coalesced).
local tensor_cores = require "tcl.heuristics.tensor_cores"

local M = {}

--- A reduction this long, feeding at most GROUP_MAX_OUTPUTS outputs, is shared by a workgroup.
M.GROUP_MIN_STEPS = 256
M.GROUP_MAX_OUTPUTS = 4096
--- Threads of one group reduction, and of a workgroup in all.
M.GROUP_SIZES = { 256, 128, 64, 32, 16 }
M.LOCAL_MAX = 256

--- Elements per thread of large elementwise kernels, and from how many outputs on: measured on
-- an H200 (a*b+1 on 2^26 float32, bench/gpu_bench.lua variants): 4274 GB/s with 4, 4213 with
-- 2, 3428 with one element per thread (the device's copy: 4140 GB/s).
M.UPCAST_ELEMENTWISE = 4
M.UPCAST_MIN_OUTPUTS = 1 << 20

local LOCAL_SIZES = { 256, 128, 64, 32, 16, 8, 4, 2 }

local function largest_divisor(n, sizes, limit)
  for _, s in ipairs(sizes) do
    if s <= limit and n % s == 0 and s < n then return s end
  end
  return nil
end

function M.optimize(k)
  -- a matmul the target's tensor cores take: TC, and nothing else (the pass lowers it whole)
  local gpu = k.caps.gpu
  local found = (k.caps.tensor_cores or 0) > 0 and tensor_cores.match(k:graph(), gpu)
  local config = found and tensor_cores.choose(found, k.caps.threads_max)
  if config and k:try_apply("TC", 1, tensor_cores.arg_of(config)) then return end
  local threads = 1
  local reduce = k:axes("reduce")
  if #reduce > 0 and k:output_size() <= M.GROUP_MAX_OUTPUTS and reduce[1].size >= M.GROUP_MIN_STEPS then
    local n = largest_divisor(reduce[1].size, M.GROUP_SIZES, M.LOCAL_MAX)
    -- GROUP counts the reduce axes (1 = the first)
    if n and k:try_apply("GROUP", 1, n) then threads = n end
  end
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
