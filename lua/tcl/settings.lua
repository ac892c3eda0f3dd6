-- tcl.settings — what each of tcl's settings is: its field in tcl.env, the environment
-- variable that sets it (and the old name still accepted for it), the values it accepts and its
-- default. tcl.env reads them from the environment when tcl loads; tcl.context sets them for
-- the length of one call. Layer: lua/tcl (the package's facts; only tcl.env calls os.getenv).
--
-- Names: the settings tcl shares with tinygrad keep tinygrad's names (DEBUG, BEAM, NOOPT,
-- DEVICE, CACHELEVEL, IGNORE_BEAM_CACHE); tcl's own are all under the TCL_ prefix. The names
-- they had before (THREADS, EMU_GPU, ...) are accepted as aliases. When a variable and its old
-- name are both set to different values tcl refuses to load, naming both: neither is dropped
-- without a word.

local quote = require "tcl.quote"

local M = {}

-- EMU_GPU's targets (tcl.codegen.devices.gpu_targets; that module loads the renderers, so the names
-- are repeated here to check the setting when tcl loads).
local EMU_GPU_TARGETS = { CUDA = true, CUDA_SM75 = true, CUDA_SM90 = true, METAL = true }

-- Kinds: how a variable's text becomes a value, and which Lua values tcl.context accepts.
--   flag      "0"/"1" (empty: off) -> false/true; in a context true, false, 0 or 1
--   integer   an integer >= minimum; unset: the default
--   mebibytes a number of MiB >= 0 (fractions allowed) -> bytes; in a context bytes, an integer >= 0
--   positive  a finite number > 0 (fractions allowed); in a context the same
--   string    any non-empty text; in a context a string, or false for unset
--   emu_gpu   one of EMU_GPU_TARGETS, any case; in a context the same, or false for unset
--   tristate  "0"/"1" -> false/true, unset: nil (the code decides); in a context true, false, 0
--             or 1, and "auto" for unset (false is "no" here, not "unset")
-- Settings whose default is nil accept false in a context, meaning unset (a tristate: "auto").

