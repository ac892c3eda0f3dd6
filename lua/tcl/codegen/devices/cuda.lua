-- tcl.codegen.devices.cuda — the CUDA backend of the lowering driver (tcl.codegen.driver.lower): kernels
-- rendered to CUDA C (tcl.gpu), compiled to PTX by NVRTC (tcl.nvrtc) for the GPU's
-- architecture, cached on disk, loaded and launched through the driver API (tcl.cuda).
-- Layer: codegen.
--
-- A backend's shape: tcl.codegen.devices.emu's header. Here:
--   * renderer: CUDA's GPU target (tcl.codegen.devices.gpu_targets: workgroups, local memory, warps),
--     its limits narrowed to the device's (threads per block, block and grid sizes, shared
--     memory per block: the opt-in limit, as a kernel with more than 48 KiB gets its local
--     memory as dynamic shared memory, facts.dynamic_local_bytes, given at launch) once the
--     device is open.
--   * options ("cuda-sm_80"): the architecture kernels are compiled for (M.target_of: "sm_90a"
--     on compute capability 9.0, whose target adds the warpgroup tensor cores; below 8.0 a
--     target without tensor cores; the newest NVRTC knows for a GPU newer than NVRTC). The
--     module loads anywhere (specs call
--     launch_of and params_of without a GPU); reading options or renderer.gpu opens the device,
--     which the first CUDA kernel does, so DEVICE=CUDA without a driver or a GPU fails there
--     with the driver's message ("CUDA: cannot load the NVIDIA driver library ...").
--   * A program's launch comes from its linear program: grid = the sizes of SPECIAL gidx0..2,
--     block = those of lidx0..2 (M.launch_of); its buffers are the PARAMs in slot order
--     (M.params_of), checked at every run (count, dtype, numel).
--   * The kernels of one build (a schedule's, a BEAM round's candidates) that are not on disk
--     compile together, one NVRTC compile per core (nvrtc.compile_ptx_many).
--   * PTX is cached on disk (tcl.env: CACHELEVEL, CACHE_DIR) under a key made of the CUDA
--     source, the options and NVRTC's version, so any change of a rule, a pass or the renderer
--     that changes the code misses the cache; a corrupt entry reads as absent.
--   * program:dump() is the CUDA source (DEBUG=4), program:assembly() the PTX (DEBUG=7);
--     program:run(buffers, timed) returns the device time between two events around the launch
--     (DEBUG=2), or with timed false queues the launch and returns nothing: a copy to the host
--     or tcl.synchronize() waits for it (src/runtime/cuda/cuda_driver.h).
-- M.allocate(dtype, numel) makes device storage (BEAM's buffers); M.stats counts NVRTC
-- compiles and disk hits since the state opened.
local core = require "tcl.core"
local env = require "tcl.env"
local runtime = require "tcl.runtime"
local disk_cache = require "tcl.codegen.driver.disk_cache"
local targets = require "tcl.codegen.devices.gpu_targets"
local gpu_backend = require "tcl.codegen.devices.gpu_backend"

local target = targets.get("CUDA")

local M = {
  device = "CUDA",
  stats = { compiled = 0, disk_hits = 0, compile_seconds = 0 },
}

--- The GPU limits kernels are shaped for on a device: the CUDA target's (base), narrowed to
-- what the device reports (info: tcl.cuda.device()'s table).
function M.gpu_limits(base, info)
  return gpu_backend.narrowed_limits(base, {
    threads_max = info.threads_per_block,
    -- beyond 48 KiB a kernel's shared memory is dynamic, opted into at load (tcl.cuda's program)
    local_bytes = info.shared_bytes_optin or info.shared_bytes,
    local_max = info.max_block, grid_max = info.max_grid, warp = info.warp_size,
  })
end

--- The GPU target and the architecture kernels are compiled for on a device (info:
-- tcl.cuda.device()'s table; compiler: { version = "13.0", archs = the compute capabilities
-- times ten that NVRTC compiles for }, or nil when unknown). The code is for the device's own
-- architecture, or, when NVRTC does not list it, the newest listed below it: PTX for an older
-- architecture runs on newer GPUs (the driver compiles it when the module loads). Then
-- compute capability 9.0 (H100, H200) gets CUDA_SM90, whose warpgroup tensor cores (wgmma)
-- need code for sm_90a; below 8.0 (T4, RTX 20x0) CUDA_SM75, without tensor cores; the rest
-- CUDA. Returns target, arch; or nil, why when NVRTC lists nothing this GPU runs.
function M.target_of(info, compiler)
  local cc = info.compute_capability or {}
  local own = (cc[1] or 0) * 10 + (cc[2] or 0)
  local code, archs = own, compiler and compiler.archs
  if archs then
    code = nil
    for _, a in ipairs(archs) do
      if a <= own and (not code or a > code) then code = a end
    end
    if not code then
      local listed = {}
      for n, a in ipairs(archs) do listed[n] = "sm_" .. a end
      return nil, string.format("CUDA: this GPU (%s, compute capability %d.%d) is older than every architecture "
        .. "NVRTC %s compiles for (%s): use a CUDA toolkit that supports sm_%d (TCL_CUDA_PATH names its directory)",
        tostring(info.name), cc[1] or 0, cc[2] or 0, compiler.version, table.concat(listed, ", "), own)
    end
  end
  -- sm_90a code runs on compute capability 9.0 only
  if code == 90 and own == 90 then return targets.get("CUDA_SM90"), "sm_90a" end
  local arch = code == own and info.arch or ("sm_" .. code)
  if code < 80 then return targets.get("CUDA_SM75"), arch end
  return target, arch
