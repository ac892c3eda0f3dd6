-- tcl.profile — profiles of a call: every kernel run, copy and compile it caused, timed; a
-- printed table of the kernels with their roofline, and a trace for Perfetto.
-- Layer: tools over the Tensor API (tcl.profile is this table, callable).
--
--   local report, y = tcl.profile(fn, x)   -- calls fn(x); report first, then fn's results
--   print(report)                          -- kernels by time: calls, ms, share, GFLOPS, GB/s,
--                                          -- roofline; totals (tcl.profile.report)
--   report.kernels[1]                      -- { name =, device =, start =, seconds =, ops =, bytes = }
--   report.seconds, report.wall            -- kernel time, the whole call (seconds)
--   report.copies, report.compiles         -- their events (tcl.codegen.driver.events)
--   tcl.profile.save("trace.json")         -- the last report as a Chrome trace (tcl.profile.trace)
--   tcl.profile.save("trace.json", report) -- or the one given
--   tcl.profile.last()                     -- the last report tcl.profile made (nil: none yet)
--
-- The events come from tcl.codegen.driver.events, which times nothing while nobody listens:
-- outside tcl.profile a kernel run pays one table lookup. On a GPU that queues kernels (CUDA,
-- Metal) a profiled call waits for each kernel, to time it.
local check = require "tcl.api.check"
local events = require "tcl.codegen.driver.events"
local report_module = require "tcl.profile.report"
local trace = require "tcl.profile.trace"

local M = {}

local last -- the last report made

local function is_callable(f)
  if type(f) == "function" then return true end
  local mt = getmetatable(f)
  return type(mt) == "table" and mt.__call ~= nil
end

-- tcl.profile(fn, ...): the report, then fn's results; fn's error is raised as it is.
local function profile(_, fn, ...)
  if not is_callable(fn) then error("profile: expected a function, got " .. type(fn), 2) end
  local report = report_module.new(events.clock())
  local stop = events.listen(function(event) report:add(event) end)
  local results = table.pack(pcall(fn, ...))
  report.wall = events.clock() - report.start
  stop()
  if not results[1] then error(results[2], 0) end
  last = report
  return report, table.unpack(results, 2, results.n)
end

--- The last report tcl.profile made in this state, or nil.
function M.last()
  return last
end

--- Writes report (default: the last one tcl.profile made) to path as a Chrome trace event
-- file (tcl.profile.trace); errors when there is no report or the file cannot be written.
function M.save(path, report)
  if type(path) ~= "string" or path == "" then
    error("profile.save: expected a file path, got " .. (path == "" and "''" or type(path)), 2)
  end
  if report == nil then
    report = last
    if report == nil then error("profile.save: no report yet (call tcl.profile(fn) first)", 2) end
  elseif not report_module.is_report(report) then
    error("profile.save: expected a report of tcl.profile, got " .. type(report), 2)
  end
  local ok, err = pcall(trace.save, path, report)
  if not ok then error("profile.save: " .. tostring(err), 2) end
end

--- Prints report (default: the last one) as print(report) does.
function M.print(report, file)
  report = report or last
  if not report_module.is_report(report) then
    error("profile.print: expected a report of tcl.profile, got " .. type(report), 2)
  end
  report:print(file)
end

-- an argument too many is an error naming the function (tcl's convention: tcl.api.check)
check.fix_arguments(M, "profile.")

return setmetatable(M, { __call = profile })
