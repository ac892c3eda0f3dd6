-- tcl.heuristics.gpu — the default heuristic for renderers with workgroups (CUDA, Metal,
-- EMU's GPU mode); tcl.heuristics.default hands such kernels here. The API it uses is
-- tcl.heuristics.kernel's.
--
-- In order:
--  0. A matmul of float16/bfloat16 (CUDA) or float32 (Metal) inputs that the target's tensor
--     cores take gets TC alone, with the tile configuration tcl.heuristics.tensor_cores.choose
--     picks (blocks as large as the sizes divide, up to 2 x 2 warps of 4 x 4 tiles, smaller
--     when there would be fewer workgroups than a large GPU has SMs): the pass "tensor cores"
--     turns it into warp tiles of WMMA.
--  1. Small outputs of long reductions: the reduction is shared by a workgroup (GROUPTOP):
--     each thread reduces a slice, the partials meet in local memory. Without it a kernel
--     like sum() would run its whole reduction on one thread.
--  2. Workgroups: the innermost output axis (contiguous in memory for the stores) is split
--     into threads of a workgroup (LOCAL), as many as divide it up to LOCAL_MAX threads in
--     all; then the next axis with the room left. Neighbouring threads then touch
--     neighbouring addresses (coalesced loads and stores).
local tensor_cores = require "tcl.heuristics.tensor_cores"

local M = {}

--- A reduction this long, feeding at most GROUP_MAX_OUTPUTS outputs, is shared by a workgroup.
M.GROUP_MIN_STEPS = 256
M.GROUP_MAX_OUTPUTS = 4096
--- Threads of one group reduction, and of a workgroup in all.
M.GROUP_SIZES = { 256, 128, 64, 32, 16 }
M.LOCAL_MAX = 256

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
    -- GROUPTOP counts the reduce axes (1 = the first)
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
end

return M.optimize
