-- spec/api/distributed_spec.lua — tcl.distributed (lua/tcl/distributed) over MPI: a world of one
-- in this process (no launcher), then 2-rank jobs on localhost started with mpirun, whose
-- ranks print their results for the spec to check against exact values; and failures: a rank
-- that errors, exits or hangs ends the job within a bounded time, with a message saying why.
local helper = require "spec.support.helper"
local q = helper.shell_quote

-- Runs `script` (Lua text) as `ranks` ranks of one job; returns status, stdout, stderr, seconds.
local function mpirun(script, ranks, env)
  local path = os.tmpname()
  helper.write(path, script)
  local vars = "TCL_LUA_DIR=" .. q(helper.root .. "/lua")
  for k, v in pairs(env or {}) do vars = vars .. " " .. k .. "=" .. q(v) end
  local cmd = string.format("%s -x TCL_LUA_DIR -x TCL_DIST_TIMEOUT -x TCL_MPI_LIBRARY %s %s",
    helper.mpirun_prefix(ranks, vars .. " timeout 60"), q(helper.tcl_bin), q(path))
  local start = os.time()
  local status, out, err = helper.run(cmd)
  os.remove(path)
  return status, out, err, os.time() - start
end

local function has_mpirun()
  return helper.run("command -v mpirun") == 0
end

-- "R <rank> <key> <text>" lines -> results[rank][key] = text
local function by_rank(out)
  local results = {}
  for rank, key, text in out:gmatch("R (%d+) (%S+) ([^\n]*)") do
    local r = tonumber(rank)
    results[r] = results[r] or {}
    results[r][key] = text
  end
  return results
end

