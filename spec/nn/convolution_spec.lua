-- spec/nn/convolution_spec.lua — conv/conv1d/conv3d, conv_transpose 1/2/3-d, pad modes, nn conv layers vs PyTorch
-- (values and gradients), their errors, and conv2d's kernel count when reached through conv.
local tcl = require "tcl"
local Tensor = tcl.Tensor
local schedule = require "tcl.schedule"
local cases_lib = require "spec.support.torch_cases"

-- deterministic float32 inputs: sin of a scaled arange (fresh leaves on every call)
local SHAPES = {
  x1 = { { 2, 4, 9 }, 0.37 }, w1 = { { 6, 2, 3 }, 0.71 }, b6 = { { 6 }, 1.3 },
  x2 = { { 2, 4, 7, 6 }, 0.23 }, w2 = { { 6, 2, 3, 2 }, 0.51 },
  x4 = { { 2, 3, 11, 10 }, 0.27 }, w4 = { { 5, 3, 3, 3 }, 0.53 }, w5 = { { 5, 3, 4, 5 }, 0.41 }, b5 = { { 5 }, 0.9 },
  x3 = { { 1, 4, 5, 6, 4 }, 0.19 }, w3 = { { 6, 2, 3, 2, 3 }, 0.43 },
  t5 = { { 4, 5, 3, 3 }, 0.37 }, t6 = { { 4, 5, 4, 3 }, 0.67 },
  t1 = { { 4, 3, 3 }, 0.61 }, t2 = { { 4, 3, 3, 2 }, 0.29 }, t3 = { { 4, 3, 2, 3, 2 }, 0.47 },
}
local function input(name)
  local shape, k = SHAPES[name][1], SHAPES[name][2]
  local n = 1
  for _, s in ipairs(shape) do n = n * s end
  return Tensor.arange(n):float():mul(k):sin():reshape(shape):realize()
end
local inputs = {}
for name in pairs(SHAPES) do inputs[name] = input(name) end

-- the gradients of sum(f(...) * weights) (weights 1 + 0.01 * arange) with respect to each input
local function grads(f, ...)
  local leaves = {}
  for i, name in ipairs({ ... }) do leaves[i] = input(name):requires_grad_() end
  local y = f(table.unpack(leaves))
  local weights = Tensor.arange(y:numel()):float():mul(0.01):add(1):reshape(y.shape)
  y:mul(weights):sum():backward()
  local out = {}
  for i, leaf in ipairs(leaves) do out[i] = leaf.grad end
  return out
end
local PRELUDE = {
  "def grads(f, *ts):",
  "    ts = [t.clone().requires_grad_(True) for t in ts]",
  "    with torch.enable_grad():",
  "        y = f(*ts)",
  "        (y * (torch.arange(y.numel()).float() * 0.01 + 1).reshape(y.shape)).sum().backward()",
  "    return [t.grad for t in ts]",
}

