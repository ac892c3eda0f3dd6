-- spec/devices/metal_device_spec.lua — the Metal device: its Objective-C part (src/runtime/metal/metal_device.c:
-- the Objective-C runtime and Metal through dlopen/dlsym and typed objc_msgSend casts), device
-- buffers and programs (tcl.metal), the backend (tcl.codegen.devices.metal) and the scheduler's use of
-- them.
--
-- Four parts, since no Mac runs these specs here:
--   1. Everywhere a C compiler is: the Objective-C part, which only Apple builds compile, is
--      type-checked with -Wall -Wextra -Werror against stand-ins for Apple's headers
--      (tests/c/metal_standin/): with this machine's cc and C library (TCLC_METAL_STANDIN), and
--      with clang for the macOS targets arm64-apple-macos and x86_64-apple-macos (the compiler
--      defines __APPLE__ and takes the Apple ABI; tests/c/metal_standin/libc stands in for the C
--      library); a send with an argument of the wrong type fails that check.
--   2. Off macOS: METAL is a listed device, and the first allocation or kernel on it fails with
--      "Metal: only available on macOS" (child `tcl` processes); the backend's launch sizes and
--      buffers from hand-built linear programs, and the rendered kernel's buffer indices (pure
--      Lua).
--   3. On x86-64 Linux builds with tests/: the Objective-C part runs against a stand-in for the
--      Objective-C runtime and Metal (build/tests/libmock_metal.so, loaded through
--      TCL_METAL_LIBRARY by build/tests/tcl_metal_standin, a `tcl` with that part compiled in):
--      every message goes through the same casts of objc_msgSend to methods of those types;
--      buffers, copies, programs, dispatches recorded with their grid, threadgroup and buffers,
--      errors, the whole path from a tensor graph, and that every object is released and every
--      autorelease pool popped.
--   4. On a Mac with a Metal GPU (else pending, saying why): values of a round trip, an
--      elementwise kernel and a reduction through threadgroup memory, against the CPU.
-- The tensor spec suite on a Mac (not run here):
--   DEVICE=METAL TCLC_BUILD_DIR=build busted -o spec/support/summary_output.lua spec/api/tensor_*_spec.lua
local helper = require "spec.support.helper"
local tcl = require "tcl"
local runtime = require "tcl.runtime"
local core = require "tcl.core"
local contract = require "spec.support.gpu_device_contract"

local Tensor = tcl.Tensor
local ROOT = helper.root
local STANDIN = ROOT .. "/tests/c/metal_standin"
local MOCK = helper.build_dir .. "/tests/libmock_metal.so"
local STANDIN_TCL = helper.build_dir .. "/tests/tcl_metal_standin"
local UNAVAILABLE = "Metal: only available on macOS"

local function q(s) return helper.shell_quote(s) end

local function have(program)
  return helper.run("command -v " .. q(program)) == 0
end

local on_macos = helper.run("test \"$(uname -s)\" = Darwin") == 0

local child, child_ok, last_line = contract.child, contract.child_ok, contract.last_line

local function uop(op, dtype, src, arg) return core.uop(op, core.dtype(dtype), src, arg) end
local function special(name, size) return uop("SPECIAL", "index", { uop("CONST", "index", nil, size) }, name) end

describe("the Metal device's Objective-C part, compiled without a Mac", function()
  local FLAGS = "-fsyntax-only -std=c11 -Wall -Wextra -Wpedantic -Werror"
  local SOURCE = ROOT .. "/src/runtime/metal/metal_device.c"

  -- The command that checks file on this machine, with the stand-in <objc/objc.h>.
  local function host_check(file)
    return string.format("cc %s -DTCLC_METAL_STANDIN -I %s -I %s %s", FLAGS, q(STANDIN), q(ROOT .. "/src"), q(file))
  end

  it("type-checks with this machine's cc and C library (TCLC_METAL_STANDIN)", function()
    if not have("cc") then
      pending("no cc on this machine")
      return
    end
    local status, _, err = helper.run(host_check(SOURCE))
    assert.are.equal(0, status, err)
  end)

  it("type-checks for the macOS targets, arm64 and x86-64 (clang, __APPLE__ from the compiler)", function()
    if not have("clang") then
      pending("no clang on this machine")
      return
    end
    for _, target in ipairs { "arm64-apple-macos11", "x86_64-apple-macos10.15" } do
      local status, _, err = helper.run(string.format(
        "clang --target=%s %s -nostdlibinc -isystem %s -isystem %s -I %s %s",
        target, FLAGS, q(STANDIN .. "/libc"), q(STANDIN), q(ROOT .. "/src"), q(SOURCE)))
      assert.are.equal(0, status, target .. ": " .. err)
    end
  end)

  it("fails on a message sent with an argument of the wrong type", function()
    if not have("cc") then
      pending("no cc on this machine")
      return
    end
    local path = os.tmpname() .. ".c"
    helper.write(path, '#include "runtime/metal/metal_device.c"\n' ..
      "void wrong_send(tcl_metal_device *d);\n" ..
      "void wrong_send(tcl_metal_device *d) { SEND(d, MSG_VOID_ID)(d->device, d->sel.set_pipeline, 1.5); }\n")
    local status, _, err = helper.run(host_check(path))
    os.remove(path)
    assert.are_not.equal(0, status)
    assert.matches("argument 3", err, 1, true)
  end)
end)

