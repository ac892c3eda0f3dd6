-- spec/runtime/cpu_instances_spec.lua — several CPU devices in one process (tcl.devices, issue 39):
-- names with an instance ("CPU:2") and their errors, values on CPU:2 equal to CPU's and to
-- references, one compile per kernel for every instance, copies between instances (both ways,
-- seen as copies by tcl.profile), jit replays, a thread pool of its own per instance (its threads
-- configured apart; runtime.cpu_pools), training, state dicts, DEVICE, and many realizes
-- alternating between two instances.
local helper = require "spec.support.helper"
local splitmix = require "spec.support.splitmix"
local tcl = require "tcl"
local devices = require "tcl.devices"
local lower = require "tcl.codegen.driver.lower"
local schedule = require "tcl.schedule"
local buffers = require "tcl.schedule.buffers"

local Tensor = tcl.Tensor
local q = helper.shell_quote

local function values(n, seed)
  local rng, out = splitmix.new(seed), {}
  for i = 1, n do out[i] = rng:integer(-50, 50) / 4 end
  return out
end

local function rows(list, ncols)
  local out = {}
  for i = 1, #list // ncols do out[i] = table.move(list, (i - 1) * ncols + 1, i * ncols, 1, {}) end
  return out
end

-- Runs a Lua chunk with tcl in a fresh process (pools are per state, configured once);
-- returns status, stdout, stderr.
local function run_tcl_process(code, env_prefix)
  local path = os.tmpname()
  helper.write(path, code)
  local status, out, err = helper.run((env_prefix or "") .. " TCL_LUA_DIR=" .. q(helper.root .. "/lua") .. " "
    .. q(helper.tcl_bin) .. " " .. q(path))
  os.remove(path)
  return status, out, err
end

describe("device names with an instance", function()
  it("parse into a device and an instance; the first instance is the device itself", function()
    assert.are.same({ "CPU", 2 }, { devices.parse("cpu:2") })
    assert.are.same({ "CPU", 1 }, { devices.parse("CPU") })
    assert.are.same({ "EMU", 64 }, { devices.parse("EMU:64") })
    assert.are.equal("CPU", devices.canonical("cpu:1"))
    assert.are.equal("CPU:2", devices.canonical("Cpu:02"))
    assert.are.equal("CPU", devices.base("CPU:17"))
    assert.are.equal(17, devices.instance("CPU:17"))
    assert.are.equal("CPU:3", devices.name("CPU", 3))
    assert.are.equal("CPU:5", tcl.devices.canonical("cpu:5"))
  end)

  it("are normalized by Tensor, to and from_bytes: t.device shows the canonical name", function()
    assert.are.equal("CPU", Tensor({ 1, 2 }, { device = "cpu:1" }).device)
    assert.are.equal("CPU:2", Tensor({ 1, 2 }, { device = "cpu:2" }).device)
    assert.are.equal("CPU:2", Tensor({ 1, 2 }):to("Cpu:2").device)
    local x = Tensor({ 1, 2 })
    assert.are.equal(x, x:to("CPU:1")) -- the same device: no copy, the tensor itself
    assert.are.equal("EMU:2", Tensor.zeros(3, { device = "emu:2" }).device)
    assert.are.equal("CPU:3", Tensor.from_bytes(string.pack("<ff", 1, 2), "float32", { 2 }, { device = "CPU:3" })
      .device)
  end)

  it("that are wrong are errors naming the problem", function()
    local function message(name) return helper.error_of(Tensor, { 1 }, { device = name }) end
    assert.are.equal("Tensor: device 'CPU:0': instances count from 1 (CPU:1 is CPU)", message("CPU:0"))
    assert.are.equal("Tensor: device 'cpu:x': the instance must be a number (CPU:1 to CPU:64)", message("cpu:x"))
    assert.are.equal("Tensor: device 'CPU:': the instance must be a number (CPU:1 to CPU:64)", message("CPU:"))
    assert.are.equal("Tensor: device 'CPU:-1': the instance must be a number (CPU:1 to CPU:64)", message("CPU:-1"))
    assert.are.equal("Tensor: device 'CPU:65': at most 64 instances (CPU:1 to CPU:64)", message("CPU:65"))
    -- several GPUs are instances of CUDA (opened at first use: spec/devices/cuda_instances_spec.lua)
    assert.are.equal("CUDA:2", Tensor.ones(2, { device = "cuda:2" }).device)
    assert.are.equal("Tensor: METAL:3: only one Metal device is supported yet", message("METAL:3"))
    assert.are.equal("Tensor: unknown device 'TPU:2' (available: EMU, CPU, CUDA, METAL)", message("TPU:2"))
    assert.are.equal("to: device 'CPU:0': instances count from 1 (CPU:1 is CPU)",
      helper.error_of(Tensor({ 1 }).to, Tensor({ 1 }), "CPU:0"))
    helper.fails_with("device 'CPU:0': instances count from 1", devices.parse, "CPU:0")
    helper.fails_with("a device name must be a string such as 'CPU' or 'CPU:2', got number", devices.canonical, 2)
  end)
end)

