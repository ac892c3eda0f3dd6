-- spec/devices/cuda_instances_spec.lua — several CUDA devices in one process: "CUDA:N" is the
-- GPU of ordinal N-1 (tcl.devices), each with its own context, queue and memory (tcl.cuda,
-- src/runtime/cuda/cuda_driver.c); kernels compiled once and loaded on each GPU they run on
-- (src/runtime/gpu/gpu_program.c); copies between GPUs as peer copies; sharding over GPUs;
-- NCCL on the tensor's GPU (tcl.distributed.nccl).
--
-- Child `tcl` processes load the stand-in driver (build/tests/libmock_cuda.so, through
-- TCL_CUDA_DRIVER) with MOCK_CUDA_DEVICES=2: its memory is host memory kept per device, copies
-- really move bytes, kernels do not run but every launch, allocation, free, module load and
-- peer copy is recorded with the device it happened on (" dev <n>", 1-based as tcl names them)
-- in MOCK_CUDA_LOG, and it refuses what a GPU would (a launch on another device's memory or
-- with a module loaded in another context). The kernel checks need NVRTC (else pending).
local helper = require "spec.support.helper"
local contract = require "spec.support.gpu_device_contract"

local MOCK = helper.build_dir .. "/tests/libmock_cuda.so"
local MOCK_NCCL = helper.build_dir .. "/tests/libmock_nccl.so"
local child, child_ok = contract.child, contract.child_ok

-- What each child chunk starts with: check(ok, what), fails(message, f, ...) (the exact
-- message, without a position) and mark(text), a line in the mock's log.
local PRELUDE = [[
  local function check(ok, what) if not ok then error(what, 2) end end
  local function fails(message, f, ...)
    local ok, err = pcall(f, ...)
    err = tostring(err):gsub("^[^:]*:%d+: ", "")
    check(not ok and err == message, "expected '" .. message .. "', got " .. tostring(err))
  end
  local function mark(text)
    local f = assert(io.open(os.getenv("MOCK_CUDA_LOG"), "a"))
    f:write("mark ", text, "\n")
    f:close()
  end
]]