describe("the Metal device off macOS", function()
  local function off_macos()
    if not on_macos then return true end
    pending("this is macOS: the Metal device is there")
    return false
  end

  it("is listed among the runtime's devices, and tensors name it", function()
    local listed = false
    for _, d in ipairs(runtime.devices) do listed = listed or d == "METAL" end
    assert.is_true(listed)
    assert.are.equal("METAL", Tensor.ones(2, { device = "metal" }).device) -- lazy: nothing opened yet
    local err = helper.error_of(runtime.buffer, "float32", 2, "METAL")
    assert.matches("device METAL keeps its buffers in its own memory", err, 1, true)
  end)

  it("fails at the first allocation or kernel, saying Metal is only on macOS", function()
    if not off_macos() then return end
    for _, code in ipairs {
      "print(Tensor.ones(2, { device = 'metal' }):realize():tolist())",
      "print(Tensor({ 1, 2 }):to('metal'):tolist())",
      "print(Tensor({ 1, 2 }, { device = 'METAL' }):tolist())",
    } do
      local status, _, err = child("", code)
      assert.are.equal(1, status, err)
      assert.matches(UNAVAILABLE, err, 1, true)
    end
    local status, _, err = child("DEVICE=METAL", "print(Tensor.ones(2):realize():tolist())")
    assert.are.equal(1, status, err)
    assert.matches(UNAVAILABLE, err, 1, true)
  end)

  it("fails in every entry point of tcl.metal that needs the device, and in the backend's probe", function()
    if not off_macos() then return end
    local metal = require "tcl.metal"
    assert.is_false(metal.opened())
    assert.is_false(metal.is_buffer(Tensor.ones(1)))
    assert.are.equal("metal.buffer: " .. UNAVAILABLE, helper.error_of(metal.buffer, "float32", 4))
    assert.are.equal("metal.device: " .. UNAVAILABLE, helper.error_of(metal.device))
    assert.are.equal("metal.program: " .. UNAVAILABLE,
      helper.error_of(metal.program, "kernel void k() {}", { name = "k", params = {} }))
    local backend = require("tcl.codegen.driver.lower").backend("METAL")
    local ok, why = backend.probe()
    assert.is_false(ok)
    assert.are.equal(UNAVAILABLE, why)
    assert.are.equal(UNAVAILABLE, helper.error_of(function() return backend.options end))
  end)
end)

