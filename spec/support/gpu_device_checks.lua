-- spec/support/gpu_device_checks.lua — the checks of a GPU device against the CPU that every
-- GPU device spec runs where its device is there (spec/devices/cuda_device_spec.lua,
-- spec/devices/metal_device_spec.lua): values round-tripped through device memory, elementwise kernels,
-- and reductions through the workgroup's local memory.
--
--   require("spec.support.gpu_device_checks")({ it = it, assert = assert }, opts)
--
-- inside the device's describe block (busted's it and assert live in the spec file's
-- environment, so the spec hands them over).
-- opts: device ("CUDA"), to (the name t:to() takes: "cuda"), label ("CUDA", in messages),
-- dtypes (those the device has), memory ("shared memory": the reduction spec's title and
-- message), marker (a string in the source of a kernel that uses local memory), have_gpu (a
-- function: true, or false after marking the spec pending with the reason).
local Tensor = require("tcl").Tensor

local function values(n, seed)
  local out, state = {}, seed
  for i = 1, n do
    state = (state * 1103515245 + 12345) % 2147483648
    out[i] = (state % 2001 - 1000) / 250
  end
  return out
end

local function close(assert, a, b, tolerance, what)
  assert.are.equal(#a, #b, what)
  for i = 1, #a do
    local d = math.abs(a[i] - b[i]) / (1 + math.abs(b[i]))
    assert(d <= tolerance, string.format("%s: element %d is %s, expected %s", what, i, tostring(a[i]),
      tostring(b[i])))
  end
end

return function(busted, opts)
  local it, assert, have_gpu = busted.it, busted.assert, opts.have_gpu

  it("round-trips values through device memory, every dtype " .. opts.label .. " has", function()
    if not have_gpu() then return end
    for _, dtype in ipairs(opts.dtypes) do
      local data = {}
      for i, v in ipairs(values(24, 3)) do
        if dtype == "bool" then data[i] = v > 0
        elseif dtype:find("int") then data[i] = math.floor(math.abs(v) * 10)
        else data[i] = v end
      end
      local x = Tensor(data, { dtype = dtype }):reshape(4, 6)
      local there = x:to(opts.to)
      assert.are.equal(opts.device, there.device)
      assert.are.same(x:tolist(), there:tolist(), dtype)
      assert.are.same(x:tolist(), there:to("CPU"):tolist(), dtype)
    end
  end)

  it("computes elementwise kernels as the CPU does", function()
    if not have_gpu() then return end
    local a, b = values(4096, 1), values(4096, 2)
    local function f(device)
      local x = Tensor(a, { device = device }):reshape(64, 64)
      local y = Tensor(b, { device = device }):reshape(64, 64)
      return ((x * y + 1):exp() - y:abs():sqrt() * 0.5):maximum(x):reshape(4096):tolist()
    end
    close(assert, f(opts.device), f("CPU"), 1e-5, "elementwise")
  end)

  it("computes a reduction through " .. opts.memory .. " as the CPU does", function()
    if not have_gpu() then return end
    local schedule = require "tcl.schedule"
    local data = values(65536, 5)
    local function f(device)
      local x = Tensor(data, { device = device }):reshape(256, 256)
      return { x:sum(2):tolist(), x:max(1):tolist(), x:sum():item() }
    end
    local sources = {}
    schedule.recorder = function(kernel)
      if kernel.program and kernel.program.source then sources[#sources + 1] = kernel.program.source end
    end
    local ok, on_gpu = pcall(f, opts.device)
    schedule.recorder = nil
    assert(ok, on_gpu)
    local on_cpu = f("CPU")
    close(assert, on_gpu[1], on_cpu[1], 1e-4, "sum over rows")
    close(assert, on_gpu[2], on_cpu[2], 0, "max over columns")
    -- 65536 float32 values summed in another order: within 1e-6 of the sum of magnitudes
    local magnitude = 0
    for _, v in ipairs(data) do magnitude = magnitude + math.abs(v) end
    assert(math.abs(on_gpu[3] - on_cpu[3]) <= 1e-6 * magnitude,
      string.format("sum of all: %s on %s, %s on the CPU", on_gpu[3], opts.label, on_cpu[3]))
    local shared = false
    for _, s in ipairs(sources) do shared = shared or s:find(opts.marker, 1, true) ~= nil end
    assert.is_true(shared, "no kernel used " .. opts.memory)
  end)
end
