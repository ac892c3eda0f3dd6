-- spec/nn/resample_spec.lua — interpolate (nearest, nearest-exact, linear, bilinear, trilinear,
-- bicubic, area; size or scale_factor; align_corners) and pixel_shuffle/unshuffle against PyTorch, gradients, errors.
local tcl = require "tcl"
local Tensor = tcl.Tensor
local cases_lib = require "spec.support.torch_cases"

local SHAPES = {
  x1 = { { 2, 3, 7 }, 0.37 }, x2 = { { 2, 3, 5, 6 }, 0.23 }, x3 = { { 1, 2, 3, 4, 5 }, 0.19 },
  s2 = { { 1, 8, 3, 2 }, 0.41 },
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

local function both(x, mode, size, factor, align)
  return { x:interpolate({ size = size, mode = mode, align_corners = align }),
    x:interpolate({ scale_factor = factor, mode = mode, align_corners = align }) }
end
local function torch_both(x, mode, size, factor, align)
  local a = align == nil and "" or (", align_corners=" .. (align and "True" or "False"))
  return string.format("[F.interpolate(%s, size=%s, mode='%s'%s), F.interpolate(%s, scale_factor=%s, mode='%s'%s)]",
    x, size, mode, a, x, factor, mode, a)
end

local CASES = {
  { "nearest 1-d, 2-d, 3-d", function()
      return { both(I.x1, "nearest", 11, 0.6), both(I.x2, "nearest", { 7, 4 }, { 1.5, 0.5 }),
        both(I.x3, "nearest", { 5, 3, 8 }, 1.7) }
    end,
    "[" .. torch_both("x1", "nearest", "11", "0.6") .. ", " .. torch_both("x2", "nearest", "(7, 4)", "(1.5, 0.5)")
      .. ", " .. torch_both("x3", "nearest", "(5, 3, 8)", "1.7") .. "]" },
  { "nearest-exact", function() return both(I.x2, "nearest-exact", { 9, 4 }, 1.4) end,
    torch_both("x2", "nearest-exact", "(9, 4)", "1.4") },
  { "linear", function() return { both(I.x1, "linear", 12, 1.6), both(I.x1, "linear", 4, 0.7, true) } end,
    "[" .. torch_both("x1", "linear", "12", "1.6") .. ", " .. torch_both("x1", "linear", "4", "0.7", true) .. "]" },
  { "bilinear", function()
      return { both(I.x2, "bilinear", { 8, 3 }, { 2, 0.6 }), both(I.x2, "bilinear", { 8, 3 }, 1.3, true) }
    end,
    "[" .. torch_both("x2", "bilinear", "(8, 3)", "(2, 0.6)") .. ", "
      .. torch_both("x2", "bilinear", "(8, 3)", "1.3", true) .. "]" },
  { "trilinear", function()
      return { both(I.x3, "trilinear", { 4, 7, 2 }, 1.5), both(I.x3, "trilinear", { 4, 7, 2 }, 0.8, true) }
    end,
    "[" .. torch_both("x3", "trilinear", "(4, 7, 2)", "1.5") .. ", "
      .. torch_both("x3", "trilinear", "(4, 7, 2)", "0.8", true) .. "]" },
  { "bicubic", function()
      return { both(I.x2, "bicubic", { 9, 4 }, { 1.8, 0.7 }), both(I.x2, "bicubic", { 9, 4 }, 2, true) }
    end,
    "[" .. torch_both("x2", "bicubic", "(9, 4)", "(1.8, 0.7)") .. ", "
      .. torch_both("x2", "bicubic", "(9, 4)", "2", true) .. "]" },
  { "area", function() return I.x2:interpolate({ size = { 3, 4 }, mode = "area" }) end,
    "F.interpolate(x2, size=(3, 4), mode='area')" },
  { "pixel_shuffle and pixel_unshuffle", function()
      return { I.s2:pixel_shuffle(2), I.x2:pixel_unshuffle(1), I.s2:reshape(2, 4, 3, 2):pixel_unshuffle(1),
        I.x2:reshape(1, 3, 10, 6):pixel_unshuffle(2), I.s2:pixel_shuffle(2):pixel_unshuffle(2) }
    end,
    "[F.pixel_shuffle(s2, 2), x2, s2.reshape(2, 4, 3, 2), F.pixel_unshuffle(x2.reshape(1, 3, 10, 6), 2), s2]" },
  { "gradients of bilinear, bicubic and nearest", function()
      return { grads(function(x) return x:interpolate({ size = { 8, 3 }, mode = "bilinear" }) end, "x2"),
        grads(function(x) return x:interpolate({ scale_factor = 1.5, mode = "bicubic", align_corners = true }) end,
          "x2"),
        grads(function(x) return x:interpolate({ size = 11, mode = "nearest" }) end, "x1") }
    end,
    "[grads(lambda x: F.interpolate(x, size=(8, 3), mode='bilinear'), x2), "
      .. "grads(lambda x: F.interpolate(x, scale_factor=1.5, mode='bicubic', align_corners=True), x2), "
      .. "grads(lambda x: F.interpolate(x, size=11, mode='nearest'), x1)]" },
  { "gradient of pixel_shuffle", function() return grads(function(x) return x:pixel_shuffle(2) end, "s2") end,
    "grads(lambda x: F.pixel_shuffle(x, 2), s2)" },
}

describe("interpolate and pixel_shuffle against PyTorch", function()
  local expected
  cases_lib.define(it, CASES, function()
    expected = expected or cases_lib.reference(I, CASES, PRELUDE)
    return expected
  end, 1e-5)
end)

describe("resampling errors", function()
  local function fails(f, message)
    local ok, err = pcall(f)
    assert.is_false(ok, message)
    assert.are.equal(message, tostring(err):gsub("^.-:%d+: ", ""))
  end
  it("name the function and the arguments", function()
    fails(function() I.x1:interpolate({ size = 3, mode = "bilinear" }) end,
      "interpolate: mode 'bilinear' needs a 4-d input (N, C, spatial...), got shape (2, 3, 7)")
    fails(function() I.x1:interpolate({ size = 3, scale_factor = 2 }) end,
      "interpolate: needs exactly one of size and scale_factor")
    fails(function() I.x1:interpolate({ size = 3, mode = "cubic" }) end,
      "interpolate: mode must be nearest, nearest-exact, linear, bilinear, trilinear, bicubic or area, got 'cubic'")
    fails(function() I.x1:interpolate({ size = 3, align_corners = true }) end,
      "interpolate: align_corners only applies to the linear and cubic modes, not 'nearest'")
    fails(function() I.x1:interpolate({ scale_factor = 0.1 }) end,
      "interpolate: scale_factor 0.1 makes dim 3 of (2, 3, 7) empty")
    fails(function() I.x2:pixel_shuffle(2) end,
      "pixel_shuffle: needs (..., C * 4, H, W) for upscale_factor 2, got shape (2, 3, 5, 6)")
    fails(function() I.x2:pixel_unshuffle(2) end,
      "pixel_unshuffle: needs (..., C, H, W) with H and W divisible by 2, got shape (2, 3, 5, 6)")
  end)
end)
