-- spec/io/onnx_signal_quant_spec.lua — tcl.onnx's signal and quantization handlers called on
-- hand-made nodes, beyond the conformance suite's cases: DFT (real and complex input, onesided,
-- inverse, another axis, dft_length padding and truncation, opset 17's attribute and opset 20's
-- input axis), STFT, the Hann/Hamming/Blackman windows (periodic and symmetric, output types)
-- against torch; QuantizeLinear / DequantizeLinear (per tensor and per axis, int8 and uint8, ties
-- to even, saturation, the scale's type), DynamicQuantizeLinear, MatMulInteger and QLinearMatMul
-- with zero points, ConvInteger and QLinearConv with per-channel weight zero points, against
-- naive Lua loops.
local tcl = require "tcl"
local onnx_nodes = require "spec.support.onnx_nodes"
local torch_ref = require "spec.support.torch_ref"
local Tensor = tcl.Tensor

local run, check, i64, f32 = onnx_nodes.run, onnx_nodes.check, onnx_nodes.i64, onnx_nodes.f32
local L = torch_ref.literal

local function typed(values, dtype) return Tensor(values, { dtype = dtype }) end
-- v rounded to float32 (ONNX computes these in float32: 2 / (4 / 255) is 127.49999 there)
local function f32r(v) return (string.unpack("f", string.pack("f", v))) end

describe("tcl.onnx signal handlers", function()
  it("DFT, STFT and the windows match torch", function()
    if not torch_ref.python() then pending("torch is not available") return end
    local signal = {}
    for i = 1, 8 do signal[i] = math.sin(i * 0.9) + 0.25 * i end
    local complex = {}
    for i = 1, 12 do complex[i] = math.cos(i * 1.3) end
    local long = {}
    for i = 1, 16 do long[i] = math.sin(i * 0.6) * (1 + i / 16) end
    local ref = torch_ref.run({
      "torch.set_default_dtype(torch.float64)",
      "x = torch.tensor(" .. L(signal) .. ")",
      "c = torch.tensor(" .. L(complex) .. ").reshape(6, 2)",
      "z = torch.complex(c[:, 0], c[:, 1])",
      "s = torch.tensor(" .. L(long) .. ")",
      "def ri(t): return torch.stack([t.real, t.imag], -1)",
      "out['full'] = ri(torch.fft.fft(x))",
      "out['onesided'] = ri(torch.fft.rfft(x))",
      "out['complex'] = ri(torch.fft.fft(z))",
      "out['inverse'] = ri(torch.fft.ifft(z))",
      "out['padded'] = ri(torch.fft.fft(x, n=10))",
      "out['truncated'] = ri(torch.fft.fft(x, n=5))",
      "m = torch.stack([x, 2 * x, x * x])", -- (3, 8): the DFT along dim 1 (0-based), per row
      "out['axis2'] = ri(torch.fft.fft(m, dim=1))",
      "w = torch.hann_window(8, periodic=True)",
      "frames = s.unfold(0, 8, 4) * w", -- (3 frames, 8)
      "out['stft'] = ri(torch.fft.rfft(frames, dim=-1))",
      "out['hann_p'] = torch.hann_window(10, periodic=True)",
      "out['hann_s'] = torch.hann_window(10, periodic=False)",
      "out['hamming_p'] = torch.hamming_window(10, periodic=True, alpha=25/46, beta=21/46)",
      "out['blackman_s'] = torch.blackman_window(7, periodic=False)",
    })
    local x = f32(signal):reshape({ 1, 8, 1 })
    check(run("DFT", { x }, { axis = 1 }, { opset = 17 }), "float32", { 1, 8, 2 }, ref.full, 1e-5)
    check(run("DFT", { x }, { axis = 1, onesided = 1 }, { opset = 17 }), "float32", { 1, 5, 2 }, ref.onesided, 1e-5)
    local z = f32(complex):reshape({ 1, 6, 2 })
    check(run("DFT", { z }, { axis = 1 }, { opset = 17 }), "float32", { 1, 6, 2 }, ref.complex, 1e-5)
    check(run("DFT", { z }, { axis = 1, inverse = 1 }, { opset = 17 }), "float32", { 1, 6, 2 }, ref.inverse, 1e-5)
    check(run("DFT", { x, i64({ 10 }) }, { axis = 1 }, { opset = 17 }), "float32", { 1, 10, 2 }, ref.padded, 1e-5)
    check(run("DFT", { x, i64({ 5 }) }, { axis = 1 }, { opset = 17 }), "float32", { 1, 5, 2 }, ref.truncated, 1e-5)
    -- opset 20: the axis is an input (default -2, the signal's last dim before the complex one)
    check(run("DFT", { x }, {}, { opset = 20 }), "float32", { 1, 8, 2 }, ref.full, 1e-5)
    local rows = {}
    for i, v in ipairs(signal) do rows[i], rows[8 + i], rows[16 + i] = v, 2 * v, v * v end
    local m = f32(rows):reshape({ 1, 3, 8, 1 })
    check(run("DFT", { m }, { axis = 2 }, { opset = 17 }), "float32", { 1, 3, 8, 2 }, ref.axis2, 1e-4)
    check(run("DFT", { m, nil, i64({ -2 }), n = 3 }, {}, { opset = 20 }), "float32", { 1, 3, 8, 2 }, ref.axis2, 1e-4)
    local window = run("HannWindow", { i64({ 8 }) }, {})
    local stft = run("STFT", { f32(long):reshape({ 1, 16, 1 }), i64({ 4 }), window }, {})
    check(stft, "float32", { 1, 3, 5, 2 }, ref.stft, 1e-5)
    check(run("HannWindow", { i64({ 10 }) }, {}), "float32", { 10 }, ref.hann_p, 1e-6)
    check(run("HannWindow", { i64({ 10 }) }, { periodic = 0 }), "float32", { 10 }, ref.hann_s, 1e-6)
    check(run("HammingWindow", { i64({ 10 }) }, {}), "float32", { 10 }, ref.hamming_p, 1e-6)
    -- output_datatype 11: float64
    check(run("BlackmanWindow", { i64({ 7 }) }, { periodic = 0, output_datatype = 11 }), "float64", { 7 },
      ref.blackman_s, 1e-12)
  end)
end)

describe("tcl.onnx quantization handlers", function()
  it("QuantizeLinear rounds half to even, adds the zero point and saturates, per tensor or per axis", function()
    local x = f32({ -300, -2.5, -1.5, -0.5, 0.5, 1.5, 2.5, 3.49, 254.6, 400 })
    -- uint8 without a zero point: [0, 255]
    check(run("QuantizeLinear", { x, f32({ 1 }):reshape({}) }), "uint8", { 10 },
      { 0, 0, 0, 0, 0, 2, 2, 3, 255, 255 })
    -- int8 with zero point 3, scale 0.5: round(x / 0.5) + 3, in [-128, 127]
    local want = {}
    for i, v in ipairs({ -300, -2.5, -1.5, -0.5, 0.5, 1.5, 2.5, 3.49, 254.6, 400 }) do
      local q = v / 0.5
      local r = math.floor(q + 0.5)
      if q + 0.5 == r and r % 2 == 1 then r = r - 1 end -- ties to even
      want[i] = math.max(-128, math.min(127, r + 3))
    end
    check(run("QuantizeLinear", { x, f32({ 0.5 }):reshape({}), typed({ 3 }, "int8"):reshape({}) }), "int8", { 10 },
      want)
    -- per axis 1 of (2, 3): scales 1, 2, 4 and zero points 0, 10, 100 (uint8)
    local y = f32({ 4, 4, 4, 9, 9, 9 }):reshape({ 2, 3 })
    local q = run("QuantizeLinear", { y, f32({ 1, 2, 4 }), typed({ 0, 10, 100 }, "uint8") }, { axis = 1 })
    check(q, "uint8", { 2, 3 }, { { 4, 12, 101 }, { 9, 14, 102 } }) -- 9/4 = 2.25 -> 2; 9/2 = 4.5 -> 4
    -- axis 0 (scales per row), and a negative axis
    q = run("QuantizeLinear", { y, f32({ 1, 3 }), typed({ 0, 0 }, "uint8") }, { axis = 0 })
    check(q, "uint8", { 2, 3 }, { { 4, 4, 4 }, { 3, 3, 3 } })
    q = run("QuantizeLinear", { y, f32({ 1, 2, 4 }), typed({ 0, 10, 100 }, "uint8") }, { axis = -1 })
    check(q, "uint8", { 2, 3 }, { { 4, 12, 101 }, { 9, 14, 102 } })
  end)

  it("DequantizeLinear subtracts the zero point and scales, per tensor or per axis, in the scale's type", function()
    local x = typed({ -128, -1, 0, 5, 127, 20 }, "int8"):reshape({ 2, 3 })
    check(run("DequantizeLinear", { x, f32({ 0.5 }):reshape({}), typed({ -1 }, "int8"):reshape({}) }), "float32",
      { 2, 3 }, { { -63.5, 0, 0.5 }, { 3, 64, 10.5 } })
    check(run("DequantizeLinear", { x, f32({ 1, 0.25, 2 }), typed({ 0, 4, -2 }, "int8") }, { axis = 1 }), "float32",
      { 2, 3 }, { { -128, -1.25, 4 }, { 5, 30.75, 44 } })
    local h = run("DequantizeLinear", { x, typed({ 0.5 }, "float16"):reshape({}) })
    check(h, "float16", { 2, 3 }, { { -64, -0.5, 0 }, { 2.5, 63.5, 10 } })
    -- int32 input (a bias), no zero point
    check(run("DequantizeLinear", { typed({ -70000, 3 }, "int32"), f32({ 0.01 }):reshape({}) }), "float32", { 2 },
      { -700.0, 0.03 }, 1e-6)
  end)

  it("DynamicQuantizeLinear: scale from the range including 0, zero point rounded and saturated", function()
    local values = { -1.0, 0.5, 2.0, 3.0 }
    local y, scale, zp = run("DynamicQuantizeLinear", { f32(values) }, {}, { noutputs = 3 })
    local lo, hi = -1.0, 3.0
    local s = f32r((hi - lo) / 255)
    local z = math.floor(f32r(-lo / s) + 0.5)
    local want = {}
    for i, v in ipairs(values) do
      local r = f32r(v / s)
      local rounded = math.floor(r + 0.5)
      if r + 0.5 == rounded and rounded % 2 == 1 then rounded = rounded - 1 end
      want[i] = math.max(0, math.min(255, rounded + z))
    end
    check(scale, "float32", {}, { s }, 1e-6)
    check(zp, "uint8", {}, { z })
    check(y, "uint8", { 4 }, want)
    -- all positive: the range still includes 0, the zero point is 0
    local _, s2, z2 = run("DynamicQuantizeLinear", { f32({ 1.0, 2.0 }) }, {}, { noutputs = 3 })
    check(s2, "float32", {}, { 2 / 255 }, 1e-6)
    check(z2, "uint8", {}, { 0 })
  end)

  -- (A - a_zp) @ (B - b_zp) by naive loops; a_zp per row or scalar, b_zp per column or scalar.
  local function int_matmul(a, b, rows, k, cols, azp, bzp)
    local out = {}
    for r = 1, rows do
      out[r] = {}
      for c = 1, cols do
        local s = 0
        for j = 1, k do
          s = s + (a[(r - 1) * k + j] - (azp[r] or azp[1])) * (b[(j - 1) * cols + c] - (bzp[c] or bzp[1]))
        end
        out[r][c] = s
      end
    end
    return out
  end

  it("MatMulInteger and QLinearMatMul subtract per-row and per-column zero points", function()
    local a = { 200, 3, 17, 0, 255, 128 } -- (2, 3) uint8
    local b = { -128, 5, 7, 127, -3, 0 } -- (3, 2) int8
    local want = int_matmul(a, b, 2, 3, 2, { 10, 200 }, { -1, 4 })
    check(run("MatMulInteger", { typed(a, "uint8"):reshape({ 2, 3 }), typed(b, "int8"):reshape({ 3, 2 }),
      typed({ 10, 200 }, "uint8"), typed({ -1, 4 }, "int8") }), "int32", { 2, 2 }, want)
    check(run("MatMulInteger", { typed(a, "uint8"):reshape({ 2, 3 }), typed(b, "int8"):reshape({ 3, 2 }) }), "int32",
      { 2, 2 }, int_matmul(a, b, 2, 3, 2, { 0 }, { 0 }))
    -- QLinearMatMul: scales 0.1 and 0.02, output scale 0.5 and zero point 100 (uint8)
    local exact = int_matmul(a, { 1, 2, 3, 4, 5, 6 }, 2, 3, 2, { 128 }, { 3 })
    local q = {}
    for r = 1, 2 do
      q[r] = {}
      for c = 1, 2 do
        local v = exact[r][c] * 0.1 * 0.02 / 0.5
        local rounded = math.floor(v + 0.5)
        if v + 0.5 == rounded and rounded % 2 == 1 then rounded = rounded - 1 end
        q[r][c] = math.max(0, math.min(255, rounded + 100))
      end
    end
    local out = run("QLinearMatMul", { typed(a, "uint8"):reshape({ 2, 3 }), f32({ 0.1 }):reshape({}),
      typed({ 128 }, "uint8"):reshape({}), typed({ 1, 2, 3, 4, 5, 6 }, "uint8"):reshape({ 3, 2 }),
      f32({ 0.02 }):reshape({}), typed({ 3 }, "uint8"):reshape({}), f32({ 0.5 }):reshape({}),
      typed({ 100 }, "uint8"):reshape({}) })
    check(out, "uint8", { 2, 2 }, q)
  end)

  -- A valid 2-d convolution of one (H, W) image with (M, kh, kw) filters, integer arithmetic,
  -- x_zp scalar and w_zp per output channel.
  local function int_conv(x, h, w, filters, m, kh, kw, xzp, wzp)
    local out = {}
    for o = 1, m do
      out[o] = {}
      for i = 1, h - kh + 1 do
        out[o][i] = {}
        for j = 1, w - kw + 1 do
          local s = 0
          for a = 1, kh do
            for b = 1, kw do
              local xv = x[(i + a - 2) * w + (j + b - 1)] - xzp
              local wv = filters[(o - 1) * kh * kw + (a - 1) * kw + b] - wzp[o]
              s = s + xv * wv
            end
          end
          out[o][i][j] = s
        end
      end
    end
    return out
  end

  it("ConvInteger and QLinearConv subtract the input's and each output channel's zero points", function()
    local x = { 1, 2, 3, 250, 5, 6, 7, 8, 9, 10, 11, 12 } -- (1, 1, 3, 4) uint8
    local w = { 1, -2, 3, 4, 5, 6, -7, 8 } -- (2, 1, 2, 2) int8
    local want = int_conv(x, 3, 4, w, 2, 2, 2, 5, { 1, -2 })
    local xt, wt = typed(x, "uint8"):reshape({ 1, 1, 3, 4 }), typed(w, "int8"):reshape({ 2, 1, 2, 2 })
    check(run("ConvInteger", { xt, wt, typed({ 5 }, "uint8"):reshape({}), typed({ 1, -2 }, "int8") }, {}), "int32",
      { 1, 2, 2, 3 }, { want })
    -- QLinearConv: x scale 0.5, w scales per channel 0.1 and 0.2, y scale 0.25 and zero point 10
    local q = {}
    for o = 1, 2 do
      q[o] = {}
      for i = 1, 2 do
        q[o][i] = {}
        for j = 1, 3 do
          local v = want[o][i][j] * 0.5 * (o == 1 and 0.1 or 0.2) / 0.25
          local rounded = math.floor(v + 0.5)
          if v + 0.5 == rounded and rounded % 2 == 1 then rounded = rounded - 1 end
          q[o][i][j] = math.max(-128, math.min(127, rounded + 10))
        end
      end
    end
    local out = run("QLinearConv", { xt, f32({ 0.5 }):reshape({}), typed({ 5 }, "uint8"):reshape({}), wt,
      f32({ 0.1, 0.2 }), typed({ 1, -2 }, "int8"), f32({ 0.25 }):reshape({}), typed({ 10 }, "int8"):reshape({}) }, {})
    check(out, "int8", { 1, 2, 2, 3 }, { q })
  end)
end)
