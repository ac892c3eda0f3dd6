-- tcl.api.embed — the Lua half of the embedding API (include/tclc.h, src/api/tensors.c):
-- tensors over host memory, and results read into host memory. Layer: lua/tcl/api. The C side
-- checks every argument and makes the runtime Buffers; this module turns them into tensors
-- and computes results into them.
local class = require "tcl.api.class"
local tensor = require "tcl.api.tensor"
local buffers = require "tcl.schedule.buffers"
local bytes = require "tcl.api.bytes"

local M = {}

local function fail(fmt, ...) error(string.format(fmt, ...), 0) end

local function shape_text(list)
  local parts = {}
  for i, v in ipairs(list) do parts[i] = tostring(v) end
  return "[" .. table.concat(parts, ", ") .. "]"
end

--- The tensor of the given shape over storage (a flat runtime Buffer), reading element
-- (i1, ..., in) (0-based) at sum(ik * strides[k]) (strides nil: contiguous). The view is built
-- from movement ops: the dims with a stride (and size > 1), largest stride first, must each
-- step over all the elements the next one covers (padded rows, transposes, channel-last and
-- other nested layouts do; overlapping ones do not); stride-0 dims are expands.
function M.wrap(storage, shape, strides)
  local view = M.host_view(storage, shape, strides)
  -- a GPU default device: the tensor is the host memory's copy there (made at the next realize)
  if view.device ~= buffers.device then return view:to(buffers.device) end
  return view
end

--- The view of M.wrap on the host memory itself (its device: storage's).
function M.host_view(storage, shape, strides)
  local flat = class.wrap(buffers.from_storage(storage), { storage.numel }, storage.device)
  local numel = 1
  for _, n in ipairs(shape) do numel = numel * n end
  if not strides or numel == 0 then
    if numel == 0 then flat = flat:narrow(1, 1, 0) end
    return flat:reshape(shape)
  end
  -- the dims that move through memory, by stride (largest first; ties keep dim order)
  local moving = {}
  for d, n in ipairs(shape) do
    if n > 1 and strides[d] > 0 then moving[#moving + 1] = d end
  end
  table.sort(moving, function(a, b)
    if strides[a] ~= strides[b] then return strides[a] > strides[b] end
    return a < b
  end)
  for k = 1, #moving - 1 do
    local outer, inner = moving[k], moving[k + 1]
    if strides[outer] < strides[inner] * shape[inner] then
      fail("strides %s of shape %s overlap or interleave (dim %d's stride %d is less than the %d elements dim %d "
        .. "covers): not a view tcl can express", shape_text(strides), shape_text(shape), outer, strides[outer],
        strides[inner] * shape[inner], inner)
    end
  end
  local t
  if #moving == 0 then
    t = flat:narrow(1, 1, 1)
  else
    -- flat -> [n1, s1]; keep n2 * s2 of each row and split it into [n2, s2]; ...; keep 1 of sk
    local first = moving[1]
    local full = shape[first] * strides[first]
    if full > storage.numel then t = flat:pad({ { 0, full - storage.numel } })
    elseif full < storage.numel then t = flat:narrow(1, 1, full)
    else t = flat end
    local sizes = { shape[first], strides[first] }
    t = t:reshape(sizes)
    for k = 2, #moving do
      local d = moving[k]
      t = t:narrow(k, 1, shape[d] * strides[d])
      sizes[k], sizes[k + 1] = shape[d], strides[d]
      t = t:reshape(sizes)
    end
    t = t:narrow(#moving + 1, 1, 1)
  end
  -- [n_moving..., 1] -> the moving dims in dim order, then every dim (1s where broadcast)
  local kept = {}
  for k, d in ipairs(moving) do kept[k] = { dim = d, axis = k } end
  table.sort(kept, function(a, b) return a.dim < b.dim end)
  local order = {}
  for k, entry in ipairs(kept) do order[k] = entry.axis end
  t = t:reshape(table.move(t.shape, 1, #moving, 1, {}))
  if #order > 1 then t = t:permute(order) end
  local with_ones = {}
  local is_moving = {}
  for _, d in ipairs(moving) do is_moving[d] = true end
  for d, n in ipairs(shape) do with_ones[d] = is_moving[d] and n or 1 end
  t = t:reshape(with_ones)
  return t:expand(shape)
end

--- A tensor holding a copy of bytes (contiguous, row-major) of dtype and shape.
function M.copy(data, dtype, shape)
  return bytes.from_bytes(data, dtype, shape)
end

--- The device host memory is wrapped as: the state's default device when it keeps its
-- storage in host memory (CPU, EMU), else the CPU (the tensors M.wrap makes then copy it to the
-- GPU, and M.read_into copies results back through it).
function M.device()
  if buffers.in_device_memory(buffers.device) then return "CPU" end
  return buffers.device
end

--- Whether v is a tcl Tensor (for the C side, deciding what a result is).
function M.is_tensor(v) return class.is_tensor(v) end

--- dtype name, shape list of a tensor.
function M.info(t) return t.dtype.name, t.shape end

local function contiguous_storage(t)
  local node = buffers.viewed(t.uop)
  if not node then return nil end
  local storage = buffers.get(node)
  if storage.numel ~= tensor.numel(t) then return nil end
  return storage
end

--- Computes tensors ts[i] into outs[i]: a runtime Buffer over the host's destination, or false
-- when the destination cannot be used in place (unaligned). One schedule computes them all.
-- Returns, for each false, the storage holding the values (contiguous) for the C side to copy
-- out; nil for the others.
function M.read_into(ts, outs)
  local targets, pending = {}, {}
  for i, t in ipairs(ts) do
    if outs[i] and not contiguous_storage(t) then
      -- the kernel that computes t stores straight into the host's memory
      local host = outs[i].device
      local target = class.wrap(buffers.from_storage(outs[i]), { outs[i].numel }, host):reshape(t.shape)
      targets[i] = target:assign(t.device == host and t or t:to(host))
      pending[#pending + 1] = targets[i]
    elseif not outs[i] then
      pending[#pending + 1] = t
    end
  end
  if #pending > 0 then
    local ok, err = pcall(tensor.realize_all, table.unpack(pending))
    if not ok then
      -- cancel the assignments: the host's memory must not be written by a later realize
      for _, target in pairs(targets) do
        if target.uop.op == "ASSIGN" then class.replace_uop(target, target.uop.src[1]) end
      end
      error(err, 0)
    end
  end
  local sources = {}
  for i, t in ipairs(ts) do
    if outs[i] and not targets[i] then
      buffers.copy(outs[i], contiguous_storage(t)) -- stored before (a jitted result, say): one copy
    elseif not outs[i] then
      -- the C side copies out of host memory: a GPU's result comes back to the host first
      local on_host = t.device == M.device() and t or t:to(M.device())
      sources[i] = contiguous_storage(on_host) or contiguous_storage(on_host:contiguous():realize())
    end
  end
  return sources
end

return M
