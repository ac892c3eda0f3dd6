-- spec/devices/cuda_device_spec.lua — the CUDA device: the driver API loaded at run time
-- (src/runtime/cuda/cuda_driver.c), device buffers and programs (tcl.cuda), the backend
-- (tcl.codegen.devices.cuda) and the scheduler's use of them (tcl.schedule.buffers, transfers).
--
-- Three parts:
--   1. Everywhere: CUDA is a listed device; without a driver (TCL_CUDA_DRIVER pointing at a
--      missing library) or with the toolkit's stub library, the first CUDA allocation or kernel
--      fails with a message naming what is missing (child `tcl` processes); the backend's launch
--      sizes, buffers and limits from hand-built linear programs (pure Lua).
--   2. Everywhere the build has tests/: the mock driver (build/tests/libmock_cuda.so, loaded
--      through TCL_CUDA_DRIVER in child processes) keeps "device memory" in host memory and
--      records launches instead of running them: buffers, copies in every direction, Tensor.to
--      round trips, errors, that nothing is held at exit, and (with NVRTC, else pending) the
--      whole path from a tensor graph to PTX launched with the grid and block of its SPECIALs.
--   3. On a machine with an NVIDIA GPU (else pending, after probing the driver in a child
--      process): values of a round trip, an elementwise kernel and a reduction through local
--      memory, against the CPU.
-- The tensor spec suite on the GPU (not run here):
--   DEVICE=CUDA TCLC_BUILD_DIR=build busted -o spec/support/summary_output.lua spec/api/tensor_*_spec.lua
local helper = require "spec.support.helper"
local tcl = require "tcl"
local runtime = require "tcl.runtime"
local core = require "tcl.core"
local contract = require "spec.support.gpu_device_contract"

local MOCK = helper.build_dir .. "/tests/libmock_cuda.so"
local STUB = "/usr/local/cuda/lib64/stubs/libcuda.so"
local Tensor = tcl.Tensor

local child, child_ok, last_line = contract.child, contract.child_ok, contract.last_line

local function uop(op, dtype, src, arg) return core.uop(op, core.dtype(dtype), src, arg) end
local function special(name, size) return uop("SPECIAL", "index", { uop("CONST", "index", nil, size) }, name) end

