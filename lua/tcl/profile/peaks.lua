-- tcl.profile.peaks — the machine's peaks a roofline compares kernels against: compute
-- (GFLOPS) and memory bandwidth (GB/s) per device. Layer: tools over the Tensor API.
--
--   local peaks = require "tcl.profile.peaks"
--   local p = peaks.of("CPU")   -- { gflops = 61.2, gbs = 48.7, source = "measured" } or nil
--   peaks.forget()              -- the next peaks.of("CPU") measures again
--
-- TCL_PEAK_GFLOPS and TCL_PEAK_GBS (tcl.env's PEAK_GFLOPS, PEAK_GBS) set the peaks of every
-- device; source is then "TCL_PEAK_GFLOPS/TCL_PEAK_GBS". When only one is set, the CPU
-- measures the other (source "TCL_PEAK_GFLOPS/measured" or "measured/TCL_PEAK_GBS") and
-- other devices have none. Without them the CPU is measured once per
-- state, with tcl's own kernels, so the peaks are what tcl's code can reach on this machine:
--   compute: a float32 matmul of 256 x 256 matrices (256 KiB each: in cache), whose inner
--     loop is fused multiply-adds (DEBUG=7 shows vfmadd; an elementwise x = x * a + b chain
--     does not do: tcl lets LLVM fuse only a product into an accumulator, so it measures
--     separate multiplies and adds, about half as fast);
--   bandwidth: a float32 buffer of 32 MiB negated in place (written before: no page faults
--     in the runs), bytes read and written counted.
-- Each is the best of five runs after one that compiles; together about 0.1-0.3 s.
-- Other devices (EMU, CUDA, METAL) have no peaks unless both variables are set: nil.
local env = require "tcl.env"
local devices = require "tcl.devices"
local context = require "tcl.context"
local events = require "tcl.codegen.driver.events"

local M = {}

local MATMUL_SIZE = 256
local COPY_ELEMENTS = 8 << 20 -- float32: 32 MiB
local RUNS = 5

local measured -- the CPU's { gflops =, gbs = } once measured in this state

-- The best rate of `fn`'s kernel over RUNS runs after a first one that compiles: the most of
-- amount(kernel event) / its seconds, in units of 1e9 per second.
local function best_rate(fn, amount)
  local best = 0
  local function listener(event)
    if event.kind == "kernel" and event.seconds > 0 then
      best = math.max(best, amount(event) / event.seconds * 1e-9)
    end
  end
  events.alone(nil, fn)
  for _ = 1, RUNS do events.alone(listener, fn) end
  return best
end

local function measure()
  local Tensor = require "tcl.api.tensor"
  local opts = { device = "CPU" }
  local a = Tensor.full({ MATMUL_SIZE, MATMUL_SIZE }, 0.5, opts):contiguous():realize()
  local gflops = best_rate(function() return a:matmul(a):realize() end, function(event) return event.ops end)
  -- one buffer, negated in place: a second one would cost as much again in page faults
  -- (first touches) as the runs themselves take
  local data = Tensor.full({ COPY_ELEMENTS }, 0.5, opts):contiguous():realize()
  local gbs = best_rate(function() return data:assign(-data):realize() end,
    function(event) return event.bytes end)
  return { gflops = gflops, gbs = gbs }
end

--- The CPU's measured peaks { gflops =, gbs = }, measured on the first call of the state
-- (with the settings that would change the kernels put to their defaults).
function M.measured()
  if not measured then
    measured = context { DEBUG = 0, BEAM = 0, NOOPT = false }(measure)
  end
  return measured
end

--- Forgets the CPU's measured peaks (the next call measures again).
function M.forget()
  measured = nil
end

--- The peaks of device (a name: "CPU", "CUDA", ...): { gflops =, gbs =, source = "measured"
-- | "TCL_PEAK_GFLOPS/TCL_PEAK_GBS" }, or nil when there are none (see the header).
function M.of(device)
  if type(device) ~= "string" then error("peaks.of: expected a device name, got " .. type(device), 2) end
  local gflops, gbs = env.PEAK_GFLOPS, env.PEAK_GBS
  if gflops and gbs then return { gflops = gflops, gbs = gbs, source = "TCL_PEAK_GFLOPS/TCL_PEAK_GBS" } end
  local ok, base = pcall(devices.base, device)
  if not ok or base ~= "CPU" then return nil end -- every CPU instance has the CPU's peaks
  local m = M.measured()
  local source = (gflops or gbs) and (gflops and "TCL_PEAK_GFLOPS" or "measured") .. "/"
    .. (gbs and "TCL_PEAK_GBS" or "measured") or "measured"
  return { gflops = gflops or m.gflops, gbs = gbs or m.gbs, source = source }
end

return M