--- The settings, in tcl.env's order. `variable` is the environment variable, `old` its
-- previous name (accepted), `field` the name in tcl.env and tcl.context.
M.list = {
  { field = "DEBUG", variable = "DEBUG", kind = "integer", minimum = 0, default = 0,
    meaning = "how much tcl prints: 1 schedule summary, 2 per-kernel lines, 3 applied opts, "
      .. "4 program listings, 5 kernel ASTs, 6 linearized programs, 7 machine assembly (CPU)" },
  { field = "NOOPT", variable = "NOOPT", kind = "flag", default = false,
    meaning = "no kernel optimizations (the pipeline's optimize pass)" },
  { field = "BEAM", variable = "BEAM", kind = "integer", minimum = 0, default = 0,
    meaning = "the beam width of the kernel search (0: heuristics)" },
  { field = "IGNORE_BEAM_CACHE", variable = "IGNORE_BEAM_CACHE", kind = "flag", default = false,
    meaning = "search again even when the on-disk BEAM cache has the kernel" },
  { field = "HEURISTICS", variable = "TCL_HEURISTICS", kind = "string",
    meaning = "a Lua file whose function replaces the default heuristic" },
  { field = "DEVICE", variable = "DEVICE", kind = "string",
    meaning = "the default device of new tensors (any case; CPU when unset)" },
  { field = "EMU_GPU", variable = "TCL_EMU_GPU", old = "EMU_GPU", kind = "emu_gpu",
    meaning = "CUDA, CUDA_SM75, CUDA_SM90 or METAL: EMU runs in its GPU mode, with that "
      .. "renderer's capabilities" },
  { field = "RENDER_DUMP", variable = "TCL_RENDER_DUMP", kind = "string",
    meaning = "in EMU's GPU mode, a directory where each kernel's GPU source is written" },
  { field = "REWRITE_TRACE", variable = "TCL_REWRITE_TRACE", old = "REWRITE_TRACE", kind = "flag",
    default = false, meaning = "graph_rewrite records every match (tcl.pattern.traces())" },
  { field = "REWRITE_STATS", variable = "TCL_REWRITE_STATS", old = "REWRITE_STATS", kind = "flag",
    default = false, meaning = "per-rule counts and times, printed when the state closes" },
  { field = "KERNEL_CACHE_BYTES", variable = "TCL_KERNEL_CACHE_MB", kind = "mebibytes", default = 64 << 20,
    meaning = "the bound of the compiled-kernel cache (MiB in the variable, bytes in the field)" },
  { field = "MEMORY_LIMIT_BYTES", variable = "TCL_MEMORY_LIMIT_MB", kind = "mebibytes",
    meaning = "the most new host memory one realize may allocate (MiB in the variable, bytes in "
      .. "the field)" },
  { field = "THREADS", variable = "TCL_THREADS", old = "THREADS", kind = "integer", minimum = 1,
    meaning = "threads of the CPU device's pool (default: the cores)" },
  { field = "PLAN_CACHE", variable = "TCL_PLAN_CACHE", kind = "flag", default = true,
    meaning = "0 plans every realize anew (else a graph of the same structure over other buffers "
      .. "reuses its plan: tcl.schedule.plan_cache)" },
  { field = "POISON_OUTPUTS", variable = "TCL_POISON_OUTPUTS", kind = "flag", default = false,
    meaning = "1 fills each kernel's new host output with 0xFF bytes before it runs (NaN, -1), so an "
      .. "element a kernel leaves unwritten shows (a check: new outputs are not cleared)" },
  { field = "PEAK_GFLOPS", variable = "TCL_PEAK_GFLOPS", kind = "positive",
    meaning = "the compute peak (GFLOPS) tcl.profile's roofline uses for every device, instead of "
      .. "the one measured on the CPU" },
  { field = "PEAK_GBS", variable = "TCL_PEAK_GBS", kind = "positive",
    meaning = "the memory bandwidth peak (GB/s) tcl.profile's roofline uses for every device, "
      .. "instead of the one measured on the CPU" },
  { field = "PROGRESS", variable = "TCL_PROGRESS", kind = "tristate",
    meaning = "progress bars (tcl.progress: BEAM, export, training loops): 1 always, 0 never; unset: "
      .. "only on a terminal" },
  { field = "MPI_LIBRARY", variable = "TCL_MPI_LIBRARY", kind = "string",
    meaning = "the MPI library tcl.distributed loads instead of libmpi.so.40 (Open MPI)" },
  { field = "DIST_TIMEOUT", variable = "TCL_DIST_TIMEOUT", kind = "positive", default = 300,
    meaning = "seconds a tcl.distributed collective waits for the other ranks before it ends the job" },
  { field = "CACHELEVEL", variable = "CACHELEVEL", kind = "integer", minimum = 0, default = 1,
    meaning = "0 turns the on-disk cache of compiled kernels off" },
  -- CACHE_DIR's default comes from other variables (tcl.env); in a context it is a string
  { field = "CACHE_DIR", variable = "TCL_CACHE", kind = "string",
    meaning = "the on-disk cache's directory (else $XDG_CACHE_HOME/tcl, else ~/.cache/tcl)" },
  -- read by C before any Lua runs (src/api/lua_dir.c); listed for its old name only
  { variable = "TCL_LUA_DIR", old = "TCLC_LUA_DIR", kind = "string",
    meaning = "the directory holding tcl/init.lua (overrides the search)" },
}

--- The settings by field name (those with a field).
M.by_field = {}
for _, s in ipairs(M.list) do
  if s.field then M.by_field[s.field] = s end
end

