-- tcl.profile.report — what tcl.profile returns: the events of one profiled call, and the
-- printed table of its kernels. Layer: tools over the Tensor API.
--
--   local report = require "tcl.profile.report"
--   local r = report.new(start_clock)     -- empty; r:add(event) for each event
--   r.kernels, r.copies, r.compiles       -- the events in order (tcl.codegen.driver.events)
--   r.seconds, r.wall                     -- kernel time, the whole call (seconds)
--   r:rows()                              -- kernels aggregated by kernel and device, slowest first
--   print(r)  or  r:print()               -- the table below
--
--   kernel                     device calls  total ms  share  GFLOPS    GB/s roofline
--   r_256_16_4                 CPU         2     1.234  61.7%   12.30    3.10      19%
--   E_1024_16u                 CPU         1     0.766  38.3%    1.34   16.02      29%
--   kernels 2.000 ms in 3 runs, wall 5.120 ms; copies 0.050 ms (2, 8.0 KB); compiles 41.2 ms (1)
--   peaks CPU: 65.1 GFLOPS, 56.0 GB/s (measured)
--
-- GFLOPS and GB/s are the kernel's operations and bytes (tcl.codegen.driver.estimates) over
-- its time. roofline is achieved / attainable, attainable = min(peak GFLOPS, arithmetic
-- intensity (ops / bytes) x peak GB/s): the same as the larger of ops / (seconds x peak
-- GFLOPS) and bytes / (seconds x peak GB/s), which also holds for a kernel that moves bytes
-- and computes nothing. Peaks come from tcl.profile.peaks; a device without them prints "-".
local peaks = require "tcl.profile.peaks"

local M = {}

local Report = {}
Report.__index = Report

--- An empty report of a call that started at clock reading `start` (events.clock).
function M.new(start)
  return setmetatable({ kernels = {}, copies = {}, compiles = {}, seconds = 0, wall = 0, start = start }, Report)
end

--- Whether v is a report.
function M.is_report(v)
  return getmetatable(v) == Report
end

local LIST_OF_KIND = { kernel = "kernels", copy = "copies", compile = "compiles" }

