-- tcl.codegen.driver.optimize — the pipeline's "optimize" pass: per kernel, the heuristic's opts
-- (or a BEAM search's, tcl.codegen.driver.beam) applied to the kernel's ranges by src/opt (module
-- tcl.opt). Layer: codegen.
--
--   local optimize = require "tcl.codegen.driver.optimize"
--   optimize.apply(kernel_sink, ctx) -> optimized sink | nil      (the pipeline calls it)
--   optimize.set_heuristic(fn | "file.lua" | nil)   nil: the default (tcl.heuristics.default)
--   optimize.heuristic_name()                        "default", the file, or "function: 0x..."
--   optimize.key()        what the compiled-kernel cache must distinguish (heuristic, BEAM)
--   optimize.warn(line)   where warnings go (stderr; replaceable)
--
-- A heuristic is function(kernel) with kernel from tcl.heuristics.kernel. A heuristic that
-- raises an error (an invalid opt included) costs the kernel its opts, never its result: the
-- kernel runs unoptimized and a warning names the kernel, the heuristic, the opts it had
-- applied and the error. TCL_HEURISTICS=file.lua (tcl.env.HEURISTICS) picks the heuristic at
-- start; the file returns the function (or a table with an `optimize` field).
-- ctx (from the lowering driver): noopt and beam (per call, else NOOPT and BEAM from tcl.env),
-- renderer.opt_caps(). On success ctx.name becomes the optimized kernel's name and ctx.opts
-- the opts as text.
local opt = require "tcl.opt"
local env = require "tcl.env"
local kernel_api = require "tcl.heuristics.kernel"

local M = {}

function M.warn(line) io.stderr:write("tcl: warning: ", line, "\n") end

local current = nil -- { fn =, name = }
local generation = 0

local function load_file(path)
  local chunk, err = loadfile(path)
  if not chunk then error(string.format("heuristic file '%s': %s", path, err), 0) end
  local ok, value = pcall(chunk)
  if not ok then error(string.format("heuristic file '%s' failed to load: %s", path, tostring(value)), 0) end
  if type(value) == "table" then value = value.optimize end
  if type(value) ~= "function" then
    error(string.format("heuristic file '%s' must return a function(kernel) (or a table with 'optimize')", path), 0)
  end
  return value
end

--- Uses fn (a function, the path of a Lua file returning one, or nil for the default) as the
-- heuristic of the kernels compiled from now on.
function M.set_heuristic(spec)
  if spec == nil then
    current = { fn = require("tcl.heuristics.default"), name = "default" }
  elseif type(spec) == "function" then
    current = { fn = spec, name = tostring(spec) }
  elseif type(spec) == "string" then
    current = { fn = load_file(spec), name = spec }
  else
    error("set_heuristic: expected a function, a file name or nil, got " .. type(spec), 2)
  end
  generation = generation + 1
end

local function heuristic()
  if not current then M.set_heuristic(env.HEURISTICS) end
  return current
end

function M.heuristic_name() return heuristic().name end

function M.key()
  return string.format("%s#%d|beam%d", heuristic().name, generation, env.BEAM)
end

--- Applies the heuristic's opts to k (changed in place) and returns it; nil (and a warning)
-- when the heuristic fails.
function M.run_heuristic(k, info)
  local h = heuristic()
  local ok, err = pcall(h.fn, kernel_api.wrap(k, info))
  if not ok then
    M.warn(string.format("kernel '%s': heuristic '%s' failed (opts applied: %s): %s; the kernel runs without opts",
      tostring(info.name), h.name, k:opts_text() ~= "" and k:opts_text() or "none", tostring(err)))
    return nil
  end
  return k
end

function M.apply(sink, ctx)
  local caps = ctx.renderer and ctx.renderer.opt_caps and ctx.renderer.opt_caps() or {}
  local k = opt.kernel(sink, caps)
  local info = { name = ctx.name, device = ctx.device, caps = caps }
  local beam = ctx.beam or env.BEAM
  local done
  if beam > 0 then
    done = require("tcl.codegen.driver.beam").search(k, sink, ctx, beam, info)
  else
    done = M.run_heuristic(k, info)
  end
  if not done or #done:opts() == 0 then return nil end
  ctx.name, ctx.opts = done:name(), done:opts_text()
  return done:sink()
end

return M
