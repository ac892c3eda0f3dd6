-- tcl.export.runtime_files — the C files of the exported runtime (tcl's src/export_runtime/:
-- the worker pool, open/run/close, the safetensors reader; tcl_runtime.c there says what each
-- is), which an exported NAME.c includes and export copies beside it. Layer: export.
--
-- They are found where the running tcl is: beside this module once installed (`cmake --install`
-- and the rock put them in <Lua dir>/tcl/export/runtime/), or in the source tree, which the
-- build tree's tcl and busted run from (src/export_runtime/, beside lua/).
local M = {}

-- What the files that NAME.c includes include in turn (copied with them).
local NESTED = { ["tcl_runtime.c"] = { "tcl_spin.h" }, ["tcl_safetensors.c"] = { "tcl_json.c" } }

--- Every file of the runtime: a model may not be named so that its NAME.c would be one of them.
M.ALL = { "tcl_runtime.c", "tcl_spin.h", "tcl_batches.c", "tcl_variables.c", "tcl_weights_embedded.c",
  "tcl_safetensors.c", "tcl_json.c" }

local function fail(fmt, ...) error("export: " .. string.format(fmt, ...), 0) end

local function readable(path)
  local f = io.open(path, "rb")
  if f then f:close() end
  return f ~= nil
end

-- The folder of this module's file ("." when it was not loaded from a file).
local function module_dir()
  local source = debug.getinfo(1, "S").source
  return source:sub(1, 1) == "@" and source:sub(2):match("^(.*)/[^/]*$") or "."
end

local where
--- The folder that holds the runtime's C files; an error naming the places looked at when
-- none does.
function M.dir()
  if where then return where end
  local here = module_dir()
  local candidates = { here .. "/runtime", here .. "/../../../src/export_runtime" }
  for _, dir in ipairs(candidates) do
    if readable(dir .. "/tcl_runtime.c") then
      where = dir
      return dir
    end
  end
  fail("cannot find the exported runtime's C files (tcl_runtime.c) in %s or %s; is tcl installed completely?",
    candidates[1], candidates[2])
end

--- The files NAME.c includes, in order, for the model description m (tcl.export.c_writer):
-- the runtime, the weights' loader of m.weights_file, the batch-size functions when m has
-- several plans, NAME_run_sizes when m has variable sizes (m.variables).
function M.includes(m)
  local list = { "tcl_runtime.c", m.weights_file == "safetensors" and "tcl_safetensors.c" or "tcl_weights_embedded.c" }
  if m.batch_sizes then list[#list + 1] = "tcl_batches.c" end
  if m.variables then list[#list + 1] = "tcl_variables.c" end
  return list
end

--- Every file the export of m copies: the included ones and what they include.
function M.names(m)
  local list = {}
  for _, name in ipairs(M.includes(m)) do
    list[#list + 1] = name
    for _, nested in ipairs(NESTED[name] or {}) do list[#list + 1] = nested end
  end
  return list
end

--- The text of the runtime's file `name`.
function M.read(name)
  local path = M.dir() .. "/" .. name
  local f = io.open(path, "rb")
  local text = f and f:read("a")
  if f then f:close() end
  if not text then fail("cannot read the exported runtime's file '%s'", path) end
  return text
end

return M