--- Files one event (tcl.codegen.driver.events) under its kind.
function Report:add(event)
  local list = self[LIST_OF_KIND[event.kind]]
  if not list then return end
  list[#list + 1] = event
  if event.kind == "kernel" then self.seconds = self.seconds + event.seconds end
end

-- amount / seconds in units of 1e9 per second; 0 for a run that was not timed
local function rate(amount, seconds)
  if seconds <= 0 then return 0 end
  return amount / seconds * 1e-9
end

--- The roofline fraction of a kernel that did `ops` operations and moved `bytes` in `seconds`
-- on a device of peaks p ({ gflops =, gbs = }); nil without peaks or time.
function M.roofline(ops, bytes, seconds, p)
  if not p or seconds <= 0 then return nil end
  return math.max(ops / (seconds * p.gflops * 1e9), bytes / (seconds * p.gbs * 1e9))
end

--- The kernels aggregated by (kernel, device), the slowest first (ties: by name): a list of
-- { name =, device =, calls =, seconds =, ops =, bytes =, share = (% of the kernel time),
-- gflops =, gbs =, roofline = (a fraction, or nil), peaks = (the device's, or nil) }.
-- Kernel names come from shapes, so two different kernels may share one ("E_64" for a + b and
-- for exp(a * b)): each keeps a row of its own, the second named "E_64#2", the third "E_64#3"
-- (in the order they first ran). peaks_of(device) gives a device's peaks (default
-- tcl.profile.peaks.of).
function Report:rows(peaks_of)
  peaks_of = peaks_of or peaks.of
  local rows, row_of = {}, {}
  local kernels_named = {} -- name -> { [kernel] = its number among the kernels of that name }
  for _, k in ipairs(self.kernels) do
    local kernel = k.kernel or k.name -- events made by hand may name no kernel object
    local numbers = kernels_named[k.name]
    if not numbers then
      numbers = { n = 0 }
      kernels_named[k.name] = numbers
    end
    if not numbers[kernel] then
      numbers.n = numbers.n + 1
      numbers[kernel] = numbers.n
    end
    local name = numbers[kernel] == 1 and k.name or k.name .. "#" .. numbers[kernel]
    local key = name .. "\0" .. k.device
    local row = row_of[key]
    if not row then
      row = { name = name, device = k.device, calls = 0, seconds = 0, ops = 0, bytes = 0 }
      row_of[key] = row
      rows[#rows + 1] = row
    end
    row.calls, row.seconds = row.calls + 1, row.seconds + k.seconds
    row.ops, row.bytes = row.ops + k.ops, row.bytes + k.bytes
  end
  table.sort(rows, function(a, b)
    if a.seconds ~= b.seconds then return a.seconds > b.seconds end
    if a.name ~= b.name then return a.name < b.name end
    return a.device < b.device
  end)
  local device_peaks = {}
  for _, row in ipairs(rows) do
    if device_peaks[row.device] == nil then device_peaks[row.device] = peaks_of(row.device) or false end
    row.peaks = device_peaks[row.device] or nil
    row.share = self.seconds > 0 and row.seconds / self.seconds * 100 or 0
    row.gflops, row.gbs = rate(row.ops, row.seconds), rate(row.bytes, row.seconds)
    row.roofline = M.roofline(row.ops, row.bytes, row.seconds, row.peaks)
  end
  return rows
end

-- What one kind of event took: total seconds, count and bytes; compiles count their batches.
local function sum(list, track)
  local seconds, count, bytes = 0, 0, 0
  for _, e in ipairs(list) do
    if not track or e.track == track then
      seconds, count, bytes = seconds + e.seconds, count + 1, bytes + (e.bytes or 0)
    end
  end
  return seconds, count, bytes
end

--- Totals: { kernels = seconds, runs = n, wall = seconds, copies = seconds, copy_count =,
-- copy_bytes =, compiles = seconds (batches: lowering and building), compile_count = }.
function Report:totals()
  local copies, copy_count, copy_bytes = sum(self.copies)
  local compiles, compile_count = sum(self.compiles, "compile")
  return { kernels = self.seconds, runs = #self.kernels, wall = self.wall, copies = copies, copy_count = copy_count,
    copy_bytes = copy_bytes, compiles = compiles, compile_count = compile_count }
end

local NAME_WIDTH = 32

--- name cut to `width` characters, its start and end kept ("r_64_16_4...n2_3"): kernel
-- names differ at both ends.
function M.truncate(name, width)
  width = width or NAME_WIDTH
  if #name <= width then return name end
  local tail = (width - 3) // 2
  return name:sub(1, width - 3 - tail) .. "..." .. name:sub(-tail)
end

local function bytes_text(n)
  if n >= 1e9 then return string.format("%.1f GB", n / 1e9) end
  if n >= 1e6 then return string.format("%.1f MB", n / 1e6) end
  if n >= 1e3 then return string.format("%.1f KB", n / 1e3) end
  return string.format("%d B", n)
end

--- The report as text: the table of rows (peaks_of as in rows), the totals, the peaks used.
function Report:format(peaks_of)
  local rows = self:rows(peaks_of)
  local lines = { string.format("%-" .. NAME_WIDTH .. "s %-6s %5s %9s %6s %8s %8s %8s", "kernel", "device", "calls",
    "total ms", "share", "GFLOPS", "GB/s", "roofline") }
  local used, order = {}, {}
  for _, row in ipairs(rows) do
    local roof = row.roofline and string.format("%.0f%%", row.roofline * 100) or "-"
    lines[#lines + 1] = string.format("%-" .. NAME_WIDTH .. "s %-6s %5d %9.3f %5.1f%% %8.2f %8.2f %8s",
      M.truncate(row.name), row.device, row.calls, row.seconds * 1e3, row.share, row.gflops, row.gbs, roof)
    if row.peaks and not used[row.device] then
      used[row.device] = row.peaks
      order[#order + 1] = row.device
    end
  end
  local t = self:totals()
  lines[#lines + 1] = string.format("kernels %.3f ms in %d run%s, wall %.3f ms; copies %.3f ms (%d, %s); "
    .. "compiles %.3f ms (%d)", t.kernels * 1e3, t.runs, t.runs == 1 and "" or "s", t.wall * 1e3, t.copies * 1e3,
    t.copy_count, bytes_text(t.copy_bytes), t.compiles * 1e3, t.compile_count)
  for _, device in ipairs(order) do
    local p = used[device]
    lines[#lines + 1] = string.format("peaks %s: %.1f GFLOPS, %.1f GB/s (%s)", device, p.gflops, p.gbs, p.source)
  end
  return table.concat(lines, "\n")
end

Report.__tostring = function(self) return self:format() end

--- Writes the report's text and a newline to file (default io.stdout).
function Report:print(file)
  file = file or io.stdout
  file:write(self:format(), "\n")
end

return M
