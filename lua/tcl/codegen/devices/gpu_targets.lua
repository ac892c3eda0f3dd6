-- tcl.codegen.devices.gpu_targets — what a GPU renderer offers kernels: launch limits, local memory,
-- the optimizer's capabilities. One table per target; the CUDA and Metal backends use theirs,
-- and EMU's GPU mode (EMU_GPU=CUDA or METAL) borrows one, so that kernels shaped for a GPU
-- run, and are checked for races, on any machine. Layer: codegen.
--
--   local targets = require "tcl.codegen.devices.gpu_targets"
--   local t = targets.get("CUDA")      -- or "CUDA_SM75", "CUDA_SM90", "METAL"; an unknown name is
--                                       -- an error
--                                       -- listing them
--   t.name (the renderer's dialect), t.id (the target's own name, lower case),
--   t.gpu = { grid_max = {x, y, z}, local_max = {x, y, z}, threads_max =,
--                     local_bytes =, warp =, tensor_cores = { WMMA shape names } }
--   t.opt_caps()                        -- tcl.opt's caps (src/opt/kernel_opt.h) plus the
--                                       -- facts heuristics read (warp, local_bytes)
local M = {}

local TARGETS = {
  -- NVIDIA, compute capability 8.0 and later: 48 KiB of static shared memory per block
  CUDA = { name = "cuda", gpu = { grid_max = { 2147483647, 65535, 65535 }, local_max = { 1024, 1024, 64 },
    threads_max = 1024, local_bytes = 48 * 1024, warp = 32,
    tensor_cores = { "m16n8k16_f16_f32", "m16n8k16_bf16_f32" } } },
  -- Apple GPUs: 32 KiB of threadgroup memory, 1024 threads per threadgroup, SIMD groups of 32
  METAL = { name = "metal", gpu = { grid_max = { 4294967295, 65535, 65535 }, local_max = { 1024, 1024, 1024 },
    threads_max = 1024, local_bytes = 32 * 1024, warp = 32, tensor_cores = { "m8n8k8_f32_f32" } } },
}

-- NVIDIA Hopper (compute capability 9.0, code for sm_90a): CUDA's, plus the warpgroup shapes
-- (wgmma) that TC's configurations 3xxxx use, and 227 KiB of shared memory per block (above
-- 48 KiB dynamic, opted into at launch)
do
  local hopper = { local_bytes = 227 * 1024, tensor_cores = { table.unpack(TARGETS.CUDA.gpu.tensor_cores) } }
  for _, input in ipairs { "f16", "bf16" } do
    for _, n in ipairs { 64, 128, 256 } do
      hopper.tensor_cores[#hopper.tensor_cores + 1] = string.format("wg_m64n%dk16_%s_f32", n, input)
    end
  end
  for k, v in pairs(TARGETS.CUDA.gpu) do -- the rest as CUDA's (copies: the targets share no table)
    if hopper[k] == nil then hopper[k] = type(v) == "table" and { table.unpack(v) } or v end
  end
  TARGETS.CUDA_SM90 = { name = "cuda", gpu = hopper }
end

-- NVIDIA before Ampere (compute capability below 8.0; 7.5, Turing, is the oldest CUDA 13
-- compiles for): CUDA's limits without tensor cores, as the shapes tcl renders (mma.sync
-- m16n8k16) and the staged configurations' cp.async need 8.0
do
  local turing = { tensor_cores = {} }
  for k, v in pairs(TARGETS.CUDA.gpu) do
    if turing[k] == nil then turing[k] = type(v) == "table" and { table.unpack(v) } or v end
  end
  TARGETS.CUDA_SM75 = { name = "cuda", gpu = turing }
end

local function caps_of(target)
  return function()
    local gpu = target.gpu
    return { has_threads = false, threads = 1, has_local = true, has_shared = true, shared_max = gpu.local_bytes,
      tensor_cores = #(gpu.tensor_cores or {}),
      vector_bytes = 16, vector_registers = 64, warp = gpu.warp, local_bytes = gpu.local_bytes,
      threads_max = gpu.threads_max, gpu = gpu, cache = { l1 = 0, l2 = 0, l3 = 0 } }
  end
end

for key, target in pairs(TARGETS) do
  target.opt_caps = caps_of(target)
  target.id = key:lower() -- names the target in cache keys: "cuda" and "cuda_sm90" render alike
end

--- The target named name (any case).
function M.get(name)
  local target = type(name) == "string" and TARGETS[name:upper()]
  if not target then
    error(string.format("unknown GPU target '%s' (known: CUDA, CUDA_SM75, CUDA_SM90, METAL)", tostring(name)), 0)
  end
  return target
end

return M
