-- tcl.schedule.memory_check — refuses a realize whose new host buffers need more memory than
-- the process can have, before any of them is allocated and before any kernel is compiled or
-- runs. Layer: Lua scheduler (tcl.schedule.run calls it on every schedule with kernels).
--
-- Why: host memory is overcommitted. Allocating a schedule's buffers succeeds whatever their
-- total, and the kernels writing them then touch more pages than there are: the kernel's OOM
-- killer ends the process, minutes later. So the bytes of the buffers the schedule must newly
-- allocate (not those a tensor already holds) are added up and compared with
--   * TCL_MEMORY_LIMIT_MB (tcl.env MEMORY_LIMIT_BYTES), when set: at any total;
--   * the memory the machine has available (MemAvailable in /proc/meminfo) and the address
--     space left under RLIMIT_AS (/proc/self/limits, /proc/self/status), read only when the
--     total is over MACHINE_CHECK_BYTES: small realizes read no file.
-- Devices with memory of their own (CUDA, METAL) are not checked here: their allocations fail
-- with an error before any kernel runs (the CUDA driver binding has no cheap free-memory query).
local env = require "tcl.env"
local shape = require "tcl.shape"
local buffers = require "tcl.schedule.buffers"

local M = {}

--- New bytes from which a realize is checked against the machine's memory (256 MiB).
M.MACHINE_CHECK_BYTES = 256 << 20

-- What the limit of TCL_MEMORY_LIMIT_MB is called in the error.
local LIMIT = "TCL_MEMORY_LIMIT_MB allows"

-- How many of the largest new buffers the error names.
local NAMED_BUFFERS = 3

local function read_file(path)
  local f = io.open(path, "r")
  if not f then return nil end
  local text = f:read("a")
  f:close()
  return text
end

local function human(bytes)
  if bytes >= 1 << 30 then return string.format("%.1f GiB", bytes / (1 << 30)) end
  return string.format("%.1f MiB", bytes / (1 << 20))
end

--- The least memory the machine lets this process have now, and what it is: the memory
-- available, or the address space left under RLIMIT_AS; nil when neither can be told.
local function machine_room()
  local bytes, what
  local kib = tonumber((read_file("/proc/meminfo") or ""):match("\nMemAvailable:%s*(%d+) kB"))
  if kib then bytes, what = kib * 1024, "the memory available (MemAvailable in /proc/meminfo)" end
  local limit = tonumber((read_file("/proc/self/limits") or ""):match("\nMax address space%s+(%d+)"))
  local used = tonumber((read_file("/proc/self/status") or ""):match("\nVmSize:%s*(%d+) kB"))
  if limit and used then
    local left = math.max(limit - used * 1024, 0)
    if not bytes or left < bytes then bytes, what = left, "the address space left under RLIMIT_AS" end
  end
  return bytes, what
end

local function fail(total, count, room, what, largest, buffer_shapes)
  local named = {}
  for i = 1, math.min(#largest, NAMED_BUFFERS) do
    local b = largest[i]
    local s = buffer_shapes[b.node.arg[1]] or { b.node.arg[2] }
    named[i] = string.format("%s %s of %d bytes", b.node.dtype.name, shape.format(s), b.bytes)
  end
  error(string.format("realize: this realize needs %d bytes (%s) of new host memory for %d buffer%s, more than %s: "
    .. "%d bytes (%s); the largest: %s. Free the tensors you no longer need%s or realize less at once", total,
    human(total), count, count == 1 and "" or "s", what, room, human(room), table.concat(named, ", "),
    what == LIMIT and ", raise TCL_MEMORY_LIMIT_MB" or ""), 0)
end

--- Raises "realize: ..." when the buffers sched (tcl.schedule.create) must newly allocate need
-- more host memory than there is room for; returns their total bytes otherwise.
function M.check(sched)
  if buffers.in_device_memory(sched.device) then return 0 end
  local seen, new, total = {}, {}, 0
  for _, k in ipairs(sched.kernels) do
    for _, b in ipairs(k.buffers) do
      local id = b.arg[1]
      if not seen[id] and buffers.is_buffer(b) and not buffers.allocated(b) then
        seen[id] = true
        local bytes = b.arg[2] * b.dtype.itemsize
        total = total + bytes
        new[#new + 1] = { node = b, bytes = bytes, order = #new + 1 }
      end
    end
  end
  local limit = env.MEMORY_LIMIT_BYTES
  local room, what
  if limit and total > limit then
    room, what = limit, LIMIT
  elseif total > M.MACHINE_CHECK_BYTES then
    room, what = machine_room()
    if room and total > room then
      -- buffers of dead tensors are freed by their finalizers: collect them, then look again
      collectgarbage()
      collectgarbage()
      room, what = machine_room()
    end
  end
  if not room or total <= room then return total end
  table.sort(new, function(x, y)
    if x.bytes ~= y.bytes then return x.bytes > y.bytes end
    return x.order < y.order
  end)
  fail(total, #new, room, what, new, sched.buffer_shapes or {})
end

return M
