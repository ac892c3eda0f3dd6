-- tcl.schedule.buffers — realized storage of the tensor graph. Layer: Lua scheduler, over the runtime.
--
-- A realized tensor is a BUFFER node `uop("BUFFER", dtype, nil, {id, numel, device})`
-- (src/core/ENCODINGS.md); its memory is a runtime Buffer (`require "tcl.runtime"`) that
-- this module keeps in a registry keyed by the id. The node never points at the memory
-- (nodes are immutable, hash-consed values), so the registry is the one link between them.
--
-- Storage is a runtime Buffer (host memory: EMU, CPU) or, on device "CUDA", a CUDA buffer of
-- tcl.cuda (GPU memory) with the same Lua surface (.numel .dtype .nbytes .itemsize .device,
-- read/write, read_bytes/write_bytes, copy_from); M.allocate makes either and M.copy copies
-- between any two.
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

local M = {}

--- The default device named in BUFFER args: DEVICE's, else CPU (the Tensor API names one
-- in every call; this serves callers that do not).
M.device = env.DEVICE and env.DEVICE:upper() or "CPU"

-- buffer id -> { dtype =, numel =, storage = runtime Buffer or nil }. Ids come from the core's
-- counter (core.fresh_id), not from this module: a node is identified by its content, so an id
-- used again while an older BUFFER node with it lives (this module loaded a second time, as
-- busted's insulate does per spec file) would be that node.
local registry = {}
local runtime -- loaded on first allocation, so building schedules never needs it

local function load_runtime()
  if not runtime then
    local ok, mod = pcall(require, "tcl.runtime")
    if not ok then error("buffers: the runtime (tcl.runtime) is not available: " .. tostring(mod), 0) end
    runtime = mod
  end
  return runtime
end

local cuda -- tcl.cuda, loaded when a CUDA buffer is first needed

local function load_cuda()
  if not cuda then
    local ok, mod = pcall(require, "tcl.cuda")
    if not ok then error("buffers: the CUDA device (tcl.cuda) is not in this build: " .. tostring(mod), 0) end
    cuda = mod
  end
  return cuda
end

--- New zero-filled storage of numel elements of dtype on device: a CUDA buffer for "CUDA" (its
-- first use opens the GPU, or fails saying what is missing), else a runtime Buffer.
function M.allocate(dtype, numel, device)
  local make = device == "CUDA" and load_cuda().buffer or load_runtime().buffer
  -- called through pcall, so the message is the C function's alone (no position of this file)
  local ok, storage = pcall(make, dtype, numel, device)
  if not ok then error(storage, 0) end
  return storage
end

--- Copies storage src into dst (same dtype and numel) in any direction between host and
-- device memory; returns dst.
function M.copy(dst, src)
  if src.device == "CUDA" and dst.device ~= "CUDA" then
    src:copy_to(dst) -- a host Buffer cannot read device memory: the device buffer writes it
  else
    dst:copy_from(src)
  end
  return dst
end

--- Whether v is storage this module holds: a runtime Buffer or a CUDA buffer.
function M.is_storage(v)
  local mt = getmetatable(v)
  return type(v) == "userdata" and type(mt) == "table" and (mt.__name == "tcl.Buffer" or mt.__name == "tcl.CudaBuffer")
end

local function as_dtype(dtype, fn)
  local ok, dt = pcall(core.dtype, dtype)
  if not ok then error(string.format("buffers.%s: unknown dtype %s", fn, tostring(dtype)), 3) end
  return dt
end

--- A new BUFFER node of numel elements of dtype on device (default M.device); the memory
-- is allocated on first use.
function M.new(dtype, numel, device)
  local dt = as_dtype(dtype, "new")
  if math.type(numel) ~= "integer" or numel < 0 then
    error("buffers.new: numel must be a non-negative integer, got " .. tostring(numel), 2)
  end
  device = device or M.device
  if type(device) ~= "string" then error("buffers.new: device must be a string, got " .. type(device), 2) end
  local id = core.fresh_id()
  registry[id] = { dtype = dt, numel = numel, device = device }
  return core.uop("BUFFER", dt, nil, { id, numel, device })
end

--- A new BUFFER node for an existing runtime Buffer (a view of a mapped file, bytes already
-- written): its dtype, numel and device are the Buffer's, and this registry holds it as any
-- other (freed by collect once the node is dead).
function M.from_storage(storage)
  if not M.is_storage(storage) then
    error("buffers.from_storage: expected a runtime Buffer or a CUDA buffer, got " .. type(storage), 2)
  end
  local id = core.fresh_id()
  registry[id] = { dtype = storage.dtype, numel = storage.numel, device = storage.device, storage = storage }
  return core.uop("BUFFER", storage.dtype, nil, { id, storage.numel, storage.device })
end

--- nil when a buffer of numel elements of dtype fits on device (or the runtime does not know
-- the device: allocating says so), else the device's limit in bytes.
function M.too_large(dtype, numel, device)
  local max = load_runtime().max_buffer_bytes(device or M.device)
  local itemsize = as_dtype(dtype, "too_large").itemsize
  if max and numel > max // itemsize then return max end
  return nil
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
  if node.op ~= "BUFFER" then return false end
  local arg = node.arg
  return type(arg) == "table" and registry[arg[1]] ~= nil
end

local function entry_of(node, fn)
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
  return entry
end

--- The runtime Buffer behind a BUFFER node (allocated now if it was not yet).
function M.get(node)
  local entry = entry_of(node, "get")
  if not entry.storage then
    local ok, storage = pcall(M.allocate, entry.dtype, entry.numel, entry.device)
    -- "out of memory ...", "CUDA: cannot load the NVIDIA driver library ..."
    if not ok then error((tostring(storage):gsub("^runtime%.buffer: ", ""):gsub("^cuda%.buffer: ", "")), 0) end
    entry.storage = storage
  end
  return entry.storage
end

--- A new BUFFER node holding the values of a flat Lua list (device as in buffers.new).
function M.from_list(dtype, list, device)
  if type(list) ~= "table" then error("buffers.from_list: expected a list of values, got " .. type(list), 2) end
  local node = M.new(dtype, #list, device)
  M.get(node):write(list)
  return node
end

--- While set, called as read_hook(node) before a buffer's contents go to the host (tcl.jit
-- refuses host reads while it captures a plan).
M.read_hook = nil

--- The contents of a BUFFER node as a flat Lua list.
function M.read(node)
  entry_of(node, "read")
  if M.read_hook then M.read_hook(node) end
  return M.get(node):read()
end

--- Frees the memory of every registered buffer whose BUFFER node is dead; returns how many.
-- Call collectgarbage() first to have unreferenced node userdata collected.
function M.collect()
  local freed = 0
  local find = core.find
  for id, entry in pairs(registry) do
    if not find("BUFFER", entry.dtype, nil, { id, entry.numel, entry.device }) then
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
