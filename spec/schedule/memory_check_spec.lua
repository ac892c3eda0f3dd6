-- spec/schedule/memory_check_spec.lua — a realize whose new host buffers need more memory than there is
-- room for is refused before anything is compiled, allocated or run (issue 33, item 14: three
-- 8 GiB buffers on a 23 GiB machine were killed by the OOM killer after 90 s): against
-- TCL_MEMORY_LIMIT_MB at any size, against MemAvailable and RLIMIT_AS's room from 256 MiB of new
-- buffers; buffers a tensor already holds do not count (tcl.schedule.memory_check).
local helper = require "spec.support.helper"
local tcl = require "tcl"
local buffers = require "tcl.schedule.buffers"
local memory_check = require "tcl.schedule.memory_check"
local lower = require "tcl.codegen.driver.lower"
local Tensor = tcl.Tensor

local q = helper.shell_quote

local error_of = helper.error_of

local function proc_kib(path, field)
  local text = helper.read(path)
  return tonumber(text:match("\n" .. field .. ":%s*(%d+) kB"))
end

local function with_limit(bytes, fn)
  tcl.context { MEMORY_LIMIT_BYTES = bytes }(fn)
end

local MIB = 1 << 20

describe("the memory check before a realize", function()
  it("refuses new buffers past TCL_MEMORY_LIMIT_MB, naming the total, the largest buffers and the limit", function()
    with_limit(MIB, function()
      local built, allocated = lower.stats().built, buffers.stats().allocated
      assert.are.equal("realize: this realize needs 2097152 bytes (2.0 MiB) of new host memory for 1 buffer, more "
        .. "than TCL_MEMORY_LIMIT_MB allows: 1048576 bytes (1.0 MiB); the largest: float32 (512, 1024) of 2097152 "
        .. "bytes. Free the tensors you no longer need, raise TCL_MEMORY_LIMIT_MB or realize less at once",
        error_of(function() return (Tensor.ones(512, 1024) * 3):realize() end))
      assert.are.equal(built, lower.stats().built, "a kernel was compiled")
      assert.are.equal(allocated, buffers.stats().allocated, "a buffer was allocated")
      -- the empty inputs (shape unknown to the schedule: flat) are new too, the largest first
      assert.are.equal("realize: this realize needs 1703936 bytes (1.6 MiB) of new host memory for 3 buffers, more "
        .. "than TCL_MEMORY_LIMIT_MB allows: 1048576 bytes (1.0 MiB); the largest: float64 (8, 16384) of 1048576 "
        .. "bytes, float32 (131072) of 524288 bytes, int8 (131072) of 131072 bytes. Free the tensors you no longer "
        .. "need, raise TCL_MEMORY_LIMIT_MB or realize less at once",
        error_of(function()
          local a, b = Tensor.empty(131072), Tensor.empty(8, 16384, { dtype = "int8" })
          return (a:reshape(8, 16384):cast("float64") + b:cast("float64")):realize()
        end))
    end)
  end)

  it("counts only the buffers the realize allocates, not those tensors already hold", function()
    local a = Tensor.ones(256, 1024):realize() -- 1 MiB, held
    with_limit(MIB, function()
      local b = (a * 2):realize() -- 1 MiB new: at the limit, allowed
      assert.are.equal(2.0, b:sum():item() / (256 * 1024))
      assert.is_truthy(error_of(function() return Tensor.cat({ a, b }):realize() end):find(
        "^realize: this realize needs 2097152 bytes %(2%.0 MiB%) of new host memory for 1 buffer"))
    end)
  end)

  it("refuses three 8 GiB buffers on this machine at once, touching no memory", function()
    -- enough 2^31-element float32 inputs that, with the sum's own buffer, they exceed what is
    -- available (three on a 24 GiB machine)
    local available = proc_kib("/proc/meminfo", "MemAvailable") * 1024
    local inputs = math.max(2, available // (8 << 30) + 1)
    local rss = proc_kib("/proc/self/status", "VmRSS")
    -- buffers.stats counts the buffers alive, and the check collects garbage before it refuses:
    -- the earlier tests' unreferenced buffers are freed first, so a change of the count is an
    -- allocation
    collectgarbage()
    collectgarbage()
    buffers.collect()
    local built, allocated = lower.stats().built, buffers.stats().allocated
    -- no timing here (a loaded machine makes any bound flaky): that nothing was touched is
    -- checked below by the compile and allocation counts and the resident set
    local message = error_of(function()
      local sum = Tensor.empty(2 ^ 31)
      for _ = 2, inputs do sum = sum + Tensor.empty(2 ^ 31) end
      return sum:realize()
    end)
    local total = (inputs + 1) * (8 << 30)
    local named = string.rep("float32 (2147483648) of 8589934592 bytes", 3, ", ")
    local room = message:match(("^realize: this realize needs %d bytes %%(%.1f GiB%%) of new host memory for %d "
      .. "buffers, more than the memory available %%(MemAvailable in /proc/meminfo%%): (%%d+) bytes %%(%%d+%%.%%d "
      .. "GiB%%); the largest: %s%%. Free the tensors you no longer need or realize less at once$"):format(total,
      total / (1 << 30), inputs + 1, named:gsub("[%(%)%.]", "%%%0")))
    assert.is_not_nil(room, message)
    assert.is_true(math.abs(tonumber(room) - available) < (1 << 30), room .. " bytes vs " .. available)
    assert.are.equal(built, lower.stats().built, "a kernel was compiled")
    assert.are.equal(allocated, buffers.stats().allocated, "a buffer was allocated")
    assert.is_true(proc_kib("/proc/self/status", "VmRSS") - rss < 64 * 1024, "the resident set grew")
  end)

  it("reads the machine's memory only for a realize of more than 256 MiB of new buffers", function()
    local reads = 0
    local open = io.open
    io.open = function(path, ...) -- luacheck: ignore 122
      if tostring(path):find("^/proc/") then reads = reads + 1 end
      return open(path, ...)
    end
    local ok, err = pcall(function()
      assert.are.equal(256 * MIB, memory_check.MACHINE_CHECK_BYTES)
      Tensor.ones(1024, 1024):add(1):realize()
      assert.are.equal(0, reads)
      memory_check.MACHINE_CHECK_BYTES = MIB // 2
      Tensor.ones(1024, 1024):add(2):realize()
      assert.is_true(reads > 0)
    end)
    io.open = open -- luacheck: ignore 122
    memory_check.MACHINE_CHECK_BYTES = 256 * MIB
    if not ok then error(err, 0) end
  end)

  it("names RLIMIT_AS's room when the address space is what runs short (a tcl process under ulimit -v)", function()
    if helper.build_type() == "Sanitize" then
      pending("ASan reserves its shadow memory when a process starts, which ulimit -v forbids")
      return
    end
    local status, out, err = helper.run("ulimit -v 3000000 && env -u DEVICE -u TCLC_LUA_DIR TCL_LUA_DIR="
      .. q(helper.root .. "/lua") .. " " .. q(helper.tcl_bin) .. " -e "
      .. q("print((Tensor.empty(2^29) + 1):realize())"))
    assert.are_not.equal(0, status, out)
    assert.is_truthy(err:find("realize: this realize needs 4294967296 bytes (4.0 GiB) of new host memory for 2 "
      .. "buffers, more than the address space left under RLIMIT_AS: ", 1, true), err)
  end)

  it("reads TCL_MEMORY_LIMIT_MB when tcl loads", function()
    local code = "print(require('tcl.env').MEMORY_LIMIT_BYTES); print(Tensor.ones(256, 1024):add(1):realize())"
    local status, out, err = helper.run("env -u DEVICE -u TCLC_LUA_DIR TCL_MEMORY_LIMIT_MB=0.5 TCL_LUA_DIR="
      .. q(helper.root .. "/lua") .. " " .. q(helper.tcl_bin) .. " -e " .. q(code))
    assert.are_not.equal(0, status, out)
    assert.are.equal("524288\n", out)
    assert.is_truthy(err:find("more than TCL_MEMORY_LIMIT_MB allows: 524288 bytes (0.5 MiB)", 1, true), err)
  end)
end)
