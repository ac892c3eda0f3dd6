-- tcl.schedule.buffers — realized storage of the tensor graph. Layer: Lua scheduler, over the runtime.
--
-- A realized tensor is a BUFFER node `uop("BUFFER", dtype, nil, {id, numel, device})`
-- (docs/design/encodings.md); its memory is a runtime Buffer (`require "tcl.runtime"`) that
-- this module keeps in a registry keyed by the id. The node never points at the memory
-- (nodes are immutable, hash-consed values), so the registry is the one link between them.
--
-- Storage is a runtime Buffer (host memory: EMU, CPU) or, on the devices with memory of their
-- own ("CUDA": tcl.cuda, "METAL": tcl.metal), that module's buffer, with the same Lua surface
-- (.numel .dtype .nbytes .itemsize .device, read/write, read_bytes/write_bytes, copy_from,
-- copy_to); M.allocate makes any of them and M.copy copies between any two.
--
-- Allocation is lazy: buffers.new registers the buffer and hands back the node; the memory
-- is allocated on the first buffers.get. So schedules can be built (and kernels counted)
-- without a runtime, and a buffer that no kernel ever runs on costs nothing.
--
-- Freeing: the registry holds ids, never nodes, so a BUFFER node dies when no tensor, graph
-- or kernel refers to it. buffers.collect() (called by the scheduler at every realize) asks
-- the core whether each registered node is still alive (core.find creates nothing) and
-- drops the runtime Buffer of the dead ones (its finalizer frees the memory at the next
-- garbage collection). After collectgarbage(), a buffer that no tensor references is
-- dropped by the next collect.
local core = require "tcl.core"
local env = require "tcl.env"
local events = require "tcl.codegen.driver.events"
local devices = require "tcl.devices"

local M = {}

--- The default device named in BUFFER args: DEVICE's, else CPU (the Tensor API names one
-- in every call; this serves callers that do not).
M.device = "CPU"
if env.DEVICE then
  local ok, name = pcall(devices.canonical, env.DEVICE)
  M.device = ok and name or env.DEVICE:upper() -- a bad name: the Tensor API says what is wrong with it
end

