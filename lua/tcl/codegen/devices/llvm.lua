-- tcl.codegen.devices.llvm — the CPU backend of the lowering driver (tcl.codegen.driver.lower): kernels
-- rendered to LLVM IR and compiled to object code by src/codegen (module tcl.llvm), loaded by
-- the state's JIT and run on the thread pool (runtime.cpu_program). Layer: codegen.
--
-- A backend's shape: tcl.codegen.devices.emu's header. Here:
--   * renderer.lacks: the transcendental ops the pass tcl.patterns.transcendental turns into
--     polynomials that LLVM vectorizes (float32); the renderer still has them for the types
--     the pass leaves alone.
--   * options: the renderer, LLVM's version and the host CPU (name and a hash of its
--     features): part of the in-memory and on-disk cache keys.
--   * Kernels are first rendered only, to fingerprint their LLVM IR (llvm.fingerprint_many):
--     the fingerprint plus the options key the on-disk cache, so any change of a rule file, a
--     pass or the renderer that changes the code misses the cache, and nothing stale runs.
--   * Each kernel's entry symbol is named after that key, so identical code shares one copy
--     in the JIT and different code never collides.
--   * The on-disk cache (tcl.env: CACHELEVEL, CACHE_DIR) holds each kernel's object code and
--     facts; a corrupt or foreign entry reads as absent (runtime.cache_read) and is compiled
--     and written again. DEBUG >= 4 compiles anew, so the IR (and at 7 the assembly) can be
--     shown.
-- M.stats counts compiles and disk hits since the state opened.
local env = require "tcl.env"
local runtime = require "tcl.runtime"
local disk_cache = require "tcl.codegen.driver.disk_cache"
local have_llvm, llvm = pcall(require, "tcl.llvm")
if not have_llvm then
  -- absent from the build, or failed while loading (out of memory...): that error as it is
  if not tostring(llvm):find("module 'tcl.llvm' not found", 1, true) then error(llvm, 0) end
  error("the LLVM renderer (module tcl.llvm) is not in this build", 0)
end
local core = require "tcl.core"
local kernel_cache = require "tcl.codegen.driver.kernel_cache"

local M = {
  device = "CPU",
  -- vector_lanes: the most lanes of a vector range the renderer takes (tcl.codegen.passes.expand)
  renderer = { name = "llvm", lacks = { EXP2 = true, LOG2 = true, SIN = true, COS = true, POW = true,
    EXP = true, SIGMOID = true, TANH = true, SILU = true, SOFTPLUS = true, ELU = true }, vector_lanes = 64 },
  stats = { compiled = 0, disk_hits = 0, compile_seconds = 0 },
}

-- The data caches of cpu0 from sysfs: { l1 =, l2 =, l3 = } bytes (0 where unknown).
local function host_caches()
  local out = { l1 = 0, l2 = 0, l3 = 0 }
  for i = 0, 7 do
    local dir = "/sys/devices/system/cpu/cpu0/cache/index" .. i .. "/"
    local function read(name)
      local f = io.open(dir .. name)
      if not f then return nil end
      local v = f:read("l")
      f:close()
      return v
    end
    local level, kind, size = read("level"), read("type"), read("size")
    if not level then break end
    local n, unit = (size or ""):match("^(%d+)([KMG]?)")
    if n and kind ~= "Instruction" then
      local bytes = tonumber(n) * ({ K = 1 << 10, M = 1 << 20, G = 1 << 30 })[unit] or tonumber(n)
      out["l" .. level] = bytes
    end
  end
  return out
end

local fnv = disk_cache.name_of
local target = llvm.target
M.options = string.format("llvm%s-%s-%s-O2", llvm.version, target.cpu, fnv(target.features or ""))

-- Outputs larger than the last-level cache are written with streaming stores: they would not
-- stay in the cache for the next kernel, and bypassing it saves reading each line first.
local NONTEMPORAL_BYTES = math.max(target.cache_bytes > 0 and target.cache_bytes or 32 << 20, 4 << 20)

runtime.configure_cpu { threads = env.THREADS }

local features = target.features or ""
local avx512 = features:find("+avx512f", 1, true) ~= nil
local avx = features:find("+avx", 1, true) ~= nil
local caches = host_caches()

--- What the optimizer may use on this CPU (src/opt/kernel_opt.h's caps, plus the facts the
-- heuristics read): threads of the pool, bytes per vector register and how many there are,
-- cache sizes. A function: THREADS may change at run time.
function M.renderer.opt_caps()
  return {
    has_threads = true, threads = env.THREADS or runtime.cpu_threads(), has_local = false, has_shared = false,
    vector_bytes = avx512 and 64 or avx and 32 or 16, vector_registers = avx512 and 32 or 16,
    cache = { l1 = caches.l1, l2 = caches.l2, l3 = caches.l3 > 0 and caches.l3 or target.cache_bytes },
  }
end

---------------------------------------------------------------------------------------------
-- the on-disk form of a compiled kernel

local FORMAT = 2 -- 2: no work figure (the optimizer decides about threads)

