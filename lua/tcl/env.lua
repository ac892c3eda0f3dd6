-- tcl.env — the environment variables tcl reads, read once, when tcl loads. Layer: the
-- package's facts (no other Lua module calls os.getenv).
--
--   local env = require "tcl.env"
--   if env.DEBUG >= 2 then ... end
--
-- The fields are plain values: a script or a spec may change them at run time
-- (`require("tcl.env").DEBUG = 2`), and every stage reads them when it needs them. A value
-- a variable does not accept is an error naming it when tcl loads; booleans are 0 or 1, and
-- an empty value is unset.
--   DEBUG               integer, 0 when unset: 1 schedule summary, 2 per-kernel lines,
--                       3 applied opts, 4 program listings (LLVM IR on CPU), 5 kernel ASTs,
--                       6 linearized programs, 7 machine assembly (CPU)
--   NOOPT               boolean: no kernel optimizations (the pipeline's optimize pass)
--   BEAM                integer, 0 when unset: the beam width of the kernel search (0: heuristics)
--   IGNORE_BEAM_CACHE   boolean: search again even when the on-disk BEAM cache has the kernel
--   HEURISTICS          string or nil: a Lua file whose function replaces the default
--                       heuristic (TCL_HEURISTICS)
--   DEVICE              string or nil: the default device of new tensors (any case; CPU when unset)
--   EMU_GPU             string or nil: "CUDA", "CUDA_SM75" (no tensor cores), "CUDA_SM90" (with
--                       wgmma) or "METAL" runs EMU in its GPU mode, with that renderer's
--                       capabilities (workgroups, local memory; kernels checked for races)
--   RENDER_DUMP         string or nil: in EMU's GPU mode, a directory where each kernel's source
--                       in the GPU target's language is written (TCL_RENDER_DUMP; the test
--                       command compiles them all: scripts/check_gpu_sources.lua)
--   REWRITE_TRACE       boolean: graph_rewrite records every match (tcl.pattern.traces())
--   REWRITE_STATS       boolean: per-rule counts and times, printed when the state closes
--   KERNEL_CACHE_BYTES  the bound of the compiled-kernel cache (TCL_KERNEL_CACHE_MB, default 64 MiB)
--   MEMORY_LIMIT_BYTES  integer or nil: the most new host memory one realize may allocate
--                       (TCL_MEMORY_LIMIT_MB; tcl.schedule.memory_check), besides what the
--                       machine has available
--   THREADS             integer or nil: threads of the CPU device's pool (default: the cores)
--   CACHELEVEL          integer, 1 when unset: 0 turns the on-disk cache of compiled kernels off
--   CACHE_DIR           the on-disk cache's directory: TCL_CACHE, else $XDG_CACHE_HOME/tcl,
--                       else ~/.cache/tcl (nil when none of them can be told)
-- (TCLC_LUA_DIR is read by the C embedding layer before any Lua runs: src/api/lua_dir.c;
-- TCL_CUDA_DRIVER, the NVIDIA driver library to load instead of libcuda.so.1, by the CUDA
-- device's binding when it opens the GPU: src/runtime/lua_cuda.c; TCL_METAL_LIBRARY, one library
-- standing in for the Objective-C runtime and Metal (tests), by the Metal device's binding:
-- src/runtime/lua_metal.c.)

-- Every setting is checked when tcl loads: a value that is not one of those accepted is an
-- error naming the variable, never read as something else (DEBUG=x was 0, BEAM=-1 the heuristics).

local quote = require "tcl.quote"

local function refuse(name, accepted, v)
  error(string.format("%s must be %s, got '%s'", name, accepted, quote(v)), 0)
end

--- A variable as a flag: unset, empty or "0" is off, "1" on.
local function flag(name)
  local v = os.getenv(name)
  if v == nil or v == "" or v == "0" then return false end
  if v == "1" then return true end
  refuse(name, "0 or 1", v)
end

--- A variable as an integer >= minimum, `default` when unset or empty.
local function integer(name, minimum, default)
  local v = os.getenv(name)
  if v == nil or v == "" then return default end
  local n = math.tointeger(tonumber(v))
  if n == nil or n < minimum then
    refuse(name, minimum == 1 and "a positive integer" or "an integer >= " .. minimum, v)
  end
  return n
end

local function string_or_nil(name)
  local v = os.getenv(name)
  if v == nil or v == "" then return nil end
  return v
end

-- EMU_GPU's targets (tcl.codegen.devices.gpu_targets; that module loads the renderers, so the names
-- are repeated here to check the setting when tcl loads).
local EMU_GPU_TARGETS = { CUDA = true, CUDA_SM75 = true, CUDA_SM90 = true, METAL = true }

local function emu_gpu()
  local v = string_or_nil("EMU_GPU")
  if v ~= nil and not EMU_GPU_TARGETS[v:upper()] then
    refuse("EMU_GPU", "one of CUDA, CUDA_SM75, CUDA_SM90, METAL", v)
  end
  return v
end

local function cache_dir()
  local dir = string_or_nil("TCL_CACHE")
  if dir then return dir end
  local xdg = string_or_nil("XDG_CACHE_HOME")
  if xdg then return xdg .. "/tcl" end
  local home = string_or_nil("HOME")
  if home then return home .. "/.cache/tcl" end
  return nil
end

local DEFAULT_KERNEL_CACHE_MB = 64

-- A size in MiB (fractions allowed) as bytes; `default_bytes` when unset.
local function mebibytes(name, default_bytes)
  local v = os.getenv(name)
  if v == nil or v == "" then return default_bytes end
  local mb = tonumber(v)
  if mb == nil or mb < 0 or mb ~= mb or mb == math.huge then
    refuse(name, "a number of MiB >= 0", v)
  end
  return math.floor(mb * (1 << 20))
end

return {
  DEBUG = integer("DEBUG", 0, 0),
  NOOPT = flag("NOOPT"),
  BEAM = integer("BEAM", 0, 0),
  IGNORE_BEAM_CACHE = flag("IGNORE_BEAM_CACHE"),
  HEURISTICS = string_or_nil("TCL_HEURISTICS"),
  DEVICE = string_or_nil("DEVICE"),
  EMU_GPU = emu_gpu(),
  RENDER_DUMP = string_or_nil("TCL_RENDER_DUMP"),
  REWRITE_TRACE = flag("REWRITE_TRACE"),
  REWRITE_STATS = flag("REWRITE_STATS"),
  KERNEL_CACHE_BYTES = mebibytes("TCL_KERNEL_CACHE_MB", DEFAULT_KERNEL_CACHE_MB << 20),
  MEMORY_LIMIT_BYTES = mebibytes("TCL_MEMORY_LIMIT_MB", nil),
  THREADS = integer("THREADS", 1, nil),
  CACHELEVEL = integer("CACHELEVEL", 0, 1),
  CACHE_DIR = cache_dir(),
}