local I = inputs
local CASES = {
  { "conv1d with stride, padding, dilation, groups and bias",
    function() return I.x1:conv1d(I.w1, I.b6, { stride = 2, padding = 2, dilation = 2, groups = 2 }) end,
    "F.conv1d(x1, w1, b6, stride=2, padding=2, dilation=2, groups=2)" },
  { "conv (2-d) padding 'same' with an odd total (the extra cell after, as torch)",
    function() return I.x2:conv(I.w2, nil, { padding = "same", dilation = { 2, 3 }, groups = 2 }) end,
    "F.conv2d(x2, w2, None, padding='same', dilation=(2, 3), groups=2)" },
  { "conv1d padding 'same' with dilation",
    function() return I.x1:conv1d(I.w1, nil, { padding = "same", dilation = 3, groups = 2 }) end,
    "F.conv1d(x1, w1, None, padding='same', dilation=3, groups=2)" },
  { "conv (1-d) padding_mode reflect",
    function() return I.x1:conv(I.w1, I.b6, { padding = 2, padding_mode = "reflect", groups = 2 }) end,
    "torch.nn.functional.conv1d(F.pad(x1, (2, 2), mode='reflect'), w1, b6, groups=2)" },
  { "conv1d padding_mode replicate",
    function()
      return I.x1:conv1d(I.w1, nil, { padding = 3, padding_mode = "replicate", groups = 2, stride = 2 })
    end,
    "F.conv1d(F.pad(x1, (3, 3), mode='replicate'), w1, None, groups=2, stride=2)" },
  { "conv1d padding_mode circular",
    function() return I.x1:conv1d(I.w1, nil, { padding = 4, padding_mode = "circular", groups = 2 }) end,
    "F.conv1d(F.pad(x1, (4, 4), mode='circular'), w1, None, groups=2)" },
  { "conv (2-d) asymmetric padding pairs and padding_mode circular",
    function()
      return I.x2:conv(I.w2, I.b6, { padding = { { 1, 2 }, { 0, 1 } }, padding_mode = "circular", groups = 2 })
    end,
    "F.conv2d(F.pad(x2, (0, 1, 1, 2), mode='circular'), w2, b6, groups=2)" },
  { "conv (2-d) is conv2d: stride, dilation, groups",
    function() return I.x2:conv(I.w2, nil, { stride = { 2, 1 }, dilation = { 1, 2 }, padding = 1, groups = 2 }) end,
    "F.conv2d(x2, w2, None, stride=(2, 1), dilation=(1, 2), padding=1, groups=2)" },
  { "conv3d with stride, padding, dilation, groups and bias",
    function() return I.x3:conv3d(I.w3, I.b6, { stride = { 1, 2, 1 }, padding = { 1, 0, 2 }, dilation = { 2, 1, 1 },
      groups = 2 }) end,
    "F.conv3d(x3, w3, b6, stride=(1, 2, 1), padding=(1, 0, 2), dilation=(2, 1, 1), groups=2)" },
  { "conv3d padding 'same' and padding_mode replicate",
    function() return I.x3:conv3d(I.w3, nil, { padding = "same", padding_mode = "replicate", groups = 2 }) end,
    "F.conv3d(F.pad(x3, (1, 1, 0, 1, 1, 1), mode='replicate'), w3, None, groups=2)" },
  { "conv_transpose1d with stride, padding, output_padding, groups and bias",
    function()
      return I.x1:conv_transpose1d(I.t1, I.b6, { stride = 3, padding = 1, output_padding = 2, groups = 2 })
    end,
    "F.conv_transpose1d(x1, t1, b6, stride=3, padding=1, output_padding=2, groups=2)" },
  { "conv_transpose1d with dilation",
    function() return I.x1:conv_transpose(I.t1, nil, { stride = 2, dilation = 3, output_padding = 2 }) end,
    "F.conv_transpose1d(x1, t1, None, stride=2, dilation=3, output_padding=2)" },
  { "conv_transpose2d with stride, padding, output_padding, dilation, groups",
    function()
      return I.x2:conv_transpose2d(I.t2, I.b6, { stride = { 2, 3 }, padding = { 1, 2 }, output_padding = { 1, 0 },
        dilation = { 1, 2 }, groups = 2 })
    end,
    "F.conv_transpose2d(x2, t2, b6, stride=(2, 3), padding=(1, 2), output_padding=(1, 0), dilation=(1, 2), groups=2)" },
  { "conv_transpose3d with stride and padding",
    function() return I.x3:conv_transpose3d(I.t3, nil, { stride = { 2, 1, 2 }, padding = { 1, 0, 1 }, groups = 2 }) end,
    "F.conv_transpose3d(x3, t3, None, stride=(2, 1, 2), padding=(1, 0, 1), groups=2)" },
  { "pad reflect, replicate and circular",
    function() return { I.x2:pad({ { 0, 0 }, { 0, 0 }, { 2, 3 }, { 1, 0 } }, "reflect"),
      I.x2:pad({ { 0, 0 }, { 0, 0 }, { 4, 1 }, { 0, 2 } }, "replicate"),
      I.x2:pad({ { 0, 0 }, { 0, 0 }, { 7, 2 }, { 3, 6 } }, "circular") } end,
    "[F.pad(x2, (1, 0, 2, 3), mode='reflect'), F.pad(x2, (0, 2, 4, 1), mode='replicate'), "
      .. "F.pad(x2, (3, 6, 7, 2), mode='circular')]" },
  { "gradient of conv1d (input, weight, bias)",
    function()
      return grads(function(x, w, b) return x:conv1d(w, b, { stride = 2, padding = 1, dilation = 2, groups = 2 }) end,
        "x1", "w1", "b6")
    end,
    "grads(lambda x, w, b: F.conv1d(x, w, b, stride=2, padding=1, dilation=2, groups=2), x1, w1, b6)" },
  { "gradient of conv1d with padding_mode reflect",
    function()
      return grads(function(x, w) return x:conv1d(w, nil, { padding = 2, padding_mode = "reflect", groups = 2 }) end,
        "x1", "w1")
    end,
    "grads(lambda x, w: F.conv1d(F.pad(x, (2, 2), mode='reflect'), w, None, groups=2), x1, w1)" },
  { "gradient of conv3d",
    function()
      return grads(function(x, w) return x:conv3d(w, nil, { stride = 2, padding = 1, groups = 2 }) end, "x3", "w3")
    end,
    "grads(lambda x, w: F.conv3d(x, w, None, stride=2, padding=1, groups=2), x3, w3)" },
  { "gradient of conv_transpose2d",
    function()
      return grads(function(x, w)
        return x:conv_transpose2d(w, nil, { stride = 2, padding = 1, output_padding = 1, groups = 2 })
      end, "x2", "t2")
    end,
    "grads(lambda x, w: F.conv_transpose2d(x, w, None, stride=2, padding=1, output_padding=1, groups=2), x2, t2)" },
  { "strided conv2d gradients by phases: stride 2, padding 1",
    function()
      return grads(function(x, w, b) return x:conv2d(w, b, { stride = 2, padding = 1 }) end,
        "x4", "w4", "b5")
    end,
    "grads(lambda x, w, b: F.conv2d(x, w, b, stride=2, padding=1), x4, w4, b5)" },
  { "strided conv2d gradients by phases: stride 3, asymmetric padding, rows past the last window",
    function()
      return grads(function(x, w, b) return x:conv2d(w, b, { stride = 3, padding = { { 2, 0 }, { 1, 2 } } }) end,
        "x4", "w4", "b5")
    end,
    "grads(lambda x, w, b: F.conv2d(F.pad(x, (1, 2, 2, 0)), w, b, stride=3), x4, w4, b5)" },
  { "strided conv2d gradients by phases: stride (2, 3), dilation 2",
    function()
      return grads(function(x, w, b) return x:conv2d(w, b, { stride = { 2, 3 }, dilation = 2, padding = 2 }) end,
        "x4", "w4", "b5")
    end,
    "grads(lambda x, w, b: F.conv2d(x, w, b, stride=(2, 3), dilation=2, padding=2), x4, w4, b5)" },
  { "strided conv2d gradients by phases: stride 2, dilation 3, a 4 x 5 kernel",
    function()
      return grads(function(x, w, b) return x:conv2d(w, b, { stride = 2, dilation = { 3, 1 }, padding = { 3, 2 } }) end,
        "x4", "w5", "b5")
    end,
    "grads(lambda x, w, b: F.conv2d(x, w, b, stride=2, dilation=(3, 1), padding=(3, 2)), x4, w5, b5)" },
  { "strided conv2d gradients by phases: stride 4 wider than the kernel",
    function()
      return grads(function(x, w, b) return x:conv2d(w, b, { stride = 4, padding = 1 }) end,
        "x4", "w4", "b5")
    end,
    "grads(lambda x, w, b: F.conv2d(x, w, b, stride=4, padding=1), x4, w4, b5)" },
  { "conv_transpose2d by phases (groups 1, stride 2, padding, output_padding)",
    function() return I.x2:conv_transpose2d(I.t5, I.b5, { stride = 2, padding = 1, output_padding = 1 }) end,
    "F.conv_transpose2d(x2, t5, b5, stride=2, padding=1, output_padding=1)" },
  { "conv_transpose2d by phases (stride (3, 2), dilation (1, 3), asymmetric kernel, output_padding past the stride)",
    function()
      return I.x2:conv_transpose2d(I.t6, nil, { stride = { 3, 2 }, dilation = { 1, 3 }, padding = { 2, 1 },
        output_padding = { 1, 2 } })
    end,
    "F.conv_transpose2d(x2, t6, None, stride=(3, 2), dilation=(1, 3), padding=(2, 1), output_padding=(1, 2))" },
  { "gradient of conv_transpose2d by phases",
    function()
      return grads(function(x, w, b) return x:conv_transpose2d(w, b, { stride = 2, padding = 2 }) end, "x2", "t5", "b5")
    end,
    "grads(lambda x, w, b: F.conv_transpose2d(x, w, b, stride=2, padding=2), x2, t5, b5)" },
  { "gradient of pad circular and replicate",
    function() return grads(function(x) return x:pad({ { 0, 0 }, { 0, 0 }, { 3, 1 }, { 2, 2 } }, "circular")
      :pad({ { 0, 0 }, { 0, 0 }, { 1, 2 }, { 0, 3 } }, "replicate") end, "x2") end,
    "grads(lambda x: F.pad(F.pad(x, (2, 2, 3, 1), mode='circular'), (0, 3, 1, 2), mode='replicate'), x2)" },
}

