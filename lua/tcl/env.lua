-- tcl.env — the settings tcl reads from environment variables, read once, when tcl loads.
-- Layer: the package's facts (no other Lua module calls os.getenv).
--
--   local env = require "tcl.env"
--   if env.DEBUG >= 2 then ... end
--
-- One field per setting of tcl.settings.list, which says for each its variable, the old name
-- still accepted for it, what it means, the values it accepts and its default: DEBUG, NOOPT,
-- BEAM, IGNORE_BEAM_CACHE, HEURISTICS (TCL_HEURISTICS), DEVICE, EMU_GPU (TCL_EMU_GPU),
-- RENDER_DUMP (TCL_RENDER_DUMP), REWRITE_TRACE and REWRITE_STATS (TCL_REWRITE_*),
-- KERNEL_CACHE_BYTES (TCL_KERNEL_CACHE_MB), MEMORY_LIMIT_BYTES (TCL_MEMORY_LIMIT_MB), THREADS
-- (TCL_THREADS), PLAN_CACHE and POISON_OUTPUTS (TCL_*), PEAK_GFLOPS and PEAK_GBS (TCL_PEAK_*:
-- tcl.profile's roofline), PROGRESS (TCL_PROGRESS: nil when unset), MPI_LIBRARY and DIST_TIMEOUT
-- (TCL_MPI_LIBRARY, TCL_DIST_TIMEOUT: tcl.distributed over MPI), CACHELEVEL, CACHE_DIR (TCL_CACHE,
-- else $XDG_CACHE_HOME/tcl, else ~/.cache/tcl; nil when none of them can be told).
-- The fields are plain values: a script or a spec may change them at run time
-- (`require("tcl.env").DEBUG = 2`; for one call and undone after it, `tcl.context{DEBUG = 2}(fn)`),
-- and every stage reads them when it needs them. Booleans are 0 or 1, and an empty value is unset.
-- (TCL_LUA_DIR, old name TCLC_LUA_DIR, is read by the C embedding layer before any Lua runs:
-- src/api/lua_dir.c; here only its two names set to different values is refused.
-- TCL_CUDA_DRIVER, the NVIDIA driver library to load instead of libcuda.so.1, is read by the CUDA
-- device's binding when it opens the GPU: src/runtime/cuda/lua_cuda.c; TCL_METAL_LIBRARY, one library
-- standing in for the Objective-C runtime and Metal (tests), by the Metal device's binding:
-- src/runtime/metal/lua_metal.c.)

-- Every setting is checked when tcl loads: a value that is not one of those accepted is an
-- error naming the variable, never read as something else (DEBUG=x was 0, BEAM=-1 the heuristics).

local settings = require "tcl.settings"

local function string_or_nil(name)
  local v = os.getenv(name)
  if v == nil or v == "" then return nil end
  return v
end

-- The on-disk cache's directory when TCL_CACHE is unset.
local function default_cache_dir()
  local xdg = string_or_nil("XDG_CACHE_HOME")
  if xdg then return xdg .. "/tcl" end
  local home = string_or_nil("HOME")
  if home then return home .. "/.cache/tcl" end
  return nil
end

local env = {}
for _, s in ipairs(settings.list) do
  local value = settings.read(s, os.getenv)
  if s.field then env[s.field] = value end
end
if env.CACHE_DIR == nil then env.CACHE_DIR = default_cache_dir() end
return env