end

--- The line DEBUG >= 1 prints when the device opens: the GPU, and what its kernels are made
-- for (target_of's target and arch; compiler as target_of takes it).
function M.describe(info, base, arch, compiler)
  local cc = info.compute_capability or {}
  local cores = #(base.gpu.tensor_cores or {})
  local text = string.format("CUDA: %s, compute capability %d.%d, %d SMs, %.1f GiB; kernels for %s%s, target %s (%s)",
    tostring(info.name), cc[1] or 0, cc[2] or 0, info.multiprocessors or 0, (info.total_bytes or 0) / 2 ^ 30, arch,
    compiler and (" by NVRTC " .. compiler.version) or "", base.id:upper(),
    cores > 0 and string.format("%d tensor core shapes", cores) or "no tensor cores")
  if arch ~= info.arch and arch ~= "sm_90a" then
    text = text .. string.format("; NVRTC does not compile for %s: the driver compiles the PTX for this GPU", info.arch)
  end
  return text
end

-- CUDA's own exp2f, log2f, sinf, cosf and powf are off by up to 2 ulp or more (the CUDA
-- programming guide's table): the ops become tcl's polynomials (tcl.patterns.transcendental),
-- as on the CPU, so results and Tensor.ULP_BOUNDS are the same on every device. The kernels
-- they sit in are bound by memory bandwidth, where the extra arithmetic is free.
-- device(): the open device's facts, once: { info =, arch =, options =, gpu = }.
local native, device = gpu_backend.attach(M, {
  label = "CUDA", module = "tcl.cuda", renderer = "cuda", target = target, dialect = "cuda",
  local_memory = "local memory per block",
  lacks = { EXP2 = true, LOG2 = true, SIN = true, COS = true, POW = true,
    EXP = true, SIGMOID = true, TANH = true, SILU = true, SOFTPLUS = true, ELU = true },
  open = function(info)
    -- what NVRTC compiles for, when it is there (copies need no compiler: its absence is
    -- reported by the first kernel)
    local have, nvrtc = pcall(require, "tcl.nvrtc")
    local compiler
    if have and nvrtc.available() then
      compiler = { version = string.format("%d.%d", nvrtc.version()), archs = nvrtc.supported_archs() }
    end
    local base, arch = M.target_of(info, compiler)
    if not base then -- no kernel can be compiled: the first says why
      return { unsupported = arch, options = "cuda-unsupported", gpu = M.gpu_limits(target.gpu, info) }
    end
    if env.DEBUG >= 1 then io.stderr:write(M.describe(info, base, arch, compiler), "\n") end
    return { arch = arch, options = "cuda-" .. arch, gpu = M.gpu_limits(base.gpu, info) }
  end,
})

---------------------------------------------------------------------------------------------
-- building: PTX from NVRTC, through the disk cache

-- NVRTC's version as part of the disk cache key: another compiler may write other PTX.
local compiler

local function load(ptx, job, r, info)
  local program, why = M.program(ptx, job, r, { shared_bytes = r.facts.dynamic_local_bytes }, true)
  if program then return program end
  if why:find("UNSUPPORTED_PTX_VERSION", 1, true) then
    why = why .. string.format(" (NVRTC %s writes PTX newer than this driver (%d) reads: use a CUDA toolkit no "
      .. "newer than the driver, TCL_CUDA_PATH)", compiler, info.driver_version)
  end
  error(why, 0)
end

function M.build_many(jobs)
  local dev = device()
  local _, _, nvrtc = native("tcl.cuda"), native("tcl.gpu"), native("tcl.nvrtc")
  local dir = disk_cache.dir()
  -- render every job and look its PTX up on disk; the misses compile together, in parallel
  local rendered, misses = {}, {}
  for i, job in ipairs(jobs) do
    local r = M.render(job, dev)
    local facts = r.facts
    if facts.arch and facts.arch ~= dev.arch then
      error(string.format("kernel '%s' uses instructions of %s (warpgroup tensor cores: wgmma), but this GPU's "
        .. "code is for %s", job.name, facts.arch, dev.arch), 0)
    end
    if not compiler then
      local have, why = nvrtc.available()
      if not have then error("CUDA: " .. tostring(why), 0) end
      compiler = string.format("nvrtc%d.%d", nvrtc.version())
    end
    if dev.unsupported then error(dev.unsupported, 0) end
    r.key = string.format("cuda-ptx|%s|%s|%s", dev.options, compiler, r.source)
    r.ptx = dir and runtime.cache_read(dir, r.key)
    r.from_disk = r.ptx ~= nil and r.ptx ~= false
    if r.ptx then M.stats.disk_hits = M.stats.disk_hits + 1 else misses[#misses + 1] = i end
    rendered[i] = r
  end
  if #misses > 0 then
    local start = core.clock()
    local requests = {}
    for n, i in ipairs(misses) do requests[n] = { rendered[i].source, { arch = dev.arch, name = jobs[i].name } } end
    local ok, results = pcall(nvrtc.compile_ptx_many, requests)
    if not ok then
      local why = tostring(results):gsub("^nvrtc%.compile_ptx_many: ", "")
      if not why:find("kernel '", 1, true) then why = string.format("kernel '%s': %s", jobs[misses[1]].name, why) end
      error(why, 0)
    end
    for n, i in ipairs(misses) do rendered[i].ptx = results[n].ptx end
    M.stats.compiled = M.stats.compiled + #misses
    M.stats.compile_seconds = M.stats.compile_seconds + (core.clock() - start)
  end
  local programs = {}
  for i, job in ipairs(jobs) do
    local r = rendered[i]
    if dir and not r.from_disk then runtime.cache_write(dir, r.key, r.ptx) end
    local program = load(r.ptx, job, r, dev.info)
    programs[i] = gpu_backend.program({ name = job.name, native = program, bytes = program.bytes + #r.source,
      source = r.source, assembly = r.ptx, entry = r.entry, global_size = r.launch.global_size,
      local_size = r.launch.local_size })
  end
  return programs
end

return M