describe("the CUDA device without a GPU", function()
  it("is listed among the runtime's devices, and tensors name it", function()
    local listed = false
    for _, d in ipairs(runtime.devices) do listed = listed or d == "CUDA" end
    assert.is_true(listed)
    assert.are.equal("CUDA", Tensor.ones(2, { device = "cuda" }).device) -- lazy: no driver needed yet
  end)

  it("compiles for sm_90a with the warpgroup tensor cores on compute capability 9.0 only", function()
    local cuda = require "tcl.codegen.devices.cuda"
    local targets = require "tcl.codegen.devices.gpu_targets"
    local target, arch = cuda.target_of { compute_capability = { 9, 0 }, arch = "sm_90" }
    assert.are.equal("sm_90a", arch)
    assert.are.equal(targets.get("CUDA_SM90"), target)
    assert.matches("wg_m64n128k16_f16_f32", table.concat(target.gpu.tensor_cores, " "), 1, true)
    for _, case in ipairs { { { 8, 0 }, "sm_80" }, { { 8, 9 }, "sm_89" }, { { 10, 0 }, "sm_100" } } do
      target, arch = cuda.target_of { compute_capability = case[1], arch = case[2] }
      assert.are.equal(case[2], arch)
      assert.are.equal(targets.get("CUDA"), target)
      assert.is_nil(table.concat(target.gpu.tensor_cores, " "):find("wg_", 1, true))
    end
  end)

  it("compiles for GPUs before Ampere without tensor cores, and for GPUs newer than NVRTC as the newest it knows",
    function()
      local cuda = require "tcl.codegen.devices.cuda"
      local targets = require "tcl.codegen.devices.gpu_targets"
      local sm75 = targets.get("CUDA_SM75")
      assert.are.same({}, sm75.gpu.tensor_cores)
      assert.are.equal(targets.get("CUDA").gpu.local_bytes, sm75.gpu.local_bytes)
      local target, arch = cuda.target_of { compute_capability = { 7, 5 }, arch = "sm_75" }
      assert.are.equal(sm75, target)
      assert.are.equal("sm_75", arch)
      -- what NVRTC lists decides the code: the device's own architecture, else the newest below it
      local compiler = { version = "12.4", archs = { 50, 60, 70, 75, 80, 86, 89, 90 } }
      for _, case in ipairs {
        { { 7, 0 }, "sm_70", "CUDA_SM75" }, { { 8, 6 }, "sm_86", "CUDA" }, { { 8, 7 }, "sm_86", "CUDA" },
        { { 9, 0 }, "sm_90a", "CUDA_SM90" }, { { 10, 0 }, "sm_90", "CUDA" }, { { 12, 1 }, "sm_90", "CUDA" },
      } do
        local cc = case[1]
        target, arch = cuda.target_of({ compute_capability = cc, arch = string.format("sm_%d%d", cc[1], cc[2]) },
          compiler)
        assert.are.equal(case[2], arch)
        assert.are.equal(targets.get(case[3]), target)
      end
      -- Hopper's own code needs NVRTC to know sm_90
      target, arch = cuda.target_of({ compute_capability = { 9, 0 }, arch = "sm_90" }, { version = "11.4",
        archs = { 35, 50, 60, 70, 75, 80, 86 } })
      assert.are.equal("sm_86", arch)
      assert.are.equal(targets.get("CUDA"), target)
      -- a GPU older than everything NVRTC compiles for
      target, arch = cuda.target_of({ name = "Tesla V100", compute_capability = { 7, 0 }, arch = "sm_70" },
        { version = "13.0", archs = { 75, 80, 90, 100, 120 } })
      assert.is_nil(target)
      assert.are.equal("CUDA: this GPU (Tesla V100, compute capability 7.0) is older than every architecture NVRTC "
        .. "13.0 compiles for (sm_75, sm_80, sm_90, sm_100, sm_120): use a CUDA toolkit that supports sm_70 "
        .. "(TCL_CUDA_PATH names its directory)", arch)
    end)

  it("refuses host Buffers on CUDA, saying where its buffers come from", function()
    local err = helper.error_of(runtime.buffer, "float32", 2, "CUDA")
    assert.matches("device CUDA keeps its buffers in its own memory", err, 1, true)
    assert.is_nil(runtime.max_buffer_bytes("CUDA"))
  end)

  it("fails at the first allocation or kernel when the driver library is missing", function()
    local env = "TCL_CUDA_DRIVER=/nonexistent/libcuda.so.1"
    for _, code in ipairs {
      "print(Tensor.ones(2, { device = 'cuda' }):realize():tolist())",
      "print(Tensor({ 1, 2 }):to('cuda'):tolist())",
      "print(Tensor({ 1, 2 }, { device = 'CUDA' }):tolist())",
    } do
      local status, _, err = child(env, code)
      assert.are.equal(1, status, err)
      assert.matches("CUDA: cannot load the NVIDIA driver library /nonexistent/libcuda.so.1", err, 1, true)
      assert.matches("is the NVIDIA driver installed?", err, 1, true)
    end
    local status, _, err = child("DEVICE=CUDA " .. env, "print(Tensor.ones(2):realize():tolist())")
    assert.are.equal(1, status, err)
    assert.matches("CUDA: cannot load the NVIDIA driver library /nonexistent/libcuda.so.1", err, 1, true)
    -- a library that is not the driver
    status, _, err = child("TCL_CUDA_DRIVER=libm.so.6", "print(Tensor({ 1 }):to('cuda'):tolist())")
    assert.are.equal(1, status, err)
    assert.matches("CUDA: the library libm.so.6 has no cuInit: it is not the NVIDIA driver", err, 1, true)
  end)

  it("names the stub library when TCL_CUDA_DRIVER points at the toolkit's stubs/libcuda.so", function()
    if not helper.exists(STUB) then
      pending("the CUDA toolkit's stub library is not at " .. STUB)
      return
    end
    for _, setting in ipairs { "", "DEVICE=CUDA " } do
      local code = setting == "" and "print(Tensor.ones(2, { device = 'cuda' }):realize():tolist())"
        or "print(Tensor.ones(2):realize():tolist())"
      local status, _, err = child(setting .. "TCL_CUDA_DRIVER=" .. STUB, code)
      assert.are.equal(1, status, err)
      assert.matches("CUDA: cuInit failed: CUDA_ERROR_STUB_LIBRARY", err, 1, true)
      assert.matches(STUB, err, 1, true)
    end
  end)

  it("takes the launch from the SPECIALs of a linear program: grid = gidx sizes, block = lidx sizes", function()
    local cuda = require "tcl.codegen.devices.cuda"
    local p0, p1 = uop("PARAM", "float32", nil, { 0, 64 }), uop("PARAM", "int32", nil, { 1, 8 })
    local launch = cuda.launch_of({ p0, p1, special("gidx0", 16), special("lidx0", 32), special("gidx2", 3),
      special("lidx1", 4) }, "k")
    assert.are.same({ 16, 1, 3 }, launch.global_size)
    assert.are.same({ 32, 4, 1 }, launch.local_size)
    launch = cuda.launch_of({ p0, uop("CONST", "index", nil, 7) }, "k") -- a loop kernel: one thread
    assert.are.same({ 1, 1, 1 }, launch.global_size)
    assert.are.same({ 1, 1, 1 }, launch.local_size)
    local params = cuda.params_of({ p1, p0 }, "k")
    assert.are.equal(2, #params)
    assert.are.equal("float32", params[1].dtype.name)
    assert.are.equal(64, params[1].numel)
    assert.are.equal("int32", params[2].dtype.name)
    assert.are.equal(8, params[2].numel)
  end)

  it("names what is wrong with a launch it cannot take", function()
    local cuda = require "tcl.codegen.devices.cuda"
    assert.are.equal("kernel 'k': SPECIAL 'gidx0' appears twice",
      helper.error_of(cuda.launch_of, { special("gidx0", 2), uop("SPECIAL", "index",
        { uop("CONST", "index", nil, 2) }, "gidx0") }, "k"))
    assert.are.equal("kernel 'k': SPECIAL 'widx0' is none of gidx0..2, lidx0..2",
      helper.error_of(cuda.launch_of, { special("widx0", 2) }, "k"))
    local sized = uop("SPECIAL", "index", { uop("PARAM", "int32", nil, { 0, 1 }) }, "lidx0")
    assert.are.equal("kernel 'k': SPECIAL 'lidx0' needs a positive integer CONST size, got PARAM",
      helper.error_of(cuda.launch_of, { sized }, "k"))
    assert.are.equal("kernel 'k': no PARAM for slot 0 (slots 0..1)",
      helper.error_of(cuda.params_of, { uop("PARAM", "float32", nil, { 1, 4 }) }, "k"))
  end)

  it("narrows the CUDA target's limits to the device's, and names kernels as C identifiers", function()
    local cuda = require "tcl.codegen.devices.cuda"
    local base = require("tcl.codegen.devices.gpu_targets").get("CUDA").gpu
    local gpu = cuda.gpu_limits(base, { threads_per_block = 512, shared_bytes = 16384, max_block = { 512, 512, 64 },
      max_grid = { 65535, 65535, 65535 }, warp_size = 32 })
    assert.are.equal(512, gpu.threads_max)
    assert.are.equal(16384, gpu.local_bytes)
    assert.are.same({ 512, 512, 64 }, gpu.local_max)
    assert.are.same({ 65535, 65535, 65535 }, gpu.grid_max)
    assert.are.equal(1024, base.threads_max) -- the target itself is left alone
    assert.are.equal("E_4_4", cuda.entry_name("E_4_4"))
    assert.are.equal("k_4x_y", cuda.entry_name("4x-y"))
  end)

  it("tcl.synchronize waits for nothing on devices that do not queue, and names a wrong device", function()
    Tensor({ 1, 2 }):add(1):realize() -- the CPU (or EMU) backend is in use: it has nothing queued
    tcl.synchronize()
    tcl.synchronize("cpu")
    assert.has_error(function() tcl.synchronize(5) end, "synchronize: device must be a name such as 'CUDA', got number")
    local ok, err = pcall(tcl.synchronize, "tpu")
    assert.is_false(ok)
    assert.matches("unknown device 'TPU' (available: CPU, CUDA, EMU, METAL)", err, 1, true)
  end)

  it("loads as a backend without a GPU (its device opens with the first kernel)", function()
    local lower = require "tcl.codegen.driver.lower"
    local backend = lower.backend("CUDA")
    assert.are.equal("CUDA", backend.device)
    assert.are.equal("cuda", backend.renderer.name)
  end)
end)

-- The mock driver's log, and the environment that loads the mock with that log.
local function mock_env(log, extra)
  return string.format("TCL_CUDA_DRIVER=%s MOCK_CUDA_LOG=%s %s", helper.shell_quote(MOCK), helper.shell_quote(log),
    extra or "")
end

describe("the CUDA device on the mock driver", function()
  local log
  before_each(function()
    log = os.tmpname()
    os.remove(log)
  end)
  after_each(function() os.remove(log) end)

  local function have_mock()
    if helper.exists(MOCK) then return true end
    pending("the mock driver is not built (" .. MOCK .. ": cmake --build build)")
    return false
  end

  local graph_cache = os.tmpname()
  os.remove(graph_cache)

  local function held_nothing(text)
    assert.are.equal("exit allocations 0 contexts 0 modules 0 events 0", last_line(text))
  end

  -- buffers and programs as every GPU device has them (spec/support/gpu_device_contract.lua),
  -- with CUDA's own launch limits and PTX errors
  contract.run({ it = it, assert = assert }, {
    module = "cuda", kind = "CUDA", device = "CUDA", have_mock = have_mock,
    run_ok = function(code, env) return child_ok(mock_env(log, env), code) end,
    log = function() return helper.read(log) end,
    clean = held_nothing,
    opened = "",
    code = ".version 8.0\n.visible .entry k(\n.param .u64 a,\n.param .u64 b\n)\n{ ret; }\n",
    program_checks = [[
      local opts = { name = "E_k", entry = "k", params = {}, local_size = { 64, 32 } }
      fails("kernel 'E_k': 2048 threads per block, tcl mock GPU allows 1024", G.program, code, opts)
      opts.local_size = { 1, 1, 65 }
      fails("65 threads on block axis z, tcl mock GPU allows 64", G.program, code, opts)
      opts.local_size, opts.global_size = nil, { 1, 70000 }
      fails("70000 blocks on grid axis y, tcl mock GPU allows 65535", G.program, code, opts)
      opts.global_size, opts.entry = nil, "missing"
      fails("the PTX has no kernel 'missing'", G.program, code, opts)
      fails("CUDA_ERROR_INVALID_PTX", G.program, "not ptx", { name = "x", params = {} })
      fails("shared_bytes must be an integer >= 0", G.program, code, { params = {}, shared_bytes = -1 })]],
    recorded = "launch k grid 3 2 1 block 32 4 1 shared 0 params 2",
    -- PTX compiled by NVRTC, cached on disk (the second run reads it from there)
    graph = {
      ready = function()
        local have, why = require("tcl.nvrtc").available()
        if have then return true end
        pending("NVRTC is not available: " .. tostring(why))
        return false
      end,
      env = "TCL_CACHE=" .. helper.shell_quote(graph_cache), to = "cuda", launch = "launch %s grid %s block %s",
      check_program = 'assert(p:assembly():find(".entry " .. p.entry, 1, true), "PTX of " .. p.entry)',
      memory = "shared memory", markers = { "__shared__", "__syncthreads" }, record = " shared 0 params ",
      after = function(env, code, launches)
        local _, err = child_ok(mock_env(log, env), code)
        local compiled, from_disk = 0, 0
        for n, m in err:gmatch("(%d+) compiled in [%d.]+ ms, (%d+) from disk") do
          compiled, from_disk = compiled + tonumber(n), from_disk + tonumber(m)
        end
        assert.are.equal(0, compiled, err)
        assert.are.equal(launches, from_disk, err)
        os.execute("rm -rf " .. helper.shell_quote(graph_cache))
      end,
    },
  })

  it("takes wrapped host memory of the C API (tclc_tensor_wrap) to the GPU, and results back", function()
    if not have_mock() then return end
    child_ok("DEVICE=CUDA " .. mock_env(log), [[
      local embed = require "tcl.api.embed"
      local runtime = require "tcl.runtime"
      local function check(ok, what) if not ok then error(what, 0) end end
      -- host memory is borrowed as a CPU buffer, its tensor a copy on the default device
      check(embed.device() == "CPU", "host memory lives on the CPU")
      local host = runtime.buffer("float32", 6, "CPU")
      host:write { 1, 2, 3, 4, 5, 6 }
      local t = embed.wrap(host, { 2, 3 })
      check(t.device == "CUDA" and t.shape[1] == 2 and t.shape[2] == 3, "a CUDA tensor of the host's shape")
      -- results into host memory: in place, and (unaligned destinations) through host storage
      local out = runtime.buffer("float32", 6, "CPU")
      embed.read_into({ t }, { out })
      check(table.concat(out:read(), " ") == "1.0 2.0 3.0 4.0 5.0 6.0", "read into host memory")
      local sources = embed.read_into({ t }, { false })
      check(sources[1].device == "CPU" and table.concat(sources[1]:read(), " ") == "1.0 2.0 3.0 4.0 5.0 6.0",
        "a host copy to read from")
      -- a strided view of host memory is gathered there, then copied
      local every_other = runtime.buffer("float32", 3, "CPU")
      embed.read_into({ embed.wrap(host, { 3 }, { 2 }) }, { every_other })
      check(table.concat(every_other:read(), " ") == "1.0 3.0 5.0", "a strided view")
      print "ok"
    ]])
  end)

  it("moves tensors to CUDA and back, every dtype, as steps of the realize", function()
    if not have_mock() then return end
    child_ok(mock_env(log), [[
      local schedule = require "tcl.schedule"
      local names = {}
      schedule.recorder = function(program) names[#names + 1] = program.name end
      for _, dtype in ipairs { "float32", "float64", "float16", "bfloat16", "int8", "uint8", "int64", "bool" } do
        local data = {}
        for i = 1, 12 do
          if dtype == "bool" then data[i] = i % 3 == 0 else data[i] = (i * 7) % 11 end
        end
        local x = Tensor(data, { dtype = dtype }):reshape(3, 4)
        local there = x:to("cuda")
        assert(there.device == "CUDA" and there.dtype.name == dtype, dtype)
        local back = there:to("CPU")
        local a, b = x:tolist(), back:tolist()
        for r = 1, 3 do for c = 1, 4 do assert(a[r][c] == b[r][c], dtype .. ": values differ") end end
        local via_emu = there:to("EMU"):tolist()
        assert(via_emu[2][3] == a[2][3], dtype .. ": CUDA -> EMU")
        local direct = there:tolist() -- read straight from the device
        assert(direct[3][4] == a[3][4], dtype .. ": read from CUDA")
        local t = Tensor(data, { dtype = dtype, device = "cuda" }) -- written to the device
        assert(t:tolist()[5] == data[5], dtype .. ": written to CUDA")
      end
      schedule.recorder = nil
      -- weights from a safetensors file are copied to the device from a view of the file
      local state, path = require "tcl.api.state", os.tmpname()
      state.safe_save({ w = Tensor({ { 1, 2 }, { 3, 4 } }), b = Tensor({ 0.5, -1 }, { dtype = "float16" }) }, path)
      local sd = state.safe_load(path, { device = "cuda" })
      os.remove(path)
      assert(sd.w.device == "CUDA" and sd.w:tolist()[2][1] == 3 and sd.b:tolist()[2] == -1, "safe_load")
      local seen = {}
      for _, n in ipairs(names) do seen[n] = true end
      assert(seen["copy CPU->CUDA"] and seen["copy CUDA->CPU"] and seen["copy CUDA->EMU"], table.concat(names, ", "))
      print "ok"
    ]])
    assert.are.equal("exit allocations 0 contexts 0 modules 0 events 0", last_line(helper.read(log)))
  end)

  it("says what failed: out of device memory, no device, an error of cuInit", function()
    if not have_mock() then return end
    local status, _, err = child(mock_env(log, "MOCK_CUDA_MAX_ALLOC=1000"),
      "print(Tensor.ones(1000):to('cuda'):tolist())")
    assert.are.equal(1, status)
    assert.matches("CUDA: cannot allocate 4000 bytes on tcl mock GPU: cuMemAlloc failed: CUDA_ERROR_OUT_OF_MEMORY", err,
      1, true)
    status, _, err = child(mock_env(log, "MOCK_CUDA_DEVICES=0"), "print(Tensor.ones(2):to('cuda'):tolist())")
    assert.are.equal(1, status)
    assert.matches("CUDA: no CUDA-capable device is visible", err, 1, true)
    status, _, err = child(mock_env(log, "MOCK_CUDA_INIT_ERROR=100"), "print(Tensor.ones(2):to('cuda'):tolist())")
    assert.are.equal(1, status)
    assert.matches("CUDA: cuInit failed: CUDA_ERROR_NO_DEVICE (no CUDA-capable device is detected)", err, 1, true)
  end)

  local log_between = helper.lines_between
  local function count(lines, prefix)
    local n = 0
    for _, line in ipairs(lines) do if line:sub(1, #prefix) == prefix then n = n + 1 end end
    return n
  end
  -- marks the mock's log from the child
  local MARK = helper.MOCK_CUDA_MARK

  it("queues kernels without waiting for them; a read or tcl.synchronize waits, then frees what was freed meanwhile",
    function()
    if not have_mock() then return end
    if not require("tcl.nvrtc").available() then return pending("NVRTC is not available") end
    -- no cache of freed memory (below): every free goes to the driver
    child_ok("DEVICE=CUDA TCL_CUDA_CACHE_MB=0 " .. mock_env(log), MARK .. [[
      local cuda = require "tcl.cuda"
      local ramp = {} -- uploaded (an arange is lazy): its buffer is freed with the dropped results
      for i = 1, 4096 do ramp[i] = i - 1 end
      local x = Tensor(ramp):float():reshape(64, 64):realize()
      local y = ((x * 2):exp():sum(2) + 1):realize()
      assert(cuda.queued(), "nothing queued after a realize")
      for i = 1, 3 do -- results dropped while their kernels are queued
        local t = (x * i):realize()
        t = nil
        collectgarbage()
        collectgarbage()
      end
      mark "dropped"
      tcl.synchronize()
      assert(not cuda.queued(), "still queued after tcl.synchronize")
      mark "synchronized"
      local z = (y * 3):realize()
      assert(cuda.queued(), "nothing queued")
      local values = z:tolist()
      assert(#values == 64 and not cuda.queued(), "queued after a read")
      mark "read"
      tcl.synchronize("cuda") -- nothing queued: nothing to wait for
      print "ok"
    ]])
    local text = helper.read(log)
    assert.is_nil(text:find("queued kernel uses", 1, true)) -- no memory freed under a kernel
    local queued = log_between(text, "init", "mark dropped")
    assert.are.equal(5, count(queued, "launch "), text)
    assert.are.equal(0, count(queued, "synchronize") + count(queued, "wait") + count(queued, "read"), text)
    assert.are.equal(0, count(queued, "free"), text) -- the dropped results wait for the device
    local synchronized = log_between(text, "mark dropped", "mark synchronized")
    assert.are.equal("synchronize", synchronized[2], text)
    assert.is_true(count(synchronized, "free") >= 3, text) -- then go back
    local read = log_between(text, "mark synchronized", "mark read")
    assert.are.same({ "launch", "read" }, { read[#read - 1]:match("^%a+"), read[#read] }, text)
    assert.are.equal(1, count(read, "launch "), text)
    assert.are.equal("exit allocations 0 contexts 0 modules 0 events 0", last_line(text))
  end)

  it("keeps freed memory for the next allocation of its size, zero-filled again; gives it back when the GPU is full",
    function()
    if not have_mock() then return end
    -- 400000 bytes of device memory: a cache of at most 100000
    child_ok("DEVICE=CUDA " .. mock_env(log, "MOCK_CUDA_MEMORY=400000"), MARK .. [[
      local cuda = require "tcl.cuda"
      for i = 1, 3 do
        local b = cuda.buffer("float32", 15000) -- 60000 bytes
        for _, v in ipairs(b:read()) do assert(v == 0, "not zero-filled") end
        b:write_bytes(string.rep("\1", 60000))
        b = nil
        collectgarbage()
        collectgarbage()
        mark("dropped " .. i)
      end
      local stats = cuda.cache_stats()
      assert(stats.held_bytes == 60000 and stats.held_blocks == 1 and stats.max_bytes == 100000 and stats.reused == 2,
        "cache_stats")
      local big = cuda.buffer("uint8", 360000) -- fits only once the cached 60000 are given back
      mark "big"
      assert(cuda.cache_stats().held_bytes == 0, "the cache was not given back")
      local ok, err = pcall(cuda.buffer, "uint8", 360000)
      assert(not ok and tostring(err):find("CUDA_ERROR_OUT_OF_MEMORY", 1, true), tostring(err))
      print "ok"
    ]])
    local text = helper.read(log)
    local reused = log_between(text, "mark dropped 1", "mark dropped 3")
    assert.are.equal(0, count(reused, "alloc") + count(reused, "free"), text) -- one block, three buffers
    local big = log_between(text, "mark dropped 3", "mark big")
    assert.are.same({ "mark dropped 3", "synchronize", "free", "alloc 360000" }, big)
    assert.are.equal("exit allocations 0 contexts 0 modules 0 events 0", last_line(text))
    local status, _, err = child("DEVICE=CUDA TCL_CUDA_CACHE_MB=lots " .. mock_env(log),
      "print(Tensor.ones(4):to('cuda'):tolist())")
    assert.are.equal(1, status)
    assert.matches("CUDA: TCL_CUDA_CACHE_MB must be a whole number of MiB, got 'lots'", err, 1, true)
  end)

  it("times and waits for each kernel at DEBUG=2 and under tcl.profile", function()
    if not have_mock() then return end
    if not require("tcl.nvrtc").available() then return pending("NVRTC is not available") end
    local _, err = child_ok("DEVICE=CUDA DEBUG=2 " .. mock_env(log), [[
      local x = Tensor.arange(4096):float():reshape(64, 64):realize()
      local y = ((x * 2):exp():sum(2) + 1):realize()
      assert(not require("tcl.cuda").queued(), "a timed kernel left queued")
      print "ok"
    ]])
    assert.matches("*** CUDA ", err, 1, true)
    local text = helper.read(log)
    local launches, waited = 0, 0
    local previous
    for line in text:gmatch("[^\n]+") do
      if line:find("^launch ") then launches = launches + 1 end
      if line == "wait" and previous and previous:find("^launch ") then waited = waited + 1 end
      previous = line
    end
    assert.is_true(launches >= 2, text)
    assert.are.equal(launches, waited, text) -- each launch is followed by the wait for its end event
    os.remove(log)
    child_ok("DEVICE=CUDA " .. mock_env(log), [[
      local x = Tensor.arange(4096):float():reshape(64, 64):realize()
      local report = tcl.profile(function() return ((x * 2):exp():sum(2) + 1):realize() end)
      assert(#report.kernels >= 1 and not require("tcl.cuda").queued(), "profiled kernels left queued")
      print "ok"
    ]])
    text = helper.read(log)
    assert.matches("\nlaunch [^\n]+\nwait\n", text)
  end)

  it("reports a queued kernel's fault at the next call that waits, and names the kernel when each launch waits",
    function()
    if not have_mock() then return end
    if not require("tcl.nvrtc").available() then return pending("NVRTC is not available") end
    local code = [[
      local x = Tensor.arange(4096):float():reshape(64, 64):realize()
      local ok, err = pcall(tcl.synchronize)
      print(ok and "synchronized" or err)
    ]]
    local status, out, err = child(mock_env(log, "DEVICE=CUDA MOCK_CUDA_FAULT='*'"), code)
    assert.are.equal(0, status, err)
    assert.matches("cuCtxSynchronize (waiting for the device) failed: CUDA_ERROR_ILLEGAL_ADDRESS", out, 1, true)
    assert.matches("may be the error of a kernel launched earlier: CUDA_LAUNCH_BLOCKING=1 or DEBUG=2", out, 1, true)
    -- the next allocation meets the fault too, and says so
    status, out, err = child(mock_env(log, "DEVICE=CUDA MOCK_CUDA_FAULT='*'"),
      "local x = Tensor.arange(16):realize(); print((x + 1):realize():tolist())")
    assert.are.equal(1, status, out)
    assert.matches("CUDA_ERROR_ILLEGAL_ADDRESS (an illegal memory access was encountered) (CUDA runs kernels "
      .. "asynchronously", err, 1, true)
    for _, switch in ipairs { "DEBUG=2", "CUDA_LAUNCH_BLOCKING=1" } do
      status, _, err = child(mock_env(log, "DEVICE=CUDA MOCK_CUDA_FAULT='*' " .. switch), code)
      assert.are.equal(1, status, switch)
      -- no position in tcl's Lua before the kernel's name
      assert.matches("tcl: kernel '[%w_]+': CUDA: the kernel failed while running: CUDA_ERROR_ILLEGAL_ADDRESS", err)
      assert.is_nil(err:find("launched earlier", 1, true), switch)
    end
  end)

  -- A PTX with three kernels of one buffer each, and a child chunk that loads one of them with
  -- shared_bytes = bytes and runs it (the mock logs the launch), or fails with the message.
  local SHARED_PTX = ".version 8.0\n.visible .entry big(\n.param .u64 a\n)\n{ ret; }\n" ..
    ".visible .entry small(\n.param .u64 a\n)\n{ ret; }\n.visible .entry edge(\n.param .u64 a\n)\n{ ret; }\n"
  local SHARED_CHUNK = string.format([[
    local cuda = require "tcl.cuda"
    local ptx = %q
    local buffer = cuda.buffer("float32", 4)
    local function run(entry, bytes)
      local p = cuda.program(ptx, { name = "E_" .. entry, entry = entry, params = { { dtype = "float32", numel = 4 } },
        shared_bytes = bytes })
      p:run { buffer }
    end
    local function fails(pattern, entry, bytes)
      local ok, err = pcall(run, entry, bytes)
      assert(not ok and tostring(err):find(pattern, 1, true), "expected '" .. pattern .. "', got " .. tostring(err))
    end
    local info = cuda.device()
  ]], SHARED_PTX)

  it("opts kernels in to more than 48 KiB of dynamic shared memory, up to the device's opt-in limit", function()
    if not have_mock() then return end
    child_ok(mock_env(log), SHARED_CHUNK .. [[
      assert(info.shared_bytes == 49152, "shared_bytes " .. tostring(info.shared_bytes))
      assert(info.shared_bytes_optin == 232448, "shared_bytes_optin " .. tostring(info.shared_bytes_optin))
      run("big", 100000)
      run("small", 40000)
      run("edge", 49152) -- the plain limit itself needs no opt-in
      fails("kernel 'E_big': 300000 bytes of shared memory per block, tcl mock GPU allows 232448", "big", 300000)
      run("big", 232448)
      print "ok"
    ]])
    local text = helper.read(log)
    assert.matches("\nattribute big 8 100000\nlaunch big grid 1 1 1 block 1 1 1 shared 100000 params 1\n", text, 1,
      true)
    assert.matches("\nlaunch small grid 1 1 1 block 1 1 1 shared 40000 params 1\n", text, 1, true)
    assert.matches("\nlaunch edge grid 1 1 1 block 1 1 1 shared 49152 params 1\n", text, 1, true)
    assert.matches("\nattribute big 8 232448\nlaunch big grid 1 1 1 block 1 1 1 shared 232448 params 1\n", text, 1,
      true)
    assert.is_nil(text:find("attribute small", 1, true))
    assert.is_nil(text:find("attribute edge", 1, true))
    assert.is_nil(text:find("300000", 1, true)) -- refused before loading
    assert.is_nil(text:find("without the opt-in", 1, true))
    local attributes = 0
    for _ in text:gmatch("attribute big 8 ") do attributes = attributes + 1 end
    assert.are.equal(2, attributes) -- once per program, not per launch
    assert.are.equal("exit allocations 0 contexts 0 modules 0 events 0", last_line(text))
  end)

  it("takes the opt-in limit from the driver, and names a refused opt-in", function()
    if not have_mock() then return end
    child_ok(mock_env(log, "MOCK_CUDA_SHARED_OPTIN=65536"), SHARED_CHUNK .. [[
      assert(info.shared_bytes_optin == 65536, "shared_bytes_optin " .. tostring(info.shared_bytes_optin))
      fails("kernel 'E_big': 70000 bytes of shared memory per block, tcl mock GPU allows 65536", "big", 70000)
      run("big", 65536)
      print "ok"
    ]])
    assert.matches("\nattribute big 8 65536\nlaunch big grid 1 1 1 block 1 1 1 shared 65536 params 1\n",
      helper.read(log), 1, true)
    -- a driver that does not report the opt-in limit leaves the plain one
    os.remove(log)
    child_ok(mock_env(log, "MOCK_CUDA_SHARED_OPTIN=0"), SHARED_CHUNK .. [[
      assert(info.shared_bytes_optin == 49152, "shared_bytes_optin " .. tostring(info.shared_bytes_optin))
      fails("kernel 'E_big': 49153 bytes of shared memory per block, tcl mock GPU allows 49152", "big", 49153)
      print "ok"
    ]])
    -- the driver refuses the attribute: the program is not made, and nothing of it is left
    os.remove(log)
    child_ok(mock_env(log, "MOCK_CUDA_FUNC_ATTRIBUTE_ERROR=1"), SHARED_CHUNK .. [[
      fails("kernel 'E_big': CUDA: cannot let 'big' use 100000 bytes of dynamic shared memory per block on tcl mock " ..
        "GPU (opt-in limit 232448", "big", 100000)
      fails("cuFuncSetAttribute(MAX_DYNAMIC_SHARED_SIZE_BYTES) failed: CUDA_ERROR_INVALID_VALUE", "big", 100000)
      run("small", 40000) -- no opt-in needed
      print "ok"
    ]])
    local text = helper.read(log)
    assert.is_nil(text:find("launch big", 1, true))
    assert.matches("\nlaunch small grid 1 1 1 block 1 1 1 shared 40000 params 1\n", text, 1, true)
    assert.are.equal("exit allocations 0 contexts 0 modules 0 events 0", last_line(text))
  end)

end)

describe("the mock driver as GPUs of other generations", function()
  local function have_tools()
    if not helper.exists(MOCK) then return pending("the mock driver is not built (" .. MOCK .. ")") end
    local have, why = require("tcl.nvrtc").available()
    if not have then return pending("NVRTC is not available: " .. tostring(why)) end
    return true
  end

  it("compiles a float16 matmul for a Turing GPU (7.5) without tensor cores, and runs its kernels", function()
    if not have_tools() then return end
    local log = os.tmpname()
    local out = child_ok("DEVICE=CUDA MOCK_CUDA_CC=7.5 " .. mock_env(log), [[
      local schedule = require "tcl.schedule"
      local programs = {}
      schedule.recorder = function(kernel) if kernel.program then programs[#programs + 1] = kernel.program end end
      local a = Tensor.ones(256, 256, { dtype = "float16" }):realize()
      local b = Tensor.ones(256, 256, { dtype = "float16" }):realize()
      a:matmul(b):realize()
      schedule.recorder = nil
      for _, p in ipairs(programs) do
        assert(p:assembly():find(".target sm_75", 1, true), "not compiled for sm_75")
        assert(not p:dump():find("mma", 1, true), "tensor cores on sm_75")
        print("kernel " .. p.entry)
      end
      print "ok"
    ]])
    local text = helper.read(log)
    os.remove(log)
    local kernels = 0
    for entry in out:gmatch("kernel ([%w_]+)") do
      kernels = kernels + 1
      assert.matches("\nlaunch " .. entry .. " grid ", text, 1, true)
    end
    assert.is_true(kernels >= 2, out) -- the two fills and the matmul
    assert.are.equal("exit allocations 0 contexts 0 modules 0 events 0", last_line(text))
  end)

  it("says at DEBUG=1 which GPU it opened and what its kernels are made for", function()
    if not have_tools() then return end
    local log = os.tmpname()
    local code = "Tensor.ones(4):sum():realize() print 'ok'"
    local _, err = child_ok("DEVICE=CUDA DEBUG=1 MOCK_CUDA_CC=7.5 " .. mock_env(log), code)
    assert.matches("CUDA: tcl mock GPU, compute capability 7.5, 4 SMs, 1.0 GiB; kernels for sm_75 by NVRTC [%d.]+, "
      .. "target CUDA_SM75 %(no tensor cores%)\n", err)
    _, err = child_ok("DEVICE=CUDA DEBUG=1 MOCK_CUDA_CC=9.0 " .. mock_env(log), code)
    assert.matches("kernels for sm_90a by NVRTC [%d.]+, target CUDA_SM90 %(8 tensor core shapes%)", err)
    -- a GPU newer than NVRTC knows: the PTX of the newest architecture it lists
    local cuda = require "tcl.codegen.devices.cuda"
    local info = { name = "future GPU", compute_capability = { 13, 0 }, arch = "sm_130", multiprocessors = 200,
      total_bytes = 2 ^ 37 }
    local base, arch = cuda.target_of(info, { version = "13.0", archs = { 90, 120, 121 } })
    assert.are.equal("CUDA: future GPU, compute capability 13.0, 200 SMs, 128.0 GiB; kernels for sm_121 by NVRTC "
      .. "13.0, target CUDA (2 tensor core shapes); NVRTC does not compile for sm_130: the driver compiles the PTX "
      .. "for this GPU",
      cuda.describe(info, base, arch, { version = "13.0" }))
    -- nothing at DEBUG=0
    _, err = child_ok("DEVICE=CUDA " .. mock_env(log), code)
    assert.is_nil(err:find("compute capability", 1, true))
    os.remove(log)
  end)

  it("names a GPU that NVRTC cannot compile for at its first kernel, and still copies to and from it", function()
    if not have_tools() then return end
    local archs = require("tcl.nvrtc").supported_archs()
    if not archs or archs[1] <= 30 then return pending("this NVRTC compiles for sm_30: no older GPU to refuse") end
    local log = os.tmpname()
    local old = string.format("MOCK_CUDA_CC=%d.%d ", (archs[1] - 5) // 10, (archs[1] - 5) % 10)
    child_ok(old .. mock_env(log), "assert(Tensor({ 1, 2 }):to('cuda'):to('cpu'):tolist()[2] == 2) print 'ok'")
    local status, _, err = child("DEVICE=CUDA " .. old .. mock_env(log), "print(Tensor.ones(2):realize():tolist())")
    os.remove(log)
    assert.are.equal(1, status, err)
    assert.matches(string.format("CUDA: this GPU (tcl mock GPU, compute capability %s) is older than every "
      .. "architecture NVRTC", old:match("[%d.]+")), err, 1, true)
    assert.matches(string.format("use a CUDA toolkit that supports sm_%d ", archs[1] - 5), err, 1, true)
  end)
end)

describe("a pipelined warpgroup matmul on the mock driver as a Hopper GPU (compute capability 9.0)", function()
  it("compiles for sm_90a and launches with its tiles in dynamic shared memory, opted in", function()
    if not helper.exists(MOCK) then return pending("the mock driver is not built (" .. MOCK .. ")") end
    local have, why = require("tcl.nvrtc").available()
    if not have then return pending("NVRTC is not available: " .. tostring(why)) end
    local log = os.tmpname()
    -- TC(1,431122): a 128 x 128 block, 4 buffers of stages of 64: 2 tiles of 4 * 128 * 64 halves
    local out = child_ok("DEVICE=CUDA MOCK_CUDA_CC=9.0 " .. mock_env(log), [[
      local optimize = require "tcl.codegen.driver.optimize"
      local tensor_cores = require "tcl.heuristics.tensor_cores"
      local schedule = require "tcl.schedule"
      optimize.set_heuristic(function(k)
        if tensor_cores.match(k:graph(), k.caps.gpu) then k:apply("TC", 1, 431122) end
      end)
      local programs = {}
      schedule.recorder = function(kernel) if kernel.program then programs[#programs + 1] = kernel.program end end
      local a = Tensor.empty(128, 256, { dtype = "float16" }):realize()
      local b = Tensor.empty(256, 128, { dtype = "float16" }):realize()
      a:matmul(b):realize()
      schedule.recorder = nil
      for _, p in ipairs(programs) do
        local source = p:dump()
        if source:find("wgmma", 1, true) then
          assert(source:find("extern __shared__", 1, true), "the tiles are not in dynamic shared memory")
          assert(p:assembly():find(".target sm_90a", 1, true), "not compiled for sm_90a")
          print("kernel " .. p.entry)
        end
      end
      print "ok"
    ]])
    local entry = assert(out:match("kernel ([%w_]+)"), out)
    local text = helper.read(log)
    os.remove(log)
    -- opted in when loaded, before the launch
    local opted = text:find("\nattribute " .. entry .. " 8 131072\n", 1, true)
    local launched = text:find("\nlaunch " .. entry .. " grid 1 1 1 block 128 1 1 shared 131072 ", 1, true)
    assert.is_truthy(opted, text)
    assert.is_truthy(launched, text)
    assert.is_true(opted < launched)
    assert.are.equal("exit allocations 0 contexts 0 modules 0 events 0", last_line(text))
  end)
end)

-- "ok" when this machine has a CUDA device and NVRTC, else why not (probed in a child process,
-- so a broken driver cannot take the spec run down).
local function probe_gpu()
  local status, out, err = helper.run(helper.shell_quote(helper.tcl_bin) .. " -e " .. helper.shell_quote([[
    local ok, why = require("tcl.codegen.devices.cuda").probe()
    if not ok then print(why) return end
    local have, missing = require("tcl.nvrtc").available()
    print(have and "ok" or ("NVRTC: " .. tostring(missing)))
  ]]))
  if status ~= 0 then return "the probe failed: " .. err end
  return (out:gsub("\n$", ""))
end

describe("the CUDA device on a GPU", function()
  local why
  local function have_gpu()
    why = why or probe_gpu()
    if why == "ok" then return true end
    pending("no CUDA device: " .. why)
    return false
  end

  require("spec.support.gpu_device_checks")({ it = it, assert = assert }, {
    device = "CUDA", to = "cuda", label = "CUDA", memory = "shared memory", marker = "__shared__",
    dtypes = { "float32", "float64", "float16", "bfloat16", "int8", "int32", "int64", "uint8", "bool" },
    have_gpu = have_gpu,
  })
end)
