-- tcl.codegen.driver.lower — the lowering driver: from scheduled kernel ASTs to programs that run
-- (docs/design/pipeline.md): the passes of tcl.patterns.pipeline in order, the
-- linearizer (tcl.codegen.driver.linearize) and a device program built by the device's backend
-- (tcl.codegen.devices.emu: the EMU interpreter; tcl.codegen.devices.llvm: LLVM-compiled CPU kernels;
-- tcl.codegen.devices.cuda: CUDA C compiled by NVRTC, run through the CUDA driver; tcl.codegen.devices.metal:
-- the Metal Shading Language compiled and run by the Metal framework, macOS only).
-- Layer: codegen.
--
--   local lower = require "tcl.codegen.driver.lower"
--   local k = lower.compile(kernel_sink, { name = "E_16", device = "CPU" })
--   local seconds = k:run { out_buf, a_buf, b_buf }   -- buffers in PARAM slot order
--   k.program, k.ast, k.name, k.device, k.ops, k.bytes
--   local ks = lower.compile_many({ {ast = sink1, name = "E_16"}, ... }, "CPU") -- in parallel
--   local lowered = lower.run_passes(kernel_sink, { name = "E_16" })   -- the pipeline only
--   lower.run_pass(pipeline_entry, sink, ctx)    -- one entry of the pipeline
--   lower.run_rules(pass_module, sink, ctx)      -- one pass of rules (its rules and context)
--
-- What the kernel must look like: lua/tcl/patterns/lowering.lua's header.
-- Compiles are memoized in tcl.codegen.driver.kernel_cache by the AST's content hash, the device,
-- the backend's options, NOOPT and the optimizer hook that is installed, so identical kernels
-- share one program; a cached kernel keeps the name of its first compile.
-- DEBUG (tcl.env): >= 2 one line per kernel run (device, name, buffers, time, GFLOPS, GB/s)
-- and the totals when the state closes, >= 3 the opts applied (none before the optimizer),
-- >= 4 the program (LLVM IR, or EMU's listing), >= 5 the kernel AST, >= 6 the linear list,
-- >= 7 the machine assembly (CPU); >= 3 once per compile. Lines go to lower.log (stderr
-- unless replaced).
-- Kernel runs and compiles are events (tcl.codegen.driver.events) while something listens
-- (tcl.profile); lower.listen(fn) hears the kernel runs only.
local core = require "tcl.core"
local env = require "tcl.env"
local pipeline = require "tcl.patterns.pipeline"
local linearize = require "tcl.codegen.driver.linearize"
local kernel_cache = require "tcl.codegen.driver.kernel_cache"
local estimates = require "tcl.codegen.driver.estimates"
local optimize = require "tcl.codegen.driver.optimize"
local UOp = require "tcl.uop"
local quote = require "tcl.quote"
local events = require "tcl.codegen.driver.events"
local devices = require "tcl.devices"

if pipeline.opts.apply == nil then pipeline.opts.apply = optimize.apply end

local M = {}

--- Where DEBUG lines go (replaceable, e.g. by specs).
function M.log(line)
  io.stderr:write(line, "\n")
end

---------------------------------------------------------------------------------------------
-- backends, loaded when a device is first used (a device's backend may need libraries the
-- others do not)

local BACKEND_OF = { EMU = "tcl.codegen.devices.emu", CPU = "tcl.codegen.devices.llvm",
  CUDA = "tcl.codegen.devices.cuda", METAL = "tcl.codegen.devices.metal" }
local loaded_backends = {}

--- The backend of device (its module: see tcl.codegen.devices.emu's header); an instance
-- ("CPU:2") has its device's backend.
function M.backend(device)
  local base, why = devices.try_parse(device)
  if not base then error(why, 0) end -- "device 'CPU:0': instances count from 1 ..."
  device = base
  local name = BACKEND_OF[device]
  if not name then
    local known = {}
    for d in pairs(BACKEND_OF) do known[#known + 1] = d end
    table.sort(known)
    error(string.format("unknown device '%s' (available: %s)", tostring(device), table.concat(known, ", ")), 0)
  end
  local ok, backend = pcall(require, name)
  if not ok then
    error(string.format("device '%s': its backend %s cannot be loaded: %s", device, name, tostring(backend)), 0)
  end
  loaded_backends[device] = backend
  return backend
end

--- Waits until everything queued on device (a name; nil: every device this state used) has
-- finished. Only a GPU that queues kernels (CUDA, Metal) has anything to wait for; a failure of a
-- queued kernel is raised here.
function M.synchronize(device)
  if device ~= nil then
    if type(device) ~= "string" then
      error("synchronize: device must be a name such as 'CUDA', got " .. type(device), 0)
    end
    local backend = M.backend(device:upper())
    if backend.synchronize then backend.synchronize() end
    return
  end
  for _, backend in pairs(loaded_backends) do
    if backend.synchronize then backend.synchronize() end
  end
end

-- How kernels were had since the state opened (see M.stats).
local counts = { memory_hits = 0, built = 0, build_seconds = 0 }

--- { memory_hits =, built =, build_seconds =, disk_hits = }: kernels found in the in-memory
-- cache, programs built by backends (compiled, or read from a disk cache) and the time that
-- took, and of those, the ones a backend read from its disk cache. Totals since the state
-- opened (take differences).
function M.stats()
  local disk = 0
  for _, backend in pairs(loaded_backends) do
    if backend.stats then disk = disk + backend.stats.disk_hits end
  end
  return { memory_hits = counts.memory_hits, built = counts.built - disk, build_seconds = counts.build_seconds,
    disk_hits = disk }
end

---------------------------------------------------------------------------------------------
-- the pipeline

local function params_of(sink)
  local out = {}
  for _, u in ipairs(sink:toposort()) do
    if u.op == "PARAM" then out[#out + 1] = u end
  end
  return out
end

--- Runs a pass made of rules, `rules_pass` (a module, tcl.patterns.pipeline): sink rewritten
-- with rules_pass.rules, the rewrites handed what rules_pass.context(sink, ctx) returns (the
-- facts they need from the whole kernel; nil: nothing to rewrite, sink is returned as it is),
-- or ctx itself when the module has no context. name: for REWRITE_TRACE and errors.
function M.run_rules(rules_pass, sink, ctx, name)
  local rewrite_ctx = ctx
  if rules_pass.context then
    rewrite_ctx = rules_pass.context(sink, ctx)
    if rewrite_ctx == nil then return sink end
  end
  return rules_pass.rules:rewrite(sink, { ctx = rewrite_ctx, name = name })
end

--- Runs one entry of the pipeline (tcl.patterns.pipeline: its kinds) on sink; returns the result.
function M.run_pass(pass, sink, ctx)
  if pass.when and not pass.when(ctx) then return sink end
  if type(pass.rules) == "string" then return M.run_rules(require(pass.rules), sink, ctx, pass.name) end
  if pass.rules then return pass.rules:rewrite(sink, { ctx = ctx, name = pass.name }) end
  if pass.pass then return require(pass.pass).run(sink, ctx) end
  return pass.fn(sink, ctx)
end

-- Why a pass's result is not the kernel's graph (a UOp of the op it was given), or nil: checked
-- right after each pass, so that the error names the pass that broke it, not the next one.
local function not_a_kernel(result, sink)
  if result == nil then return "nothing" end
  if not UOp.is_uop(result) then
    local shown = type(result) == "table" and "a table" or string.format("a %s (%s)", type(result),
      quote(tostring(result)))
    return shown .. ", not the kernel's graph (a " .. sink.op .. " UOp)"
  end
  if result.op ~= sink.op then return string.format("a node of op %s, not the kernel's %s", result.op, sink.op) end
  return nil
end

--- Runs every pass of the pipeline on sink in order; errors name the kernel and the pass.
-- The kernel keeps its arguments: a PARAM that passes made unused (a loop of size 0 removed,
-- a read folded away) stays as a source of the SINK, so the program takes the buffers the
-- scheduler gives. ctx: { name =, noopt =, device =, renderer = } (tcl.patterns.pipeline).
function M.run_passes(sink, ctx)
  ctx = ctx or {}
  local params = params_of(sink)
  for _, pass in ipairs(pipeline.passes) do
    local ok, result = pcall(M.run_pass, pass, sink, ctx)
    local wrong = ok and not_a_kernel(result, sink)
    if not ok or wrong then
      error(string.format("kernel '%s': pass '%s'%s", tostring(ctx.name or "kernel"), pass.name,
        ok and " returned " .. wrong or ": " .. tostring(result)), 0)
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

---------------------------------------------------------------------------------------------
-- kernels, their runs, DEBUG and profiling

-- Everything run since the state opened (DEBUG >= 2 prints it when the state closes).
local totals = { kernels = 0, seconds = 0, ops = 0, bytes = 0 }

--- Calls fn(record) for every kernel run until the returned function is called. A record is
-- the run's event (tcl.codegen.driver.events): { kind = "kernel", name =, device =, start =,
-- seconds =, ops =, bytes =, kernel = (the kernel that ran) }.
function M.listen(fn)
  return events.listen(function(event)
    if event.kind == "kernel" then fn(event) end
  end)
end

local function rate(amount, seconds)
  if seconds <= 0 then return 0 end
  return amount / seconds * 1e-9
end

local Kernel = {}
Kernel.__index = Kernel

--- Runs the kernel on buffers (a list in PARAM slot order); returns the elapsed seconds. A GPU
-- that queues kernels (CUDA, Metal) times one only at DEBUG >= 2 or while something listens
-- (tcl.profile); otherwise the launch is queued, nothing waits for it, and its seconds are 0.
function Kernel:run(buffers)
  local listened = events.on()
  local start = listened and events.clock()
  local seconds = self.program:run(buffers, env.DEBUG >= 2 or listened) or 0
  totals.kernels, totals.seconds = totals.kernels + 1, totals.seconds + seconds
  totals.ops, totals.bytes = totals.ops + self.ops, totals.bytes + self.bytes
  -- the instance it ran on ("CPU:2"): the output's device (the kernel is its base device's)
  local device = self.device
  if (env.DEBUG >= 2 or listened) and buffers[1] then device = buffers[1].device end
  if env.DEBUG >= 2 then
    M.log(string.format("*** %-4s %-32s arg %3d  tm %10.2fus  %8.2f GFLOPS %8.2f GB/s", device, self.name,
      #buffers, seconds * 1e6, rate(self.ops, seconds), rate(self.bytes, seconds)))
  end
  if listened then
    events.emit { kind = "kernel", name = self.name, device = device, start = start, seconds = seconds,
      ops = self.ops, bytes = self.bytes, kernel = self }
  end
  return seconds
end

function Kernel:__tostring()
  return string.format("Kernel(%s on %s)", self.name, self.device)
end

--- What has run since the state opened: { kernels =, seconds =, ops =, bytes = } (seconds: of
-- the runs that were timed, Kernel:run).
function M.totals()
  return { kernels = totals.kernels, seconds = totals.seconds, ops = totals.ops, bytes = totals.bytes }
end

-- The totals line at state close, when DEBUG >= 2 (a sentinel finalized with the state).
M._report_at_close = setmetatable({}, { __gc = function()
  if env.DEBUG >= 2 and totals.kernels > 0 then
    io.stderr:write(string.format("*** total %d kernel runs, %.3f ms, %.2f GFLOPS, %.2f GB/s\n", totals.kernels,
      totals.seconds * 1e3, rate(totals.ops, totals.seconds), rate(totals.bytes, totals.seconds)))
  end
end })

local function kernel_name(sink, name)
  if name then return tostring(name) end
  local arg = sink.arg
  if type(arg) == "table" and type(arg[1]) == "string" then return arg[1] end
  if type(arg) == "string" then return arg end
  return "kernel"
end

---------------------------------------------------------------------------------------------
-- compiling

local function check_sink(sink, level)
  if type(sink) ~= "userdata" or sink.op ~= "SINK" then
    error("lower.compile: expected a kernel SINK, got " .. (type(sink) == "userdata" and sink.op or type(sink)),
      level)
  end
end

-- The events of a batch's build, for tcl.profile: the batch (lowering and build), the
-- backend's build, and each kernel's own compile time when the backend reports it (the CPU
-- backend: program.compile_seconds, measured on its compile worker threads). Which worker
-- compiled which kernel, and when, is not known, so those are laid end to end on one track
-- from the build's start: their sum is the workers' time, more than the build's span when
-- several ran at once.
local function emit_builds(jobs, programs, device, batch_start, build_start, build_seconds)
  local names = {}
  for j, job in ipairs(jobs) do names[j] = job.name end
  local batch_seconds = events.clock() - batch_start
  events.emit { kind = "compile", track = "compile", name = string.format("compile %d kernel%s", #jobs,
    #jobs == 1 and "" or "s"), device = device, start = batch_start, seconds = batch_seconds, kernels = names }
  events.emit { kind = "compile", track = "build", name = "build", device = device, start = build_start,
    seconds = build_seconds, kernels = names }
  local at = build_start
  for j, job in ipairs(jobs) do
    local seconds = programs[j].compile_seconds
    if seconds then
      events.emit { kind = "compile", track = "compile workers", name = job.name, device = device, start = at,
        seconds = seconds }
      at = at + seconds
    end
  end
end

--- Compiles kernels for one device: items are { ast = SINK, name = string or nil }; options
-- { noopt =, beam = } override NOOPT and BEAM for these kernels. The
-- pipeline and the linearizer run here, one kernel after another; the backend builds the
-- programs that were not cached, all at once (the CPU backend compiles them on worker
-- threads). Returns the kernels in the order of items.
function M.compile_many(items, device, options)
  -- every instance of a device shares its kernels: the code is the same, the buffers a run is
  -- given say where it runs (CPU:2's pool)
  device = devices.base(device or "EMU")
  options = options or {}
  local backend = M.backend(device)
  local noopt, hook = options.noopt or env.NOOPT, pipeline.opts.apply
  local beam = options.beam or env.BEAM
  local hook_key = hook == optimize.apply and optimize.key() .. "|beam" .. beam or tostring(hook)
  local suffix = "|" .. device .. "|" .. backend.options .. (noopt and "|noopt" or (hook and "|" .. hook_key or ""))
  local debug = env.DEBUG
  local listened = events.on()
  local batch_start = listened and events.clock()
  local kernels, jobs, job_of = {}, {}, {}
  -- first the cache's kernels and the ones to lower (each once), so that BEAM's progress line
  -- knows how many the batch has
  for i, item in ipairs(items) do
    check_sink(item.ast, 3)
    local key = item.ast.content_hash .. suffix
    local hit = kernel_cache.get(key)
    if hit then
      counts.memory_hits = counts.memory_hits + 1
      kernels[i] = hit
    elseif job_of[key] then -- the same kernel twice in one batch: built once
      job_of[key].also[#job_of[key].also + 1] = i
    else
      job_of[key] = { index = i, also = {}, key = key }
      jobs[#jobs + 1] = job_of[key]
    end
  end
  local _ <close> = beam > 0 and not noopt and #jobs > 0 and
    require("tcl.codegen.driver.beam").batch(#jobs) or nil
  for _, job in ipairs(jobs) do
    local sink = items[job.index].ast
    local name = kernel_name(sink, items[job.index].name)
    local lower_start = listened and events.clock()
    if debug >= 5 then M.log(string.format("kernel '%s' AST:\n%s", name, tostring(sink))) end
    -- an AST optimized already (BEAM's candidates) carries its opts in its arg
    local carried = type(sink.arg) == "table" and type(sink.arg[2]) == "string" and sink.arg[2] or nil
    local ctx = { name = name, noopt = noopt, beam = beam, device = device, renderer = backend.renderer,
      opts = carried }
    local lowered = M.run_passes(sink, ctx)
    if debug >= 3 then
      M.log(string.format("kernel '%s' opts: %s%s", ctx.name, ctx.opts or "(none)", ctx.name ~= name and
        string.format(" (was '%s')", name) or ""))
    end
    name = ctx.name
    local ok, list = pcall(linearize.linearize, lowered)
    if not ok then error(string.format("kernel '%s': %s", name, tostring(list)), 0) end
    if debug >= 6 then M.log(string.format("kernel '%s' linear:\n%s", name, linearize.format(list))) end
    job.name, job.ast, job.list, job.content_hash = name, sink, list, sink.content_hash
    job.estimate, job.upcast_lanes, job.variables = estimates.of(list), ctx.upcast_lanes, ctx.variables
    job.opts, job.search = ctx.opts, ctx.search
    if listened then
      events.emit { kind = "compile", track = "lower", name = "lower " .. name, device = device, start = lower_start,
        seconds = events.clock() - lower_start }
    end
  end
  if #jobs > 0 then
    -- how these kernels are optimized, in words (kept on each kernel: tcl.viz shows it); made
    -- here, not per call: a batch the kernel cache serves whole builds nothing
    local optimizer = noopt and "none (NOOPT)" or hook == nil and "none" or hook ~= optimize.apply and
      "an optimizer hook (" .. tostring(hook) .. ")" or beam > 0 and "BEAM " .. beam or
      "heuristic " .. optimize.heuristic_name()
    local start = core.clock()
    local programs = backend.build_many(jobs)
    local build_seconds = core.clock() - start
    counts.built, counts.build_seconds = counts.built + #jobs, counts.build_seconds + build_seconds
    if listened then emit_builds(jobs, programs, device, batch_start, start, build_seconds) end
    for j, job in ipairs(jobs) do
      local program = programs[j]
      if debug >= 4 then M.log(program:dump()) end
      if debug >= 7 and program.assembly then M.log(program:assembly()) end
      -- variables: the names of the variables whose values the kernel takes as its last argument;
      -- opts: the opts applied (text), search: what BEAM tried (tcl.codegen.driver.beam),
      -- optimizer: by what (tcl.viz shows how the kernel was optimized)
      local k = setmetatable({ name = job.name, device = device, ast = job.ast, program = program,
        ops = job.estimate.value_ops, bytes = job.estimate.bytes, variables = job.variables, opts = job.opts,
        search = job.search, optimizer = optimizer }, Kernel)
      kernel_cache.put(job.key, k)
      kernels[job.index] = k
      for _, i in ipairs(job.also) do kernels[i] = k end
    end
  end
  return kernels
end

--- Lowers, linearizes and builds the program of a kernel AST (a SINK) for opts.device
-- (default EMU); memoized. opts: { name =, device =, noopt =, beam = }.
function M.compile(sink, opts)
  opts = opts or {}
  check_sink(sink, 3)
  return M.compile_many({ { ast = sink, name = opts.name } }, opts.device, opts)[1]
end

return M