describe("the Metal backend", function()
  local metal = require "tcl.codegen.devices.metal"

  it("loads as a backend anywhere (its device opens with the first kernel)", function()
    local backend = require("tcl.codegen.driver.lower").backend("METAL")
    assert.are.equal(metal, backend)
    assert.are.equal("METAL", backend.device)
    assert.are.equal("metal", backend.renderer.name)
    assert.are.same({ COS = true, EXP2 = true, LOG2 = true, POW = true, SIN = true, EXP = true, SIGMOID = true,
      TANH = true, SILU = true, SOFTPLUS = true, ELU = true }, backend.renderer.lacks)
  end)

  it("takes the launch from the SPECIALs: threadgroups = gidx sizes, threads per threadgroup = lidx sizes",
    function()
      local p0, p1 = uop("PARAM", "float32", nil, { 0, 64 }), uop("PARAM", "int32", nil, { 1, 8 })
      local launch = metal.launch_of({ p0, p1, special("gidx0", 16), special("lidx0", 32), special("gidx2", 3),
        special("lidx1", 4) }, "k")
      assert.are.same({ 16, 1, 3 }, launch.global_size)
      assert.are.same({ 32, 4, 1 }, launch.local_size)
      launch = metal.launch_of({ p0, uop("CONST", "index", nil, 7) }, "k") -- a loop kernel: one thread
      assert.are.same({ 1, 1, 1 }, launch.global_size)
      assert.are.same({ 1, 1, 1 }, launch.local_size)
      local params = metal.params_of({ p1, p0 }, "k") -- slot order, whatever the list's order
      assert.are.same({ "float32", "int32" }, { params[1].dtype.name, params[2].dtype.name })
      assert.are.same({ 64, 8 }, { params[1].numel, params[2].numel })
      assert.are.equal("kernel 'k': SPECIAL 'widx0' is none of gidx0..2, lidx0..2",
        helper.error_of(metal.launch_of, { special("widx0", 2) }, "k"))
      assert.are.equal("kernel 'k': no PARAM for slot 0 (slots 0..1)",
        helper.error_of(metal.params_of, { uop("PARAM", "float32", nil, { 1, 4 }) }, "k"))
    end)

  it("renders kernels whose [[buffer(i)]] is the PARAM of slot i, so run binds buffer i at index i", function()
    local gpu = require "tcl.gpu"
    local kernels = require "spec.support.kernels"
    local list, add = kernels.builder()
    -- slot 1 comes first in the program: the kernel's arguments are still in slot order
    local a = add("PARAM", core.dtype "float16", nil, { 1, 64 })
    local out = add("PARAM", core.dtype "float32", nil, { 0, 64 })
    local idx = core.dtype "index"
    local g = add("SPECIAL", idx, { add("CONST", idx, nil, 16) }, "gidx0")
    local l = add("SPECIAL", idx, { add("CONST", idx, nil, 4) }, "lidx0")
    local i = add("ADD", idx, { add("MUL", idx, { g, add("CONST", idx, nil, 4) }), l })
    local v = add("LOAD", core.dtype "float16", { add("INDEX", core.dtype "float16", { a, i }) })
    add("STORE", nil, { add("INDEX", core.dtype "float32", { out, i }), add("CAST", core.dtype "float32", { v }) })
    local entry = metal.entry_name("E_16-4")
    assert.are.equal("E_16_4", entry)
    local source, facts = gpu.render(list, { dialect = "metal", name = entry })
    assert.matches("kernel void E_16_4(device float* p0 [[buffer(0)]], const device half* p1 [[buffer(1)]], " ..
      "uint3 gid [[threadgroup_position_in_grid]], uint3 lid [[thread_position_in_threadgroup]])", source, 1, true)
    local params = metal.params_of(list, entry)
    assert.are.same({ "float32", "float16" }, { params[1].dtype.name, params[2].dtype.name })
    local launch = metal.launch_of(list, entry)
    assert.are.same(facts.global_size, launch.global_size)
    assert.are.same(facts.local_size, launch.local_size)
  end)

  it("narrows the Metal target's limits to the device's", function()
    local base = require("tcl.codegen.devices.gpu_targets").get("METAL").gpu
    local gpu = metal.gpu_limits(base, { max_threadgroup = { 512, 512, 64 }, threads_per_threadgroup = 512,
      threadgroup_bytes = 16384 })
    assert.are.equal(512, gpu.threads_max)
    assert.are.equal(16384, gpu.local_bytes)
    assert.are.same({ 512, 512, 64 }, gpu.local_max)
    assert.are.same(base.grid_max, gpu.grid_max)
    assert.are.equal(32, gpu.warp)
    assert.are.equal(1024, base.threads_max) -- the target itself is left alone
  end)

  it("offers simdgroup matrices from Apple GPU family 7 on, and 32-thread shuffles on Apple GPUs only", function()
    local base = require("tcl.codegen.devices.gpu_targets").get("METAL").gpu
    local function limits(family)
      return metal.gpu_limits(base, { max_threadgroup = { 1024, 1024, 1024 }, threads_per_threadgroup = 1024,
        threadgroup_bytes = 32768, apple_family = family })
    end
    for _, family in ipairs { 7, 8, 9, 10 } do
      assert.are.same(base.tensor_cores, limits(family).tensor_cores)
      assert.are.equal(32, limits(family).warp)
    end
    assert.are.same({}, limits(6).tensor_cores) -- an A13: permutes, no simdgroup matrices
    assert.are.equal(32, limits(6).warp)
    assert.are.same({}, limits(0).tensor_cores) -- AMD, Intel
    assert.is_nil(limits(0).warp)
    assert.are.same({ "m8n8k8_f32_f32" }, base.tensor_cores) -- the target itself is left alone
  end)
end)

