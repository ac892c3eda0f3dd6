-- tcl.codegen.driver.events — what tcl.profile sees: timed events (kernel runs, compiles,
-- copies) handed to whoever listens. Layer: codegen (the lowering driver emits kernel runs
-- and compiles; the scheduler and the Tensor API, which sit above it, emit copies).
--
--   local events = require "tcl.codegen.driver.events"
--   local stop = events.listen(function(e) print(e.kind, e.name, e.seconds) end)
--   if events.on() then                      -- nothing is timed while nobody listens
--     local start = events.clock()
--     ...                                    -- the work
--     events.emit { kind = "copy", name = "write from host", device = "CPU", start = start,
--       seconds = events.clock() - start, bytes = n }
--   end
--   stop()
--
-- An event: { kind = "kernel" | "compile" | "copy", name =, device =, start = (seconds of
-- events.clock, taken before the work), seconds =, ... }; kernels add ops and bytes, copies
-- bytes, compiles track (what the work ran on: "lower", "build", or "compile workers") and
-- kernels (the names built). Emitters check events.on() first, so that a run nobody profiles
-- pays one table lookup and no clock reads.
local core = require "tcl.core"

local M = {}

local listeners = {} -- fn -> true

--- The clock events are stamped with (tcl.clock: seconds, monotonic).
M.clock = core.clock

--- Whether anything listens (emitters time their work only then).
function M.on()
  return next(listeners) ~= nil
end

--- Calls fn(event) for every event until the returned function is called.
function M.listen(fn)
  if type(fn) ~= "function" then error("events.listen: expected a function, got " .. type(fn), 2) end
  listeners[fn] = true
  return function() listeners[fn] = nil end
end

--- Hands event to every listener.
function M.emit(event)
  for fn in pairs(listeners) do fn(event) end
end

--- Calls fn(...) with only `listener` listening (nil: nobody), the others put back after it,
-- even when fn fails; returns fn's results. Work done for the profiler itself (measuring the
-- machine's peaks) is kept out of the profile it serves this way.
function M.alone(listener, fn, ...)
  local saved = listeners
  listeners = {}
  if listener then listeners[listener] = true end
  local results = table.pack(pcall(fn, ...))
  listeners = saved
  if not results[1] then error(results[2], 0) end
  return table.unpack(results, 2, results.n)
end

return M
