-- tcl.distributed.mpi — the MPI backend of tcl.distributed: collectives over raw host storage
-- (runtime Buffers), through the C binding tcl.mpi (src/runtime/mpi: Open MPI loaded at run
-- time). Layer: lua/tcl/distributed, over the runtime.
--
--   local mpi = require "tcl.distributed.mpi"
--   mpi.init{ timeout = 300 }            -- joins MPI_COMM_WORLD (TCL_MPI_LIBRARY names the library)
--   mpi.rank0(), mpi.size()              -- 0-based rank, number of ranks
--   mpi.all_reduce(storage, "sum")       -- in place; mpi.all_reduce(src, op, dst) into dst
--   local work = mpi.all_reduce_start(src, "sum", dst)  -- started; work:test(), work:wait()
--   mpi.broadcast(storage, root0); mpi.all_gather(src, dst); mpi.barrier()
--   local s = mpi.broadcast_bytes(s, root0)  -- root0's string on every rank
--
-- Ranks here are MPI's (0-based): tcl.distributed turns them into tcl's 1-based ones. Every
-- collective waits at most the timeout for the other ranks, then ends the whole job with a
-- message naming the collective (a rank that died or hangs must not hang the others).
local env = require "tcl.env"

local M = {}

local binding -- tcl.mpi, loaded by init

local function loaded(fn)
  if not binding then error("tcl.distributed.mpi." .. fn .. ": MPI is not initialized (call init first)", 3) end
  return binding
end

--- Whether a launcher (mpirun, srun) started this process as a rank of a job.
function M.launched()
  return require("tcl.mpi").launched()
end

--- Joins MPI_COMM_WORLD (idempotent; a second call sets the timeout). opts.timeout: seconds
-- (default TCL_DIST_TIMEOUT); the library: TCL_MPI_LIBRARY, else Open MPI's libmpi.so.40.
function M.init(opts)
  opts = opts or {}
  local mpi = require "tcl.mpi"
  local ok, err = pcall(mpi.init, env.MPI_LIBRARY, opts.timeout or env.DIST_TIMEOUT)
  if not ok then error((tostring(err):gsub("^mpi%.init: ", "")), 0) end
  binding = mpi
end

function M.initialized() return binding ~= nil end
function M.rank0() return loaded("rank0").rank0() end
function M.size() return loaded("size").size() end
function M.set_timeout(seconds) loaded("set_timeout").set_timeout(seconds) end
function M.all_reduce(storage, op, out) loaded("all_reduce").all_reduce(storage, op, out) end
--- The reduction all_reduce does, started: returns a work (work:test() drives it on and says
-- whether it is done; work:wait() waits, bounded by the timeout). The storages stay as they are
-- until it is done.
function M.all_reduce_start(storage, op, out) return loaded("all_reduce_start").all_reduce_start(storage, op, out) end
function M.broadcast(storage, root0) loaded("broadcast").broadcast(storage, root0) end
function M.all_gather(src, dst) loaded("all_gather").all_gather(src, dst) end
function M.barrier() loaded("barrier").barrier() end
function M.broadcast_bytes(s, root0) return loaded("broadcast_bytes").broadcast_bytes(s, root0) end
--- Ends every rank of the job with exit status code.
function M.abort(code) loaded("abort").abort(code) end

return M
