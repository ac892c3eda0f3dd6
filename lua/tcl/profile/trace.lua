-- tcl.profile.trace — a profile report (tcl.profile.report) as a Chrome trace event file,
-- which Perfetto (ui.perfetto.dev) and chrome://tracing open. Layer: tools over the Tensor API.
--
--   local trace = require "tcl.profile.trace"
--   local list = trace.events(report)   -- the trace events, metadata first
--   local text = trace.encode(report)   -- '{"displayTimeUnit":"ms","traceEvents":[...]}'
--   trace.save("run.json", report)      -- written whole or not at all
--
-- The format: complete events ("ph": "X") with ts and dur in microseconds from the start of
-- the profiled call; one process (pid) per device, named by a "process_name" metadata event,
-- and in it one thread (tid) per track, named by "thread_name": the kernel runs, the copies
-- (host <-> device, device <-> device), the compiles (each batch, with its kernels' lowering
-- and the backend's build nested in it: all on the calling thread), and the CPU backend's
-- per-kernel compile times. The compile workers do not say which thread compiled what, or
-- when, so those share one track, laid end to end from the build's start (their sum is the
-- workers' time; several ran at once). args carry the figures: ops, bytes, GFLOPS, GB/s.
local json = require "tcl.api.json"
local runtime = require "tcl.runtime"

local M = {}

-- The tracks of a device, in the order the viewer lists them.
local TRACKS = {
  { tid = 1, name = "kernels" },
  { tid = 2, name = "copies" },
  { tid = 3, name = "compile" },
  { tid = 4, name = "compile workers (per kernel, end to end)" },
}
local TID_OF_TRACK = { compile = 3, lower = 3, build = 3, ["compile workers"] = 4 }

local function tid_of(event)
  if event.kind == "kernel" then return 1 end
  if event.kind == "copy" then return 2 end
  return TID_OF_TRACK[event.track] or 3
end

local function rate(amount, seconds)
  if seconds <= 0 then return 0 end
  return amount / seconds * 1e-9
end

local function args_of(event)
  if event.kind == "kernel" then
    return { ops = event.ops, bytes = event.bytes, GFLOPS = rate(event.ops, event.seconds),
      ["GB/s"] = rate(event.bytes, event.seconds) }
  elseif event.kind == "copy" then
    return { bytes = event.bytes, ["GB/s"] = rate(event.bytes, event.seconds) }
  elseif event.kernels then
    return { kernels = table.concat(event.kernels, ", ") }
  end
  return nil
end

--- The trace events of report: metadata (process and thread names) first, then the events
-- ordered by start (an enclosing event before those it holds).
function M.events(report)
  local all = {}
  for _, list in ipairs { report.kernels, report.copies, report.compiles } do
    for _, e in ipairs(list) do all[#all + 1] = e end
  end
  local pid_of, devices, used = {}, {}, {}
  for _, e in ipairs(all) do
    if not pid_of[e.device] then
      devices[#devices + 1] = e.device
      pid_of[e.device] = #devices
      used[e.device] = {}
    end
    used[e.device][tid_of(e)] = true
  end
  local out = {}
  for pid, device in ipairs(devices) do
    out[#out + 1] = { name = "process_name", ph = "M", pid = pid, tid = 0, args = { name = device } }
    out[#out + 1] = { name = "process_sort_index", ph = "M", pid = pid, tid = 0, args = { sort_index = pid } }
    for _, track in ipairs(TRACKS) do
      if used[device][track.tid] then
        out[#out + 1] = { name = "thread_name", ph = "M", pid = pid, tid = track.tid, args = { name = track.name } }
        out[#out + 1] = { name = "thread_sort_index", ph = "M", pid = pid, tid = track.tid,
          args = { sort_index = track.tid } }
      end
    end
  end
  table.sort(all, function(a, b)
    if a.start ~= b.start then return a.start < b.start end
    return a.seconds > b.seconds
  end)
  local workers_free = {} -- pid -> when its compile workers' track is free again (microseconds)
  for _, e in ipairs(all) do
    local event = { name = e.name, cat = e.kind, ph = "X", pid = pid_of[e.device], tid = tid_of(e),
      ts = (e.start - report.start) * 1e6, dur = e.seconds * 1e6, args = args_of(e) }
    if e.track == "compile workers" then
      -- laid end to end already (their start is made up); a batch whose workers' time ran past
      -- the next batch's build start would overlap it, which a viewer cannot draw on one track
      event.ts = math.max(event.ts, workers_free[event.pid] or 0)
      workers_free[event.pid] = event.ts + event.dur
      event.args = { note = "time on a compile worker; which worker, and when, is not known" }
    end
    out[#out + 1] = event
  end
  return out
end

--- The trace of report as JSON text.
function M.encode(report)
  local parts = {}
  for i, e in ipairs(M.events(report)) do parts[i] = json.encode(e) end
  -- written by hand around the list: json.encode writes an empty table as an object
  return '{"displayTimeUnit":"ms","traceEvents":[' .. table.concat(parts, ",\n") .. "]}\n"
end

--- Writes the trace of report to path, replacing it whole (never half written); an error
-- that names path when it cannot.
function M.save(path, report)
  local ok, err = pcall(runtime.replace_file, path, { M.encode(report) })
  if not ok then error((tostring(err):gsub("^runtime%.replace_file: ", "")), 0) end
end

return M
