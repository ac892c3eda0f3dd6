-- tcl.distributed — collectives between the processes of a job (data-parallel training): rank,
-- world size, all_reduce, broadcast, all_gather, barrier. Layer: lua/tcl/distributed, over the
-- Tensor API and the backends (tcl.distributed.mpi for host tensors; tcl.distributed.nccl for
-- CUDA tensors, where present).
--
--   -- mpirun -np 2 tcl train.lua
--   local dist = tcl.distributed
--   dist.init{ timeout = 60 }                 -- optional: the first call below does it
--   print(dist.rank(), dist.world_size())     -- 1-based: rank 1 .. world_size
--   local g = dist.all_reduce(grad, "mean")   -- a new realized tensor; grad is unchanged
--   dist.all_reduce(acc, "sum", { out = acc }) -- in place, into acc's own buffer (as torch's)
--   local work = dist.all_reduce(g, "mean", { out = avg, async_op = true })  -- started, not waited
--   ...                                       -- other work; work:is_completed() drives it on
--   work:wait()                               -- avg holds the mean
--   local w = dist.broadcast(w, 1)            -- rank 1's values everywhere
--   local all = dist.all_gather(x)            -- shape {world_size, ...x's shape}, in rank order
--   dist.barrier()
--
-- Ranks are 1-based like every index of tcl's API (MPI's rank r is tcl's r + 1). Without a
-- launcher the process is a world of one: rank 1 of 1, and the collectives are identities (no
-- MPI needed). Every collective waits at most `timeout` seconds (TCL_DIST_TIMEOUT, default
-- 300) for the other ranks, then prints "all_reduce: no answer from the other ranks within N s
-- (a rank may have failed)" and ends the job (MPI_Abort), so nothing hangs. Every rank must
-- call the same collectives in the same order with tensors of the same shape and dtype.
local env = require "tcl.env"
local class = require "tcl.api.class"
local check = require "tcl.api.check"
local buffers = require "tcl.schedule.buffers"
local mpi = require "tcl.distributed.mpi"

local M = {}

local BACKENDS = { mpi = true, nccl = true }
local OPS = { sum = true, mean = true, max = true, min = true }
local REDUCIBLE = { float32 = true, float64 = true, int32 = true, int64 = true }

-- nil until init: { backend = "mpi" | "nccl" | nil, rank0 =, size =, launched = }
local world

-- "fn: message", raised at the caller of the public function.
local function fail(fn, fmt, ...)
  error(fn .. ": " .. string.format(fmt, ...), 3)
end

local function type_name(v)
  local mt = getmetatable(v)
  if type(v) == "table" and type(mt) == "table" and mt.__name then return mt.__name end
  return type(v)
end

--- Joins the job (idempotent: later calls may change the timeout). opts.backend: "mpi", "nccl"
-- or nil (MPI for host tensors, NCCL for CUDA ones); opts.timeout: seconds > 0.
function M.init(opts)
  if opts ~= nil and type(opts) ~= "table" then fail("init", "options must be a table, got %s", type_name(opts)) end
  opts = opts or {}
  for k in pairs(opts) do
    if k ~= "backend" and k ~= "timeout" then fail("init", "unknown option '%s'", tostring(k)) end
  end
  if opts.backend ~= nil and not BACKENDS[opts.backend] then
    fail("init", "backend must be 'mpi', 'nccl' or nil, got %s", tostring(opts.backend))
  end
  local timeout = opts.timeout
  if timeout ~= nil and (type(timeout) ~= "number" or timeout ~= timeout or timeout <= 0
      or timeout == math.huge) then
    fail("init", "timeout must be a number of seconds > 0, got %s", tostring(timeout))
  end
  if world then
    if opts.backend ~= nil then world.backend = opts.backend end
    if timeout and world.launched then mpi.set_timeout(timeout) end
    if timeout then world.timeout = timeout end
    return
  end
  local launched = mpi.launched()
  local next_world = { backend = opts.backend, launched = launched, rank0 = 0, size = 1, timeout = timeout }
  if launched then
    -- every backend needs MPI: NCCL's bootstrap sends its unique id through it
    local ok, err = pcall(mpi.init, { timeout = timeout or env.DIST_TIMEOUT })
    if not ok then fail("init", "%s", tostring(err)) end
    next_world.rank0, next_world.size = mpi.rank0(), mpi.size()
  end
  world = next_world
end

local function joined()
  if not world then M.init() end
  return world
end

--- This process's rank: 1 .. world_size().
function M.rank() return joined().rank0 + 1 end
--- The number of processes in the job (1 without a launcher).
function M.world_size() return joined().size end
--- Whether init has run (explicitly or through a first collective).
function M.is_initialized() return world ~= nil end

--- The backend that carries collectives of tensors on device: "mpi" for host memory (CPU,
-- EMU), "nccl" for CUDA unless init chose "mpi" (then through host memory).
function M.backend_of(device)
  if type(device) ~= "string" then fail("backend_of", "device must be a string, got %s", type_name(device)) end
  local w = joined()
  if device:upper():match("^CUDA") and w.backend ~= "mpi" then return "nccl" end
  if w.backend == "nccl" then return "nccl" end
  return "mpi"
end

-- The backend module that carries a collective of tensors on device between the ranks (nil in a
-- world of one: nothing to carry). Both take raw storage: MPI host Buffers, NCCL CUDA buffers.
local function backend_for(fn, device)
  if joined().size == 1 then return nil end
  if M.backend_of(device) == "mpi" then return mpi end
  local ok, nccl = pcall(require, "tcl.distributed.nccl")
  if not ok then error(fn .. ": the NCCL backend (tcl.distributed.nccl) is not available: " .. tostring(nccl), 3) end
  if world.timeout then nccl.set_timeout(world.timeout) end
  return nccl
end

local function check_tensor(fn, t)
  if not class.is_tensor(t) then error(fn .. ": expected a tensor, got " .. type_name(t), 3) end
end

-- The storage holding t's values (realizes t): on t's device, or a copy on the CPU when the
-- backend is MPI and t lives in a GPU's memory; and whether it was staged so. The storage is
-- never written (it may be shared).
local function storage_of(fn, t)
  local device = t.device
  local source = t
  local staged = buffers.in_device_memory(device) and M.backend_of(device) == "mpi"
  if staged then source = t:to("CPU") end
  local node = buffers.viewed(source.uop)
  if node == nil then
    source:realize()
    node = buffers.viewed(source.uop)
  end
  if node == nil then error(fn .. ": realize gave a " .. source.uop.op .. " node, not a buffer", 3) end
  local storage = buffers.get(node)
  local numel = 1
  for _, n in ipairs(source._shape) do numel = numel * n end
  if storage.numel ~= numel then
    error(string.format("%s: the tensor's buffer holds %d elements, its shape %d", fn, storage.numel, numel), 3)
  end
  return storage, staged
end

-- The result tensor over new storage `out` (flat), of `shape`, back on device.
local function wrap(out, shape, device, staged)
  -- the BUFFER node viewed in shape directly: the Tensor API's reshape would check again what
  -- is known to fit (a tenth of a small collective's time)
  local t = class.wrap(buffers.as_view(buffers.from_storage(out), shape), shape, out.device)
  if staged then t = t:to(device):realize() end
  return t
end

local function copy_of(storage)
  local out = buffers.allocate(storage.dtype, storage.numel, storage.device, "none")
  return buffers.copy(out, storage)
end

local function same_shape(a, b)
  if #a ~= #b then return false end
  for i = 1, #a do
    if a[i] ~= b[i] then return false end
  end
  return true
end

-- The options of a collective: nil or { out = tensor, async_op = boolean }; the out tensor or nil,
-- and whether the caller wants a Work instead of the result.
local function collective_options(fn, opts)
  if opts == nil then return nil, false end
  if type(opts) ~= "table" or class.is_tensor(opts) then
    error(string.format("%s: options must be a table such as { out = t }, got %s", fn, type_name(opts)), 3)
  end
  for k in pairs(opts) do
    if k ~= "out" and k ~= "async_op" then
      error(string.format("%s: unknown option '%s' (the options are out and async_op)", fn, tostring(k)), 3)
    end
  end
  if opts.async_op ~= nil and type(opts.async_op) ~= "boolean" then
    error(string.format("%s: async_op must be a boolean, got %s", fn, type_name(opts.async_op)), 3)
  end
  return opts.out, opts.async_op == true
end

-- A collective started with async_op = true: work:wait() returns its result once it is done;
-- work:is_completed() drives it on and says whether it is.
local Work = {}
Work.__index = Work
Work.__name = "tcl.distributed.Work"

-- A Work over the backend's started collective (nil: already done); make() makes the result
-- once it is.
local function new_work(pending, make)
  return setmetatable({ pending = pending, make = make }, Work)
end

-- A Work whose collective is already done.
local function done_work(value) return new_work(nil, function() return value end) end

--- Whether the collective has completed (drives it on: MPI moves data only inside its calls).
function Work:is_completed()
  if self.pending and self.pending:test() then self.pending = nil end
  return self.pending == nil
end

--- Waits for the collective (at most the timeout, as every collective) and returns its result:
-- the tensor the blocking call would have returned.
function Work:wait()
  if self.pending then
    self.pending:wait()
    self.pending = nil
  end
  if self.make then
    self.result = self.make()
    self.make = nil
  end
  return self.result
end

-- The storage a collective writes its result into, in place: out's own buffer, which must hold
-- out's values in order (a tensor realized into a buffer, or a reshape of one: not a lazy
-- result, and not a view such as a transpose or a slice, whose realize would make a copy and
-- leave the tensor the caller meant untouched), of `shape`, t's dtype, on t's device.
local function out_storage(fn, out, t, shape)
  if not class.is_tensor(out) then error(string.format("%s: out must be a tensor, got %s", fn, type_name(out)), 3) end
  if out.uop.dtype.name ~= t.uop.dtype.name then
    error(string.format("%s: out has dtype %s, the result %s", fn, out.uop.dtype.name, t.uop.dtype.name), 3)
  end
  if not same_shape(out._shape, shape) then
    error(string.format("%s: out has shape %s, the result %s", fn, check.shape_str(out._shape),
      check.shape_str(shape)), 3)
  end
  if out.device ~= t.device then
    error(string.format("%s: out is on %s, the tensor on %s", fn, out.device, t.device), 3)
  end
  -- a pending assignment to out (an ASSIGN node over its buffer) runs first
  if out.uop.op == "ASSIGN" then out:realize() end
  local node = buffers.viewed(out.uop)
  if node == nil or not buffers.is_buffer(node) then
    error(string.format("%s: out must hold a buffer of its own, written in place: a realized tensor, not a lazy "
      .. "result or a view such as a transpose or a slice (its node is %s)", fn, out.uop.op), 3)
  end
  local storage = buffers.get(node)
  if storage.numel ~= out:numel() then
    error(string.format("%s: out's buffer holds %d elements, its shape %d", fn, storage.numel, out:numel()), 3)
  end
  return storage
end

-- The storage a collective that works in place writes into: out's buffer (into) holding
-- storage's values, or a copy of storage when there is no out to write into (nil, or a GPU
-- tensor's staged through host memory).
local function in_place_target(into, storage, staged)
  if not into or staged then return copy_of(storage) end
  if into ~= storage then buffers.copy(into, storage) end
  return into
end

-- What a collective returns once its result is in `target`: out itself when it was written in
-- place, else a tensor over target (of shape, back on device); with an out that could not be
-- written in place (staged), the result assigned into it.
local function result_of(target, into, out, shape, device, staged)
  if out and target == into then return out end
  local result = wrap(target, shape, device, staged)
  if not out then return result end
  out:assign(result)
  out:realize()
  return out
end

--- The element-wise reduction of t over every rank, as a new realized tensor on t's device:
-- op "sum" (default), "mean" (integers: the sum divided by the world size, rounded toward
-- zero), "max" or "min". dtype float32, float64, int32 or int64. opts.out: a realized tensor
-- of t's shape, dtype and device that receives the result in its own buffer (in place; it may
-- be t itself), returned instead of a new tensor: no new storage per call. opts.async_op =
-- true: returns a Work at once (the reduction started, not waited for); work:wait() returns the
-- result, work:is_completed() says whether it is done. Until then t and out must not change.
-- MPI moves the data only inside its calls, so is_completed() between other work drives it on.
function M.all_reduce(t, op, opts)
  check_tensor("all_reduce", t)
  op = op == nil and "sum" or op
  if not OPS[op] then fail("all_reduce", "op must be 'sum', 'mean', 'max' or 'min', got %s", tostring(op)) end
  local dtype = t.uop.dtype.name
  if not REDUCIBLE[dtype] then
    fail("all_reduce", "dtype %s cannot be reduced (float32, float64, int32 or int64)", dtype)
  end
  local out_tensor, async = collective_options("all_reduce", opts)
  local into = out_tensor and out_storage("all_reduce", out_tensor, t, t._shape)
  local backend = backend_for("all_reduce", t.device)
  local storage, staged = storage_of("all_reduce", t)
  local target, pending
  if backend == mpi then
    -- from storage into out's buffer (MPI_IN_PLACE when it is t's own) or new storage: the
    -- input (maybe shared) stays as it is
    target = (into and not staged) and into or buffers.allocate(storage.dtype, storage.numel, storage.device, "none")
    if async then pending = mpi.all_reduce_start(storage, op, target) else mpi.all_reduce(storage, op, target) end
  else
    target = in_place_target(into, storage, staged)
    if backend and async and backend.all_reduce_start then
      pending = backend.all_reduce_start(target, op)
    elseif backend then
      backend.all_reduce(target, op)
    end
  end
  if not async then return result_of(target, into, out_tensor, t._shape, t.device, staged) end
  return new_work(pending, function() return result_of(target, into, out_tensor, t._shape, t.device, staged) end)