local function serialize(c)
  local parts = { string.pack("<i4s4i8i8", FORMAT, c.entry, c.nparams, c.parallel_size) }
  for i = 1, c.nparams do
    parts[#parts + 1] = string.pack("<s2i8", c.params[i].dtype.name, c.params[i].numel)
  end
  parts[#parts + 1] = string.pack("<s4", c.object)
  return table.concat(parts)
end

local function deserialize(bytes)
  local ok, c = pcall(function()
    local format, entry, nparams, parallel_size, pos = string.unpack("<i4s4i8i8", bytes)
    if format ~= FORMAT then return nil end
    local params = {}
    for i = 1, nparams do
      local name, numel
      name, numel, pos = string.unpack("<s2i8", bytes, pos)
      params[i] = { dtype = assert(core.dtypes[name]), numel = numel }
    end
    local object = string.unpack("<s4", bytes, pos)
    return { entry = entry, nparams = nparams, parallel_size = parallel_size, params = params,
      object = object }
  end)
  return ok and c or nil
end


---------------------------------------------------------------------------------------------
-- building

local Program = {}
Program.__index = Program

function Program:run(buffers) return self.cpu:run(buffers) end
function Program:dump() return self.cpu:dump() end
function Program:assembly() return self.cpu:assembly() end

local function threads() return env.THREADS or runtime.cpu_threads() end

-- The start of the JIT's message when it finds no memory for a kernel's code (src/runtime/cpu/cpu_jit.h).
local NO_CODE_MEMORY = "CPU: no memory for kernel code"

--- Loads a compiled kernel into the state's JIT. When the JIT finds no memory for its code,
-- the kernels the cache holds are let go (the ones in use stay) and the load is tried once
-- more; a second failure is an error naming the kernel.
local function load(c, name)
  local ok, cpu = pcall(runtime.cpu_program, c, { name = name })
  if ok then return cpu end
  if not tostring(cpu):find(NO_CODE_MEMORY, 1, true) then error(cpu, 0) end
  kernel_cache.set_limit(kernel_cache.set_limit(0)) -- evicts every kernel, keeps the bound
  collectgarbage() -- the evicted programs give their code back when collected
  ok, cpu = pcall(runtime.cpu_program, c, { name = name })
  if ok then return cpu end
  error(string.format("kernel '%s': %s (even after the kernel cache let its kernels go)", name,
    (tostring(cpu):gsub("^runtime%.cpu_program: ", ""))), 0)
end

--- The LLVM IR and the machine assembly of a linearized kernel (a list), compiled as
-- build_many compiles it (tcl.viz shows them). upcast_lanes: the lowering's (ctx.upcast_lanes).
function M.listing(list, name, upcast_lanes)
  local c = llvm.compile(list, { name = name, entry = "tcl_listing", opt = 2, want_ir = true, want_asm = true,
    nontemporal_bytes = NONTEMPORAL_BYTES, loop_vectorize = not upcast_lanes })
  return c.ir, c.asm
end

function M.build_many(jobs)
  local dir = disk_cache.dir()
  local fresh = env.DEBUG >= 4 -- keep the IR (and the assembly) to show
  local renders = {}
  for i, job in ipairs(jobs) do
    -- a kernel with upcast lanes brings its own vectors (src/codegen/llvm_compile.h)
    job.loop_vectorize = not job.upcast_lanes
    renders[i] = { job.list, { name = job.name, nontemporal_bytes = NONTEMPORAL_BYTES,
      loop_vectorize = job.loop_vectorize } }
  end
  local fingerprints = llvm.fingerprint_many(renders, { threads = threads() })
  local compiled, misses, requests, keys = {}, {}, {}, {}
  for i, job in ipairs(jobs) do
    keys[i] = fingerprints[i] .. "|" .. M.options
    job.entry = "tcl_" .. fnv(keys[i])
    local hit = dir and not fresh and runtime.cache_read(dir, keys[i])
    compiled[i] = hit and deserialize(hit)
    if compiled[i] then
      M.stats.disk_hits = M.stats.disk_hits + 1
    else
      misses[#misses + 1] = i
      requests[#requests + 1] = { job.list, { name = job.name, entry = job.entry, opt = 2, want_ir = env.DEBUG >= 4,
        want_asm = env.DEBUG >= 7, nontemporal_bytes = NONTEMPORAL_BYTES, loop_vectorize = job.loop_vectorize } }
    end
  end
  if #requests > 0 then
    -- the longest programs first: compile threads take requests in order, so a long kernel
    -- started last would finish alone after the others
    local by_size = {}
    for j = 1, #misses do by_size[j] = j end
    table.sort(by_size, function(x, y)
      local nx, ny = #jobs[misses[x]].list, #jobs[misses[y]].list
      if nx ~= ny then return nx > ny end
      return x < y
    end)
    local sorted_misses, sorted_requests = {}, {}
    for j, k in ipairs(by_size) do sorted_misses[j], sorted_requests[j] = misses[k], requests[k] end
    misses, requests = sorted_misses, sorted_requests
    local start = core.clock()
    local results = llvm.compile_many(requests, { threads = threads() })
    M.stats.compile_seconds = M.stats.compile_seconds + (core.clock() - start)
    M.stats.compiled = M.stats.compiled + #requests
    for j, i in ipairs(misses) do
      compiled[i] = results[j]
      if dir then runtime.cache_write(dir, keys[i], serialize(results[j])) end
    end
  end
  local programs = {}
  for i, job in ipairs(jobs) do
    local c = compiled[i]
    local cpu = load(c, job.name)
    -- compile_seconds: this kernel's time on a compile worker (none for a disk-cache hit;
    -- tcl.profile shows it)
    -- object, entry, params and parallel_size stay for tcl.export, which links the kernels'
    -- object code into a standalone program (the object is already a Lua string: no copy,
    -- but memory the kernel holds: bytes counts it)
    programs[i] = setmetatable({ name = job.name, cpu = cpu, bytes = cpu.bytes + #c.object, object = c.object,
      entry = c.entry, params = c.params, parallel_size = c.parallel_size, compile_seconds = c.seconds }, Program)
  end
  return programs
end

return M
