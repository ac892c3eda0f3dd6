-- tcl.api.index_checks — range checks of index tensors that never wait for the device: each
-- device has an error flag (a realized int32 buffer of one element). A checking op (one_hot and
-- what is built on it: cross_entropy, sparse_categorical_crossentropy, nn.Embedding) folds
-- "any index out of range ? check id : 0" into the flag with a pending assignment, which runs
-- with the next realize on that device (as Tensor.assign's do). The next read to the host
-- (data, tolist, item, print, to_bytes, tcl.synchronize) reads the flag, resets it and raises
-- the error of the check that failed. Layer: lua/tcl/api.
--
-- A plan (tcl.jit) records the flag's kernels like any other, and a replay re-arms the flag, so
-- replays are checked too. The flag's graph starts from integer indices: gradients never see it.
local check = require "tcl.api.check"
local class = require "tcl.api.class"
local core = require "tcl.core"
local buffers = require "tcl.schedule.buffers"
local devices = require "tcl.devices"

local M = {}

local int32 = core.dtypes.int32

-- check id -> error { fn =, text = }, and "fn: text" -> id: one id per distinct message
-- (function and range), so a training loop does not grow the registry
local messages, ids = {}, {}

-- device -> { buffer = the flag's BUFFER node, stored = a tensor over it, codes = the flag and
-- the pending checks' codes (flat lazy int32 tensors: id where an index is outside, else 0) or
-- nil, pending = the pending ASSIGN's tensor or nil, armed = whether a flag kernel ran since the
-- flag was last read }
local flags = {}

-- storage -> device, for the flag buffers (a plan's step that writes one re-arms its device)
local flag_storages = setmetatable({}, { __mode = "k" })

--- true: no checks are made (tcl.export's capture; bench/index_check_bench.lua measures their
-- cost with it).
M.disabled = false

--- The assignments tcl.api.tensor runs with the next realize on their device (its table:
-- tensor -> true), set by tcl.api.tensor when it loads.
M.pending_assigns = nil

local function flag_of(device)
  local flag = flags[device]
  if flag == nil then
    local buffer = buffers.new(int32, 1, device) -- zero-filled when first used
    flag = { buffer = buffer, stored = class.wrap(buffer, { 1 }, device), armed = false }
    flags[device] = flag
  end
  return flag
end

-- A pending flag kernel that has run (tcl.api.tensor replaced its node by the result) arms the flag.
local function settle(flag)
  if flag.pending and flag.pending.uop.op ~= "ASSIGN" then
    flag.pending, flag.codes, flag.armed = nil, nil, true
  end
end

local function id_of(fn, text)
  local key = fn .. ": " .. text
  local id = ids[key]
  if id == nil then
    id = #messages + 1
    messages[id], ids[key] = { fn = fn, text = text }, id
  end
  return id
end

--- Checks lazily that the integer tensor x holds 1-based indices in 1..n (entries equal to
-- `ignored`, when given, are skipped); fn names the user-facing function, `what` the indices
-- ("class indices"). A failure is reported by the next read to the host on x's device.
function M.check_range(fn, x, n, what, ignored)
  if M.disabled then return end
  -- an index above n needs n below the dtype's largest value (2^32 classes of int32 indices:
  -- every int32 is at most n, and n itself would wrap as an int32 constant)
  local outside = x:lt(1)
  if n < x.uop.dtype.max then outside = outside:logical_or(x:gt(n)) end
  if ignored ~= nil then outside = outside:logical_and(x:ne(ignored)) end
  M.flag_if(fn, outside, string.format("%s are 1-based: expected 1..%d, and some were outside (indices from "
    .. "PyTorch or numpy are 0-based: add 1)", what, n))
end

--- Reports "fn: text" at the next read to the host on bad's device when any element of the bool
-- tensor bad is true (the same pending flag as check_range; for conditions on values that only
-- the device knows, such as multinomial's weights).
function M.flag_if(fn, bad, text)
  if M.disabled then return end
  local numel = check.numel(bad._shape)
  if numel == 0 then return end
  local id = id_of(fn, text)
  local flag = flag_of(bad.device)
  settle(flag)
  flag.codes = flag.codes or { flag.stored }
  flag.codes[#flag.codes + 1] = bad:where(id, 0):cast(int32):reshape(numel)
  -- one reduction over the flag and the codes: the flag is read in the reduction's loop, which
  -- a GPU's threads finish before one of them stores the result (a maximum of the flag and a
  -- reduced code would have every thread read the element one thread writes)
  local value = class.Tensor.cat(flag.codes):max():reshape(1)
  if flag.pending then M.pending_assigns[flag.pending] = nil end
  -- a fresh node each time: tcl.schedule.assign never runs an ASSIGN node twice
  local assign = core.uop("ASSIGN", int32, { flag.buffer, value.uop }, nil, { "index_check", core.fresh_id() })
  flag.pending = class.wrap(assign, { 1 }, bad.device)
  M.pending_assigns[flag.pending] = true
end

--- Runs every device's pending checks now (tcl.jit, before capturing: a plan must record only
-- its own checks).
function M.run_pending()
  for _, flag in pairs(flags) do
    settle(flag)
    if flag.pending then
      class.Tensor.realize_all(flag.pending)
      settle(flag)
    end
  end
end

--- Runs device's pending checks (when no realize has yet) and reads its flag if a check ran
-- since the last read: raises the failed check's error (after resetting the flag), else returns.
function M.report(device)
  local flag = flags[device]
  if flag == nil then return end
  settle(flag)
  if flag.pending then
    class.Tensor.realize_all(flag.pending)
    settle(flag)
  end
  if not flag.armed then return end
  flag.armed = false
  local code = buffers.read(flag.buffer)[1]
  if code == 0 then return end
  buffers.copy(buffers.get(flag.buffer), buffers.allocate(int32, 1, "CPU"))
  local failed = messages[code] or { fn = "index check", text = "code " .. tostring(code) .. " failed" }
  check.fail(failed.fn, "%s", failed.text) -- at the user's read
end

--- tcl.synchronize([device]): wait(device) (the GPUs' queued kernels), then reports the index
-- checks of device, or of every device when nil.
function M.synchronize(device, wait)
  wait(device)
  for _, d in ipairs(device and { devices.canonical(device) } or M.devices()) do M.report(d) end
end

--- The device whose flag storage is, or nil (tcl.jit: a plan's step writing it re-arms it).
function M.flag_device(storage)
  for device, flag in pairs(flags) do
    if flag_storages[storage] == nil and buffers.is_buffer(flag.buffer) and buffers.get(flag.buffer) == storage then
      flag_storages[storage] = device
    end
  end
  return flag_storages[storage]
end

--- Marks device's flag as written (a plan's replay ran its check kernel).
function M.arm(device)
  flag_of(device).armed = true
end

--- Every device with a flag, sorted (tcl.synchronize reports them all).
function M.devices()
  local list = {}
  for device in pairs(flags) do list[#list + 1] = device end
  table.sort(list)
  return list
end

return M
