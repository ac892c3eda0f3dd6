-- tcl.codegen.driver.beam — BEAM=N: the kernel's opts found by search (src/opt/beam.c), with the
-- device-specific half here: candidates compiled in parallel (the CPU backend compiles a batch
-- on worker threads), proven safe before they run, timed on real buffers and checked against
-- the unoptimized kernel's values. Layer: codegen.
--
--   beam.search(opt_kernel, sink, ctx, width, info) -> opt kernel with the winning opts
--
-- Per candidate: a kernel whose unguarded loads and stores cannot be proven in bounds (the
-- interval analysis of tcl.bounds over its index expressions) is rejected without running, so
-- a bad opt cannot crash the search; one that fails to compile is skipped; the rest run on
-- search buffers (inputs filled from the seed, the same for every candidate) at most three
-- times, stopping early past 3x the best time, and the minimum counts; a candidate whose
-- outputs differ from the unoptimized kernel's (relative 1e-3; 8 epsilons for float16,
-- bfloat16 and fp8 outputs, whose rounding differs with the order of the sum) is dropped, with a warning at
-- DEBUG >= 1. The beam is seeded with the heuristic's kernel and the prefixes of its opt list
-- (the unoptimized kernel when the heuristic applies nothing), and for a matmul the target's
-- tensor cores take, with TC in each tile configuration of tcl.heuristics.tensor_cores.
-- beam_actions that fits it (TC admits no other opt, so these are not reached by rounds).
--
-- The winner's opts are stored in the on-disk cache (tcl.env: CACHELEVEL, CACHE_DIR; entries
-- are checksummed by runtime.cache_write) under the kernel's content hash, the device, the
-- backend's options (renderer, LLVM version, CPU) and the width; a later run replays them
-- (an entry that no longer applies is searched again). IGNORE_BEAM_CACHE=1 searches anyway.
-- Progress (tcl.progress; on a terminal, or as TCL_PROGRESS says): one line for the kernels of
-- the batch the lowering driver is compiling (M.batch: searched and replayed count alike, with
-- an ETA), whose status is the search at hand: its kernel, round, candidates timed, best time
-- and an ETA of at most the rounds left at the time per round so far ("≤": a search stops early
-- once a round gains under 1%). The line appears when a search starts: a batch whose kernels
-- all come from the BEAM cache shows nothing. M.quiet turns it off. (The C search's own line,
-- src/opt/beam.c's show_progress, is not asked for: it draws even off a terminal.)
-- ctx.search records what was tried: { width =, cached = (opts replayed from the cache),
-- candidates = { {opts =, round = (0: the seeds), seconds = (false: failed or dropped)}, ... } }.
-- M.hooks.mutate(sink, i) (specs only) may replace candidate i's kernel before it is checked:
-- how the specs make a candidate that would crash or compute wrong values.
local opt = require "tcl.opt"
local env = require "tcl.env"
local runtime = require "tcl.runtime"
local disk_cache = require "tcl.codegen.driver.disk_cache"
local bounds = require "tcl.bounds"
local core = require "tcl.core"
local tensor_cores = require "tcl.heuristics.tensor_cores"
local progress = require "tcl.progress"

local M = { hooks = {}, seed = 1, runs = 3, quiet = false,
  rounds = 6 } -- the most rounds of a search (src/opt/beam.h's TCL_BEAM_DEFAULT_ROUNDS)

-- The batch of kernels being compiled (M.batch): { total =, done =, bar = (once a search started) }.
local current_batch = nil

local BatchScope = {}
BatchScope.__index = BatchScope
function BatchScope:__close()
  if current_batch and current_batch.bar then current_batch.bar:close() end
  current_batch = self.outer
end

--- Announces that the lowering driver compiles `total` kernels now (each may be searched);
-- returns a to-be-closed value that ends the batch and closes its progress line:
-- `local batch <close> = beam.batch(n)`. Batches nest (the outer one resumes after).
function M.batch(total)
  local scope = setmetatable({ outer = current_batch }, BatchScope)
  current_batch = { total = total, done = 0 }
  return scope
end

-- A kernel of the batch done (searched or replayed from the cache): counted on the line, if any.
local function kernel_done()
  if not current_batch then return end
  current_batch.done = current_batch.done + 1
  if current_batch.bar then current_batch.bar:update(1) end
end

-- The line's bar (made when the first search of the batch starts), or nil when quiet.
local function batch_bar()
  if M.quiet then return nil end
  if not current_batch.bar then
    current_batch.bar = progress.new { total = current_batch.total, initial = current_batch.done, label = "BEAM",
      unit = "kernel" }
  end
  return current_batch.bar
end

-- The status of a search of `name`: after `round` rounds (0: the seeds) of at most M.rounds,
-- `tried` candidates timed, the best time so far, `elapsed` seconds since it started.
local function search_status(name, round, tried, best, elapsed)
  local best_text = best == math.huge and "-" or best < 1e-3 and string.format("%.1f us", best * 1e6)
    or string.format("%.3f ms", best * 1e3)
  local text = string.format("%s: round %d/%d, %d candidates, best %s", name, round, M.rounds, tried, best_text)
  if round > 0 and round < M.rounds then
    text = text .. ", ETA ≤" .. progress.clock_text(elapsed / round * (M.rounds - round))
  end
  return text
end

local TOLERANCE = 1e-3
-- Narrow float outputs differ by their rounding: a candidate that sums in another order, or
-- multiplies exactly on tensor cores where the unoptimized kernel rounds each product, is off
-- by a few of the dtype's ulps. Their tolerance is 8 epsilons (2^-mantissa bits).
local NARROW_EPSILON = { float16 = 2 ^ -10, bfloat16 = 2 ^ -7, fp8e4m3 = 2 ^ -3, fp8e5m2 = 2 ^ -2 }
local function tolerance_of(dtype)
  return math.max(TOLERANCE, 8 * (NARROW_EPSILON[tostring(dtype)] or 0))
end

local function warn(line) require("tcl.codegen.driver.optimize").warn(line) end

-- The buffer a LOAD/STORE's INDEX addresses, through AFTERs.
local function root_of(index)
  local b = index:source(1)
  while b.op == "AFTER" do b = b:source(1) end
  return b
end

--- { [slot] = { dtype =, numel =, stored = bool } } of the kernel's PARAMs.
local function buffers_of(sink)
  local out = {}
  for _, u in ipairs(sink:toposort()) do
    if u.op == "PARAM" then
      out[u.arg[1]] = out[u.arg[1]] or { dtype = u.dtype, numel = u.arg[2], stored = false }
    elseif u.op == "STORE" and u:source(1).op == "INDEX" then
      local b = root_of(u:source(1))
      if b.op == "PARAM" then
        out[b.arg[1]] = out[b.arg[1]] or { dtype = b.dtype, numel = b.arg[2] }
        out[b.arg[1]].stored = true
      end
    end
  end
  return out
end

--- nil when every ungated load and store of the kernel provably stays inside its buffer,
-- else a description of the first that may not.
function M.unsafe_access(sink)
  for _, u in ipairs(sink:toposort()) do
    local gated = (u.op == "LOAD" and #u.src >= 2) or (u.op == "STORE" and #u.src >= 3)
    if (u.op == "LOAD" or u.op == "STORE") and not gated and u:source(1).op == "INDEX" then
      local index = u:source(1)
      local b = root_of(index)
      if b.op == "PARAM" and #index.src >= 2 then
        local lo, hi = bounds.bounds(index:source(2))
        if lo == nil or lo < 0 or hi >= b.arg[2] then
          return string.format("%s of buffer %d at [%s, %s], outside [0, %d)", u.op, b.arg[1], tostring(lo),
            tostring(hi), b.arg[2])
        end
      end
    end
  end
  return nil
end

-- Deterministic inputs in [-1, 1) (integers in [-8, 8), booleans alternating).
local function fill(buffer, seed)
  local values, state = {}, seed * 2654435761 % 4294967296
  local dt = buffer.dtype
  for i = 1, buffer.numel do
    state = (state * 1103515245 + 12345) % 2147483648
    local x = state / 2147483648 * 2 - 1
    if dt == core.dtype "bool" then values[i] = i % 2 == 0
    elseif dt.is_float then values[i] = x
    else values[i] = math.floor(x * 8) end
  end
  buffer:write(values)
end

-- Storage on the backend's device: a backend whose memory is not the host's (CUDA) allocates
-- its own (backend.allocate), the others take runtime Buffers.
local function allocate(backend, dtype, numel, device)
  if backend.allocate then return backend.allocate(dtype, numel) end
  return runtime.buffer(dtype, numel, device)
end

local function search_buffers(params, backend, device, seed)
  local buffers, outputs = {}, {}
  for slot = 0, #params do
    local p = params[slot]
    if not p then error(string.format("BEAM: the kernel has no buffer in slot %d", slot), 0) end
    buffers[slot + 1] = allocate(backend, p.dtype, p.numel, device)
    if p.stored then outputs[#outputs + 1] = slot + 1 else fill(buffers[slot + 1], seed + slot) end
  end
  return buffers, outputs
end

local function cache_key(sink, ctx, width, backend)
  return string.format("beam|%s|%s|%s|%d", sink.content_hash, ctx.device, backend.options, width)
end

-- A copy of k with the first n opts of a list ({ op, axis, amount } as k:opts() gives them)
-- applied; nil when one fails.
local function with_opts(k, list, n)
  local c = k:copy()
  for i = 1, n or #list do
    if not c:try_apply(list[i][1], list[i][2], list[i][3]) then return nil end
  end
  return c
end

--- Applies an opts text ("UPCAST(1,4) SWAP(1,2) NOLOCALS") to a copy of k; nil when one fails.
function M.replay(k, text)
  local list = {}
  for item in text:gmatch("%S+") do
    local op, axis, amount = item:match("^(%u+)%((%d+),(%d+)%)$")
    if op then list[#list + 1] = { op, tonumber(axis), tonumber(amount) }
    elseif item == "NOLOCALS" then list[#list + 1] = { item }
    else return nil end
  end
  return with_opts(k, list)
end

function M.search(k, sink, ctx, width, info)
  local lower = require "tcl.codegen.driver.lower"
  local optimize = require "tcl.codegen.driver.optimize"
  local backend = lower.backend(ctx.device)
  local dir = disk_cache.dir()
  local key = cache_key(sink, ctx, width, backend)
  -- a search outside a batch of the lowering driver is a batch of one (closed however it ends)
  local _ <close> = current_batch == nil and M.batch(1) or nil
  if dir and not env.IGNORE_BEAM_CACHE then
    local text = runtime.cache_read(dir, key)
    if text then
      local replayed = M.replay(k, text)
      if replayed then
        ctx.search = { width = width, cached = true, candidates = {} }
        kernel_done()
        return replayed
      end
      warn(string.format("kernel '%s': the BEAM cache's opts (%s) no longer apply; searching again",
        tostring(ctx.name), text))
    end
  end

  local bar = batch_bar()
  local name, started = tostring(ctx.name), core.clock()
  local round, tried, best_seen = -1, 0, math.huge
  if bar then bar:set_status(search_status(name, 0, 0, math.huge, 0)) end
  local params = buffers_of(sink)
  local buffers, outputs = search_buffers(params, backend, ctx.device, M.seed)
  -- a kernel made for variable sizes is timed at their largest values (the work its buffers are
  -- sized for): the values buffer it takes last (the pass "bind variables": names in order)
  local vars = {}
  for _, u in ipairs(sink:toposort()) do
    if u.op == "DEFINE_VAR" and u.dtype == core.dtype "index" then vars[#vars + 1] = u end
  end
  if #vars > 0 then
    table.sort(vars, function(a, b) return a.arg[1] < b.arg[1] end)
    local values = {}
    for i, v in ipairs(vars) do values[i] = v.arg[3] end
    local storage = allocate(backend, core.dtype "int32", #values, ctx.device)
    storage:write(values)
    buffers[#buffers + 1] = storage
  end
  local reference = {}
  local base = lower.compile(sink, { device = ctx.device, noopt = true, name = ctx.name })
  base.program:run(buffers)
  for i, slot in ipairs(outputs) do
    reference[i] = allocate(backend, buffers[slot].dtype, buffers[slot].numel, ctx.device)
    reference[i]:copy_from(buffers[slot])
  end

  local function check(kernel, label)
    for i, slot in ipairs(outputs) do
      local d = buffers[slot]:max_difference(reference[i])
      if d > tolerance_of(buffers[slot].dtype) then
        if env.DEBUG >= 1 then
          warn(string.format("BEAM: kernel '%s' (%s) computes wrong values (difference %g): dropped",
            tostring(kernel.name), label, d))
        end
        return false
      end
    end
    return true
  end

  -- what the search tried, for the viewer (tcl.viz): each candidate's opts, round and time
  local log = { width = width, cached = false, candidates = {} }
  ctx.search = log
  local counter = 0
  local function measure(sinks, best)
    local items, usable = {}, {}
    for i, s in ipairs(sinks) do
      counter = counter + 1
      if M.hooks.mutate then s = M.hooks.mutate(s, counter) or s end
      local why = M.unsafe_access(s)
      if why then
        if env.DEBUG >= 1 then warn(string.format("BEAM: a candidate of '%s' is not provably safe (%s): skipped",
          tostring(ctx.name), why)) end
      else
        items[#items + 1] = { ast = s }
        usable[#items] = i
      end
    end
    local compiled
    local ok = pcall(function() compiled = lower.compile_many(items, ctx.device, { noopt = true }) end)
    if not ok then -- one failed: compile each on its own to find it
      compiled = {}
      for j, item in ipairs(items) do
        local fine, kernel = pcall(lower.compile_many, { item }, ctx.device, { noopt = true })
        compiled[j] = fine and kernel[1] or false
      end
    end
    local times = {}
    for j in ipairs(items) do
      local kernel, t = compiled[j], false
      if kernel then
        local fastest = math.huge
        for _ = 1, M.runs do
          local ran, seconds = pcall(kernel.program.run, kernel.program, buffers)
          if not ran then fastest = math.huge break end
          if seconds < fastest then fastest = seconds end
          if fastest > 3 * best then break end
        end
        if fastest < math.huge and check(kernel, sinks[usable[j]].arg[2] or "") then t = fastest end
      end
      times[usable[j]] = t
    end
    for i = 1, #sinks do
      if times[i] == nil then times[i] = false end
      -- (this batch's round: `round` counts the batches measured before it)
      log.candidates[#log.candidates + 1] = { opts = sinks[i].arg[2] or "", round = round + 1, seconds = times[i] }
      if times[i] and times[i] < best_seen then best_seen = times[i] end
    end
    -- the first batch is the seeds (round 0), each later one a round
    round, tried = round + 1, tried + #sinks
    if bar then bar:set_status(search_status(name, round, tried, best_seen, core.clock() - started)) end
    return times
  end

  -- the heuristic's kernel and the prefixes of its opt list (their neighbours are the other
  -- tile shapes and loop orders), or the unoptimized kernel when the heuristic applies
  -- nothing (its neighbours are mostly far slower: timing them is most of a search's time)
  local heuristic = optimize.run_heuristic(k:copy(), info)
  local seeds = { heuristic and #heuristic:opts() > 0 and heuristic or k }
  if heuristic then
    local applied = heuristic:opts()
    for n = #applied - 1, 1, -1 do seeds[#seeds + 1] = with_opts(k, applied, n) end
  end
  -- TC must be the first and only opt: its tile configurations are no neighbours of other
  -- kernels (nor of the unoptimized one once a round dropped it), so each is a seed
  local caps = info.caps or {}
  local found = (caps.tensor_cores or 0) > 0 and tensor_cores.match(sink, caps.gpu)
  for _, action in ipairs(found and tensor_cores.beam_actions(found, caps.threads_max, caps.local_bytes) or {}) do
    seeds[#seeds + 1] = with_opts(k, { action })
  end
  -- the progress line is drawn here (tcl.progress), not by the C search's own line, which
  -- draws even when stderr is not a terminal
  local best = opt.beam_search(seeds, { width = width, seed = M.seed, rounds = M.rounds, progress = false,
    label = name }, measure)
  if dir then runtime.cache_write(dir, key, best:opts_text()) end
  if bar then bar:set_status(nil) end
  kernel_done()
  return best
end

return M