-- The mock's record, and the environment that loads the mock with that record.
local function mock_env(log, extra)
  return string.format("TCL_METAL_LIBRARY=%s MOCK_METAL_LOG=%s %s", q(MOCK), q(log), extra or "")
end

-- Every line of the record is an event, not a misuse of the API, and nothing is held at exit.
local function clean_record(text)
  assert.is_nil(text:find("problem:", 1, true), text)
  assert.are.equal("exit objects 0 pools 0", last_line(text))
end

describe("the Metal device on the stand-in Objective-C runtime", function()
  local log
  before_each(function()
    log = os.tmpname()
    os.remove(log)
  end)
  after_each(function() os.remove(log) end)

  local function have_mock()
    if helper.exists(MOCK) and helper.exists(STANDIN_TCL) then return true end
    pending("the stand-in runtime is not built (x86-64 Linux builds with tests/ have " .. MOCK .. ")")
    return false
  end

  local function run_standin(extra, code) return child(mock_env(log, extra), code, STANDIN_TCL) end
  local function standin_ok(extra, code) return child_ok(mock_env(log, extra), code, STANDIN_TCL) end

  -- buffers and programs as every GPU device has them (spec/support/gpu_device_contract.lua),
  -- with Metal's own device facts, pipeline limits and compiler errors, and the stand-in's record
  contract.run({ it = it, assert = assert }, {
    module = "metal", kind = "Metal", device = "METAL", have_mock = have_mock,
    run_ok = function(code, env) return standin_ok(env or "", code) end,
    log = function() return helper.read(log) end,
    clean = function(text, which)
      if which == "buffers" then assert.matches("device\nqueue\nbuffer 20\n", text, 1, true) end
      if which == "programs" then
        assert.matches("compile %d+ fast_math 0\npipeline k buffers 2\n", text)
        assert.is_nil(text:find("fast_math 1", 1, true))
      end
      clean_record(text)
    end,
    opened = [[
      local d = G.device()
      check(d.name == "tcl mock GPU" and d.threadgroup_bytes == 32768 and d.threads_per_threadgroup == 1024, "facts")
      check(table.concat(d.max_threadgroup, " ") == "1024 1024 1024", "maxThreadsPerThreadgroup (an MTLSize)")]],
    code = "#include <metal_stdlib>\nkernel void k(device float* p0 [[buffer(0)]], " ..
      "const device int* p1 [[buffer(1)]], uint3 gid [[threadgroup_position_in_grid]]) {}\n",
    program_checks = [==[
      check(p.max_threads == 1024 and p.simd_width == 32, "the pipeline's limits")
      check(p:run { a, b } == 0.25, "GPUEndTime - GPUStartTime (doubles)")
      local opts = { name = "E_k", entry = "k", params = {}, local_size = { 1, 1, 1025 } }
      fails("kernel 'E_k': 1025 threads on threadgroup axis z, tcl mock GPU allows 1024", G.program, code, opts)
      opts.local_size = { 64, 32 }
      fails("kernel 'E_k': 2048 threads per threadgroup, its pipeline on tcl mock GPU allows 1024 " ..
        "(maxTotalThreadsPerThreadgroup)", G.program, code, opts)
      opts.local_size, opts.entry = nil, "missing"
      fails("Metal: the compiled source has no kernel function 'missing'", G.program, code, opts)
      fails("Metal: newLibraryWithSource:options:error: cannot compile the source of kernel 'bad': " ..
        "program_source:1:2: error: the mock compiler refuses #error", G.program, "#error\n", { name = "bad",
        params = {} })
      fails("newComputePipelineStateWithFunction:error: cannot make the pipeline of kernel 'no_pipeline' on tcl " ..
        "mock GPU: the mock refuses a pipeline", G.program, "kernel void no_pipeline() {}", { name = "no_pipeline",
        params = {} })
      fails("the source holds a NUL byte", G.program, "kernel void k() {}\0", { name = "k", params = {} })]==],
    recorded = "dispatch k grid 3 2 1 threads 32 4 1 buffers 2",
    -- MSL compiled by the stand-in, each kernel in a pipeline of its own
    graph = {
      ready = function() return true end, env = "", to = "metal", launch = "dispatch %s grid %s threads %s",
      check_program = 'assert(source:find("kernel void " .. p.entry .. "(", 1, true), "MSL of " .. p.entry)',
      memory = "threadgroup memory", markers = { "threadgroup float", "threadgroup_barrier" }, record = " buffers ",
    },
  })

  it("says what failed: no device, a buffer past maxBufferLength, a pipeline's thread limit, a failed run",
    function()
      if not have_mock() then return end
      local status, _, err = run_standin("MOCK_METAL_NO_DEVICE=1", "print(Tensor.ones(2):to('metal'):tolist())")
      assert.are.equal(1, status)
      assert.matches("Metal: MTLCreateSystemDefaultDevice returned no device", err, 1, true)
      status, _, err = run_standin("MOCK_METAL_MAX_BUFFER=1000", "print(Tensor.ones(1000):to('metal'):tolist())")
      assert.are.equal(1, status)
      assert.matches("Metal: a buffer of 4000 bytes is larger than tcl mock GPU allows (maxBufferLength 1000)", err,
        1, true)
      status, _, err = run_standin("MOCK_METAL_PIPELINE_THREADS=64 DEVICE=METAL",
        "print((Tensor.arange(4096):float() * 2):realize():tolist()[1])")
      assert.are.equal(1, status)
      assert.matches("threads per threadgroup, its pipeline on tcl mock GPU allows 64 (maxTotalThreadsPerThreadgroup)",
        err, 1, true)
      -- a queued kernel's failure shows when its results are read, naming it; with DEBUG=2 each
      -- dispatch waits, and its own run fails
      local failing = "print((Tensor.arange(16):float() * 2):realize():tolist()[1])"
      status, _, err = run_standin("MOCK_METAL_RUN_ERROR=1 DEVICE=METAL", failing)
      assert.are.equal(1, status)
      assert.matches("Metal: kernel 'E_16l', queued earlier, failed while running on tcl mock GPU: Execution of the "
        .. "command buffer was aborted due to an error during execution. (mock) (command buffer status 5, "
        .. "MTLCommandBufferStatusError)", err, 1, true)
      status, _, err = run_standin("MOCK_METAL_RUN_ERROR=1 DEVICE=METAL DEBUG=2", failing)
      assert.are.equal(1, status)
      assert.matches("tcl: kernel 'E_16l': Metal: the kernel failed while running on tcl mock GPU: Execution of the "
        .. "command buffer was aborted due to an error during execution. (mock) (command buffer status 5, "
        .. "MTLCommandBufferStatusError)", err, 1, true)
      status, _, err = child("TCL_METAL_LIBRARY=/nonexistent/libobjc.dylib",
        "print(Tensor.ones(2):to('metal'):tolist())", STANDIN_TCL)
      assert.are.equal(1, status)
      assert.matches("Metal: cannot load /nonexistent/libobjc.dylib", err, 1, true)
      assert.matches("(TCL_METAL_LIBRARY names that library)", err, 1, true)
    end)

  it("asks the GPU's family: an AMD or Intel GPU's kernels use neither simdgroup matrices nor shuffles", function()
    if not have_mock() then return end
    -- a float32 matmul tensor cores take, and sums over rows of 1024 (GROUP: shuffles where the
    -- SIMD groups are 32 threads)
    local code = [[
      local schedule = require "tcl.schedule"
      local sources = {}
      schedule.recorder = function(kernel) if kernel.program then sources[#sources + 1] = kernel.program:dump() end end
      local a = Tensor.arange(64 * 64):float():reshape(64, 64):realize()
      local b = Tensor.ones(64, 64):realize()
      a:matmul(b):realize()
      Tensor.ones(16, 1024):sum(2):realize()
      schedule.recorder = nil
      local all = table.concat(sources, "\n")
      print(string.format("family %d matrices %s shuffles %s", require("tcl.metal").device().apple_family,
        tostring(all:find("simdgroup_multiply_accumulate", 1, true) ~= nil),
        tostring(all:find("simd_shuffle_xor", 1, true) ~= nil)))
      print "ok"
    ]]
    local out = standin_ok("DEVICE=METAL", code)
    assert.matches("family 8 matrices true shuffles true", out, 1, true)
    clean_record(helper.read(log))
    out = standin_ok("DEVICE=METAL MOCK_METAL_APPLE_FAMILY=0", code)
    assert.matches("family 0 matrices false shuffles false", out, 1, true)
    clean_record(helper.read(log))
    -- DEBUG=1 says so when the device opens
    local sum = "Tensor.ones(4):sum():realize() print 'ok'"
    local _, err = standin_ok("DEVICE=METAL DEBUG=1 MOCK_METAL_APPLE_FAMILY=0", sum)
    assert.matches("Metal: tcl mock GPU, not an Apple GPU; no simdgroup matrices, reductions through threadgroup "
      .. "memory, 32 KiB of threadgroup memory\n", err, 1, true)
    _, err = standin_ok("DEVICE=METAL DEBUG=1", sum)
    assert.matches("Metal: tcl mock GPU, Apple GPU family 8; simdgroup matrices, shuffles in SIMD groups of 32", err, 1,
      true)
  end)

  it("commits dispatches without waiting; a read or tcl.synchronize waits for them, in order", function()
    if not have_mock() then return end
    standin_ok("DEVICE=METAL", [[
      local metal = require "tcl.metal"
      local function mark(text)
        local f = assert(io.open(os.getenv("MOCK_METAL_LOG"), "a"))
        f:write("mark ", text, "\n")
        f:close()
      end
      local x = Tensor.arange(4096):float():reshape(64, 64):realize()
      local y = ((x * 2):exp():sum(2) + 1):realize()
      for i = 1, 3 do -- results dropped while their dispatches are queued: their command buffers hold them
        local t = (x * i):realize()
        t = nil
        collectgarbage()
        collectgarbage()
      end
      assert(metal.queued(), "nothing queued")
      mark "queued"
      tcl.synchronize()
      assert(not metal.queued(), "queued after tcl.synchronize")
      mark "synchronized"
      local values = (y * 3):tolist()
      assert(#values == 64 and not metal.queued(), "queued after a read")
      mark "read"
      print "ok"
    ]])
    local text = helper.read(log)
    local function lines_between(from, to)
      local lines, inside = {}, false
      for line in text:gmatch("[^\n]+") do
        if inside and line == to then break end
        inside = inside or line == from
        if inside then lines[#lines + 1] = line end
      end
      return table.concat(lines, "\n")
    end
    local queued = text:match("^(.-)mark queued")
    local _, dispatches = queued:gsub("\ndispatch ", "")
    local _, commits = queued:gsub("\ncommit", "")
    assert.are.equal(5, dispatches, text)
    assert.are.equal(5, commits, text)
    assert.is_nil(queued:find("\nwait", 1, true), text) -- nothing waited for before the read
    local _, waits = lines_between("mark queued", "mark synchronized"):gsub("\nwait", "")
    assert.are.equal(5, waits, text)
    assert.matches("\ndispatch [^\n]+\ncommit\nwait$", lines_between("mark synchronized", "mark read"))
    clean_record(text) -- every command buffer let go, every buffer released
  end)
end)

-- "ok" when this machine has a Metal device, else why not (probed in a child process, so a
-- broken framework cannot take the spec run down).
local function probe_gpu()
  local status, out, err = helper.run(q(helper.tcl_bin) .. " -e " .. q([[
    local ok, why = require("tcl.codegen.devices.metal").probe()
    print(ok and "ok" or why)
  ]]))
  if status ~= 0 then return "the probe failed: " .. err end
  return (out:gsub("\n$", ""))
end

describe("the Metal device on a Mac", function()
  local why
  local function have_gpu()
    if not on_macos then
      pending("not macOS: the Metal device runs only there (this machine checks its code in the parts above)")
      return false
    end
    why = why or probe_gpu()
    if why == "ok" then return true end
    pending("no Metal device: " .. why)
    return false
  end

  require("spec.support.gpu_device_checks")({ it = it, assert = assert }, {
    device = "METAL", to = "metal", label = "Metal", memory = "threadgroup memory", marker = "threadgroup_barrier",
    dtypes = { "float32", "float16", "bfloat16", "int8", "int32", "int64", "uint8", "bool" },
    have_gpu = have_gpu,
  })
end)
