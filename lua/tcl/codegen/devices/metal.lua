-- tcl.codegen.devices.metal — the Metal backend of the lowering driver (tcl.codegen.driver.lower): kernels
-- rendered to the Metal Shading Language (tcl.gpu), compiled by the Metal framework into
-- compute pipelines and dispatched on the GPU through the Objective-C runtime (tcl.metal).
-- macOS only. Layer: codegen.
--
-- A backend's shape: tcl.codegen.devices.emu's header. Here:
--   * renderer: Metal's GPU target (tcl.codegen.devices.gpu_targets: threadgroups, threadgroup memory,
--     SIMD groups), its limits narrowed to the device's (threads per threadgroup axis,
--     threadgroup memory) once the device is open.
--   * options ("metal-Apple M2"): the device's name. The module loads anywhere (specs call
--     launch_of and params_of without a Mac); reading options or renderer.gpu opens the device,
--     which the first Metal kernel does, so DEVICE=METAL on Linux fails there with "Metal: only
--     available on macOS".
--   * A program's launch comes from its linear program: threadgroups = the sizes of SPECIAL
--     gidx0..2, threads per threadgroup = those of lidx0..2 (M.launch_of); its buffers are the
--     PARAMs in slot order (M.params_of), bound at [[buffer(slot)]] and checked at every run
--     (count, dtype, numel). The pipeline's own limit of threads per threadgroup (which a
--     kernel's register use may bring below the device's) is checked when it is made.
--   * Nothing is cached on disk: the Metal framework compiles source to a library inside the
--     process (newLibraryWithSource:), and its public API has no way to write that library out
--     short of binary archives or Xcode's `metal` compiler; kernels are memoized in memory
--     (tcl.codegen.driver.kernel_cache) as on every device. M.stats.disk_hits stays 0.
--   * program:dump() is the Metal source (DEBUG=4); a run returns the GPU time of its command
--     buffer (DEBUG=2).
-- M.allocate(dtype, numel) makes device storage (BEAM's buffers); M.stats counts compiles
-- since the state opened.
local core = require "tcl.core"
local env = require "tcl.env"
local targets = require "tcl.codegen.devices.gpu_targets"
local gpu_backend = require "tcl.codegen.devices.gpu_backend"

local target = targets.get("METAL")

local M = {
  device = "METAL",
  stats = { compiled = 0, disk_hits = 0, compile_seconds = 0 },
}

--- The GPU limits kernels are shaped for on a device: the Metal target's (base), narrowed to
-- what the device reports (info: tcl.metal.device()'s table; without apple_family, the
-- target's tensor cores and SIMD groups are assumed).
function M.gpu_limits(base, info)
  local out = gpu_backend.narrowed_limits(base, { threads_max = info.threads_per_threadgroup,
    local_bytes = info.threadgroup_bytes, local_max = info.max_threadgroup })
  -- the Metal feature set tables: simdgroup matrices from Apple7 (M1) on, SIMD permutes
  -- (simd_shuffle_xor) from Apple6; an AMD or Intel GPU (family 0) has SIMD groups of 8 to 64
  -- threads, so no shuffle (they assume 32) and no tensor cores there
  local family = info.apple_family
  if family and family < 7 then out.tensor_cores = {} end
  if family and family < 6 then out.warp = nil end
  return out
end

--- The line DEBUG >= 1 prints when the device opens: the GPU and what its kernels use (gpu:
-- M.gpu_limits' table).
function M.describe(info, gpu)
  local family = info.apple_family or 0
  return string.format("Metal: %s, %s; %s, %s, %d KiB of threadgroup memory", tostring(info.name),
    family > 0 and ("Apple GPU family " .. family) or "not an Apple GPU",
    #(gpu.tensor_cores or {}) > 0 and "simdgroup matrices" or "no simdgroup matrices",
    gpu.warp and string.format("shuffles in SIMD groups of %d", gpu.warp) or "reductions through threadgroup memory",
    gpu.local_bytes // 1024)
end

-- The transcendentals become tcl's polynomials (tcl.patterns.transcendental), as on CUDA and
-- the CPU, so results and Tensor.ULP_BOUNDS are the same on every device: Metal's own exp2,
-- log2, sin, cos and pow have bounds of their own (the Metal specification's tables). What a
-- linear program asks of a launch is as CUDA's (workgroups are threadgroups, threads per
-- workgroup threads per threadgroup). device(): the open device's facts, once: { info =,
-- options =, gpu = }.
local native, device = gpu_backend.attach(M, {
  label = "Metal", module = "tcl.metal", renderer = "metal", target = target, dialect = "metal",
  local_memory = "threadgroup memory",
  lacks = { EXP2 = true, LOG2 = true, SIN = true, COS = true, POW = true,
    EXP = true, SIGMOID = true, TANH = true, SILU = true, SOFTPLUS = true, ELU = true },
  open = function(info)
    local gpu = M.gpu_limits(target.gpu, info)
    if env.DEBUG >= 1 then io.stderr:write(M.describe(info, gpu), "\n") end
    return { options = "metal-" .. info.name, gpu = gpu }
  end,
})

---------------------------------------------------------------------------------------------
-- building: the source goes to the device as it is (Metal compiles it)

function M.build_many(jobs)
  local dev = device()
  local _, _ = native("tcl.metal"), native("tcl.gpu")
  local programs = {}
  for i, job in ipairs(jobs) do
    local r = M.render(job, dev)
    local start = core.clock()
    local program = M.program(r.source, job, r)
    M.stats.compiled = M.stats.compiled + 1
    M.stats.compile_seconds = M.stats.compile_seconds + (core.clock() - start)
    programs[i] = gpu_backend.program({ name = job.name, native = program, bytes = program.bytes, source = r.source,
      entry = r.entry, global_size = r.launch.global_size, local_size = r.launch.local_size })
  end
  return programs
end

return M