end

-- nil when root is a rank of a world of size ranks, else what is wrong with it.
local function root_problem(root, size)
  if math.type(root) ~= "integer" then return string.format("root must be an integer rank, got %s", tostring(root)) end
  if root == 0 then return string.format("root 0 is not a rank: ranks count from 1 (1 to %d)", size) end
  if root < 1 or root > size then return string.format("root %d is not a rank (1 to %d)", root, size) end
  return nil
end

--- Rank root's values of t on every rank, as a new realized tensor (every rank passes a
-- tensor of the same shape and dtype). opts.out: as all_reduce's (the result in its buffer);
-- opts.async_op = true returns a Work, done already (the broadcast runs in the call).
function M.broadcast(t, root, opts)
  check_tensor("broadcast", t)
  local w = joined()
  local problem = root_problem(root, w.size)
  if problem then fail("broadcast", "%s", problem) end
  local out_tensor, async = collective_options("broadcast", opts)
  local into = out_tensor and out_storage("broadcast", out_tensor, t, t._shape)
  local backend = backend_for("broadcast", t.device)
  local storage, staged = storage_of("broadcast", t)
  local target = in_place_target(into, storage, staged)
  if backend then backend.broadcast(target, root - 1) end
  local result = result_of(target, into, out_tensor, t._shape, t.device, staged)
  return async and done_work(result) or result
