-- spec/runtime/cpu_runtime_spec.lua — the CPU device's runtime services (src/runtime): the thread pool
-- (through the C program tests/c/pool_test and runtime.configure_cpu / cpu_threads), CPU
-- buffers and the per-state cache of their storage (also tests/c/cpu_buffer_test), and the on-disk cache
-- (runtime.cache_read / cache_write / cache_path), including corrupted, truncated and foreign
-- entries and several processes writing one entry while this one reads it.
local helper = require "spec.support.helper"
local rt = require "tcl.runtime"
local tcl = require "tcl"

local q = helper.shell_quote
local F32, F64, I8, I64, BOOL = tcl.dtype "float32", tcl.dtype "float64", tcl.dtype "int8", tcl.dtype "int64",
  tcl.dtype "bool"

local lua_path = helper.root .. "/lua/?.lua;" .. helper.root .. "/lua/?/init.lua"
local lua_cpath = helper.build_dir .. "/lua/?.so"
local lua_env = "LUA_PATH=" .. q(lua_path) .. " LUA_CPATH=" .. q(lua_cpath)

-- Runs Lua code in a fresh lua5.4 process (a state of its own); returns status, stdout, stderr.
local function run_lua_process(code)
  return helper.run(lua_env .. " lua5.4 -e " .. q(code))
end

local error_of = helper.error_of

-- A fresh empty directory under /tmp, removed by the caller with remove_tree.
local fresh_dir = helper.fresh_dir_path

local function remove_tree(path)
  os.execute("rm -rf " .. q(path))
end

local function file_bytes(path) return helper.read(path) end

-- Replaces the byte at 0-based offset of the file with another value.
local function flip_byte(path, offset)
  local s = file_bytes(path)
  local b = s:byte(offset + 1)
  helper.write(path, s:sub(1, offset) .. string.char((b + 1) % 256) .. s:sub(offset + 2))
end