describe("Tensor.conv, conv_transpose and pad modes against PyTorch", function()
  local expected
  local function expected_of()
    expected = expected or cases_lib.reference(inputs, CASES, PRELUDE)
    return expected
  end
  cases_lib.define(it, CASES, expected_of, 2e-4)
end)

describe("conv2d through Tensor.conv", function()
  it("schedules the same kernels as conv2d, forward and backward", function()
    local function kernels(f)
      local x, w = input("x2"):requires_grad_(), input("w2"):requires_grad_()
      local y = f(x, w)
      local forward = #schedule.create({ y.uop }).kernels
      y:sum():backward()
      return forward, #schedule.create({ x.grad.uop, w.grad.uop }).kernels
    end
    local f1, b1 = kernels(function(x, w) return x:conv2d(w, nil, { padding = 1, stride = 2, groups = 2 }) end)
    local f2, b2 = kernels(function(x, w) return x:conv(w, nil, { padding = 1, stride = 2, groups = 2 }) end)
    assert.are.equal(f1, f2)
    assert.are.equal(b1, b2)
    local g1 = kernels(function(x, w) return x:conv2d(w:reshape(3, 4, 3, 2), nil, { padding = 1 }) end)
    local g2 = kernels(function(x, w) return x:conv(w:reshape(3, 4, 3, 2), nil, { padding = 1 }) end)
    assert.are.equal(g1, g2)
  end)
end)

