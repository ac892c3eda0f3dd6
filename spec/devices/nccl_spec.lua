-- spec/devices/nccl_spec.lua — NCCL for CUDA tensors: the library loaded at run time
-- (src/runtime/cuda/nccl.c, module tcl.nccl) and the backend of tcl.distributed over it
-- (tcl.distributed.nccl), on machines without GPUs.
--
-- Child `tcl` processes load the stand-in driver (build/tests/libmock_cuda.so, through
-- TCL_CUDA_DRIVER) and the stand-in NCCL (build/tests/libmock_nccl.so, through
-- TCL_NCCL_LIBRARY: collectives over the stand-in's device memory, recorded in MOCK_NCCL_LOG).
-- In a world of one they check the values of all_reduce, broadcast and all_gather of CUDA
-- tensors, the NCCL calls tcl made (counts, types, ops, roots), the bootstrap through a
-- launcher, NCCL's errors with their strings, a collective that never finishes timing out, and
-- the messages of a missing or wrong library; an all-reduce started on the device's
-- communication stream and waited for later (the stand-in driver's record of the streams and
-- events it went through, its buffers kept while it runs, its failures); in 2-rank jobs
-- (mpirun, where installed; the stand-in's ranks exchange through files) tcl.distributed's
-- values on CUDA tensors, started all-reduces waited for out of order, and a rank that never
-- joins ending the job. Not checked here: real GPUs (overlap itself).
local helper = require "spec.support.helper"
local contract = require "spec.support.gpu_device_contract"

local MOCK_CUDA = helper.build_dir .. "/tests/libmock_cuda.so"
local MOCK_NCCL = helper.build_dir .. "/tests/libmock_nccl.so"
local child, child_ok, last_line = contract.child, contract.child_ok, contract.last_line

-- What each child chunk starts with: the backend, tensors' storage as tcl.distributed takes it,
-- check(ok, what) and fails(pattern, f, ...).
local PRELUDE = [[
  local nccl = require "tcl.distributed.nccl"
  local buffers = require "tcl.schedule.buffers"
  local class = require "tcl.api.class"
  local function check(ok, what) if not ok then error(what, 2) end end
  local function fails(pattern, f, ...)
    local ok, err = pcall(f, ...)
    check(not ok and tostring(err):find(pattern, 1, true), "expected '" .. pattern .. "', got " .. tostring(err))
  end
  -- a copy of a CUDA tensor's storage (tcl.distributed reduces a copy), and a tensor over storage
  local function storage_copy(t)
    t = t:to("cuda"):realize()
    local s = buffers.get(buffers.viewed(t.uop))
    return buffers.copy(buffers.allocate(s.dtype, s.numel, s.device, "none"), s)
  end
  local function tensor_of(s, shape)
    return class.wrap(buffers.from_storage(s), { s.numel }, s.device):reshape(shape)
  end
  local function values(t)
    local list = t:to("cpu"):flatten():tolist()
    for i, v in ipairs(list) do list[i] = tostring(v) end
    return table.concat(list, " ")
  end
]]

-- What a child chunk adds to write "mark <text>" into the stand-in driver's record.
local MARK = helper.MOCK_CUDA_MARK

local lines_between = helper.lines_between

-- The lines of a record that start with one of the collectives' or the communicator's names.
local function calls_of(text)
  local lines = {}
  for line in text:gmatch("[^\n]+") do
    if line:match("^all_") or line:match("^broadcast") or line:match("^init") or line == "abort"
      or line == "destroy" then
      lines[#lines + 1] = line
    end
  end
  return lines
end

describe("NCCL on the stand-in library", function()
  local nccl_log, cuda_log
  before_each(function()
    nccl_log, cuda_log = os.tmpname(), os.tmpname()
    os.remove(nccl_log)
    os.remove(cuda_log)
  end)
  after_each(function()
    os.remove(nccl_log)
    os.remove(cuda_log)
  end)

  local function have_mocks()
    if helper.exists(MOCK_CUDA) and helper.exists(MOCK_NCCL) then return true end
    pending("the stand-ins are not built (" .. MOCK_NCCL .. ": cmake --build build)")
    return false
  end

  local function env(extra)
    return string.format("TCL_CUDA_DRIVER=%s MOCK_CUDA_LOG=%s TCL_NCCL_LIBRARY=%s MOCK_NCCL_LOG=%s %s",
      helper.shell_quote(MOCK_CUDA), helper.shell_quote(cuda_log), helper.shell_quote(MOCK_NCCL),
      helper.shell_quote(nccl_log), extra or "")
  end

  it("reduces, broadcasts and gathers CUDA tensors in a world of one, with the NCCL calls they need", function()
    if not have_mocks() then return end
    child_ok(env(), PRELUDE .. [[
      check(nccl.rank0() == 0 and nccl.size() == 1, "rank 0 of 1")
      local x = Tensor({ { 1.5, -2, 3 }, { 4, 5, -6.25 } })
      for _, op in ipairs { "sum", "mean", "max", "min" } do
        local s = nccl.all_reduce(storage_copy(x), op)
        local got = values(tensor_of(s, { 2, 3 }))
        check(got == "1.5 -2.0 3.0 4.0 5.0 -6.25", op .. ": " .. got)
      end
      for _, dtype in ipairs { "float64", "int32", "int64", "float16", "bfloat16", "uint8" } do
        local t = Tensor({ 7, 1, 9 }, { dtype = dtype })
        check(values(tensor_of(nccl.all_reduce(storage_copy(t), "sum"), { 3 })) == values(t), dtype)
      end
      -- broadcast: in place; dtypes NCCL lacks travel as bytes
      local b = nccl.broadcast(storage_copy(Tensor({ 3, -4 }, { dtype = "int16" })), 0)
      check(values(tensor_of(b, { 2 })) == "3 -4", "int16 broadcast: " .. values(tensor_of(b, { 2 })))
      local flags = nccl.broadcast(storage_copy(Tensor({ true, false, true })), 0)
      check(values(tensor_of(flags, { 3 })) == "true false true", "bool broadcast")
      -- all_gather: into a buffer of size times the elements, a leading dim of the ranks
      local src = storage_copy(Tensor({ { 1, 2 }, { 3, 4 } }, { dtype = "int64" }))
      local dst = buffers.allocate(src.dtype, src.numel * nccl.size(), src.device, "none")
      nccl.all_gather(src, dst)
      local gathered = tensor_of(dst, { 1, 2, 2 })
      check(gathered.shape[1] == 1 and values(gathered) == "1 2 3 4", "all_gather: " .. values(gathered))
      nccl.barrier()
      print "ok"
    ]])
    assert.are.same({
      "init nranks 1 rank 0",
      -- ncclFloat32 (7); ncclSum 0, ncclAvg 4, ncclMax 2, ncclMin 3; in place
      "all_reduce count 6 type 7 op 0 in_place 1", "all_reduce count 6 type 7 op 4 in_place 1",
      "all_reduce count 6 type 7 op 2 in_place 1", "all_reduce count 6 type 7 op 3 in_place 1",
      -- float64 8, int32 2, int64 4, float16 6, bfloat16 9, uint8 1
      "all_reduce count 3 type 8 op 0 in_place 1", "all_reduce count 3 type 2 op 0 in_place 1",
      "all_reduce count 3 type 4 op 0 in_place 1", "all_reduce count 3 type 6 op 0 in_place 1",
      "all_reduce count 3 type 9 op 0 in_place 1", "all_reduce count 3 type 1 op 0 in_place 1",
      -- int16 as 4 bytes, bool as 3 (ncclUint8)
      "broadcast count 4 type 1 root 0 in_place 1", "broadcast count 3 type 1 root 0 in_place 1",
      "all_gather count 4 type 4",
      -- the barrier: one int32
      "all_reduce count 1 type 2 op 0 in_place 1",
      -- the communicator, destroyed when the state closes
      "destroy",
    }, calls_of(helper.read(nccl_log)))
    assert.are.equal("exit comms 0", last_line(helper.read(nccl_log)))
    assert.are.equal("exit allocations 0 contexts 0 modules 0 events 0", last_line(helper.read(cuda_log)))
  end)

  it("is tcl.distributed's backend for CUDA tensors, which a world of one does not need", function()
    if not have_mocks() then return end
    local out = child_ok(env(), [[
      local dist = require "tcl.distributed"
      assert(dist.backend_of("CUDA") == "nccl" and dist.backend_of("cuda:1") == "nccl", "NCCL for CUDA")
      assert(dist.backend_of("CPU") == "mpi", "MPI for the CPU")
      local y = dist.all_reduce(Tensor({ 1.5, 2, 3 }):to("cuda"), "sum")
      assert(y.device == "CUDA", "the result stays on the GPU")
      print(table.concat(y:to("cpu"):tolist(), " "))
      print "ok"
    ]])
    assert.are.equal("1.5 2.0 3.0\nok\n", out)
    assert.is_false(helper.exists(nccl_log), "NCCL was not even loaded")
  end)

  it("bootstraps through the launcher: rank 0's unique id reaches every rank", function()
    if not have_mocks() then return end
    child_ok(env(), PRELUDE .. [[
      local sent = {}
      -- rank 1 of 2: the id comes from rank 0 (made here by the library, as rank 0 would)
      local launcher = {
        rank0 = function() return 1 end, size = function() return 2 end,
        broadcast_bytes = function(s, root0)
          sent[#sent + 1] = { s, root0 }
          return require("tcl.nccl").unique_id()
        end,
      }
      fails("NCCL: ncclCommInitRank failed: ncclInvalidUsage (mock: invalid usage)", nccl.init, { launcher = launcher })
      check(#sent == 1 and sent[1][1] == "" and sent[1][2] == 0, "rank 1 sends nothing, receives from rank 0")
      -- rank 0 of 1 through a launcher: its own id
      launcher.rank0, launcher.size = function() return 0 end, function() return 1 end
      sent = {}
      nccl.init { launcher = launcher }
      check(#sent[1][1] == 128 and sent[1][2] == 0, "rank 0 sends its 128-byte id")
      print "ok"
    ]])
    assert.are.same({ "init: rank 1 of 2, but the stand-in needs MOCK_NCCL_DIR for more than one rank",
      "init nranks 1 rank 0", "destroy" },
      calls_of(helper.read(nccl_log)))
  end)

  it("reports NCCL's errors with the call and its string, then refuses the aborted communicator", function()
    if not have_mocks() then return end
    child_ok(env("MOCK_NCCL_FAIL=ncclAllReduce MOCK_NCCL_FAIL_CODE=2"), PRELUDE .. [[
      local s = storage_copy(Tensor({ 1, 2 })) -- int32 (ncclInt32: 2)
      nccl.broadcast(s, 0)
      fails("NCCL: ncclAllReduce failed: ncclSystemError (mock: a system call failed)", nccl.all_reduce, s, "sum")
      fails("broadcast: the NCCL communicator was aborted by an earlier failure", nccl.broadcast, s, 0)
      print "ok"
    ]])
    assert.are.same({ "init nranks 1 rank 0", "broadcast count 2 type 2 root 0 in_place 1", "abort" },
      calls_of(helper.read(nccl_log)))
    assert.are.equal("exit comms 0", last_line(helper.read(nccl_log)))
    -- a failure NCCL reports while the collective runs (a peer that died)
    child_ok(env("MOCK_NCCL_ASYNC_ERROR=6"), PRELUDE .. [[
      fails("all_gather: NCCL failed while it ran: ncclRemoteError (mock: a remote rank failed)", nccl.all_gather,
        storage_copy(Tensor({ 1 })), storage_copy(Tensor({ 0 })))
      print "ok"
    ]])
    -- and one of the bootstrap
    local status, _, err = child(env("MOCK_NCCL_FAIL=ncclGetUniqueId MOCK_NCCL_FAIL_CODE=3"),
      PRELUDE .. "nccl.barrier()")
    assert.are_not.equal(0, status)
    assert.matches("NCCL: ncclGetUniqueId failed: ncclInternalError (mock: internal error)", err, 1, true)
  end)

  it("times out a collective that never finishes, with the collective's name, and aborts it", function()
    if not have_mocks() then return end
    local out = child_ok(env("MOCK_NCCL_HANG=ncclBroadcast"), PRELUDE .. [[
      local s = storage_copy(Tensor({ 1, 2, 3 }))
      nccl.set_timeout(0.25)
      local t0 = os.time()
      fails("broadcast: no answer from the other ranks within 0.25 s (a rank may have failed)", nccl.broadcast, s, 0)
      print(os.time() - t0 <= 5)
      fails("all_reduce: the NCCL communicator was aborted by an earlier failure", nccl.all_reduce, s, "sum")
      print "ok"
    ]])
    assert.matches("^true", out)
    assert.are.same({ "init nranks 1 rank 0", "broadcast count 3 type 2 root 0 in_place 1", "abort" },
      calls_of(helper.read(nccl_log)))
  end)

  it("checks what the binding is given", function()
    if not have_mocks() then return end
    child_ok(env(), PRELUDE .. [[
      local native = require "tcl.nccl"
      fails("nccl.comm: NCCL is not open (nccl.open first)", native.comm, string.rep("x", 128), 1, 0)
      native.open(os.getenv("TCL_NCCL_LIBRARY"))
      local id = native.unique_id()
      fails("nccl.comm: an NCCL id is 128 bytes (nccl.unique_id), got 3", native.comm, "abc", 1, 0)
      fails("nccl.comm: rank0 must be in [0, 0], got 1", native.comm, id, 1, 1)
      local comm = native.comm(id, 1, 0)
      local cuda = require "tcl.cuda"
      local a, b = cuda.buffer("float32", 4), cuda.buffer("float32", 4)
      fails('NcclComm:all_reduce: op must be "sum", "prod", "max", "min" or "mean", got avg', comm.all_reduce,
        comm, a, b, "avg", 1)
      fails("NcclComm:all_reduce: the timeout must be a number of seconds > 0", comm.all_reduce, comm, a, b, "sum", 0)
      fails("NcclComm:all_reduce: send holds float32 and recv int32: they must be of one dtype", comm.all_reduce,
        comm, a, cuda.buffer("int32", 4), "sum", 1)
      fails("NcclComm:all_reduce: recv has 5 elements, send has 4", comm.all_reduce, comm, a,
        cuda.buffer("float32", 5), "sum", 1)
      fails("NcclComm:all_reduce: NCCL cannot reduce int16 elements", comm.all_reduce, comm,
        cuda.buffer("int16", 2), cuda.buffer("int16", 2), "sum", 1)
      fails("NcclComm:all_reduce: recv must be a CUDA buffer (tcl.cuda), got tcl.Buffer", comm.all_reduce, comm, a,
        require("tcl.runtime").buffer("float32", 4, "CPU"), "sum", 1)
      fails("NcclComm:broadcast: root0 must be in [0, 0], got 1", comm.broadcast, comm, a, a, 1, 1)
      fails("tcl.distributed.nccl.set_timeout: timeout must be a number of seconds > 0, got -1", nccl.set_timeout, -1)
      check(tostring(comm) == "NcclComm(rank0 0 of 1)", tostring(comm))
      comm:destroy()
      fails("NcclComm:all_gather: the communicator was destroyed", comm.all_gather, comm, a, b, 1)
      print "ok"
    ]])
    assert.are.same({ "init nranks 1 rank 0", "destroy" }, calls_of(helper.read(nccl_log)))
  end)

  it("starts an all-reduce on the communication stream after tcl's work, and orders tcl's stream after it at the wait",
    function()
    if not have_mocks() then return end
    child_ok(env(), PRELUDE .. MARK .. [[
      local x = Tensor({ { 1.5, -2, 3 }, { 4, 5, -6.25 } })
      local sum, mean = storage_copy(x), storage_copy(x)
      mark "start"
      local work = nccl.all_reduce_start(sum, "sum")
      check(work:wait() == sum, "wait returns the storage")
      mark "waited"
      check(work:test() == true, "done after the wait")
      check(work:wait() == sum, "a second wait")
      local other = nccl.all_reduce_start(mean, "mean")
      check(other:wait() == mean, "mean")
      mark "again"
      for name, s in pairs { sum = sum, mean = mean } do
        local got = values(tensor_of(s, { 2, 3 }))
        check(got == "1.5 -2.0 3.0 4.0 5.0 -6.25", name .. ": " .. got)
      end
      -- nothing to reduce: a work already done, which queues nothing
      local empty = buffers.allocate(sum.dtype, 0, sum.device, "none")
      local none = nccl.all_reduce_start(empty, "sum")
      check(none:test() == true and none:wait() == empty, "count 0")
      mark "empty"
      -- the blocking all_reduce stays on tcl's stream
      nccl.all_reduce(sum, "max")
      mark "blocking"
      print "ok"
    ]])
    local text = helper.read(cuda_log)
    assert.are.same({
      "mark start",
      -- made on first use, non-blocking (flag 1): the null stream does not wait for it
      "stream create 1 flags 1",
      -- the collective waits for tcl's stream (the null stream, 0), runs on stream 1, then marks its end
      "record stream 0", "stream 1 waits for stream 0", "queue all_reduce stream 1", "record stream 1",
      -- the wait: tcl's stream follows the collective's end
      "stream 0 waits for stream 1",
    }, lines_between(text, "mark start", "mark waited"))
    -- a second wait does nothing more; the second work reuses the stream
    assert.are.same({ "mark waited", "record stream 0", "stream 1 waits for stream 0", "queue all_reduce stream 1",
      "record stream 1", "stream 0 waits for stream 1" }, lines_between(text, "mark waited", "mark again"))
    local empty = lines_between(text, "mark again", "mark empty")
    for _, line in ipairs(empty) do assert.is_nil(line:find("stream", 1, true), line) end
    assert.are.same({ "mark empty", "queue all_reduce stream 0" },
      lines_between(text, "mark empty", "mark blocking"))
    assert.are.same({ "init nranks 1 rank 0", "all_reduce count 6 type 7 op 0 in_place 1",
      "all_reduce count 6 type 7 op 4 in_place 1", "all_reduce count 6 type 7 op 2 in_place 1", "destroy" },
      calls_of(helper.read(nccl_log)))
    -- the stream and every event given back
    assert.are.equal("exit allocations 0 contexts 0 modules 0 events 0 streams 0", last_line(text))
  end)

  it("keeps a started all-reduce's buffers while it runs, and waits for one collected while pending", function()
    if not have_mocks() then return end
    -- MOCK_NCCL_HANG: the stand-in's collective never ends, until the communicator is aborted
    child_ok(env("MOCK_NCCL_HANG=ncclAllReduce"), PRELUDE .. MARK .. [[
      local native = require "tcl.nccl"
      local cuda = require "tcl.cuda"
      native.open(os.getenv("TCL_NCCL_LIBRARY"))
      local comm = native.comm(native.unique_id(), 1, 0)
      local kept = setmetatable({}, { __mode = "v" })
      local function collect() for _ = 1, 3 do collectgarbage() end end
      local send, recv = cuda.buffer("float32", 4), cuda.buffer("float32", 4)
      kept.send, kept.recv = send, recv
      local work = comm:all_reduce_start(send, recv, "sum", 0.25)
      send, recv = nil, nil
      collect()
      check(kept.send and kept.recv, "the buffers went while the collective runs")
      check(work:test() == false and tostring(work) == "NcclWork(pending)", "pending: " .. tostring(work))
      mark "dropped"
      work = nil
      collect() -- the work's finalizer waits (0.25 s), gives up and aborts the communicator
      mark "collected"
      check(comm.aborted, "the timeout did not abort the communicator")
      check(kept.send == nil and kept.recv == nil, "the buffers outlived the work")
      print "ok"
    ]])
    local text = helper.read(cuda_log)
    -- nothing more was queued, and the stream was not waited for (the collective never ended)
    assert.are.same({ "mark dropped" }, lines_between(text, "mark dropped", "mark collected"))
    assert.are.same({ "init nranks 1 rank 0", "all_reduce count 4 type 7 op 0 in_place 0", "abort" },
      calls_of(helper.read(nccl_log)))
    assert.are.equal("exit allocations 0 contexts 0 modules 0 events 0 streams 0", last_line(text))
    -- a work that is done lets its buffers go while it is still held
    child_ok(env(), PRELUDE .. [[
      local native = require "tcl.nccl"
      native.open(os.getenv("TCL_NCCL_LIBRARY"))
      local comm = native.comm(native.unique_id(), 1, 0)
      local kept = setmetatable({}, { __mode = "v" })
      local s = require("tcl.cuda").buffer("int32", 3)
      kept.s = s
      local work = comm:all_reduce_start(s, s, "sum", 1)
      s = nil
      collectgarbage()
      collectgarbage()
      check(kept.s and tostring(work) == "NcclWork(pending)", "the storage went before the collective was seen done")
      work:wait()
      collectgarbage()
      collectgarbage()
      check(kept.s == nil and tostring(work) == "NcclWork(over)", "a done work kept its storage")
      print "ok"
    ]])
  end)

  it("fails a started all-reduce as the blocking one: arguments, NCCL's errors, the timeout, an aborted communicator",
    function()
    if not have_mocks() then return end
    child_ok(env(), PRELUDE .. [[
      local native = require "tcl.nccl"
      native.open(os.getenv("TCL_NCCL_LIBRARY"))
      local comm = native.comm(native.unique_id(), 1, 0)
      local cuda = require "tcl.cuda"
      local a, b = cuda.buffer("float32", 4), cuda.buffer("float32", 4)
      local start = comm.all_reduce_start
      fails('NcclComm:all_reduce_start: op must be "sum", "prod", "max", "min" or "mean", got avg', start, comm, a, b,
        "avg", 1)
      fails("NcclComm:all_reduce_start: the timeout must be a number of seconds > 0", start, comm, a, b, "sum", -1)
      fails("NcclComm:all_reduce_start: send holds float32 and recv int32: they must be of one dtype", start, comm, a,
        cuda.buffer("int32", 4), "sum", 1)
      fails("NcclComm:all_reduce_start: recv has 5 elements, send has 4", start, comm, a, cuda.buffer("float32", 5),
        "sum", 1)
      fails("NcclComm:all_reduce_start: NCCL cannot reduce int16 elements", start, comm, cuda.buffer("int16", 2),
        cuda.buffer("int16", 2), "sum", 1)
      fails("NcclComm:all_reduce_start: send must be a CUDA buffer (tcl.cuda), got tcl.Buffer", start, comm,
        require("tcl.runtime").buffer("float32", 4, "CPU"), b, "sum", 1)
      fails("(tcl.NcclComm expected, got number)", start, 5, a, b, "sum", 1)
      -- a destroyed communicator refuses new work; a work still held keeps NCCL's until it goes
      local work = comm:all_reduce_start(a, b, "sum", 1)
      comm:destroy()
      fails("NcclComm:all_reduce_start: the communicator was destroyed", start, comm, a, b, "sum", 1)
      work:wait()
      check(work:test(), "done")
      print "ok"
    ]])
    assert.are.same({ "init nranks 1 rank 0", "all_reduce count 4 type 7 op 0 in_place 0", "destroy" },
      calls_of(helper.read(nccl_log)))
    -- a failing ncclAllReduce aborts the communicator; nothing is started
    os.remove(nccl_log)
    child_ok(env("MOCK_NCCL_FAIL=ncclAllReduce"), PRELUDE .. [[
      local s = storage_copy(Tensor({ 1, 2 }))
      fails("NCCL: ncclAllReduce failed: ncclSystemError (mock: a system call failed)", nccl.all_reduce_start, s, "sum")
      fails("all_reduce: the NCCL communicator was aborted by an earlier failure", nccl.all_reduce_start, s, "sum")
      print "ok"
    ]])
    assert.are.same({ "init nranks 1 rank 0", "abort" }, calls_of(helper.read(nccl_log)))
    -- NCCL's error while it runs (a peer that died): at the test, and again at every test and wait
    child_ok(env("MOCK_NCCL_ASYNC_ERROR=6"), PRELUDE .. [[
      local work = nccl.all_reduce_start(storage_copy(Tensor({ 1.5 })), "sum")
      local message = "all_reduce: NCCL failed while it ran: ncclRemoteError (mock: a remote rank failed)"
      fails(message, work.test, work)
      fails(message, work.wait, work)
      fails(message, work.test, work)
      fails("all_reduce: the NCCL communicator was aborted by an earlier failure", nccl.all_reduce_start,
        storage_copy(Tensor({ 1.5 })), "sum")
      print "ok"
    ]])
    -- the timeout: the wait gives up, aborts, and a work started before it fails at its own test
    os.remove(cuda_log)
    local out = child_ok(env("MOCK_NCCL_HANG=ncclAllReduce"), PRELUDE .. [[
      nccl.set_timeout(0.25)
      local first = nccl.all_reduce_start(storage_copy(Tensor({ 1, 2, 3 })), "sum")
      local second = nccl.all_reduce_start(storage_copy(Tensor({ 4 })), "mean")
      check(first:test() == false and second:test() == false, "pending")
      local t0 = os.time()
      local message = "all_reduce: no answer from the other ranks within 0.25 s (a rank may have failed)"
      fails(message, second.wait, second)
      print(os.time() - t0 <= 5)
      fails(message, second.wait, second)
      fails("all_reduce: the NCCL communicator was aborted by an earlier failure", first.test, first)
      fails("all_reduce: the NCCL communicator was aborted by an earlier failure", first.wait, first)
      print "ok"
    ]])
    assert.matches("^true", out)
    assert.are.equal("exit allocations 0 contexts 0 modules 0 events 0 streams 0", last_line(helper.read(cuda_log)))
  end)

  it("refuses an NCCL older than 2.10 and a library that is not NCCL", function()
    if not have_mocks() then return end
    local status, _, err = child(env("MOCK_NCCL_VERSION=20903"), PRELUDE .. "nccl.barrier()")
    assert.are_not.equal(0, status)
    assert.matches("is version 20903, tcl needs 21000 (2.10) or later", err, 1, true)
    status, _, err = child(env() .. " TCL_NCCL_LIBRARY=libm.so.6", PRELUDE .. "nccl.barrier()")
    assert.are_not.equal(0, status)
    assert.matches("NCCL: the library libm.so.6 has no ncclGetVersion: it is not NCCL", err, 1, true)
  end)
end)

-- Runs `script` as 2 ranks of an MPI job on the stand-ins, whose NCCL exchanges the ranks'
-- buffers through files in a fresh directory; returns status, stdout, stderr, seconds.
local function mpirun(script)
  local path, dir = os.tmpname(), helper.fresh_dir_path()
  helper.write(path, script)
  assert(os.execute("mkdir " .. helper.shell_quote(dir)))
  local vars = string.format("TCL_LUA_DIR=%s TCL_CUDA_DRIVER=%s TCL_NCCL_LIBRARY=%s MOCK_NCCL_DIR=%s",
    helper.shell_quote(helper.root .. "/lua"), helper.shell_quote(MOCK_CUDA), helper.shell_quote(MOCK_NCCL),
    helper.shell_quote(dir))
  local cmd = string.format("%s -x TCL_LUA_DIR -x TCL_CUDA_DRIVER -x TCL_NCCL_LIBRARY -x MOCK_NCCL_DIR %s %s",
    helper.mpirun_prefix(2, vars .. " timeout 60", { "TCL_DIST_TIMEOUT" }), helper.shell_quote(helper.tcl_bin),
    helper.shell_quote(path))
  local start = os.time()
  local status, out, err = helper.run(cmd)
  os.remove(path)
  os.execute("rm -rf " .. helper.shell_quote(dir))
  return status, out, err, os.time() - start
end

describe("NCCL across the ranks of a job on the stand-ins (mpirun -np 2)", function()
  local function ready()
    if not (helper.exists(MOCK_CUDA) and helper.exists(MOCK_NCCL)) then
      pending("the stand-ins are not built (" .. MOCK_NCCL .. ")")
      return false
    end
    if helper.run("command -v mpirun") ~= 0 then
      pending("mpirun is not installed (Open MPI: scripts/setup.sh)")
      return false
    end
    return true
  end

  it("reduces (blocking and started), broadcasts and gathers CUDA tensors through tcl.distributed, over MPI",
    function()
    if not ready() then return end
    local status, out, err = mpirun [[
      local dist = tcl.distributed
      local r = dist.rank()
      local function say(key, t)
        local list = t:to("cpu"):flatten():tolist()
        for i, v in ipairs(list) do list[i] = tostring(v) end
        print(string.format("R %d %s %s %s", r, key, t.device, table.concat(list, " ")))
      end
      local x = Tensor({ r, 10 * r, -r }, { dtype = "float32" }):to("cuda")
      for _, op in ipairs { "sum", "mean", "max", "min" } do say(op, dist.all_reduce(x, op)) end
      say("int64_mean", dist.all_reduce(Tensor({ 3 * r, -r }, { dtype = "int64" }):to("cuda"), "mean"))
      say("broadcast", dist.broadcast(x, 2))
      local acc = Tensor({ r, 2 * r }, { dtype = "float32" }):to("cuda"):realize()
      dist.all_reduce(acc, "sum", { out = acc }) -- in place, in the GPU buffer
      say("in_place", acc)
      -- started (on the communication stream), then waited for: the result in out, and a new one
      local avg = Tensor.zeros({ 3 }, { dtype = "float32" }):to("cuda"):realize()
      local w1 = dist.all_reduce(x, "mean", { out = avg, async_op = true })
      local w2 = dist.all_reduce(x, "max", { async_op = true })
      assert(w2:wait().device == "CUDA" and w1:wait() == avg and w1:is_completed(), "async works")
      say("async_mean", avg)
      say("async_max", w2:wait())
      local g = dist.all_gather(x)
      say("gather_" .. table.concat(g.shape, "x"), g)
      dist.barrier()
      print(string.format("R %d backend %s", r, dist.backend_of(x.device)))
    ]]
    assert.are.equal(0, status, err)
    local results = {}
    for line in out:gmatch("R %d [^\n]+") do results[#results + 1] = line end
    table.sort(results)
    assert.are.same({
      "R 1 async_max CUDA 2.0 20.0 -1.0", "R 1 async_mean CUDA 1.5 15.0 -1.5",
      "R 1 backend nccl", "R 1 broadcast CUDA 2.0 20.0 -2.0", "R 1 gather_2x3 CUDA 1.0 10.0 -1.0 2.0 20.0 -2.0",
      "R 1 in_place CUDA 3.0 6.0", "R 1 int64_mean CUDA 4 -1", "R 1 max CUDA 2.0 20.0 -1.0",
      "R 1 mean CUDA 1.5 15.0 -1.5", "R 1 min CUDA 1.0 10.0 -2.0", "R 1 sum CUDA 3.0 30.0 -3.0",
      "R 2 async_max CUDA 2.0 20.0 -1.0", "R 2 async_mean CUDA 1.5 15.0 -1.5",
      "R 2 backend nccl", "R 2 broadcast CUDA 2.0 20.0 -2.0", "R 2 gather_2x3 CUDA 1.0 10.0 -1.0 2.0 20.0 -2.0",
      "R 2 in_place CUDA 3.0 6.0", "R 2 int64_mean CUDA 4 -1", "R 2 max CUDA 2.0 20.0 -1.0",
      "R 2 mean CUDA 1.5 15.0 -1.5", "R 2 min CUDA 1.0 10.0 -2.0", "R 2 sum CUDA 3.0 30.0 -3.0",
    }, results)
  end)

  it("reduces started all-reduces of CUDA storage across the ranks, waited for out of order", function()
    if not ready() then return end
    local status, out, err = mpirun(PRELUDE .. [[
      local r = nccl.rank0() + 1
      local a = storage_copy(Tensor({ r, 10 * r, -r }, { dtype = "float32" }))
      local b = storage_copy(Tensor({ 3 * r, -r }, { dtype = "int64" }))
      local c = storage_copy(Tensor({ r, 2 }, { dtype = "float64" }))
      local works = { nccl.all_reduce_start(a, "sum"), nccl.all_reduce_start(b, "mean"),
        nccl.all_reduce_start(c, "mean") }
      for i = 3, 1, -1 do works[i]:wait() end
      check(works[1]:test() and works[2]:test() and works[3]:test(), "done")
      print(string.format("R %d sum %s mean %s mean %s", r, values(tensor_of(a, { 3 })), values(tensor_of(b, { 2 })),
        values(tensor_of(c, { 2 }))))
    ]])
    assert.are.equal(0, status, err)
    local results = {}
    for line in out:gmatch("R %d [^\n]+") do results[#results + 1] = line end
    table.sort(results)
    -- int64 mean: (3 + 6) / 2 and (-1 - 2) / 2, truncated
    assert.are.same({ "R 1 sum 3.0 30.0 -3.0 mean 4 -1 mean 1.5 2.0", "R 2 sum 3.0 30.0 -3.0 mean 4 -1 mean 1.5 2.0" },
      results)
  end)

  it("ends the job when a rank never joins a collective, after dist.init's timeout", function()
    if not ready() then return end
    local status, out, err, seconds = mpirun [[
      local dist = tcl.distributed
      dist.init { timeout = 1 }
      if dist.rank() == 2 then os.execute("sleep 30") os.exit(0) end
      dist.all_reduce(Tensor({ 1.5 }):to("cuda"))
      print "unreachable"
    ]]
    assert.are_not.equal(0, status)
    assert.is_nil(out:find("unreachable", 1, true))
    -- the message as it is (no line of tcl's inside); the tcl program then ends the job (rank 2
    -- sleeps 30 s: the bound below shows it was ended; Open MPI's own notice of the abort is not
    -- always printed)
    assert.matches("tcl: all_reduce: no answer from the other ranks within 1 s (a rank may have failed)", err, 1, true)
    assert.is_true(seconds < 25, "the job took " .. seconds .. " s")
  end)
end)

describe("NCCL missing", function()
  it("says how to get it when TCL_NCCL_LIBRARY names no library", function()
    local status, _, err = child("TCL_NCCL_LIBRARY=/nonexistent/libnccl.so.2",
      'require("tcl.distributed.nccl").barrier()')
    assert.are_not.equal(0, status)
    assert.matches("NCCL not found: install NCCL or set TCL_NCCL_LIBRARY to its libnccl.so.2 " ..
      "(/nonexistent/libnccl.so.2: cannot open shared object file", err, 1, true)
  end)

  it("says how to get it when libnccl.so.2 is nowhere, else opens the one installed", function()
    local status, out, err = child("TCL_NCCL_LIBRARY=", [[
      local ok, info = pcall(require("tcl.nccl").open)
      if ok then print(info.version, info.library) else print(info) end
    ]])
    assert.are.equal(0, status, err)
    local version, library = out:match("^(%d+)\t(%S+)\n$")
    if version then
      -- an NCCL is installed (without a GPU: only its version is read)
      assert.is_true(tonumber(version) >= 21000, out)
      assert.are.equal("libnccl.so.2", library)
    else
      assert.matches("nccl.open: NCCL not found: install NCCL or set TCL_NCCL_LIBRARY (libnccl.so.2: ", out, 1, true)
    end
  end)
end)