-- buffer id -> { dtype =, numel =, storage = runtime Buffer or nil }. Ids come from the core's
-- counter (core.fresh_id), not from this module: a node is identified by its content, so an id
-- used again while an older BUFFER node with it lives (this module loaded a second time, as
-- busted's insulate does per spec file) would be that node.
local registry = {}
-- Lookups that skip reading a node's arg (a new Lua table per read): the entry of a BUFFER
-- node's userdata, and the userdata of a buffer id while one is reachable. A reachable
-- userdata holds its node alive, so its entry cannot have been collected.
local entry_by_node = setmetatable({}, { __mode = "k" })
local node_by_id = setmetatable({}, { __mode = "v" })
local runtime -- loaded on first allocation, so building schedules never needs it

local function load_runtime()
  if not runtime then
    local ok, mod = pcall(require, "tcl.runtime")
    if not ok then error("buffers: the runtime (tcl.runtime) is not available: " .. tostring(mod), 0) end
    runtime = mod
  end
  return runtime
end

-- The devices whose storage is their own module's buffer, not host memory: the module, and the
-- name of its buffers' metatable.
local DEVICE_MEMORY = {
  CUDA = { module = "tcl.cuda", what = "the CUDA device", metatable = "tcl.CudaBuffer" },
  METAL = { module = "tcl.metal", what = "the Metal device", metatable = "tcl.MetalBuffer" },
}
local device_modules = {} -- device -> its module, loaded when its first buffer is needed

-- The entry of DEVICE_MEMORY for a device name ("CUDA:2" is CUDA's); nil for host memory.
local function device_memory(device)
  local base = type(device) == "string" and device:match("^[^:]*") or device
  return DEVICE_MEMORY[base]
end

local function load_device_module(device)
  device = device:match("^[^:]*")
  local mod = device_modules[device]
  if not mod then
    local d = DEVICE_MEMORY[device]
    local ok, loaded = pcall(require, d.module)
    if not ok then error(string.format("buffers: %s (%s) is not in this build: %s", d.what, d.module,
      tostring(loaded)), 0) end
    mod = loaded
    device_modules[device] = mod
  end
  return mod
end

--- Whether device keeps its storage in memory of its own (CUDA, METAL), which host Buffers and
-- file views cannot be.
function M.in_device_memory(device)
  return device_memory(device) ~= nil
end

--- New storage of numel elements of dtype on device: the device module's buffer for "CUDA" (and
-- its instances, "CUDA:2") and "METAL" (its first use opens the GPU, or fails saying what is
-- missing; zero-filled), else a
-- runtime Buffer, zero-filled unless fill says otherwise: "none" (unspecified contents, for
-- storage written whole before it is read) or "poison" (0xFF bytes; see TCL_POISON_OUTPUTS).
function M.allocate(dtype, numel, device, fill)
  local own = device_memory(device)
  local make = own and load_device_module(device).buffer or load_runtime().buffer
  if own then fill = nil end
  -- called through pcall, so the message is the C function's alone (no position of this file)
  local ok, storage = pcall(make, dtype, numel, device, fill)
  if not ok then error(storage, 0) end
  return storage
end

--- Copies storage src into dst (same dtype and numel) in any direction between host and
-- device memory; returns dst.
function M.copy(dst, src)
  local start = events.on() and events.clock()
  local from, to = device_memory(src.device), device_memory(dst.device)
  if from and to and from ~= to then
    -- between two devices' memories (CUDA -> METAL): through host memory
    local staging = load_runtime().buffer(src.dtype, src.numel, "CPU")
    src:copy_to(staging)
    dst:copy_from(staging)
  elseif from and not to then
    src:copy_to(dst) -- a host Buffer cannot read device memory: the device buffer writes it
  else
    dst:copy_from(src) -- between two CUDA instances (CUDA:2 -> CUDA): a peer copy (tcl.cuda)
  end
  if start then M.copied("copy " .. src.device .. "->" .. dst.device, dst.device, start, dst.nbytes) end
  return dst
end

--- Tells tcl.profile (tcl.codegen.driver.events) that nbytes moved between host memory and
-- device (or between two buffers), from `start` (events.clock) until now. Callers time the
-- copy only when events.on().
function M.copied(name, device, start, nbytes)
  events.emit { kind = "copy", name = name, device = device, start = start, seconds = events.clock() - start,
    bytes = nbytes }
end

--- Whether v is storage this module holds: a runtime Buffer or a device module's buffer.
function M.is_storage(v)
  local mt = getmetatable(v)
  if type(v) ~= "userdata" or type(mt) ~= "table" then return false end
  if mt.__name == "tcl.Buffer" then return true end
  for _, d in pairs(DEVICE_MEMORY) do
    if mt.__name == d.metatable then return true end
  end
  return false
end

local function as_dtype(dtype, fn)
  local ok, dt = pcall(core.dtype, dtype)
  if not ok then error(string.format("buffers.%s: unknown dtype %s", fn, tostring(dtype)), 3) end
  return dt
end

--- A new BUFFER node of numel elements of dtype on device (default M.device), and its buffer
-- id (the node's arg[1]); the memory is allocated on first use.
function M.new(dtype, numel, device)
  local dt = as_dtype(dtype, "new")
  if math.type(numel) ~= "integer" or numel < 0 then
    error("buffers.new: numel must be a non-negative integer, got " .. tostring(numel), 2)
  end
  device = device or M.device
  if type(device) ~= "string" then error("buffers.new: device must be a string, got " .. type(device), 2) end
  local id = core.fresh_id()
  local entry = { dtype = dt, numel = numel, device = device }
  registry[id] = entry
  local node = core.uop("BUFFER", dt, nil, { id, numel, device })
  entry_by_node[node], node_by_id[id] = entry, node
  return node, id
end

--- A new BUFFER node for an existing runtime Buffer (a view of a mapped file, bytes already
-- written): its dtype, numel and device are the Buffer's, and this registry holds it as any
-- other (freed by collect once the node is dead).
function M.from_storage(storage)
  if not M.is_storage(storage) then
    error("buffers.from_storage: expected a runtime Buffer or a device buffer, got " .. type(storage), 2)
  end
  local id = core.fresh_id()
  local entry = { dtype = storage.dtype, numel = storage.numel, device = storage.device, storage = storage }
  registry[id] = entry
  local node = core.uop("BUFFER", storage.dtype, nil, { id, storage.numel, storage.device })
  entry_by_node[node], node_by_id[id] = entry, node
  return node
end

--- nil when a buffer of numel elements of dtype fits on device (or the runtime does not know
-- the device: allocating says so), else the device's limit in bytes.
function M.too_large(dtype, numel, device)
  local max = load_runtime().max_buffer_bytes(device or M.device)
  local itemsize = as_dtype(dtype, "too_large").itemsize
  if max and numel > max // itemsize then return max end
  return nil
end

--- The BUFFER node buf viewed in shape shp: RESHAPE(buf, shp), or buf itself when shp is
-- {numel} (the inverse of viewed).
function M.as_view(buf, shp)
  if #shp == 1 and shp[1] == buf.arg[2] then return buf end
  return core.uop("RESHAPE", buf.dtype, { buf }, shp)
end

--- The BUFFER node that node views (node itself, or RESHAPEs of it), or nil: a tensor whose
-- node this is holds its values in memory.
function M.viewed(node)
  while node.op == "RESHAPE" do node = node.src[1] end
  if node.op == "BUFFER" then return node end
  return nil
end

--- Whether node is a BUFFER node this module made (and has not freed).
function M.is_buffer(node)
  if entry_by_node[node] then return true end
  if node.op ~= "BUFFER" then return false end
  local arg = node.arg
  return type(arg) == "table" and registry[arg[1]] ~= nil
end

local function entry_of(node, fn)
  local known = entry_by_node[node]
  if known then return known end
  if type(node) ~= "userdata" or node.op ~= "BUFFER" then
    error(string.format("buffers.%s: expected a BUFFER node, got %s", fn,
      type(node) == "userdata" and node.op or type(node)), 3)
  end
  local arg = node.arg
  local entry = type(arg) == "table" and registry[arg[1]]
  if not entry then
    error(string.format("buffers.%s: buffer %s is not registered (not made by buffers.new, or freed)", fn,
      tostring(type(arg) == "table" and arg[1] or arg)), 3)
  end
  entry_by_node[node] = entry
  return entry
end

--- Whether a BUFFER node's memory is allocated already (a realize that uses it allocates none).
function M.allocated(node)
  return entry_of(node, "allocated").storage ~= nil
end

--- The runtime Buffer behind a BUFFER node (allocated now if it was not yet, filled as
-- M.allocate's fill says: zeros when nil).
function M.get(node, fill)
  local entry = entry_of(node, "get")
  if not entry.storage then
    local ok, storage = pcall(M.allocate, entry.dtype, entry.numel, entry.device, fill)
    -- "out of memory ...", "CUDA: cannot load the NVIDIA driver library ...", "Metal: only available on macOS"
    if not ok then
      error((tostring(storage):gsub("^runtime%.buffer: ", ""):gsub("^cuda%.buffer: ", ""):gsub("^metal%.buffer: ", "")),
        0)
    end
    entry.storage = storage
  end
  return entry.storage
end

--- A new BUFFER node holding the values of a flat Lua list (device as in buffers.new).
function M.from_list(dtype, list, device)
  if type(list) ~= "table" then error("buffers.from_list: expected a list of values, got " .. type(list), 2) end
  local node = M.new(dtype, #list, device)
  local storage = M.get(node)
  local start = events.on() and events.clock()
  storage:write(list)
  if start then M.copied("write from host", storage.device, start, storage.nbytes) end
  return node
end

--- Storage (not a BUFFER node) of int32 values from a Lua list, on device: the values of the
-- variables a kernel reads, passed as its last argument (tcl.schedule.run).
function M.host_ints(list, device)
  local storage = M.allocate(core.dtype "int32", #list, device, "none")
  storage:write(list)
  return storage
end

--- The bytes of storage `source` followed by zeros up to the size of storage `into` (larger).
function M.padded_bytes(source, into)
  local bytes = source:read_bytes()
  return bytes .. string.rep("\0", into.nbytes - #bytes)
end

--- While set, called as read_hook(node) before a buffer's contents go to the host (tcl.jit
-- refuses host reads while it captures a plan).
M.read_hook = nil

--- The contents of a BUFFER node as a flat Lua list.
function M.read(node)
  entry_of(node, "read")
  if M.read_hook then M.read_hook(node) end
  local storage = M.get(node)
  if not events.on() then return storage:read() end
  local start = events.clock()
  local list = storage:read()
  M.copied("read to host", storage.device, start, storage.nbytes)
  return list
end

--- Frees the memory of every registered buffer whose BUFFER node is dead; returns how many.
-- Call collectgarbage() first to have unreferenced node userdata collected.
function M.collect()
  local freed = 0
  local find = core.find
  for id, entry in pairs(registry) do
    if node_by_id[id] == nil and not find("BUFFER", entry.dtype, nil, { id, entry.numel, entry.device }) then
      registry[id] = nil -- the runtime Buffer's finalizer frees the memory
      freed = freed + 1
    end
  end
  return freed
end

--- Counts for specs and DEBUG: registered buffers, and those with memory allocated.
function M.stats()
  local registered, allocated, bytes = 0, 0, 0
  for _, entry in pairs(registry) do
    registered = registered + 1
    if entry.storage then
      allocated = allocated + 1
      bytes = bytes + entry.numel * entry.dtype.itemsize
    end
  end
  return { registered = registered, allocated = allocated, bytes = bytes }
end

return M
