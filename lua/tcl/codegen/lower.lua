-- tcl.codegen.lower — the lowering driver: from a scheduled kernel AST to a program that runs
-- (DESIGN.md, data flow steps 3-5): the passes of tcl.patterns.pipeline in order, the
-- linearizer (tcl.codegen.linearize) and a device program (tcl.runtime; EMU, the only
-- device for now). Layer: codegen.
--
--   local lower = require "tcl.codegen.lower"
--   local k = lower.compile(kernel_sink, { name = "E_16" })
--   local seconds = k:run { out_buf, a_buf, b_buf }   -- buffers in PARAM slot order
--   k.program, k.ast, k.name
--   local lowered = lower.run_passes(kernel_sink, { name = "E_16" })   -- the pipeline only
--
-- What the kernel must look like: lua/tcl/patterns/lowering.lua's header.
-- Compiles are memoized in tcl.codegen.kernel_cache by the AST's content hash (plus NOOPT
-- and the optimizer hook that is installed), so identical kernels share one program; a
-- cached kernel keeps the name of its first compile.
-- DEBUG (tcl.env): >= 2 one line per kernel run (name, time), >= 4 the program listing,
-- >= 5 the kernel AST, >= 6 the linear list; the last three once per compile. Lines go to
-- lower.log (stderr unless replaced).
local runtime = require "tcl.runtime"
local env = require "tcl.env"
local pipeline = require "tcl.patterns.pipeline"
local linearize = require "tcl.codegen.linearize"
local kernel_cache = require "tcl.codegen.kernel_cache"

local M = {}

--- Where DEBUG lines go (replaceable, e.g. by specs).
function M.log(line)
  io.stderr:write(line, "\n")
end

local function params_of(sink)
  local out = {}
  for _, u in ipairs(sink:toposort()) do
    if u.op == "PARAM" then out[#out + 1] = u end
  end
  return out
end

local function run_pass(pass, sink, ctx)
  if pass.when and not pass.when(ctx) then return true, sink end
  if pass.rules then return pcall(pass.rules.rewrite, pass.rules, sink, { ctx = ctx, name = pass.name }) end
  if pass.pass then return pcall(function() return require(pass.pass).run(sink, ctx) end) end
  return pcall(pass.fn, sink, ctx)
end

--- Runs every pass of the pipeline on sink in order; errors name the kernel and the pass.
-- The kernel keeps its arguments: a PARAM that passes made unused (a loop of size 0 removed,
-- a read folded away) stays as a source of the SINK, so the program takes the buffers the
-- scheduler gives.
function M.run_passes(sink, ctx)
  ctx = ctx or {}
  local params = params_of(sink)
  for _, pass in ipairs(pipeline.passes) do
    local ok, result = run_pass(pass, sink, ctx)
    if not ok or result == nil then
      error(string.format("kernel '%s': pass '%s'%s", tostring(ctx.name or "kernel"), pass.name,
        ok and " returned nothing" or ": " .. tostring(result)), 0)
    end
    sink = result
  end
  local present, src = {}, nil
  for _, p in ipairs(params_of(sink)) do present[p] = true end
  for _, p in ipairs(params) do
    if not present[p] then
      src = src or sink.src
      src[#src + 1] = p
    end
  end
  if src then sink = sink:replace { src = src } end
  return sink
end

local Kernel = {}
Kernel.__index = Kernel

--- Runs the kernel on buffers (a list in PARAM slot order); returns the elapsed seconds.
function Kernel:run(buffers)
  local seconds = self.program:run(buffers)
  if env.DEBUG >= 2 then
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
  local noopt = env.NOOPT
  local hook = pipeline.opts.apply
  local key = sink.content_hash .. (noopt and "|noopt" or (hook and "|" .. tostring(hook) or ""))
  local hit = kernel_cache.get(key)
  if hit then return hit end

  local name = kernel_name(sink, opts)
  local debug = env.DEBUG
  if debug >= 5 then M.log(string.format("kernel '%s' AST:\n%s", name, tostring(sink))) end
  local lowered = M.run_passes(sink, { name = name, noopt = noopt })
  local ok, list = pcall(linearize.linearize, lowered)
  if not ok then error(string.format("kernel '%s': %s", name, tostring(list)), 0) end
  if debug >= 6 then M.log(string.format("kernel '%s' linear:\n%s", name, linearize.format(list))) end
  local program = runtime.program(list, { name = name })
  if debug >= 4 then M.log(program:dump()) end

  local k = setmetatable({ name = name, device = "EMU", ast = sink, program = program }, Kernel)
  kernel_cache.put(key, k)
  return k
end

return M