describe("nn.Conv1d, nn.Conv3d and nn.ConvTranspose1d/2d/3d", function()
  it("hold torch-shaped weights and run Tensor.conv / conv_transpose with their options", function()
    local c1 = tcl.nn.Conv1d(4, 6, 3, { stride = 2, padding = 1, groups = 2, padding_mode = "reflect" })
    assert.are.same({ 6, 2, 3 }, c1.weight.shape)
    local x = input("x1")
    cases_lib.assert_close(c1(x):tolist(), x:conv1d(c1.weight, c1.bias, { stride = 2, padding = 1, groups = 2,
      padding_mode = "reflect" }):tolist(), 1e-6, "Conv1d")
    local c3 = tcl.nn.Conv3d(4, 6, { 3, 2, 3 }, { padding = "same", bias = false })
    assert.are.same({ 6, 4, 3, 2, 3 }, c3.weight.shape)
    assert.is_nil(c3.bias)
    assert.are.same({ 1, 6, 5, 6, 4 }, c3(input("x3")).shape)
    local t1 = tcl.nn.ConvTranspose1d(4, 6, 3, { stride = 3, output_padding = 1, groups = 2 })
    assert.are.same({ 4, 3, 3 }, t1.weight.shape)
    assert.are.same({ 2, 6, 28 }, t1(x).shape)
    local t2 = tcl.nn.ConvTranspose2d(4, 2, 3, { stride = 2, padding = 1 })
    assert.are.same({ 2, 2, 13, 11 }, t2(input("x2")).shape)
    local t3 = tcl.nn.ConvTranspose3d(4, 2, 2, { stride = 2 })
    cases_lib.assert_close(t3(input("x3")):tolist(), input("x3"):conv_transpose3d(t3.weight, t3.bias,
      { stride = 2 }):tolist(), 1e-6, "ConvTranspose3d")
    -- PyTorch's default init bound 1/sqrt(fan_in), fan_in = weight:size(2) * kernel volume
    local bound = 1 / math.sqrt(2 * 2 * 2 * 2)
    assert.is_true(t3.weight:abs():max():item() <= bound)
    assert.are.equal("ConvTranspose2d(4, 2, kernel_size=(3, 3), stride=(2, 2), padding=(1, 1))", tostring(t2))
  end)

  it("name the layer in their errors", function()
    assert.has_error(function() tcl.nn.Conv1d(4, 6, 3, { groups = 4 }) end,
      "nn.Conv1d: in_channels (4) and out_channels (6) must be divisible by groups (4)")
    assert.has_error(function() tcl.nn.Conv3d(2, 2, 3)(input("x2")) end,
      "nn.Conv3d: expected input of shape (N, 2, 3 spatial dims), got shape (2, 4, 7, 6)")
    assert.has_error(function() tcl.nn.Conv1d(4, 6, 3, { padding = "full" }) end,
      "nn.Conv1d: padding must be 'valid', 'same', an integer or a list of 1, got 'full'")
  end)
end)