describe("tcl.distributed", function()
  describe("without a launcher", function()
    local tcl = require "tcl"
    local T, dist = tcl.Tensor, tcl.distributed

    it("is a world of one: rank 1 of 1, no MPI needed", function()
      assert.are.equal(1, dist.rank())
      assert.are.equal(1, dist.world_size())
      assert.is_true(dist.is_initialized())
      assert.are.equal("mpi", dist.backend_of("CPU"))
      assert.are.equal("nccl", dist.backend_of("CUDA"))
      assert.is_false(require("tcl.distributed.mpi").initialized())
    end)

    it("has collectives that are identities, returning new tensors", function()
      local x = T({ { 1.5, -2 }, { 3, 4 } })
      for _, op in ipairs { "sum", "mean", "max", "min" } do
        local y = dist.all_reduce(x, op)
        assert.are.same({ { 1.5, -2 }, { 3, 4 } }, y:tolist())
        assert.are_not.equal(x, y)
      end
      local i = T({ 7, -9 }, { dtype = "int64" })
      assert.are.same({ 7, -9 }, dist.all_reduce(i, "mean"):tolist())
      assert.are.same({ 7, -9 }, dist.broadcast(i, 1):tolist())
      local g = dist.all_gather(x)
      assert.are.same({ 1, 2, 2 }, g.shape)
      assert.are.same({ { { 1.5, -2 }, { 3, 4 } } }, g:tolist())
      dist.barrier()
    end)

    it("keeps the shape of scalars and the values of views", function()
      local s = dist.all_reduce(T(5.5))
      assert.are.same({}, s.shape)
      assert.are.equal(5.5, s:item())
      assert.are.same({ 1 }, dist.all_gather(T(2)).shape)
      -- a transposed view is realized in its own order first
      assert.are.same({ { 1, 3 }, { 2, 4 } }, dist.all_reduce(T({ { 1, 2 }, { 3, 4 } }):transpose(1, 2)):tolist())
    end)

    it("writes into out's own buffer when asked (out = t: in place), and returns out", function()
      local x = T({ { 1, 2 }, { 3, 4 } }, { dtype = "float32" }):realize()
      local y = T.zeros({ 2, 2 }):realize()
      local view = y:reshape(4) -- shares y's buffer: sees what is written into it
      assert.are.equal(y, dist.all_reduce(x, "sum", { out = y }))
      assert.are.same({ 1, 2, 3, 4 }, view:tolist())
      assert.are.equal(x, dist.all_reduce(x, "mean", { out = x }))
      assert.are.same({ { 1, 2 }, { 3, 4 } }, x:tolist())
      local b = T.zeros({ 2, 2 }):realize()
      assert.are.equal(b, dist.broadcast(x, 1, { out = b }))
      assert.are.same({ { 1, 2 }, { 3, 4 } }, b:tolist())
      local g = T.zeros({ 1, 2, 2 }):realize()
      assert.are.equal(g, dist.all_gather(x, { out = g }))
      assert.are.same({ { { 1, 2 }, { 3, 4 } } }, g:tolist())
      -- a pending assignment to out runs before the collective overwrites it
      y:assign(T.full({ 2, 2 }, 9))
      dist.all_reduce(x, "max", { out = y })
      assert.are.same({ { 1, 2 }, { 3, 4 } }, y:tolist())
    end)

    it("returns a Work with async_op: done at once in a world of one, wait() giving the result", function()
      local x = T({ 1, 2, 3 }, { dtype = "float32" }):realize()
      local y = T.zeros({ 3 }):realize()
      local work = dist.all_reduce(x, "mean", { out = y, async_op = true })
      assert.are.equal("tcl.distributed.Work", getmetatable(work).__name)
      assert.is_true(work:is_completed())
      assert.are.equal(y, work:wait())
      assert.are.equal(y, work:wait()) -- again: the same result
      assert.are.same({ 1, 2, 3 }, y:tolist())
      assert.are.same({ 1, 2, 3 }, dist.all_reduce(x, "sum", { async_op = true }):wait():tolist())
      assert.are.same({ 1, 2, 3 }, dist.broadcast(x, 1, { async_op = true }):wait():tolist())
      assert.are.same({ { 1, 2, 3 } }, dist.all_gather(x, { async_op = true }):wait():tolist())
      -- async_op = false is the blocking call
      assert.are.same({ 1, 2, 3 }, dist.all_reduce(x, "sum", { async_op = false }):tolist())
    end)

    it("refuses an out that cannot take the result in place, naming why", function()
      local x = T({ { 1, 2 }, { 3, 4 } }, { dtype = "float32" }):realize()
      assert.are.equal("all_reduce: out has shape (4,), the result (2, 2)",
        helper.message_of(dist.all_reduce, x, "sum", { out = T.zeros({ 4 }):realize() }))
      assert.are.equal("all_reduce: out has dtype float64, the result float32",
        helper.message_of(dist.all_reduce, x, "sum", { out = T.zeros({ 2, 2 }, { dtype = "float64" }) }))
      assert.are.equal("all_reduce: out must hold a buffer of its own, written in place: a realized tensor, "
        .. "not a lazy result or a view such as a transpose or a slice (its node is PERMUTE)",
        helper.message_of(dist.all_reduce, x, "sum", { out = x:transpose(1, 2) }))
      assert.are.equal("all_reduce: out must hold a buffer of its own, written in place: a realized tensor, "
        .. "not a lazy result or a view such as a transpose or a slice (its node is ADD)",
        helper.message_of(dist.all_reduce, x, "sum", { out = x + 1 }))
      assert.are.equal("all_reduce: out must be a tensor, got table",
        helper.message_of(dist.all_reduce, x, "sum", { out = { 1 } }))
      assert.are.equal("all_reduce: unknown option 'into' (the options are out and async_op)",
        helper.message_of(dist.all_reduce, x, "sum", { into = x }))
      assert.are.equal("all_reduce: async_op must be a boolean, got number",
        helper.message_of(dist.all_reduce, x, "sum", { async_op = 1 }))
      assert.are.equal("broadcast: options must be a table such as { out = t }, got number",
        helper.message_of(dist.broadcast, x, 1, 5))
      assert.are.equal("all_gather: out has shape (2, 2), the result (1, 2, 2)",
        helper.message_of(dist.all_gather, x, { out = x }))
      assert.are.equal("all_reduce: out is on CPU:2, the tensor on CPU",
        helper.message_of(dist.all_reduce, x, "sum", { out = T.zeros({ 2, 2 }, { device = "CPU:2" }):realize() }))
    end)

    it("refuses bad arguments with messages that name them", function()
      local x = T({ 1, 2 })
      assert.are.equal("broadcast: root 0 is not a rank: ranks count from 1 (1 to 1)",
        helper.message_of(dist.broadcast, x, 0))
      assert.are.equal("broadcast: root 2 is not a rank (1 to 1)", helper.message_of(dist.broadcast, x, 2))
      assert.are.equal("broadcast: root must be an integer rank, got nil", helper.message_of(dist.broadcast, x))
      assert.are.equal("all_reduce: op must be 'sum', 'mean', 'max' or 'min', got avg",
        helper.message_of(dist.all_reduce, x, "avg"))
      assert.are.equal("all_reduce: expected a tensor, got number", helper.message_of(dist.all_reduce, 3))
      assert.are.equal("all_gather: expected a tensor, got table", helper.message_of(dist.all_gather, { 1 }))
      assert.are.equal("all_reduce: dtype bool cannot be reduced (float32, float64, int32 or int64)",
        helper.message_of(dist.all_reduce, T({ true, false })))
      assert.are.equal("init: backend must be 'mpi', 'nccl' or nil, got gloo",
        helper.message_of(dist.init, { backend = "gloo" }))
      assert.are.equal("init: timeout must be a number of seconds > 0, got 0",
        helper.message_of(dist.init, { timeout = 0 }))
      assert.are.equal("init: unknown option 'size'", helper.message_of(dist.init, { size = 2 }))
      -- raised at the caller's line, not inside tcl
      local message = helper.error_of(function() dist.broadcast(x, 0) end)
      assert.is_truthy(message:find("^[^:]*distributed_spec%.lua:%d+: broadcast: root 0"), message)
      message = helper.error_of(function() dist.all_reduce(x, "avg") end)
      assert.is_truthy(message:find("^[^:]*distributed_spec%.lua:%d+: all_reduce: op"), message)
    end)
  end)

  describe("2 ranks on localhost", function()
    local results, status, out, err
    local function job()
      if results then return results end
      assert.is_true(has_mpirun(), "mpirun not found: install openmpi-bin (scripts/setup.sh)")
      status, out, err = mpirun([[
local tcl = require "tcl"
local T, dist = tcl.Tensor, tcl.distributed
local r, n = dist.rank(), dist.world_size()
local function say(key, list) print(string.format("R %d %s %s", r, key, table.concat(list, ","))) end
say("world", { r, n })
local f = T({ { r, -2 * r }, { 0.5 * r, 10 } }, { dtype = "float32" })
local i = T({ 3 * r, -r, 1000000000000 * r }, { dtype = "int64" })
for _, op in ipairs { "sum", "mean", "max", "min" } do
  say("f32_" .. op, dist.all_reduce(f, op):flatten():tolist())
  say("i64_" .. op, dist.all_reduce(i, op):tolist())
end
say("input_after", f:flatten():tolist())
say("default_op", dist.all_reduce(i):tolist())
local b = dist.broadcast(T({ 10 * r, 20 * r, 30 * r }, { dtype = "int32" }), 2)
say("broadcast", b:tolist())
say("broadcast_dtype", { b.dtype.name })
local g = dist.all_gather(T({ { r, r + 0.25 } }, { dtype = "float64" }))
say("gather_shape", g.shape)
say("gather", g:flatten():tolist())
dist.barrier()
say("barrier", { "passed" })
local acc = T({ r, 10 * r }, { dtype = "float32" }):realize()
dist.all_reduce(acc, "sum", { out = acc })
say("in_place", acc:tolist())
local into = T.zeros({ 2 }, { dtype = "int64" }):realize()
dist.all_reduce(T({ r, -r }, { dtype = "int64" }), "min", { out = into })
say("into", into:tolist())
local bout = T.zeros({ 2 }):realize()
dist.broadcast(T({ r, r }, { dtype = "float32" }), 2, { out = bout })
say("broadcast_out", bout:tolist())
local gout = T.zeros({ 2, 1 }):realize()
dist.all_gather(T({ r }, { dtype = "float32" }), { out = gout })
say("gather_out", gout:flatten():tolist())
-- started, then other work, then waited for: a sum into a kept tensor, a mean into new storage,
-- and one dropped while pending (collected: it waits first)
local a_in = T.full({ 300000 }, r, { dtype = "float32" }):realize()
local a_out = T.zeros({ 300000 }):realize()
local w1 = dist.all_reduce(a_in, "sum", { out = a_out, async_op = true })
local w2 = dist.all_reduce(T({ 2 * r, 4 * r }, { dtype = "float64" }), "mean", { async_op = true })
local busy = (T.ones({ 64, 64 }):matmul(T.ones({ 64, 64 })) * r):sum():item()
say("async_other", { busy })
local polled = w1:is_completed() or w1:is_completed()
say("async_types", { getmetatable(w1).__name, type(polled) })
local s1 = w1:wait()
say("async_sum", { tostring(rawequal(s1, a_out)), a_out:min():item(), a_out:max():item(), tostring(w1:is_completed()) })
say("async_mean", w2:wait():tolist())
dist.all_reduce(T({ r }, { dtype = "int32" }), "max", { async_op = true })
collectgarbage()
collectgarbage()
say("async_dropped", { dist.all_reduce(T({ r }, { dtype = "int32" }), "sum"):item() })
local big = dist.all_reduce(T.full({ 1000000 }, r, { dtype = "float32" }))
say("big", { big.shape[1], big:min():item(), big:max():item(), big:sum():item() })
-- 32 MiB: from this size the call is MPI's non-blocking all-reduce, waited for (mpi_world.c)
local huge = T.full({ 8388608 }, r, { dtype = "float32" }):realize()
dist.all_reduce(huge, "mean", { out = huge })
say("huge", { huge:min():item(), huge:max():item() })
local binding, bufs = require "tcl.mpi", require "tcl.schedule.buffers"
local function storage(t) return bufs.get(bufs.viewed(t:realize().uop)) end
local s3, s2 = storage(T({ 1, 2, 3 }, { dtype = "float32" })), storage(T({ 1, 2 }, { dtype = "float32" }))
for _, case in ipairs {
  { "binding_out", function() binding.all_reduce(s3, "sum", s2) end },
  { "binding_start_out", function() binding.all_reduce_start(s3, "sum", s2) end },
  { "binding_op", function() binding.all_reduce_start(s3, "prod") end },
  { "root0", function() dist.broadcast(f, 0) end },
  { "root3", function() dist.broadcast(f, 3) end },
  { "bad_op", function() dist.all_reduce(f, "prod") end },
  { "non_tensor", function() dist.all_reduce("x") end },
} do
  local ok, e = pcall(case[2])
  say(case[1], { ok and "no error" or (tostring(e):gsub("^[^:]*:%d+: ", "")) })
end
]], 2)
      results = by_rank(out)
      return results
    end

    it("runs every rank to the end", function()
      job()
      assert.are.equal(0, status, out .. err)
      assert.are.equal("1,2", results[1].world)
      assert.are.equal("2,2", results[2].world)
    end)

    it("all_reduce: sum, mean, max and min of float32 and int64, exact, the same on every rank", function()
      local expected = {
        f32_sum = "3.0,-6.0,1.5,20.0", f32_mean = "1.5,-3.0,0.75,10.0",
        f32_max = "2.0,-2.0,1.0,10.0", f32_min = "1.0,-4.0,0.5,10.0",
        -- the integer mean rounds toward zero: (-1 + -2) / 2 = -1
        i64_sum = "9,-3,3000000000000", i64_mean = "4,-1,1500000000000",
        i64_max = "6,-1,2000000000000", i64_min = "3,-2,1000000000000",
        default_op = "9,-3,3000000000000",
      }
      for rank = 1, 2 do
        for key, value in pairs(expected) do
          assert.are.equal(value, job()[rank][key], "rank " .. rank .. " " .. key)
        end
      end
      -- the input keeps its values
      assert.are.equal("1.0,-2.0,0.5,10.0", results[1].input_after)
      assert.are.equal("2.0,-4.0,1.0,10.0", results[2].input_after)
    end)

    it("broadcast: root 2's values on every rank, dtype kept", function()
      for rank = 1, 2 do
        assert.are.equal("20,40,60", job()[rank].broadcast)
        assert.are.equal("int32", results[rank].broadcast_dtype)
      end
    end)

    it("all_gather: a new leading dim of world_size, in rank order", function()
      for rank = 1, 2 do
        assert.are.equal("2,1,2", job()[rank].gather_shape)
        assert.are.equal("1.0,1.25,2.0,2.25", results[rank].gather)
      end
    end)

    -- every rank printed these values under these keys
    local function on_every_rank(expected)
      for rank = 1, 2 do
        for key, value in pairs(expected) do
          assert.are.equal(value, job()[rank][key], "rank " .. rank .. " " .. key)
        end
      end
    end

    it("writes into out in place on every rank (all_reduce into itself, broadcast, all_gather)", function()
      on_every_rank { in_place = "3.0,30.0", into = "1,-2", broadcast_out = "2.0,2.0", gather_out = "1.0,2.0" }
    end)

    it("all_reduce with async_op: started, other work, then waited for; a dropped Work waits when collected",
      function()
      on_every_rank {
        async_types = "tcl.distributed.Work,boolean",
        async_sum = "true,3.0,3.0,true", async_mean = "3.0,6.0", async_dropped = "3",
      }
      assert.are.equal("262144.0", results[1].async_other) -- 64^3 x rank
      assert.are.equal("524288.0", results[2].async_other)
    end)

    it("barrier, and all_reduces of a million elements and of 32 MiB", function()
      for rank = 1, 2 do
        assert.are.equal("passed", job()[rank].barrier)
        assert.are.equal("1000000,3.0,3.0,3000000.0", results[rank].big)
        assert.are.equal("1.5,1.5", results[rank].huge)
      end
    end)

    it("refuses root 0, a bad op, a non-tensor and mismatched buffers with exact messages", function()
      on_every_rank {
        root0 = "broadcast: root 0 is not a rank: ranks count from 1 (1 to 2)",
        root3 = "broadcast: root 3 is not a rank (1 to 2)",
        bad_op = "all_reduce: op must be 'sum', 'mean', 'max' or 'min', got prod",
        non_tensor = "all_reduce: expected a tensor, got string",
        -- the binding itself (tcl.mpi), over runtime buffers
        binding_out = "mpi.all_reduce: the output buffer (float32, 2 elements) differs from the input (float32, 3)",
        binding_start_out = "mpi.all_reduce_start: the output buffer (float32, 2 elements) differs from the input "
          .. "(float32, 3)",
        binding_op = "bad argument #2 to 'all_reduce_start' (invalid option 'prod')",
      }
    end)
  end)

  describe("failures in a 2-rank job", function()
    local before = [[
local tcl = require "tcl"
local dist = tcl.distributed
local r = dist.rank()
]]
    local collective = [[
print("R " .. r .. " sum " .. dist.all_reduce(tcl.Tensor({ 1.0 })):item())
]]

    it("a rank that raises an error ends the job at once, naming the error", function()
      assert.is_true(has_mpirun(), "mpirun not found: install openmpi-bin (scripts/setup.sh)")
      local status, out, err, seconds = mpirun(before .. 'if r == 2 then error("rank 2 fails here") end\n'
        .. collective, 2, { TCL_DIST_TIMEOUT = "50" })
      assert.are_not.equal(0, status)
      assert.are_not.equal(124, status, "the job hung until timeout 60")
      assert.is_true(seconds < 30, "the job took " .. seconds .. " s")
      assert.is_truthy(err:find("rank 2 fails here", 1, true), err)
      assert.is_nil(out:find("R 1 sum", 1, true), out) -- rank 1 never saw a result
    end)

    it("a rank that exits before a collective ends the job, and mpirun says which", function()
      assert.is_true(has_mpirun(), "mpirun not found: install openmpi-bin (scripts/setup.sh)")
      local status, out, err, seconds = mpirun(before .. "if r == 2 then os.exit(3) end\n" .. collective, 2,
        { TCL_DIST_TIMEOUT = "50" })
      assert.are_not.equal(0, status)
      assert.are_not.equal(124, status, "the job hung until timeout 60")
      assert.is_true(seconds < 30, "the job took " .. seconds .. " s")
      assert.is_truthy(err:find("Exit code:    3", 1, true), err)
      assert.is_nil(out:find("R 1 sum", 1, true), out)
    end)

    it("a library that cannot be loaded is an error naming it", function()
      assert.is_true(has_mpirun(), "mpirun not found: install openmpi-bin (scripts/setup.sh)")
      local status, _, err = mpirun('print(require("tcl").distributed.rank())', 1,
        { TCL_MPI_LIBRARY = "/nonexistent/libmpi.so" })
      assert.are_not.equal(0, status)
      assert.is_truthy(err:find("init: MPI: cannot load the MPI library /nonexistent/libmpi.so (", 1, true), err)
    end)

    it("a rank that never reaches the collective: the others' timeout ends the job with our message", function()
      assert.is_true(has_mpirun(), "mpirun not found: install openmpi-bin (scripts/setup.sh)")
      local status, out, err, seconds = mpirun(before .. 'if r == 2 then os.execute("sleep 20") end\n' .. collective,
        2, { TCL_DIST_TIMEOUT = "3" })
      assert.are_not.equal(0, status)
      assert.are_not.equal(124, status, "the job hung until timeout 60")
      assert.is_true(seconds >= 3 and seconds < 15, "the job took " .. seconds .. " s")
      assert.is_truthy(err:find("tcl: rank 1 of 2: all_reduce: no answer from the other ranks within 3 s "
        .. "(a rank may have failed); aborting the job", 1, true), err)
      assert.is_nil(out:find("R 1 sum", 1, true), out)
    end)
  end)
end)
