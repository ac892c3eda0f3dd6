-- spec/devices/devices_spec.lua — tensors moving between devices (Tensor.to, tcl.schedule.transfers):
-- values survive every direction and layout, copies run as steps of the realize (kernel counts,
-- tcl.jit replays them with new inputs), gradients come back to the source's device, and the
-- errors name the device.
local tcl = require "tcl"
local schedule = require "tcl.schedule"
local splitmix = require "spec.support.splitmix"
local helper = require "spec.support.helper"

local Tensor = tcl.Tensor

local function values(n, seed)
  local rng, out = splitmix.new(seed), {}
  for i = 1, n do out[i] = rng:integer(-50, 50) end
  return out
end

-- Every step a realize runs (kernels and copies), by name.
local function steps_of(fn)
  local names = {}
  schedule.recorder = function(program) names[#names + 1] = program.name end
  local ok, err = pcall(fn)
  schedule.recorder = nil
  assert(ok, err)
  return names
end

describe("Tensor.to", function()
  it("moves values from CPU to EMU and back, every dtype", function()
    for _, dtype in ipairs { "float32", "float64", "int32", "int8", "uint8", "bool", "float16", "int64" } do
      local data = values(12, 1)
      if dtype == "bool" then for i, v in ipairs(data) do data[i] = v > 0 end end
      if dtype == "uint8" then for i, v in ipairs(data) do data[i] = math.abs(v) end end
      local x = Tensor(data, { dtype = dtype }):reshape(3, 4)
      local there = x:to("emu")
      assert.are.equal("EMU", there.device)
      assert.are.equal(dtype, there.dtype.name)
      assert.are.same(x:tolist(), there:tolist(), dtype)
      local back = there:to("CPU")
      assert.are.equal("CPU", back.device)
      assert.are.same(x:tolist(), back:tolist(), dtype)
    end
  end)

  it("moves lazy results and views (a transpose, a slice) in their own layout", function()
    local data = values(24, 2)
    local x = Tensor(data):reshape(4, 6)
    assert.are.same(x:transpose(1, 2):tolist(), x:transpose(1, 2):to("EMU"):tolist())
    assert.are.same(x:narrow(2, 2, 3):tolist(), x:narrow(2, 2, 3):to("EMU"):tolist())
    assert.are.same(((x * 3 - 1):sum(2)):tolist(), ((x * 3 - 1):to("EMU"):sum(2)):tolist())
  end)

  it("computes on the target device with inputs from both sides of a copy chain", function()
    local a, b = Tensor(values(8, 3)), Tensor(values(8, 4), { device = "EMU" })
    local on_emu = a:to("EMU") * b
    local want = {}
    for i, v in ipairs(a:tolist()) do want[i] = v * b:tolist()[i] end
    assert.are.same(want, on_emu:tolist())
    -- a copy of a copy: CPU -> EMU -> CPU, then a CPU kernel
    assert.are.same(want, (a:to("EMU"):to("CPU") * b:to("CPU")):tolist())
  end)

  it("runs the copy as a step of the realize, before the kernels that read it", function()
    local x = Tensor(values(16, 5))
    local names = steps_of(function() (x:to("EMU") * 2):realize() end)
    assert.are.equal("copy CPU->EMU", names[#names - 1])
    assert.are.equal(2, #names)
    -- the same device: no copy, no node
    local same = Tensor.ones(3)
    assert.are.equal(same, same:to("cpu"))
  end)

  it("is replayed by tcl.jit with each call's input", function()
    local f = tcl.jit(function(x) return (x:to("EMU") + 1):sum() end)
    for i = 1, 5 do
      local r = f(Tensor.full({ 3, 3 }, i))
      assert.are.equal("EMU", r.device)
      assert.are.equal(9 * (i + 1), r:item())
    end
    assert.are.equal(3, f:stats().replayed)
  end)

  it("sends gradients back to the source's device", function()
    local w = Tensor({ 1.5, -2, 3 }, { requires_grad = true })
    local scale = Tensor({ 2, 4, 8 }, { device = "EMU" })
    local loss = (w:to("EMU") * scale):sum()
    loss:backward()
    assert.are.equal("CPU", w.grad.device)
    assert.are.same({ 2, 4, 8 }, w.grad:tolist())
  end)

  it("names the problem: an unknown device, a non-string, mixing devices without a copy", function()
    assert.are.equal("to: unknown device 'GPU9' (available: EMU, CPU, CUDA, METAL)",
      helper.error_of(Tensor.to, Tensor.ones(2), "GPU9"))
    assert.are.equal("to: expected a device name, got number", helper.error_of(Tensor.to, Tensor.ones(2), 5))
    local err = helper.error_of(function() return Tensor.ones(2) + Tensor.ones(2, { device = "EMU" }) end)
    assert.matches("add: tensors are on different devices, CPU and EMU (move one with t:to(device))", err, 1, true)
  end)
end)