-- The lines of a log.
local function lines_of(text)
  local lines = {}
  for line in text:gmatch("[^\n]+") do lines[#lines + 1] = line end
  return lines
end

-- The lines between "mark <from>" and "mark <to>" (neither included).
local function between(text, from, to)
  local out, inside = {}, false
  for _, line in ipairs(lines_of(text)) do
    if line == "mark " .. to then break end
    if inside then out[#out + 1] = line end
    if line == "mark " .. from then inside = true end
  end
  return out
end

-- The lines that start with prefix and end with suffix (suffix "": any end).
local function matching(lines, prefix, suffix)
  local out = {}
  for _, line in ipairs(lines) do
    if line:sub(1, #prefix) == prefix and (suffix == "" or line:sub(-#suffix) == suffix) then out[#out + 1] = line end
  end
  return out
end

describe("several CUDA devices on the mock driver", function()
  local log, cache
  before_each(function()
    log, cache = os.tmpname(), os.tmpname()
    os.remove(log)
    os.remove(cache)
  end)
  after_each(function()
    os.remove(log)
    helper.run("rm -rf " .. helper.shell_quote(cache))
  end)

  local function have_mock()
    if helper.exists(MOCK) then return true end
    pending("the mock driver is not built (" .. MOCK .. ": cmake --build build)")
    return false
  end
  local function have_nvrtc()
    local have, why = require("tcl.nvrtc").available()
    if not have then pending("NVRTC is not available: " .. tostring(why)) end
    return have
  end

  -- the mock with `devices` GPUs, no cache of freed memory (every free reaches the driver) and a
  -- kernel cache of its own (every kernel is compiled in the child)
  local function env(devices, extra)
    return string.format("TCL_CUDA_DRIVER=%s MOCK_CUDA_LOG=%s MOCK_CUDA_DEVICES=%d TCL_CUDA_CACHE_MB=0 TCL_CACHE=%s %s",
      helper.shell_quote(MOCK), helper.shell_quote(log), devices, helper.shell_quote(cache), extra or "")
  end

  it("copies values CPU -> CUDA:2 -> CUDA -> CPU exactly, the GPU-to-GPU copy as a peer copy that profiles name",
    function()
    if not have_mock() then return end
    child_ok(env(2), PRELUDE .. [[
      local data = { 1.5, -2, 3.25, 1e-30, -7e20, 0.1 }
      local x = Tensor(data):realize()
      local back
      local report = tcl.profile(function() back = x:to("cuda:2"):to("CUDA"):to("CPU"):realize() end)
      local got, want = back:tolist(), x:tolist() -- float32 values, as stored
      for i = 1, #want do check(got[i] == want[i], i .. ": " .. tostring(got[i])) end
      local names = {}
      for _, c in ipairs(report.copies) do names[#names + 1] = c.name .. " " .. c.bytes end
      check(table.concat(names, ", ") == "copy CPU->CUDA:2 24, copy CUDA:2->CUDA 24, copy CUDA->CPU 24",
        table.concat(names, ", "))
      for _, dtype in ipairs { "int64", "float16", "uint8" } do
        local t = Tensor({ 7, 1, 9, 200 }, { dtype = dtype })
        local got = t:to("CUDA:2"):to("CUDA"):to("CPU"):tolist()
        check(table.concat(got, " ") == table.concat(t:tolist(), " "), dtype .. ": " .. table.concat(got, " "))
      end
      -- the module's buffers name their device; a copy between two moves the bytes
      local cuda = require "tcl.cuda"
      local a, b = cuda.buffer("int32", 3, "CUDA:2"), cuda.buffer("int32", 3)
      check(a.device == "CUDA:2" and b.device == "CUDA", a.device .. " " .. b.device)
      check(tostring(a) == "Buffer(CUDA:2, int32, 3)", tostring(a))
      a:write({ 4, -5, 6 })
      mark "peer"
      b:copy_from(a)
      mark "peered"
      check(table.concat(b:read(), " ") == "4 -5 6", table.concat(b:read(), " "))
      check(cuda.device("CUDA:2").ordinal == 1 and cuda.device().ordinal == 0, "ordinals")
      fails("cuda.buffer: 'METAL:2' is not a CUDA device (CUDA, CUDA:2, ...)", cuda.buffer, "int32", 1, "METAL:2")
      print "ok"
    ]])
    local text = helper.read(log)
    assert.are.same({ "peer 12 dev 2 -> dev 1" }, between(text, "peer", "peered"))
    -- float32, int64, float16, uint8 tensors, then the module's int32 buffers: each one peer copy
    assert.are.same({ "peer 24 dev 2 -> dev 1", "peer 32 dev 2 -> dev 1", "peer 8 dev 2 -> dev 1",
      "peer 4 dev 2 -> dev 1", "peer 12 dev 2 -> dev 1" }, matching(lines_of(text), "peer ", ""))
    assert.are.equal("exit allocations 0 contexts 0 modules 0 events 0", contract.last_line(text))
  end)

  it("launches a kernel on a CUDA:2 tensor on device 2, compiled once for both devices and loaded on each", function()
    if not have_mock() or not have_nvrtc() then return end
    child_ok(env(2), PRELUDE .. [[
      local stats = require("tcl.codegen.devices.cuda").stats
      local x = Tensor({ 1, 2, 3, 4 })
      mark "first"
      local one = (x:to("CUDA") * 3 + 1):realize()
      mark "second"
      local two = (x:to("CUDA:2") * 3 + 1):realize()
      mark "done"
      check(one.device == "CUDA" and two.device == "CUDA:2", one.device .. " " .. two.device)
      check(stats.compiled == 1, "NVRTC compiles: " .. stats.compiled)
      two = nil
      for _ = 1, 3 do -- results realized on CUDA:2 and dropped (the last realize's stay held)
        local t = (x:to("CUDA:2") * 3 + 1):realize()
        t = nil
        collectgarbage()
        collectgarbage()
      end
      tcl.synchronize()
      mark "freed"
      print "ok"
    ]])
    local text = helper.read(log)
    local first, second = between(text, "first", "second"), between(text, "second", "done")
    local launch1, launch2 = matching(first, "launch ", ""), matching(second, "launch ", "")
    assert.are.equal(1, #launch1, text)
    assert.are.equal(1, #launch2, text)
    assert.matches(" dev 1$", launch1[1])
    assert.matches(" dev 2$", launch2[1])
    assert.are.equal(launch1[1]:gsub(" dev 1$", ""), (launch2[1]:gsub(" dev 2$", ""))) -- the same kernel
    -- compiled once (the child counted NVRTC's compiles), the same image loaded in each context
    local load1, load2 = matching(first, "load ", " dev 1"), matching(second, "load ", " dev 2")
    assert.are.equal(1, #load1, text)
    assert.are.equal(1, #load2, text)
    assert.are.equal(load1[1]:match("^load (%d+)"), load2[1]:match("^load (%d+)"))
    -- everything of the CUDA:2 tensor is allocated and, once dropped, freed on device 2
    assert.are.same({}, matching(second, "alloc ", " dev 1"), text)
    local freed = between(text, "done", "freed")
    assert.are.equal(3, #matching(freed, "launch ", " dev 2"), text) -- the kernel cache's kernel
    assert.are.same({}, matching(freed, "load ", ""), text) -- loaded on both already
    assert.are.same({}, matching(freed, "alloc ", " dev 1"), text)
    assert.is_true(#matching(freed, "free", " dev 2") >= 4, text) -- two dropped results and their inputs
    assert.is_nil(text:find("launch [%w_]+: "), text) -- no launch the mock refused
    assert.are.equal("exit allocations 0 contexts 0 modules 0 events 0", contract.last_line(text))
  end)

  it("runs a sharded elementwise op over CUDA and CUDA:2 on both devices", function()
    if not have_mock() or not have_nvrtc() then return end
    child_ok(env(2), PRELUDE .. [[
      local x = Tensor({ 1, 2, 3, 4, 5, 6, 7, 8 }):shard({ "CUDA", "CUDA:2" }, 1)
      check(x.device[1] == "CUDA" and x.device[2] == "CUDA:2", "shard devices")
      mark "run"
      local y = (x * 2 - 1):realize()
      mark "done"
      check(y.device[2] == "CUDA:2", "result devices")
      print "ok"
    ]])
    local run = between(helper.read(log), "run", "done")
    local on1, on2 = matching(run, "launch ", " dev 1"), matching(run, "launch ", " dev 2")
    assert.are.equal(1, #on1, table.concat(run, "\n"))
    assert.are.equal(1, #on2, table.concat(run, "\n"))
    assert.matches(" grid 1 1 1 block 4 1 1 ", on1[1], 1, true) -- four rows each
    assert.matches(" grid 1 1 1 block 4 1 1 ", on2[1], 1, true)
  end)

  it("refuses a kernel over buffers on two devices, and the mock refuses a launch a GPU would", function()
    if not have_mock() then return end
    child_ok(env(2), PRELUDE .. [[
      local cuda = require "tcl.cuda"
      local code = ".version 8.0\n.visible .entry k(\n.param .u64 a,\n.param .u64 b\n)\n{ ret; }\n"
      local params = { { dtype = "float32", numel = 4 }, { dtype = "float32", numel = 4 } }
      local p = cuda.program(code, { name = "k", params = params })
      local a, b = cuda.buffer("float32", 4, "CUDA:2"), cuda.buffer("float32", 4)
      fails("kernel 'k': buffer 2 (slot 1) belongs to another CUDA device", p.run, p, { a, b })
      p:run({ a, cuda.buffer("float32", 4, 2) }) -- both on CUDA:2: loaded there, runs there
      p:run({ b, cuda.buffer("float32", 4) })
      print "ok"
    ]])
    local launches = matching(lines_of(helper.read(log)), "launch k", "")
    assert.are.same({ "launch k grid 1 1 1 block 1 1 1 shared 0 params 2 dev 2",
      "launch k grid 1 1 1 block 1 1 1 shared 0 params 2 dev 1" }, launches)
  end)

  it("names a device beyond the visible ones and their count at its first use", function()
    if not have_mock() then return end
    local status, _, err = child(env(2), "print(Tensor({ 1 }):to('CUDA:3'):tolist())")
    assert.are.equal(1, status)
    assert.matches("device 'CUDA:3': 2 CUDA devices are visible (CUDA to CUDA:2; CUDA_VISIBLE_DEVICES chooses them)",
      err, 1, true)
    assert.is_nil(err:find("names that library", 1, true)) -- the library is fine
    status, _, err = child(env(1), "print(Tensor({ 1 }):to('cuda:2'):tolist())")
    assert.are.equal(1, status)
    assert.matches("device 'CUDA:2': 1 CUDA device is visible (CUDA; CUDA_VISIBLE_DEVICES chooses them)", err, 1, true)
    child_ok(env(1), PRELUDE .. [[
      local cuda = require "tcl.cuda"
      fails("cuda.buffer: device 'CUDA:2': 1 CUDA device is visible (CUDA; CUDA_VISIBLE_DEVICES chooses them)",
        cuda.buffer, "float32", 1, "CUDA:2")
      -- METAL keeps one device; names keep tcl.devices' messages
      fails("Tensor: METAL:2: only one Metal device is supported yet", Tensor, { 1 }, { device = "METAL:2" })
      fails("Tensor: device 'CUDA:0': instances count from 1 (CUDA:1 is CUDA)", Tensor, { 1 }, { device = "CUDA:0" })
      print "ok"
    ]])
  end)

  it("reduces CUDA:2 storage with NCCL on device 2", function()
    if not have_mock() then return end
    if not helper.exists(MOCK_NCCL) then return pending("the stand-in NCCL is not built") end
    local nccl_log = os.tmpname()
    os.remove(nccl_log)
    child_ok(env(2, "TCL_NCCL_LIBRARY=" .. helper.shell_quote(MOCK_NCCL) .. " MOCK_NCCL_LOG="
      .. helper.shell_quote(nccl_log)), PRELUDE .. [[
      local nccl = require "tcl.distributed.nccl"
      local cuda = require "tcl.cuda"
      local s = cuda.buffer("float32", 3, "CUDA:2")
      s:write({ 1.5, -2, 4 })
      nccl.all_reduce(s, "sum")
      check(table.concat(s:read(), " ") == "1.5 -2.0 4.0", table.concat(s:read(), " "))
      local first = cuda.buffer("float32", 3)
      nccl.all_reduce(first, "sum")
      print "ok"
    ]])
    local text = helper.read(nccl_log)
    os.remove(nccl_log)
    local calls = {}
    for _, line in ipairs(lines_of(text)) do
      if line:match("^init") or line:match("^all_reduce") then calls[#calls + 1] = line end
    end
    assert.are.same({ "init nranks 1 rank 0 dev 2", "all_reduce count 3 type 7 op 0 in_place 1",
      "init nranks 1 rank 0 dev 1", "all_reduce count 3 type 7 op 0 in_place 1" }, calls)
  end)
end)
