-- spec/nn/pooling_spec.lua — max_pool/avg_pool 1/2/3-d (stride, padding, dilation, ceil_mode,
-- count_include_pad) and adaptive_avg_pool/adaptive_max_pool 1/2/3-d against PyTorch, with gradients and errors.
local tcl = require "tcl"
local Tensor = tcl.Tensor
local cases_lib = require "spec.support.torch_cases"

local SHAPES = {
  x1 = { { 2, 3, 11 }, 0.37 }, x2 = { { 2, 3, 9, 7 }, 0.23 }, x3 = { { 1, 2, 7, 6, 5 }, 0.19 },
}
local function input(name)
  local shape, k = SHAPES[name][1], SHAPES[name][2]
  local n = 1
  for _, s in ipairs(shape) do n = n * s end
  return Tensor.arange(n):float():mul(k):sin():reshape(shape):realize()
end
local I = {}
for name in pairs(SHAPES) do I[name] = input(name) end

local function grads(f, name)
  local leaf = input(name):requires_grad_()
  local y = f(leaf)
  y:mul(Tensor.arange(y:numel()):float():mul(0.01):add(1):reshape(y.shape)):sum():backward()
  return leaf.grad
end
local PRELUDE = {
  "def grads(f, t):",
  "    t = t.clone().requires_grad_(True)",
  "    with torch.enable_grad():",
  "        y = f(t)",
  "        (y * (torch.arange(y.numel()).float() * 0.01 + 1).reshape(y.shape)).sum().backward()",
  "    return t.grad",
}

local CASES = {
  { "max_pool1d with stride, padding, dilation",
    function() return I.x1:max_pool1d(3, { stride = 2, padding = 1, dilation = 2 }) end,
    "F.max_pool1d(x1, 3, stride=2, padding=1, dilation=2)" },
  { "max_pool1d ceil_mode",
    function() return I.x1:max_pool1d(4, { stride = 3, padding = 2, ceil_mode = true }) end,
    "F.max_pool1d(x1, 4, stride=3, padding=2, ceil_mode=True)" },
  { "max_pool (2-d) ceil_mode and dilation",
    function() return I.x2:max_pool({ 3, 2 }, { stride = { 2, 2 }, padding = { 1, 0 }, dilation = { 1, 2 },
      ceil_mode = true }) end,
    "F.max_pool2d(x2, (3, 2), stride=(2, 2), padding=(1, 0), dilation=(1, 2), ceil_mode=True)" },
  { "max_pool3d",
    function() return I.x3:max_pool3d({ 3, 2, 2 }, { stride = 2, padding = 1, ceil_mode = true }) end,
    "F.max_pool3d(x3, (3, 2, 2), stride=2, padding=1, ceil_mode=True)" },
  { "avg_pool1d count_include_pad and ceil_mode",
    function() return I.x1:avg_pool1d(4, { stride = 3, padding = 2, ceil_mode = true }) end,
    "F.avg_pool1d(x1, 4, stride=3, padding=2, ceil_mode=True)" },
  { "avg_pool1d without count_include_pad",
    function() return I.x1:avg_pool1d(3, { stride = 2, padding = 1, count_include_pad = false }) end,
    "F.avg_pool1d(x1, 3, stride=2, padding=1, count_include_pad=False)" },
  { "avg_pool (2-d) ceil_mode without count_include_pad",
    function() return I.x2:avg_pool({ 3, 2 }, { stride = 2, padding = 1, ceil_mode = true,
      count_include_pad = false }) end,
    "F.avg_pool2d(x2, (3, 2), stride=2, padding=1, ceil_mode=True, count_include_pad=False)" },
  { "avg_pool3d ceil_mode",
    function() return I.x3:avg_pool3d({ 3, 2, 2 }, { stride = 2, padding = 1, ceil_mode = true }) end,
    "F.avg_pool3d(x3, (3, 2, 2), stride=2, padding=1, ceil_mode=True)" },
  { "adaptive_avg_pool1d/2d/3d",
    function() return { I.x1:adaptive_avg_pool1d(4), I.x2:adaptive_avg_pool2d({ 4, 3 }),
      I.x3:adaptive_avg_pool3d({ 3, 4, 2 }), I.x2:adaptive_avg_pool({ 9, 7 }) } end,
    "[F.adaptive_avg_pool1d(x1, 4), F.adaptive_avg_pool2d(x2, (4, 3)), F.adaptive_avg_pool3d(x3, (3, 4, 2)), x2]" },
  { "adaptive_max_pool1d/2d/3d",
    function() return { I.x1:adaptive_max_pool1d(4), I.x2:adaptive_max_pool2d({ 4, 5 }),
      I.x3:adaptive_max_pool3d({ 3, 4, 2 }), I.x3:adaptive_max_pool({ 10, 2 }) } end,
    "[F.adaptive_max_pool1d(x1, 4), F.adaptive_max_pool2d(x2, (4, 5)), F.adaptive_max_pool3d(x3, (3, 4, 2)), "
      .. "F.adaptive_max_pool2d(x3.reshape(1, 14, 6, 5), (10, 2)).reshape(1, 2, 7, 10, 2)]" },
  { "gradient of max_pool3d",
    function() return grads(function(x) return x:max_pool3d(2, { stride = 1 }) end, "x3") end,
    "grads(lambda x: F.max_pool3d(x, 2, stride=1), x3)" },
  { "gradient of avg_pool1d ceil_mode without count_include_pad",
    function() return grads(function(x) return x:avg_pool1d(3, { stride = 2, padding = 1, ceil_mode = true,
      count_include_pad = false }) end, "x1") end,
    "grads(lambda x: F.avg_pool1d(x, 3, stride=2, padding=1, ceil_mode=True, count_include_pad=False), x1)" },
  { "gradient of adaptive_avg_pool2d and adaptive_max_pool1d",
    function() return { grads(function(x) return x:adaptive_avg_pool2d({ 4, 3 }) end, "x2"),
      grads(function(x) return x:adaptive_max_pool1d(4) end, "x1") } end,
    "[grads(lambda x: F.adaptive_avg_pool2d(x, (4, 3)), x2), grads(lambda x: F.adaptive_max_pool1d(x, 4), x1)]" },
}

describe("N-d and adaptive pools against PyTorch", function()
  local expected
  cases_lib.define(it, CASES, function()
    expected = expected or cases_lib.reference(I, CASES, PRELUDE)
    return expected
  end, 1e-5)
end)

describe("pooling errors", function()
  local function fails(f, message)
    local ok, err = pcall(f)
    assert.is_false(ok, message)
    assert.are.equal(message, tostring(err):gsub("^.-:%d+: ", ""))
  end
  it("name the function and the arguments", function()
    fails(function() I.x1:reshape(6, 11):max_pool3d(2) end, "max_pool3d: needs at least 3 dims, got (6, 11)")
    fails(function() I.x1:max_pool(2) end, "max_pool: kernel_size must be a table of 1 to 3 sizes, got number")
    fails(function() I.x1:avg_pool1d(13) end,
      "avg_pool1d: kernel (13,) (dilation (1,)) does not fit dim 3 of (2, 3, 11), 11 with its padding")
    fails(function() I.x1:avg_pool1d(3, { strides = 2 }) end, "avg_pool1d: unknown option 'strides'")
    fails(function() I.x2:adaptive_avg_pool2d({ 2, 0 }) end,
      "adaptive_avg_pool2d: output size must be >= 1, got 0")
    fails(function() I.x2:adaptive_max_pool({}) end,
      "adaptive_max_pool: output_size must be a table of 1 to 3 sizes, got table")
  end)
end)
