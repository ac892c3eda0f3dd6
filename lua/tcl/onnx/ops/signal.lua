-- tcl.onnx.ops.signal — ONNX's DFT, STFT, MelWeightMatrix and window generators (HannWindow,
-- HammingWindow, BlackmanWindow):
-- a window's size is read on the host (it fixes the output's shape); the window is built from Tensor ops
-- (arange, cos) in float64 and cast to output_datatype (default float32). periodic=1 (default)
-- divides by N, periodic=0 (symmetric) by N-1.
local Tensor = require "tcl.api.tensor"
local tensor_proto = require "tcl.onnx.tensor_proto"

local M = {}

local function cosine_window(coeffs)
  return function(ctx, node)
    local n = ctx:ints(node.inputs[1])[1]
    local periodic = (node.attrs.periodic or 1) ~= 0
    local dtype = "float32"
    if node.attrs.output_datatype then
      local why
      dtype, why = tensor_proto.dtype_of(node.attrs.output_datatype)
      if not dtype then ctx:fail("%s", why) end
    end
    local denom = periodic and n or (n - 1)
    local k = Tensor.arange(0, n, { dtype = "float64" }) * (2 * math.pi / denom)
    local w = (k * 0) + coeffs[1]
    for i = 2, #coeffs do
      w = w + (k * (i - 1)):cos() * coeffs[i]
    end
    return w:cast(dtype)
  end
end

M.HannWindow = cosine_window({ 0.5, -0.5 })
M.HammingWindow = cosine_window({ 25 / 46, -(1 - 25 / 46) })
M.BlackmanWindow = cosine_window({ 0.42, -0.5, 0.08 })

-- the DFT of x (real [..., 1] or complex [..., 2] last dim) along 1-based dim d as a matmul with
-- cos/sin matrices built from Tensor ops; n is the transform length (zero-padded / truncated),
-- onesided keeps n//2 + 1 bins; inverse conjugates and divides by n. Returns [..., 2].
local function dft(x, d, n, inverse, onesided)
  local rank = #x:size()
  local size = x:size()[d]
  if n > size then
    local pairs_ = {}
    for i = 1, rank do pairs_[i] = { 0, 0 } end
    pairs_[d] = { 0, n - size }
    x = x:pad(pairs_, 0)
  elseif n < size then
    x = x:narrow(d, 1, n)
  end
  -- move dim d to just before the complex dim: then [..., n] @ [n, k]
  local order = {}
  for i = 1, rank - 1 do if i ~= d then order[#order + 1] = i end end
  order[#order + 1] = d
  local back = {}
  for i, o in ipairs(order) do back[o] = i end
  x = x:cast("float64")
  local re = x:narrow(rank, 1, 1):squeeze(rank):permute(order)
  local im = x:size()[rank] == 2 and x:narrow(rank, 2, 1):squeeze(rank):permute(order) or nil
  local k = onesided and (n // 2 + 1) or n
  local angle = Tensor.arange(0, n, { dtype = "float64" }):reshape({ n, 1 })
    * Tensor.arange(0, k, { dtype = "float64" }):reshape({ 1, k }) * (2 * math.pi / n)
  local c, s = angle:cos(), angle:sin()
  local sign = inverse and 1 or -1
  local yr, yi = re:matmul(c), re:matmul(s) * sign
  if im then
    yr = yr - im:matmul(s) * sign
    yi = yi + im:matmul(c)
  end
  if inverse then yr, yi = yr / n, yi / n end
  local inv = {}
  for i = 1, rank - 1 do inv[i] = back[i] end
  return Tensor.stack({ yr:permute(inv), yi:permute(inv) }, rank)
end

function M.DFT(ctx, node)
  local x = node.inputs[1]
  local rank = #x:size()
  local axis
  if node.opset and node.opset >= 20 then
    axis = node.inputs[3] and ctx:ints(node.inputs[3])[1] or -2
  else
    axis = node.attrs.axis or 1
  end
  if axis < 0 then axis = axis + rank end
  local d = axis + 1
  local n = node.inputs[2] and ctx:ints(node.inputs[2])[1] or x:size()[d]
  local y = dft(x, d, n, (node.attrs.inverse or 0) ~= 0, (node.attrs.onesided or 0) ~= 0)
  return y:cast(tostring(x.dtype))
end

-- STFT(signal [batch, len, 1|2], frame_step, window?, frame_length?): frames (host-counted)
-- stacked, windowed, and transformed by dft; output [batch, frames, bins, 2].
function M.STFT(ctx, node)
  local x, window = node.inputs[1], node.inputs[3]
  local step = ctx:ints(node.inputs[2])[1]
  local length = node.inputs[4] and ctx:ints(node.inputs[4])[1] or window:size()[1]
  local total = x:size()[2]
  local frames = {}
  for start = 1, total - length + 1, step do frames[#frames + 1] = x:narrow(2, start, length) end
  local f = Tensor.stack(frames, 2)
  if window then f = f * window:cast(tostring(x.dtype)):reshape({ 1, 1, length, 1 }) end
  local y = dft(f, 3, length, false, (node.attrs.onesided or 1) ~= 0)
  return y:cast(tostring(x.dtype))
end

-- MelWeightMatrix: computed on the host (its inputs are scalars that fix the shape), following
-- ONNX's reference (mel step = range / (num_mel_bins + 2), integer bin edges, triangular
-- filters), as [dft_length//2 + 1, num_mel_bins].
function M.MelWeightMatrix(ctx, node)
  local i = node.inputs
  local mels, dft_length = ctx:ints(i[1])[1], ctx:ints(i[2])[1]
  local rate = ctx:numbers(i[3])[1]
  local lo_hz, hi_hz = ctx:numbers(i[4])[1], ctx:numbers(i[5])[1]
  local bins = dft_length // 2 + 1
  local lo_mel = 2595 * math.log(1 + lo_hz / 700, 10)
  local hi_mel = 2595 * math.log(1 + hi_hz / 700, 10)
  local step = (hi_mel - lo_mel) / (mels + 2)
  local edges = {}
  for k = 0, mels + 1 do
    local hz = 700 * (10 ^ ((k * step + lo_mel) / 2595) - 1)
    edges[k] = math.floor(((dft_length + 1) * hz) // rate)
  end
  local out = {}
  for j = 1, bins * mels do out[j] = 0.0 end
  local function set(row, col, v) if row < bins then out[row * mels + col + 1] = v end end
  for m = 0, mels - 1 do
    local l, c, h = edges[m], edges[m + 1], edges[m + 2]
    if c - l == 0 then set(c, m, 1.0) else
      for j = l, c do set(j, m, (j - l) / (c - l)) end
    end
    if h - c > 0 then for j = c, h - 1 do set(j, m, (h - j) / (h - c)) end end
  end
  local dtype = "float32"
  if node.attrs.output_datatype then
    local why
    dtype, why = tensor_proto.dtype_of(node.attrs.output_datatype)
    if not dtype then ctx:fail("%s", why) end
  end
  local bytes = string.pack(string.rep("<d", #out), table.unpack(out))
  return Tensor.from_bytes(bytes, "float64", { bins, mels }):cast(dtype)
end

return M
