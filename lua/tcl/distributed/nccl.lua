-- tcl.distributed.nccl — the NCCL backend of tcl.distributed: collectives over raw CUDA storage
-- (tcl.cuda buffers), through the C binding tcl.nccl (src/runtime/cuda/nccl.c: NCCL loaded at
-- run time). Layer: lua/tcl/distributed, over the runtime.
--
--   local nccl = require "tcl.distributed.nccl"
--   nccl.init{ timeout = 300 }           -- optional: the first collective does it
--   nccl.rank0(), nccl.size()            -- 0-based rank, number of ranks
--   nccl.all_reduce(storage, "sum")      -- in place; "sum", "mean", "max", "min" (and "prod")
--   local work = nccl.all_reduce_start(storage, "sum") -- started, in place; returns at once
--   work:test()                          -- done yet? (never waits)
--   work:wait()                          -- waits (at most the timeout), returns storage
--   nccl.broadcast(storage, root0)       -- in place: root0's values everywhere
--   nccl.all_gather(src, dst)            -- dst: size * src's numel, the ranks' src in rank order
--   nccl.barrier()
--   nccl.join("CUDA:2")                  -- the communicator on CUDA:2 (storage there joins it itself)
--   nccl.set_timeout(seconds)
--
-- Bootstrap: rank and size come from the launcher through the MPI backend
-- (tcl.distributed.mpi); rank 0 makes NCCL's unique id and sends it to the others with MPI's
-- broadcast_bytes, then every rank joins one NCCL communicator per CUDA device it reduces on
-- (storage on CUDA:2 is reduced by a communicator on CUDA:2, in that GPU's context; every rank
-- must use the same device names, as with any collective). Without a
-- launcher the process is a world of one (rank 0 of 1) and needs no MPI. init{ launcher = }
-- takes another bootstrap: a table with rank0(), size() and broadcast_bytes(s, root0).
-- The library: TCL_NCCL_LIBRARY, else libnccl.so.2. Every collective waits at most the timeout
-- (TCL_DIST_TIMEOUT, default 300 s), then fails with "<collective>: no answer from the other
-- ranks within N s (a rank may have failed)" and aborts the communicator; later collectives fail.
-- all_reduce_start queues the reduction on the GPU's communication stream after the kernels
-- queued so far and returns: kernels queued meanwhile run beside it, and must neither write
-- storage nor read it until work:wait() (which orders the kernels queued after it behind the
-- reduction). The work keeps storage alive until it is done; dropped while pending, it is
-- waited for when collected.
local env = require "tcl.env"

local M = {}

-- The bootstrap of a process that no launcher started.
local WORLD_OF_ONE = {
  rank0 = function() return 0 end,
  size = function() return 1 end,
  broadcast_bytes = function(s) return s end,
}

local comms = {} -- device name ("CUDA", "CUDA:2") -> this process's communicator on it
local launcher_of -- the bootstrap init chose (to join the communicators of other devices)
local timeout -- seconds; nil: TCL_DIST_TIMEOUT

local function check_timeout(fn, seconds)
  -- (NaN is neither > 0 nor <= 0: seconds ~= seconds catches it)
  if type(seconds) ~= "number" or seconds ~= seconds or seconds <= 0 or seconds == math.huge then
    error(string.format("tcl.distributed.nccl.%s: timeout must be a number of seconds > 0, got %s", fn,
      tostring(seconds)), 3)
  end
end

-- The launcher's bootstrap: MPI when a launcher started this process, else a world of one.
local function default_launcher()
  local mpi = require "tcl.distributed.mpi"
  if not mpi.launched() then return WORLD_OF_ONE end
  if not mpi.initialized() then mpi.init { timeout = timeout } end
  return mpi
end

--- Joins the world's NCCL communicator (idempotent; a second call sets the timeout only).
-- opts.timeout: seconds > 0; opts.launcher: the bootstrap (see the header).
function M.init(opts)
  if opts ~= nil and type(opts) ~= "table" then
    error("tcl.distributed.nccl.init: options must be a table, got " .. type(opts), 2)
  end
  opts = opts or {}
  if opts.timeout ~= nil then
    check_timeout("init", opts.timeout)
    timeout = opts.timeout
  end
  if opts.launcher then launcher_of = opts.launcher end
  if comms.CUDA then return end
  M.join("CUDA")
end

--- The communicator on device (a CUDA device's name: "CUDA", "CUDA:2"), joined now if this
-- process has none there yet (every rank joins it in the same call, as with a collective).
function M.join(device)
  local c = comms[device]
  if c then return c end
  local launcher = launcher_of or default_launcher()
  launcher_of = launcher
  local native = require "tcl.nccl"
  native.open(env.NCCL_LIBRARY)
  local rank0, size = launcher.rank0(), launcher.size()
  -- only rank 0's id counts: the others pass an empty string and receive it
  local id = launcher.broadcast_bytes(rank0 == 0 and native.unique_id() or "", 0)
  c = native.comm(id, size, rank0, device)
  comms[device] = c
  return c
end

-- The communicator for storage's device (the first device's when storage is nil).
local function joined(storage)
  local device = storage and storage.device or "CUDA"
  if not comms[device] then
    if device == "CUDA" then M.init() else M.join(device) end
  end
  return comms[device]
end

local function seconds() return timeout or env.DIST_TIMEOUT or 300 end

function M.initialized() return next(comms) ~= nil end
function M.rank0() return joined().rank0 end
function M.size() return joined().size end

--- The timeout of every later collective (seconds > 0).
function M.set_timeout(s)
  check_timeout("set_timeout", s)
  timeout = s
end

--- Reduces storage's values over the ranks into storage: op "sum", "mean", "max", "min" or
-- "prod" (NCCL's mean divides integers with truncation).
function M.all_reduce(storage, op)
  joined(storage):all_reduce(storage, storage, op or "sum", seconds())
  return storage
end

-- A started all-reduce (all_reduce_start): the native NcclWork and the storage it reduces.
local Work = {}
Work.__index = Work

--- Whether the reduction is done, without waiting (raises its failure).
function Work:test() return self.native:test() end

--- Waits until the reduction is done, at most the timeout it was started with; returns the storage.
function Work:wait()
  self.native:wait()
  return self.storage
end

--- Starts reducing storage's values over the ranks into storage (op as all_reduce) and returns a
-- work at once: work:test(), work:wait() -> storage.
function M.all_reduce_start(storage, op)
  local native = joined(storage):all_reduce_start(storage, storage, op or "sum", seconds())
  return setmetatable({ native = native, storage = storage }, Work)
end

--- Rank root0's values of storage into storage on every rank.
function M.broadcast(storage, root0)
  joined(storage):broadcast(storage, storage, root0, seconds())
  return storage
end

--- Every rank's src into dst (size times src's elements, in rank order).
function M.all_gather(src, dst)
  joined(src):all_gather(src, dst, seconds())
  return dst
end

-- The one-element buffer a barrier reduces, made once.
local token
local function barrier_token()
  if not token then token = require("tcl.cuda").buffer("int32", 1) end
  return token
end

--- Returns once every rank has called it: an all-reduce of one element on the CUDA device.
function M.barrier()
  local c, t = joined(), barrier_token()
  c:all_reduce(t, t, "sum", seconds())
end

--- Destroys the communicator (the next collective joins again); for tests and shutdown.
function M.shutdown()
  for _, c in pairs(comms) do c:destroy() end
  comms, token, launcher_of = {}, nil, nil
end

return M