end

--- Every rank's t stacked in rank order: a new realized tensor of shape {world_size, ...t's
-- shape}. opts.out: as all_reduce's, of that shape (it cannot share t's buffer); opts.async_op =
-- true returns a Work, done already (the gather runs in the call).
function M.all_gather(t, opts)
  check_tensor("all_gather", t)
  local w = joined()
  local shape = { w.size }
  for i, n in ipairs(t._shape) do shape[i + 1] = n end
  local out_tensor, async = collective_options("all_gather", opts)
  local into = out_tensor and out_storage("all_gather", out_tensor, t, shape)
  local backend = backend_for("all_gather", t.device)
  local storage, staged = storage_of("all_gather", t)
  if into == storage and w.size > 1 then
    fail("all_gather", "out cannot share the buffer of the tensor gathered (every rank's values go into it)")
  end
  local target = (into and not staged) and into
    or buffers.allocate(storage.dtype, storage.numel * w.size, storage.device, "none")
  if backend then
    backend.all_gather(storage, target)
  elseif target ~= storage then
    buffers.copy(target, storage)
  end
  local result = result_of(target, into, out_tensor, shape, t.device, staged)
  return async and done_work(result) or result
end

--- Returns once every rank has called it.
function M.barrier()
  if joined().size > 1 then mpi.barrier() end
end

--- Ends every rank of the job now with exit status code (default 1); in a world of one, this
-- process. The `tcl` program calls it when a script fails in a job of several ranks, so the
-- others end at once instead of waiting for their timeout.
function M.abort(code)
  code = code == nil and 1 or code
  if math.type(code) ~= "integer" then fail("abort", "code must be an integer, got %s", tostring(code)) end
  if world and world.size > 1 then mpi.abort(code) end
  os.exit(code, false)
end

--- What the `tcl` program calls when a script fails: in a job of several ranks, ends them all
-- now (exit status 1), so that no rank waits for this one until its timeout.
function M.abort_after_error()
  if world and world.size > 1 then mpi.abort(1) end
end

--- DistributedDataParallel(model [, opts]): the data-parallel wrapper (tcl.distributed.ddp,
-- loaded on first use): rank 1's weights on every rank, gradients averaged over the ranks.
-- opts.bucket_cap_mb: the gradient buckets' size in MiB (default 25).
function M.DistributedDataParallel(model, opts) return require("tcl.distributed.ddp").new(model, opts) end

return M
