-- spec/support/gpu_device_contract.lua — the one body of checks every GPU device's binding
-- passes on its stand-in driver (the mock CUDA driver, the Metal stand-in runtime): they share
-- one binding (src/runtime/gpu/lua_gpu.c over gpu_driver.h), so each device runs the same
-- chunks with its module's name. spec/devices/cuda_device_spec.lua and spec/devices/metal_device_spec.lua call
-- it inside their stand-in describe blocks; what is the device's own (its device() table, its
-- launch limits, its driver's record) stays in their files.
--
--   require("spec.support.gpu_device_contract").run({ it = it, assert = assert }, opts)
--
-- opts: module ("cuda": tcl.cuda), kind ("CUDA": "not a CUDA buffer"), device ("CUDA": the
-- buffers' .device), have_mock() (true, or false after marking the spec pending),
-- run_ok(code [, env]) (runs a Lua chunk in a child process on the stand-in, with more
-- environment assignments env; it must print "ok"),
-- log() (the stand-in's record of that run), clean(text, which) (asserts the record of the
-- "buffers" or "programs" check is clean, nothing held at exit, and what else the driver logs),
-- opened (a chunk that checks the device's facts, run after the first use opens
-- it), code (a kernel `k` of a float32 and an int32 buffer in the device's language),
-- program_checks (a chunk with more checks of the program p and the buffers a, b made of
-- code), recorded (the record line of the launch of p: grid 3 2 1, local size 32 4 1, 2
-- buffers), graph (the whole path from a tensor graph: { ready() (true, or false after
-- marking the spec pending), env (more environment for the child), to (t:to()'s name: "cuda"),
-- launch (the format of a printed launch: "launch %s grid %s block %s", entry and sizes),
-- check_program (a chunk that checks program p, its source in `source`), memory ("shared
-- memory"), markers (two strings a kernel that reduces through that memory has), record (what
-- follows a printed launch in the record: " shared 0 params "), after(env, code, launches)
-- (more checks, with the child's environment and chunk) }).
local helper = require "spec.support.helper"

local M = {}

-- Runs code (a Lua chunk) in a child process of the program bin (default: the build's tcl) with
-- the environment assignments env_text (DEVICE cleared unless env_text sets it); returns status,
-- stdout, stderr.
function M.child(env_text, code, bin)
  local path = os.tmpname()
  helper.write(path, code)
  local status, out, err = helper.run("DEVICE= " .. env_text .. " " .. helper.shell_quote(bin or helper.tcl_bin) ..
    " " .. helper.shell_quote(path))
  os.remove(path)
  return status, out, err
end

-- A child run that must succeed and print "ok" last.
function M.child_ok(env_text, code, bin)
  local status, out, err = M.child(env_text, code, bin)
  assert(status == 0 and out:match("ok\n$"), string.format("child failed (%d):\n%s\n%s", status, out, err))
  return out, err
end

-- The last line of a stand-in's record (what it says at exit).
function M.last_line(text)
  local last
  for line in text:gmatch("[^\n]+") do last = line end
  return last
end

-- A chunk's prelude: the module as `G`, check(ok, what) and fails(pattern, f, ...).
local function prelude(module)
  return string.format([[
    local G, runtime = require "tcl.%s", require "tcl.runtime"
    local function check(ok, what) if not ok then error(what, 2) end end
    local function fails(pattern, f, ...)
      local ok, err = pcall(f, ...)
      check(not ok and tostring(err):find(pattern, 1, true), "expected '" .. pattern .. "', got " .. tostring(err))
    end
  ]], module)
end

function M.run(busted, opts)
  local it, assert = busted.it, busted.assert

  it("opens the device on first use and holds zero-filled buffers copied every way (the shared contract)", function()
    if not opts.have_mock() then return end
    opts.run_ok(prelude(opts.module) .. string.format([[
      check(not G.opened(), "opened before use")
      local b = G.buffer("float32", 5)
      check(G.opened(), "not opened by a buffer")
      %s
      check(b.numel == 5 and b.nbytes == 20 and b.itemsize == 4 and b.device == %q and G.is_buffer(b), "facts")
      check(not G.is_buffer(runtime.buffer("float32", 5, "CPU")) and not G.is_buffer(5), "is_buffer")
      check(b.dtype == require("tcl.core").dtype "float32", "dtype")
      check(tostring(b) == "Buffer(%s, float32, 5)", tostring(b))
      for _, v in ipairs(b:read()) do check(v == 0, "not zero-filled") end -- the stand-ins' memory is 0xA5
      b:write { 1, 2.5, -3, 4, 5 }
      check(table.concat(b:read(), " ") == "1.0 2.5 -3.0 4.0 5.0", "write/read")
      check(b:read_bytes() == string.pack("<fffff", 1, 2.5, -3, 4, 5), "read_bytes")
      b:write_bytes(string.pack(">fffff", 5, 4, 3, 2, 1), 0, true)
      check(table.concat(b:read(), " ") == "5.0 4.0 3.0 2.0 1.0", "write_bytes big-endian")
      check(b:read_bytes() == string.pack("<fffff", 5, 4, 3, 2, 1), "write_bytes/read_bytes")
      local host = runtime.buffer("float32", 5, "CPU")
      check(b:copy_to(host) == host and table.concat(host:read(), " ") == "5.0 4.0 3.0 2.0 1.0", "copy_to")
      local c = G.buffer("float32", 5)
      c:copy_from(b)
      check(table.concat(c:read(), " ") == "5.0 4.0 3.0 2.0 1.0", "device to device")
      c:copy_from(c)
      check(table.concat(c:read(), " ") == "5.0 4.0 3.0 2.0 1.0", "a buffer onto itself")
      host:write { 7, 7, 7, 7, 7 }
      c:copy_from(host)
      check(table.concat(c:read(), " ") == "7.0 7.0 7.0 7.0 7.0", "host to device")
      check(b:max_difference(host) == 0.75 and c:max_difference(host) == 0 and b:max_difference(c) == 0.75,
        "max_difference")
      local flags = G.buffer("bool", 3)
      flags:write { true, false, true }
      check(flags:read()[1] == true and flags:read()[2] == false, "bool")
      check(G.buffer("int8", 0):read()[1] == nil, "empty buffer")
      fails("expected 5 values", b.write, b, { 1, 2 })
      fails("source is int32 x 5, destination is float32 x 5", b.copy_from, b, G.buffer("int32", 5))
      fails("expected a host Buffer", b.copy_to, b, c)
      fails("expected a Buffer or a %s buffer", b.copy_from, b, 5)
      fails("expected a Buffer or a %s buffer", b.max_difference, b, 5)
      fails("numel must be >= 0", G.buffer, "float32", -1)
      fails("void", G.buffer, "void", 1)
      G.synchronize()
      check(not G.queued(), "nothing queued after synchronize")
      print "ok"
    ]], opts.opened, opts.device, opts.device, opts.kind, opts.kind))
    opts.clean(opts.log(), "buffers")
  end)

  it("loads programs, checks their launch and their buffers at every run (the shared contract)", function()
    if not opts.have_mock() then return end
    opts.run_ok(prelude(opts.module) .. string.format([[
      local code = %q
      local p = G.program(code, { name = "E_k", entry = "k", params = { { dtype = "float32", numel = 4 },
        { dtype = "int32", numel = 2 } }, global_size = { 3, 2 }, local_size = { 32, 4 } })
      check(p.name == "E_k" and p.entry == "k" and p.nparams == 2 and p.bytes > #code, "facts")
      check(table.concat(p.global_size, " ") == "3 2 1" and table.concat(p.local_size, " ") == "32 4 1", "sizes")
      check(p.params[2].dtype.name == "int32" and p.params[2].numel == 2, "params")
      check(tostring(p):find("(E_k, 2 buffers)", 1, true), tostring(p))
      local a, b = G.buffer("float32", 4), G.buffer("int32", 2)
      local seconds = p:run { a, b }
      check(type(seconds) == "number" and seconds >= 0, "seconds")
      check(p:run({ a, b }, false) == nil, "an untimed run returns nothing")
      G.synchronize()
      fails("kernel 'E_k' takes 2 buffers, got 1", p.run, p, { a })
      fails("kernel 'E_k': buffer 2 (slot 1) is float32 x 4, the kernel expects int32 x 2", p.run, p, { a, a })
      fails("kernel 'E_k': buffer 1 is a host Buffer (CPU), not a %s buffer", p.run, p,
        { runtime.buffer("float32", 4, "CPU"), b })
      fails("kernel 'E_k': buffer 2 is number, not a %s buffer", p.run, p, { a, 3 })
      fails("global_size[1] must be a positive integer", G.program, code, { params = {}, global_size = { 0 } })
      fails("params must be a list", G.program, code, { name = "k" })
      %s
      print "ok"
    ]], opts.code, opts.kind, opts.kind, opts.program_checks))
    local text = opts.log()
    assert.matches(opts.recorded, text, 1, true)
    opts.clean(text, "programs")
  end)

  it("runs the whole path from a tensor graph: kernels rendered, compiled, launched as their SPECIALs say " ..
    "(the shared contract)", function()
    local graph = opts.graph
    if not opts.have_mock() or not graph.ready() then return end
    local code = string.format([[
      local schedule = require "tcl.schedule"
      local programs = {}
      schedule.recorder = function(kernel) if kernel.program then programs[#programs + 1] = kernel.program end end
      local x = Tensor.arange(65536):float():reshape(256, 256)
      local out = ((x * 2 + 1):sum(2)):realize()
      assert(out.device == %q and out.shape[1] == 256, "result")
      schedule.recorder = nil
      local reduces = false
      for _, p in ipairs(programs) do
        print(string.format(%q, p.entry, table.concat(p.global_size, " "), table.concat(p.local_size, " ")))
        local source = p:dump()
        %s
        reduces = reduces or (source:find(%q, 1, true) ~= nil and source:find(%q, 1, true) ~= nil)
      end
      assert(reduces, "no kernel reduces through %s")
      -- tensors move to the device and back as steps of a realize
      local t = Tensor({ 1, 2, 3 }, { dtype = "int32" }):to(%q)
      assert(t.device == %q and t:tolist()[2] == 2 and t:to("CPU"):tolist()[3] == 3, "to")
      assert(Tensor({ 0.5, 4 }, { device = %q }):to("EMU"):tolist()[1] == 0.5, "to EMU")
      print "ok"
    ]], opts.device, graph.launch, graph.check_program, graph.markers[1], graph.markers[2], graph.memory, graph.to,
      opts.device, opts.device)
    local env = "DEVICE=" .. opts.device .. " DEBUG=2 " .. graph.env
    local out, err = opts.run_ok(code, env)
    assert.matches("*** " .. opts.device .. " ", err, 1, true) -- DEBUG=2 lines: device time of each kernel
    local text = opts.log()
    local launches = 0
    local word = graph.launch:match("^%a+")
    for line in out:gmatch(word .. " [^\n]+") do
      launches = launches + 1
      assert.matches(line .. graph.record, text, 1, true)
    end
    assert.is_true(launches >= 1)
    opts.clean(text, "graph")
    if graph.after then graph.after(env, code, launches) end
  end)
end

return M
