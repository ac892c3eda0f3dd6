-- tcl.devices — device names with an instance: "CPU:2" is the second CPU device, "CPU" and
-- "CPU:1" the first. Every CPU instance keeps its buffers in host memory and runs kernels on
-- threads of its own (runtime.configure_cpu { device = "CPU:2" }), so work spread over several
-- devices (sharding) is testable on a machine without GPUs; a copy between two instances is a
-- copy. EMU has instances too (one interpreter, host memory). "CUDA:N" is the GPU of ordinal
-- N-1 as CUDA_VISIBLE_DEVICES numbers them ("CUDA" = "CUDA:1"): each has its own context, queue
-- and memory, a kernel is compiled once and loaded on every GPU it runs on, and a copy between
-- two is a peer copy (cuMemcpyPeer); an instance beyond the GPUs visible fails at its first use,
-- naming the count (tcl.cuda). METAL has one device yet. Layer: lua/tcl (no dependencies; which
-- devices exist is the runtime's, tcl.api.class checks it).
--
--   local devices = require "tcl.devices"
--   devices.parse("cpu:2")        --> "CPU", 2   (raises "device 'CPU:0': ..." on a bad name)
--   devices.try_parse("CPU:x")    --> nil, "device 'CPU:x': the instance must be a number ..."
--   devices.canonical("CPU:1")    --> "CPU"      (the spelling t.device shows)
--   devices.base("CPU:2")         --> "CPU"      (the backend, the kernel cache's device)
--   devices.instance("CPU:2")     --> 2
--   devices.name("CPU", 3)        --> "CPU:3"
--   devices.set_threads("CPU:2", 1) -- that instance's pool: 1 thread (before its first run)
--   devices.threads("CPU:2")      --> 1, started
local quote = require "tcl.quote"

local M = {}

--- The most instances of one device (the runtime's TCL_DEVICE_INSTANCES_MAX).
M.MAX_INSTANCES = 64

-- Devices that have one instance yet, and why a second is refused.
local SINGLE = { METAL = "only one Metal device is supported yet" }

--- base, instance of a device name (any case: "cpu:2" is "CPU", 2); nil and a message naming
-- the problem when the instance part is bad. The base is not checked against the devices the
-- runtime has (tcl.api.class does that).
function M.try_parse(name)
  if type(name) ~= "string" then
    return nil, string.format("a device name must be a string such as 'CPU' or 'CPU:2', got %s", type(name))
  end
  local upper = name:upper()
  local base, suffix = upper:match("^([^:]*):(.*)$")
  if not base then return upper, 1 end
  local shown = quote(name)
  if not suffix:match("^%d+$") then
    return nil, string.format("device '%s': the instance must be a number (%s:1 to %s:%d)", shown, base, base,
      M.MAX_INSTANCES)
  end
  local instance = tonumber(suffix)
  if instance < 1 then
    return nil, string.format("device '%s': instances count from 1 (%s:1 is %s)", shown, base, base)
  end
  if instance > M.MAX_INSTANCES then
    return nil, string.format("device '%s': at most %d instances (%s:1 to %s:%d)", shown, M.MAX_INSTANCES, base,
      base, M.MAX_INSTANCES)
  end
  if instance > 1 and SINGLE[base] then return nil, string.format("%s: %s", shown, SINGLE[base]) end
  return base, math.tointeger(instance)
end

--- base, instance of a device name; raises try_parse's message on a bad one.
function M.parse(name)
  local base, instance = M.try_parse(name)
  if not base then error(instance, 2) end
  return base, instance
end

--- The name of instance `instance` of base: the base alone for the first.
function M.name(base, instance)
  if instance == 1 then return base end
  return base .. ":" .. instance
end

--- The canonical spelling of a device name ("cpu:1" -> "CPU", "cpu:2" -> "CPU:2").
function M.canonical(name)
  local base, instance = M.try_parse(name)
  if not base then error(instance, 2) end
  return M.name(base, instance)
end

-- Canonical names are asked for on every kernel run and op: remember their bases.
local base_of = {}

--- The device a name is an instance of ("CPU:2" -> "CPU"): its backend and kernels.
function M.base(name)
  local known = base_of[name]
  if known then return known end
  local base, why = M.try_parse(name)
  if not base then error(why, 2) end
  base_of[name] = base
  return base
end

--- The instance a device name denotes (1 for "CPU").
function M.instance(name)
  local base, instance = M.try_parse(name)
  if not base then error(instance, 2) end
  return instance
end

local function cpu_instance(fn, device)
  local base, instance = M.try_parse(device)
  if not base then error(fn .. ": " .. instance, 3) end
  if base ~= "CPU" then
    error(string.format("%s: device '%s' is not a CPU device (CPU, CPU:2, ...): only CPU instances have threads",
      fn, quote(device)), 3)
  end
  return M.name(base, instance)
end

--- Sets the thread count of a CPU instance's pool (the caller included; nil: the default, which
-- is TCL_THREADS, else the cores). Before the instance's first parallel run; an error after it
-- with another count.
function M.set_threads(device, threads)
  local name = cpu_instance("devices.set_threads", device)
  local ok, err = pcall(require("tcl.runtime").configure_cpu, { threads = threads, device = name })
  if not ok then error((tostring(err):gsub("^runtime%.configure_cpu", "devices.set_threads")), 2) end
end

--- The thread count of a CPU instance's pool (what it has, or will have when it starts), and
-- whether it has started.
function M.threads(device)
  return require("tcl.runtime").cpu_threads(false, cpu_instance("devices.threads", device))
end

return M