-- What the setting accepts, in words: in the environment, or (in_context) as a Lua value.
local function accepted(s, in_context)
  if s.kind == "flag" then return in_context and "true, false, 0 or 1" or "0 or 1" end
  if s.kind == "tristate" then return in_context and "true, false, 0, 1 or 'auto'" or "0 or 1" end
  if s.kind == "integer" then return s.minimum == 1 and "a positive integer" or "an integer >= " .. s.minimum end
  if s.kind == "mebibytes" then return "a number of MiB >= 0" end
  if s.kind == "positive" then return "a number > 0" end
  if s.kind == "emu_gpu" then return "one of CUDA, CUDA_SM75, CUDA_SM90, METAL" end
  return "a non-empty string"
end

local function refuse(prefix, name, s, v)
  local words = accepted(s, prefix ~= "")
  if prefix ~= "" and s.default == nil and s.kind ~= "tristate" then words = words .. " (or false: unset)" end
  error(string.format("%s%s must be %s, got '%s'", prefix, name, words, quote(v)), 0)
end

--- A variable's text (not empty) as the setting's value; an error naming `name` when the
-- text is not accepted.
function M.parse(s, name, text)
  if s.kind == "flag" or s.kind == "tristate" then
    if text == "0" then return false end
    if text == "1" then return true end
  elseif s.kind == "integer" then
    local n = math.tointeger(tonumber(text))
    if n ~= nil and n >= s.minimum then return n end
  elseif s.kind == "mebibytes" then
    local mb = tonumber(text)
    if mb ~= nil and mb >= 0 and mb == mb and mb ~= math.huge then return math.floor(mb * (1 << 20)) end
  elseif s.kind == "positive" then
    local n = tonumber(text)
    if n ~= nil and n > 0 and n ~= math.huge then return n end
  elseif s.kind == "emu_gpu" then
    if EMU_GPU_TARGETS[text:upper()] then return text end
  else
    return text
  end
  refuse("", name, s, text)
end

--- The setting's value read from the environment through `getenv`: the variable, else its
-- old name; the default when neither is set (an empty value is unset). Both set to different
-- texts is an error naming both.
function M.read(s, getenv)
  local function get(name)
    local v = name and getenv(name)
    if v == "" then return nil end
    return v
  end
  local new, old = get(s.variable), get(s.old)
  if new and old and new ~= old then
    error(string.format("%s='%s' and %s='%s' (its old name) are both set and differ: set only one",
      s.variable, quote(new), s.old, quote(old)), 0)
  end
  if new then return M.parse(s, s.variable, new) end
  if old then return M.parse(s, s.old, old) end
  return s.default
end

--- A Lua value given for the setting (tcl.context) as the value to store; an error starting
-- with `fn` when the setting does not accept it.
function M.check(fn, s, value)
  local prefix = fn .. ": "
  if s.kind == "tristate" then
    if value == true or value == 1 then return true end
    if value == false or value == 0 then return false end
    if value == "auto" then return nil end
    refuse(prefix, s.field, s, value)
  end
  if value == false and s.default == nil then return nil end -- false unsets an optional setting
  if s.kind == "flag" then
    if value == true or value == 1 then return true end
    if value == false or value == 0 then return false end
  elseif s.kind == "integer" then
    local n = math.type(value) and math.tointeger(value)
    if n ~= nil and n >= s.minimum then return n end
  elseif s.kind == "mebibytes" then
    local n = math.type(value) and math.tointeger(value)
    if n ~= nil and n >= 0 then return n end
    local words = s.default == nil and " (or false: unset)" or ""
    error(string.format("%s%s must be a number of bytes >= 0%s, got '%s'", prefix, s.field, words, quote(value)), 0)
  elseif s.kind == "positive" then
    if math.type(value) and value > 0 and value ~= math.huge then return value end
  elseif s.kind == "emu_gpu" then
    if type(value) == "string" and EMU_GPU_TARGETS[value:upper()] then return value end
  elseif type(value) == "string" and value ~= "" then
    return value
  end
  refuse(prefix, s.field, s, value)
end

return M