describe("a CPU instance", function()
  it("computes what CPU computes, and what references say", function()
    local a, b = values(6 * 5, 1), values(5 * 4, 2)
    local function compute(device)
      local x = Tensor(a, { device = device }):reshape(6, 5)
      local w = Tensor(b, { device = device }):reshape(5, 4)
      local y = x:matmul(w)
      return { y = y, sum = (x * 2 + 1):sum(2), max = x:max(), softmax = y:softmax(2) }
    end
    local one, two = compute("CPU"), compute("CPU:2")
    for _, k in ipairs { "y", "sum", "max", "softmax" } do
      assert.are.equal("CPU:2", two[k].device, k)
      assert.are.same(one[k]:tolist(), two[k]:tolist(), k)
    end
    -- the product against doubles (every value is a multiple of 1/16: exact in float32)
    assert.are.same(helper.naive_matmul(rows(a, 5), rows(b, 4)), two.y:tolist())
    local sums = {}
    for i, r in ipairs(rows(a, 5)) do
      local s = 0
      for _, v in ipairs(r) do s = s + 2 * v + 1 end
      sums[i] = s
    end
    assert.are.same(sums, two.sum:tolist())
  end)

  it("runs the kernels compiled for CPU: one compile for every instance", function()
    local data = values(64, 3)
    local function run(device) return ((Tensor(data, { device = device }) * 3 - 7):exp2():sum()):item() end
    local first = run("CPU") -- compiles (or finds) the kernels
    local before, cache_before = lower.stats(), tcl.kernel_cache.stats()
    local second, third = run("CPU:2"), run("CPU:3")
    local after, cache_after = lower.stats(), tcl.kernel_cache.stats()
    assert.are.equal(first, second)
    assert.are.equal(first, third)
    assert.are.equal(0, after.built - before.built)
    assert.is_true(after.memory_hits - before.memory_hits >= 2)
    assert.are.equal(cache_before.entries, cache_after.entries)
  end)

  it("copies to and from another instance as copies, with the values intact", function()
    local data = values(1000, 4)
    local x = Tensor(data):realize()
    local there
    local report = tcl.profile(function() there = x:to("CPU:2"):realize() end)
    assert.are.equal("CPU:2", there.device)
    assert.are.equal(1, #report.copies)
    assert.are.equal("copy CPU->CPU:2", report.copies[1].name)
    assert.are.equal(4000, report.copies[1].bytes)
    local back
    report = tcl.profile(function() back = (there + 1):to("CPU"):realize() end)
    assert.are.equal("CPU", back.device)
    local names = {}
    for _, c in ipairs(report.copies) do names[#names + 1] = c.name end
    assert.are.same({ "copy CPU:2->CPU" }, names)
    assert.are.equal("CPU:2", report.kernels[1].device) -- the kernel ran on the instance
    local want = {}
    for i, v in ipairs(data) do want[i] = v + 1 end
    assert.are.same(want, back:tolist())
    -- between two instances other than the first
    assert.are.same(data, x:to("CPU:3"):to("CPU:4"):to("EMU:2"):tolist())
  end)

  it("keeps one device per schedule: tcl.realize plans each instance's tensors apart, one graph over two is refused",
    function()
    local a, b = Tensor({ 1, 2 }), Tensor({ 3, 4 }, { device = "CPU:2" })
    local ra, rb = a + 1, b + 1
    tcl.realize(rb, ra) -- one schedule per device (sharded tensors realize this way)
    assert.are.same({ 2, 3 }, ra:tolist())
    assert.are.same({ 4, 5 }, rb:tolist())
    helper.fails_with("CPU:2", function() return (a + b):realize() end)
  end)

  it("refuses a kernel run over buffers of two instances", function()
    local kernel, args
    schedule.recorder = function(program, _, kernel_args) kernel, args = program, kernel_args end
    local ok, err = pcall(function() return (Tensor({ 1, 2, 3 }, { device = "CPU:2" }) * 5):realize() end)
    schedule.recorder = nil
    assert(ok, err)
    assert.are.equal("CPU:2", args[1].device)
    local mixed = { args[1], buffers.allocate(args[2].dtype, args[2].numel, "CPU") }
    assert.are.equal(string.format("kernel '%s': buffer 2 is on CPU, buffer 1 on CPU:2 (a kernel runs on one device)",
      kernel.name), helper.error_of(kernel.program.run, kernel.program, mixed))
  end)

  it("replays jit plans on its tensors, and refuses another instance's", function()
    local f = tcl.jit(function(a) return (a * 2):sum() end)
    for i = 1, 4 do
      local out = f(Tensor({ 1, 2, 3, i }, { device = "CPU:2" }))
      assert.are.equal("CPU:2", out.device)
      assert.are.equal(2 * (6 + i), out:item())
    end
    helper.fails_with("argument 1 is on CPU:3, but the plans were captured on CPU:2", f,
      Tensor({ 1, 2, 3, 4 }, { device = "CPU:3" }))
  end)

  it("survives 200 realizes alternating with CPU, their buffers freed", function()
    collectgarbage()
    buffers.collect()
    local registered = buffers.stats().registered
    local built = lower.stats().built
    for i = 1, 200 do
      local device = i % 2 == 0 and "CPU" or "CPU:2"
      local x = Tensor({ i, i + 1, i + 2 }, { device = device })
      local y = (x * 2):sum()
      assert.are.equal(device, y.device)
      assert.are.equal(6 * i + 6, y:item())
      if i % 50 == 0 then collectgarbage() end
    end
    collectgarbage()
    collectgarbage()
    buffers.collect()
    assert.is_true(buffers.stats().registered <= registered + 4, "buffers left: " .. buffers.stats().registered)
    assert.is_true(lower.stats().built - built <= 2, "kernels built per instance")
  end)
end)

describe("a CPU instance for the rest of the API", function()
  it("trains: gradients and an optimizer step stay on the instance, as on CPU", function()
    local function train(device)
      local w = Tensor({ 0.5, -1, 2 }, { device = device }):requires_grad_()
      local opt = tcl.optim.SGD({ w }, { lr = 0.125 })
      local x = Tensor({ 1, 2, 3 }, { device = device })
      for _ = 1, 3 do
        opt:zero_grad()
        local loss = ((w * x):sum() - 1) ^ 2
        loss:backward()
        assert.are.equal(device, w.grad.device)
        opt:step()
      end
      assert.are.equal(device, w.device)
      return w:tolist()
    end
    assert.are.same(train("CPU"), train("CPU:2"))
  end)

  it("loads state dicts onto it, and synchronizes it by any spelling", function()
    local path = os.tmpname()
    tcl.nn.state.safe_save({ a = Tensor({ 1.5, 2, 3, 4 }) }, path)
    local sd = tcl.nn.state.safe_load(path, { device = "cpu:2" })
    os.remove(path)
    assert.are.equal("CPU:2", sd.a.device)
    assert.are.same({ 2.5, 3, 4, 5 }, (sd.a + 1):tolist())
    tcl.synchronize("cpu:2")
    assert.are.equal("device 'CPU:0': instances count from 1 (CPU:1 is CPU)", helper.error_of(tcl.synchronize, "CPU:0"))
  end)

  it("is the default device when DEVICE names it", function()
    local status, out, err = run_tcl_process([[
      local tcl = require "tcl"
      local x = tcl.Tensor({ 1, 2, 3 })
      io.write(x.device, " ", (x * 2):sum():item(), " ", tcl.Tensor.zeros(2).device)
    ]], "DEVICE=cpu:2")
    assert.are.equal(0, status, out .. err)
    assert.are.equal("CPU:2 12 CPU:2", out)
  end)
end)

describe("the thread pools of CPU instances", function()
  -- a kernel large enough to split its loop over a pool's threads
  local WORK = [[
    local tcl = require "tcl"
    local rt = require "tcl.runtime"
    local function work(device)
      local x = tcl.Tensor.arange(1 << 18, { dtype = "float32", device = device })
      return (x * 0.5 + 1):sum():item()
    end
    local function pools()
      local p, names = rt.cpu_pools(), {}
      for name in pairs(p) do names[#names + 1] = name end
      table.sort(names)
      for _, name in ipairs(names) do
        io.write(name, "=", p[name].threads, "/", p[name].runs > 0 and "ran" or "idle", " ")
      end
      io.write(#names == 0 and "none\n" or "\n")
    end
  ]]

  it("are one per instance, each with the threads configured for it", function()
    local status, out, err = run_tcl_process(WORK .. [[
      tcl.devices.set_threads("CPU:2", 1)
      tcl.devices.set_threads("CPU", 2)
      local n, started = tcl.devices.threads("CPU:2")
      io.write(n, " ", tostring(started), "\n")
      pools()
      local a = work("CPU")
      pools()
      local b = work("CPU:2")
      pools()
      io.write(tostring(a == b), "\n")
      io.write(select(2, pcall(tcl.devices.set_threads, "CPU:2", 3)), "\n")
      tcl.devices.set_threads("CPU:2", 1) -- the same count again is fine
      io.write(select(2, pcall(tcl.devices.set_threads, "EMU:2", 1)), "\n")
      io.write(select(2, pcall(tcl.devices.set_threads, "CPU:0", 1)), "\n")
    ]])
    assert.are.equal(0, status, out .. err)
    local lines = {}
    for line in out:gmatch("[^\n]+") do lines[#lines + 1] = line end
    assert.are.equal("1 false", lines[1])
    assert.are.equal("none", lines[2]) -- no pool before a run
    assert.are.equal("CPU=2/ran ", lines[3])
    assert.are.equal("CPU=2/ran CPU:2=1/ran ", lines[4])
    assert.are.equal("true", lines[5])
    assert.are.equal("devices.set_threads: the CPU:2 thread pool already runs with 1 threads; configure threads "
      .. "(3 asked) before the first CPU:2 run", lines[6])
    assert.are.equal("devices.set_threads: device 'EMU:2' is not a CPU device (CPU, CPU:2, ...): only CPU "
      .. "instances have threads", lines[7])
    assert.are.equal("devices.set_threads: device 'CPU:0': instances count from 1 (CPU:1 is CPU)", lines[8])
  end)

  it("take TCL_THREADS unless configured apart, and are joined when the state closes", function()
    local status, out, err = run_tcl_process(WORK .. [[
      tcl.devices.set_threads("CPU:3", 2)
      work("CPU:2")
      work("CPU:3")
      work("CPU:4")
      pools()
      io.write(tostring(tcl.devices.threads("CPU:9")), "\n")
    ]], "TCL_THREADS=3")
    assert.are.equal(0, status, out .. err)
    assert.are.equal("CPU:2=3/ran CPU:3=2/ran CPU:4=3/ran \n3\n", out)
  end)
end)
