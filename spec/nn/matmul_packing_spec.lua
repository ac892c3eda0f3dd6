-- spec/nn/matmul_packing_spec.lua — a large CPU matmul packs its weight into column panels
-- (lua/tcl/api/nn.lua, packed_product): which products pack (rows, weight size, device, dtype),
-- their values against the same product unpacked, the kernels (one packing kernel, the product
-- over (rows, panels, panel columns)), gradients through it, and the heuristic's panel groups.
local tcl = require "tcl"
local nn = require "tcl.api.nn"
local schedule = require "tcl.schedule"
local Tensor = tcl.Tensor
local kernel_names = require("spec.support.helper").scheduled_kernel_names

-- A deterministic tensor of shape ... with values in [-1, 1).
local function ramp(dtype, ...)
  local n = 1
  for _, d in ipairs({ ... }) do n = n * d end
  return Tensor.arange(n):float():mul(0.37):sin():reshape(...):cast(dtype):realize()
end

local packing = nn._packing

local function unpacked(fn)
  local saved = packing.min_elements
  packing.min_elements = math.huge
  local results = table.pack(pcall(fn))
  packing.min_elements = saved
  assert(results[1], results[2])
  return table.unpack(results, 2, results.n)
end

-- Whether t's kernels include a packing kernel: E_<panels>_<k>_32.
local function packs(t)
  for _, k in ipairs(schedule.create({ t.uop }).kernels) do
    if k.name:match("^E_%d+_%d+_32$") then return true end
  end
  return false
end


local function assert_close(expected, actual, tolerance, what)
  assert.are.same(expected.shape, actual.shape, what .. ": shape")
  local e, a = expected:reshape(-1):float():tolist(), actual:reshape(-1):float():tolist()
  for i = 1, #e do
    local scale = math.max(1, math.abs(e[i]))
    if math.abs(e[i] - a[i]) > tolerance * scale then
      error(string.format("%s: element %d is %s packed, %s unpacked", what, i, tostring(a[i]), tostring(e[i])), 2)
    end
  end
end

describe("a large CPU matmul with its weight packed in panels", function()
  it("packs from 128 rows and 2^20 weight elements (tcl.api.nn._packing), on the CPU, for float weights",
    function()
      local w = ramp("float32", 512, 2048) -- 2^20 elements
      local packed_names = kernel_names(ramp("float32", 256, 512):matmul(w))
      assert.are.same({ "E_64_512_32", "r_256_64_32_512" }, packed_names)
      -- too few rows, too small a weight, a width that is no multiple of the panel: not packed
      assert.are.same({ "r_127_2048_512" }, kernel_names(ramp("float32", 127, 512):matmul(w)))
      assert.are.same({ "E_64_512_32", "r_128_64_32_512" }, kernel_names(ramp("float32", 128, 512):matmul(w)))
      assert.are.same({ "r_256_1024_512" }, kernel_names(ramp("float32", 256, 512):matmul(ramp("float32", 512, 1024))))
      assert.are.same({ "r_256_2040_520" },
        kernel_names(ramp("float32", 256, 520):matmul(ramp("float32", 520, 2040))))
      -- integers and EMU are left as they were
      local ints = ramp("int32", 256, 512):matmul(ramp("int32", 512, 2048))
      assert.is_false(packs(ints))
      assert.is_false(packs(ramp("float32", 256, 512):to("EMU"):matmul(w:to("EMU"))))
    end)

  -- the values below run on small products with the thresholds lowered (so the spec stays fast);
  -- a K of 1024 over 8 panels makes the heuristic group them (2 groups of 4 panels)
  local function small_thresholds(fn)
    local rows, elements = packing.min_rows, packing.min_elements
    packing.min_rows, packing.min_elements = 8, 1024
    local results = table.pack(pcall(fn))
    packing.min_rows, packing.min_elements = rows, elements
    assert(results[1], results[2])
    return table.unpack(results, 2, results.n)
  end

  it("gives the unpacked product's values: 2-d, batched rows, float64, float16 and linear with a bias", function()
    small_thresholds(function()
      local cases = {
        { "2-d", function() return ramp("float32", 40, 64):matmul(ramp("float32", 64, 96)) end, 1e-5 },
        { "grouped panels", function() return ramp("float32", 16, 1024):matmul(ramp("float32", 1024, 256)) end, 1e-5 },
        { "batched", function() return ramp("float32", 2, 12, 64):matmul(ramp("float32", 64, 128)) end, 1e-5 },
        { "float64", function() return ramp("float64", 24, 96):matmul(ramp("float64", 96, 64)) end, 1e-12 },
        { "float16", function() return ramp("float16", 24, 96):matmul(ramp("float16", 96, 64)) end, 2e-2 },
        { "linear", function()
          return ramp("float32", 16, 64):linear(ramp("float32", 64, 96), ramp("float32", 96))
        end, 1e-5 },
      }
      for _, case in ipairs(cases) do
        local name, make, tolerance = case[1], case[2], case[3]
        local packed = make()
        assert.is_true(packs(packed), name .. " packs")
        assert_close(unpacked(make):realize(), packed:realize(), tolerance, name)
      end
    end)
  end)

  it("passes gradients to the input and the weight", function()
    local function grads()
      local x = ramp("float32", 16, 1024):requires_grad_()
      local w = ramp("float32", 1024, 256):requires_grad_()
      x:matmul(w):mul(ramp("float32", 16, 256)):sum():backward()
      return x.grad:realize(), w.grad:realize()
    end
    local dx, dw = small_thresholds(grads)
    local ux, uw = unpacked(grads)
    assert_close(ux, dx, 1e-4, "input gradient")
    assert_close(uw, dw, 1e-4, "weight gradient")
  end)
end)
