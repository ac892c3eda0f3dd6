-- tcl.viz.capture — records what the compiler does while a capture is on, and turns the record
-- into the viewer's data (docs/design/viewer.md: the format; tcl.viz.page renders it).
-- Layer: tools over the scheduler and the lowering driver.
--
--   local capture = require "tcl.viz.capture"
--   local c = capture.start()        -- one capture at a time
--   ... realize tensors ...
--   c:stop()
--   local data = c:data({ title = "model.lua" })
--
-- While on, it asks the scheduler to explain its plans (tcl.schedule: explain, observer) and
-- listens to kernel runs (tcl.codegen.driver.lower.listen). A realize whose kernels are those of
-- an earlier one (a training step's second call) is counted, not recorded again.
--
-- Each kernel's passes are recorded by lowering its AST again when the data is made, pass by
-- pass, with rule tracing on: the kernel's own compile may have happened before the capture
-- started (the kernel cache) or come from the disk cache, and the passes are deterministic, so
-- the second lowering is the one the compile did. The optimize pass replays the opts the
-- compile applied (a BEAM search is not run again; what it tried was kept with the kernel).
-- CPU kernels are compiled once more for their LLVM IR and assembly; GPU kernels show the
-- source and assembly their program keeps.
local core = require "tcl.core"
local env = require "tcl.env"
local shape = require "tcl.shape"
local UOp = require "tcl.uop"
local pattern = require "tcl.pattern"
local opt = require "tcl.opt"
local schedule = require "tcl.schedule"
local lower = require "tcl.codegen.driver.lower"
local linearize = require "tcl.codegen.driver.linearize"
local pipeline = require "tcl.patterns.pipeline"

local M = {}

-- Bounds that keep a long run's record small: distinct realizes recorded, kernel runs kept
-- for the profile, characters of an arg's text.
M.MAX_REALIZES, M.MAX_RUNS, M.MAX_ARG_CHARS = 200, 50000, 160

local CODE_LANGUAGE = { CPU = "llvm", CUDA = "cuda", METAL = "metal", EMU = "emu" }

local active = nil -- the capture that is recording

---------------------------------------------------------------------------------------------
-- the data: nodes

local function short(text)
  if #text > M.MAX_ARG_CHARS then return text:sub(1, M.MAX_ARG_CHARS - 3) .. "..." end
  return text
end

-- A node table: ids for UOps (each once), in an order where sources come first. It holds
-- the UOps weakly: a node that dies while its entry stays (a buffer's node) lets its memory go.
local function node_table()
  local list, id_of = {}, setmetatable({}, { __mode = "k" })
  local t = { list = list }
  --- The id of every node of the graph under root (recorded when new); returns root's id.
  function t.add(root, with_shapes)
    if id_of[root] then return id_of[root] end
    for _, u in ipairs(root:toposort()) do
      if not id_of[u] then
        local src = {}
        for i, s in ipairs(u.src) do src[i] = id_of[s] end
        local entry = { op = u.op, dtype = u.dtype and u.dtype.name or "void", src = src,
          arg = u.arg ~= nil and short(UOp.format_arg(u.arg)) or "" }
        if u.tag ~= nil then entry.tag = short(UOp.format_arg(u.tag)) end
        if with_shapes and u.op ~= "SINK" then
          local ok, s = pcall(shape.shared, u)
          if ok and s then entry.shape = shape.format(s) end
        end
        list[#list + 1] = entry
        id_of[u] = #list
      end
    end
    return id_of[root]
  end
  function t.id(u) return id_of[u] end
  return t
end

---------------------------------------------------------------------------------------------
-- the data: realizes

local function buffer_label(b)
  if b.op ~= "BUFFER" then return b.op end
  return string.format("buffer %s (%s x %d, %s)", tostring(b.arg[1]), b.dtype.name, b.arg[2], tostring(b.arg[3]))
end

-- The tensor-graph nodes a kernel computes: its root and everything fused into it (sources
-- up to stored values and buffers).
local function cone(root, realize, nodes)
  local out, seen, stack = {}, {}, { root }
  while #stack > 0 do
    local u = table.remove(stack)
    if not seen[u] then
      seen[u] = true
      local id = nodes.id(u)
      if id then out[#out + 1] = id end
      for _, s in ipairs(u.src) do
        if s.op ~= "BUFFER" and not (realize[s.id] and s ~= root) then stack[#stack + 1] = s end
      end
    end
  end
  table.sort(out)
  return out
end

local function realize_data(sched, indices, index, nodes, kernels)
  local explained = sched.explained
  local out = { label = string.format("realize %d", index), plan_reused = explained == nil, kernels = {},
    decisions = {}, repeats = 0 }
  if explained then out.graph = nodes.add(explained.graph, true) end
  for j, k in ipairs(sched.kernels) do
    local reads = {}
    for i = 2, #k.buffers do reads[#reads + 1] = buffer_label(k.buffers[i]) end
    local entry = { name = kernels[indices[j]].name, kernel = indices[j], reads = reads,
      writes = k.buffers[1] and buffer_label(k.buffers[1]) or "" }
    if explained and k.root then
      entry.root = nodes.id(k.root)
      entry.computes = cone(k.root, explained.realize, nodes)
      entry.why = explained.why[k.root.id]
    end
    out.kernels[j] = entry
  end
  if explained then
    for _, u in ipairs(explained.graph:toposort()) do
      local why = explained.why[u.id]
      if why then
        out.decisions[#out.decisions + 1] = { node = nodes.id(u), stored = why:sub(1, 7) == "stored:",
          why = why:gsub("^%a+: ", "") }
      end
    end
  end
  return out
end

local Capture = {}
Capture.__index = Capture

--- The capture that is recording, or nil.
function M.active() return active end

--- Starts recording; returns the capture. Only one records at a time.
function M.start()
  if active then error("viz: a capture is already recording (captures do not nest)", 2) end
  local c = setmetatable({ realizes = {}, by_signature = {}, kernels = {}, kernel_index = {}, runs = {},
    dropped_runs = 0, dropped_realizes = 0, started = core.clock(), nodes = node_table() }, Capture)
  c.saved = { explain = schedule.explain, observer = schedule.observer }
  schedule.explain = true
  schedule.observer = function(sched, programs)
    c:on_realize(sched, programs)
    if c.saved.observer then c.saved.observer(sched, programs) end
  end
  c.stop_listening = lower.listen(function(record) c:on_run(record) end)
  active = c
  return c
end

--- Stops recording (the record stays; calling it again does nothing).
function Capture:stop()
  if active ~= self then return end
  schedule.explain, schedule.observer = self.saved.explain, self.saved.observer
  self.stop_listening()
  self.seconds = core.clock() - self.started
  active = nil
end

-- The index of kernel (a compiled kernel of tcl.codegen.driver.lower) in the record.
function Capture:kernel_of(kernel)
  local index = self.kernel_index[kernel]
  if not index then
    index = #self.kernels + 1
    self.kernels[index] = kernel
    self.kernel_index[kernel] = index
  end
  return index
end

function Capture:on_realize(sched, programs)
  local indices = {}
  for i, program in ipairs(programs) do indices[i] = self:kernel_of(program) end
  local signature = table.concat(indices, ",")
  local seen = self.by_signature[signature]
  if seen then
    seen.repeats = seen.repeats + 1
    return
  end
  if #self.realizes >= M.MAX_REALIZES then
    self.dropped_realizes = self.dropped_realizes + 1
    return
  end
  -- made into data now: the record then holds no node, so no buffer stays alive for it
  local record = realize_data(sched, indices, #self.realizes + 1, self.nodes, self.kernels)
  self.realizes[#self.realizes + 1] = record
  self.by_signature[signature] = record
end

function Capture:on_run(record)
  if #self.runs >= M.MAX_RUNS then
    self.dropped_runs = self.dropped_runs + 1
    return
  end
  local index = record.kernel and self:kernel_of(record.kernel)
  self.runs[#self.runs + 1] = { kernel = index, name = record.name, device = record.device, seconds = record.seconds,
    ops = record.ops, bytes = record.bytes }
end

---------------------------------------------------------------------------------------------
-- the data: kernels

-- The rule traces recorded after `mark` (a trace record, or nil: all of them).
local function traces_since(mark)
  local traces = pattern.traces()
  local first = 1
  if mark then
    for i = #traces, 1, -1 do
      if traces[i] == mark then first = i + 1 break end
    end
  end
  return traces, first
end

local function rules_fired(mark)
  local traces, first = traces_since(mark)
  local counts, total = {}, 0
  for i = first, #traces do
    for _, m in ipairs(traces[i].matches) do
      -- tcl's own rule files by their path in the repository, wherever tcl is installed
      local rule = m.rule:gsub("^.*/(lua/tcl/)", "%1")
      counts[rule] = (counts[rule] or 0) + 1
      total = total + 1
    end
  end
  local rules = {}
  for rule, count in pairs(counts) do rules[#rules + 1] = { rule = rule, count = count } end
  table.sort(rules, function(a, b)
    if a.count ~= b.count then return a.count > b.count end
    return a.rule < b.rule
  end)
  return rules, total
end

-- The optimize pass for a second lowering: the kernel's recorded opts again.
local function replay_opts(text)
  return function(sink, ctx)
    local caps = ctx.renderer and ctx.renderer.opt_caps and ctx.renderer.opt_caps() or {}
    local done = require("tcl.codegen.driver.beam").replay(opt.kernel(sink, caps), text)
    if not done then error("the kernel's opts (" .. text .. ") no longer apply", 0) end
    if #done:opts() == 0 then return nil end
    ctx.name, ctx.opts = done:name(), done:opts_text()
    return done:sink()
  end
end

-- Every pass of the pipeline on the kernel's AST, as its compile ran them; returns the pass
-- records, the lowered kernel and the pass context.
local function passes_of(kernel, nodes)
  local backend = lower.backend(kernel.device)
  local opts_text = kernel.opts or ""
  local ctx = { name = kernel.name, noopt = opts_text == "", beam = 0, device = kernel.device,
    renderer = backend.renderer }
  local saved_apply, saved_trace = pipeline.opts.apply, env.REWRITE_TRACE
  pipeline.opts.apply, env.REWRITE_TRACE = replay_opts(opts_text), true
  local records, sink = {}, kernel.ast
  local ok, err = pcall(function()
    for _, pass in ipairs(pipeline.passes) do
      local before, ran = sink, not pass.when or pass.when(ctx)
      local traces = pattern.traces()
      local mark = traces[#traces]
      local start = core.clock()
      if ran then sink = lower.run_pass(pass, sink, ctx) end
      local seconds = core.clock() - start
      local rules, total = {}, 0
      if ran then rules, total = rules_fired(mark) end
      records[#records + 1] = { name = pass.name, ran = ran, before = nodes.add(before), after = nodes.add(sink),
        seconds = seconds, rules = rules, matches = total }
    end
  end)
  pipeline.opts.apply, env.REWRITE_TRACE = saved_apply, saved_trace
  if not saved_trace then pattern.clear_traces() end
  if not ok then error(string.format("kernel '%s': %s", kernel.name, tostring(err)), 0) end
  return records, sink, ctx
end

local function code_of(kernel, list, ctx, with_code)
  if not with_code then return nil, nil end
  if kernel.device == "CPU" then
    local ok, ir, asm = pcall(lower.backend("CPU").listing, list, kernel.name, ctx.upcast_lanes)
    if ok then return ir, asm end
    return "(the LLVM listing failed: " .. tostring(ir) .. ")", nil
  end
  if kernel.device == "EMU" then -- in GPU mode: the source the target would compile, else EMU's listing
    local backend = lower.backend("EMU")
    local ok, source, dialect = pcall(backend.gpu_source, list, kernel.name)
    if ok and source then return source, nil, dialect end
  end
  local program = kernel.program
  local code = program.dump and program:dump() or nil
  local asm = program.assembly and program:assembly() or nil
  return code, asm
end

local function search_data(search)
  if not search then return nil end
  local candidates = {}
  for i, c in ipairs(search.candidates) do
    candidates[i] = { opts = c.opts, round = c.round, seconds = c.seconds }
  end
  return { width = search.width, cached = search.cached, candidates = candidates }
end

local function kernel_data(kernel, nodes, options)
  local out = { name = kernel.name, device = kernel.device, ast = nodes.add(kernel.ast), opts = kernel.opts or "",
    optimizer = kernel.optimizer or "", beam = search_data(kernel.search), ops = kernel.ops, bytes = kernel.bytes,
    code_language = CODE_LANGUAGE[kernel.device] or kernel.device:lower() }
  local ok, passes, sink, ctx = pcall(passes_of, kernel, nodes)
  if not ok then
    out.passes, out.error = {}, tostring(passes)
    return out
  end
  out.passes = passes
  if ctx.name ~= kernel.name then -- the opts replayed gave another kernel: say so, never show it as this one
    out.error = string.format("lowered again, the kernel is named '%s', not '%s'", tostring(ctx.name), kernel.name)
  end
  local linear_ok, list = pcall(linearize.linearize, sink)
  if linear_ok then
    out.linear = linearize.format(list)
    local language
    out.code, out.assembly, language = code_of(kernel, list, ctx, options.code ~= false)
    out.code_language = language or out.code_language
  else
    out.error = tostring(list)
  end
  return out
end

---------------------------------------------------------------------------------------------
-- the data

local function peaks_of(devices)
  local ok, peaks = pcall(require, "tcl.profile.peaks")
  local out = {}
  if not ok then return out end
  for device in pairs(devices) do
    local fine, p = pcall(peaks.of, device)
    if fine and p then out[device] = { gflops = p.gflops, gbs = p.gbs } end
  end
  return out
end

--- The viewer's data (docs/design/viewer.md). options: title (the page's), code (false: no
-- code and assembly), progress (a function(done, total) called as kernels are lowered).
function Capture:data(options)
  options = options or {}
  local nodes = self.nodes
  local data = { version = 1, title = options.title or "tcl", created = os.date("%Y-%m-%d %H:%M:%S"),
    realizes = self.realizes, kernels = {}, nodes = nodes.list }
  for i, k in ipairs(self.kernels) do
    data.kernels[i] = kernel_data(k, nodes, options)
    if options.progress then options.progress(i, #self.kernels) end
  end
  if #self.runs > 0 then
    local total, devices = 0, {}
    for _, r in ipairs(self.runs) do
      total = total + r.seconds
      devices[r.device] = true
    end
    data.profile = { runs = self.runs, total_seconds = total, peaks = peaks_of(devices),
      dropped_runs = self.dropped_runs }
  end
  data.dropped_realizes = self.dropped_realizes
  return data
end

return M