describe("the CPU thread pool", function()
  local pool_test = helper.build_dir .. "/tests/pool_test"

  it("runs every part exactly once, for 1 to 8 threads and 0 to 100000 parts, nested runs included", function()
    assert.is_true(helper.exists(pool_test), "missing " .. pool_test)
    local status, stdout, stderr = helper.run(q(pool_test) .. " 300")
    assert.are.equal(0, status, stdout .. stderr)
    local passed, failed = stdout:match("pool_test: (%d+) passed, (%d+) failed\n$")
    assert.is_not_nil(passed, "no summary line in:\n" .. stdout)
    assert.are.equal("0", failed)
    assert.is_true(tonumber(passed) >= 70, "only " .. passed .. " checks ran")
    -- the overhead of a back-to-back run of an empty fn on 2 threads is printed, in microseconds
    local warm = stdout:match("run overhead 2 threads: ([%d.]+) us back to back")
    assert.is_not_nil(warm, stdout)
    assert.are.equal("", stderr)
  end)

  it("has as many threads as configured, before it starts; the default is the cores", function()
    local status, out, err = run_lua_process([[
      local rt = require "tcl.runtime"
      local n, started = rt.cpu_threads()
      assert(n >= 1 and started == false, "default " .. tostring(n))
      rt.configure_cpu { threads = 3 }
      assert(rt.cpu_threads() == 3)
      rt.configure_cpu {}                       -- back to the default
      assert(rt.cpu_threads() == n)
      rt.configure_cpu { threads = 2 }
      local m, now_started = rt.cpu_threads(true)
      assert(m == 2 and now_started == true)
      rt.configure_cpu { threads = 2 }          -- the same count again is fine
      io.write(n, " ", select(2, pcall(rt.configure_cpu, { threads = 4 })))
    ]])
    assert.are.equal(0, status, out .. err)
    local cores, message = out:match("^(%d+) (.*)$")
    assert.is_not_nil(cores, out)
    local nproc_status, nproc = helper.run("nproc")
    if nproc_status == 0 then assert.are.equal(tonumber(nproc), tonumber(cores)) end
    assert.are.equal("runtime.configure_cpu: the CPU thread pool already runs with 2 threads; "
      .. "configure threads (4 asked) before the first CPU run", message)
  end)

  it("refuses bad thread counts and unknown options", function()
    -- checked in a state of its own: this one's pool may already run for other specs
    local status, out, err = run_lua_process([[
      local rt = require "tcl.runtime"
      for _, opts in ipairs { { threads = 0 }, { threads = -1 }, { threads = 1025 }, { threads = 2.5 },
                              { threads = "4" }, { thread = 4 } } do
        io.write(select(2, pcall(rt.configure_cpu, opts)), "\n")
      end
      io.write(select(2, pcall(rt.configure_cpu, 4)), "\n")
    ]])
    assert.are.equal(0, status, out .. err)
    local lines = {}
    for line in out:gmatch("[^\n]+") do lines[#lines + 1] = line end
    assert.are.equal("runtime.configure_cpu: threads must be between 1 and 1024, got 0", lines[1])
    assert.are.equal("runtime.configure_cpu: threads must be between 1 and 1024, got -1", lines[2])
    assert.are.equal("runtime.configure_cpu: threads must be between 1 and 1024, got 1025", lines[3])
    assert.are.equal("runtime.configure_cpu: threads must be an integer, got 2.5", lines[4])
    assert.are.equal("runtime.configure_cpu: threads must be an integer, got 4", lines[5])
    assert.are.equal("runtime.configure_cpu: unknown option thread (known: threads, device)", lines[6])
    assert.is_truthy(lines[7]:find("table expected", 1, true), lines[7])
  end)

  it("is joined when its state closes (a process with a started pool exits)", function()
    local status, out, err = run_lua_process([[
      local rt = require "tcl.runtime"
      rt.configure_cpu { threads = 4 }
      assert(select(2, rt.cpu_threads(true)))
      io.write("started")
    ]])
    assert.are.equal(0, status, out .. err)
    assert.are.equal("started", out)
  end)
end)

describe("CPU buffers", function()
  it("are a device of the runtime, as large as the host can address", function()
    assert.are.same({ "EMU", "CPU", "CUDA", "METAL" }, rt.devices)
    assert.are.equal(1 << 47, rt.max_buffer_bytes("CPU"))
    local b = rt.buffer(F32, 3, "CPU")
    assert.are.equal("CPU", b.device)
    assert.are.equal(12, b.nbytes)
    assert.are.equal("Buffer(CPU, float32, 3)", tostring(b))
  end)

  it("start zero-filled and round-trip writes, reads and copies of every kind of dtype", function()
    assert.are.same({ 0.0, 0.0, 0.0 }, rt.buffer(F32, 3, "CPU"):read())
    assert.are.same({ false, false }, rt.buffer(BOOL, 2, "CPU"):read())
    local a = rt.buffer(F64, 4, "CPU"):write { 1.5, -2.25, 1e300, -0.0 }
    assert.are.same({ 1.5, -2.25, 1e300, -0.0 }, a:read())
    local i = rt.buffer(I64, 3, "CPU"):write { math.mininteger, -1, math.maxinteger }
    assert.are.same({ math.mininteger, -1, math.maxinteger }, i:read())
    local c = rt.buffer(I8, 3, "CPU"):write { 127, 128, -129 } -- CAST's wraparound
    assert.are.same({ 127, -128, 127 }, c:read())
    local copy = rt.buffer(F64, 4, "CPU"):copy_from(a)
    assert.are.same(a:read(), copy:read())
    -- between devices too: host memory on both sides
    local emu = rt.buffer(F64, 4, "EMU"):copy_from(a)
    assert.are.same(a:read(), emu:read())
    assert.are.same(a:read(), rt.buffer(F64, 4, "CPU"):copy_from(emu):read())
  end)

  it("are 64-byte aligned, reuse their storage, and outlive their cache (tests/c/cpu_buffer_test)", function()
    local program = helper.build_dir .. "/tests/cpu_buffer_test"
    assert.is_true(helper.exists(program), "missing " .. program)
    local status, stdout, stderr = helper.run(q(program))
    assert.are.equal(0, status, stdout .. stderr)
    local passed, failed = stdout:match("cpu_buffer_test: (%d+) passed, (%d+) failed\n$")
    assert.is_not_nil(passed, stdout)
    assert.are.equal("0", failed)
    assert.is_true(tonumber(passed) >= 70, "only " .. passed .. " checks ran")
  end)

  it("may be empty", function()
    local z = rt.buffer(F32, 0, "CPU")
    assert.are.equal(0, z.nbytes)
    assert.are.same({}, z:read())
    assert.are.same({}, z:write({}):read())
    assert.are.equal(z, z:copy_from(rt.buffer(F32, 0, "CPU")))
  end)

  it("name the size when they are too large or memory runs out", function()
    assert.are.equal("runtime.buffer: a buffer of 70368744177664 float32 elements is larger than CPU can "
      .. "address (140737488355328 bytes)", error_of(rt.buffer, F32, 1 << 46, "CPU"))
    -- 64 TiB: within what the host addresses, more than this machine has
    assert.are.equal("runtime.buffer: out of memory allocating 70368744177664 bytes for a buffer of "
      .. "17592186044416 float32 elements on CPU", error_of(rt.buffer, F32, 1 << 44, "CPU"))
  end)

  it("reuse freed storage of the same size, zero-filled again; EMU buffers never do", function()
    -- in a state of its own: this one's cache may be full of what earlier specs freed, and a
    -- full cache keeps nothing more (the premise of reuse)
    local status, out, err = run_lua_process([[
      local rt = require "tcl.runtime"
      local tcl = require "tcl"
      local I64, F64 = tcl.dtype "int64", tcl.dtype "float64"
      local before = rt.buffer_cache_stats()
      assert(before.max_bytes > 0 and before.max_bytes <= 256 << 20, "max_bytes " .. before.max_bytes)
      local numel = 1000 + math.random(1, 1000)
      local b = rt.buffer(I64, numel, "CPU")
      local ones = {}
      for k = 1, numel do ones[k] = -1 end
      b:write(ones)
      b = nil
      collectgarbage()
      collectgarbage()
      local held = rt.buffer_cache_stats()
      assert(held.held_blocks >= 1 and held.held_bytes >= numel * 8, "the storage went back to the cache")
      local again = rt.buffer(I64, numel, "CPU")
      local after = rt.buffer_cache_stats()
      assert(held.reused + 1 == after.reused, "reused " .. held.reused .. " -> " .. after.reused)
      for k, v in ipairs(again:read()) do
        if v ~= 0 then error("element " .. k .. " of a reused buffer is " .. v) end
      end
      -- the same storage serves another dtype of the same byte size
      again = nil
      collectgarbage()
      collectgarbage()
      local as_f64 = rt.buffer(F64, numel, "CPU")
      assert(after.reused + 1 == rt.buffer_cache_stats().reused, "float64 from the cache")
      assert(as_f64:read()[numel] == 0.0)
      -- EMU: never from the cache
      local emu_before = rt.buffer_cache_stats().reused
      do
        local e = rt.buffer(F64, numel, "EMU")
        assert(e.device == "EMU")
      end
      collectgarbage()
      rt.buffer(F64, numel, "EMU")
      assert(emu_before == rt.buffer_cache_stats().reused, "EMU from the cache")
      print("reuse ok")
    ]])
    assert.are.equal(0, status, err)
    assert.are.equal("reuse ok\n", out)
  end)

  it("keep at most the cache's bound of freed storage", function()
    collectgarbage()
    local max = rt.buffer_cache_stats().max_bytes
    -- three buffers of 40% of the bound each: freeing all three cannot keep all three
    local numel = (max * 2 // 5) // 8
    do
      local bufs = { rt.buffer(I64, numel, "CPU"), rt.buffer(I64, numel, "CPU"), rt.buffer(I64, numel, "CPU") }
      assert.are.equal(3, #bufs)
    end
    collectgarbage()
    collectgarbage()
    local s = rt.buffer_cache_stats()
    assert.is_true(s.held_bytes <= s.max_bytes, s.held_bytes .. " > " .. s.max_bytes)
  end)
end)

describe("the disk cache", function()
  local dir
  before_each(function() dir = fresh_dir() end)
  after_each(function() remove_tree(dir) end)

  it("round-trips byte strings (empty, binary, large) and creates its directory with mode 0700", function()
    local nested = dir .. "/a/b"
    assert.is_nil(rt.cache_read(nested, "key"))
    local binary = {}
    for k = 0, 255 do binary[#binary + 1] = string.char(k) end
    binary = table.concat(binary)
    local large = string.rep("0123456789abcdef", 1 << 16)
    for key, bytes in pairs { empty = "", binary = binary, large = large, ["k\0with nul"] = "x" } do
      assert.is_true(rt.cache_write(nested, key, bytes))
      assert.are.equal(bytes, rt.cache_read(nested, key))
    end
    local _, mode = helper.run("stat -c %a " .. q(dir) .. " " .. q(dir .. "/a") .. " " .. q(nested))
    assert.are.equal("700\n700\n700\n", mode)
    -- a rewrite replaces the entry
    assert.is_true(rt.cache_write(nested, "binary", "new"))
    assert.are.equal("new", rt.cache_read(nested, "binary"))
    -- no temporary files stay behind
    local _, listing = helper.run("ls -A " .. q(nested))
    assert.is_nil(listing:find(".tmp", 1, true), listing)
  end)

  it("names files by a hash of the key, never by the key", function()
    local path = rt.cache_path(dir, "../../etc/passwd")
    assert.is_truthy(path:match("^" .. dir:gsub("%p", "%%%0") .. "/%x+$"), path)
    assert.are.equal(32, #path:match("/(%x+)$"))
    assert.are_not.equal(path, rt.cache_path(dir, "../../etc/passwd2"))
    assert.is_true(rt.cache_write(dir, "../../etc/passwd", "x"))
    assert.is_true(helper.exists(path))
  end)

  it("reads a corrupted, truncated, extended or emptied entry as absent, and a write repairs it", function()
    local payload = string.rep("payload!", 100)
    -- header fields: magic 0, version 4, key hash 8, length 16, checksum 24; payload from 32
    for _, offset in ipairs { 0, 3, 4, 8, 15, 16, 23, 24, 31, 32, 32 + 400, 32 + #payload - 1 } do
      assert.is_true(rt.cache_write(dir, "k", payload))
      local path = rt.cache_path(dir, "k")
      flip_byte(path, offset)
      assert.is_nil(rt.cache_read(dir, "k"), "byte " .. offset .. " changed")
      assert.is_true(rt.cache_write(dir, "k", payload))
      assert.are.equal(payload, rt.cache_read(dir, "k"))
    end
    local path = rt.cache_path(dir, "k")
    local whole = file_bytes(path)
    for _, cut in ipairs { 0, 1, 31, 32, #whole - 1 } do
      helper.write(path, whole:sub(1, cut))
      assert.is_nil(rt.cache_read(dir, "k"), "cut to " .. cut .. " bytes")
    end
    helper.write(path, whole .. "x")
    assert.is_nil(rt.cache_read(dir, "k"), "one byte too many")
    helper.write(path, whole)
    assert.are.equal(payload, rt.cache_read(dir, "k"))
  end)

  it("reads another key's entry under this key's file name as absent", function()
    assert.is_true(rt.cache_write(dir, "key A", "payload of A"))
    helper.write(rt.cache_path(dir, "key B"), file_bytes(rt.cache_path(dir, "key A")))
    assert.is_nil(rt.cache_read(dir, "key B"))
    assert.are.equal("payload of A", rt.cache_read(dir, "key A"))
  end)

  it("reads a directory or another kind of file at the entry's name as absent", function()
    os.execute("mkdir -m 700 " .. q(dir) .. " && mkdir " .. q(rt.cache_path(dir, "d")))
    assert.is_nil(rt.cache_read(dir, "d"))
    helper.write(rt.cache_path(dir, "t"), "TCLK")
    assert.is_nil(rt.cache_read(dir, "t"))
  end)

  it("reads a FIFO at the entry's name as absent, without blocking on it", function()
    local fifo = rt.cache_path(dir, "f")
    assert.are.equal(0, (helper.run("mkdir -m 700 -p " .. q(dir) .. " && mkfifo " .. q(fifo))))
    -- in a process of its own under a timeout: a regression fails instead of hanging the suite
    local status, out = helper.run(lua_env .. " timeout 20 lua5.4 -e "
      .. q(("print(require('tcl.runtime').cache_read(%q, 'f'))"):format(dir)))
    assert.are.equal(0, status)
    assert.are.equal("nil\n", out)
  end)

  it("reports a directory it cannot write to, without raising", function()
    local ok, message = rt.cache_write("/proc/no/such/dir", "k", "x")
    assert.is_nil(ok)
    assert.are.equal("cannot create cache directory /proc/no: No such file or directory", message)
    helper.write(dir, "a file, not a directory")
    ok, message = rt.cache_write(dir, "k", "x")
    assert.is_nil(ok)
    assert.are.equal("cache directory " .. dir .. " is not a directory", message)
    os.remove(dir)
    ok, message = rt.cache_write("/proc/self", "k", "x") -- a directory nobody may create files in
    assert.is_nil(ok)
    assert.is_truthy(message:find("^cannot write to cache directory /proc/self: "), message)
    assert.is_nil(rt.cache_read("/proc/no/such/dir", "k"))
    assert.are.equal("the cache directory is an empty string", select(2, rt.cache_write("", "k", "x")))
    assert.is_nil(rt.cache_read("", "k"))
  end)

  it("never shows a broken entry while several processes write it", function()
    -- four writers rewrite one key with their own 256 KiB payloads (a write that large is not
    -- atomic), while this process reads it: every read is nil (before the first rename) or
    -- exactly one writer's payload
    local writers, rounds = 4, 40
    local writer = [[
      local rt = require "tcl.runtime"
      local dir, id, rounds = arg[1], tonumber(arg[2]), tonumber(arg[3])
      local payload = string.rep(string.char(65 + id), 256 * 1024)
      for _ = 1, rounds do assert(rt.cache_write(dir, "shared key", payload)) end
    ]]
    local script = dir .. ".writer.lua"
    helper.write(script, writer)
    local done = dir .. ".done"
    local cmd = {}
    for id = 1, writers do
      cmd[#cmd + 1] = lua_env .. " lua5.4 " .. q(script) .. " " .. q(dir) .. " " .. id .. " " .. rounds .. " &"
    end
    cmd[#cmd + 1] = "wait; touch " .. q(done)
    os.execute("( " .. table.concat(cmd, " ") .. " ) >/dev/null 2>&1 &")
    local valid = {}
    for id = 1, writers do valid[string.rep(string.char(65 + id), 256 * 1024)] = id end
    local reads, hits = 0, 0
    repeat
      local finished = helper.exists(done)
      local got = rt.cache_read(dir, "shared key")
      reads = reads + 1
      if got ~= nil then
        assert.is_not_nil(valid[got], "a read returned a mixture of " .. #got .. " bytes")
        hits = hits + 1
      end
    until finished
    os.remove(done)
    os.remove(script)
    assert.is_true(hits >= 1, "no read saw an entry (" .. reads .. " reads)")
    assert.is_not_nil(valid[rt.cache_read(dir, "shared key")])
    local _, listing = helper.run("ls -A " .. q(dir))
    assert.are.equal(rt.cache_path(dir, "shared key"):match("[^/]+$") .. "\n", listing)
  end)
end)
