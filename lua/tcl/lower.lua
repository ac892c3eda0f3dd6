-- tcl.lower — from a scheduled kernel AST to a program that runs (DESIGN.md, data flow
-- steps 3-5): the pass pipeline (patterns/pipeline.lua), the linearizer (tcl.linearize),
-- and a device program (tcl.runtime; EMU, the only device for now).
--
--   local lower = require "tcl.lower"
--   local k = lower.compile(kernel_sink, { name = "E_16" })
--   local seconds = k:run { out_buf, a_buf, b_buf }   -- buffers in PARAM slot order
--   k.program, k.ast, k.name
--
-- What the kernel must look like: patterns/lowering.lua's header.
-- Compiles are memoized by the AST's content hash (plus NOOPT and the optimizer hook that
-- is installed), so identical kernels share one program; lower.cache_size() counts them,
-- lower.clear_cache() empties it (it keeps each AST alive). A cached kernel keeps the name
-- of its first compile.
-- DEBUG (environment): >= 2 one line per kernel run (name, time), >= 4 the program listing,
-- >= 5 the kernel AST, >= 6 the linear list; the last three once per compile. Lines go to
-- lower.log (stderr unless replaced).
local runtime = require "tcl.runtime"
local pipeline = require "patterns.pipeline"
local linearize = require "tcl.linearize"

local M = {}

local cache, cache_count = {}, 0

local function env_level(name)
  return math.tointeger(tonumber(os.getenv(name) or "")) or 0
end

local function env_flag(name)
  local v = os.getenv(name)
  return v ~= nil and v ~= "" and v ~= "0"
end

--- Where DEBUG lines go (replaceable, e.g. by specs).
function M.log(line)
  io.stderr:write(line, "\n")
end

local Kernel = {}
Kernel.__index = Kernel

--- Runs the kernel on buffers (a list in PARAM slot order); returns the elapsed seconds.
function Kernel:run(buffers)
  local seconds = self.program:run(buffers)
  if env_level("DEBUG") >= 2 then
    M.log(string.format("*** %-4s %-32s arg %3d  tm %12.2fus", self.device, self.name, #buffers, seconds * 1e6))
  end
  return seconds
end

function Kernel:__tostring()
  return string.format("Kernel(%s, %d instructions)", self.name, self.program.size)
end

local function kernel_name(sink, opts)
  if opts.name then return tostring(opts.name) end
  local arg = sink.arg
  if type(arg) == "table" and type(arg[1]) == "string" then return arg[1] end
  if type(arg) == "string" then return arg end
  return "kernel"
end

--- Lowers, linearizes and builds the program of a kernel AST (a SINK); memoized.
function M.compile(sink, opts)
  opts = opts or {}
  if type(sink) ~= "userdata" or sink.op ~= "SINK" then
    error("lower.compile: expected a kernel SINK, got " .. (type(sink) == "userdata" and sink.op or type(sink)), 2)
  end
  local noopt = env_flag("NOOPT")
  local hook = pipeline.opts.apply
  local key = sink.content_hash .. (noopt and "|noopt" or (hook and "|" .. tostring(hook) or ""))
  local hit = cache[key]
  if hit then return hit end

  local name = kernel_name(sink, opts)
  local debug = env_level("DEBUG")
  if debug >= 5 then M.log(string.format("kernel '%s' AST:\n%s", name, tostring(sink))) end
  local lowered = pipeline.run(sink, { name = name, noopt = noopt })
  local ok, list = pcall(linearize.linearize, lowered)
  if not ok then error(string.format("kernel '%s': %s", name, tostring(list)), 0) end
  if debug >= 6 then M.log(string.format("kernel '%s' linear:\n%s", name, linearize.format(list))) end
  local program = runtime.program(list, { name = name })
  if debug >= 4 then M.log(program:dump()) end

  local k = setmetatable({ name = name, device = "EMU", ast = sink, program = program }, Kernel)
  cache[key] = k
  cache_count = cache_count + 1
  return k
end

--- Number of compiled kernels held by the cache.
function M.cache_size() return cache_count end

--- Forgets every compiled kernel.
function M.clear_cache()
  cache, cache_count = {}, 0
end

return M