describe("convolution errors", function()
  local function fails(f, message)
    local ok, err = pcall(f)
    assert.is_false(ok, message)
    assert.are.equal(message, tostring(err):gsub("^.-:%d+: ", ""))
  end
  it("name the function, the shapes and the arguments", function()
    local x, w = input("x1"), input("w1")
    fails(function() x:conv1d(w) end, "conv1d: input (2, 4, 9) and weight (6, 2, 3) do not match with 1 group(s): "
      .. "input channels must be 2 * 1 and 6 output channels must split into groups")
    fails(function() x:conv3d(w, nil, { groups = 2 }) end,
      "conv3d: needs a 5-d input (N, C, 3 spatial dims) and a 5-d weight, got (2, 4, 9) and (6, 2, 3)")
    fails(function() x:conv1d(w, nil, { groups = 2, padding_mode = "mirror" }) end,
      "conv1d: padding_mode must be 'zeros', 'reflect', 'replicate' or 'circular', got 'mirror'")
    fails(function() x:conv1d(w, nil, { groups = 2, padding = "same", stride = 2 }) end,
      "conv1d: padding 'same' needs stride 1, got stride (2,)")
    fails(function() x:conv(w:reshape(2, 3, 6)) end, "conv: input (2, 4, 9) and weight (2, 3, 6) do not match with 1 "
      .. "group(s): input channels must be 3 * 1 and 2 output channels must split into groups")
    fails(function() x:conv(input("b6")) end, "conv: needs a 3-d, 4-d or 5-d weight, got shape (6,)")
    fails(function() x:conv1d(w, input("b6"):reshape(2, 3), { groups = 2 }) end,
      "conv1d: bias has shape (2, 3), expected (6,) for weight (6, 2, 3)")
    fails(function() x:conv_transpose1d(input("t1"), nil, { stride = 2, output_padding = 2 }) end,
      "conv_transpose1d: output_padding (2,) must be smaller than the stride (2,) or the dilation (1,)")
    fails(function() x:conv_transpose2d(input("t1")) end,
      "conv_transpose2d: needs a 4-d input (N, C, 2 spatial dims) and a 4-d weight, got (2, 4, 9) and (4, 3, 3)")
    fails(function() x:conv_transpose1d(input("t1"), nil, { padding = 9 }) end,
      "conv_transpose1d: input (2, 4, 9) and weight (4, 3, 3) (stride (1,), padding 9 and 9 on dim 3) give an "
        .. "empty output")
    fails(function() x:pad({ { 0, 0 }, { 0, 0 }, { 9, 0 } }, "reflect") end,
      "pad: reflect padding of 9 and 0 on dim 3 of (2, 4, 9) needs both below the size 9")
    fails(function() x:pad({ { 0, 0 }, { 0, 0 }, { 1, 0 } }, "wrap") end,
      "pad: mode must be 'constant', 'reflect', 'replicate' or 'circular', got 'wrap'")
  end)
end)
